//! Every optimizer of torch.optim predicted (issue 45): `foreach=True`, and `fused=True` where
//! the class takes it, whose kernels have no Meta kernel in PyTorch (SGD's, Adagrad's, and Adam's
//! with a tensor `lr`): `predict/compat.py` gives them PyTorch's own memory behaviour, in place
//! and allocating nothing.

use crate::common::{PhaseStatus, PredictionStatus, Run, fixture, python_with};

#[test]
#[ignore = "needs torch"]
fn predict_every_torch_optim_optimizer_foreach_and_fused() {
    let python = python_with(&["torch"]);
    let dir = tempfile::tempdir().unwrap();
    let run = Run::predict()
        .output(dir.path().join("optimizers.json"))
        .args(["--python", &python, "--card", "H100 80GB", "--script"])
        .arg(fixture("scripts/predict/every_optimizer.py"))
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(0), "{said}");
    let doc = run.prediction();
    assert_eq!(doc.status, PredictionStatus::Complete, "{said}");
    let phase = |name: &str| {
        doc.phases
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no phase {name}: {said}"))
    };
    // The script's own output is forwarded with the prediction's progress.
    let ran: Vec<(String, String)> = said
        .lines()
        .filter_map(|l| l.strip_prefix("ran "))
        .map(|l| {
            let (n, m) = l.split_once(' ').unwrap();
            (n.to_string(), m.to_string())
        })
        .collect();
    // Only the class's own refusal of an option may skip it.
    for skipped in said.lines().filter(|l| l.starts_with("skipped ")) {
        assert!(
            skipped.contains("not an option")
                || skipped.contains("support")
                || skipped.contains("not asked"),
            "{skipped}"
        );
    }
    for name in [
        "SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Adadelta", "Adamax", "NAdam", "RAdam",
        "Rprop", "ASGD", "LBFGS",
    ] {
        assert!(
            ran.iter().any(|(n, _)| n == name),
            "{name} did not run: {said}"
        );
    }
    for m in ["foreach", "fused"] {
        for name in ["SGD", "Adam", "AdamW"] {
            assert!(
                ran.contains(&(name.to_string(), m.to_string())),
                "{name} {m}: {said}"
            );
        }
    }
    for (name, mode) in &ran {
        for step in [1, 2] {
            let p = phase(&format!("{name} {mode} step {step}"));
            assert_eq!(p.status, PhaseStatus::Predicted, "{name} {mode}");
            assert!(p.peak_allocated_bytes.is_some() && p.end_allocated_bytes.is_some());
        }
    }
    // A fused kernel updates in place and allocates nothing: the second step (states made)
    // holds no temporary; the foreach implementation's second step does.
    for (name, mode) in ran.iter().filter(|(_, m)| m == "fused") {
        let p = phase(&format!("{name} {mode} step 2"));
        assert_eq!(
            p.peak_allocated_bytes, p.start_allocated_bytes,
            "{name} fused"
        );
    }
    let foreach = phase("Adam foreach step 2");
    assert!(foreach.peak_allocated_bytes > foreach.start_allocated_bytes);
    // Adam's first fused step makes exp_avg and exp_avg_sq (twice the parameters' bytes) and a
    // device `step` per parameter (512-byte blocks).
    let parameters: u64 = (1024 * 1024 + 1024 + 1024 * 10 + 10) * 4;
    let first = phase("Adam fused step 1");
    let made = first.end_allocated_bytes.unwrap() - first.start_allocated_bytes.unwrap();
    assert!(
        (2 * parameters..2 * parameters + 4 * 512 + 4096).contains(&made),
        "{made}"
    );
}

/// SparseAdam on an `Embedding(sparse=True)`: its states predicted (the newest torch: the sparse
/// ops have fake kernels there), and the sparse tensors said.
#[test]
#[ignore = "needs torch 2.7 or newer"]
fn sparse_adam_on_a_sparse_embedding_gets_its_states() {
    let python = python_with(&["torch"]);
    let dir = tempfile::tempdir().unwrap();
    let run = Run::predict()
        .output(dir.path().join("sparse.json"))
        .args(["--python", &python, "--card", "H100 80GB", "--script"])
        .arg(fixture("scripts/predict/every_optimizer.py"))
        .args(["--", "--only", "SparseAdam"])
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(0), "{said}");
    let doc = run.prediction();
    let first = doc
        .phases
        .iter()
        .find(|p| p.name == "SparseAdam default step 1")
        .unwrap_or_else(|| panic!("{said}"));
    // exp_avg and exp_avg_sq of the 4096 x 256 float32 embedding.
    let made = first.end_allocated_bytes.unwrap() - first.start_allocated_bytes.unwrap();
    assert_eq!(made, 2 * 4096 * 256 * 4);
    assert!(
        doc.notes.iter().any(|n| n.contains("sparse COO tensor")),
        "{:?}",
        doc.notes
    );
}

//! A user's own `DistributedDataParallel` under `predict --world-size N` (issue 44, item 2):
//! DDP's parameter check reads the values identical ranks give (predict/collectives.py), the
//! wrapper lays out PyTorch's gradient buckets (predict/ddp.py), and `torch.cuda.device_count()`
//! answers the GPUs a rank sees.

use crate::common::{
    PhaseStatus, PredictedPhase, PredictionDoc, PredictionStatus, Run, fixture, python_with,
};

#[test]
#[ignore = "needs torch"]
fn predict_runs_a_users_ddp_over_4_ranks_with_its_buckets() {
    let python = python_with(&["torch"]);
    let dir = tempfile::tempdir().unwrap();
    let run = Run::predict()
        .args(["--python", &python, "--card", "H200", "--world-size", "4"])
        .output(dir.path().join("ddp.json"))
        .arg("--script")
        .arg(fixture("scripts/distributed/ddp_train.py"))
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(0), "{said}");
    assert!(said.contains("COUNTER device_count 4"), "{said}");
    assert!(said.contains("COUNTER world_size 4"), "{said}");
    let doc = run.prediction();
    assert_eq!(doc.status, PredictionStatus::Complete, "{said}");
    let backward = doc
        .phases
        .iter()
        .find(|p| p.name == "backward #1")
        .unwrap_or_else(|| panic!("{said}"));
    assert_eq!(backward.status, PhaseStatus::Predicted);
    // Two Linear(4096, 4096): 134,250,496 bytes of parameters; DDP's buckets hold as many
    // (communication), the gradients as many again at the backward's end.
    let params: u64 = 2 * (4096 * 4096 * 4 + 4096 * 4);
    let at_peak = &backward.at_peak.as_ref().unwrap().by_category;
    assert_eq!(at_peak["parameter"], params);
    assert_eq!(at_peak["communication"], params, "{at_peak:?}");
    assert!(
        doc.notes
            .iter()
            .any(|n| n.contains("DistributedDataParallel (the script's, 4 ranks)")),
        "{:?}",
        doc.notes
    );
}

/// The small Llama both DDP predictions train: its config folder and its parameter count,
/// computed from the config as transformers lays a Llama out (untied head, no biases).
fn small_llama() -> (String, u64) {
    let folder = fixture("models/llama-small-distributed");
    let text = std::fs::read_to_string(folder.join("config.json")).unwrap();
    let config: serde_json::Value = serde_json::from_str(&text).unwrap();
    let get = |key: &str| config[key].as_u64().unwrap();
    let (hidden, vocab, layers) = (
        get("hidden_size"),
        get("vocab_size"),
        get("num_hidden_layers"),
    );
    let kv = hidden / get("num_attention_heads") * get("num_key_value_heads");
    let per_layer =
        2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * get("intermediate_size") + 2 * hidden;
    let params = 2 * vocab * hidden + layers * per_layer + hidden;
    (folder.display().to_string(), params)
}

/// `predict --world-size 4 --script ddp_llama.py -- FOLDER 2 64 [view]`.
fn predict_users_ddp(
    python: &str,
    dir: &std::path::Path,
    name: &str,
    extra: &[&str],
) -> PredictionDoc {
    let (folder, _) = small_llama();
    let run = Run::predict()
        .args(["--python", python, "--card", "H200", "--world-size", "4"])
        .output(dir.join(format!("{name}.json")))
        .arg("--script")
        .arg(fixture("scripts/distributed/ddp_llama.py"))
        .args(["--", &folder, "2", "64"])
        .args(extra)
        .finish();
    assert_eq!(run.code(), Some(0), "{}{}", run.stdout(), run.stderr());
    let doc = run.prediction();
    assert_eq!(doc.status, PredictionStatus::Complete);
    doc
}

fn phases<'a>(doc: &'a PredictionDoc, prefix: &str) -> Vec<&'a PredictedPhase> {
    doc.phases
        .iter()
        .filter(|p| p.name == prefix || p.name.starts_with(&format!("{prefix} #")))
        .collect()
}

#[test]
#[ignore = "needs torch and transformers"]
fn predict_users_ddp_script_within_1_percent_of_the_built_in_shard_ddp() {
    let python = python_with(&["torch", "transformers"]);
    let dir = tempfile::tempdir().unwrap();
    let (folder, _) = small_llama();
    let built_in = Run::predict()
        .args(["--python", &python, "--card", "H200", "--world-size", "4"])
        .args([
            "--workload",
            "causal-lm",
            "--model",
            &folder,
            "--task",
            "train",
        ])
        .args(["--batch", "2", "--context", "64", "--shard", "ddp"])
        .output(dir.path().join("built-in.json"))
        .finish();
    assert_eq!(built_in.code(), Some(0), "{}", built_in.stderr());
    let built_in = built_in.prediction();
    let script = predict_users_ddp(&python, dir.path(), "script", &[]);
    for (ours, theirs) in [
        ("forward", "DistributedDataParallel.forward"),
        ("backward", "backward"),
        ("optimizer_step", "AdamW.step"),
    ] {
        let (ours, theirs) = (phases(&built_in, ours), phases(&script, theirs));
        assert_eq!(ours.len(), 2, "two steps of the built-in");
        assert_eq!(theirs.len(), 2, "two steps of the script");
        for (o, t) in ours.iter().zip(&theirs) {
            assert_eq!(t.status, PhaseStatus::Predicted, "{}", t.name);
            for (what, a, b) in [
                (
                    "peak allocated",
                    o.peak_allocated_bytes,
                    t.peak_allocated_bytes,
                ),
                ("peak tensors", o.peak_tensor_bytes, t.peak_tensor_bytes),
            ] {
                let (a, b) = (a.unwrap() as f64, b.unwrap() as f64);
                assert!(
                    (a - b).abs() <= 0.01 * a,
                    "{} vs {}: {what} {a} (built-in) vs {b} (script)",
                    o.name,
                    t.name
                );
            }
        }
    }
}

#[test]
#[ignore = "needs torch and transformers"]
fn predict_users_ddp_gradient_as_bucket_view_holds_no_separate_gradients() {
    let python = python_with(&["torch", "transformers"]);
    let dir = tempfile::tempdir().unwrap();
    let (_, params) = small_llama();
    let bytes = params * 4; // float32
    let copies = predict_users_ddp(&python, dir.path(), "copies", &[]);
    let views = predict_users_ddp(&python, dir.path(), "views", &["view"]);
    for (c, v) in phases(&copies, "backward")
        .iter()
        .zip(phases(&views, "backward"))
    {
        // The buckets hold one copy of every gradient either way.
        let at_peak = |p: &PredictedPhase| p.at_peak.as_ref().unwrap().by_category.clone();
        assert_eq!(at_peak(c)["communication"], bytes, "{}", c.name);
        assert_eq!(at_peak(v)["communication"], bytes, "{}", v.name);
        // As separate tensors, the gradients are one more copy at the backward's end; as views
        // of the buckets, none.
        assert_eq!(at_peak(c)["gradient"], bytes, "{}", c.name);
        let (c_end, v_end) = (
            c.end_allocated_bytes.unwrap(),
            v.end_allocated_bytes.unwrap(),
        );
        assert_eq!(c_end - v_end, bytes, "{}: {c_end} vs {v_end}", c.name);
    }
    assert!(
        views
            .notes
            .iter()
            .any(|n| n.contains("gradient_as_bucket_view=True")),
        "{:?}",
        views.notes
    );
}

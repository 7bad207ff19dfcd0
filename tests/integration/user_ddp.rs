//! A user's own `DistributedDataParallel` under `predict --world-size N` (issue 44, item 2):
//! DDP's parameter check reads the values identical ranks give (predict/collectives.py), the
//! wrapper lays out PyTorch's gradient buckets (predict/ddp.py), and `torch.cuda.device_count()`
//! answers the GPUs a rank sees.

use crate::common::{PhaseStatus, PredictionStatus, Run, fixture, python_with};

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

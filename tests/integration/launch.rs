//! `predict -- COMMAND`: a command line as typed, resolved by the launchers' own parsers to the
//! entry point each rank runs (issue 44, item 1; `workload::launch`, `python/iteragpu/launch.py`).

use crate::common::{PredictionStatus, Run, fixture, python_with};

fn launched(
    python: &str,
    command: &[&str],
    dir: &std::path::Path,
) -> (String, Option<i32>, Option<crate::common::PredictionDoc>) {
    let out = dir.join("launched.json");
    let run = Run::predict()
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
        .args(["--python", python, "--card", "H200"])
        .output(&out)
        .current_dir(fixture("scripts/launch"))
        .arg("--")
        .args(command)
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    let doc = out.exists().then(|| run.prediction());
    (said, run.code(), doc)
}

#[test]
#[ignore = "needs torch"]
fn predict_torchrun_as_typed_runs_8_ranks() {
    let python = python_with(&["torch"]);
    let dir = tempfile::tempdir().unwrap();
    let script = fixture("scripts/distributed/ddp_train.py")
        .display()
        .to_string();
    let (said, code, doc) = launched(
        &python,
        &["torchrun", "--nproc-per-node", "8", &script],
        dir.path(),
    );
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("COUNTER world_size 8"), "{said}");
    assert!(said.contains("COUNTER device_count 8"), "{said}");
    let doc = doc.unwrap();
    assert_eq!(doc.status, PredictionStatus::Complete, "{said}");
    assert!(doc.phases.iter().any(|p| p.name.starts_with("backward")));
    assert!(
        doc.notes
            .iter()
            .any(|n| n.contains("torchrun: 1 node(s) × 8 process(es) = 8 ranks")),
        "{:?}",
        doc.notes
    );
}

#[test]
#[ignore = "needs torch"]
fn predict_python_dash_m_runs_the_module_as_main() {
    let python = python_with(&["torch"]);
    let dir = tempfile::tempdir().unwrap();
    let (said, code, doc) = launched(
        &python,
        &["python", "-m", "trainpkg.train", "--steps", "2"],
        dir.path(),
    );
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("COUNTER module_steps 2 True"), "{said}");
    let doc = doc.unwrap();
    assert_eq!(doc.status, PredictionStatus::Complete, "{said}");
    assert_eq!(
        doc.phases
            .iter()
            .filter(|p| p.name.starts_with("backward"))
            .count(),
        2
    );
}

/// TRL's console script as typed: `trl sft …` resolves to `trl.cli:main`, which builds an
/// `accelerate launch` of `trl/scripts/sft.py`; that child runs in the predicted process.
#[test]
#[ignore = "needs torch, transformers, trl and datasets"]
fn trl_console_script_as_typed_gets_its_figures() {
    let python = python_with(&["torch", "transformers", "trl", "datasets"]);
    let dir = tempfile::tempdir().unwrap();
    let (model, data) = crate::newest::sft_inputs(&python, dir.path());
    let out = dir.path().join("out").display().to_string();
    let (said, code, doc) = launched(
        &python,
        &[
            "trl",
            "sft",
            "--model_name_or_path",
            &model,
            "--dataset_name",
            &data,
            "--output_dir",
            &out,
            "--max_steps",
            "1",
            "--per_device_train_batch_size",
            "2",
            "--max_length",
            "32",
            "--report_to",
            "none",
        ],
        dir.path(),
    );
    assert_eq!(code, Some(0), "{said}");
    let doc = doc.unwrap();
    assert_eq!(doc.status, PredictionStatus::Complete, "{said}");
    assert!(
        doc.phases.iter().any(|p| p.name.starts_with("backward")),
        "{said}"
    );
    assert!(
        doc.notes
            .iter()
            .any(|n| n.contains("accelerate launch (called by the program)")),
        "{:?}",
        doc.notes
    );
}

#[test]
#[ignore = "needs torch"]
fn predict_refuses_a_command_it_cannot_resolve_naming_it() {
    let python = python_with(&["torch"]);
    let dir = tempfile::tempdir().unwrap();
    let (said, code, doc) = launched(&python, &["no-such-launcher", "train.py"], dir.path());
    assert_eq!(code, Some(1), "{said}");
    assert!(doc.is_none());
    assert!(said.contains("'no-such-launcher' is neither python, torchrun, accelerate launch, deepspeed nor a console script"), "{said}");
    let (said, code, _) = launched(&python, &["python", "missing.py"], dir.path());
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("missing.py: no such file"), "{said}");
}

/// measure runs ranks through torchrun itself (`--nproc-per-node`): a multi-rank command is
/// refused with that fix, naming the file it runs (torchrun's parser is torch's).
#[test]
#[ignore = "needs torch"]
fn measure_refuses_a_multi_rank_command_with_the_fix() {
    let python = python_with(&["torch"]);
    let dir = tempfile::tempdir().unwrap();
    let script = fixture("scripts/distributed/ddp_train.py")
        .display()
        .to_string();
    let run = Run::measure()
        .args(["--python", &python])
        .output(dir.path().join("m.json"))
        .arg("--")
        .args(["torchrun", "--nproc-per-node", "2", &script])
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(1), "{said}");
    assert!(
        said.contains("give --nproc-per-node 2 with --script"),
        "{said}"
    );
    assert!(said.contains("ddp_train.py"), "{said}");
}

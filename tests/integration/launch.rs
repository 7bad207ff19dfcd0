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

/// `accelerate launch --config_file fsdp.yaml` (2 processes, the FSDP plugin): the variables
/// accelerate's own launcher code prepares from the config reach the script, whose rank 0 of 2
/// gets per-phase figures.
#[test]
#[ignore = "needs torch and accelerate"]
fn predict_accelerate_launch_with_an_fsdp_config_gives_the_ranks_its_variables() {
    let python = python_with(&["torch", "accelerate"]);
    let dir = tempfile::tempdir().unwrap();
    let (said, code, doc) = launched(
        &python,
        &[
            "accelerate",
            "launch",
            "--config_file",
            "fsdp.yaml",
            "accelerate_env.py",
        ],
        dir.path(),
    );
    assert_eq!(code, Some(0), "{said}");
    for seen in [
        "ACCELERATE_USE_FSDP=true",
        "FSDP_VERSION=2",
        "FSDP_RESHARD_AFTER_FORWARD=true",
        "ACCELERATE_MIXED_PRECISION=bf16",
        "ACCELERATE_DYNAMO_BACKEND=NO",
    ] {
        assert!(said.contains(seen), "{seen} not seen by the script: {said}");
    }
    assert!(
        said.contains("COUNTER accelerate_ranks WORLD_SIZE=2 LOCAL_WORLD_SIZE=2"),
        "{said}"
    );
    let doc = doc.unwrap();
    assert_eq!(doc.status, PredictionStatus::Complete, "{said}");
    assert_eq!(
        doc.phases
            .iter()
            .filter(|p| p.name.starts_with("backward"))
            .count(),
        2,
        "{said}"
    );
    assert!(
        doc.notes
            .iter()
            .any(|n| n.contains("accelerate launch: 2 process(es), FSDP (config fsdp.yaml")),
        "{:?}",
        doc.notes
    );
    assert!(
        doc.notes
            .iter()
            .any(|n| n.contains("rank 0 of 2 ranks on PyTorch's fake process group")),
        "{:?}",
        doc.notes
    );
}

/// `deepspeed --num_gpus 2 ds_train.py --deepspeed ds.json`: DeepSpeed's own runner picks the
/// ranks; the script gets `--local_rank=0` first and DeepSpeed's launcher variables (rank 0 of
/// 2), and per-phase figures. Not named for the oldest environment, which has no DeepSpeed.
#[test]
#[ignore = "needs torch and deepspeed"]
fn deepspeed_launcher_as_typed_passes_local_rank_and_its_variables() {
    let python = python_with(&["torch", "deepspeed"]);
    let dir = tempfile::tempdir().unwrap();
    let (said, code, doc) = launched(
        &python,
        &[
            "deepspeed",
            "--num_gpus",
            "2",
            "ds_train.py",
            "--deepspeed",
            "ds.json",
        ],
        dir.path(),
    );
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("COUNTER ds_local_rank 0 config ds.json"),
        "{said}"
    );
    for seen in [
        "CROSS_SIZE=1",
        "LOCAL_RANK=0",
        "LOCAL_SIZE=2",
        "RANK=0",
        "WORLD_SIZE=2",
    ] {
        assert!(said.contains(seen), "{seen} not seen by the script: {said}");
    }
    let doc = doc.unwrap();
    assert_eq!(doc.status, PredictionStatus::Complete, "{said}");
    let phases = |prefix: &str| {
        doc.phases
            .iter()
            .filter(|p| p.name.starts_with(prefix))
            .count()
    };
    assert_eq!((phases("backward"), phases("AdamW.step")), (2, 2), "{said}");
    assert!(
        doc.notes
            .iter()
            .any(|n| n.contains("deepspeed: 1 node(s) × 2 GPU(s) = 2 ranks")),
        "{:?}",
        doc.notes
    );
}

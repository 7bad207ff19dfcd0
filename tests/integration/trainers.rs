//! `iteragpu predict` on the trainers people fine-tune with (tests/fixtures/scripts/predict/),
//! with the real libraries on the CPU: transformers' `Trainer` saving checkpoints and resuming
//! from them, the optimizers its `optim` names, accelerate's `Accelerator` with `save_state` and
//! `load_state`, Lightning's `Trainer` with a `ModelCheckpoint`, TRL's `SFTTrainer`, and what a run
//! writes read back in the same run. torch.cuda's answers are checked against the installed torch.
//!
//! No test name here says "predict": `.ci/run` runs the predict suite a second time on torch 2.6,
//! whose environment has none of trl, accelerate or lightning.

use crate::common::{
    PhaseStatus, Phases, PredictionDoc, PredictionStatus, Run, fixture, python_checks, python_with,
};
use std::path::Path;

/// The interpreter with torch, transformers and the trainer libraries.
fn trainers_python() -> String {
    python_with(&[
        "torch",
        "transformers",
        "accelerate",
        "peft",
        "trl",
        "lightning",
        "datasets",
    ])
}

/// `iteragpu predict --script fixtures/scripts/predict/NAME -- tiny/llama ARGS` for the H200:
/// the document and what the script printed; the script must end normally.
fn predict(python: &str, dir: &Path, name: &str, args: &[&str]) -> (PredictionDoc, String) {
    let run = Run::predict()
        .args(["--python", python, "--card", "H200"])
        .output(dir.join(format!("{name}{}.json", args.join("-"))))
        .arg("--script")
        .arg(fixture(&format!("scripts/predict/{name}")))
        .arg("--")
        .arg(fixture("tiny/llama"))
        .args(args)
        .finish();
    let stderr = run.stderr();
    assert!(
        run.document().exists(),
        "{name}: no prediction written: {stderr}"
    );
    assert_eq!(run.code(), Some(0), "{name}: {stderr}");
    (run.prediction(), stderr)
}

fn assert_all_predicted(doc: &PredictionDoc, stderr: &str) {
    assert_eq!(doc.status, PredictionStatus::Complete, "{stderr}");
    for phase in &doc.phases {
        assert_eq!(
            phase.status,
            PhaseStatus::Predicted,
            "{}: {stderr}",
            phase.name
        );
        assert!(phase.peak_allocated_bytes.is_some(), "{}", phase.name);
    }
}

fn printed(stderr: &str, lines: &[&str]) {
    for line in lines {
        assert!(stderr.contains(line), "{line:?} not printed in {stderr}");
    }
}

/// torch.cuda answered from one table wherever torch bound the original (`torch.cuda.random`'s
/// own `current_device`, reached by transformers' Trainer at every checkpoint): every public
/// function and class of torch.cuda's submodules is followed through its bytecode down to the
/// driver, and each one still reaching it must be answered or excluded with its reason (a new
/// torch that adds one fails here); the CUDA RNG state is a real generator's 16 bytes and
/// round-trips.
#[test]
#[ignore = "needs torch"]
fn torch_cuda_is_answered_from_one_table_on_every_path() {
    let python = python_with(&["torch"]);
    let stdout = python_checks(&python, "cuda_answers.py");
    // The scan followed torch.cuda's submodules, and found the bindings outside the namespace.
    assert!(stdout.contains("still reach the driver"), "{stdout}");
    assert!(stdout.contains("torch.cuda.random"), "{stdout}");
}

/// transformers' Trainer saving a checkpoint every 2 steps (its RNG state through
/// torch.cuda.random, which failed at the first save), with evaluation, gradient accumulation,
/// gradient checkpointing and bf16, then resuming from it: every phase predicted, the resumed
/// optimizer steps allocate no new state (it was read back on the GPU from the checkpoint), and
/// the model written by save_model reads back with the same layout.
#[test]
#[ignore = "needs torch, transformers and accelerate"]
fn a_trainer_saves_checkpoints_and_resumes_from_them() {
    let python = trainers_python();
    let dir = tempfile::tempdir().unwrap();
    let (doc, stderr) = predict(&python, dir.path(), "trainer_resume.py", &[]);
    assert_all_predicted(&doc, &stderr);
    printed(
        &stderr,
        &[
            "checkpoints ['checkpoint-4'] cuda rng (16,) torch.uint8",
            "resumed from step 4 to step 6",
            "save_model then from_pretrained: same layout True, on cuda:0",
        ],
    );
    // Four steps, then two resumed ones.
    let first = doc.phase("AdamW.step #1");
    let states = first.end_allocated_bytes.unwrap() - first.start_allocated_bytes.unwrap();
    assert!(states > 0, "the first step makes AdamW's states");
    for k in 2..=6 {
        let step = doc.phase(&format!("AdamW.step #{k}"));
        assert_eq!(
            step.end_allocated_bytes, step.start_allocated_bytes,
            "AdamW.step #{k} allocated new states"
        );
    }
    let notes = doc.notes.join("\n");
    assert!(
        notes.contains(
            "safetensors.torch.save_file of data-less tensors writes a file of their true size"
        ),
        "{notes}"
    );
}

/// The optimizers TrainingArguments' `optim` names that need no other package run on data-less
/// tensors, each with its own states (in parameters' bytes: none for SGD
/// without momentum, one copy for Adagrad and RMSprop, two for AdamW, factored rows and columns
/// for Adafactor).
#[test]
#[ignore = "needs torch, transformers and accelerate"]
fn a_trainer_steps_with_every_optimizer_that_needs_no_other_package() {
    let python = trainers_python();
    let dir = tempfile::tempdir().unwrap();
    for (optim, class, low, high) in [
        ("sgd", "SGD", 0.0, 0.0),
        ("adagrad", "Adagrad", 1.0, 1.1),
        ("rmsprop", "RMSprop", 1.0, 1.1),
        ("adamw_torch_fused", "AdamW", 2.0, 2.1),
        ("adafactor", "Adafactor", 0.01, 0.25),
    ] {
        let (doc, stderr) = predict(&python, dir.path(), "trainer_optim.py", &[optim]);
        assert_all_predicted(&doc, &stderr);
        printed(&stderr, &[&format!("optimizer {class} after 2 steps")]);
        let run = &doc.phases[0];
        let params = run.at_peak.as_ref().unwrap().by_category["parameter"] as f64;
        // The states at the second step's peak (Adagrad makes its own in its constructor).
        let second = doc.phase(&format!("{class}.step #2"));
        let at_peak = &second.at_peak.as_ref().unwrap().by_category;
        let states = at_peak.get("optimizer state").copied().unwrap_or(0) as f64;
        assert!(
            states >= low * params && states <= high * params,
            "{optim}: {states} bytes of states for {params} bytes of parameters"
        );
    }
}

/// accelerate's Accelerator: prepare, bf16 steps through accelerator.backward, save_state (the
/// model through safetensors' save_model, which looks for shared storages), load_state back into
/// the same objects.
#[test]
#[ignore = "needs torch, transformers and accelerate"]
fn accelerate_saves_its_state_and_loads_it_back() {
    let python = trainers_python();
    let dir = tempfile::tempdir().unwrap();
    let (doc, stderr) = predict(&python, dir.path(), "accelerate_state.py", &[]);
    assert_all_predicted(&doc, &stderr);
    printed(
        &stderr,
        &[
            "saved ['model.safetensors', 'optimizer.bin', 'random_states_0.pkl'] on cuda, 4 steps",
            "loaded optimizer state for 30 parameters, exp_avg on cuda:0",
        ],
    );
    assert!(
        doc.phase_names().contains(&"AdamW.step #4"),
        "{:?}",
        doc.phase_names()
    );
}

/// Lightning's Trainer on one GPU in bf16-mixed, a ModelCheckpoint callback writing every epoch
/// and `last.ckpt`, then a fit resumed from it.
#[test]
#[ignore = "needs torch, transformers and lightning"]
fn lightning_fits_with_a_checkpoint_callback_and_resumes() {
    let python = trainers_python();
    let dir = tempfile::tempdir().unwrap();
    let (doc, stderr) = predict(&python, dir.path(), "lightning_checkpoint.py", &[]);
    assert_all_predicted(&doc, &stderr);
    printed(
        &stderr,
        &[
            "checkpoints ['epoch=1-step=8.ckpt', 'last.ckpt'] after 8 steps",
            "resumed to 12 steps",
        ],
    );
    assert!(
        doc.phase_names().contains(&"AdamW.step #12"),
        "{:?}",
        doc.phase_names()
    );
}

/// TRL's SFTTrainer runs its four steps to its checkpoint, predicted whole: its loss selects the
/// tokens whose label is not -100 (`hidden_states[mask]`, trl/trainer/utils.py), and the mask's
/// values are known (the labels came from the CPU), so the selection has its true size.
#[test]
#[ignore = "needs torch, transformers and trl"]
fn trl_sft_trainer_runs_to_its_checkpoint() {
    let python = trainers_python();
    let dir = tempfile::tempdir().unwrap();
    let (doc, stderr) = predict(&python, dir.path(), "sft_trainer.py", &[]);
    printed(
        &stderr,
        &["sft checkpoints ['README.md', 'checkpoint-4'] after 4 steps"],
    );
    assert!(
        doc.phase_names().contains(&"AdamW.step #4"),
        "{:?}",
        doc.phase_names()
    );
    assert_all_predicted(&doc, &stderr);
}

/// TRL's DPOTrainer, a frozen reference model beside the policy, runs its two steps to its
/// checkpoint, predicted whole (its masked loss as SFT's).
#[test]
#[ignore = "needs torch, transformers and trl"]
fn trl_dpo_trainer_runs_to_its_checkpoint() {
    let python = trainers_python();
    let dir = tempfile::tempdir().unwrap();
    let (doc, stderr) = predict(&python, dir.path(), "dpo_trainer.py", &[]);
    printed(
        &stderr,
        &["dpo checkpoints ['README.md', 'checkpoint-2'] after 2 steps"],
    );
    assert!(
        doc.phase_names().contains(&"AdamW.step #2"),
        "{:?}",
        doc.phase_names()
    );
    assert_all_predicted(&doc, &stderr);
}

/// What a run writes reads back in the same run, data-less, with the same shapes and dtypes, and a
/// load to the GPU allocates what the GPU would: save_pretrained then from_pretrained,
/// torch.save then torch.load(map_location="cuda"), safetensors save_file then load_file and
/// safe_open (known values kept), and a peft LoRA merged, saved and reloaded.
#[test]
#[ignore = "needs torch, transformers and peft"]
fn what_a_run_writes_reads_back_in_the_same_run() {
    let python = python_with(&["torch", "transformers", "peft", "safetensors"]);
    let dir = tempfile::tempdir().unwrap();
    let (doc, stderr) = predict(&python, dir.path(), "save_reload.py", &[]);
    assert_all_predicted(&doc, &stderr);
    printed(
        &stderr,
        &[
            "from_pretrained same layout True",
            "torch.load same layout True, step 7",
            "torch.load kept on cpu, the GPU grew by 0",
            "load_file [('embed', (256, 64), 'torch.bfloat16', 'cuda:0'), ('positions', (16,), 'torch.int64', 'cuda:0')] positions [13, 14, 15]",
            "safe_open ['embed', 'positions'] {'format': 'pt'} [256, 64] BF16",
            "merged reload same layout True, lora left False",
        ],
    );
    // Each load allocated exactly the 512-byte-rounded blocks of what it read.
    let loads: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(", allocated "))
        .collect();
    assert_eq!(loads.len(), 3, "{stderr}");
    for line in loads {
        let tail = line.rsplit(", allocated ").next().unwrap();
        let (grew, expected) = tail.split_once(" of ").unwrap();
        assert_eq!(grew.trim(), expected.trim(), "{line}");
        assert!(grew.trim().parse::<u64>().unwrap() > 0, "{line}");
    }
}

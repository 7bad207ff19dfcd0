//! What a predicted script reads is what PyTorch would answer, and storages die when PyTorch
//! would free them (issue 43): the counters a script prints are never reset by the prediction's
//! automatic phases; a deep copy stays in the prediction's fake mode, so a view of it (the
//! detached tensors of a `state_dict()`) allocates nothing; a deleted optimizer or module is
//! freed (the session holds them weakly); a post-accumulate-grad hook registered before or after
//! `Module.cuda()` fires, so an optimizer stepped in backward frees each gradient at once.
//!
//! The figures are the ones PyTorch gives on a GPU for the same statements (the issue's
//! readings, and the sums of the tensors' rounded sizes).

use crate::common::{PredictionStatus, Run, fixture, python_with};
use std::collections::BTreeMap;

/// `predict --script fixtures/scripts/lifetimes/NAME -- ARGS` on the H200: the `COUNTER name v…`
/// lines the script printed, by name.
fn counters(python: &str, name: &str, args: &[&str]) -> BTreeMap<String, Vec<u64>> {
    counters_and_document(python, name, args).0
}

/// The same, with the prediction file.
fn counters_and_document(
    python: &str,
    name: &str,
    args: &[&str],
) -> (BTreeMap<String, Vec<u64>>, crate::common::PredictionDoc) {
    predicted_counters(python, "H200", &format!("lifetimes/{name}"), args)
}

/// `predict --card CARD --script fixtures/scripts/SCRIPT -- ARGS`, which must complete: the
/// `COUNTER name v…` lines the script printed (a key printed again keeps every value, in
/// order) and the prediction file. Shared with published.rs.
pub(crate) fn predicted_counters(
    python: &str,
    card: &str,
    script: &str,
    args: &[&str],
) -> (BTreeMap<String, Vec<u64>>, crate::common::PredictionDoc) {
    let dir = tempfile::tempdir().unwrap();
    let run = Run::predict()
        .args(["--python", python, "--card", card])
        .output(dir.path().join("p.json"))
        .arg("--script")
        .arg(fixture(&format!("scripts/{script}")))
        .arg("--")
        .args(args)
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(0), "{script} {args:?}: {said}");
    let doc = run.prediction();
    assert_eq!(
        doc.status,
        PredictionStatus::Complete,
        "{script} {args:?}: {said}"
    );
    let mut printed: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in said.lines().filter_map(|l| l.strip_prefix("COUNTER ")) {
        let mut words = line.split_whitespace();
        let key = words.next().unwrap().to_string();
        printed
            .entry(key)
            .or_default()
            .extend(words.map(|w| w.parse::<u64>().unwrap()));
    }
    (printed, doc)
}

const LINEAR_4096: u64 = 4096 * 4096 * 4 + 4096 * 4; // weight and bias, float32, 512-byte rounded

#[test]
#[ignore = "needs torch"]
fn predict_leaves_the_scripts_peak_counters_to_the_script() {
    let (c, doc) = counters_and_document(&python_with(&["torch"]), "counters.py", &[]);
    // 1e9 bytes rounded to the 2 MiB of a large block: the peak since the process began.
    assert_eq!(c["before_backward"], [1_000_341_504]);
    assert_eq!(c["after_backward"], [1_000_341_504]);
    // The file's own figure at that point: the whole run's peak (its phase opened first).
    let run = doc
        .phases
        .iter()
        .find(|p| p.name.starts_with("run counters.py"))
        .unwrap();
    assert_eq!(run.peak_allocated_bytes, Some(1_000_341_504));
    // After the script's own reset, the peak restarts at the level then.
    assert_eq!(c["after_reset"][0], c["after_reset"][1]);
}

#[test]
#[ignore = "needs torch"]
fn predict_counts_no_byte_for_a_state_dict_of_a_deep_copy() {
    let c = counters(&python_with(&["torch"]), "state_dict.py", &[]);
    assert_eq!(c["deepcopy"], [LINEAR_4096]);
    assert_eq!(c["state_dict"], [0]);
    assert_eq!(c["save"], [0]);
    assert_eq!(c["assign"], [0]);
    assert_eq!(c["del_copy"], [0], "the copy's parameters die with it");
}

#[test]
#[ignore = "needs torch"]
fn predict_frees_a_deleted_optimizer_and_module_with_and_without_gc() {
    let python = python_with(&["torch"]);
    for args in [&[][..], &["gc"][..]] {
        let c = counters(&python, "del_optimizer.py", args);
        let param = 64 << 20;
        assert_eq!(c["with_optimizer"], [3 * param], "{args:?}");
        assert_eq!(
            c["after_del_optimizer"],
            [param],
            "{args:?}: the states are freed"
        );
        // Two Linear(4096, 4096) with their gradients: four copies of their bytes go with them
        // (what stays is the first matmul's cuBLAS workspaces, held by PyTorch on a GPU too).
        assert_eq!(
            c["after_del_model"][0],
            c["with_model"][0] - 4 * LINEAR_4096,
            "{args:?}"
        );
    }
}

#[test]
#[ignore = "needs torch and torchvision"]
fn optimizer_in_backward_tutorial_peaks_near_its_published_4_gb() {
    let c = counters(
        &python_with(&["torch", "torchvision"]),
        "optimizer_in_backward.py",
        &[],
    );
    // Every hook fired: each parameter's Adam stepped, no gradient kept.
    assert_eq!(c["stepped"], [296]);
    assert_eq!(c["grads_alive"], [0]);
    // The tutorial's snapshot shows about 4 GB (read by eye): within 10%.
    let fused = c["peak_fused"][0] as f64;
    assert!((fused / 4.0e9 - 1.0).abs() < 0.10, "{fused}");
    assert!(
        c["peak_adam"][0] as f64 > fused,
        "the usual step peaks higher"
    );
}

/// The Trainer's own memory metrics (`skip_memory_metrics=False`), as users log them, are the
/// file's figures: its peak over training (start + alloc delta + peaked delta) is the highest
/// predicted phase peak, and the script's `max_memory_allocated()` after `train()` equals it.
#[test]
#[ignore = "needs torch, transformers and accelerate"]
fn trainer_memory_metrics_are_the_files_figures() {
    let python = python_with(&["torch", "transformers", "accelerate"]);
    let tiny = fixture("tiny/llama").display().to_string();
    let (c, doc) = counters_and_document(&python, "trainer_metrics.py", &[&tiny]);
    let trainer_peak = c["before_train"][0] + c["alloc_delta"][0] + c["peaked_delta"][0];
    let file_peak = doc
        .phases
        .iter()
        .filter(|p| !p.name.starts_with("run "))
        .filter_map(|p| p.peak_allocated_bytes)
        .max()
        .unwrap();
    assert_eq!(trainer_peak, file_peak);
    assert_eq!(c["max_allocated"], [file_peak]);
}

/// torchtune's `get_memory_stats` after each step (it resets the peak) and LitGPT's "Memory
/// used" line, as their code reads the counters: each figure is the file's at that point (the
/// highest phase peak of that step; after the last reset, the final forward's peak).
#[test]
#[ignore = "needs torch"]
fn predict_gives_recipe_memory_logs_the_files_figures() {
    let (c, doc) = counters_and_document(&python_with(&["torch"]), "recipe_logs.py", &[]);
    let peak_of = |suffix: &str| {
        doc.phases
            .iter()
            .filter(|p| p.name.ends_with(suffix))
            .filter_map(|p| p.peak_allocated_bytes)
            .max()
            .unwrap()
    };
    // Each step's line: (peak allocated, active_bytes.all.peak), the step's highest phase peak.
    let lines = &c["step_peak_alloc"];
    assert_eq!(lines.len(), 6);
    for k in 1..=3 {
        let (alloc, active) = (lines[2 * (k - 1)], lines[2 * (k - 1) + 1]);
        assert_eq!(alloc, peak_of(&format!("#{k}")), "step {k}");
        assert_eq!(active, alloc, "step {k}: active_bytes.all.peak");
    }
    assert_eq!(c["litgpt_memory_used"], [peak_of("#4")]);
}

//! One symbolic trace for every value of a predicted sweep (`sweep/runner/one_trace.rs`,
//! `python/iteragpu/predict/symbolic.py`): the trials made concrete from a trace give the
//! documents of per-value runs (`ITERAGPU_PREDICT_SYMBOLIC=0`), times and notes aside, and say
//! which trace they came from. On a torch older than the one the trace was checked on (the torch
//! 2.6 pass of `.ci/run`, which runs every `predict…` test), each value is predicted on its own
//! and the documents are equal all the same. The QLoRA sweep's test, which needs bitsandbytes
//! (absent from that pass), is in `quantized.rs`.

use crate::common::{Run, fixture, torch_python};
use crate::predict_built_once::figures;
use iteragpu::schema::series::{Series, TrialStatus};
use std::path::Path;

const FROM_TRACE: &str = "predicted from its sweep's symbolic trace";
const CHECKED: &str = "to check its sweep's symbolic trace";

/// `sweep --predict` of `args` on an L4 with `ITERAGPU_PREDICT_SYMBOLIC=mode`.
fn sweep(python: &str, args: &[&str], out: &Path, mode: &str) -> Series {
    Run::sweep()
        .env("ITERAGPU_PREDICT_SYMBOLIC", mode)
        .args(["--predict", "--python", python, "--card", "L4"])
        .args(args)
        .output(out)
        .finish()
        .series()
}

fn said(series: &Series, text: &str) -> usize {
    series
        .trials
        .iter()
        .filter(|t| {
            t.prediction
                .as_ref()
                .is_some_and(|p| p.notes.iter().any(|n| n.contains(text)))
        })
        .count()
}

/// Whether the interpreter's torch traces symbolically (2.15 and later).
fn traces(series: &Series) -> bool {
    let version = series.trials[0]
        .prediction
        .as_ref()
        .and_then(|p| p.assumptions.torch_version.clone())
        .unwrap_or_default();
    let mut parts = version
        .split(['.', '+'])
        .map(|p| p.parse::<u64>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (2, 15)
}

/// The sweep of `args` traced (`mode`) and value by value: the same documents; traced, at least
/// `served` trials made concrete from a trace, each trace checked by a concrete run.
pub(crate) fn check_equal(
    python: &str,
    dir: &Path,
    name: &str,
    args: &[&str],
    mode: &str,
    served: usize,
) {
    let traced = sweep(python, args, &dir.join(format!("{name}-traced.json")), mode);
    let each = sweep(python, args, &dir.join(format!("{name}-each.json")), "0");
    assert!(
        traced.trials.iter().all(|t| t.status == TrialStatus::Ok),
        "{name}: {:?}",
        traced.trials.iter().map(|t| &t.error).collect::<Vec<_>>()
    );
    assert_eq!(traced.trials.len(), each.trials.len(), "{name}");
    for (x, y) in figures(&traced).iter().zip(&figures(&each)) {
        assert_eq!(
            x, y,
            "{name}: made concrete from a trace ≠ predicted on its own"
        );
    }
    assert_eq!(said(&each, FROM_TRACE), 0, "{name}");
    if traces(&traced) {
        assert!(
            said(&traced, FROM_TRACE) >= served,
            "{name}: {:?}",
            notes(&traced)
        );
        assert!(said(&traced, CHECKED) >= 1, "{name}: {:?}", notes(&traced));
    } else {
        assert_eq!(said(&traced, FROM_TRACE), 0, "{name}");
        assert!(
            notes(&traced).iter().any(|n| n.contains("was not made")),
            "{name}: an older torch says why it traced nothing: {:?}",
            notes(&traced)
        );
    }
}

fn notes(series: &Series) -> Vec<String> {
    series
        .trials
        .iter()
        .flat_map(|t| t.prediction.iter().flat_map(|p| p.notes.clone()))
        .filter(|n| n.contains("symbolic"))
        .collect()
}

/// The guide's dense network trained over eleven batches (traced by default: ten values of 2 or
/// more), GPT-2 trained over five (traced as asked), and GPT-2's
/// generation over a 3×3 grid of batch and prompt length (two fields traced at once; a prompt
/// length that is not a multiple of 8 takes another trace, as SDPA's alignment guards say).
#[test]
#[ignore = "needs torch"]
fn predict_one_trace_gives_the_documents_of_per_value_runs() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let gpt2 = fixture("models/gpt2");
    let gpt2 = gpt2.to_str().unwrap();
    check_equal(
        &python,
        dir.path(),
        "dense",
        &[
            "--workload",
            "dense",
            "--width",
            "1024",
            "--context",
            "256",
            "--depth",
            "2",
        ]
        .into_iter()
        .chain(["--task", "train", "--vary", "batch=1,2,3,4,5,6,7,8,9,10,12"])
        .collect::<Vec<_>>(),
        "auto",
        2,
    );
    check_equal(
        &python,
        dir.path(),
        "causal-lm-train",
        &[
            "--workload",
            "causal-lm",
            "--model",
            gpt2,
            "--task",
            "train",
        ]
        .into_iter()
        .chain(["--context", "64", "--vary", "batch=1,2,3,4,6"])
        .collect::<Vec<_>>(),
        "1",
        2,
    );
    check_equal(
        &python,
        dir.path(),
        "generate-grid",
        &[
            "--workload",
            "causal-lm",
            "--model",
            gpt2,
            "--new-tokens",
            "2",
        ]
        .into_iter()
        .chain(["--vary", "batch=1,2,3", "--vary", "prompt-tokens=16,20,32"])
        .collect::<Vec<_>>(),
        "1",
        2,
    );
}

/// A user's script sees the batch only as text in its arguments: its sweep is predicted value by
/// value, and no trial claims a trace.
#[test]
#[ignore = "needs torch"]
fn predict_one_trace_leaves_a_scripts_sweep_to_per_value_runs() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let script = fixture("scripts/train_loop.py");
    let args = [
        "--script",
        script.to_str().unwrap(),
        "--vary",
        "batch=2,3,4,5",
        "--",
    ];
    let series = sweep(
        &python,
        &[&args[..], &["--batch", "{batch}"]].concat(),
        &dir.path().join("s.json"),
        "1",
    );
    assert_eq!(said(&series, FROM_TRACE), 0, "{:?}", notes(&series));
    assert_eq!(series.trials.len(), 4);
}

/// `check`: every value made concrete from a trace is also run on its own and the two must
/// agree (a difference is a trial without figures that says so).
#[test]
#[ignore = "needs torch"]
fn predict_one_trace_check_runs_every_value_both_ways() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let gpt2 = fixture("models/gpt2");
    let series = sweep(
        &python,
        &[
            "--workload",
            "causal-lm",
            "--model",
            gpt2.to_str().unwrap(),
            "--task",
            "train",
        ]
        .into_iter()
        .chain(["--context", "32", "--vary", "batch=2,3,5"])
        .collect::<Vec<_>>(),
        &dir.path().join("s.json"),
        "check",
    );
    assert!(
        series.trials.iter().all(|t| t.status == TrialStatus::Ok),
        "{:?}",
        series.trials.iter().map(|t| &t.error).collect::<Vec<_>>()
    );
    if traces(&series) {
        assert!(said(&series, CHECKED) >= 1, "{:?}", notes(&series));
    }
}

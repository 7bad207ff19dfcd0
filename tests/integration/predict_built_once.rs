//! A predicted sweep's model built once (`python/iteragpu/built_once.py`): the trials of a
//! built-in workload that differ only in what is read after the model is built go on from copies
//! of one builder. The documents are those of per-trial builds, each trial says so, and a Ctrl-C
//! leaves no builder or copy behind. Named `predict_…` so that the torch 2.6 pass of `.ci/run`
//! runs them too.

use crate::common::{Run, descendants_with_depth, fixture, process_running, torch_python};
use iteragpu::schema::series::{Series, TrialStatus};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BUILT_ONCE: &str = "the model was built once for this sweep's trials";

/// `sweep --predict` of `args` on an L4 through the fork server, builders on or off.
fn sweep(python: &str, args: &[&str], out: &Path, built_once: bool) -> Series {
    Run::sweep()
        .env("ITERAGPU_FORK_SERVER", "1")
        .env("ITERAGPU_BUILD_ONCE", if built_once { "1" } else { "0" })
        .args(["--predict", "--python", python, "--card", "L4"])
        .args(args)
        .output(out)
        .finish()
        .series()
}

/// Every figure of each trial and its whole prediction but its notes, times and code hash.
pub(crate) fn figures(series: &Series) -> Vec<serde_json::Value> {
    series
        .trials
        .iter()
        .map(|t| {
            let mut p =
                serde_json::to_value(t.prediction.as_ref().expect("a predicted trial")).unwrap();
            let map = p.as_object_mut().unwrap();
            for volatile in ["created_at", "notes", "identity"] {
                map.remove(volatile);
            }
            for phase in map["phases"].as_array_mut().unwrap() {
                if let Some(inputs) = phase.get_mut("inputs").and_then(|i| i.as_object_mut()) {
                    inputs.remove("step_duration_s");
                }
            }
            serde_json::json!({
                "values": t.values,
                "status": t.status,
                "peak_allocated": t.peak_allocated_bytes,
                "peak_reserved": t.peak_reserved_bytes,
                "end_allocated": t.end_allocated_bytes,
                "prediction": p,
            })
        })
        .collect()
}

fn said_built_once(series: &Series) -> Vec<bool> {
    series
        .trials
        .iter()
        .map(|t| {
            t.prediction
                .as_ref()
                .is_some_and(|p| p.notes.iter().any(|n| n.contains(BUILT_ONCE)))
        })
        .collect()
}

fn check_equal(python: &str, dir: &Path, name: &str, args: &[&str], trials: usize) {
    let once = sweep(python, args, &dir.join(format!("{name}-once.json")), true);
    let each = sweep(python, args, &dir.join(format!("{name}-each.json")), false);
    assert_eq!(once.trials.len(), trials, "{name}");
    assert!(
        once.trials.iter().all(|t| t.status == TrialStatus::Ok),
        "{name}: {:?}",
        once.trials.iter().map(|t| &t.error).collect::<Vec<_>>()
    );
    assert_eq!(said_built_once(&once), vec![true; trials], "{name}");
    assert_eq!(said_built_once(&each), vec![false; trials], "{name}");
    let (a, b) = (figures(&once), figures(&each));
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y, "{name}: built once ≠ built in each trial");
    }
}

/// LoRA training of a small causal LM over three batches, a ViT's inference over two image
/// counts: every figure of every phase equal with and without the shared build.
#[test]
#[ignore = "needs torch"]
fn predict_built_once_gives_the_documents_of_per_trial_builds() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let gpt2 = fixture("models/gpt2");
    let vit = fixture("models/vit-base-defaults");
    check_equal(
        &python,
        dir.path(),
        "lora",
        &[
            "--workload",
            "causal-lm",
            "--model",
            gpt2.to_str().unwrap(),
            "--task",
            "train",
            "--lora-rank",
            "8",
            "--lora-targets",
            "all-linear",
            "--context",
            "128",
            "--vary",
            "batch=1,2,3",
        ],
        3,
    );
    check_equal(
        &python,
        dir.path(),
        "vit",
        &[
            "--workload",
            "vision",
            "--model",
            vit.to_str().unwrap(),
            "--vary",
            "images=1,4",
        ],
        2,
    );
}

/// Ctrl-C while trials run as copies of a builder (the CLI, its fork server, the builder, a
/// copy: three levels below the CLI): the CLI ends, and with it every process it started.
#[test]
#[ignore = "needs torch"]
fn predict_built_once_sigint_leaves_no_process_behind() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let gpt2 = fixture("models/gpt2");
    let mut cli = Command::new(assert_cmd::cargo::cargo_bin("iteragpu"))
        .env("ITERAGPU_FORK_SERVER", "1")
        .env_remove("ITERAGPU_BUILD_ONCE")
        .args(["sweep", "--predict", "--python", &python, "--card", "L4"])
        .arg("--output")
        .arg(dir.path().join("s.json"))
        .args(["--workload", "causal-lm", "--model"])
        .arg(&gpt2)
        .args(["--new-tokens", "800", "--vary", "batch=1,2,3,4"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut seen: Vec<u32> = Vec::new();
    loop {
        let now = descendants_with_depth(cli.id());
        for (p, _) in &now {
            if !seen.contains(p) {
                seen.push(*p);
            }
        }
        if now.iter().any(|(_, depth)| *depth >= 3) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no trial forked from a builder appeared"
        );
        assert!(cli.try_wait().unwrap().is_none(), "the CLI ended early");
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: a signal to our own child.
    unsafe {
        libc::kill(cli.id() as i32, libc::SIGINT);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while cli.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the CLI did not end after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<u32> = seen
            .iter()
            .copied()
            .filter(|p| process_running(*p))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left running after SIGINT: {left:?} (of {seen:?})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(seen.len() >= 3, "{seen:?}");
}

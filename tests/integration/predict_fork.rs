//! `sweep --predict` through the fork server (`prediction::fork_server`,
//! `python/iteragpu/fork_server.py`): the same figures as fresh processes, each trial isolated
//! from the others (global state, a crash), and nothing left running after a Ctrl-C. Named
//! `predict_…` so that the torch 2.6 pass of `.ci/run` runs them too.

use crate::common::{Run, descendants_with_depth, process_running, torch_python};
use iteragpu::schema::series::{Series, TrialStatus};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `sweep --predict` of `args` on an L4, with the fork server on (`fork`) or off.
fn sweep(python: &str, args: &[&str], out: &Path, fork: bool) -> Series {
    Run::sweep()
        .env("ITERAGPU_FORK_SERVER", if fork { "1" } else { "0" })
        .args(["--predict", "--python", python, "--card", "L4"])
        .args(args)
        .output(out)
        .finish()
        .series()
}

/// What a record says of the trial's memory, every figure of its prediction included, as bytes
/// of JSON (no time, pid or note).
fn figures(series: &Series) -> Vec<String> {
    series
        .trials
        .iter()
        .map(|t| {
            let p = t
                .prediction
                .as_ref()
                .expect("a predicted trial keeps its prediction");
            serde_json::json!({
                "values": t.values,
                "status": t.status,
                "out_of_memory": t.out_of_memory,
                "peak_allocated": t.peak_allocated_bytes,
                "peak_reserved": t.peak_reserved_bytes,
                "end_allocated": t.end_allocated_bytes,
                "end_reserved": t.end_reserved_bytes,
                "failed_phase": t.failed_phase,
                "prediction_status": p.status,
                "phases": p.phases,
                "out_of_memory_record": p.out_of_memory,
                "capacity": p.capacity,
            })
            .to_string()
        })
        .collect()
}

/// A small causal LM's grid predicted in forked children and in fresh processes: the same
/// records, figure for figure; and the protocol says which.
#[test]
#[ignore = "needs torch"]
fn predict_fork_server_gives_the_figures_of_fresh_processes() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let model = crate::common::fixture("models/gpt2");
    let args = [
        "--workload",
        "causal-lm",
        "--model",
        model.to_str().unwrap(),
        "--vary",
        "batch=1,2",
        "--vary",
        "prompt-tokens=16,32",
    ];
    let forked = sweep(&python, &args, &dir.path().join("forked.json"), true);
    let fresh = sweep(&python, &args, &dir.path().join("fresh.json"), false);
    assert_eq!(forked.trials.len(), 4);
    assert!(
        forked.trials.iter().all(|t| t.status == TrialStatus::Ok),
        "{:?}",
        forked.trials.iter().map(|t| &t.error).collect::<Vec<_>>()
    );
    assert_eq!(figures(&forked), figures(&fresh));
    assert!(
        forked.protocol.contains("forked from one Python"),
        "{}",
        forked.protocol
    );
    assert!(
        fresh.protocol.contains("a fresh CPU process"),
        "{}",
        fresh.protocol
    );
    // Served, never silently fresh.
    for t in &forked.trials {
        let notes = &t.prediction.as_ref().unwrap().notes;
        assert!(
            !notes.iter().any(|n| n.contains("fork server")),
            "{notes:?}"
        );
    }
}

/// A script that fails when it finds a previous trial's changes (an environment variable, an
/// attribute on torch, a monkeypatched `nn.Linear.forward`), makes them, then allocates; and
/// kills itself with SIGSEGV for the value 3.
const SCRIPT: &str = r#"
import os, signal, sys, torch, iteragpu
if os.environ.get("ITERAGPU_TEST_LEAKED") or getattr(torch, "iteragpu_test_leaked", False) \
        or torch.nn.Linear.forward.__name__ == "patched":
    raise RuntimeError("a previous trial's state leaked into this one")
os.environ["ITERAGPU_TEST_LEAKED"] = "1"
torch.iteragpu_test_leaked = True
original = torch.nn.Linear.forward
def patched(self, x):
    return original(self, x)
torch.nn.Linear.forward = patched
n = int(sys.argv[1])
if n == 3:
    os.kill(os.getpid(), signal.SIGSEGV)
with iteragpu.phase("work"):
    layer = torch.nn.Linear(64, 64, device="cuda")
    y = layer(torch.empty(n * 8, 64, device="cuda"))
if n == 5:
    sys.exit(4)
"#;

/// Each trial is its own process: what one trial changes in its interpreter never reaches the
/// next (run one after the other, so each later trial is forked after an earlier one ended); a
/// trial that segfaults or calls `sys.exit` is that trial's failure, with its reason, and the
/// next one runs.
#[test]
#[ignore = "needs torch"]
fn predict_fork_children_are_isolated_and_a_crash_is_one_failed_trial() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("leaky.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let series = Run::sweep()
        .env("ITERAGPU_FORK_SERVER", "1")
        .args(["--predict", "--python", &python, "--card", "L4"])
        .args(["--vary", "batch=1,2,3,4,5,6", "--script"])
        .arg(&script)
        .args(["--", "{batch}"])
        .output(dir.path().join("s.json"))
        .finish()
        .series();
    let statuses: Vec<TrialStatus> = series.trials.iter().map(|t| t.status).collect();
    let errors: Vec<_> = series.trials.iter().map(|t| t.error.clone()).collect();
    assert_eq!(
        statuses,
        [
            TrialStatus::Ok,
            TrialStatus::Ok,
            TrialStatus::Failed,
            TrialStatus::Ok,
            TrialStatus::Failed,
            TrialStatus::Ok
        ],
        "{errors:?}"
    );
    let segv = errors[2].as_deref().unwrap_or_default();
    assert!(segv.contains("signal 11"), "{segv}");
    let exit = series.trials[4]
        .prediction
        .as_ref()
        .and_then(|p| p.failure.clone())
        .unwrap_or_default();
    assert!(exit.contains("exited with status 4"), "{exit}");
    assert!(!format!("{errors:?}").contains("leaked"), "{errors:?}");
}

/// Every process whose parent chain leads to `root`, `root` excluded.
fn descendants(root: u32) -> Vec<u32> {
    descendants_with_depth(root)
        .into_iter()
        .map(|(p, _)| p)
        .collect()
}

/// Ctrl-C while two forked trials run: the CLI ends, and with it the server and every child (by
/// pid, read while they ran).
#[test]
#[ignore = "needs torch"]
fn predict_fork_sigint_leaves_no_process_behind() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("slow.py");
    std::fs::write(
        &script,
        "import sys, time, torch, iteragpu\nwith iteragpu.phase('wait'):\n    x = torch.empty(int(sys.argv[1]), device='cuda')\n    time.sleep(300)\n",
    )
    .unwrap();
    let mut cli = Command::new(assert_cmd::cargo::cargo_bin("iteragpu"))
        .env("ITERAGPU_FORK_SERVER", "1")
        .args(["sweep", "--predict", "--python", &python, "--card", "L4"])
        .arg("--output")
        .arg(dir.path().join("s.json"))
        .args(["--vary", "batch=1,2", "--script"])
        .arg(&script)
        .args(["--", "{batch}"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The server and at least one child of it (the trials run two at once on two cores).
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut seen: Vec<u32> = Vec::new();
    loop {
        let now = descendants(cli.id());
        for p in &now {
            if !seen.contains(p) {
                seen.push(*p);
            }
        }
        let grandchildren = now.iter().any(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok())
                    != Some(cli.id())
            })
        });
        if grandchildren {
            // Let the children reach the script's sleep.
            std::thread::sleep(Duration::from_secs(3));
            for p in descendants(cli.id()) {
                if !seen.contains(&p) {
                    seen.push(p);
                }
            }
            break;
        }
        assert!(Instant::now() < deadline, "no forked child appeared");
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
    assert!(seen.len() >= 2, "{seen:?}");
}

//! `sweep --executor slurm` through a real Slurm on this machine (`tools/ci/slurm.sh`: one node,
//! four fake GPUs as gres, no accounting): the trials as the tasks of job arrays, their results
//! collected from the job folder, a task that fails, Ctrl-C reaching the tasks through scancel,
//! a time limit, a resume; and the refusals that need no Slurm. Without a Slurm here the tests
//! that need one say why and pass, except under CI=true, where they fail.

use crate::common::{Run, Series, SeriesStatus, TrialStatus, fixture, read_typed, torch_python};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Whether the local Slurm answers; under CI=true a missing one fails the test.
fn slurm_here(test: &str) -> bool {
    let why = match Command::new("sinfo").args(["-h", "-o", "%T"]).output() {
        Err(e) => format!("sinfo cannot run ({e})"),
        Ok(o) if !o.status.success() => {
            format!("sinfo fails: {}", String::from_utf8_lossy(&o.stderr).trim())
        }
        Ok(o) => {
            let states = String::from_utf8_lossy(&o.stdout).to_string();
            if states
                .lines()
                .any(|s| matches!(s.trim(), "idle" | "mixed" | "allocated"))
            {
                return true;
            }
            format!("no node is up (sinfo: {:?})", states.trim())
        }
    };
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: no local Slurm: {why}; run tools/ci/slurm.sh (as root) first"
    );
    eprintln!("skipped {test}: no local Slurm ({why}); tools/ci/slurm.sh starts one");
    false
}

/// `iteragpu sweep --executor slurm --gres gpu:1 ARGS --output OUT` on the fake torch, with
/// the node's four GPUs (Slurm gives each task one through CUDA_VISIBLE_DEVICES).
fn slurm_sweep(args: &[&str], out: &Path) -> Run {
    Run::sweep()
        .fake_torch()
        .env("FAKE_TORCH_DEVICES", "4")
        .args(["--executor", "slurm", "--gres", "gpu:1"])
        .args(args)
        .output(out)
}

/// The worker pid of trial `i`: the same pid, the same trial.
fn pid(doc: &Series, i: usize) -> Option<u32> {
    doc.trials[i].result.as_ref().unwrap().worker.pid
}

fn series(path: &Path) -> Series {
    read_typed(path)
}

#[test]
fn a_measured_sweep_runs_as_array_tasks_and_its_results_are_collected() {
    if !slurm_here("a_measured_sweep_runs_as_array_tasks") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("series.json");
    // Under an emulated 1 GiB card, context 65536 does not fit: an out-of-memory found in its task.
    slurm_sweep(
        &[
            "--vary",
            "context=1024,2048,65536",
            "--width",
            "1024",
            "--memory-limit",
            "1GiB",
        ],
        &out,
    )
    .succeeds();
    let doc = series(&out);
    assert_eq!(doc.status, SeriesStatus::Complete);
    assert!(doc.protocol.contains("Slurm job array"), "{}", doc.protocol);
    let statuses: Vec<_> = doc.trials.iter().map(|t| t.status).collect();
    assert_eq!(
        statuses,
        [TrialStatus::Ok, TrialStatus::Ok, TrialStatus::Failed]
    );
    assert!(doc.trials[2].out_of_memory, "{:?}", doc.trials[2].error);
    for t in &doc.trials {
        assert!(t.result.as_ref().unwrap().worker.pid.is_some());
        assert!(t.duration_s > 0.0);
    }
    // The job folder: the command, and the one array of the list: its script, cells, job id and
    // each task's files.
    let jobs = dir.path().join("series.slurm");
    assert!(jobs.join("sweep.json").is_file());
    let array = jobs.join("array-1");
    for f in ["job.sh", "cells.json", "job_id"] {
        assert!(array.join(f).is_file(), "{}/{f}", array.display());
    }
    for task in 0..3 {
        for f in ["out", "err", "outcome.json"] {
            let f = format!("task-{task}.{f}");
            assert!(array.join(&f).is_file(), "{}/{f}", array.display());
        }
    }
    assert!(!jobs.join("array-2").exists(), "one sbatch for the list");
    // A second run never reuses the folder.
    let again = dir.path().join("series.json.bak");
    std::fs::rename(&out, &again).unwrap();
    slurm_sweep(&["--vary", "batch=1", "--width", "256"], &out)
        .expect_status(1)
        .stderr_has("series.slurm already exists");
}

#[test]
fn a_task_that_fails_is_a_trial_with_slurms_state_and_its_error() {
    if !slurm_here("a_task_that_fails") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("series.json");
    // The task's iteragpu cannot start the worker: it exits non-zero without an outcome.
    let ran = slurm_sweep(
        &[
            "--vary",
            "batch=1",
            "--width",
            "256",
            "--python",
            "/nonexistent/python3",
        ],
        &out,
    )
    .finish();
    assert_eq!(ran.code(), Some(3), "{}", ran.stderr());
    let doc = series(&out);
    let t = &doc.trials[0];
    assert_eq!(t.status, TrialStatus::Crashed);
    let error = t.error.as_deref().unwrap();
    assert!(
        error.starts_with("Slurm: FAILED (reason NonZeroExitCode, exit "),
        "{error}"
    );
    assert!(error.contains("task-0.err: error:"), "{error}");
}

/// Waits until Slurm runs every task of the sweep's array `n`.
fn wait_running(jobs: &Path, n: usize, tasks: usize) -> String {
    let began = Instant::now();
    loop {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "the array never ran"
        );
        if let Ok(id) = std::fs::read_to_string(jobs.join(format!("array-{n}/job_id"))) {
            let out = Command::new("squeue")
                .args(["-h", "-r", "-t", "RUNNING", "-j", id.trim(), "-o", "%i"])
                .output()
                .unwrap();
            if String::from_utf8_lossy(&out.stdout).lines().count() == tasks {
                return id.trim().to_string();
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn ctrl_c_cancels_the_array_and_saves_the_series_as_interrupted() {
    if !slurm_here("ctrl_c_cancels_the_array") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("series.json");
    // Every trial hangs in its forward pass until cancelled.
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("iteragpu"))
        .env("PYTHONPATH", fixture("../fake_torch"))
        .env("FAKE_TORCH_DEVICES", "4")
        .args(["sweep", "--executor", "slurm", "--gres", "gpu:1"])
        .args(["--vary", "batch=64", "--width", "256", "--output"])
        .arg(&out)
        .env("FAKE_TORCH_HANG_ABOVE", "4000000")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let id = wait_running(&dir.path().join("series.slurm"), 1, 1);
    std::thread::sleep(Duration::from_secs(2)); // the task's worker is in its forward pass
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let began = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            began.elapsed() < Duration::from_secs(90),
            "the sweep did not end after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    assert_eq!(status.code(), Some(3), "{stderr}");
    let doc = series(&out);
    assert_eq!(doc.status, SeriesStatus::Interrupted);
    let t = &doc.trials[0];
    assert_eq!(t.status, TrialStatus::Interrupted);
    let error = t.error.as_deref().unwrap();
    assert!(error.starts_with("Slurm: CANCELLED"), "{error}");
    assert!(
        error.contains("cancelled by this sweep on SIGINT"),
        "{error}"
    );
    // scancel reached the task: Slurm itself says it was cancelled.
    let show = Command::new("scontrol")
        .args(["-o", "show", "job", &id])
        .output()
        .unwrap();
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(show.contains("JobState=CANCELLED"), "{show}");
}

#[test]
fn a_time_limit_is_a_timeout_and_resume_runs_it_again() {
    if !slurm_here("a_time_limit_is_a_timeout") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first.json");
    // batch 64 hangs; Slurm stops it at its one-minute limit (checked about every 30 s).
    let ran = slurm_sweep(
        &["--vary", "batch=1,64", "--width", "256", "--time", "1"],
        &first,
    )
    .env("FAKE_TORCH_HANG_ABOVE", "4000000")
    .timeout(Duration::from_secs(240))
    .finish();
    assert_eq!(ran.code(), Some(3), "{}", ran.stderr());
    let doc = series(&first);
    assert_eq!(doc.trials[0].status, TrialStatus::Ok);
    let t = &doc.trials[1];
    assert_eq!(t.status, TrialStatus::Timeout);
    assert!(
        t.error
            .as_deref()
            .unwrap()
            .starts_with("Slurm: TIMEOUT (reason TimeLimit"),
        "{:?}",
        t.error
    );
    // Resumed without the hang: batch 1 kept as it was, batch 64 run again, a new series.
    let second = dir.path().join("second.json");
    Run::sweep()
        .fake_torch()
        .env("FAKE_TORCH_DEVICES", "4")
        .args(["--executor", "slurm", "--gres", "gpu:1", "--resume"])
        .arg(&first)
        .args(["--vary", "batch=1,64", "--width", "256"])
        .output(&second)
        .succeeds()
        .stderr_has("1 trial(s) kept");
    let again = series(&second);
    assert_eq!(pid(&again, 0), pid(&doc, 0), "kept as it was");
    assert_eq!(again.trials[0].duration_s, doc.trials[0].duration_s);
    assert_eq!(again.trials[1].status, TrialStatus::Ok);
    assert_eq!(
        series(&first).trials[1].status,
        TrialStatus::Timeout,
        "untouched"
    );
    assert!(dir.path().join("second.slurm/array-1").is_dir());
    assert!(
        !dir.path().join("second.slurm/array-2").exists(),
        "the kept trial was not submitted"
    );
}

#[test]
#[ignore = "needs torch (ITERAGPU_TEST_PYTHON) and a local Slurm"]
fn a_predicted_sweep_runs_its_predictions_as_array_tasks() {
    let python = torch_python();
    if !slurm_here("a_predicted_sweep_runs_as_array_tasks") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("series.json");
    Run::sweep()
        .args(["--executor", "slurm", "--partition", "cpu", "--predict"])
        .args(["--card", "L4", "--vary", "batch=1,2", "--width", "256"])
        .args(["--python", &python])
        .output(&out)
        .timeout(Duration::from_secs(300))
        .succeeds();
    let doc = series(&out);
    assert_eq!(doc.trials.len(), 2);
    for t in &doc.trials {
        assert_eq!(t.status, TrialStatus::Ok, "{:?}", t.error);
        assert!(t.prediction.is_some());
        assert!(t.peak_reserved_bytes.is_some());
    }
    assert!(
        dir.path()
            .join("series.slurm/array-1/task-1.outcome.json")
            .is_file()
    );
}

#[test]
fn a_bad_partition_is_refused_before_anything_is_written() {
    if !slurm_here("a_bad_partition_is_refused") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("series.json");
    slurm_sweep(
        &[
            "--vary",
            "batch=1",
            "--width",
            "256",
            "--partition",
            "nosuch",
        ],
        &out,
    )
    .expect_status(1)
    .stderr_has("sbatch refuses --partition=nosuch --gres=gpu:1");
    assert!(!out.exists());
    assert!(!dir.path().join("series.slurm").exists());
}

#[test]
fn slurm_options_need_the_slurm_executor_and_sbatch() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("series.json");
    Run::sweep()
        .fake_torch()
        .args(["--vary", "batch=1", "--width", "256", "--partition", "gpu"])
        .output(&out)
        .expect_status(1)
        .stderr_has("--partition=gpu apply to Slurm's sbatch: add --executor slurm");
    // Without sbatch on PATH: said, exit 1, nothing written.
    Run::sweep()
        .fake_torch()
        .args(["--executor", "slurm", "--vary", "batch=1", "--width", "256"])
        .env("PATH", dir.path())
        .output(&out)
        .expect_status(1)
        .stderr_has("`sbatch` is not on PATH");
    assert!(!out.exists());
    assert!(!dir.path().join("series.slurm").exists());
}

#[test]
fn resume_works_for_a_local_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first.json");
    let ran = Run::sweep()
        .fake_torch()
        .args(["--vary", "batch=1,64", "--width", "256", "--timeout", "3"])
        .env("FAKE_TORCH_HANG_ABOVE", "4000000")
        .output(&first)
        .finish();
    assert_eq!(ran.code(), Some(3), "{}", ran.stderr());
    let doc = series(&first);
    assert_eq!(doc.trials[1].status, TrialStatus::Timeout);
    let second = dir.path().join("second.json");
    Run::sweep()
        .fake_torch()
        .args(["--vary", "batch=1,64", "--width", "256", "--resume"])
        .arg(&first)
        .output(&second)
        .succeeds();
    let again = series(&second);
    assert_eq!(pid(&again, 0), pid(&doc, 0), "kept");
    assert_eq!(again.trials[1].status, TrialStatus::Ok);
    // A resume with other arguments is refused, naming both sweeps.
    Run::sweep()
        .fake_torch()
        .args(["--vary", "width=64,128", "--resume"])
        .arg(&first)
        .output(dir.path().join("third.json"))
        .expect_status(1)
        .stderr_has("resume with the arguments it was run with");
    // Never over the file it resumes.
    Run::sweep()
        .fake_torch()
        .args(["--vary", "batch=1,64", "--width", "256", "--resume"])
        .arg(&first)
        .output(&first)
        .expect_status(1)
        .stderr_has("already exists");
}

#[test]
fn a_frontier_search_runs_its_trials_as_arrays_one_round_after_the_other() {
    if !slurm_here("a_frontier_search_runs_its_trials_as_arrays") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("frontier.json");
    slurm_sweep(
        &[
            "--vary",
            "context=1024..65536",
            "--search",
            "frontier",
            "--frontier-step",
            "4096",
            "--width",
            "1024",
            "--memory-limit",
            "1GiB",
            "--no-prediction",
        ],
        &out,
    )
    .succeeds()
    .stdout_has("frontier of context");
    let doc = series(&out);
    let frontier = doc.frontier.as_ref().expect("a frontier");
    assert!(frontier.last_success.is_some() && frontier.first_failure.is_some());
    // Each round an array of its own in the job folder.
    let arrays = std::fs::read_dir(dir.path().join("frontier.slurm"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("array-")
        })
        .count();
    assert!(
        arrays >= 2 && arrays <= doc.trials.len(),
        "{arrays} arrays, {} trials",
        doc.trials.len()
    );
}

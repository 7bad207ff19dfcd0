//! Signals at every stage, with the fake torch: SIGINT, SIGTERM and SIGHUP sent to `iteragpu`
//! while the worker starts, in the middle of a phase, between the trials of a sweep and at the
//! final write; SIGKILL of the CLI itself. Each test asserts the file on disk, its status, the exit
//! code, that no process of the worker's group survives and that no temporary folder is left.

use crate::common::{fixture, read_json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SIGNALS: [(i32, &str, &str); 3] = [
    (libc::SIGINT, "interrupted", "SIGINT"),
    (libc::SIGTERM, "terminated", "SIGTERM"),
    (libc::SIGHUP, "terminated", "SIGHUP"),
];

/// `iteragpu` with the fake torch, its temporary files in `tmp`, output discarded.
fn spawn(args: &[&str], tmp: &Path, env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("iteragpu"));
    cmd.env("PYTHONPATH", fixture("../fake_torch"))
        .env("TMPDIR", tmp)
        .env_remove("ITERAGPU_PYTHON")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("iteragpu starts")
}

fn send(child: &Child, signal: i32) {
    // SAFETY: kill only sends a signal to our own child.
    unsafe {
        libc::kill(child.id() as i32, signal);
    }
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Processes whose parent is `pid` (from /proc).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // Fields after the command name (which is in parentheses): state, ppid, pgrp, …
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, r)| r.split_whitespace().collect());
        if fields.get(1).and_then(|f| f.parse::<u32>().ok()) == Some(pid) {
            out.push(p);
        }
    }
    out
}

/// Processes of the group `pgid` that are still running (zombies are already gone for our purpose).
fn group(pgid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, r)| r.split_whitespace().collect());
        if fields.get(2).and_then(|f| f.parse::<u32>().ok()) == Some(pgid)
            && fields.first() != Some(&"Z")
        {
            out.push(p);
        }
    }
    out
}

fn assert_group_gone(pgid: u32) {
    wait_until(
        &format!("the worker's group {pgid} to end"),
        Duration::from_secs(10),
        || group(pgid).is_empty(),
    );
}

/// The CLI's temporary folders (the Python package it writes) are all removed.
fn assert_no_temporary_folder(tmp: &Path) {
    let left: Vec<PathBuf> = std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("iteragpu-python-"))
        })
        .collect();
    assert!(left.is_empty(), "temporary folders left: {left:?}");
}

const GUIDE: [&str; 9] = [
    "measure",
    "--batch",
    "2",
    "--context",
    "64",
    "--width",
    "256",
    "--warmup",
    "1",
];

#[test]
fn a_signal_while_the_worker_starts_closes_the_result() {
    for (signal, status, name) in SIGNALS {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("r.json");
        // An interpreter that takes its time to start (as one importing torch may).
        let slow = dir.path().join("slow-python");
        std::fs::write(&slow, "#!/bin/sh\nsleep 30\nexec python3 \"$@\"\n").unwrap();
        std::fs::set_permissions(&slow, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let mut args = GUIDE.to_vec();
        args.extend([
            "--python",
            slow.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ]);
        let mut child = spawn(&args, dir.path(), &[]);
        wait_until("the interpreter to start", Duration::from_secs(10), || {
            !children(child.id()).is_empty()
        });
        let worker = children(child.id())[0];
        send(&child, signal);
        let code = child.wait().unwrap().code();
        assert_eq!(code, Some(3), "{name}");
        let doc = read_json(&out);
        assert_eq!(doc["status"], status, "{name}");
        assert_eq!(doc["stop_signal"], name);
        assert_eq!(doc["phases"].as_array().unwrap().len(), 0);
        assert!(
            doc["failure"]["message"]
                .as_str()
                .unwrap()
                .contains("while the worker was starting"),
            "{}",
            doc["failure"]
        );
        assert_group_gone(worker);
        assert_no_temporary_folder(dir.path());
    }
}

#[test]
fn a_signal_mid_phase_stops_the_group_and_keeps_the_phases() {
    for (signal, status, name) in SIGNALS {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("r.json");
        let mut args = GUIDE.to_vec();
        args.extend(["--output", out.to_str().unwrap()]);
        // The first allocation after the 5th synchronize (cold_forward) sleeps for an hour.
        let mut child = spawn(&args, dir.path(), &[("FAKE_TORCH_HANG_AFTER_SYNC", "5")]);
        wait_until("the worker", Duration::from_secs(10), || {
            !children(child.id()).is_empty()
        });
        let worker = children(child.id())[0];
        std::thread::sleep(Duration::from_millis(2500));
        send(&child, signal);
        assert_eq!(child.wait().unwrap().code(), Some(3), "{name}");
        let doc = read_json(&out);
        assert_eq!(doc["status"], status, "{name}");
        assert_eq!(doc["stop_signal"], name);
        let phases = doc["phases"].as_array().unwrap();
        if let Some(last) = phases.last() {
            assert_eq!(last["status"], status, "the phase it stopped in says so");
        }
        assert_group_gone(worker);
        assert_no_temporary_folder(dir.path());
    }
}

#[test]
fn a_signal_during_a_sweep_closes_the_series() {
    for (signal, status, name) in SIGNALS {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("s.json");
        let args = [
            "sweep",
            "--vary",
            "batch=1,2,64,128",
            "--width",
            "256",
            "--context",
            "64",
            "--output",
            out.to_str().unwrap(),
        ];
        // Trials with batch ≥ 64 allocate more than 4 MiB at once and hang.
        let mut child = spawn(
            &args,
            dir.path(),
            &[("FAKE_TORCH_HANG_ABOVE", &(4u64 << 20).to_string())],
        );
        wait_until(
            "the first trial in the series",
            Duration::from_secs(30),
            || out.exists() && !read_json(&out)["trials"].as_array().unwrap().is_empty(),
        );
        send(&child, signal);
        assert_eq!(child.wait().unwrap().code(), Some(3), "{name}");
        let doc = read_json(&out);
        assert_eq!(doc["status"], status, "{name}: {}", doc["notes"]);
        let trials = doc["trials"].as_array().unwrap();
        assert!(trials.len() <= 3, "the sweep stopped: {}", trials.len());
        for t in trials {
            if let Some(pid) = t["result"]["worker"]["pid"].as_u64() {
                assert_group_gone(pid as u32);
            }
        }
        assert_no_temporary_folder(dir.path());
    }
}

#[test]
fn a_signal_at_the_final_write_never_cuts_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let mut args = GUIDE.to_vec();
    args.extend(["--output", out.to_str().unwrap()]);
    let mut child = spawn(&args, dir.path(), &[]);
    wait_until("the worker", Duration::from_secs(10), || {
        !children(child.id()).is_empty()
    });
    // The moment the worker is gone the CLI writes the file: send SIGTERM then, and keep sending.
    wait_until("the worker to end", Duration::from_secs(30), || {
        children(child.id()).is_empty()
    });
    for _ in 0..20 {
        send(&child, libc::SIGTERM);
        std::thread::sleep(Duration::from_millis(1));
    }
    let code = child.wait().unwrap().code();
    let doc = read_json(&out);
    // The run had finished: the file is whole and says what happened, whatever the timing.
    assert_eq!(doc["schema"], "iteragpu.measure/1");
    assert_eq!(doc["status"], "ok");
    assert_eq!(code, Some(0));
    assert_no_temporary_folder(dir.path());
}

#[test]
fn the_worker_dies_with_a_killed_cli() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let mut args = GUIDE.to_vec();
    args.extend(["--output", out.to_str().unwrap()]);
    let mut child = spawn(&args, dir.path(), &[("FAKE_TORCH_HANG_AFTER_SYNC", "5")]);
    wait_until("the worker", Duration::from_secs(10), || {
        !children(child.id()).is_empty()
    });
    let worker = children(child.id())[0];
    std::thread::sleep(Duration::from_millis(1500));
    send(&child, libc::SIGKILL);
    child.wait().unwrap();
    // SIGKILL may lose the final write, never leave a worker holding the GPU.
    assert_group_gone(worker);
    assert!(!out.exists());
}

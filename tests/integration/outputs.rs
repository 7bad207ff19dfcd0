//! Results are never lost and never half-written: unusable output paths are refused before
//! anything runs; a full disk at the final write sends the result to the temporary folder; a
//! fiche or a CSV is written only if everything else succeeded. File systems are made by the
//! test: a tmpfs in a private mount namespace (`unshare -m`, as root), read-only or nearly full.

use crate::common::{fixture, read_json};
use predicates::prelude::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `iteragpu ARGS` in a private mount namespace where `setup` (shell) ran first. The tests that
/// call it are `#[ignore = "needs root …"]`: where this machine cannot make mount namespaces, they
/// fail under `--include-ignored` and say why.
fn in_namespace(check: &str, setup: &str, args: &[&str], tmp: &Path) -> Output {
    let probe = Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs -o size=16k tmpfs /mnt"])
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        let why = match probe {
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        };
        panic!(
            "{check}: cannot mount a tmpfs in a private namespace (root and `unshare -m` needed): {why}"
        );
    }
    let bin = assert_cmd::cargo::cargo_bin("iteragpu");
    let script = format!("{setup} && exec \"$0\" \"$@\"");
    Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .arg(bin)
        .args(args)
        .env("PYTHONPATH", fixture("../fake_torch"))
        .env("TMPDIR", tmp)
        .env_remove("ITERAGPU_PYTHON")
        .stdin(Stdio::null())
        .output()
        .unwrap()
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

/// An interpreter that leaves a mark when it starts, to show that nothing ran.
fn marking_python(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let mark = dir.join("started");
    let python = dir.join("marking-python");
    std::fs::write(
        &python,
        format!("#!/bin/sh\ntouch {}\nexec python3 \"$@\"\n", mark.display()),
    )
    .unwrap();
    std::fs::set_permissions(&python, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (python, mark)
}

#[test]
#[ignore = "needs root and unshare -m (a tmpfs in a private mount namespace)"]
fn a_read_only_file_system_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("ro");
    std::fs::create_dir(&mnt).unwrap();
    let (python, mark) = marking_python(dir.path());
    let out = mnt.join("r.json");
    let mut args = GUIDE.to_vec();
    args.extend([
        "--python",
        python.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ]);
    let setup = format!("mount -t tmpfs -o ro,size=64k tmpfs {}", mnt.display());
    let run = in_namespace("a read-only output folder", &setup, &args, dir.path());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("Read-only file system"), "{stderr}");
    assert!(
        !stderr.contains("os error"),
        "the reason is said once: {stderr}"
    );
    assert!(!mark.exists(), "no worker was started");
}

#[test]
#[ignore = "needs root and unshare -m (a tmpfs in a private mount namespace)"]
fn a_full_disk_at_the_final_write_keeps_the_result_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("full");
    std::fs::create_dir(&mnt).unwrap();
    let out = mnt.join("r.json");
    let mut args = GUIDE.to_vec();
    args.extend(["--output", out.to_str().unwrap()]);
    // 64 KiB with 56 KiB taken: room for the check, not for the ~17 KB result.
    let setup = format!(
        "mount -t tmpfs -o size=64k tmpfs {0} && head -c 57344 /dev/zero > {0}/filler",
        mnt.display()
    );
    let run = in_namespace("a full disk at the final write", &setup, &args, dir.path());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    let saved: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("iteragpu-r-")
        })
        .collect();
    assert_eq!(saved.len(), 1, "{stderr}");
    assert!(stderr.contains(&saved[0].display().to_string()), "{stderr}");
    let doc = read_json(&saved[0]);
    assert_eq!(doc["status"], "ok");
    // model_load, inputs, cold_forward, warmup and 5 warm_forward repeats: nothing lost.
    assert_eq!(doc["phases"].as_array().unwrap().len(), 9);
}

#[test]
#[ignore = "needs root and unshare -m (a tmpfs in a private mount namespace)"]
fn a_series_that_fills_the_disk_moves_to_the_temporary_folder() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let out = mnt.join("s.json");
    let args = [
        "sweep",
        "--vary",
        "batch=1,2,4",
        "--width",
        "256",
        "--context",
        "64",
        "--output",
        out.to_str().unwrap(),
    ];
    // Room for the series after one trial (~23 KB), not after two.
    let setup = format!(
        "mount -t tmpfs -o size=64k tmpfs {0} && head -c 24576 /dev/zero > {0}/filler",
        mnt.display()
    );
    let run = in_namespace("a full disk during a sweep", &setup, &args, dir.path());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    let moved: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("iteragpu-series-")
        })
        .collect();
    assert_eq!(moved.len(), 1, "{stderr}");
    let doc = read_json(&moved[0]);
    assert_eq!(doc["status"], "complete");
    assert_eq!(doc["trials"].as_array().unwrap().len(), 3, "no trial lost");
    assert!(stderr.contains("saved to"), "{stderr}");
}

#[test]
fn unusable_output_paths_are_refused_first() {
    let dir = tempfile::tempdir().unwrap();
    let (python, mark) = marking_python(dir.path());
    let trailing = format!("{}/r.json/", dir.path().display());
    let folder = dir.path().display().to_string();
    for (output, message) in [
        (trailing.as_str(), "ends with `/`"),
        (folder.as_str(), "is a folder"),
        ("/no/such/folder/r.json", "does not exist"),
    ] {
        let mut args = GUIDE.to_vec();
        args.extend(["--python", python.to_str().unwrap(), "--output", output]);
        crate::common::with_fake_torch()
            .args(&args)
            .assert()
            .code(1)
            .stderr(predicate::str::contains(message))
            .stderr(predicate::str::contains("series").not());
    }
    assert!(!mark.exists(), "no worker was started");
}

#[test]
fn a_closed_or_full_standard_output_writes_no_fiche_and_no_csv() {
    let dir = tempfile::tempdir().unwrap();
    let result = dir.path().join("r.json");
    crate::common::with_fake_torch()
        .args(GUIDE)
        .arg("--output")
        .arg(&result)
        .assert()
        .success();
    let full = || std::fs::File::create("/dev/full").unwrap();
    let fiche = dir.path().join("fiche.html");
    let run = Command::new(assert_cmd::cargo::cargo_bin("iteragpu"))
        .arg("report")
        .arg(&result)
        .arg("--output")
        .arg(&fiche)
        .stdout(full())
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&run.stderr).contains("no fiche was written"));
    assert!(!fiche.exists());
    let csv = dir.path().join("c.csv");
    let run = Command::new(assert_cmd::cargo::cargo_bin("iteragpu"))
        .arg("compare")
        .args([&result, &result])
        .arg("--csv")
        .arg(&csv)
        .stdout(full())
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    assert!(!csv.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "nothing but the result"
    );
    // A measurement keeps its file and its status when only the table cannot be printed.
    let other = dir.path().join("r2.json");
    let run = Command::new(assert_cmd::cargo::cargo_bin("iteragpu"))
        .args(GUIDE)
        .arg("--output")
        .arg(&other)
        .env("PYTHONPATH", fixture("../fake_torch"))
        .stdout(full())
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0));
    assert_eq!(read_json(&other)["status"], "ok");
}

/// Inputs are regular files under a size cap, checked before reading: a FIFO (which would block
/// until a writer comes), `/dev/zero` (which never ends), a folder and a file above the cap are
/// refused at once with the reason, for every command that reads documents.
#[test]
fn inputs_that_are_not_regular_files_or_too_large_are_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("result.json");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let huge = dir.path().join("huge.json");
    let file = std::fs::File::create(&huge).unwrap();
    // Sparse: 300 MiB announced, nothing written.
    file.set_len(300 << 20).unwrap();
    let folder = dir.path().join("folder");
    std::fs::create_dir(&folder).unwrap();
    let cases: [(&Path, &str); 4] = [
        (&fifo, "named pipe"),
        (Path::new("/dev/zero"), "not a regular file"),
        (&folder, "folder"),
        (&huge, "above the"),
    ];
    for (input, reason) in cases {
        for command in [vec!["explain"], vec!["compare"], vec!["report"]] {
            let mut cmd = assert_cmd::Command::cargo_bin("iteragpu").unwrap();
            cmd.args(&command).arg(input);
            if command[0] == "compare" {
                cmd.arg(input);
            }
            if command[0] == "report" {
                cmd.arg("--output").arg(dir.path().join("fiche.html"));
            }
            cmd.timeout(std::time::Duration::from_secs(20))
                .assert()
                .code(1)
                .stderr(predicate::str::contains(reason));
        }
    }
    assert!(!dir.path().join("fiche.html").exists());
}

/// Strings carried by a file (a phase named by a script, a note) are shown, never obeyed: no
/// escape sequence reaches the terminal, and no CSV cell is a formula a spreadsheet would run.
#[test]
fn file_borne_text_is_safe_on_the_terminal_and_in_csv() {
    let dir = tempfile::tempdir().unwrap();
    let result = dir.path().join("r.json");
    crate::common::with_fake_torch()
        .args([
            "measure",
            "--batch",
            "2",
            "--context",
            "16",
            "--width",
            "64",
            "--output",
        ])
        .arg(&result)
        .assert()
        .success();
    let mut doc = read_json(&result);
    doc["phases"][0]["name"] =
        serde_json::json!("\u{1b}[2J\u{1b}]0;pwned\u{7}=HYPERLINK(\"http://x\",\"y\")");
    doc["phases"][1]["name"] = serde_json::json!("=HYPERLINK(\"http://x\",\"y\")");
    doc["notes"] = serde_json::json!(["\u{1b}[31mred\u{1b}[0m note"]);
    let edited = dir.path().join("edited.json");
    std::fs::write(&edited, serde_json::to_string(&doc).unwrap()).unwrap();
    let csv = dir.path().join("c.csv");
    for args in [
        vec!["explain"],
        vec!["compare", "--csv", csv.to_str().unwrap()],
    ] {
        let mut cmd = assert_cmd::Command::cargo_bin("iteragpu").unwrap();
        cmd.args(&args).arg(&edited);
        if args[0] == "compare" {
            cmd.arg(&result);
        }
        let run = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(
            !stdout.contains('\u{1b}') && !stdout.contains('\u{7}'),
            "{stdout}"
        );
        if args[0] == "compare" {
            assert!(
                run.status.success(),
                "{}",
                String::from_utf8_lossy(&run.stderr)
            );
            assert!(stdout.contains("\\x1b[2J"), "{stdout}");
        }
    }
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert!(!csv.contains(",=HYPERLINK"), "{csv}");
    assert!(!csv.contains(",\"=HYPERLINK"), "{csv}");
    assert!(csv.contains(",\"'=HYPERLINK(\"\"http://x\"\""), "{csv}");
}

/// `iteragpu … 2>&1 | head -1`: once the reader is gone, both standard output and standard error
/// are closed pipes. The command ends with its own error status, never Rust's panic (101).
#[test]
fn closed_standard_output_and_error_end_without_a_panic() {
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("iteragpu"))
        .args(["estimate", "--model"])
        .arg(crate::common::fixture("models/llama-3-8b"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before anything is read: every write fails with EPIPE.
    drop(child.stdout.take());
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert_ne!(status.code(), Some(101), "panicked: {status:?}");
    assert_eq!(status.code(), Some(1), "{status:?}");
}

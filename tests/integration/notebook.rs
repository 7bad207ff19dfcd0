//! The notebook's `iteragpu.Recorder` (no CLI started it): it records the worker's events and the
//! `iteragpu` command builds the result from them (`iteragpu from-events`), so its document is the
//! CLI's, built by the same code.

use crate::common::{fixture, iteragpu, read_typed};
use iteragpu::schema::measure::MeasureResult;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A notebook's cell: a describe, and a phase that holds 4 MB on the fake torch.
fn cell(out: &Path) -> String {
    format!(
        "import torch, iteragpu\nwith iteragpu.Recorder(output={:?}) as rec:\n    rec.describe(model='nb', batch=2)\n    with rec.phase('load'):\n        w = torch.zeros(1000, 1000, device='cuda:0')\n",
        out.display().to_string()
    )
}

/// Runs `code` in `python3` with the fake torch and this repository's package; the Recorder's
/// builder is `bin` (`ITERAGPU_BIN`).
fn notebook(code: &str, bin: &Path) -> Output {
    let pythonpath = std::env::join_paths([
        fixture("../fake_torch"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python"),
    ])
    .unwrap();
    Command::new("python3")
        .env("PYTHONPATH", &pythonpath)
        .env("ITERAGPU_BIN", bin)
        .args(["-c", code])
        .output()
        .unwrap()
}

fn the_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_iteragpu"))
}

#[test]
fn the_notebook_recorder_writes_the_same_schema() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("notebook.json");
    let code = cell(&out);
    let first = notebook(&code, &the_binary());
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let result: iteragpu::schema::measure::MeasureResult =
        serde_json::from_str(&text).expect("the CLI's schema");
    assert_eq!(result.schema, "iteragpu.measure/1");
    assert_eq!(result.phases.len(), 1);
    assert_eq!(result.identity.declared["model"], "nb");
    assert!(
        result
            .environment
            .driver_reason
            .unwrap()
            .contains("without the CLI")
    );
    assert_eq!(
        result.identity.code_hash,
        iteragpu::python_side::code_hash(),
        "same code, same hash"
    );
    assert!(result.phases[0].devices[0].end_allocated_bytes.unwrap() >= 4_000_000);
    // The events are gone once the result holds them.
    assert!(!dir.path().join("notebook.json.events.jsonl").exists());
    // Never overwritten.
    let second = notebook(&code, &the_binary());
    assert!(!second.status.success());
    assert!(String::from_utf8_lossy(&second.stderr).contains("already exists"));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), text);
}

/// One builder: the Recorder's file is what `iteragpu from-events` makes of the events it
/// recorded (kept aside here by a wrapper around the command), every event valid against the
/// contract; what the notebook lacks (the CLI's NVML view, a plan) is null and said, never 0.
#[test]
fn the_recorders_file_is_what_the_rust_builder_makes_of_its_events() {
    let dir = tempfile::tempdir().unwrap();
    let kept = dir.path().join("kept.events.jsonl");
    let wrapper = dir.path().join("iteragpu");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ncp \"$2\" {:?}\nexec {:?} \"$@\"\n",
            kept.display().to_string(),
            the_binary().display().to_string()
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&wrapper).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&wrapper, perms).unwrap();
    let out = dir.path().join("nb.json");
    let run = notebook(&cell(&out), &wrapper);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );

    let lines: Vec<String> = std::fs::read_to_string(&kept)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(
        crate::contract::valid_event_types(&lines),
        [
            "describe",
            "done",
            "environment",
            "hello",
            "phase_end",
            "phase_start"
        ],
        "the worker's own events, all valid"
    );
    let rebuilt = dir.path().join("rebuilt.json");
    iteragpu()
        .arg("from-events")
        .arg(&kept)
        .arg("--output")
        .arg(&rebuilt)
        .assert()
        .success();
    let mut recorded: serde_json::Value = crate::common::read_json(&out);
    let mut built: serde_json::Value = crate::common::read_json(&rebuilt);
    for doc in [&mut recorded, &mut built] {
        doc.as_object_mut().unwrap().remove("ended_at");
    }
    assert_eq!(recorded, built, "the same document from the same events");

    let result: MeasureResult = read_typed(&out);
    assert_eq!(result.identity.workload, "notebook");
    assert_eq!(result.scope.phases, ["load"]);
    assert_eq!(result.dimensions["batch"], 2);
    assert_eq!(
        result.phases[0].devices[0].peak_allocated_bytes,
        Some(4_000_256)
    );
    assert_eq!(result.environment.driver, None);
    assert_eq!(result.environment.nvml_sample_interval_ms, None);
    let driver = &result.phases[0].driver.as_ref().unwrap()[0];
    assert_eq!(driver.peak_process_used_bytes, None);
    assert!(driver.reason.as_deref().unwrap().contains("no NVML view"));
    assert_eq!(result.worker.exit_code, None);
    assert!(result.notes.iter().any(|n| n.contains("caller's process")));
}

/// Without the `iteragpu` command the Recorder says how to get it and keeps its events, from
/// which the command builds the result later: nothing is lost. The command refuses events no
/// notebook recorded, and never overwrites.
#[test]
fn without_the_command_the_events_are_kept_and_the_fix_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nb.json");
    let events = dir.path().join("nb.json.events.jsonl");
    let run = notebook(&cell(&out), &dir.path().join("no/such/iteragpu"));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    for said in [
        "FileNotFoundError",
        "was not built",
        "pip install iteragpu",
        "ITERAGPU_BIN",
        "from-events",
        "the events are kept in",
    ] {
        assert!(stderr.contains(said), "{said:?} not in {stderr}");
    }
    assert!(!out.exists());
    assert!(events.is_file());
    // A second Recorder with the same name refuses rather than mixing its events in.
    let again = notebook(&cell(&out), &the_binary());
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("iteragpu from-events"));

    iteragpu()
        .arg("from-events")
        .arg(&events)
        .arg("--output")
        .arg(&out)
        .assert()
        .success();
    let result: MeasureResult = read_typed(&out);
    assert_eq!(result.phases[0].name, "load");
    iteragpu()
        .arg("from-events")
        .arg(&events)
        .arg("--output")
        .arg(&out)
        .assert()
        .code(1)
        .stderr(predicates::str::contains("exists"));

    let worker = dir.path().join("worker.jsonl");
    std::fs::write(
        &worker,
        "{\"type\": \"hello\", \"data\": {\"pid\": 1, \"protocol\": 1}}\n",
    )
    .unwrap();
    iteragpu()
        .arg("from-events")
        .arg(&worker)
        .arg("--output")
        .arg(dir.path().join("w.json"))
        .assert()
        .code(1)
        .stderr(predicates::str::contains("notebook Recorder"));
    assert!(!dir.path().join("w.json").exists());
}

/// A phase that raises fails the notebook's result as it fails a worker's: the exception still
/// reaches the notebook, the result is written with its failure.
#[test]
fn a_failed_phase_fails_the_notebooks_result() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nb.json");
    let code = cell(&out) + "    with rec.phase('step'):\n        raise ValueError('nope')\n";
    let run = notebook(&code, &the_binary());
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("ValueError: nope"));
    let result: MeasureResult = read_typed(&out);
    assert_eq!(result.status.to_string(), "failed");
    let failure = result.failure.unwrap();
    assert_eq!(failure.phase.as_deref(), Some("step"));
    assert_eq!(failure.error_type.as_deref(), Some("ValueError"));
    assert_eq!(result.scope.phases, ["load", "step"]);
    assert!(!dir.path().join("nb.json.events.jsonl").exists());
}

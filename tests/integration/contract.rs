//! The one contract between Rust and Python: the JSON Schemas of the worker's spec and of its
//! events are generated from the Rust types (`schemars`) and committed in `schema/`; the Python
//! side is checked against them (`tests/python/contract.py`, standard library only, so these
//! tests need nothing but `python3`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use iteragpu::schema::events::{Event, Line};
use iteragpu::schema::spec::WorkerSpec;

use crate::common::{documented_specs, fixture};

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The schema files and the types they are generated from.
fn generated() -> [(&'static str, String); 2] {
    let pretty = |schema: schemars::Schema| {
        serde_json::to_string_pretty(&schema).expect("a schema serialises") + "\n"
    };
    [
        (
            "schema/worker-spec.schema.json",
            pretty(schemars::schema_for!(WorkerSpec)),
        ),
        (
            "schema/events.schema.json",
            pretty(schemars::schema_for!(Event)),
        ),
    ]
}

/// The committed schemas are what the types generate: a change to a spec or event type changes
/// them in the same commit (`ITERAGPU_BLESS=1` rewrites them).
#[test]
fn schema_files_match_the_types() {
    let bless = std::env::var_os("ITERAGPU_BLESS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (path, text) in generated() {
        let file = repo(path);
        if bless {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, &text).unwrap();
        } else if std::fs::read_to_string(&file).ok().as_deref() != Some(text.as_str()) {
            stale.push(path);
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} differ from what the Rust types generate; regenerate them with\n  ITERAGPU_BLESS=1 cargo test --test integration schema_files\nand commit them with the change to the types"
    );
}

/// Runs `tests/python/contract.py ARGS` with `stdin` and returns its standard output; fails the
/// test with its standard error when it fails.
fn contract_py(args: &[&str], stdin: &str, pythonpath: &[PathBuf]) -> String {
    let mut child = Command::new("python3")
        .arg(repo("tests/python/contract.py"))
        .args(args)
        .env("PYTHONPATH", std::env::join_paths(pythonpath).unwrap())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "contract.py {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `python/iteragpu/spec.py` reads what the schema describes: for each workload, the same keys,
/// the same required ones; and the documented examples of `src/schema/spec.rs` are valid.
#[test]
fn spec_py_follows_the_spec_schema() {
    let examples = documented_specs();
    let out = contract_py(
        &[
            "spec",
            repo("schema/worker-spec.schema.json").to_str().unwrap(),
        ],
        &examples.join("\n"),
        &[repo("python")],
    );
    let mut expected: Vec<String> = ["dense", "causal-lm", "vision", "vlm", "script"]
        .iter()
        .map(|w| format!("workload {w}: spec.py's keys are the schema's"))
        .collect();
    expected.push(format!("{} examples valid", examples.len()));
    assert_eq!(out.lines().collect::<Vec<_>>(), expected, "{out}");
}

/// The events one worker run emits (`python -m iteragpu.worker SPEC.json`), on the fake torch
/// when `python` is `python3` (its own switches in `env`). The spec must be one Rust writes.
fn worker_events(
    python: &str,
    spec: serde_json::Value,
    env: &[(&str, &str)],
    dir: &Path,
) -> Vec<String> {
    serde_json::from_value::<WorkerSpec>(spec.clone())
        .unwrap_or_else(|e| panic!("not a spec Rust writes ({e}): {spec}"));
    let file = dir.join("spec.json");
    std::fs::write(&file, spec.to_string()).unwrap();
    let fake_torch = python == "python3";
    let pythonpath = if fake_torch {
        std::env::join_paths([fixture("../fake_torch"), repo("python")]).unwrap()
    } else {
        repo("python").into_os_string()
    };
    let mut command = Command::new(python);
    command
        .args(["-m", "iteragpu.worker"])
        .arg(&file)
        .env("PYTHONPATH", pythonpath)
        .current_dir(dir);
    for var in [
        "FAKE_TORCH_NO_CUDA",
        "FAKE_TORCH_CAPACITY",
        "FAKE_TORCH_DEVICES",
    ] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    let out = command.output().expect("the worker runs");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Checks each line against the events schema (`contract.py events`) and as a known Rust event;
/// returns the event types seen, sorted.
pub fn valid_event_types(lines: &[String]) -> Vec<String> {
    for line in lines {
        assert!(
            matches!(iteragpu::schema::events::parse(line), Line::Event(_)),
            "not a known event: {line}"
        );
    }
    let out = contract_py(
        &[
            "events",
            repo("schema/events.schema.json").to_str().unwrap(),
        ],
        &lines.join("\n"),
        &[repo("python")],
    );
    out.lines().map(str::to_string).collect()
}

/// Every event the worker emits is valid against the events schema, and parses as a known Rust
/// event: a dense run with the allocator's timeline, a training run on an emulated smaller card,
/// nested markers, a fork, an out-of-memory on a 64 MiB card, and a machine without CUDA.
#[test]
fn the_workers_events_follow_the_events_schema() {
    let dir = tempfile::tempdir().unwrap();
    let dense = serde_json::json!({"workload": "dense", "devices": ["cuda:0"], "seed": 0,
        "batch": 2, "context": 16, "width": 64, "depth": 2, "dtype": "float32", "warmup": 1,
        "repeats": 1, "empty_cache": "between-repeats", "whole_loop": false});
    let mut timeline = dense.clone();
    timeline["history"] = serde_json::json!({"mode": "timeline", "max_entries": 1000,
        "snapshot": dir.path().join("snapshot.pickle")});
    let mut train = dense.clone();
    for (key, value) in [
        ("task", serde_json::json!("train")),
        ("steps", serde_json::json!(2)),
        ("optimizer", serde_json::json!("adamw")),
        ("precision", serde_json::json!("bf16-mixed")),
        ("gradient_checkpointing", serde_json::json!(true)),
        ("memory_limit_bytes", serde_json::json!(8u64 << 30)),
        ("history", serde_json::json!({"mode": "state"})),
    ] {
        train[key] = value;
    }
    let mut too_wide = dense.clone();
    too_wide["width"] = serde_json::json!(2048);
    too_wide["history"] = serde_json::json!({"mode": "state", "oom_dir": dir.path()});
    let script = |name: &str| {
        serde_json::json!({"workload": "script", "devices": ["cuda:0"], "seed": 0,
            "script": fixture(&format!("scripts/{name}")), "script_args": [],
            "history": {"mode": "state"}})
    };
    let runs: Vec<(serde_json::Value, Vec<(&str, &str)>)> = vec![
        (timeline, vec![]),
        (train, vec![]),
        (script("nested_markers.py"), vec![]),
        (script("forks.py"), vec![]),
        (too_wide, vec![("FAKE_TORCH_CAPACITY", "67108864")]),
        (dense, vec![("FAKE_TORCH_NO_CUDA", "1")]),
    ];
    let mut lines = Vec::new();
    for (spec, env) in runs {
        lines.extend(worker_events("python3", spec, &env, dir.path()));
    }
    assert_eq!(
        valid_event_types(&lines),
        [
            "describe",
            "done",
            "environment",
            "hello",
            "history",
            "note",
            "oom_snapshot",
            "phase_end",
            "phase_start",
            "snapshot",
            "unavailable",
        ],
        "the event types seen, all valid"
    );
    // The snapshot the worker dumped at the out-of-memory is one the CLI's reader reads.
    let dump = lines
        .iter()
        .find_map(|l| match iteragpu::schema::events::parse(l) {
            Line::Event(Event::OomSnapshot(d)) => Some(d),
            _ => None,
        })
        .expect("an oom_snapshot event");
    let path = dump.snapshot.as_ref().expect("the snapshot dumped");
    assert_eq!(path.parent(), Some(dir.path()), "in the folder given");
    iteragpu::explain::snapshot::summarize_file(path, &Default::default()).expect("it is read");
}

/// The event types the worker's source emits by name are exactly the schema's: Python sends
/// none that Rust would keep as unknown, and Rust knows none that no worker sends.
#[test]
fn the_worker_emits_every_event_of_the_schema_and_no_other() {
    let out = contract_py(
        &[
            "emitted",
            repo("schema/events.schema.json").to_str().unwrap(),
        ],
        "",
        &[repo("python")],
    );
    assert_eq!(out.lines().count(), 24, "{out}");
}

/// The Python tracker's `Category` enum and Rust's `schema::trace::Category` name the same
/// kinds of storage, word for word.
#[test]
fn the_trackers_categories_are_the_schemas() {
    let out = contract_py(
        &[
            "categories",
            repo("schema/events.schema.json").to_str().unwrap(),
        ],
        "",
        &[repo("python")],
    );
    assert_eq!(
        out.lines().count(),
        <iteragpu::schema::trace::Category as strum::VariantArray>::VARIANTS.len(),
        "{out}"
    );
}

/// A prediction's storage events are valid too: a loop on data (placeholders, an unpredictable
/// op), mixed precision with a GradScaler (a note) and a script's own peak reset, on fake CUDA
/// tensors with real torch.
#[test]
#[ignore = "needs torch"]
fn the_predicting_workers_events_follow_the_events_schema() {
    let python = crate::common::python_with(&["torch"]);
    let dir = tempfile::tempdir().unwrap();
    let target = serde_json::json!({"name": "H200", "capability": [9, 0],
        "total_memory": 150_754_820_096u64, "total_memory_source": "the catalog",
        "context_bytes": iteragpu::schema::target::H200_CONTEXT_BYTES, "context_source": "measured",
        "workspaces": iteragpu::schema::target::SM90_WORKSPACES, "workspaces_source": "measured",
        "allocator_backend": "native", "cudnn_version": null});
    let mut lines = Vec::new();
    // reset_peaks.py resets the peaks itself (the automatic phases never do).
    for name in ["data_loop.py", "amp_scaler.py", "reset_peaks.py"] {
        let spec = serde_json::json!({"workload": "script", "devices": ["cuda:0"], "seed": 0,
            "script": fixture(&format!("scripts/predict/{name}")), "script_args": [],
            "predict": target});
        lines.extend(worker_events(&python, spec, &[], dir.path()));
    }
    assert_eq!(
        valid_event_types(&lines),
        [
            "alloc",
            "describe",
            "done",
            "environment",
            "free",
            "hello",
            "note",
            "phase_end",
            "phase_start",
            "placeholder",
            "placeholder_count",
            // The script's own reset of the peaks (an event of the trace).
            "reset_peaks",
            "tag",
            "unpredictable",
        ],
        "the event types seen, all valid"
    );
    // A sweep's symbolic trace (predict/symbolic.py): its expressions and its domain, valid too.
    let spec = serde_json::json!({"workload": "dense", "devices": ["cuda:0"], "seed": 0,
        "batch": 4, "context": 64, "width": 256, "depth": 1, "dtype": "float32", "warmup": 0,
        "repeats": 1, "empty_cache": "never", "whole_loop": false, "predict": target});
    let traced = worker_events(
        &python,
        spec,
        &[("ITERAGPU_PREDICT_SYMBOLIC_TRACE", r#"{"batch": [2, 64]}"#)],
        dir.path(),
    );
    let types = valid_event_types(&traced);
    assert!(types.iter().any(|t| t == "domain"), "{types:?}");
}

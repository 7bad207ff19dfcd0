//! `measure` and `environment` end to end with the fake torch (CI has no GPU).

use crate::common::{
    EmptyCache, Phases, Run, RunStatus, documented_specs, fixture, python_checks, read_json,
    torch_python, with_fake_torch,
};
use predicates::prelude::*;
use std::path::Path;

const GUIDE: [&str; 14] = [
    "measure",
    "--device",
    "cuda:0",
    "--batch",
    "2",
    "--context",
    "128",
    "--width",
    "1024",
    "--dtype",
    "float32",
    "--warmup",
    "3",
    "--repeats",
];

/// The guide's measure command (5 warm repeats) on the fake torch, writing `out`.
fn guide(out: &Path) -> Run {
    Run::measure()
        .fake_torch()
        .args(&GUIDE[1..])
        .arg("5")
        .output(out)
}

#[test]
fn the_guides_measure_command() {
    let dir = tempfile::tempdir().unwrap();
    let doc = guide(&dir.path().join("mesures.json"))
        .succeeds()
        .stdout_has("status ok")
        .result();
    assert_eq!(doc.schema, "iteragpu.measure/1");
    assert_eq!(doc.status, RunStatus::Ok);
    assert_eq!(doc.identity.workload, "dense");
    assert!(doc.identity.code_hash.starts_with("sha256:"));
    assert_eq!(
        doc.identity.declared["parameters"],
        4 * (8 * 1024 * 1024 + 7 * 1024)
    );
    assert_eq!(doc.dimensions["batch"], 2);
    assert_eq!(doc.dimensions["width"], 1024);
    assert_eq!(doc.policies.process, "fresh");
    assert_eq!(doc.policies.warmup, 3);
    assert_eq!(doc.policies.repeats, 5);
    assert_eq!(doc.policies.empty_cache, EmptyCache::Never);
    let names = doc.phase_names();
    assert_eq!(
        &names[..4],
        ["model_load", "inputs", "cold_forward", "warmup"]
    );
    assert_eq!(names.iter().filter(|n| **n == "warm_forward").count(), 5);
    // What the worker ran is what the result says it runs (workload::plan::scope_phases): the Python
    // workload and the Rust list name the same phases (a repeated phase once).
    let mut ran: Vec<&str> = Vec::new();
    for n in &names {
        if !ran.contains(n) {
            ran.push(n);
        }
    }
    assert_eq!(ran, doc.scope.phases);
    for phase in &doc.phases {
        assert_eq!(phase.status, RunStatus::Ok);
        assert!(phase.duration_s.unwrap() >= 0.0);
        let d = &phase.devices[0];
        assert_eq!(d.device, "cuda:0");
        for (key, value) in [
            ("start_allocated_bytes", d.start_allocated_bytes),
            ("start_reserved_bytes", d.start_reserved_bytes),
            ("peak_allocated_bytes", d.peak_allocated_bytes),
            ("peak_reserved_bytes", d.peak_reserved_bytes),
            ("end_allocated_bytes", d.end_allocated_bytes),
            ("end_reserved_bytes", d.end_reserved_bytes),
        ] {
            assert!(value.is_some(), "{key} in {phase:?}");
        }
        assert!(d.peak_allocated_bytes >= d.start_allocated_bytes);
        assert!(d.peak_reserved_bytes >= d.peak_allocated_bytes);
        assert!(d.mem_get_info.is_some(), "mem_get_info in {phase:?}");
        // No driver here: the driver's view is null with a reason, never 0.
        let driver = &phase.driver.as_ref().expect("the driver's view")[0];
        assert!(driver.peak_process_used_bytes.is_none());
        assert!(driver.reason.as_deref().unwrap().contains("NVIDIA"));
    }
    // The model's weights (fp32) are held from model_load on.
    let load = &doc.phases[0].devices[0];
    assert!(load.end_allocated_bytes.unwrap() >= 4 * 4 * (8 * 1024 * 1024 + 7 * 1024));
    let inputs = &doc.phases[1];
    assert_eq!(
        inputs.inputs["processed_shape"],
        serde_json::json!([2, 128, 1024])
    );
    assert_eq!(doc.warm_summary[0].repeats, 5);
    let python = doc
        .environment
        .python
        .as_ref()
        .expect("the worker's environment");
    let torch = python.torch.as_ref().expect("torch's description");
    assert!(torch["version"].as_str().unwrap().contains("fake"));
    assert!(doc.notes.join("\n").contains("not a GPU measurement"));
    assert!(doc.failure.is_none());
}

#[test]
fn an_existing_output_is_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mesures.json");
    std::fs::write(&out, "precious").unwrap();
    guide(&out).expect_status(1).stderr_has("already exists");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "precious");
}

#[test]
fn missing_pytorch_or_gpu_exits_2_without_a_file() {
    let dir = tempfile::tempdir().unwrap();
    type Case<'a> = (&'a str, Option<(&'a str, &'a str)>, &'a [&'a str], &'a str);
    let cases: [Case; 4] = [
        ("no torch", None, &[], "PyTorch cannot be imported"),
        (
            "no backend",
            Some(("FAKE_TORCH_NO_CUDA", "1")),
            &[],
            "is_available() is False",
        ),
        (
            "cpu build",
            Some(("FAKE_TORCH_CPU_ONLY", "1")),
            &[],
            "CPU-only",
        ),
        ("bad index", None, &["--device", "cuda:3"], "does not exist"),
    ];
    for (name, env, extra, message) in cases {
        let out = dir.path().join(format!("{}.json", name.replace(' ', "_")));
        let mut run = Run::measure().fake_torch().output(&out).args(extra);
        if name == "no torch" {
            run = run.env("PYTHONPATH", fixture("no_torch"));
        }
        if let Some((k, v)) = env {
            run = run.env(k, v);
        }
        run.expect_status(2).stderr_has(message);
        assert!(!out.exists(), "{name}: no file may be written");
    }
}

#[test]
fn an_interpreter_that_is_not_python_measures_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for python in ["/bin/false", "/no/such/python"] {
        Run::measure()
            .fake_torch()
            .args(["--python", python])
            .output(dir.path().join("none.json"))
            .expect_status(2)
            .stderr_has(python)
            .wrote_nothing();
    }
}

#[test]
fn out_of_memory_in_cold_forward_keeps_completed_phases() {
    let dir = tempfile::tempdir().unwrap();
    let doc = guide(&dir.path().join("oom.json"))
        .env("FAKE_TORCH_CAPACITY", (134u64 << 20).to_string())
        .expect_status(3)
        .stdout_has("failure in cold_forward")
        .result();
    assert_eq!(doc.status, RunStatus::Failed);
    assert_eq!(doc.phase_names(), ["model_load", "inputs", "cold_forward"]);
    assert_eq!(doc.phases[0].status, RunStatus::Ok);
    assert_eq!(doc.phases[1].status, RunStatus::Ok);
    let cold = &doc.phases[2];
    assert_eq!(cold.status, RunStatus::Failed);
    let error = cold.error.as_ref().expect("the phase's error");
    assert_eq!(error.kind, "OutOfMemoryError");
    assert!(error.out_of_memory);
    // The last values read are kept.
    assert!(cold.devices[0].peak_allocated_bytes.is_some());
    let failure = doc.failure.as_ref().expect("the failure");
    assert_eq!(failure.phase.as_deref(), Some("cold_forward"));
    assert!(failure.out_of_memory);
    assert!(failure.caution.contains("partial peak"));
}

#[test]
fn a_crash_mid_phase_leaves_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // Synchronize #5 opens cold_forward; its first allocation kills the worker with SIGSEGV.
    let doc = guide(&dir.path().join("crash.json"))
        .env("FAKE_TORCH_CRASH_AFTER_SYNC", "5")
        .expect_status(3)
        .result();
    assert_eq!(doc.status, RunStatus::Crashed);
    assert_eq!(doc.worker.signal, Some(11));
    assert_eq!(doc.phase_names(), ["model_load", "inputs", "cold_forward"]);
    assert_eq!(doc.phases[2].status, RunStatus::Crashed);
    assert!(
        doc.phases[2]
            .note
            .as_deref()
            .unwrap()
            .contains("during this phase")
    );
    assert_eq!(doc.failure.unwrap().phase.as_deref(), Some("cold_forward"));
}

fn assert_gone(pid: u32) {
    for _ in 0..50 {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("worker {pid} is still alive");
}

#[test]
fn a_timeout_kills_the_worker_and_keeps_results() {
    let dir = tempfile::tempdir().unwrap();
    let doc = guide(&dir.path().join("timeout.json"))
        .env("FAKE_TORCH_HANG_AFTER_SYNC", "5")
        .args(["--timeout", "5"])
        .expect_status(3)
        .result();
    assert_eq!(doc.status, RunStatus::Timeout);
    assert_eq!(doc.phase_names(), ["model_load", "inputs", "cold_forward"]);
    assert_eq!(doc.phases[2].status, RunStatus::Timeout);
    assert_gone(doc.worker.pid.unwrap());
}

#[test]
fn ctrl_c_interrupts_and_keeps_results() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("interrupted.json");
    let bin = assert_cmd::cargo::cargo_bin("iteragpu");
    let mut child = std::process::Command::new(bin)
        .env("PYTHONPATH", fixture("../fake_torch"))
        .env("FAKE_TORCH_HANG_AFTER_SYNC", "5")
        .args(GUIDE)
        .args(["5", "--output"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the worker is stuck in cold_forward, then press Ctrl-C.
    // (a slow machine may still be starting the worker: the status is what must hold)
    std::thread::sleep(std::time::Duration::from_millis(3000));
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(3));
    let doc = read_json(&out);
    assert_eq!(doc["status"], "interrupted");
    assert_eq!(
        doc["phases"].as_array().unwrap().last().unwrap()["status"],
        "interrupted"
    );
    assert_gone(doc["worker"]["pid"].as_u64().unwrap() as u32);
}

#[test]
fn two_devices_are_recorded_apart() {
    let dir = tempfile::tempdir().unwrap();
    let doc = Run::measure()
        .fake_torch()
        .env("FAKE_TORCH_DEVICES", "2")
        .args(["--device", "cuda:0,cuda:1", "--width", "256"])
        .output(dir.path().join("two.json"))
        .succeeds()
        .result();
    for phase in &doc.phases {
        let devices: Vec<&str> = phase.devices.iter().map(|d| d.device.as_str()).collect();
        assert_eq!(devices, ["cuda:0", "cuda:1"]);
    }
    // Half of the 4 blocks live on each device: both hold weights after model_load.
    let load = &doc.phases[0].devices;
    assert!(load[0].end_allocated_bytes.unwrap() > 0);
    assert_eq!(load[0].end_allocated_bytes, load[1].end_allocated_bytes);
    assert_eq!(doc.warm_summary.len(), 2);
}

#[test]
fn workload_prints_never_break_the_event_stream() {
    let dir = tempfile::tempdir().unwrap();
    let doc = guide(&dir.path().join("noise.json"))
        .env("FAKE_TORCH_NOISE", "1")
        .succeeds()
        .stderr_has("noise from the workload")
        .stderr_has("raw noise on fd 1")
        .result();
    assert_eq!(doc.status, RunStatus::Ok);
    assert!(!doc.notes.iter().any(|n| n.contains("not JSON")));
}

#[test]
fn cuda_malloc_async_is_noted() {
    let dir = tempfile::tempdir().unwrap();
    let doc = guide(&dir.path().join("async.json"))
        .env("FAKE_TORCH_BACKEND", "cudaMallocAsync")
        .succeeds()
        .result();
    assert!(doc.notes.iter().any(|n| n.contains("upper bound")));
}

#[test]
fn empty_cache_policy_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let run = guide(&dir.path().join("empty.json"))
        .args(["--empty-cache", "between-repeats"])
        .succeeds();
    assert_eq!(
        run.result().policies.empty_cache,
        EmptyCache::BetweenRepeats
    );
    // As the file spells it.
    assert_eq!(run.json()["policies"]["empty_cache"], "between-repeats");
}

#[test]
fn bad_measure_input_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    for (args, message) in [
        (vec!["--device", "gpu0"], "not a GPU device"),
        (vec!["--device", "cuda:0,cuda:0"], "twice"),
        (vec!["--dtype", "int8"], "floating-point"),
        (vec!["--repeats", "0"], "greater than 0"),
    ] {
        Run::measure()
            .fake_torch()
            .args(args)
            .output(dir.path().join("x.json"))
            .expect_status(1)
            .stderr_has(message)
            .wrote_nothing();
    }
}

#[test]
fn environment_reports_and_exits_0() {
    with_fake_torch()
        .args(["environment", "--device", "cuda:0"])
        .assert()
        .success()
        .stdout(predicate::str::contains("no NVIDIA driver found"))
        .stdout(predicate::str::contains("torch 0.0.0+fake"))
        .stdout(predicate::str::contains("allocator backend native"))
        .stdout(predicate::str::contains("PYTORCH_CUDA_ALLOC_CONF"))
        .stdout(predicate::str::contains("can measure run here? yes"));
    with_fake_torch()
        .env("PYTHONPATH", fixture("no_torch"))
        .args(["environment"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "can measure run here? no: PyTorch cannot be imported",
        ));
    with_fake_torch()
        .env("FAKE_TORCH_NO_CUDA", "1")
        .args(["environment", "--json"])
        .assert()
        .success()
        .stdout(predicate::str::contains("\"can_measure\": false"));
    with_fake_torch()
        .args(["environment", "--python", "/no/such/python"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "can measure run here? no: cannot run the Python interpreter",
        ));
}

/// The worker's Python side parses the spec examples documented in src/schema/spec.rs (which the
/// Rust side round-trips in its own test) and refuses a key it does not know.
#[test]
fn the_worker_reads_the_documented_specs() {
    let examples = documented_specs();
    let code = "import json, sys\nfrom iteragpu import spec\nfor line in sys.stdin:\n    s = spec.parse(json.loads(line))\n    print(type(s).__name__, s.devices[0], s.training is not None if hasattr(s, 'training') else None)\ntry:\n    spec.parse({'workload': 'script', 'devices': ['cuda:0'], 'seed': 0, 'script': 'x.py', 'scirpt_args': []})\nexcept spec.SpecError as e:\n    print('refused:', e)\n";
    let out = std::process::Command::new("python3")
        .env(
            "PYTHONPATH",
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python"),
        )
        .args(["-c", code])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(examples.join("\n").as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [
            "Dense cuda:0 False",
            "Dense cuda:0 True",
            "CausalLm cuda:0 False",
            "Vision cuda:0 False",
            "Vlm cuda:0 None",
            "Vlm cuda:0 None",
            "Script cuda:0 None",
            "Script cuda:0 None",
            "refused: the worker's spec has unknown key(s) scirpt_args for workload 'script'",
        ]
    );
}

/// `iteragpu measure --script fixtures/scripts/NAME --output OUT` with the fake torch.
fn measure_script(name: &str, out: &Path) -> Run {
    Run::measure()
        .fake_torch()
        .arg("--script")
        .arg(fixture(&format!("scripts/{name}")))
        .output(out)
}

/// Nested markers: each phase once, in the order they began, the inner one's `parent` the outer,
/// and the outer's peak covering the inner one's although the counters were reset for it.
#[test]
fn nested_markers_nest_in_a_measurement() {
    let dir = tempfile::tempdir().unwrap();
    let run = measure_script("nested_markers.py", &dir.path().join("nested.json")).succeeds();
    let doc = run.result();
    assert_eq!(doc.phase_names(), ["outer", "inner", "after"]);
    assert_eq!(doc.phases[1].parent, Some(0));
    // A top-level phase has no `parent` key at all (not a null one).
    assert!(run.json()["phases"][0].get("parent").is_none());
    let peak = |k: usize| doc.phases[k].devices[0].peak_allocated_bytes.unwrap();
    assert_eq!(peak(1), 96 << 20);
    assert_eq!(
        peak(0),
        96 << 20,
        "the outer phase keeps the inner one's peak"
    );
    assert_eq!(peak(2), 16 << 20);
}

/// A fork inside a phase (a DataLoader's workers): the child's events are ignored, said once with
/// the line that forked, and the phase is recorded once.
#[test]
fn a_fork_in_a_phase_records_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let doc = measure_script("forks.py", &dir.path().join("fork.json"))
        .succeeds()
        .result();
    assert_eq!(doc.phase_names(), ["load", "forked", "after"]);
    let notes = doc.notes.join("\n");
    assert!(notes.contains("forked a child process at"), "{notes}");
    assert!(notes.contains("forks.py:12"), "{notes}");
}

/// A forked child writes phases and a note as JSON lines on the event channel's descriptor (the
/// copy it inherits, pointed at /dev/null at the fork, and a copy its parent made before, which
/// reaches the CLI): none is taken as an event, the lines without the run's token are counted
/// and said.
#[test]
fn a_forked_childs_forged_events_are_ignored_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let doc = measure_script("forged_events.py", &dir.path().join("forged.json"))
        .succeeds()
        .result();
    assert_eq!(doc.phase_names(), ["real", "after"]);
    let notes = doc.notes.join("\n");
    assert!(!notes.contains("a forged note"), "{notes}");
    assert!(notes.contains("3 forged line(s) ignored"), "{notes}");
}

/// The same script from a folder named `iteragpu` (a plain `git clone` of this repository) and
/// from one named `torch`: the fork's line is the script's own, found by where the tool's and
/// torch's packages actually lie, not by a word in the path.
#[test]
fn a_fork_in_a_script_under_a_folder_named_iteragpu_or_torch_names_its_line() {
    for folder in ["iteragpu", "torch"] {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join(folder);
        std::fs::create_dir(&project).unwrap();
        let script = project.join("forks.py");
        std::fs::copy(fixture("scripts/forks.py"), &script).unwrap();
        let doc = Run::measure()
            .fake_torch()
            .arg("--script")
            .arg(&script)
            .output(dir.path().join("fork.json"))
            .succeeds()
            .result();
        assert_eq!(doc.phase_names(), ["load", "forked", "after"], "{folder}");
        let notes = doc.notes.join("\n");
        let line = format!("forked a child process at {}:12", script.display());
        assert!(notes.contains(&line), "{folder}: {notes}");
    }
}

/// The prediction's side of the same rule: a user's file in a folder named `torch`, `iteragpu` or
/// `iteragpu/predict` is the allocation site and the user frame, torch's and the tool's own files
/// are not (`tests/python/frames_by_location.py`).
#[test]
#[ignore = "needs torch"]
fn frames_under_folders_named_torch_or_iteragpu_are_the_users() {
    let out = python_checks(&torch_python(), "frames_by_location.py");
    assert!(out.contains("frames by location: "), "{out}");
}

/// An out-of-memory error wrapped deep in a message over 4,000 characters: the PyTorch text is
/// kept, so the failure is an out-of-memory one with its post-mortem.
#[test]
fn an_out_of_memory_deep_in_a_long_message_keeps_its_post_mortem() {
    let dir = tempfile::tempdir().unwrap();
    let doc = measure_script("long_oom.py", &dir.path().join("long.json"))
        .expect_status(3)
        .result();
    let failure = doc.failure.expect("the failure");
    assert!(failure.out_of_memory, "{failure:?}");
    let message = failure.message.as_deref().unwrap();
    assert!(message.len() <= 4_004, "{}", message.len());
    assert!(message.contains("out of memory"), "{message}");
    assert!(failure.post_mortem.is_some(), "{failure:?}");
}

/// Whether a process whose command line holds `marker` is still running.
fn still_running(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(marker))
            .unwrap_or(false)
    })
}

/// A child the workload started in its own session outlives the worker and holds its pipes: the
/// run still ends at once, the child is named in the result and ended.
#[test]
fn a_detached_child_never_holds_the_run_and_is_ended() {
    let dir = tempfile::tempdir().unwrap();
    let sixty = std::time::Duration::from_secs(60);
    let began = std::time::Instant::now();
    let doc = measure_script("detached_child.py", &dir.path().join("detached.json"))
        .timeout(sixty)
        .succeeds()
        .result();
    assert!(began.elapsed().as_secs() < 30, "{:?}", began.elapsed());
    let notes = doc.notes.join("\n");
    assert!(notes.contains("the workload left process"), "{notes}");
    assert!(notes.contains("time.sleep(600)"), "{notes}");
    assert!(!still_running("time.sleep(600)"));

    // --keep-children: named, and left running (this test ends it).
    let doc = measure_script("detached_child.py", &dir.path().join("kept.json"))
        .arg("--keep-children")
        .timeout(sixty)
        .succeeds()
        .result();
    let notes = doc.notes.join("\n");
    assert!(notes.contains("kept running (--keep-children)"), "{notes}");
    assert!(still_running("time.sleep(600)"));
    let _ = std::process::Command::new("pkill")
        .args(["-f", "time.sleep\\(600\\)"])
        .status();

    // Blocked on such a child: --timeout ends the run, the phase done so far kept.
    let marker = format!("iteragpu-detached-{}", std::process::id());
    let began = std::time::Instant::now();
    let doc = measure_script("waits_on_detached.py", &dir.path().join("waits.json"))
        .args(["--timeout", "3", "--"])
        .arg(&marker)
        .timeout(sixty)
        .expect_status(3)
        .result();
    assert!(began.elapsed().as_secs() < 30, "{:?}", began.elapsed());
    assert_eq!(doc.status, RunStatus::Timeout);
    assert_eq!(doc.phase_names(), ["load"]);
    assert!(
        !still_running(&marker),
        "the detached child was left running"
    );
}

/// `os._exit(0)` inside a phase: the phase ends there with its readings, the run is ok, and a note
/// says where the script left (never "ended unexpectedly" with an empty tail).
#[test]
fn os_exit_inside_a_phase_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let doc = measure_script("hard_exit_measured.py", &dir.path().join("exit.json"))
        .succeeds()
        .result();
    assert_eq!(doc.status, RunStatus::Ok, "{:?}", doc.failure);
    assert_eq!(doc.phase_names(), ["load", "work"]);
    assert_eq!(doc.phases[1].status, RunStatus::Ok);
    let notes = doc.notes.join("\n");
    assert!(notes.contains("os._exit(0) at "), "{notes}");
    assert!(notes.contains("hard_exit_measured.py:13"), "{notes}");
}

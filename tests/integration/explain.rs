//! `iteragpu explain`: the gap ledger read back from a fake-torch measurement (every observed
//! figure is checked against the result's own readings), with a real prediction beside it when
//! real torch is there, and the refusals of files that do not belong together.

use crate::common::{Run, fixture, iteragpu, read_json, torch_python, with_fake_torch};
use predicates::prelude::*;
use serde_json::Value;
use std::path::Path;

const DIMS: [&str; 6] = ["--batch", "2", "--context", "128", "--width", "512"];

fn measure(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("result.json");
    with_fake_torch()
        .arg("measure")
        .args(DIMS)
        .arg("--output")
        .arg(&out)
        .assert()
        .success();
    out
}

fn estimate(dir: &Path, parameters: &str) -> std::path::PathBuf {
    let out = dir.join(format!("estimate-{parameters}.json"));
    let run = iteragpu()
        .args(["estimate", "--parameters", parameters, "--bits", "32"])
        .args(["--reserve-gib", "1", "--json"])
        .output()
        .unwrap();
    assert!(run.status.success());
    std::fs::write(&out, run.stdout).unwrap();
    out
}

fn explain_json(args: &[&Path], extra: &[&str]) -> Value {
    let run = iteragpu()
        .arg("explain")
        .args(args)
        .args(extra)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_slice(&run.stdout).unwrap()
}

/// The ledger's line with this `id`.
fn line<'a>(ledger: &'a Value, id: &str) -> &'a Value {
    ledger["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["id"] == id)
        .unwrap_or_else(|| panic!("no line `{id}` in {ledger:#}"))
}

fn observed(ledger: &Value, id: &str) -> u64 {
    let l = line(ledger, id);
    assert_eq!(l["observed"]["provenance"], "observed");
    l["observed"]["bytes"].as_u64().unwrap()
}

fn reading(phase: &Value, key: &str) -> u64 {
    phase["devices"][0][key].as_u64().unwrap()
}

#[test]
fn the_ledger_adds_up_to_the_results_own_readings() {
    let dir = tempfile::tempdir().unwrap();
    let result = measure(dir.path());
    let est = estimate(dir.path(), "8402944");
    let doc = read_json(&result);
    let ledger = explain_json(&[&result], &["--estimate", est.to_str().unwrap()]);
    assert_eq!(ledger["schema"], "iteragpu.explain/1");

    // The phase explained is the one with the highest peak reserved (the first one on a tie).
    let phases = doc["phases"].as_array().unwrap();
    let (_, peak) = phases
        .iter()
        .enumerate()
        .filter(|(_, p)| p["status"] == "ok")
        .max_by_key(|(k, p)| (reading(p, "peak_reserved_bytes"), std::cmp::Reverse(*k)))
        .unwrap();
    assert_eq!(ledger["phase"], peak["name"]);
    assert_eq!(ledger["phase_index"], peak["index"]);

    let load = phases.iter().find(|p| p["name"] == "model_load").unwrap();
    let weights = observed(&ledger, "weights");
    assert_eq!(weights, reading(load, "end_allocated_bytes"));
    let held = observed(&ledger, "held_at_start");
    assert_eq!(weights + held, reading(peak, "start_allocated_bytes"));
    let growth = observed(&ledger, "growth");
    assert_eq!(
        weights + held + growth,
        reading(peak, "peak_allocated_bytes")
    );
    assert_eq!(
        observed(&ledger, "peak_allocated"),
        reading(peak, "peak_allocated_bytes")
    );
    assert_eq!(
        observed(&ledger, "peak_reserved"),
        reading(peak, "peak_reserved_bytes")
    );
    assert_eq!(
        observed(&ledger, "allocator_slack"),
        reading(peak, "end_reserved_bytes") - reading(peak, "end_allocated_bytes")
    );

    // The estimate's side: its weights term and its stated reserve, labelled as such.
    let e = read_json(&est);
    let weights_term = e["terms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "weights")
        .unwrap();
    let w = &line(&ledger, "weights")["estimate"];
    assert_eq!(w["bytes"], weights_term["bytes"]);
    assert_eq!(w["provenance"], "calculated");
    let reserve = &line(&ledger, "reserve")["estimate"];
    assert_eq!(reserve["bytes"], 1u64 << 30);
    assert_eq!(reserve["provenance"], "assumed");

    // Capacities are named apart, never folded into one number.
    let capacities = ledger["capacities"].as_array().unwrap();
    let torch_total = doc["environment"]["python"]["torch"]["devices"]
        .as_array()
        .and_then(|d| d.first())
        .map(|d| d["total_memory"].clone());
    assert!(capacities.iter().any(|c| {
        c["name"]
            .as_str()
            .unwrap()
            .contains("PyTorch's total_memory")
            && Some(&c["bytes"]) == torch_total.as_ref()
    }));

    // The table says the same thing for a person.
    iteragpu()
        .arg("explain")
        .arg(&result)
        .args(["--estimate", est.to_str().unwrap()])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("estimate vs prediction vs observation")
                .and(predicate::str::contains("weights (as loaded)"))
                .and(predicate::str::contains("capacities (not one number)")),
        );
}

#[test]
#[ignore = "needs torch and transformers"]
fn a_real_prediction_fills_the_predicted_column() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let result = measure(dir.path());
    let pred = dir.path().join("prediction.json");
    let run = iteragpu()
        .args(["predict", "--python", &python, "--json", "--output"])
        .arg(&pred)
        .args(DIMS)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let p = read_json(&pred);
    let ledger = explain_json(&[&result], &["--prediction", pred.to_str().unwrap()]);
    let phase = ledger["phase"].as_str().unwrap();
    let predicted = p["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|ph| ph["name"] == phase)
        .unwrap();
    let pa = &line(&ledger, "peak_allocated")["predicted"];
    assert_eq!(pa["provenance"], "predicted");
    assert_eq!(pa["bytes"], predicted["peak_allocated_bytes"]);
    let load = p["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|ph| ph["name"] == "model_load")
        .unwrap();
    assert_eq!(
        line(&ledger, "weights")["predicted"]["bytes"],
        load["end_allocated_bytes"]
    );
    // A prediction of other dimensions is refused, not set beside the result.
    let mut other = p.clone();
    other["dimensions"]["batch"] = 64.into();
    let edited = dir.path().join("other-prediction.json");
    std::fs::write(&edited, serde_json::to_vec(&other).unwrap()).unwrap();
    iteragpu()
        .arg("explain")
        .arg(&result)
        .args(["--prediction", edited.to_str().unwrap()])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "the result has batch = 2 and the prediction batch = 64",
        ));
}

#[test]
fn files_that_do_not_belong_together_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let result = measure(dir.path());
    // An estimate of another model.
    let other = estimate(dir.path(), "1000");
    iteragpu()
        .arg("explain")
        .arg(&result)
        .args(["--estimate", other.to_str().unwrap()])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("the estimate of another model"));
    // An estimate given as the result, a result given as the estimate.
    let est = estimate(dir.path(), "8402944");
    iteragpu()
        .arg("explain")
        .arg(&est)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("explain reads a measure result"));
    iteragpu()
        .arg("explain")
        .arg(&result)
        .args(["--estimate", result.to_str().unwrap()])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("iteragpu estimate --json"));
    // A prediction of other dimensions: made by editing the file's dimensions, as a prediction
    // needs real torch.
    let mut doc = read_json(&result);
    doc["dimensions"]["batch"] = 64.into();
    let edited = dir.path().join("other.json");
    std::fs::write(&edited, serde_json::to_vec(&doc).unwrap()).unwrap();
    // Not a prediction: refused as such.
    iteragpu()
        .arg("explain")
        .arg(&result)
        .args(["--prediction", edited.to_str().unwrap()])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("iteragpu predict"));
    // A missing file names itself.
    iteragpu()
        .args(["explain", "/nonexistent/r.json"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("/nonexistent/r.json"));
}

/// An out-of-memory is explained by its post-mortem: PyTorch's message parsed and classified,
/// in the result, the table, the JSON and the fiche; no partial peak is reconciled as a need.
#[test]
fn an_out_of_memory_gets_its_post_mortem() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("failed.json");
    with_fake_torch()
        .env("FAKE_TORCH_CAPACITY", (64u64 << 20).to_string())
        .args(["measure", "--width", "2048", "--output"])
        .arg(&out)
        .assert()
        .code(3)
        .stdout(predicate::str::contains(
            "out-of-memory post-mortem: capacity",
        ));
    let doc = read_json(&out);
    let pm = &doc["failure"]["post_mortem"];
    assert_eq!(pm["diagnosis"]["class"], "capacity");
    // PyTorch's observer saw what was alive, with the workload's own line first.
    assert_eq!(doc["history"]["oom_observer"], true);
    let snap = &doc["oom_snapshots"][0];
    assert_eq!(snap["requested_bytes"], 64u64 << 20);
    let frame = snap["live"]["largest_live"][0]["frames"][0]["filename"]
        .as_str()
        .unwrap();
    assert!(frame.ends_with("iteragpu/workloads/dense.py"), "{frame}");
    assert_eq!(pm["report"]["tried_to_allocate"]["bytes"], 64u64 << 20);
    let ledger = explain_json(&[&out], &[]);
    assert_eq!(ledger["post_mortem"], *pm);
    let completed = doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["status"] == "ok");
    if !completed {
        assert_eq!(ledger["lines"].as_array().unwrap().len(), 0);
    } else {
        let phase = doc["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == ledger["phase"])
            .unwrap();
        assert_eq!(
            phase["status"], "ok",
            "a partial peak is not explained as a need"
        );
    }
    iteragpu()
        .arg("explain")
        .arg(&out)
        .assert()
        .success()
        .stdout(
            predicate::str::contains("try: Find the frontier at a smaller load")
                .and(predicate::str::contains("— iteragpu/workloads/dense.py:")),
        );
    let fiche = dir.path().join("fiche.md");
    iteragpu()
        .arg("report")
        .arg(&out)
        .arg("--output")
        .arg(&fiche)
        .assert()
        .success();
    let text = std::fs::read_to_string(&fiche).unwrap();
    assert!(text.contains("## Out-of-memory post-mortem"));
    assert!(text.contains("capacity"));
}

/// PyTorch's out-of-memory messages, one per wording and backend (the format each version
/// printed), as a workload raises them: the worker flags the failure as an out-of-memory, and the
/// post-mortem's class and request are the same in the result, in measure's summary and in
/// explain. (Each format's every field is checked by the unit tests of `explain::oom`.)
#[test]
fn every_out_of_memory_wording_gets_its_post_mortem() {
    struct Case {
        wording: &'static str,
        message: &'static str,
        class: &'static str,
        label: &'static str,
        requested: &'static str,
    }
    let cases = [
        Case {
            wording: "torch 1.0 to 1.3, `cached`",
            message: "CUDA out of memory. Tried to allocate 16.00 GiB (GPU 0; 11.93 GiB total capacity; 4.00 GiB already allocated; 7.33 GiB free; 179.00 KiB cached)",
            class: "capacity",
            label: "capacity",
            requested: "16.00 GiB",
        },
        Case {
            wording: "torch 1.4 to 1.7, `reserved in total by PyTorch`",
            message: "RuntimeError: CUDA out of memory. Tried to allocate 152.00 MiB (GPU 0; 31.72 GiB total capacity; 24.89 GiB already allocated; 6.12 MiB free; 30.70 GiB reserved in total by PyTorch)",
            class: "fragmentation",
            label: "fragmentation",
            requested: "152.00 MiB",
        },
        Case {
            wording: "torch 2.1, `of which … is free` with another process listed",
            message: "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 138.00 MiB. GPU 0 has a total capacty of 15.90 GiB of which 8.44 MiB is free. Process 1246069 has 577.00 MiB memory in use. Including non-PyTorch memory, this process has 15.32 GiB memory in use. Of the allocated memory 14.12 GiB is allocated by PyTorch, and 410.41 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
            class: "fragmentation",
            label: "fragmentation",
            requested: "138.00 MiB",
        },
        Case {
            wording: "torch 2.2+, another process holds the card",
            message: "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.68 GiB of which 512.00 MiB is free. Process 4242 has 18.90 GiB memory in use. Including non-PyTorch memory, this process has 4.20 GiB memory in use. Of the allocated memory 3.50 GiB is allocated by PyTorch, and 200.00 MiB is reserved by PyTorch but unallocated.",
            class: "another_process",
            label: "another process",
            requested: "2.00 GiB",
        },
        Case {
            wording: "ROCm (`HIP out of memory`)",
            message: "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 978.00 MiB. GPU 0 has a total capacity of 15.98 GiB of which 630.00 MiB is free. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
            class: "another_process",
            label: "another process",
            requested: "978.00 MiB",
        },
        Case {
            wording: "cudaMallocAsync with a memory fraction",
            message: "Allocation on device 0 would exceed allowed memory. (out of memory)\nCurrently allocated     : 4.86 GiB\nRequested               : 10.12 GiB\nDevice limit            : 24.00 GiB\nFree (according to CUDA): 18.73 GiB\nPyTorch limit (set by user-supplied memory fraction)\n                        : 12.00 GiB",
            class: "capacity",
            label: "capacity",
            requested: "10.12 GiB",
        },
        Case {
            wording: "a fraction this PyTorch does not print: nothing decides",
            message: "CUDA out of memory. Tried to allocate 360.00 MiB. GPU 0 has a total capacity of 16.00 GiB of which 15.08 GiB is free. Of the allocated memory 940.00 MiB is allocated by PyTorch, and 276.00 MiB is reserved by PyTorch but unallocated.",
            class: "unknown",
            label: "unknown",
            requested: "360.00 MiB",
        },
    ];
    let dir = tempfile::tempdir().unwrap();
    let check = |k: usize, case: &Case| {
        let said = format!("out-of-memory post-mortem: {} — ", case.label);
        let out = dir.path().join(format!("oom-{k}.json"));
        let run = Run::measure()
            .fake_torch()
            .arg("--script")
            .arg(fixture("scripts/raise_oom.py"))
            .output(&out)
            .args(["--", case.message])
            .expect_status(3)
            .stdout_has(&said);
        let doc = run.result();
        let failure = doc.failure.as_ref().expect("the failure");
        assert!(failure.out_of_memory, "{}: {failure:?}", case.wording);
        assert_eq!(failure.phase.as_deref(), Some("step"), "{}", case.wording);
        let pm = &run.json()["failure"]["post_mortem"];
        assert_eq!(
            pm["diagnosis"]["class"], case.class,
            "{}: {pm:#}",
            case.wording
        );
        assert_eq!(
            pm["report"]["tried_to_allocate"]["text"], case.requested,
            "{}: {pm:#}",
            case.wording
        );
        Run::command("explain")
            .arg(&out)
            .succeeds()
            .stdout_has(&said);
    };
    // One worker per case, side by side: the cases share nothing.
    std::thread::scope(|scope| {
        for (k, case) in cases.iter().enumerate() {
            scope.spawn(move || check(k, case));
        }
    });
}

/// A run that failed for another reason has nothing to explain and says so.
#[test]
fn a_crash_before_any_phase_has_nothing_to_explain() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("crashed.json");
    with_fake_torch()
        .env("FAKE_TORCH_CRASH_AFTER_SYNC", "1")
        .args(["measure", "--width", "256", "--output"])
        .arg(&out)
        .assert()
        .code(3);
    // Synchronize #1 opens model_load: the worker dies in the very first phase.
    let doc = read_json(&out);
    assert!(
        doc["phases"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["status"] != "ok"),
        "FAKE_TORCH_CRASH_AFTER_SYNC=1 let a phase complete: {}",
        doc["phases"]
    );
    iteragpu()
        .arg("explain")
        .arg(&out)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("nothing to reconcile"));
}

/// `--output`: a new file (JSON for `.json`, the table otherwise), never overwritten; `-` puts
/// the JSON document alone on standard output; without it, the table goes to standard output.
#[test]
fn the_ledger_goes_to_a_new_file_or_to_standard_output() {
    let dir = tempfile::tempdir().unwrap();
    let prediction = fixture("fiche/prediction_train.json");
    let json = dir.path().join("ledger.json");
    Run::command("explain")
        .arg(&prediction)
        .output(&json)
        .succeeds()
        .stdout_has("estimate vs prediction")
        .stdout_has(&format!("written: {}", json.display()));
    let written = read_json(&json);
    assert_eq!(written["schema"], "iteragpu.explain/1");
    assert_eq!(written["explained"], "prediction");
    // Never overwritten: the same name again is refused, the file unchanged.
    let before = std::fs::read(&json).unwrap();
    Run::command("explain")
        .arg(&prediction)
        .output(&json)
        .expect_status(1)
        .stderr_has("never overwrites");
    assert_eq!(std::fs::read(&json).unwrap(), before);
    // `-`: the same document, and nothing else, on standard output.
    let piped = Run::command("explain")
        .arg(&prediction)
        .output("-")
        .succeeds();
    let doc: Value = serde_json::from_str(&piped.stdout()).expect("only JSON on stdout");
    assert_eq!(doc, written);
    // Another extension: the table, as the terminal shows it.
    let text = dir.path().join("ledger.txt");
    Run::command("explain")
        .arg(&prediction)
        .output(&text)
        .succeeds();
    let table = std::fs::read_to_string(&text).unwrap();
    assert!(table.contains("estimate vs prediction"), "{table}");
    assert!(!table.trim_start().starts_with('{'), "{table}");
}

/// A prediction of a workload that declares no parameter count (causal-lm, vision, vlm record it
/// in `model_load`) beside the estimate of another model: explained, with a warning naming both
/// counts; the estimate of the same model: no warning.
#[test]
fn an_estimate_of_another_model_is_warned_beside_a_prediction() {
    let dir = tempfile::tempdir().unwrap();
    let mut doc: Value = read_json(&fixture("fiche/prediction_train.json"));
    doc["identity"]["declared"]
        .as_object_mut()
        .unwrap()
        .remove("parameters");
    let pred = dir.path().join("pred.json");
    std::fs::write(&pred, doc.to_string()).unwrap();
    let explain = |est: &Path| {
        iteragpu()
            .arg("explain")
            .arg(&pred)
            .arg("--estimate")
            .arg(est)
            .output()
            .unwrap()
    };
    let other = estimate(dir.path(), "7000000000");
    let out = explain(&other);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("7,000,000,000 parameters") && stderr.contains("built with 8,402,944"),
        "{stderr}"
    );
    let same = estimate(dir.path(), "8402944");
    let out = explain(&same);
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"));
}

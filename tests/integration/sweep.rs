//! `sweep` end to end with the fake torch: list, frontier, grid, loads, processes, emulated
//! limits, interruption, missing PyTorch.

use crate::common::{fixture, read_json, with_fake_torch};
use predicates::prelude::*;

fn values(doc: &serde_json::Value, key: &str) -> Vec<u64> {
    doc["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["values"][key].as_u64().unwrap())
        .collect()
}

#[test]
fn a_list_sweep_runs_one_fresh_trial_per_value() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("series.json");
    with_fake_torch()
        .args([
            "sweep",
            "--vary",
            "batch=1,2,4,8",
            "--width",
            "256",
            "--output",
        ])
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "fit of peak reserved against batch",
        ));
    let doc = read_json(&out);
    assert_eq!(doc["schema"], "iteragpu.series/1");
    assert_eq!(doc["status"], "complete");
    assert_eq!(doc["mode"], "list");
    assert_eq!(doc["identical_across_trials"], true);
    assert_eq!(doc["protocol"], "fresh process per trial");
    assert_eq!(values(&doc, "batch"), [1, 2, 4, 8]);
    let trials = doc["trials"].as_array().unwrap();
    let pids: std::collections::BTreeSet<u64> = trials
        .iter()
        .map(|t| t["result"]["worker"]["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids.len(), 4, "each trial in its own process");
    for t in trials {
        assert_eq!(t["status"], "ok");
        for k in [
            "peak_allocated_bytes",
            "peak_reserved_bytes",
            "end_allocated_bytes",
            "end_reserved_bytes",
        ] {
            assert!(t[k].is_u64(), "{k}");
        }
        assert!(t["duration_s"].as_f64().unwrap() > 0.0);
    }
    let peaks: Vec<u64> = trials
        .iter()
        .map(|t| t["peak_reserved_bytes"].as_u64().unwrap())
        .collect();
    assert!(
        peaks.windows(2).all(|w| w[0] <= w[1]),
        "peaks grow with the batch: {peaks:?}"
    );
    assert_eq!(doc["base"]["width"], 256);
    assert!(
        doc["base"].get("batch").is_none(),
        "the varied key is not part of the base"
    );
    let fit = &doc["fit"];
    assert_eq!(fit["variable"], "batch");
    assert!(
        fit["cards"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["card"] == "H200 141GB" && c["extrapolation"] == true)
    );
}

#[test]
fn the_frontier_search_finds_the_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("frontier.json");
    with_fake_torch()
        .args([
            "sweep",
            "--vary",
            "context=1024..65536",
            "--search",
            "frontier",
            "--resolution",
            "256",
            "--width",
            "1024",
        ])
        .args(["--memory-limit", "1GiB", "--output"])
        .arg(&out)
        .assert()
        .success()
        .stdout(
            predicate::str::contains("frontier of context")
                .and(predicate::str::contains("out-of-memory: capacity")),
        );
    let doc = read_json(&out);
    let f = &doc["frontier"];
    let (ok, fail) = (
        f["last_success"].as_u64().unwrap(),
        f["first_failure"].as_u64().unwrap(),
    );
    assert!(fail > ok && fail - ok <= 256);
    assert_eq!(
        f["trials"].as_u64().unwrap() as usize,
        doc["trials"].as_array().unwrap().len()
    );
    assert!(f["trials"].as_u64().unwrap() <= 12);
    // The trial at the last success succeeded, the one at the first failure ran out of memory.
    for t in doc["trials"].as_array().unwrap() {
        let v = t["values"]["context"].as_u64().unwrap();
        if v == ok {
            assert_eq!(t["status"], "ok");
        }
        if v == fail {
            assert_eq!(t["status"], "failed");
            assert_eq!(t["out_of_memory"], true);
            // The emulated card is what ran out: the post-mortem says capacity.
            let pm = &t["result"]["failure"]["post_mortem"]["diagnosis"];
            assert_eq!(pm["class"], "capacity", "{pm:#}");
            assert_eq!(pm["figures"]["limit_kind"], "memory_fraction");
        }
    }
    let limit = &doc["limit"];
    assert_eq!(limit["emulated"], true);
    assert_eq!(limit["bytes"], 1u64 << 30);
    // The worker applied the limit and recorded it.
    let declared = &doc["trials"][0]["result"]["identity"]["declared"]["memory_limit"];
    assert_eq!(declared["emulated"], true);
}

#[test]
fn a_frontier_without_a_limit_uses_the_device_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("capacity.json");
    with_fake_torch()
        .env("FAKE_TORCH_CAPACITY", (2u64 << 30).to_string())
        .args([
            "sweep",
            "--vary",
            "batch=1..4096",
            "--search",
            "frontier",
            "--width",
            "1024",
            "--context",
            "512",
            "--output",
        ])
        .arg(&out)
        .assert()
        .success();
    let f = &read_json(&out)["frontier"];
    assert_eq!(
        f["first_failure"].as_u64().unwrap() - f["last_success"].as_u64().unwrap(),
        1
    );
    // Failure at the very first value and success at the last are reported plainly.
    let out = dir.path().join("tiny.json");
    with_fake_torch()
        .env("FAKE_TORCH_CAPACITY", (64u64 << 20).to_string())
        .args([
            "sweep",
            "--vary",
            "batch=1..64",
            "--search",
            "frontier",
            "--width",
            "1024",
            "--output",
        ])
        .arg(&out)
        .assert()
        .success();
    let f = &read_json(&out)["frontier"];
    assert!(f["last_success"].is_null());
    assert_eq!(f["first_failure"], 1);
    let out = dir.path().join("all.json");
    with_fake_torch()
        .args([
            "sweep",
            "--vary",
            "batch=1..16",
            "--search",
            "frontier",
            "--width",
            "64",
            "--output",
        ])
        .arg(&out)
        .assert()
        .success();
    let f = &read_json(&out)["frontier"];
    assert_eq!(f["last_success"], 16);
    assert!(f["first_failure"].is_null());
}

#[test]
fn a_grid_walks_one_variable_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("grid.json");
    with_fake_torch()
        .args([
            "sweep",
            "--vary",
            "batch=1,2",
            "--vary",
            "context=64,128,256",
            "--width",
            "256",
            "--output",
        ])
        .arg(&out)
        .assert()
        .success();
    let doc = read_json(&out);
    assert_eq!(doc["mode"], "grid");
    let cells: Vec<(u64, u64)> = values(&doc, "batch")
        .into_iter()
        .zip(values(&doc, "context"))
        .collect();
    assert_eq!(cells.len(), 6);
    for w in cells.windows(2) {
        assert!(
            (w[0].0 == w[1].0) ^ (w[0].1 == w[1].1),
            "{w:?} differ by more than one variable"
        );
    }
}

#[test]
fn reference_loads_and_repeated_processes() {
    let dir = tempfile::tempdir().unwrap();
    let loads = dir.path().join("loads.json");
    std::fs::write(
        &loads,
        r#"{"loads": [{"name": "usual", "batch": 1, "context": 64}, {"name": "long", "batch": 1, "context": 512}, {"name": "limit", "batch": 2, "context": 1024}]}"#,
    )
    .unwrap();
    let out = dir.path().join("loads-series.json");
    with_fake_torch()
        .args(["sweep", "--loads"])
        .arg(&loads)
        .args(["--width", "128", "--output"])
        .arg(&out)
        .assert()
        .success();
    let doc = read_json(&out);
    assert_eq!(doc["mode"], "loads");
    let names: Vec<&str> = doc["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["load"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["usual", "long", "limit"]);

    let out = dir.path().join("processes.json");
    with_fake_torch()
        .args(["sweep", "--processes", "3", "--width", "128", "--output"])
        .arg(&out)
        .assert()
        .success();
    let doc = read_json(&out);
    assert_eq!(doc["mode"], "processes");
    assert!(
        doc["protocol"]
            .as_str()
            .unwrap()
            .contains("3 fresh processes")
    );
    assert_eq!(doc["trials"].as_array().unwrap().len(), 3);
}

#[test]
fn an_interrupted_sweep_keeps_its_finished_trials() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("interrupted.json");
    let bin = assert_cmd::cargo::cargo_bin("iteragpu");
    // Trials with batch ≥ 8 allocate more than 4 MiB at once and hang.
    let mut child = std::process::Command::new(bin)
        .env("PYTHONPATH", fixture("../fake_torch"))
        .env("FAKE_TORCH_HANG_ABOVE", (4u64 << 20).to_string())
        .args([
            "sweep",
            "--vary",
            "batch=1,2,64,128",
            "--width",
            "256",
            "--context",
            "64",
            "--output",
        ])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if out.exists() && read_json(&out)["trials"].as_array().unwrap().len() == 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    assert_eq!(child.wait().unwrap().code(), Some(3));
    let doc = read_json(&out);
    assert_eq!(doc["status"], "interrupted");
    let statuses: Vec<&str> = doc["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["ok", "ok", "interrupted"]);
}

#[test]
fn crashes_are_told_apart_from_out_of_memory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("crash.json");
    with_fake_torch()
        .env("FAKE_TORCH_CRASH_AFTER_SYNC", "5")
        .args(["sweep", "--vary", "batch=1,2", "--width", "128", "--output"])
        .arg(&out)
        .assert()
        .code(3);
    let doc = read_json(&out);
    assert!(
        doc["trials"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["status"] == "crashed" && t["out_of_memory"] == false)
    );
}

#[test]
fn sweep_input_and_missing_pytorch() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.json");
    for (args, message) in [
        (vec![], "nothing to sweep"),
        (vec!["--vary", "colour=1,2"], "cannot be varied"),
        (vec!["--vary", "context=1..9"], "--search frontier"),
        (
            vec!["--vary", "batch=1,2", "--search", "frontier"],
            "needs a range",
        ),
        (vec!["--vary", "batch=1,2", "--vary", "batch=4,8"], "twice"),
        (
            vec!["--vary", "batch=1,2", "--card", "GTX 480"],
            "unknown card",
        ),
        (
            vec!["--vary", "batch=1,2", "--memory-limit", "8G"],
            "ambiguous",
        ),
    ] {
        with_fake_torch()
            .arg("sweep")
            .args(&args)
            .arg("--output")
            .arg(&out)
            .assert()
            .code(1)
            .stderr(predicate::str::contains(message));
        assert!(!out.exists());
    }
    std::fs::write(&out, "keep").unwrap();
    with_fake_torch()
        .args(["sweep", "--vary", "batch=1,2", "--output"])
        .arg(&out)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("already exists"));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep");
    let out = dir.path().join("none.json");
    with_fake_torch()
        .env("PYTHONPATH", fixture("no_torch"))
        .args(["sweep", "--vary", "batch=1,2", "--output"])
        .arg(&out)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("PyTorch cannot be imported"));
    assert!(!out.exists());
    // A catalog card is emulated and recorded as such.
    let out = dir.path().join("card.json");
    with_fake_torch()
        .args([
            "sweep", "--vary", "batch=1", "--card", "T4", "--width", "64", "--output",
        ])
        .arg(&out)
        .assert()
        .success();
    let limit = &read_json(&out)["limit"];
    assert!(limit["source"].as_str().unwrap().contains("T4"));
    assert_eq!(limit["emulated"], true);
}

/// A sweep of the user's script hands each value to the script through `{name}` in its arguments.
#[test]
fn a_script_sweep_passes_the_value_to_the_script() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("script-series.json");
    with_fake_torch()
        .args(["sweep", "--vary", "context=512,1024", "--script"])
        .arg(fixture("scripts/job.py"))
        .arg("--output")
        .arg(&out)
        .args(["--", "--rows", "{context}"])
        .assert()
        .success();
    let doc = read_json(&out);
    let rows: Vec<u64> = doc["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["result"]["phases"][0]["inputs"]["rows"].as_u64().unwrap())
        .collect();
    assert_eq!(rows, [512, 1024]);
    assert_eq!(
        doc["base"]["script_args_template"],
        serde_json::json!(["--rows", "{context}"])
    );
    let out = dir.path().join("unused.json");
    with_fake_torch()
        .args(["sweep", "--vary", "context=512,1024", "--script"])
        .arg(fixture("scripts/job.py"))
        .arg("--output")
        .arg(&out)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("{context}"));
    assert!(!out.exists());
}

/// Each setting's worker starts with exactly that setting, whatever the caller exported, and
/// records it; the summary sets the settings side by side.
#[test]
fn an_allocator_a_b_gives_each_worker_its_setting() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("series.json");
    with_fake_torch()
        .env(
            "PYTORCH_CUDA_ALLOC_CONF",
            "garbage_collection_threshold:0.6",
        )
        .env("PYTORCH_ALLOC_CONF", "max_split_size_mb:64")
        .args([
            "sweep",
            "--vary",
            "alloc_conf=default,expandable_segments",
            "--vary",
            "batch=1,2",
            "--width",
            "256",
            "--output",
        ])
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::contains("allocator settings compared"));
    let doc = read_json(&out);
    assert_eq!(doc["mode"], "alloc-conf");
    assert_eq!(
        doc["alloc_confs"],
        serde_json::json!(["default", "expandable_segments"])
    );
    for t in doc["trials"].as_array().unwrap() {
        let settings = &t["result"]["environment"]["python"]["settings"];
        let expected = match t["values"]["alloc-conf"].as_str().unwrap() {
            "default" => serde_json::Value::Null,
            "expandable_segments" => "expandable_segments:True".into(),
            other => panic!("{other}"),
        };
        assert_eq!(settings["PYTORCH_CUDA_ALLOC_CONF"], expected);
        assert_eq!(settings["PYTORCH_ALLOC_CONF"], serde_json::Value::Null);
    }

    // One setting for one measurement.
    let one = dir.path().join("one.json");
    with_fake_torch()
        .args([
            "measure",
            "--alloc-conf",
            "expandable_segments",
            "--width",
            "256",
        ])
        .arg("--output")
        .arg(&one)
        .assert()
        .success();
    assert_eq!(
        read_json(&one)["environment"]["python"]["settings"]["PYTORCH_CUDA_ALLOC_CONF"],
        "expandable_segments:True"
    );
    // The fiche sets the settings side by side instead of one curve mixing both.
    let fiche = dir.path().join("fiche.md");
    crate::common::iteragpu()
        .arg("report")
        .args([&one, &out])
        .arg("--output")
        .arg(&fiche)
        .assert()
        .success();
    let text = std::fs::read_to_string(&fiche).unwrap();
    assert!(text.contains("Allocator settings compared in fresh processes"));
    assert!(
        text.contains(
            "| batch | peak reserved, default (GiB) | peak reserved, expandable_segments (GiB) | change |"
        ),
        "{text}"
    );
    assert!(!text.contains("Peak reserved against batch"));
    with_fake_torch()
        .args([
            "measure",
            "--alloc-conf",
            "max_split_size_mb:64",
            "--output",
        ])
        .arg(dir.path().join("never.json"))
        .assert()
        .code(1)
        .stderr(predicate::str::contains("max_split_size_mb:64"));
    assert!(!dir.path().join("never.json").exists());
}

//! Real workloads: the user's script, training loops, whole-loop protocol, causal-lm guards, the
//! notebook Recorder, and the KV cache checked against transformers where it is installed.

use crate::common::{
    assert_declared_phases, estimate_json, fixture, read_json, term_bytes, with_fake_torch,
};
use predicates::prelude::*;
use std::path::PathBuf;

fn names(doc: &serde_json::Value) -> Vec<String> {
    doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_users_script_is_measured_with_its_phases() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.json");
    with_fake_torch()
        .args(["measure", "--script"])
        .arg(fixture("scripts/job.py"))
        .arg("--output")
        .arg(&out)
        .args(["--", "--rows", "2048"])
        .assert()
        .success()
        .stderr(predicate::str::contains("the script prints on stdout"));
    let doc = read_json(&out);
    assert_eq!(doc["schema"], "iteragpu.measure/1");
    assert_eq!(doc["status"], "ok");
    assert_eq!(doc["identity"]["workload"], "script");
    assert_eq!(doc["identity"]["declared"]["model"], "toy-model");
    assert_eq!(doc["identity"]["declared"]["revision"], "abc123");
    assert_eq!(names(&doc), ["load", "forward"]);
    assert_eq!(doc["phases"][0]["inputs"]["rows"], 2048);
    assert_eq!(
        doc["phases"][1]["inputs"]["processed_shape"],
        serde_json::json!([4, 2048])
    );
    let load = &doc["phases"][0]["devices"][0];
    assert!(load["end_allocated_bytes"].as_u64().unwrap() >= 2048 * 1024 * 4);
}

#[test]
fn a_failing_script_keeps_its_phases_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fail.json");
    with_fake_torch()
        .args(["measure", "--script"])
        .arg(fixture("scripts/job.py"))
        .arg("--output")
        .arg(&out)
        .args(["--", "--fail"])
        .assert()
        .code(3);
    let doc = read_json(&out);
    assert_eq!(doc["status"], "failed");
    assert_eq!(names(&doc), ["load", "forward", "explode"]);
    assert_eq!(doc["phases"][2]["error"]["type"], "ValueError");
    assert_eq!(doc["failure"]["phase"], "explode");

    let out = dir.path().join("exit.json");
    with_fake_torch()
        .args(["measure", "--script"])
        .arg(fixture("scripts/job.py"))
        .arg("--output")
        .arg(&out)
        .args(["--", "--exit", "4"])
        .assert()
        .code(3);
    assert!(
        read_json(&out)["failure"]["message"]
            .as_str()
            .unwrap()
            .contains("status 4")
    );

    let out = dir.path().join("missing.json");
    with_fake_torch()
        .args(["measure", "--script", "/no/such/script.py", "--output"])
        .arg(&out)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("no such file"));
    assert!(!out.exists());
}

#[test]
fn dense_training_records_every_step() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("train.json");
    with_fake_torch()
        .args([
            "measure",
            "--task",
            "train",
            "--steps",
            "3",
            "--width",
            "256",
            "--batch",
            "2",
            "--context",
            "64",
            "--output",
        ])
        .arg(&out)
        .assert()
        .success();
    let doc = read_json(&out);
    let mut expected = vec!["model_load", "inputs"];
    for _ in 0..3 {
        expected.extend(["forward", "loss", "backward", "optimizer_step", "zero_grad"]);
    }
    expected.extend(["evaluation", "export"]);
    assert_eq!(names(&doc), expected);
    let phases = doc["phases"].as_array().unwrap();
    let steps: Vec<&serde_json::Value> = phases
        .iter()
        .filter(|p| p["name"] == "optimizer_step")
        .collect();
    assert_eq!(steps[0]["inputs"]["first_step"], true);
    assert_eq!(steps[1]["inputs"]["first_step"], false);
    // AdamW creates its states during the first step only.
    let grown = |p: &serde_json::Value| {
        p["devices"][0]["end_allocated_bytes"].as_u64().unwrap()
            - p["devices"][0]["start_allocated_bytes"].as_u64().unwrap()
    };
    assert!(grown(steps[0]) > 0);
    assert_eq!(grown(steps[1]), 0);
    let losses: Vec<&serde_json::Value> = phases
        .iter()
        .filter(|p| p["name"] == "loss")
        .map(|p| &p["inputs"]["loss"])
        .collect();
    assert!(losses.iter().all(|l| l.is_f64()));
    assert!(
        phases
            .iter()
            .filter(|p| p["name"] == "zero_grad")
            .all(|p| p["inputs"]["step_duration_s"].is_f64())
    );
    let export = phases.last().unwrap();
    assert!(export["inputs"]["safetensors"].is_string());
    // The prediction runs the same code on fake tensors: the fake torch has none, and says so.
    assert!(doc["prediction"].is_null());
    assert!(doc["predictions"].as_array().unwrap().is_empty());
    assert!(
        doc["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap()
            .contains("no prediction: the test suite's fake torch")),
        "{}",
        doc["notes"]
    );
    assert_eq!(doc["policies"]["protocol"], "per-phase");
}

#[test]
fn gradient_checkpointing_and_sgd_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ckpt.json");
    with_fake_torch()
        .args([
            "measure",
            "--task",
            "train",
            "--gradient-checkpointing",
            "--optimizer",
            "sgd",
            "--width",
            "256",
            "--output",
        ])
        .arg(&out)
        .assert()
        .success();
    let doc = read_json(&out);
    assert_eq!(doc["status"], "ok");
    let step = doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "optimizer_step")
        .unwrap();
    assert_eq!(
        step["devices"][0]["end_allocated_bytes"], step["devices"][0]["start_allocated_bytes"],
        "SGD keeps no state"
    );
}

#[test]
fn whole_loop_is_one_phase() {
    let dir = tempfile::tempdir().unwrap();
    for (task, file, expected) in [
        (
            "infer",
            "loop-infer.json",
            vec!["model_load", "inputs", "whole_loop"],
        ),
        (
            "train",
            "loop-train.json",
            vec!["model_load", "inputs", "whole_loop", "evaluation", "export"],
        ),
    ] {
        let out = dir.path().join(file);
        with_fake_torch()
            .args([
                "measure",
                "--whole-loop",
                "--task",
                task,
                "--width",
                "256",
                "--output",
            ])
            .arg(&out)
            .assert()
            .success();
        let doc = read_json(&out);
        assert_eq!(names(&doc), expected, "{task}");
        assert_eq!(doc["policies"]["protocol"], "whole-loop");
        assert_eq!(doc["phases"][2]["inputs"]["protocol"], "whole-loop");
    }
}

#[test]
fn causal_lm_without_transformers_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lm.json");
    let pythonpath =
        std::env::join_paths([fixture("no_transformers"), fixture("../fake_torch")]).unwrap();
    with_fake_torch()
        .env("PYTHONPATH", pythonpath)
        .args(["measure", "--workload", "causal-lm", "--model"])
        .arg(fixture("tiny/llama"))
        .args([
            "--batch",
            "2",
            "--prompt-tokens",
            "16",
            "--new-tokens",
            "4",
            "--output",
        ])
        .arg(&out)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("needs transformers"));
    assert!(!out.exists());
}

#[test]
fn causal_lm_input_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.json");
    for (args, message) in [
        (vec!["--workload", "causal-lm"], "needs --model"),
        (
            vec!["--workload", "causal-lm", "--model", "/no/such/config.json"],
            "no/such",
        ),
        (
            vec!["--task", "train", "--precision", "int8"],
            "not a training precision",
        ),
        (
            vec!["--task", "train", "--optimizer", "adafactor"],
            "adamw, sgd, adamw-8bit or paged-adamw-8bit",
        ),
        (
            vec!["--lora-rank", "8", "--lora-targets", "q_proj"],
            "causal-lm",
        ),
        (vec!["--gradient-checkpointing"], "--task train"),
        (vec!["--task", "train", "--steps", "1"], "1"),
    ] {
        with_fake_torch()
            .arg("measure")
            .args(&args)
            .arg("--output")
            .arg(&out)
            .assert()
            .code(1)
            .stderr(predicate::str::contains(message));
        assert!(!out.exists());
    }
}

/// Runs `tests/python/SCRIPT` with a JSON list of jobs and returns the list it prints.
pub(crate) fn python_jobs(
    python: &str,
    script: &str,
    jobs: &[serde_json::Value],
) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jobs.json");
    std::fs::write(&file, serde_json::to_string(jobs).unwrap()).unwrap();
    let out = std::process::Command::new(python)
        .env(
            "PYTHONPATH",
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python"),
        )
        .arg(fixture(&format!("../python/{script}")))
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The estimate's parameter count and KV term equal what transformers really builds and keeps,
/// on CPU, for a tiny config of every supported family (dynamic caches) and two static caches.
#[test]
#[ignore = "needs torch and transformers"]
fn kv_estimate_matches_transformers_cache() {
    let python = crate::common::torch_python();
    let tiny = fixture("tiny");
    let mut names: Vec<String> = std::fs::read_dir(&tiny)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 17, "a tiny config per family: {names:?}");
    let mut jobs: Vec<(String, &str)> = names.iter().map(|n| (n.clone(), "dynamic")).collect();
    jobs.extend([
        ("llama".to_string(), "static"),
        ("gemma2".to_string(), "static"),
    ]);
    let list: Vec<serde_json::Value> = jobs
        .iter()
        .map(|(n, cache)| serde_json::json!({"config": tiny.join(n).join("config.json"), "batch": 3, "prompt": 20, "new": 5, "cache": cache}))
        .collect();
    let observed = python_jobs(&python, "cache_on_cpu.py", &list);
    for ((name, cache), seen) in jobs.iter().zip(&observed) {
        let config = tiny.join(name);
        let doc = estimate_json(&[
            "--model",
            config.to_str().unwrap(),
            "--context",
            "25",
            "--batch",
            "3",
            "--cache",
            cache,
        ]);
        assert_eq!(
            doc["model"]["parameters"], seen["parameters"],
            "{name}: parameters"
        );
        assert_eq!(
            term_bytes(&doc, "KV cache ("),
            seen["after_decode"].as_u64().unwrap(),
            "{name} {cache}: KV bytes after decoding"
        );
    }
}

/// The built-in workloads' own code (dense inference and training, causal-lm generation with
/// several caches, training with mixed precision, checkpointing and LoRA) runs with real torch,
/// transformers and peft on the CPU, with a stand-in for the CUDA counters: every call they make
/// into those libraries is exercised for real. (A CPU run measures nothing; it checks the code.)
#[test]
#[ignore = "needs torch, transformers and peft"]
fn workloads_run_with_real_torch_on_cpu() {
    let python = crate::common::python_with(&["torch", "transformers", "peft"]);
    let cfg = |name: &str| fixture(&format!("tiny/{name}/config.json"));
    let dense = serde_json::json!({"workload": "dense", "devices": ["cpu"], "batch": 2, "context": 16, "width": 32, "depth": 2,
        "dtype": "float32", "warmup": 1, "repeats": 2, "seed": 0, "empty_cache": "between-repeats"});
    let with = |base: &serde_json::Value, extra: serde_json::Value| {
        let mut v = base.clone();
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    let lm = serde_json::json!({"workload": "causal-lm", "devices": ["cpu"], "batch": 2, "context": 16, "prompt_tokens": 12,
        "new_tokens": 3, "cache": "dynamic", "dtype": "float32", "seed": 0});
    let train = serde_json::json!({"task": "train", "steps": 2, "optimizer": "adamw", "precision": "fp32", "gradient_checkpointing": false});
    let mut jobs = vec![
        ("dense inference", dense.clone()),
        (
            "dense training, checkpointing",
            with(
                &with(&dense, train.clone()),
                serde_json::json!({"gradient_checkpointing": true}),
            ),
        ),
        (
            "dense bf16 sgd whole loop",
            with(
                &with(&dense, train.clone()),
                serde_json::json!({"dtype": "bfloat16", "precision": "bf16", "optimizer": "sgd", "whole_loop": true}),
            ),
        ),
        (
            "llama static cache",
            with(
                &lm,
                serde_json::json!({"model_config": cfg("llama"), "cache": "static"}),
            ),
        ),
        (
            "gemma2 dynamic cache",
            with(&lm, serde_json::json!({"model_config": cfg("gemma2")})),
        ),
        (
            "mistral sliding cache, whole loop",
            with(
                &lm,
                serde_json::json!({"model_config": cfg("mistral-sliding"), "cache": "sliding", "whole_loop": true}),
            ),
        ),
        (
            "deepseek_v3 generation",
            with(&lm, serde_json::json!({"model_config": cfg("deepseek_v3")})),
        ),
        (
            "qwen3_moe training, bf16-mixed, checkpointing",
            with(
                &with(&lm, train.clone()),
                serde_json::json!({"model_config": cfg("qwen3_moe"), "precision": "bf16-mixed", "gradient_checkpointing": true}),
            ),
        ),
    ];
    jobs.push((
        "llama LoRA training with checkpointing",
        with(&with(&lm, train.clone()), serde_json::json!({"model_config": cfg("llama"), "lora_rank": 4, "lora_targets": ["q_proj", "v_proj"], "gradient_checkpointing": true})),
    ));
    let list: Vec<serde_json::Value> = jobs.iter().map(|(_, j)| j.clone()).collect();
    let runs = python_jobs(&python, "workloads_on_cpu.py", &list);
    for ((name, job), run) in jobs.iter().zip(&runs) {
        assert!(run["error"].is_null(), "{name}: {}", run["error"]);
        let phases: Vec<&str> = run["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert!(
            run["phases"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p["status"] == "ok"),
            "{name}: {phases:?}"
        );
        assert_declared_phases(job, &phases, name);
        let last = *phases.last().unwrap();
        let expected_last = if job.get("task").is_some() {
            "export"
        } else if job.get("whole_loop").is_some() {
            "whole_loop"
        } else if job["workload"] == "dense" {
            "warm_forward"
        } else {
            "decode_warm"
        };
        assert_eq!(last, expected_last, "{name}: {phases:?}");
        if job["workload"] == "causal-lm" && job.get("task").is_none() {
            let bytes: Vec<u64> = run["phases"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|p| p["inputs"]["cache_bytes"].as_u64())
                .collect();
            assert!(
                !bytes.is_empty() && bytes.iter().all(|b| *b > 0),
                "{name}: the cache was measured on the model's device: {bytes:?}"
            );
        }
    }
}

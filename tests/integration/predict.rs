//! `iteragpu predict` with real torch, transformers and peft on the CPU (no GPU): the workloads'
//! own code runs on data-less CUDA tensors. Checked against (1) readings taken on the lent H200
//! (docs/measurements/h200-2026-11-29.md), to the byte, and (2) PyTorch's own MemTracker, an
//! independent accounting of the same run, phase by phase within 1%.

use crate::common::{
    DocumentKind, PhaseStatus, Phases, PredictionStatus, Ran, Run, fixture, iteragpu,
    python_checks, python_with, torch_python,
};
use predicates::prelude::*;
use std::path::Path;

/// `iteragpu predict ARGS --json`, which must succeed; `.prediction()` reads the document.
fn predict(python: &str, dir: &Path, name: &str, args: &[&str]) -> Ran {
    Run::predict()
        .args(["--python", python, "--json"])
        .output(dir.join(format!("{name}.json")))
        .args(args)
        .succeeds()
}

/// The readings of the H200 for the network of `h200_sequential.py`, in both cases it was run.
#[test]
#[ignore = "needs torch and transformers"]
fn predictions_equal_the_h200_readings() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let script = fixture("scripts/h200_sequential.py");
    let script = script.to_str().unwrap();
    // (args, end of inputs, end of the first forward, after del, first forward's peak allocated
    // and reserved), all read on the H200 with torch 2.11.
    let cases: [(&[&str], [u64; 5]); 2] = [
        (
            &[],
            [
                135_348_224,
                170_999_808,
                169_951_232,
                178_339_840,
                192_937_984,
            ],
        ),
        (
            &[
                "--batch",
                "8",
                "--context",
                "2048",
                "--width",
                "4096",
                "--dtype",
                "bfloat16",
            ],
            [
                1_208_123_392,
                1_376_944_128,
                1_242_726_400,
                2_316_468_224,
                2_317_352_960,
            ],
        ),
    ];
    for (k, (extra, expected)) in cases.iter().enumerate() {
        let mut args = vec!["--script", script, "--card", "H200", "--"];
        args.extend_from_slice(extra);
        let doc = predict(&python, dir.path(), &format!("h200-{k}"), &args).prediction();
        assert_eq!(doc.kind, DocumentKind::Prediction);
        let (inputs, cold, after_del) = (
            doc.phase("inputs"),
            doc.phase("cold_forward"),
            doc.phase("after_del"),
        );
        let got = [
            inputs.end_allocated_bytes,
            cold.end_allocated_bytes,
            after_del.end_allocated_bytes,
            cold.peak_allocated_bytes,
            cold.peak_reserved_bytes,
        ];
        assert_eq!(got, expected.map(Some), "case {k}");
    }
    // The same bf16 case with the two other allocator settings read there: peak reserved.
    for (conf, reserved) in [
        ("expandable_segments:True", 2_329_935_872u64),
        ("backend:cudaMallocAsync", 2_348_810_240),
    ] {
        let mut args = vec!["--script", script, "--card", "H200", "--"];
        args.extend_from_slice(cases[1].0);
        let doc = Run::predict()
            .env("PYTORCH_CUDA_ALLOC_CONF", conf)
            .args(["--python", &python, "--json"])
            .output(dir.path().join(format!("h200-{conf}.json")))
            .args(args)
            .succeeds()
            .prediction();
        let forward = doc.phase("cold_forward");
        assert_eq!(forward.peak_reserved_bytes, Some(reserved), "{conf}");
        assert_eq!(
            forward.peak_allocated_bytes,
            Some(2_316_468_224u64),
            "{conf}"
        );
    }
}

/// Runs the MemTracker oracle on the spec a prediction ran.
fn oracle(python: &str, dir: &Path, name: &str, doc: &serde_json::Value) -> serde_json::Value {
    let job = dir.join(format!("{name}-job.json"));
    std::fs::write(&job, doc["spec"].to_string()).unwrap();
    let out = std::process::Command::new(python)
        .env(
            "PYTHONPATH",
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python"),
        )
        .env("CUDA_VISIBLE_DEVICES", "")
        .arg(fixture("../python/memtracker_oracle.py"))
        .arg(&job)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["code"], 0,
        "{name}: the oracle's run failed: {}",
        doc["errors"]
    );
    doc
}

#[test]
#[ignore = "needs torch, transformers and peft"]
fn predictions_agree_with_memtracker_phase_by_phase() {
    let python = python_with(&["torch", "transformers", "peft"]);
    let dir = tempfile::tempdir().unwrap();
    let tiny = |name: &str| {
        fixture(&format!("tiny/{name}/config.json"))
            .display()
            .to_string()
    };
    let (llama, mistral) = (tiny("llama"), tiny("mistral-sliding"));
    let scripts = fixture("scripts");
    let train_loop = scripts.join("train_loop.py").display().to_string();
    let h200 = scripts.join("h200_sequential.py").display().to_string();
    let mut cases: Vec<(&str, Vec<&str>)> = vec![
        (
            "dense inference",
            vec!["--batch", "2", "--context", "64", "--width", "256"],
        ),
        (
            "dense training fp32 adamw",
            vec![
                "--task",
                "train",
                "--batch",
                "2",
                "--context",
                "64",
                "--width",
                "256",
            ],
        ),
        (
            "dense training fp16-mixed adamw (GradScaler)",
            vec![
                "--task",
                "train",
                "--precision",
                "fp16-mixed",
                "--batch",
                "2",
                "--context",
                "64",
                "--width",
                "256",
            ],
        ),
        (
            "dense training bf16-mixed sgd",
            vec![
                "--task",
                "train",
                "--precision",
                "bf16-mixed",
                "--optimizer",
                "sgd",
                "--width",
                "256",
            ],
        ),
        (
            "llama generation, dynamic cache",
            vec![
                "--workload",
                "causal-lm",
                "--model",
                &llama,
                "--prompt-tokens",
                "24",
                "--new-tokens",
                "4",
                "--batch",
                "2",
            ],
        ),
        (
            "llama generation, static cache",
            vec![
                "--workload",
                "causal-lm",
                "--model",
                &llama,
                "--cache",
                "static",
                "--prompt-tokens",
                "24",
                "--new-tokens",
                "4",
            ],
        ),
        (
            "mistral generation, sliding cache",
            vec![
                "--workload",
                "causal-lm",
                "--model",
                &mistral,
                "--cache",
                "sliding",
                "--prompt-tokens",
                "24",
                "--new-tokens",
                "4",
            ],
        ),
        (
            "llama training bf16-mixed, checkpointing",
            vec![
                "--workload",
                "causal-lm",
                "--model",
                &llama,
                "--task",
                "train",
                "--precision",
                "bf16-mixed",
                "--gradient-checkpointing",
                "--context",
                "32",
            ],
        ),
        (
            "llama training bf16-mixed, FSDP2 over 8 ranks (rank 0)",
            vec![
                "--workload",
                "causal-lm",
                "--model",
                &llama,
                "--task",
                "train",
                "--precision",
                "bf16-mixed",
                "--context",
                "32",
                "--world-size",
                "8",
                "--shard",
                "fsdp",
            ],
        ),
        (
            "llama training fp32, DDP over 64 ranks (rank 0)",
            vec![
                "--workload",
                "causal-lm",
                "--model",
                &llama,
                "--task",
                "train",
                "--context",
                "32",
                "--world-size",
                "64",
                "--shard",
                "ddp",
            ],
        ),
        (
            "script: a training loop with .item()",
            vec!["--script", &train_loop],
        ),
        ("script: the H200 network", vec!["--script", &h200]),
    ];
    cases.push((
        "llama training bf16-mixed, LoRA",
        vec![
            "--workload",
            "causal-lm",
            "--model",
            &llama,
            "--task",
            "train",
            "--precision",
            "bf16-mixed",
            "--lora-rank",
            "4",
            "--lora-targets",
            "q_proj,v_proj",
            "--context",
            "32",
        ],
    ));
    for (k, (name, args)) in cases.iter().enumerate() {
        let run = predict(&python, dir.path(), &format!("case-{k}"), args);
        let truth = oracle(&python, dir.path(), &format!("case-{k}"), &run.json());
        let doc = run.prediction();
        // The oracle follows the workload's own phases (the tool's automatic ones are ours).
        let ours: Vec<_> = doc.phases.iter().filter(|p| !p.automatic).collect();
        let theirs = truth["phases"].as_array().unwrap();
        assert_eq!(ours.len(), theirs.len(), "{name}: phases");
        for (o, t) in ours.iter().zip(theirs) {
            assert_eq!(t["name"], o.name.as_str(), "{name}");
            assert_eq!(o.status, PhaseStatus::Predicted, "{name}: {}", o.name);
            // Tensors only: MemTracker sees neither the libraries' workspaces nor the allocator.
            let (ours, theirs) = (
                o.peak_tensor_bytes.unwrap(),
                t["peak_bytes"].as_u64().unwrap(),
            );
            let error = (ours as f64 - theirs as f64).abs() / (theirs.max(1) as f64);
            assert!(
                error <= 0.01,
                "{name}, phase {}: predicted {ours} vs MemTracker {theirs} ({:.2}%)",
                o.name,
                error * 100.0
            );
            // The published peak adds only the allocator's rounding and the workspaces.
            let peak = o.peak_allocated_bytes.unwrap();
            assert!(peak >= ours, "{name}");
        }
    }
}

#[test]
#[ignore = "needs torch and transformers"]
fn reads_from_data_are_placeholders_and_data_dependent_phases_are_bounded() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let script = fixture("scripts/train_loop.py");
    let doc = predict(
        &python,
        dir.path(),
        "item",
        &["--script", script.to_str().unwrap()],
    )
    .prediction();
    let reads = &doc.assumptions.placeholder_reads;
    assert_eq!(reads.len(), 1, "{reads:?}");
    assert_eq!(reads[0].count, 2, "the loss read at each of the 2 steps");
    assert!(reads[0].file.as_deref().unwrap().ends_with("train_loop.py"));
    assert_eq!(doc.status, PredictionStatus::Complete);

    let script = fixture("scripts/data_dependent.py");
    let doc = predict(
        &python,
        dir.path(),
        "dd",
        &["--script", script.to_str().unwrap()],
    )
    .prediction();
    let marked: Vec<_> = doc.phases.iter().filter(|p| !p.automatic).collect();
    let status: Vec<PhaseStatus> = marked.iter().map(|p| p.status).collect();
    assert_eq!(
        status,
        [
            PhaseStatus::Predicted,
            PhaseStatus::Bounded,
            PhaseStatus::Predicted
        ]
    );
    assert_eq!(doc.status, PredictionStatus::Complete);
    // The whole run holds the bounded phase: bounded too.
    assert_eq!(doc.phases[0].name, "run data_dependent.py");
    assert_eq!(doc.phases[0].status, PhaseStatus::Bounded);
    let select = marked[1];
    // Its figures at the largest selection, `lower` at the smallest: never a guessed number.
    let upper = select.peak_allocated_bytes.unwrap();
    let lower = select
        .lower
        .as_ref()
        .and_then(|l| l.peak_allocated_bytes)
        .unwrap();
    assert!(lower < upper, "{lower} vs {upper}");
    assert_eq!(select.unpredictable[0].line, Some(11));
    assert!(
        select.unpredictable[0]
            .file
            .as_deref()
            .unwrap()
            .ends_with("data_dependent.py")
    );
}

#[test]
#[ignore = "needs torch and transformers"]
fn a_script_that_raises_exits_1_with_its_phases() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let run = Run::predict()
        .arg("--script")
        .arg(fixture("scripts/raises.py"))
        .args(["--python", &python])
        .output(dir.path().join("p.json"))
        .expect_status(1)
        .stdout_has("this script fails on purpose");
    let innermost = r"raised from \S*raises\.py:9, in <module> \(the innermost line of your code";
    assert!(
        predicate::str::is_match(innermost)
            .unwrap()
            .eval(&run.stdout()),
        "{innermost:?} in {}",
        run.stdout()
    );
    let doc = run.prediction();
    assert_eq!(doc.status, PredictionStatus::Failed);
    // The user's frame, in the failure's text and its detail, with the traceback's last lines.
    let detail = doc.failure_detail.as_ref().expect("the failure's detail");
    assert_eq!(detail.kind, "ValueError");
    let frame = detail.frame.as_ref().expect("the user's frame");
    assert!(frame.file.ends_with("scripts/raises.py"));
    assert_eq!(frame.line, 9);
    assert!(doc.failure.as_deref().unwrap().ends_with("raises.py:9)"));
    let tail = &detail.traceback_tail;
    assert!(!tail.is_empty() && tail.len() <= 12);
    assert_eq!(
        tail.last().unwrap(),
        "ValueError: this script fails on purpose"
    );
    let status = |name: &str| doc.phase(name).status;
    assert_eq!(status("load"), PhaseStatus::Predicted);
    assert_eq!(status("broken"), PhaseStatus::Failed);
    assert_eq!(status("run raises.py"), PhaseStatus::Failed);
}

#[test]
fn predict_refuses_bad_input_and_needs_pytorch() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.json");
    for (args, message) in [
        (vec!["--card", "MI300X"], "CUDA devices only"),
        (vec!["--card", "GTX 480"], "unknown card"),
        (
            vec!["--card", "H200", "--device", "cuda:0"],
            "cannot be used with",
        ),
        (vec!["--device", "cuda:0,cuda:1"], "one device"),
        (
            vec![
                "--workload",
                "causal-lm",
                "--model",
                "tests/fixtures/tiny/llama/config.json",
                "--task",
                "train",
                "--precision",
                "fp16-mixed",
                "--world-size",
                "2",
                "--shard",
                "ddp",
            ],
            "fp16-mixed with --shard is not supported yet",
        ),
        (
            vec!["--world-size", "16384"],
            "above the 4096 ranks predict follows",
        ),
        (
            vec!["--card", "L4", "--memory-limit", "30GiB"],
            "--memory-limit 32.21 GB = 30.00 GiB is more than L4's total_memory",
        ),
        (
            vec!["--memory-limit", "100MiB"],
            "--memory-limit 0.10 GB = 0.10 GiB leaves nothing to PyTorch's allocator",
        ),
        (vec!["--memory-limit", "0"], "is no memory at all"),
        (vec!["--memory-limit", "8G"], "ambiguous"),
    ] {
        Run::predict()
            .args(&args)
            .output(&out)
            .expect_status(1)
            .stderr_has(message)
            .wrote_nothing();
    }
    Run::predict()
        .args(["--python", "python3"])
        .output(&out)
        .env("PYTHONPATH", fixture("no_torch"))
        .expect_status(2)
        .stderr_has("PyTorch cannot be imported")
        .wrote_nothing();
}

/// The SDPA backend choice CUDA would make on each card (a port of PyTorch's select_sdp_backend),
/// and what each backend allocates, checked on fake CPU tensors.
#[test]
#[ignore = "needs torch and transformers"]
fn sdpa_rules_follow_pytorchs() {
    let python = torch_python();
    python_checks(&python, "sdpa_rules.py");
}

/// A torch outside the supported range (2.6 to 2.15) is refused as soon as the worker reports its
/// environment: exit 2, the version and the range said, no file.
#[test]
fn predict_refuses_a_torch_outside_its_range() {
    let dir = tempfile::tempdir().unwrap();
    Run::predict()
        .args(["--python", "python3"])
        .output(dir.path().join("p.json"))
        .env("PYTHONPATH", fixture("old_torch"))
        .expect_status(2)
        .stderr_has(
            "torch 2.5.1 is not supported by predict (supported: 2.6 to 2.15); install one of those in the interpreter given with --python",
        )
        .wrote_nothing();
}

/// `--like` takes a measurement or `environment --json`: any other file is refused before anything
/// runs (the interpreter given does not even exist).
#[test]
fn predict_like_refuses_other_files_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.json");
    let series = dir.path().join("series.json");
    std::fs::write(&series, r#"{"schema": "iteragpu.series/1"}"#).unwrap();
    let estimate = dir.path().join("estimate.json");
    let run = iteragpu()
        .args([
            "estimate",
            "--parameters",
            "1000000",
            "--bits",
            "16",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(run.status.success());
    std::fs::write(&estimate, &run.stdout).unwrap();
    for (file, message) in [
        (
            &series,
            "is a `iteragpu.series/1` file; --like takes a measurement",
        ),
        (
            &estimate,
            "is a `iteragpu.estimate/1` file; --like takes a measurement",
        ),
        (&dir.path().join("missing.json"), "does not exist"),
    ] {
        Run::predict()
            .args(["--python", "/nonexistent/python", "--like"])
            .arg(file)
            .output(&out)
            .expect_status(1)
            .stderr_has(message)
            .wrote_nothing();
    }
}

/// `--like` compares the prediction's versions with a measurement's (here the fake torch's) and
/// with an environment report's; without it, a note names the versions predicted with.
#[test]
#[ignore = "needs torch and transformers"]
fn predict_like_compares_the_versions() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let measured = dir.path().join("m.json");
    Run::measure()
        .fake_torch()
        .args(["--python", "python3"])
        .output(&measured)
        .succeeds();
    // Without --like: the note.
    let plain = predict(&python, dir.path(), "plain", &[]).prediction();
    let torch = plain.assumptions.torch_version.as_deref().unwrap();
    assert!(plain.like.is_none());
    assert!(
        plain
            .notes
            .iter()
            .any(|n| n.starts_with(&format!("predicted with torch {torch}, transformers "))),
        "{:?}",
        plain.notes
    );
    // Against the fake torch's measurement: torch differs, with a warning.
    let run = Run::predict()
        .args(["--python", &python])
        .output(dir.path().join("like.json"))
        .arg("--like")
        .arg(&measured)
        .succeeds()
        .stderr_has(&format!(
            "warning: torch {torch} here vs 0.0.0+fake there (in "
        ))
        .stderr_has("up to ~3% per phase and ~4% on peak reserved")
        .stdout_has("  versions differ from ");
    let doc = run.prediction();
    let like = doc.like.as_ref().expect("the comparison");
    assert_eq!(like.kind, "measurement");
    assert_eq!(like.sha256.as_deref().unwrap().len(), 64);
    assert_eq!(like.versions["torch"].target.as_deref(), Some("0.0.0+fake"));
    assert_eq!(like.versions["torch"].prediction.as_deref(), Some(torch));
    assert_eq!(like.differences[0], "torch");
    assert!(!doc.notes.iter().any(|n| n.contains("give --like")));
    // Against an environment report with the same versions: they match.
    let a = &plain.assumptions;
    let env = dir.path().join("env.json");
    std::fs::write(
        &env,
        serde_json::json!({"driver": null, "driver_reason": "no driver", "python_reason": null,
            "python": {"python": {}, "settings": {}, "transformers_version": a.transformers_version,
                "peft_version": a.peft_version, "can_measure": true, "reason": null,
                "torch": {"version": torch, "cuda_version": a.cuda_version, "devices": []}}})
        .to_string(),
    )
    .unwrap();
    let doc = predict(
        &python,
        dir.path(),
        "same",
        &["--like", env.to_str().unwrap()],
    )
    .prediction();
    let like = doc.like.expect("the comparison");
    assert_eq!(like.kind, "environment");
    assert!(like.differences.is_empty());
}

/// `--output` is optional for predict: a new name in the current folder, said on stderr; `-`
/// writes the document to standard output only. measure and sweep still need one.
#[test]
#[ignore = "needs torch and transformers"]
fn predict_names_its_output_or_writes_to_standard_output() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let dense = ["--batch", "2", "--context", "16", "--width", "64"];
    let run = Run::predict()
        .current_dir(dir.path())
        .args(["--python", &python])
        .args(dense)
        .succeeds();
    let written: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    assert!(written[0].starts_with("prediction-dense-") && written[0].ends_with(".json"));
    assert!(run.stderr().contains(&written[0]));
    let run = Run::predict()
        .current_dir(dir.path())
        .args(["--python", &python])
        .output("-")
        .args(dense)
        .succeeds();
    let doc: crate::common::PredictionDoc =
        serde_json::from_str(&run.stdout()).expect("only the document");
    assert_eq!(doc.kind, DocumentKind::Prediction);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no file named -"
    );
    for args in [
        &dense[..],
        &["--vary", "batch=1,2", "--context", "16", "--width", "64"][..],
    ] {
        let command = if args[0] == "--vary" {
            "sweep"
        } else {
            "measure"
        };
        Run::command(command)
            .current_dir(dir.path())
            .args(args)
            .expect_status(1)
            .stderr_has("--output PATH is required");
    }
}

/// estimate and predict answer the same LoRA question with the same weights: the frozen base in
/// the compute dtype (bf16 under bf16-mixed), the adapters in fp32 (issue 20: they differed by 2×).
#[test]
#[ignore = "needs torch and transformers"]
fn estimate_and_predict_agree_on_a_lora_base() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let model = fixture("models/llama-3-8b").display().to_string();
    let question = [
        "--model",
        &model,
        "--train",
        "--precision",
        "bf16-mixed",
        "--lora-rank",
        "16",
        "--lora-targets",
        "q_proj,v_proj",
        "--context",
        "256",
    ];
    let estimate = crate::common::estimate_json(&question);
    let term = |prefix: &str| crate::common::term_bytes(&estimate, prefix);
    let weights = term("weights") + term("LoRA adapters");
    let mut args: Vec<&str> = vec!["--workload", "causal-lm", "--task", "train"];
    args.extend(question.iter().filter(|a| **a != "--train"));
    let doc = predict(&python, dir.path(), "lora", &args).prediction();
    let load = doc.phase("model_load");
    // What stays on the device after loading: the parameters and the (rotary) buffers.
    let buffers = load
        .at_peak
        .as_ref()
        .and_then(|a| a.by_category.get("buffer").copied())
        .unwrap_or(0);
    let predicted = load.end_allocated_bytes.unwrap() - buffers;
    assert_eq!(
        predicted, weights,
        "predict {predicted} vs estimate {weights}"
    );
}

/// The simulated card (issue 20, item 3): a `--memory-limit` just below forward's predicted peak
/// runs out of memory in forward, at the script's line, with the allocation's module and category
/// and the post-mortem; backward is not reached; the exit status is measure's for an
/// out-of-memory (3). A limit at the peak changes no byte of the phases. `cards --from` reads the
/// need with unlimited memory.
#[test]
#[ignore = "needs torch and transformers"]
fn a_prediction_runs_out_of_the_cards_memory_where_it_would() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let script = fixture("scripts/predict_oom.py");
    let run = |name: &str, limit: Option<u64>, status: i32| {
        let mut r = Run::predict()
            .arg("--script")
            .arg(&script)
            .args(["--python", &python])
            .output(dir.path().join(format!("{name}.json")));
        if let Some(limit) = limit {
            r = r.args(["--memory-limit", &limit.to_string()]);
        }
        r.expect_status(status)
    };
    let free = run("free", None, 0).prediction();
    assert_eq!(free.status, PredictionStatus::Complete);
    assert!(free.out_of_memory.is_none());
    let context = free.target.context_bytes;
    let forward = free.phase("forward").peak_reserved_bytes.unwrap();
    let peak = free.max_peak_reserved().unwrap();

    let ran = run("oom", Some(context + forward - 1), 3);
    let stdout = ran.stdout();
    let doc = ran.prediction();
    assert_eq!(doc.status, PredictionStatus::OutOfMemory);
    let status = |name: &str| doc.phase(name).status;
    assert_eq!(status("load"), PhaseStatus::Predicted);
    assert_eq!(status("forward"), PhaseStatus::OutOfMemory);
    assert_eq!(status("backward"), PhaseStatus::NotReached);
    assert_eq!(doc.phase("backward").peak_reserved_bytes, None);
    assert_eq!(
        doc.phase("load").peak_reserved_bytes,
        free.phase("load").peak_reserved_bytes
    );
    let capacity = doc.capacity.as_ref().unwrap();
    assert!(capacity.memory_fraction);
    assert_eq!(capacity.allocator_bytes, forward - 1);
    let oom = doc.out_of_memory.as_ref().expect("the out-of-memory");
    assert_eq!(oom.phase.as_deref(), Some("forward"));
    // ReLU's output, saved for backward: 2048 × 4096 float32.
    assert_eq!(oom.requested_bytes, 2048 * 4096 * 4);
    assert_eq!(oom.category.to_string(), "activation");
    assert_eq!(oom.module.as_deref(), Some("Sequential.1"));
    assert!(
        oom.file
            .as_deref()
            .unwrap()
            .ends_with("scripts/predict_oom.py")
    );
    assert_eq!(oom.line, Some(11));
    assert!(oom.reserved_bytes + oom.segment_bytes > capacity.allocator_bytes);
    assert_eq!(oom.unlimited_peak_reserved_bytes, Some(peak));
    let report = &oom.post_mortem.report;
    assert_eq!(
        report.reserved_but_unallocated.as_ref().unwrap().bytes.0,
        oom.reserved_unallocated_bytes
    );
    let class = oom.post_mortem.diagnosis.class.label();
    assert!(["capacity", "fragmentation"].contains(&class), "{class}");
    for said in [
        "predicted out of memory in phase forward: a ",
        "(33,554,432 bytes; module Sequential.1, category activation, at ",
        "predict_oom.py:11) with ",
        "; later phases not reached",
        &format!("out-of-memory post-mortem: {class} — "),
    ] {
        assert!(stdout.contains(said), "{said:?} in {stdout}");
    }
    Run::command("cards")
        .arg("--from")
        .arg(dir.path().join("oom.json"))
        .succeeds()
        .stdout_has(&format!(
            "need per device: {} bytes",
            iteragpu::units::Bytes(peak).grouped()
        ))
        .stdout_has("with unlimited memory (predicted out of memory in phase forward");

    // At the peak: not a byte changes.
    let fits = run("fits", Some(context + peak), 0).prediction();
    assert_eq!(fits.status, PredictionStatus::Complete);
    assert!(fits.out_of_memory.is_none());
    assert_eq!(
        serde_json::to_value(&fits.phases).unwrap(),
        serde_json::to_value(&free.phases).unwrap()
    );
}

/// A prediction ends with os._exit (no static destructor may race autograd's device thread): the
/// temporary folders Python libraries opened are still removed, as a normal exit removes them
/// (torch 2.6's `import torch._dynamo` opens one, which every prediction used to leave behind;
/// the CI's torch-2.6 pass runs this test there).
#[test]
#[ignore = "needs torch"]
fn a_prediction_leaves_nothing_in_the_temporary_folder() {
    let python = python_with(&["torch"]);
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    Run::predict()
        .args(["--python", &python, "--card", "H100 80GB", "--width", "32"])
        .env("TMPDIR", &tmp)
        .output(dir.path().join("pred.json"))
        .succeeds();
    // torch's compiler cache, `torchinductor_USER`, is one folder per user reused by every run
    // (torch's own design, not a leftover of this run).
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| !n.to_string_lossy().starts_with("torchinductor_"))
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}

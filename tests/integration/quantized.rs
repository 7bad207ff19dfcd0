//! Quantized weights (issue 29): `estimate`'s quantized terms held to the bytes the formats' own
//! code stores, and torchao's weight-only quantization run on data-less tensors.
//!
//! The ground truth is `tests/python/quantized_bytes.py`: transformers builds the real module tree
//! from the fixture's config and picks what stays unquantized; bitsandbytes really quantizes one
//! weight per distinct shape on the CPU (its packed data, absmax, code tables, nested state and
//! offset; LLM.int8's CB and SCB), multiplied by the layers of that shape. GPTQ and AWQ layers are
//! laid out as their libraries register their buffers (neither library installs here).

use crate::common::{Run, estimate_json, fixture, id_bytes, python_with, term_by_id};

/// What `quantized_bytes.py` reports for a config and a format.
fn ground_truth(python: &str, model: &str, args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(python)
        .arg(fixture("../python/quantized_bytes.py"))
        .arg(fixture(&format!("models/{model}")))
        .args(args)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "quantized_bytes.py {model} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("quantized_bytes.py prints JSON")
}

/// The estimate's quantized and unquantized weights equal the library's, to the byte, and the
/// quantized parameters are the same layers'.
fn agrees(estimate: &serde_json::Value, truth: &serde_json::Value, what: &str) {
    let quantized = term_by_id(estimate, "quantized_weights");
    assert_eq!(
        quantized["bytes"].as_u64(),
        truth["quantized_bytes"].as_u64(),
        "{what}: estimate's quantized weights vs the library's ({})",
        truth["shapes"]
    );
    assert_eq!(
        quantized["inputs"]["quantized_parameters"].as_u64(),
        truth["quantized_parameters"].as_u64(),
        "{what}: quantized parameters"
    );
    assert_eq!(
        Some(id_bytes(estimate, "unquantized_weights")),
        truth["unquantized_bytes"].as_u64(),
        "{what}: the modules kept unquantized ({})",
        truth["kept"]
    );
    assert_eq!(truth["kept"], serde_json::json!(["lm_head"]), "{what}");
}

/// Llama-3-8B loaded by bitsandbytes 0.50 through transformers' BitsAndBytesConfig: nf4 with and
/// without double quantization, fp4, LLM.int8.
#[test]
#[ignore = "needs torch, transformers and bitsandbytes"]
fn bitsandbytes_storage_agrees_with_the_estimate() {
    let python = python_with(&["torch", "transformers", "bitsandbytes"]);
    let llama = fixture("models/llama-3-8b").display().to_string();
    for (format, double) in [
        ("nf4", true),
        ("nf4", false),
        ("fp4", false),
        ("int8", false),
    ] {
        let mut est_args = vec!["--model", llama.as_str(), "--quantize", format];
        let mut truth_args = vec![format];
        if double {
            est_args.push("--double-quant");
            truth_args.push("--double-quant");
        }
        let truth = ground_truth(&python, "llama-3-8b", &truth_args);
        agrees(&estimate_json(&est_args), &truth, &format!("{est_args:?}"));
    }
    // The published checkpoint's own config (nf4, double quantization) reads the same.
    let own = estimate_json(&[
        "--model",
        &fixture("models/llama-3-8b-bnb-4bit").display().to_string(),
    ]);
    let flag = estimate_json(&["--model", &llama, "--quantize", "nf4", "--double-quant"]);
    assert_eq!(
        id_bytes(&own, "quantized_weights"),
        id_bytes(&flag, "quantized_weights")
    );
}

/// GPTQ (4-bit, group 128, desc_act false) and AWQ (GEMM, 4-bit, group 128) checkpoints.
#[test]
#[ignore = "needs torch and transformers"]
fn gptq_and_awq_storage_agrees_with_the_estimate() {
    let python = python_with(&["torch", "transformers"]);
    for model in ["llama-2-7b-gptq", "mistral-7b-awq"] {
        let truth = ground_truth(&python, model, &["checkpoint"]);
        let est = estimate_json(&[
            "--model",
            &fixture(&format!("models/{model}")).display().to_string(),
        ]);
        agrees(&est, &truth, model);
    }
}

/// QLoRA's frozen base: peft's prepare_model_for_kbit_training casts the unquantized bfloat16
/// parameters to float32 (the quantized ones stay packed); inference leaves them in bfloat16.
#[test]
fn qlora_counts_the_upcast_of_the_unquantized_modules() {
    let llama = fixture("models/llama-3-8b").display().to_string();
    let q = [
        "--model",
        llama.as_str(),
        "--quantize",
        "nf4",
        "--double-quant",
    ];
    let infer = estimate_json(&q);
    let mut args = q.to_vec();
    args.extend([
        "--train",
        "--lora-rank",
        "16",
        "--lora-targets",
        "q_proj,v_proj",
        "--precision",
        "bf16-mixed",
    ]);
    let train = estimate_json(&args);
    assert_eq!(id_bytes(&infer, "unquantized_weights"), 2_101_878_784);
    assert_eq!(id_bytes(&train, "unquantized_weights"), 4_203_757_568);
    assert_eq!(
        id_bytes(&infer, "quantized_weights"),
        id_bytes(&train, "quantized_weights")
    );
    assert_eq!(
        term_by_id(&train, "unquantized_weights")["dtype"],
        "float32"
    );
    // GPTQ is left alone by peft.
    let gptq = fixture("models/llama-2-7b-gptq").display().to_string();
    let train = estimate_json(&[
        "--model",
        &gptq,
        "--train",
        "--lora-rank",
        "16",
        "--lora-targets",
        "q_proj,v_proj",
        "--precision",
        "bf16-mixed",
    ]);
    assert_eq!(
        term_by_id(&train, "unquantized_weights")["dtype"],
        "bfloat16"
    );
}

/// `--quantize` is refused where it cannot act, with what to do.
#[test]
fn quantize_refusals_say_what_to_do() {
    let llama = fixture("models/llama-3-8b").display().to_string();
    let bnb = fixture("models/llama-3-8b-bnb-4bit").display().to_string();
    for (args, words) in [
        (
            vec!["--model", bnb.as_str(), "--quantize", "nf4"],
            "stored quantized already",
        ),
        (
            vec![
                "--model",
                llama.as_str(),
                "--quantize",
                "int8",
                "--double-quant",
            ],
            "LLM.int8",
        ),
        (
            vec![
                "--parameters",
                "8000000000",
                "--bits",
                "16",
                "--quantize",
                "nf4",
            ],
            "--model",
        ),
    ] {
        let out = crate::common::iteragpu()
            .arg("estimate")
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(words),
            "{args:?}: {err}"
        );
    }
}

/// torchao's weight-only int8, float8 and int4 (tinygemm's tile-packed layout) on data-less CUDA
/// tensors: the quantized weights and their scales at their true bytes (each a multiple of 512,
/// so the allocator's rounding adds nothing). int8 and float8 are held to what torchao itself
/// stores on the CPU for the same layers (the script's `cpu` mode: the inner tensors of each
/// quantized weight); int4's tile packing needs CUDA (`aten::_convert_weight_to_int4pack`), so it
/// is held to the layout torchao documents (int4_tile_packed_to_4d_tensor.py: qdata int32
/// [n/8, k/128, 32, 4], i.e. n·k/2 bytes, and scale_and_zero bf16 [k/128, n, 2]). torchao's default
/// int4 layout needs the mslk kernels: the run says so and stops, never a crash.
#[test]
#[ignore = "needs torch and torchao"]
fn torchao_weight_only_runs_data_less() {
    let python = python_with(&["torch", "torchao"]);
    let dir = tempfile::tempdir().unwrap();
    let script = fixture("scripts/quantized/torchao_weight_only.py");
    let on_cpu = |kind: &str| -> u64 {
        let out = std::process::Command::new(&python)
            .env(
                "PYTHONPATH",
                std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python"),
            )
            .arg(&script)
            .args([kind, "cpu"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let last = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .to_string();
        serde_json::from_str::<serde_json::Value>(&last).unwrap()["bytes"]
            .as_u64()
            .unwrap()
    };
    let int4 = (4096 * 4096 / 2 + 32 * 4096 * 4) + (1024 * 4096 / 2 + 32 * 1024 * 4);
    for (kind, expected) in [
        ("int8", on_cpu("int8")),
        ("float8", on_cpu("float8")),
        ("int4-tile", int4),
    ] {
        let doc = Run::predict()
            .args(["--python", &python, "--script"])
            .arg(&script)
            .args(["--", kind])
            .output(dir.path().join(format!("{kind}.json")))
            .succeeds()
            .prediction();
        let forward = doc
            .phases
            .iter()
            .find(|p| p.name == "forward")
            .unwrap_or_else(|| panic!("{kind}: no forward phase"));
        let at = forward
            .at_peak
            .as_ref()
            .expect("a predicted phase has its peak");
        let parameters = at.by_category.get("parameter").copied().unwrap_or(0);
        assert_eq!(parameters, expected, "{kind}: {:?}", at.by_category);
    }
    let doc = Run::predict()
        .args(["--python", &python, "--script"])
        .arg(&script)
        .args(["--", "int4"])
        .output(dir.path().join("int4.json"))
        .expect_status(1)
        .prediction();
    let said = serde_json::to_string(&doc.failure).unwrap();
    assert!(said.contains("mslk"), "{said}");
}

/// The causal-lm workload's `--quantize` load and QLoRA recipe (`build_quantized`, peft's
/// `prepare_model_for_kbit_training`, LoRA, checkpointing, AdamW) run with real torch,
/// transformers, peft and bitsandbytes on the CPU: every linear layer but the output head is
/// bitsandbytes', and the generation and training phases complete.
#[test]
#[ignore = "needs torch, transformers, peft and bitsandbytes"]
fn quantized_workload_runs_with_real_bitsandbytes_on_cpu() {
    let python = python_with(&["torch", "transformers", "peft", "bitsandbytes"]);
    let config = fixture("tiny/llama/config.json");
    let lm = serde_json::json!({"workload": "causal-lm", "devices": ["cpu"], "batch": 2, "context": 16,
        "prompt_tokens": 12, "new_tokens": 3, "cache": "dynamic", "dtype": "bfloat16", "seed": 0,
        "model_config": config});
    let with = |extra: serde_json::Value| {
        let mut v = lm.clone();
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    let jobs = [
        with(
            serde_json::json!({"quantize": "nf4", "double_quant": true, "task": "train", "steps": 2,
            "optimizer": "adamw", "precision": "bf16-mixed", "gradient_checkpointing": true,
            "lora_rank": 4, "lora_targets": ["q_proj", "v_proj"]}),
        ),
        with(serde_json::json!({"quantize": "fp4", "double_quant": false})),
        with(serde_json::json!({"quantize": "int8", "double_quant": false})),
    ];
    let runs = crate::workloads::python_jobs(&python, "workloads_on_cpu.py", &jobs);
    for (job, run) in jobs.iter().zip(&runs) {
        let what = &job["quantize"];
        assert!(run["error"].is_null(), "{what}: {}", run["error"]);
        let phases = run["phases"].as_array().unwrap();
        assert!(
            phases.iter().all(|p| p["status"] == "ok"),
            "{what}: {phases:?}"
        );
        let load = &phases[0];
        assert_eq!(load["name"], "model_load");
        assert!(
            load["inputs"]["quantized_linear_layers"]
                .as_u64()
                .unwrap_or(0)
                > 0,
            "{what}: {load}"
        );
        assert_eq!(
            load["inputs"]["kept_unquantized"],
            serde_json::json!(["lm_head"])
        );
        let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
        crate::common::assert_declared_phases(job, &names, &what.to_string());
    }
}

/// The fiche keeps the storage and compute formats apart: beside a run of the same model, the
/// quantized weights in their storage format, the modules kept in another precision and the
/// compute format's dequantization temporary, each with its bytes, in English and in French.
#[test]
#[ignore = "needs torch and transformers"]
fn the_fiche_keeps_storage_and_compute_formats_apart() {
    let python = python_with(&["torch", "transformers"]);
    let dir = tempfile::tempdir().unwrap();
    let tiny = fixture("tiny/llama").display().to_string();
    Run::predict()
        .args([
            "--python",
            &python,
            "--workload",
            "causal-lm",
            "--model",
            &tiny,
        ])
        .output(dir.path().join("run.json"))
        .succeeds();
    let est = crate::common::iteragpu()
        .args([
            "estimate",
            "--model",
            &tiny,
            "--dtype",
            "bfloat16",
            "--quantize",
            "nf4",
            "--double-quant",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(est.status.success());
    std::fs::write(dir.path().join("est.json"), &est.stdout).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&est.stdout).unwrap();
    for (lang, heading, storage) in [
        (
            "en",
            "Storage and compute formats",
            "quantized linear weights (storage format",
        ),
        (
            "fr",
            "Formats de stockage et de calcul",
            "poids linéaires quantifiés",
        ),
    ] {
        let out = dir.path().join(format!("fiche-{lang}.md"));
        Run::report()
            .arg(dir.path().join("run.json"))
            .args([
                "--estimate",
                dir.path().join("est.json").to_str().unwrap(),
                "--lang",
                lang,
            ])
            .output(&out)
            .succeeds();
        let text = std::fs::read_to_string(&out).unwrap();
        let at = text
            .find(heading)
            .unwrap_or_else(|| panic!("{lang}: no {heading}:\n{text}"));
        let section = &text[at..];
        for needle in [storage, "bnb nf4 + double quant", "`bfloat16`"] {
            assert!(
                section.contains(needle),
                "{lang}: {needle} missing:\n{section}"
            );
        }
    }
    assert!(id_bytes(&doc, "quantized_weights") > 0);
}

/// bitsandbytes' 4-bit forward dequantizes each weight for its matmul (`dequantize_4bit`): the
/// replay tags those storages `dequantized weight`, and the fiche beside the estimate says that
/// term is predicted, not assumed.
#[test]
#[ignore = "needs torch, transformers and bitsandbytes"]
fn the_dequantized_weight_is_seen_by_the_replay_and_no_longer_assumed() {
    let python = python_with(&["torch", "transformers", "bitsandbytes"]);
    let dir = tempfile::tempdir().unwrap();
    let tiny = fixture("tiny/llama").display().to_string();
    let common = [
        "--model",
        tiny.as_str(),
        "--dtype",
        "bfloat16",
        "--quantize",
        "nf4",
        "--batch",
        "4",
        "--prompt-tokens",
        "500",
        "--new-tokens",
        "2",
    ];
    let pred = dir.path().join("pred.json");
    Run::predict()
        .args([
            "--python",
            &python,
            "--workload",
            "causal-lm",
            "--card",
            "L4",
        ])
        .args(common)
        .output(&pred)
        .succeeds();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&pred).unwrap()).unwrap();
    // 4 × 500 prompt tokens are more rows than bitsandbytes' fused 4-bit kernel takes (1,536 on
    // CUDA): each quantized layer's prefill dequantizes its weight (the tiny model's largest,
    // 128 × 64 in bfloat16: 16 KiB); a decode step's 4 rows take the fused kernel.
    let seen = &doc["dequantized"];
    assert_eq!(seen["largest_bytes"], 128 * 64 * 2, "{doc}");
    assert!(seen["count"].as_u64().unwrap() >= 21, "{seen}");
    let est = crate::common::iteragpu()
        .arg("estimate")
        .args(&common[..6])
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        est.status.success(),
        "{}",
        String::from_utf8_lossy(&est.stderr)
    );
    std::fs::write(dir.path().join("est.json"), &est.stdout).unwrap();
    let out = dir.path().join("fiche.md");
    Run::report()
        .arg(&pred)
        .args(["--estimate", dir.path().join("est.json").to_str().unwrap()])
        .output(&out)
        .succeeds();
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("predicted, not assumed"), "{text}");
}

/// Llama-3-8B stored as compressed-tensors W4A16 (pack-quantized, group 128) and FP8
/// (float-quantized, per channel), and HQQ 4-bit (group 64): `estimate`'s quantized and
/// unquantized weights equal, to the byte, what compressed-tensors 0.20's own
/// `apply_quantization_config` and `compress_model` leave on the modules and what hqq's own
/// `HQQLinear` stores (`tests/python/scheme_bytes.py`). Needs both libraries.
#[test]
#[ignore = "needs torch, transformers, compressed-tensors and hqq"]
fn compressed_tensors_and_hqq_storage_agrees_with_the_estimate() {
    let python = python_with(&["torch", "transformers", "compressed_tensors", "hqq"]);
    for model in [
        "llama-3-8b-w4a16",
        "llama-3-8b-fp8-dynamic",
        "llama-3-8b-hqq-4bit",
    ] {
        let out = std::process::Command::new(&python)
            .arg(fixture("../python/scheme_bytes.py"))
            .arg(fixture(&format!("models/{model}")))
            .output()
            .expect("python runs");
        assert!(
            out.status.success(),
            "scheme_bytes.py {model}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let truth: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("scheme_bytes.py prints JSON");
        let path = fixture(&format!("models/{model}")).display().to_string();
        let estimate = estimate_json(&["--model", &path]);
        agrees(&estimate, &truth, model);
    }
}

/// bitsandbytes' ops are custom ops, whose fake kernels FakeTensorMode runs on every call: the
/// memo keeps what they made (`memo.py`'s `_custom_entry`). A QLoRA step with a paged 8-bit AdamW
/// (nf4 `gemm_4bit`, `dequantize_4bit`, the blockwise quantizers, the optimizer's in-place update)
/// predicts the same document with the memo, without it, and with every reuse checked against
/// the fake kernel itself (`ITERAGPU_PREDICT_MEMO=check`), but for the steps' durations.
#[test]
#[ignore = "needs torch, transformers, peft and bitsandbytes"]
fn quantized_ops_memoised_give_the_same_document() {
    let python = python_with(&["torch", "transformers", "peft", "bitsandbytes"]);
    let dir = tempfile::tempdir().unwrap();
    let model = fixture("tiny/llama").display().to_string();
    let document = |memo: &str| {
        let out = dir.path().join(format!("memo-{memo}.json"));
        let run = Run::predict()
            .args(["--python", &python, "--card", "RTX 4090"])
            .args([
                "--workload",
                "causal-lm",
                "--model",
                &model,
                "--task",
                "train",
            ])
            .args(["--quantize", "nf4", "--double-quant", "--lora-rank", "4"])
            .args(["--lora-targets", "all-linear", "--gradient-checkpointing"])
            .args([
                "--precision",
                "bf16-mixed",
                "--optimizer",
                "paged-adamw-8bit",
            ])
            .args(["--batch", "2", "--context", "64"])
            .env("ITERAGPU_PREDICT_MEMO", memo)
            .output(&out)
            .finish();
        assert!(out.exists(), "memo {memo}: no prediction: {}", run.stderr());
        let mut doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        fn timeless(v: &mut serde_json::Value) {
            match v {
                serde_json::Value::Object(m) => {
                    m.remove("created_at");
                    m.remove("step_duration_s");
                    m.values_mut().for_each(timeless);
                }
                serde_json::Value::Array(a) => a.iter_mut().for_each(timeless),
                _ => {}
            }
        }
        timeless(&mut doc);
        doc
    };
    let without = document("0");
    assert_eq!(without["status"], "complete", "{without}");
    let text = without.to_string();
    assert!(
        text.contains("quantized_linear_layers") && text.contains("optimizer_step"),
        "nf4 layers and an optimizer step: {text}"
    );
    for memo in ["1", "check"] {
        let with = document(memo);
        assert!(
            with == without,
            "memo {memo} changed the prediction:\n--- without\n{without}\n--- with\n{with}"
        );
    }
}

/// The README's QLoRA question on the tiny Llama (nf4 with double quantization, LoRA on every
/// linear layer, gradient checkpointing, paged AdamW 8-bit): bitsandbytes' fake kernels keep the
/// symbol, and every batch made concrete equals its own run.
#[test]
#[ignore = "needs torch and bitsandbytes"]
fn one_trace_of_a_qlora_sweep_gives_the_documents_of_per_value_runs() {
    let python = crate::common::torch_python();
    let dir = tempfile::tempdir().unwrap();
    let tiny = fixture("tiny/llama");
    crate::predict_one_trace::check_equal(
        &python,
        dir.path(),
        "qlora",
        &[
            "--workload",
            "causal-lm",
            "--model",
            tiny.to_str().unwrap(),
            "--task",
            "train",
        ]
        .into_iter()
        .chain(["--quantize", "nf4", "--double-quant", "--lora-rank", "4"])
        .chain(["--lora-targets", "all-linear", "--gradient-checkpointing"])
        .chain([
            "--precision",
            "bf16-mixed",
            "--optimizer",
            "paged-adamw-8bit",
        ])
        .chain(["--context", "64", "--vary", "batch=1,2,3,4,6"])
        .collect::<Vec<_>>(),
        "1",
        2,
    );
}

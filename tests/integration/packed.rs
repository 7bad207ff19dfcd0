//! GPTQ and AWQ checkpoints predicted by the built-in causal-lm workload (issue 45): their linear
//! layers built in the format's packed layout (`workloads/packed.py`), the weights' bytes equal
//! to `estimate`'s for the same config, at long contexts.

use crate::common::{
    PhaseStatus, Phases, PredictionStatus, Run, estimate_json, fixture, python_with, term_by_id,
};

#[test]
#[ignore = "needs torch and transformers"]
fn predict_gptq_and_awq_checkpoints_with_estimates_weight_bytes() {
    let python = python_with(&["torch", "transformers"]);
    let dir = tempfile::tempdir().unwrap();
    // Llama-2-7B GPTQ at its 4,096 positions; Llama-3-8B GPTQ and Mistral-7B AWQ at 8,192
    // tokens of context.
    for (name, prompt, format) in [
        ("llama-2-7b-gptq", "4092", "GPTQ"),
        ("llama-3-8b-gptq", "8188", "GPTQ"),
        ("mistral-7b-awq", "8188", "AWQ"),
    ] {
        let model = fixture(&format!("models/{name}"));
        let run = Run::predict()
            .output(dir.path().join(format!("{name}.json")))
            .args(["--workload", "causal-lm", "--model"])
            .arg(&model)
            .args([
                "--batch",
                "1",
                "--prompt-tokens",
                prompt,
                "--new-tokens",
                "4",
            ])
            .args(["--card", "RTX 5070", "--python", &python])
            .finish();
        let said = format!("{}{}", run.stdout(), run.stderr());
        assert_eq!(run.code(), Some(0), "{name}: {said}");
        let doc = run.prediction();
        assert_eq!(doc.status, PredictionStatus::Complete, "{name}: {said}");
        assert!(
            doc.phases
                .iter()
                .all(|p| p.status == PhaseStatus::Predicted),
            "{name}"
        );
        assert!(
            doc.dimensions["quantization"]
                .as_str()
                .unwrap()
                .starts_with(format),
            "{:?}",
            doc.dimensions
        );
        let estimate = estimate_json(&["--model", model.to_str().unwrap()]);
        let packed = term_by_id(&estimate, "quantized_weights")["bytes"]
            .as_u64()
            .unwrap();
        let float = term_by_id(&estimate, "unquantized_weights")["bytes"]
            .as_u64()
            .unwrap();
        let load = &doc.phases[0];
        assert_eq!(load.name, "model_load");
        let by = &load.at_peak.as_ref().unwrap().by_category;
        // The packed tensors are buffers (as the formats' QuantLinear registers them); the
        // rotary inverse frequencies are buffers too (two of 512 bytes at most).
        let buffers = by["buffer"];
        assert!(
            (packed..packed + 2048).contains(&buffers),
            "{name}: {buffers} vs {packed}"
        );
        assert_eq!(by["parameter"], float, "{name}");
    }
}

/// A tiny Llama stored as `format` (`gptq` or `awq`, 4 bits, groups of 32): its config and one
/// `model.safetensors` (header and zeros) in `dir`; returns the packed tensors' bytes.
fn tiny_packed_checkpoint(dir: &std::path::Path, format: &str) -> u64 {
    let (vocab, hidden, inter, kv, group) = (1000u64, 256u64, 512u64, 128u64, 32u64);
    let mut config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 2048,
        "tie_word_embeddings": false, "torch_dtype": "float16",
        "quantization_config": {"quant_method": format, "bits": 4, "group_size": group},
    });
    if format == "gptq" {
        config["quantization_config"]["desc_act"] = false.into();
        config["quantization_config"]["sym"] = true.into();
    } else {
        config["quantization_config"]["version"] = "gemm".into();
        config["quantization_config"]["zero_point"] = true.into();
    }
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec_pretty(&config).unwrap(),
    )
    .unwrap();
    let mut tensors: Vec<(String, &str, Vec<u64>)> = vec![
        (
            "model.embed_tokens.weight".into(),
            "F16",
            vec![vocab, hidden],
        ),
        ("model.norm.weight".into(), "F16", vec![hidden]),
        ("lm_head.weight".into(), "F16", vec![vocab, hidden]),
    ];
    let mut packed = 0u64;
    for l in 0..2 {
        for (n, inp, out) in [
            ("self_attn.q_proj", hidden, hidden),
            ("self_attn.k_proj", hidden, kv),
            ("self_attn.v_proj", hidden, kv),
            ("self_attn.o_proj", hidden, hidden),
            ("mlp.gate_proj", hidden, inter),
            ("mlp.up_proj", hidden, inter),
            ("mlp.down_proj", inter, hidden),
        ] {
            let p = format!("model.layers.{l}.{n}");
            let mut add = |name: &str, dtype: &'static str, shape: Vec<u64>, size: u64| {
                packed += shape.iter().product::<u64>() * size;
                tensors.push((format!("{p}.{name}"), dtype, shape));
            };
            if format == "gptq" {
                add("qweight", "I32", vec![inp / 8, out], 4);
                add("g_idx", "I32", vec![inp], 4);
            } else {
                add("qweight", "I32", vec![inp, out / 8], 4);
            }
            add("qzeros", "I32", vec![inp / group, out / 8], 4);
            add("scales", "F16", vec![inp / group, out], 2);
        }
        for n in ["input_layernorm", "post_attention_layernorm"] {
            tensors.push((format!("model.layers.{l}.{n}.weight"), "F16", vec![hidden]));
        }
    }
    let crate::hub_server::File::Shard { head, len } = crate::hub_server::shard(&tensors) else {
        unreachable!()
    };
    let mut bytes = head;
    bytes.resize(len as usize, 0);
    std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
    packed
}

/// The same formats loaded by a user's script through transformers' own `from_pretrained`,
/// where the format's library (optimum/gptqmodel) is not installed: built packed, predicted, the
/// packed tensors' bytes those of the checkpoint.
#[test]
#[ignore = "needs torch and transformers"]
fn predict_a_scripts_gptq_and_awq_load_without_their_library() {
    let python = python_with(&["torch", "transformers"]);
    let has_library = std::process::Command::new(&python)
        .args(["-c", "import gptqmodel"])
        .output()
        .is_ok_and(|o| o.status.success());
    if has_library {
        eprintln!(
            "gptqmodel is installed: the library's own layers run instead; not this test's subject"
        );
        return;
    }
    for format in ["gptq", "awq"] {
        let dir = tempfile::tempdir().unwrap();
        let packed = tiny_packed_checkpoint(dir.path(), format);
        let run = Run::predict()
            .output(dir.path().join("p.json"))
            .args(["--python", &python, "--card", "L4", "--script"])
            .arg(fixture("scripts/predict/packed_checkpoint.py"))
            .arg("--")
            .arg(dir.path())
            .finish();
        let said = format!("{}{}", run.stdout(), run.stderr());
        assert_eq!(run.code(), Some(0), "{format}: {said}");
        assert!(said.contains("generated (1, 260)"), "{format}: {said}");
        let doc = run.prediction();
        assert_eq!(doc.status, PredictionStatus::Complete, "{format}: {said}");
        assert!(
            doc.notes.iter().any(|n| n.contains("without its library")),
            "{:?}",
            doc.notes
        );
        // At the run's peak: the packed tensors as buffers (the checkpoint's, filled data-less;
        // the rotary frequencies beside them), the float16 embeddings, head and norms.
        let by = &doc.phases[0].at_peak.as_ref().unwrap().by_category;
        let buffers = by["buffer"];
        assert!(
            (packed..packed + 2048).contains(&buffers),
            "{format}: {buffers} vs {packed}: {by:?}"
        );
        let float = (2 * 1000 * 256 + 256 + 2 * 2 * 256) * 2;
        assert!(by["parameter"] >= float, "{format}: {by:?}");
    }
}

/// A fine-grained FP8 checkpoint (`quant_method: fp8`, 128 x 128 blocks) loaded through
/// transformers: its linear layers predicted through transformers' own dequantization (the Hub
/// kernels DeepGEMM and finegrained-fp8 are never run by a prediction), said.
#[test]
#[ignore = "needs torch and transformers"]
fn predict_an_fp8_checkpoint_through_transformers_reference() {
    let python = python_with(&["torch", "transformers"]);
    let dir = tempfile::tempdir().unwrap();
    let run = Run::predict()
        .output(dir.path().join("fp8.json"))
        .args(["--python", &python, "--card", "H100 80GB", "--script"])
        .arg(fixture("scripts/predict/quantized_checkpoint.py"))
        .arg("--")
        .arg(fixture("tiny/llama"))
        .arg("fp8")
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(0), "{said}");
    let doc = run.prediction();
    assert_eq!(doc.status, PredictionStatus::Complete, "{said}");
    let generate = doc.phases.iter().find(|p| p.name == "generate").unwrap();
    assert_eq!(generate.status, PhaseStatus::Predicted);
    assert!(generate.peak_allocated_bytes.is_some());
    assert!(
        doc.notes.iter().any(|n| n.contains("FP8 linear layers")),
        "{:?}",
        doc.notes
    );
}

/// compressed-tensors (W4A16 pack-quantized, FP8 float-quantized) and HQQ 4-bit checkpoints of
/// Llama-3-8B predicted by the built-in causal-lm workload: the weights' bytes at the load equal
/// `estimate`'s (compressed-tensors' weight_shape tensors of 16 bytes each rounded up to the
/// allocator's 512); compressed-tensors' layers decompressed at the first forward, as
/// transformers runs them.
#[test]
#[ignore = "needs torch and transformers"]
fn predict_compressed_tensors_and_hqq_checkpoints_with_estimates_weight_bytes() {
    let python = python_with(&["torch", "transformers"]);
    let dir = tempfile::tempdir().unwrap();
    for (name, prompt, format, rounding) in [
        (
            "llama-3-8b-w4a16",
            "8188",
            "compressed-tensors pack-quantized 4-bit",
            224 * 496,
        ),
        (
            "llama-3-8b-fp8-dynamic",
            "1020",
            "compressed-tensors float-quantized 8-bit",
            0,
        ),
        ("llama-3-8b-hqq-4bit", "1020", "HQQ 4-bit", 0),
    ] {
        let model = fixture(&format!("models/{name}"));
        let run = Run::predict()
            .output(dir.path().join(format!("{name}.json")))
            .args(["--workload", "causal-lm", "--model"])
            .arg(&model)
            .args([
                "--batch",
                "1",
                "--prompt-tokens",
                prompt,
                "--new-tokens",
                "4",
            ])
            .args(["--card", "H100 80GB", "--python", &python])
            .finish();
        let said = format!("{}{}", run.stdout(), run.stderr());
        assert_eq!(run.code(), Some(0), "{name}: {said}");
        let doc = run.prediction();
        assert_eq!(doc.status, PredictionStatus::Complete, "{name}: {said}");
        assert!(
            doc.phases
                .iter()
                .all(|p| p.status == PhaseStatus::Predicted),
            "{name}"
        );
        assert!(
            doc.dimensions["quantization"]
                .as_str()
                .unwrap()
                .starts_with(format),
            "{:?}",
            doc.dimensions
        );
        let estimate = estimate_json(&["--model", model.to_str().unwrap()]);
        let quantized = term_by_id(&estimate, "quantized_weights")["bytes"]
            .as_u64()
            .unwrap();
        let float = term_by_id(&estimate, "unquantized_weights")["bytes"]
            .as_u64()
            .unwrap();
        let load = &doc.phases[0];
        assert_eq!(load.name, "model_load");
        let by = &load.at_peak.as_ref().unwrap().by_category;
        // compressed-tensors registers its tensors as parameters; HQQ keeps W_q a parameter and
        // its scale and zero beside it (buffers here); the rotary frequencies are one buffer of
        // 1,024 bytes.
        let weights = by["parameter"] + by.get("buffer").copied().unwrap_or(0) - 1024;
        assert_eq!(weights, quantized + float + rounding, "{name}: {by:?}");
        let said_how = if name.contains("hqq") {
            "as hqq's HQQLinear holds them"
        } else {
            "decompressed to dense bfloat16 weights at the model's first forward"
        };
        assert!(
            doc.notes.iter().any(|n| n.contains(said_how)),
            "{name}: {:?}",
            doc.notes
        );
        if name.contains("w4a16") {
            // After the first forward: the dense bfloat16 weights (8,030,261,248 parameters
            // less the unquantized 1,050,939,392), beside the scales kept.
            let prefill = doc.phases.iter().find(|p| p.name == "prefill").unwrap();
            let dense = (8_030_261_248u64 - float / 2) * 2;
            let held = prefill.at_peak.as_ref().unwrap().by_category["parameter"];
            assert!(held > dense + float, "{held} vs {dense} + {float}");
        }
    }
}

/// A tiny Llama stored as compressed-tensors (`w4a16`: pack-quantized int4, groups of 32;
/// `fp8`: float-quantized, per-channel) or HQQ (`hqq`: 4 bits, groups of 64), its config and one
/// `model.safetensors` (header and zeros) in `dir`, written as each library saves them.
fn tiny_scheme_checkpoint(dir: &std::path::Path, format: &str) {
    let (vocab, hidden, inter, kv) = (1000u64, 256u64, 512u64, 128u64);
    let weights = |bits: u64, kind: &str, strategy: &str, group: Option<u64>| serde_json::json!({"num_bits": bits, "type": kind, "symmetric": true, "strategy": strategy, "group_size": group, "dynamic": false});
    let quantization = match format {
        "w4a16" => serde_json::json!({
            "quant_method": "compressed-tensors", "format": "pack-quantized",
            "quantization_status": "compressed", "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights(4, "int", "group", Some(32))}},
        }),
        "fp8" => serde_json::json!({
            "quant_method": "compressed-tensors", "format": "float-quantized",
            "quantization_status": "compressed", "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights(8, "float", "channel", None),
                "input_activations": {"num_bits": 8, "type": "float", "symmetric": true, "strategy": "token", "dynamic": true}}},
        }),
        _ => serde_json::json!({
            "quant_method": "hqq", "skip_modules": ["lm_head"],
            "quant_config": {"offload_meta": false, "scale_quant_params": null, "zero_quant_params": null,
                "weight_quant_params": {"nbits": 4, "group_size": 64, "axis": 1, "channel_wise": true, "optimize": true, "round_zero": true, "view_as_float": false}},
        }),
    };
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 2048,
        "tie_word_embeddings": false, "torch_dtype": "bfloat16",
        "quantization_config": quantization,
    });
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec_pretty(&config).unwrap(),
    )
    .unwrap();
    let mut tensors: Vec<(String, &str, Vec<u64>)> = vec![
        (
            "model.embed_tokens.weight".into(),
            "BF16",
            vec![vocab, hidden],
        ),
        ("model.norm.weight".into(), "BF16", vec![hidden]),
        ("lm_head.weight".into(), "BF16", vec![vocab, hidden]),
    ];
    for l in 0..2 {
        for (n, inp, out) in [
            ("self_attn.q_proj", hidden, hidden),
            ("self_attn.k_proj", hidden, kv),
            ("self_attn.v_proj", hidden, kv),
            ("self_attn.o_proj", hidden, hidden),
            ("mlp.gate_proj", hidden, inter),
            ("mlp.up_proj", hidden, inter),
            ("mlp.down_proj", inter, hidden),
        ] {
            let p = format!("model.layers.{l}.{n}");
            let mut add = |name: &str, dtype: &'static str, shape: Vec<u64>| {
                tensors.push((format!("{p}.{name}"), dtype, shape));
            };
            match format {
                "w4a16" => {
                    add("weight_packed", "I32", vec![out, inp / 8]);
                    add("weight_scale", "BF16", vec![out, inp / 32]);
                    add("weight_shape", "I64", vec![2]);
                }
                "fp8" => {
                    add("weight", "F8_E4M3", vec![out, inp]);
                    add("weight_scale", "BF16", vec![out, 1]);
                }
                _ => {
                    let groups = inp * out / 64;
                    add("W_q", "U8", vec![groups / 2, 64]);
                    add("scale", "BF16", vec![groups, 1]);
                    add("zero", "BF16", vec![groups, 1]);
                }
            }
        }
        for n in ["input_layernorm", "post_attention_layernorm"] {
            tensors.push((format!("model.layers.{l}.{n}.weight"), "BF16", vec![hidden]));
        }
    }
    let crate::hub_server::File::Shard { head, len } = crate::hub_server::shard(&tensors) else {
        unreachable!()
    };
    let mut bytes = head;
    bytes.resize(len as usize, 0);
    // compressed-tensors reads each `weight_shape` back to unpack: [out, in], as it saves them.
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    for (name, _, shape) in &tensors {
        let Some(layer) = name.strip_suffix(".weight_scale") else {
            continue;
        };
        let Some(offsets) = header[format!("{layer}.weight_shape")]["data_offsets"].as_array()
        else {
            continue;
        };
        let start = 8 + n + offsets[0].as_u64().unwrap() as usize;
        let inp = shape[1] * 32;
        bytes[start..start + 8].copy_from_slice(&(shape[0] as i64).to_le_bytes());
        bytes[start + 8..start + 16].copy_from_slice(&(inp as i64).to_le_bytes());
    }
    std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
}

/// A compressed-tensors checkpoint loaded by a user's script through transformers'
/// `from_pretrained`: with compressed-tensors installed its own code runs on the data-less
/// tensors; without it (the oldest environment) the layers are built in its tensors from the
/// config. Either way the `weights` phase ends at `estimate`'s bytes (the 16-byte weight_shape
/// tensors rounded up to 512), and the first forward decompresses the layers to bfloat16.
#[test]
#[ignore = "needs torch and transformers"]
fn predict_a_scripts_compressed_tensors_load_with_estimates_weight_bytes() {
    let python = python_with(&["torch", "transformers"]);
    let has_library = std::process::Command::new(&python)
        .args(["-c", "import compressed_tensors"])
        .output()
        .is_ok_and(|o| o.status.success());
    for (format, rounding) in [("w4a16", 14 * 496), ("fp8", 4 * 256)] {
        let dir = tempfile::tempdir().unwrap();
        tiny_scheme_checkpoint(dir.path(), format);
        let estimate = estimate_json(&["--model", dir.path().to_str().unwrap()]);
        let weights = term_by_id(&estimate, "quantized_weights")["bytes"]
            .as_u64()
            .unwrap()
            + term_by_id(&estimate, "unquantized_weights")["bytes"]
                .as_u64()
                .unwrap();
        let run = Run::predict()
            .output(dir.path().join("p.json"))
            .args(["--python", &python, "--card", "L4", "--script"])
            .arg(fixture("scripts/predict/checkpoint_phases.py"))
            .arg("--")
            .arg(dir.path())
            .finish();
        let said = format!("{}{}", run.stdout(), run.stderr());
        assert_eq!(run.code(), Some(0), "{format}: {said}");
        assert!(said.contains("generated (1, 260)"), "{format}: {said}");
        let doc = run.prediction();
        assert_eq!(doc.status, PredictionStatus::Complete, "{format}: {said}");
        let fallback = doc.notes.iter().any(|n| n.contains("without its library"));
        assert_eq!(fallback, !has_library, "{:?}", doc.notes);
        // The weights' bytes (the rotary frequencies' 1,024 beside them).
        let load = doc.phase("weights");
        assert_eq!(
            load.end_allocated_bytes,
            Some(weights + rounding + 1024),
            "{format} ({weights} estimated): {said}"
        );
        // After the first forward: the quantized layers decompressed to bfloat16.
        let dense = 2 * 2 * (256 * 256 * 2 + 256 * 128 * 2 + 256 * 512 * 3);
        let generate = doc.phase("generate");
        assert_eq!(generate.status, PhaseStatus::Predicted);
        assert!(
            generate.end_allocated_bytes.unwrap() > weights + dense / 2,
            "{format}: {generate:?}"
        );
    }
}

/// An HQQ checkpoint loaded by a user's script through transformers' `from_pretrained`:
/// transformers 5.24 and 5.25 build no HQQ layer from a checkpoint (with hqq installed or not),
/// so the layers are float `nn.Linear` in the load dtype; predicted so, and said.
#[test]
#[ignore = "needs torch and transformers"]
fn predict_a_scripts_hqq_load_as_transformers_builds_it() {
    let python = python_with(&["torch", "transformers"]);
    let dir = tempfile::tempdir().unwrap();
    tiny_scheme_checkpoint(dir.path(), "hqq");
    let run = Run::predict()
        .output(dir.path().join("p.json"))
        .args(["--python", &python, "--card", "L4", "--script"])
        .arg(fixture("scripts/predict/checkpoint_phases.py"))
        .arg("--")
        .arg(dir.path())
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(0), "{said}");
    let doc = run.prediction();
    assert_eq!(doc.status, PredictionStatus::Complete, "{said}");
    assert!(
        doc.notes
            .iter()
            .any(|n| n.contains("transformers builds no HQQ layer")),
        "{:?}",
        doc.notes
    );
    // Every parameter in bfloat16: embeddings, head, norms and the dense linear layers.
    let params =
        2 * 1000 * 256 + 256 + 2 * (2 * 256 + 256 * 256 * 2 + 256 * 128 * 2 + 256 * 512 * 3);
    let load = doc.phase("weights");
    assert_eq!(load.end_allocated_bytes, Some(params * 2 + 1024), "{said}");
}

/// hqq's own `HQQLinear` (hqq installed) quantizing a float16 4096 x 4096 layer on data-less
/// tensors: once quantized, the layer holds what `estimate` computes for HQQ 4-bit, group 64
/// (`W_q` 8,388,608 bytes, scale and zero 524,288 each); its forward runs its own dequantization.
/// Needs hqq (the oldest environment lacks it: no "predict" in the name).
#[test]
#[ignore = "needs torch and hqq"]
fn hqq_own_linear_runs_data_less_at_estimates_bytes() {
    let python = python_with(&["torch", "hqq"]);
    let dir = tempfile::tempdir().unwrap();
    let run = Run::predict()
        .output(dir.path().join("p.json"))
        .args(["--python", &python, "--card", "L4", "--script"])
        .arg(fixture("scripts/predict/hqq_linear.py"))
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(0), "{said}");
    assert!(said.contains("forward (8, 4096)"), "{said}");
    let doc = run.prediction();
    assert_eq!(doc.status, PredictionStatus::Complete, "{said}");
    let hqq = iteragpu::model::quantization::hqq::Scheme {
        bits: 4,
        group_size: Some(64),
        axis: 1,
        compute_dtype: iteragpu::dtype::Dtype::Float16,
    };
    assert_eq!(hqq.linear_bytes(4096, 4096), 9_437_184);
    assert_eq!(
        doc.phase("quantize").end_allocated_bytes,
        Some(9_437_184),
        "{said}"
    );
    assert_eq!(doc.phase("forward").status, PhaseStatus::Predicted);
}

/// LoRA on a GPTQ checkpoint (issue 45): peft's own `GPTQLoraLinear` over the packed layers,
/// every linear layer with `all-linear`; the adapters, their gradients and AdamW's states equal
/// `estimate`'s for the same config, and training without adapters is refused with the fix.
#[test]
#[ignore = "needs torch, transformers and peft"]
fn predict_lora_on_a_gptq_checkpoint_trains_peft_s_adapters_over_its_packed_layers() {
    let python = python_with(&["torch", "transformers", "peft"]);
    let dir = tempfile::tempdir().unwrap();
    let model = fixture("models/llama-2-7b-gptq");
    let lora = ["--lora-rank", "16", "--lora-targets", "all-linear"];
    let run = Run::predict()
        .output(dir.path().join("gptq-lora.json"))
        .args(["--workload", "causal-lm", "--model"])
        .arg(&model)
        .args(["--task", "train", "--context", "512", "--batch", "1"])
        .args(lora)
        .args(["--card", "RTX 4090", "--python", &python])
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(0), "{said}");
    assert!(said.contains("GPTQLoraLinear"), "{said}");
    let doc = run.prediction();
    assert_eq!(doc.status, PredictionStatus::Complete, "{said}");
    let load = &doc.phases[0];
    // Llama-2-7B, r = 16 on its seven projections: 32 × 16 × (4 × 8,192 + 3 × 15,104).
    assert_eq!(load.inputs["trainable_parameters"], 39_976_960, "{said}");
    let estimate =
        estimate_json(&[&["--model", model.to_str().unwrap(), "--train"][..], &lora].concat());
    let adapters = term_by_id(&estimate, "lora_adapters")["bytes"]
        .as_u64()
        .unwrap();
    let step = doc
        .phases
        .iter()
        .find(|p| p.name == "optimizer_step")
        .expect("an optimizer step");
    let by = &step.at_peak.as_ref().unwrap().by_category;
    assert_eq!(by["gradient"], adapters, "the adapters' float32 gradients");
    assert_eq!(by["optimizer state"], 2 * adapters, "AdamW's two states");
    // The packed weights stay the checkpoint's buffers, never trained.
    let packed = term_by_id(&estimate, "quantized_weights")["bytes"]
        .as_u64()
        .unwrap();
    assert!((packed..packed + 2048).contains(&by["buffer"]), "{by:?}");
    Run::predict()
        .args(["--workload", "causal-lm", "--model"])
        .arg(&model)
        .args(["--task", "train", "--python", &python])
        .expect_status(1)
        .stderr_has("add --lora-rank");
}

/// A user's LoRA fine-tune of a GPTQ checkpoint, as peft documents it (`from_pretrained`,
/// `prepare_model_for_kbit_training`, `get_peft_model`, AdamW), without optimum/gptqmodel:
/// peft's own `GPTQLoraLinear` over the packed layers built in their place, every phase
/// predicted, the adapters' gradients and AdamW's states at their float32 bytes.
#[test]
#[ignore = "needs torch, transformers and peft"]
fn predict_a_scripts_lora_on_a_gptq_load_without_its_library() {
    let python = python_with(&["torch", "transformers", "peft"]);
    let has_library = std::process::Command::new(&python)
        .args(["-c", "import gptqmodel"])
        .output()
        .is_ok_and(|o| o.status.success());
    if has_library {
        eprintln!("gptqmodel is installed: the library's own layers run instead");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    tiny_packed_checkpoint(dir.path(), "gptq");
    let run = Run::predict()
        .output(dir.path().join("p.json"))
        .args(["--python", &python, "--card", "L4", "--script"])
        .arg(fixture("scripts/predict/packed_lora_train.py"))
        .arg("--")
        .arg(dir.path())
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(0), "{said}");
    // r = 8 on q_proj (256 → 256) and v_proj (256 → 128) of 2 layers.
    let adapters = 2 * 8 * ((256 + 256) + (256 + 128));
    assert!(said.contains(&format!("trainable {adapters}")), "{said}");
    assert!(said.contains("steps 2"), "{said}");
    let doc = run.prediction();
    assert_eq!(doc.status, PredictionStatus::Complete, "{said}");
    assert!(
        doc.notes.iter().any(|n| n.contains("GPTQLoraLinear")),
        "{:?}",
        doc.notes
    );
    assert!(doc.phases.iter().all(|p| p.peak_allocated_bytes.is_some()));
    assert!(said.contains("predicted to fit"), "{said}");
}

//! GPTQ and AWQ checkpoints predicted by the built-in causal-lm workload (issue 45): their linear
//! layers built in the format's packed layout (`workloads/packed.py`), the weights' bytes equal
//! to `estimate`'s for the same config, at long contexts.

use crate::common::{
    PhaseStatus, PredictionStatus, Run, estimate_json, fixture, python_with, term_by_id,
};

#[test]
#[ignore = "needs torch and transformers"]
fn predict_gptq_and_awq_checkpoints_with_estimates_weight_bytes() {
    let python = python_with(&["torch", "transformers"]);
    let dir = tempfile::tempdir().unwrap();
    // Llama-2-7B GPTQ at its 4,096 positions; Mistral-7B AWQ at 8,192 tokens of context.
    for (name, prompt, format) in [
        ("llama-2-7b-gptq", "4092", "GPTQ"),
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

use crate::common::{estimate_json, fixture, id_bytes, iteragpu, term_by_id, term_bytes};
use predicates::prelude::*;

#[test]
fn the_guides_first_command() {
    iteragpu()
        .args([
            "estimate",
            "--parameters",
            "7000000000",
            "--bits",
            "16",
            "--reserve-gib",
            "4",
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains("14,000,000,000"))
        .stdout(predicate::str::contains("14.00 GB"))
        .stdout(predicate::str::contains("13.04 GiB"))
        .stdout(predicate::str::contains("4,294,967,296"))
        .stdout(
            predicate::str::is_match(r"reserve\s+4,294,967,296\s+4\.29 GB\s+4\.00 GiB\s+assumed")
                .unwrap(),
        )
        .stdout(
            predicate::str::is_match(
                r"preparation hypothesis\s+18,294,967,296\s+18\.29 GB\s+17\.04 GiB",
            )
            .unwrap(),
        )
        .stdout(predicate::str::contains("activations"))
        .stdout(predicate::str::contains("gradients"))
        .stdout(predicate::str::contains("KV cache"))
        .stdout(predicate::str::contains("optimizer states"))
        .stdout(predicate::str::contains("proves nothing about fit"));
}

#[test]
fn guide_json_has_exact_bytes() {
    let doc = estimate_json(&[
        "--parameters",
        "7000000000",
        "--bits",
        "16",
        "--reserve-gib",
        "4",
    ]);
    assert_eq!(doc["schema"], "iteragpu.estimate/1");
    assert_eq!(term_bytes(&doc, "weights"), 14_000_000_000);
    assert_eq!(term_bytes(&doc, "reserve"), 4_294_967_296);
    assert_eq!(doc["total_bytes"], 18_294_967_296u64);
    let reserve = doc["terms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "reserve")
        .unwrap();
    assert_eq!(reserve["kind"], "assumed");
}

#[test]
fn fractional_bits_round_up() {
    // 7 × 4.5 / 8 = 3.9375 bytes → 4.
    let doc = estimate_json(&["--parameters", "7", "--bits", "4.5"]);
    assert_eq!(term_bytes(&doc, "weights"), 4);
    let doc = estimate_json(&["--parameters", "7000000000", "--bits", "4"]);
    assert_eq!(term_bytes(&doc, "weights"), 3_500_000_000);
    let doc = estimate_json(&["--parameters", "1000", "--bits", "32"]);
    assert_eq!(term_bytes(&doc, "weights"), 4000);
}

#[test]
fn reserve_sizes() {
    let doc = estimate_json(&["--parameters", "1", "--bits", "8", "--reserve", "4GiB"]);
    assert_eq!(term_bytes(&doc, "reserve"), 4 << 30);
    let doc = estimate_json(&["--parameters", "1", "--bits", "8", "--reserve", "4.5GB"]);
    assert_eq!(term_bytes(&doc, "reserve"), 4_500_000_000);
    let doc = estimate_json(&["--parameters", "1", "--bits", "8", "--reserve", "123456"]);
    assert_eq!(term_bytes(&doc, "reserve"), 123_456);
    iteragpu()
        .args([
            "estimate",
            "--parameters",
            "1",
            "--bits",
            "8",
            "--reserve",
            "4G",
        ])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("ambiguous").and(predicate::str::contains("4GiB")));
}

#[test]
fn kv_cache_of_the_guide() {
    let base = [
        "--kv-layers",
        "32",
        "--kv-heads",
        "8",
        "--head-dim",
        "128",
        "--tokens",
        "8192",
        "--kv-bytes",
        "2",
    ];
    let one = estimate_json(&[&base[..], &["--sequences", "1"]].concat());
    assert_eq!(term_bytes(&one, "KV cache"), 1_073_741_824);
    let four = estimate_json(&[&base[..], &["--sequences", "4"]].concat());
    assert_eq!(term_bytes(&four, "KV cache"), 4 * 1_073_741_824);
}

#[test]
fn kv_strategies_from_numbers() {
    let base = [
        "--kv-layers",
        "32",
        "--kv-heads",
        "8",
        "--head-dim",
        "128",
        "--tokens",
        "4096",
        "--kv-bytes",
        "2",
    ];
    let with =
        |extra: &[&str]| term_bytes(&estimate_json(&[&base[..], extra].concat()), "KV cache");
    assert_eq!(with(&[]), 536_870_912);
    assert_eq!(
        with(&["--cache", "static", "--max-cache-len", "8192"]),
        1_073_741_824 + 32 * 8
    );
    assert_eq!(
        with(&["--cache", "sliding", "--window", "1024"]),
        134_217_728 + 32 * 8
    );
    assert_eq!(with(&["--cache", "offloaded"]), 536_870_912 / 16);
    let q = with(&["--cache", "quantized", "--kv-quant-bits", "4"]);
    assert!(
        q < 536_870_912 / 2,
        "quantized cache {q} should be well under the full one"
    );
    iteragpu()
        .args(["estimate"])
        .args(base)
        .args(["--cache", "sliding"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("--window"));
}

/// Parameter counts of real models, equal to transformers' own (tests/fixtures/models/REFERENCE.md).
#[test]
fn parameter_counts_of_real_configs() {
    let expected: [(&str, u64); 20] = [
        ("gpt2", 124_439_808),
        ("llama-3-8b", 8_030_261_248),
        ("llama-3-70b", 70_553_706_496),
        ("llama-3-8b-bnb-4bit", 8_030_261_248),
        ("llama-2-7b-gptq", 6_738_415_616),
        ("mistral-7b-v0.1", 7_241_732_096),
        ("mistral-7b-awq", 7_241_732_096),
        ("mixtral-8x7b-v0.1", 46_702_792_704),
        ("qwen2-7b", 7_615_616_512),
        ("qwen1.5-moe-a2.7b", 14_315_784_192),
        ("qwen3-8b", 8_190_735_360),
        ("qwen3-30b-a3b", 30_532_122_624),
        ("gemma-7b", 8_537_680_896),
        ("gemma-2-9b", 9_241_705_984),
        ("gemma-3-1b-it", 999_885_952),
        ("gemma-3-4b-it", 4_300_079_472),
        ("phi-3-mini-4k-instruct", 3_821_079_552),
        ("pythia-160m", 162_322_944),
        ("falcon-7b", 6_921_720_704),
        ("deepseek-v3", 671_026_404_352),
    ];
    for (name, count) in expected {
        let path = fixture(&format!("models/{name}"));
        let doc = estimate_json(&["--model", path.to_str().unwrap()]);
        assert_eq!(doc["model"]["parameters"], count, "{name}");
        // The config.json path itself works as well as its folder.
        let doc = estimate_json(&["--model", path.join("config.json").to_str().unwrap()]);
        assert_eq!(doc["model"]["parameters"], count, "{name} via config.json");
    }
}

#[test]
fn kv_from_model_configs() {
    let model = |name: &str| fixture(&format!("models/{name}")).display().to_string();
    // Llama-3-8B: 32 layers × 8 KV heads × 128 × 2 × 2 bytes = 131,072 bytes per token.
    let doc = estimate_json(&[
        "--model",
        &model("llama-3-8b"),
        "--context",
        "8192",
        "--batch",
        "1",
    ]);
    assert_eq!(term_bytes(&doc, "KV cache"), 1_073_741_824);
    assert_eq!(doc["model"]["kv_bytes_per_token"], 131_072);
    // GPT-2 has as many KV heads as query heads: 12 layers × 768 × 2 × 2 bytes (float32 default → --dtype).
    let doc = estimate_json(&[
        "--model",
        &model("gpt2"),
        "--context",
        "1024",
        "--dtype",
        "float16",
    ]);
    assert_eq!(term_bytes(&doc, "KV cache"), 12 * 2 * 768 * 1024 * 2);
    // Falcon-7B is multi-query: one KV head of 64.
    let doc = estimate_json(&["--model", &model("falcon-7b"), "--context", "2048"]);
    assert_eq!(term_bytes(&doc, "KV cache"), 32 * 2 * 64 * 2048 * 2);
    // Mistral v0.1: every layer slides with a 4096 window.
    let doc = estimate_json(&["--model", &model("mistral-7b-v0.1"), "--context", "32768"]);
    assert_eq!(
        term_bytes(&doc, "KV cache"),
        32 * 2 * 8 * 128 * 4096 * 2 + 32 * 8
    );
    // Gemma 2: 21 of 42 layers slide (window 4096); bf16 cache.
    let doc = estimate_json(&[
        "--model",
        &model("gemma-2-9b"),
        "--context",
        "8192",
        "--kv-dtype",
        "bfloat16",
    ]);
    let per = 2 * 8 * 256 * 2u64;
    assert_eq!(
        term_bytes(&doc, "KV cache"),
        21 * per * 8192 + 21 * per * 4096 + 21 * 8
    );
    // Gemma 3 1B: 22 of 26 layers slide with a 512 window, 1 KV head of 256.
    let doc = estimate_json(&["--model", &model("gemma-3-1b-it"), "--context", "4096"]);
    let per = 2 * 256 * 2u64;
    assert_eq!(
        term_bytes(&doc, "KV cache"),
        4 * per * 4096 + 22 * per * 512 + 22 * 8
    );
    // Static cache of a sliding model preallocates min(max_cache_len, window) on sliding layers.
    let doc = estimate_json(&[
        "--model",
        &model("gemma-3-1b-it"),
        "--context",
        "100",
        "--cache",
        "static",
        "--max-cache-len",
        "4096",
    ]);
    assert_eq!(
        term_bytes(&doc, "KV cache"),
        4 * per * 4096 + 22 * per * 512 + 26 * 8
    );
    // DeepSeek-V3: transformers 5 caches the 576-wide latent (kv_lora_rank 512 + rope 64); the
    // decompressed K (128 heads × 192) and V (128 × 128) are shown apart, not in the total.
    let doc = estimate_json(&["--model", &model("deepseek-v3"), "--context", "1000"]);
    assert_eq!(term_bytes(&doc, "KV cache (dynamic)"), 61 * 576 * 1000 * 2);
    assert_eq!(
        term_bytes(&doc, "KV cache, decompressed"),
        61 * (128 * 192 + 128 * 128) * 1000 * 2
    );
}

#[test]
fn quantized_storage_is_apart_from_compute() {
    let model = |name: &str| fixture(&format!("models/{name}")).display().to_string();
    let doc = estimate_json(&["--model", &model("llama-2-7b-gptq")]);
    let quantized = term_bytes(&doc, "weights, quantized (GPTQ 4-bit g128)");
    // 32 layers × (4 attention 4096×4096 + 3 MLP 4096×11008) GPTQ tensors.
    let gptq = |inp: u64, out: u64| {
        inp * 4 / 32 * out * 4
            + inp.div_ceil(128) * (out * 4 / 32) * 4
            + inp.div_ceil(128) * out * 2
            + inp * 4
    };
    let per_layer = 4 * gptq(4096, 4096) + 2 * gptq(4096, 11008) + gptq(11008, 4096);
    assert_eq!(quantized, 32 * per_layer);
    // Embeddings, lm_head and norms stay in float16.
    let unquantized = term_bytes(&doc, "weights, unquantized");
    assert_eq!(unquantized, (2 * 32000 * 4096 + 65 * 4096) * 2);
    assert!(term_bytes(&doc, "dequantized weight") > 0);

    let doc = estimate_json(&["--model", &model("llama-3-8b-bnb-4bit")]);
    let bnb = term_bytes(&doc, "weights, quantized (bnb nf4 + double quant)");
    // About half a byte per quantized parameter plus small statistics.
    let quantized_params = 6_979_321_856u64;
    assert!(
        bnb > quantized_params / 2 && bnb < quantized_params / 2 + quantized_params / 50,
        "{bnb}"
    );
    let doc = estimate_json(&["--model", &model("mistral-7b-awq")]);
    assert!(term_bytes(&doc, "weights, quantized (AWQ 4-bit g128)") > 3_000_000_000);
}

#[test]
fn training_terms() {
    // 1,000 parameters, AdamW, fp32: weights 4,000 + gradients 4,000 + states 8,000.
    let doc = estimate_json(&[
        "--parameters",
        "1000",
        "--bits",
        "32",
        "--train",
        "--optimizer",
        "adamw",
        "--precision",
        "fp32",
    ]);
    assert_eq!(term_bytes(&doc, "weights (fp32)"), 4000);
    assert_eq!(term_bytes(&doc, "gradients"), 4000);
    assert_eq!(term_bytes(&doc, "optimizer states"), 8000);
    // bf16-mixed: fp32 master weights, 16-bit compute copies.
    let doc = estimate_json(&[
        "--parameters",
        "1000",
        "--bits",
        "16",
        "--train",
        "--precision",
        "bf16-mixed",
    ]);
    assert_eq!(term_bytes(&doc, "master weights"), 4000);
    assert_eq!(term_bytes(&doc, "weights, 16-bit"), 2000);
    let sgd = estimate_json(&[
        "--parameters",
        "1000",
        "--bits",
        "16",
        "--train",
        "--optimizer",
        "sgd",
    ]);
    assert_eq!(term_bytes(&sgd, "optimizer states"), 0);

    // LoRA on Llama-3-8B q_proj and v_proj, r=16: 32 × 16 × ((4096+4096) + (4096+1024)).
    let model = fixture("models/llama-3-8b").display().to_string();
    let doc = estimate_json(&[
        "--model",
        &model,
        "--train",
        "--precision",
        "bf16-mixed",
        "--lora-rank",
        "16",
        "--lora-targets",
        "q_proj,v_proj",
        "--batch",
        "1",
        "--context",
        "2048",
    ]);
    let lora = 32 * 16 * ((4096 + 4096) + (4096 + 1024));
    assert_eq!(term_bytes(&doc, "LoRA adapters"), lora * 4);
    assert_eq!(term_bytes(&doc, "gradients"), lora * 4);
    assert_eq!(term_bytes(&doc, "optimizer states"), lora * 8);
    let activations = doc["terms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "activations")
        .unwrap();
    assert_eq!(activations["kind"], "assumed");
    // Checkpointing keeps far less.
    let ckpt = estimate_json(&[
        "--model",
        &model,
        "--train",
        "--precision",
        "bf16-mixed",
        "--lora-rank",
        "16",
        "--lora-targets",
        "q_proj,v_proj",
        "--batch",
        "1",
        "--context",
        "2048",
        "--gradient-checkpointing",
    ]);
    assert!(term_bytes(&ckpt, "activations") < activations["bytes"].as_u64().unwrap() / 5);

    iteragpu()
        .args([
            "estimate",
            "--model",
            &model,
            "--train",
            "--lora-rank",
            "8",
            "--lora-targets",
            "qkv",
        ])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("qkv").and(predicate::str::contains("q_proj")));
}

#[test]
fn adafactor_uses_real_shapes() {
    let model = fixture("models/gpt2").display().to_string();
    let doc = estimate_json(&[
        "--model",
        &model,
        "--train",
        "--optimizer",
        "adafactor",
        "--precision",
        "fp32",
    ]);
    let states = term_bytes(&doc, "optimizer states");
    let params = 124_439_808u64;
    assert!(
        states < params * 4 / 50,
        "factored states {states} should be tiny"
    );
    iteragpu()
        .args([
            "estimate",
            "--parameters",
            "1000",
            "--bits",
            "16",
            "--train",
            "--optimizer",
            "adafactor",
        ])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("--model"));
}

#[test]
fn bad_input_is_refused_with_a_reason() {
    let cases: [(&[&str], &str); 11] = [
        (&["--parameters", "0", "--bits", "16"], "greater than 0"),
        (&["--parameters", "-5", "--bits", "16"], "negative"),
        (&["--parameters", "7e9", "--bits", "16"], "digits"),
        (
            &[
                "--parameters",
                "1000000000000000000000000000000",
                "--bits",
                "16",
            ],
            "larger than",
        ),
        (
            &["--parameters", "10000000000000000000", "--bits", "32"],
            "18.4 EB",
        ),
        (
            &["--parameters", "7000000000", "--bits", "NaN"],
            "not a number",
        ),
        (&["--parameters", "7000000000", "--bits", "0"], "0 bits"),
        (
            &[
                "--parameters",
                "7000000000",
                "--bits",
                "16",
                "--dtype",
                "float12",
            ],
            "unknown dtype",
        ),
        (&["--parameters", "7000000000"], "--bits"),
        (&[], "nothing to estimate"),
        (
            &["--kv-layers", "32", "--tokens", "10", "--kv-bytes", "2"],
            "--kv-heads",
        ),
    ];
    for (args, message) in cases {
        let out = iteragpu().arg("estimate").args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
    }
}

#[test]
fn bad_model_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let run = |path: &str| {
        let out = iteragpu()
            .args(["estimate", "--model", path])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{path}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let malformed = write(
        "broken.json",
        "{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 4096,,\n}",
    );
    let err = run(&malformed);
    assert!(err.contains("line 3") && err.contains("column"), "{err}");
    let unknown = write("unknown.json", r#"{"model_type": "mamba"}"#);
    let err = run(&unknown);
    assert!(
        err.contains("mamba") && err.contains("llama") && err.contains("--parameters"),
        "{err}"
    );
    let missing_field = write(
        "nofield.json",
        r#"{"model_type": "llama", "vocab_size": 10}"#,
    );
    let err = run(&missing_field);
    assert!(err.contains("hidden_size"), "{err}");
    let zero = write(
        "zero.json",
        r#"{"model_type": "llama", "vocab_size": 0, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8}"#,
    );
    assert!(run(&zero).contains("vocab_size"));
    let err = run(&dir.path().join("absent.json").display().to_string());
    assert!(err.contains("absent.json"), "{err}");
    let empty_dir = tempfile::tempdir().unwrap();
    assert!(run(&empty_dir.path().display().to_string()).contains("no config.json"));
}

fn write_shard(dir: &std::path::Path, name: &str, tensors: &[(&str, &str, Vec<u64>)], cut: u64) {
    let (header, data) = iteragpu::model::safetensors::header_bytes(tensors);
    let path = dir.join(name);
    std::fs::write(&path, &header).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(header.len() as u64 + data - cut).unwrap();
}

#[test]
fn safetensors_headers_give_the_stored_format() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("models/gpt2/config.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    write_shard(
        dir.path(),
        "model-00001-of-00002.safetensors",
        &[("wte", "F32", vec![50257, 768]), ("ln", "F16", vec![768])],
        0,
    );
    write_shard(
        dir.path(),
        "model-00002-of-00002.safetensors",
        &[("h.0", "BF16", vec![768, 2304]), ("q", "I8", vec![1000])],
        0,
    );
    let doc = estimate_json(&["--model", dir.path().to_str().unwrap()]);
    let stored = &doc["stored"];
    assert_eq!(stored["by_dtype"]["F32"]["bytes"], 50257 * 768 * 4);
    assert_eq!(stored["by_dtype"]["F16"]["bytes"], 768 * 2);
    assert_eq!(stored["by_dtype"]["BF16"]["bytes"], 768 * 2304 * 2);
    assert_eq!(stored["by_dtype"]["I8"]["bytes"], 1000);
    assert_eq!(stored["shards"].as_array().unwrap().len(), 2);
    assert!(stored["bytes_read"].as_u64().unwrap() < 4096);
    let info = doc["terms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "weights as stored (safetensors headers)")
        .unwrap();
    assert_eq!(info["in_total"], false);

    // A truncated shard is refused with its name.
    write_shard(
        dir.path(),
        "model-00002-of-00002.safetensors",
        &[("h.0", "BF16", vec![768, 2304])],
        10,
    );
    iteragpu()
        .args(["estimate", "--model", dir.path().to_str().unwrap()])
        .assert()
        .code(1)
        .stderr(
            predicate::str::contains("truncated")
                .and(predicate::str::contains("model-00002-of-00002")),
        );

    // A header longer than the cap is refused before anything is allocated.
    let mut huge = (200_000_000u64).to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    std::fs::write(dir.path().join("model-00002-of-00002.safetensors"), huge).unwrap();
    iteragpu()
        .args(["estimate", "--model", dir.path().to_str().unwrap()])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("cap"));

    // An index that names a missing shard is refused.
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        r#"{"metadata": {"total_size": 10}, "weight_map": {"a": "model-00009-of-00009.safetensors"}}"#,
    )
    .unwrap();
    iteragpu()
        .args(["estimate", "--model", dir.path().to_str().unwrap()])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("model-00009-of-00009"));
}

#[test]
fn help_and_version_succeed() {
    iteragpu().arg("--help").assert().success();
    iteragpu()
        .arg("--version")
        .assert()
        .success()
        .stdout(predicate::str::contains("iteragpu"));
    iteragpu().arg("frobnicate").assert().code(1);
}

/// Llama-3-8B in bf16: the 64 k_proj/v_proj weights (8 MiB each) go two by two into 20 MiB
/// segments (4 MiB left in each: 128 MiB), the 65 norms (8 KiB each) share one 2 MiB segment;
/// every other tensor is a multiple of 2 MiB.
#[test]
fn allocator_segments_around_the_weights() {
    let model = fixture("models/llama-3-8b").display().to_string();
    let doc = estimate_json(&["--model", &model]);
    assert_eq!(
        term_bytes(&doc, "allocator segments"),
        128 * (1 << 20) + (2 << 20) - 65 * 8192
    );
    let doc = estimate_json(&["--model", &model, "--context", "4096", "--batch", "2"]);
    // (2·4096 + 3·14336) × 2 × 4096 × 2 bytes + 2 × 128256 × 2 bytes.
    assert_eq!(
        term_bytes(&doc, "prefill transient"),
        (2 * 4096 + 3 * 14336) * 2 * 4096 * 2 + 2 * 128_256 * 2
    );
}

/// The tables people read, pinned: any change to them shows up as a snapshot diff to review.
#[test]
fn estimate_tables_snapshots() {
    let run = |args: &[&str]| {
        let out = iteragpu().arg("estimate").args(args).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    insta::assert_snapshot!(
        "guide_estimate",
        run(&[
            "--parameters",
            "7000000000",
            "--bits",
            "16",
            "--reserve-gib",
            "4"
        ])
    );
    insta::assert_snapshot!(
        "guide_kv_cache",
        run(&[
            "--kv-layers",
            "32",
            "--kv-heads",
            "8",
            "--head-dim",
            "128",
            "--tokens",
            "8192",
            "--kv-bytes",
            "2",
            "--sequences",
            "4"
        ])
    );
    // Paths are relative to the crate so the snapshot does not depend on where it was cloned.
    let mut cmd = iteragpu();
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
    let out = cmd
        .args([
            "estimate",
            "--model",
            "tests/fixtures/models/mistral-7b-v0.1",
            "--context",
            "8192",
            "--batch",
            "4",
            "--reserve-gib",
            "4",
        ])
        .output()
        .unwrap();
    insta::assert_snapshot!("mistral_estimate", String::from_utf8(out.stdout).unwrap());
}

/// A sliding layer holds the whole prompt until the first decoding step: part of the peak.
#[test]
fn sliding_layers_prefill_surplus() {
    let model = fixture("models/mistral-7b-v0.1").display().to_string();
    let doc = estimate_json(&["--model", &model, "--context", "8192", "--batch", "4"]);
    assert_eq!(
        term_bytes(&doc, "KV cache, sliding layers' prefill surplus"),
        32 * 2 * 8 * 128 * (8192 - 4096) * 4 * 2
    );
    let doc = estimate_json(&[
        "--model",
        &model,
        "--context",
        "8192",
        "--batch",
        "4",
        "--prompt-tokens",
        "6000",
    ]);
    assert_eq!(
        term_bytes(&doc, "KV cache, sliding layers' prefill surplus"),
        32 * 2 * 8 * 128 * (6000 - 4096) * 4 * 2
    );
    let doc = estimate_json(&[
        "--model",
        &model,
        "--context",
        "8192",
        "--prompt-tokens",
        "4000",
    ]);
    assert!(
        doc["terms"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| !t["name"].as_str().unwrap().contains("surplus"))
    );
    crate::common::iteragpu()
        .args([
            "estimate",
            "--model",
            &model,
            "--context",
            "100",
            "--prompt-tokens",
            "200",
        ])
        .assert()
        .code(1)
        .stderr(predicates::str::contains("--prompt-tokens 200"));
}

/// Runs `iteragpu estimate ARGS` and checks the refusal: exit 1, nothing on stdout, no panic,
/// every `needle` in the message; returns the message.
fn refused(args: &[&str], needles: &[&str]) -> String {
    let out = iteragpu()
        .arg("estimate")
        .args(args)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "{args:?}: {needle:?} not in {stderr}"
        );
    }
    stderr
}

/// A config.json of `family` with `fields` added (or replaced), written in `dir`.
fn config_with(dir: &std::path::Path, family: &str, fields: serde_json::Value) -> String {
    let mut config: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixture(&format!("tiny/{family}/config.json"))).unwrap(),
    )
    .unwrap();
    for (key, value) in fields.as_object().unwrap() {
        config[key] = value.clone();
    }
    let path = dir.join(format!("{family}-{}.json", rand_name(&fields)));
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    path.display().to_string()
}

fn rand_name(fields: &serde_json::Value) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    fields.to_string().hash(&mut h);
    format!("{:x}", h.finish())
}

/// Every size a config gives is bounded before anything proportional to it is allocated; the
/// message names the field, the value and the bound.
#[test]
fn absurd_config_sizes_are_refused_with_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let layers = "100,000";
    let size = "16,777,216";
    let cases: [(&str, serde_json::Value, &str, &str); 12] = [
        (
            "llama",
            serde_json::json!({"num_hidden_layers": 1_000_000}),
            "num_hidden_layers",
            layers,
        ),
        (
            "llama",
            serde_json::json!({"num_hidden_layers": 1_000_000_000_000_000_000u64}),
            "1,000,000,000,000,000,000",
            layers,
        ),
        (
            "llama",
            serde_json::json!({"hidden_size": 4_398_046_511_104u64}),
            "hidden_size",
            size,
        ),
        (
            "llama",
            serde_json::json!({"vocab_size": u64::MAX}),
            "vocab_size",
            size,
        ),
        (
            "mixtral",
            serde_json::json!({"num_local_experts": 1u64 << 40}),
            "num_local_experts",
            size,
        ),
        (
            "qwen2_moe",
            serde_json::json!({"moe_intermediate_size": 1u64 << 32}),
            "moe_intermediate_size",
            size,
        ),
        (
            "gpt2",
            serde_json::json!({"n_layer": 200_000}),
            "n_layer",
            layers,
        ),
        (
            "gpt2",
            serde_json::json!({"n_inner": 1u64 << 50}),
            "n_inner",
            size,
        ),
        (
            "falcon",
            serde_json::json!({"ffn_hidden_size": 1u64 << 30}),
            "ffn_hidden_size",
            size,
        ),
        (
            "deepseek_v3",
            serde_json::json!({"n_routed_experts": 1u64 << 30}),
            "n_routed_experts",
            size,
        ),
        (
            "deepseek_v3",
            serde_json::json!({"num_hidden_layers": 100_001}),
            "100,001",
            layers,
        ),
        (
            "phi3",
            serde_json::json!({"intermediate_size": 1u64 << 60}),
            "intermediate_size",
            size,
        ),
    ];
    for (family, fields, field, bound) in cases {
        let path = config_with(dir.path(), family, fields);
        refused(&["--model", &path], &[field, bound, "fix the config"]);
    }
    // Sizes within the bounds whose tensors or total would not fit are refused too.
    let vision = serde_json::json!({"model_type": "gemma3", "vision_config": {
        "hidden_size": 16_777_216, "num_channels": 16_777_216, "patch_size": 16_777_216, "image_size": 16_777_216}});
    refused(
        &["--model", &config_with(dir.path(), "gemma3_text", vision)],
        &[
            "patch_embedding",
            "more than 18,446,744,073,709,551,615 values",
        ],
    );
    let total = serde_json::json!({"num_hidden_layers": 100_000, "hidden_size": 16_777_216, "intermediate_size": 16_777_216, "num_attention_heads": 16_777_216, "num_key_value_heads": 16_777_216});
    refused(
        &["--model", &config_with(dir.path(), "llama", total)],
        &["parameters", "1,125,899,906,842,624"],
    );
}

/// 100,000 layers are accepted (and estimated at once: no work in layers²), 100,001 refused.
#[test]
fn the_layer_bound_is_inclusive_and_linear() {
    let dir = tempfile::tempdir().unwrap();
    // Llama-3-8B's shapes in bf16: the 8 MiB k/v projections are packed two per 20 MiB segment,
    // which used to cost one search over all segments per layer (36 s for 100,000 layers).
    let llama = |layers: u64| {
        let mut config: serde_json::Value = serde_json::from_slice(
            &std::fs::read(fixture("models/llama-3-8b/config.json")).unwrap(),
        )
        .unwrap();
        config["num_hidden_layers"] = layers.into();
        let path = dir.path().join(format!("llama-{layers}.json"));
        std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
        path.display().to_string()
    };
    let start = std::time::Instant::now();
    let doc = estimate_json(&["--model", &llama(100_000), "--context", "16"]);
    assert!(
        start.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(doc["model"]["architecture"]["dims"]["num_layers"], 100_000);
    assert_eq!(
        doc["model"]["architecture"]["kv"]["layers"]
            .as_array()
            .unwrap()
            .len(),
        100_000
    );
    // Each layer's 64 MiB of medium k/v tensors leave 4 MiB free in their 20 MiB segment.
    let one = term_bytes(
        &estimate_json(&["--model", &llama(1)]),
        "allocator segments",
    );
    let many = term_bytes(
        &estimate_json(&["--model", &llama(1000)]),
        "allocator segments",
    );
    assert!(
        many > 999 * (4 << 20) && one < 3 * (4 << 20) + (2 << 20),
        "{one} {many}"
    );
    refused(&["--model", &llama(100_001)], &["100,001", "100,000"]);
}

/// Sizes from flags are bounded, and products of unbounded counts are checked: a refusal that
/// names the flags, never a panic or an abort.
#[test]
fn absurd_flags_are_refused() {
    let kv = |layers: &str, heads: &str, dim: &str, tokens: &str, seqs: &str, bytes: &str| {
        vec![
            "--kv-layers".to_string(),
            layers.into(),
            "--kv-heads".into(),
            heads.into(),
            "--head-dim".into(),
            dim.into(),
            "--tokens".into(),
            tokens.into(),
            "--sequences".into(),
            seqs.into(),
            "--kv-bytes".into(),
            bytes.into(),
        ]
    };
    let max = "18446744073709551615";
    let cases: [(Vec<String>, &[&str]); 6] = [
        (
            kv(max, "8", "128", "10", "1", "2"),
            &["--kv-layers", "100,000", "18,446,744,073,709,551,615"],
        ),
        (
            kv("100001", "8", "128", "10", "1", "2"),
            &["--kv-layers", "100,000"],
        ),
        (
            kv("2", max, "128", "10", "1", "2"),
            &["--kv-heads", "16,777,216"],
        ),
        (
            kv("2", "8", "16777217", "10", "1", "2"),
            &["--head-dim", "16,777,216"],
        ),
        (
            kv("2", "8", "128", "10", "1", "9"),
            &["--kv-bytes", "float64 takes 8"],
        ),
        (
            kv("2", "8", "128", max, max, "8"),
            &["18.4 EB", "--tokens, --sequences"],
        ),
    ];
    for (args, needles) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(&args, needles);
    }
    let model = fixture("models/llama-3-8b").display().to_string();
    refused(
        &["--model", &model, "--context", max, "--batch", max],
        &["prefill transient", "--context and --batch"],
    );
    refused(
        &[
            "--model",
            &model,
            "--train",
            "--context",
            max,
            "--batch",
            max,
        ],
        &["activations", "--context and --batch"],
    );
    refused(
        &[
            "--model",
            &model,
            "--train",
            "--lora-rank",
            max,
            "--lora-targets",
            "q_proj",
        ],
        &["--lora-rank", "16,777,216"],
    );
}

/// A config.json is read only if it is a regular file of at most 16 MiB: a 200 MB one used to
/// take 12 s and 3.3 GB before failing; a FIFO would block forever.
#[test]
fn config_files_are_capped_and_must_be_files() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("config.json");
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(200_000_000).unwrap();
    let big = big.display().to_string();
    refused(&["--model", &big], &[&big, "16,777,216", "cap"]);
    let folder = dir.path().display().to_string();
    refused(&["--model", &folder], &["config.json", "cap"]);

    let fifo_dir = tempfile::tempdir().unwrap();
    let fifo = fifo_dir.path().join("config.json");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    refused(&["--model", &fifo.display().to_string()], &["named pipe"]);
    refused(
        &["--model", &fifo_dir.path().display().to_string()],
        &["config.json", "named pipe"],
    );
    let dangling = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("absent.json", dangling.path().join("config.json")).unwrap();
    refused(
        &["--model", &dangling.path().display().to_string()],
        &["config.json", "absent.json", "does not exist"],
    );
}

/// A folder with gpt2's config and one good shard.
fn model_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("models/gpt2/config.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    write_shard(
        dir.path(),
        "model-00001-of-00002.safetensors",
        &[("a", "F32", vec![8])],
        0,
    );
    dir
}

/// A `*.safetensors` entry that is not a regular file is refused with its name, never skipped:
/// a partial download must not be reported as complete.
#[test]
fn shards_that_are_not_files_are_refused_with_their_name() {
    let name = "model-00002-of-00002.safetensors";
    type Create = fn(&std::path::Path);
    let make: [(&str, Create); 4] = [
        ("does not exist", |p| {
            std::os::unix::fs::symlink("blob-never-downloaded", p).unwrap()
        }),
        ("loop", |p| {
            std::os::unix::fs::symlink(p.file_name().unwrap(), p).unwrap()
        }),
        ("directory", |p| std::fs::create_dir(p).unwrap()),
        ("named pipe", |p| {
            assert!(
                std::process::Command::new("mkfifo")
                    .arg(p)
                    .status()
                    .unwrap()
                    .success()
            )
        }),
    ];
    for (what, create) in make {
        let dir = model_folder();
        create(&dir.path().join(name));
        refused(
            &["--model", &dir.path().display().to_string()],
            &[name, what],
        );
        // Listed by an index, the same entry is refused the same way.
        std::fs::write(
            dir.path().join("model.safetensors.index.json"),
            format!(
                r#"{{"weight_map": {{"a": "model-00001-of-00002.safetensors", "b": "{name}"}}}}"#
            ),
        )
        .unwrap();
        refused(
            &["--model", &dir.path().display().to_string()],
            &[name, what],
        );
    }
    // An index that is itself a dangling link is refused, not ignored.
    let dir = model_folder();
    std::os::unix::fs::symlink("nowhere", dir.path().join("model.safetensors.index.json")).unwrap();
    refused(
        &["--model", &dir.path().display().to_string()],
        &["model.safetensors.index.json", "does not exist"],
    );
}

/// Every file an index names, and every shard of the folder, must resolve inside the folder
/// (a Hugging Face cache snapshot's links into its `blobs/` count as inside).
#[test]
fn shards_outside_the_folder_are_refused() {
    let outer = tempfile::tempdir().unwrap();
    write_shard(
        outer.path(),
        "outside.safetensors",
        &[("x", "F32", vec![8])],
        0,
    );
    let outside = outer.path().join("outside.safetensors");
    let index = |dir: &std::path::Path, shard: &str| {
        std::fs::write(
            dir.join("model.safetensors.index.json"),
            serde_json::to_vec(&serde_json::json!({"weight_map": {"a": shard}})).unwrap(),
        )
        .unwrap();
    };
    let dir = model_folder();
    let path = dir.path().display().to_string();
    index(dir.path(), &outside.display().to_string());
    refused(
        &["--model", &path],
        &["absolute path", "outside the model folder"],
    );
    index(dir.path(), "../outside.safetensors");
    refused(
        &["--model", &path],
        &["../outside.safetensors", "outside the model folder"],
    );
    std::os::unix::fs::symlink(&outside, dir.path().join("link.safetensors")).unwrap();
    index(dir.path(), "link.safetensors");
    refused(
        &["--model", &path],
        &["link.safetensors", "outside the model folder"],
    );
    // Without an index, the folder's own link is refused as well.
    std::fs::remove_file(dir.path().join("model.safetensors.index.json")).unwrap();
    refused(
        &["--model", &path],
        &["link.safetensors", "outside the model folder"],
    );

    // The Hugging Face cache layout: snapshots/<revision>/*.safetensors → ../../blobs/<hash>.
    let repo = tempfile::tempdir().unwrap();
    let snapshot = repo.path().join("snapshots/0123abcd");
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir(repo.path().join("blobs")).unwrap();
    write_shard(
        &repo.path().join("blobs"),
        "deadbeef",
        &[("wte", "F32", vec![50257, 768])],
        0,
    );
    std::fs::copy(
        fixture("models/gpt2/config.json"),
        snapshot.join("config.json"),
    )
    .unwrap();
    std::os::unix::fs::symlink("../../blobs/deadbeef", snapshot.join("model.safetensors")).unwrap();
    let doc = estimate_json(&["--model", snapshot.to_str().unwrap()]);
    assert_eq!(doc["stored"]["by_dtype"]["F32"]["bytes"], 50257 * 768 * 4);

    // A shard the index does not list is named in a note, not silently left out.
    let dir = model_folder();
    write_shard(
        dir.path(),
        "consolidated.safetensors",
        &[("b", "F32", vec![8])],
        0,
    );
    index(dir.path(), "model-00001-of-00002.safetensors");
    let doc = estimate_json(&["--model", dir.path().to_str().unwrap()]);
    assert_eq!(doc["stored"]["shards"].as_array().unwrap().len(), 1);
    assert!(
        doc["notes"]
            .to_string()
            .contains("consolidated.safetensors"),
        "{}",
        doc["notes"]
    );
}

/// Options that would change nothing are refused, naming the option and the fix.
#[test]
fn options_that_would_be_ignored_are_refused() {
    let llama = fixture("models/llama-3-8b").display().to_string();
    let kv = [
        "--kv-layers",
        "32",
        "--kv-heads",
        "8",
        "--head-dim",
        "128",
        "--tokens",
        "64",
        "--kv-bytes",
        "2",
    ];
    let with_kv = |extra: &[&'static str]| -> Vec<&str> {
        kv.iter().copied().chain(extra.iter().copied()).collect()
    };
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec![
                "--parameters",
                "7000000000",
                "--bits",
                "16",
                "--dtype",
                "float32",
            ],
            vec!["--dtype float32", "--bits 16", "--kv-dtype"],
        ),
        (
            vec!["--parameters", "7000000000", "--bits", "16", "--batch", "4"],
            vec!["--batch", "KV cache", "--tokens"],
        ),
        (
            vec!["--model", &llama, "--kv-dtype", "float16"],
            vec!["--kv-dtype", "--context"],
        ),
        (
            vec!["--model", &llama, "--cache", "static"],
            vec!["--cache", "--context"],
        ),
        (
            vec!["--model", &llama, "--train", "--cache", "static"],
            vec!["--cache", "--train"],
        ),
        (
            vec![
                "--model",
                &llama,
                "--train",
                "--context",
                "8",
                "--prompt-tokens",
                "4",
            ],
            vec!["--prompt-tokens", "--train"],
        ),
        (
            vec!["--model", &llama, "--train", "--window", "8"],
            vec!["--window", "--train"],
        ),
        (
            vec!["--model", &llama, "--train", "--dtype", "float16"],
            vec!["--dtype float16", "--precision", "--lora-rank"],
        ),
        (
            vec!["--model", &llama, "--train", "--gradient-checkpointing"],
            vec!["--gradient-checkpointing", "--context"],
        ),
        (
            vec!["--model", &llama, "--train", "--batch", "4"],
            vec!["--batch", "--context"],
        ),
        (
            vec![
                "--parameters",
                "1000",
                "--bits",
                "16",
                "--train",
                "--flash-attention",
            ],
            vec!["--flash-attention", "--model"],
        ),
        (
            vec![
                "--parameters",
                "1000",
                "--bits",
                "16",
                "--train",
                "--context",
                "512",
            ],
            vec!["--context", "--model"],
        ),
        (
            with_kv(&["--kv-quant-bits", "2"]),
            vec!["--kv-quant-bits", "--cache quantized"],
        ),
        (
            with_kv(&["--cache", "static", "--kv-residual", "0"]),
            vec!["--kv-residual", "--cache quantized", "static"],
        ),
        (
            with_kv(&["--cache", "offloaded", "--prompt-tokens", "8"]),
            vec!["--prompt-tokens", "offloaded"],
        ),
        (
            with_kv(&["--prompt-tokens", "8"]),
            vec!["--prompt-tokens", "sliding"],
        ),
        (
            with_kv(&["--dtype", "float16"]),
            vec!["--dtype", "--kv-bytes"],
        ),
    ];
    for (args, needles) in cases {
        refused(&args, &needles);
    }
    // Each of them acts where it belongs.
    estimate_json(&with_kv(&[
        "--cache",
        "quantized",
        "--kv-quant-bits",
        "2",
        "--kv-residual",
        "0",
    ]));
    estimate_json(&[
        "--model",
        &llama,
        "--train",
        "--context",
        "8",
        "--batch",
        "4",
        "--gradient-checkpointing",
    ]);
    estimate_json(&[
        "--model",
        &llama,
        "--train",
        "--lora-rank",
        "8",
        "--lora-targets",
        "q_proj",
        "--dtype",
        "float16",
    ]);
}

/// `--kv-quant-bits` takes exactly what its help says: 2 or 4.
#[test]
fn kv_quant_bits_are_2_or_4() {
    let kv = [
        "--kv-layers",
        "32",
        "--kv-heads",
        "8",
        "--head-dim",
        "128",
        "--tokens",
        "8192",
        "--kv-bytes",
        "2",
        "--cache",
        "quantized",
        "--kv-quant-bits",
    ];
    for bits in ["1", "3", "5", "8"] {
        refused(&[&kv[..], &[bits]].concat(), &[bits, "2 or 4"]);
    }
    let two = term_bytes(&estimate_json(&[&kv[..], &["2"]].concat()), "KV cache");
    let four = term_bytes(&estimate_json(&[&kv[..], &["4"]].concat()), "KV cache");
    assert!(two < four, "{two} {four}");
}

/// `--bits` with `--train` is the checkpoint's width: a float width is said to be, a quantized
/// one is refused (full fine-tuning of quantized weights does not exist; QLoRA does).
#[test]
fn training_a_quantized_checkpoint_needs_adapters() {
    for bits in ["4", "8", "4.5"] {
        refused(
            &["--parameters", "1000", "--bits", bits, "--train"],
            &[
                &format!("--bits {bits}"),
                "quantized",
                "QLoRA",
                "--lora-rank",
            ],
        );
    }
    refused(
        &["--parameters", "1000", "--bits", "24", "--train"],
        &["--bits 24", "16", "32"],
    );
    let doc = estimate_json(&[
        "--parameters",
        "1000",
        "--bits",
        "16",
        "--train",
        "--precision",
        "bf16-mixed",
    ]);
    assert!(
        doc["notes"]
            .to_string()
            .contains("--bits 16 is the checkpoint's width"),
        "{}",
        doc["notes"]
    );

    let bnb = fixture("models/llama-3-8b-bnb-4bit").display().to_string();
    refused(
        &["--model", &bnb, "--train"],
        &["llama-3-8b-bnb-4bit", "quantized", "QLoRA", "--lora-rank"],
    );
    // QLoRA: adapters on the 4-bit base keep working, the base stored quantized.
    let doc = estimate_json(&[
        "--model",
        &bnb,
        "--train",
        "--precision",
        "bf16-mixed",
        "--lora-rank",
        "16",
        "--lora-targets",
        "q_proj,v_proj",
    ]);
    assert!(term_bytes(&doc, "weights, quantized (bnb nf4") > 3_000_000_000);
    assert_eq!(
        term_bytes(&doc, "LoRA adapters"),
        32 * 16 * ((4096 + 4096) + (4096 + 1024)) * 4
    );
}

/// LoRA targets that would train nothing, or count a module twice, are refused with the
/// model's own linear layers.
#[test]
fn lora_targets_must_name_modules_once() {
    let llama = fixture("models/llama-3-8b").display().to_string();
    let lora = |targets: &'static str| {
        vec![
            "--model",
            &llama,
            "--train",
            "--lora-rank",
            "8",
            "--lora-targets",
            targets,
        ]
    };
    refused(
        &lora(""),
        &["names no module", "q_proj", "down_proj", "e.g."],
    );
    refused(&lora(" , "), &["names no module", "q_proj"]);
    refused(&lora("q_proj,"), &["`q_proj,`", "empty name", "v_proj"]);
    refused(&lora("q_proj,q_proj"), &["`q_proj`", "twice"]);
    refused(&lora("attention"), &["`attention`", "o_proj"]);
}

/// KV heads must divide the query heads, and heads the hidden width; both numbers are named.
#[test]
fn inconsistent_heads_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, serde_json::Value, [&str; 3]); 5] = [
        (
            "llama",
            serde_json::json!({"num_attention_heads": 32, "hidden_size": 4096, "num_key_value_heads": 5}),
            ["num_key_value_heads", "(5)", "(32)"],
        ),
        (
            "llama",
            serde_json::json!({"num_attention_heads": 4, "num_key_value_heads": 8}),
            ["num_key_value_heads", "(8)", "(4)"],
        ),
        (
            "phi3",
            serde_json::json!({"num_attention_heads": 6, "num_key_value_heads": 4}),
            ["num_key_value_heads", "(4)", "(6)"],
        ),
        (
            "falcon-new",
            serde_json::json!({"num_attention_heads": 8, "num_kv_heads": 3}),
            ["num_kv_heads", "(3)", "(8)"],
        ),
        (
            "gpt2",
            serde_json::json!({"n_embd": 100, "n_head": 3}),
            ["n_head", "(3)", "(100)"],
        ),
    ];
    for (family, fields, needles) in cases {
        refused(
            &["--model", &config_with(dir.path(), family, fields)],
            &needles,
        );
    }
}

/// Messages: command-line names rather than Rust names, each reason once, the value as typed.
#[test]
fn messages_say_things_once_and_as_typed() {
    for (optimizer, shown) in [
        ("sgd-momentum", "sgd-momentum"),
        ("adamw-8bit", "adamw-8bit"),
        ("adamw", "adamw"),
    ] {
        let doc = estimate_json(&[
            "--parameters",
            "1000",
            "--bits",
            "16",
            "--train",
            "--optimizer",
            optimizer,
        ]);
        let term = term_by_id(&doc, "optimizer_states");
        assert_eq!(term["name"], format!("optimizer states ({shown})"));
        assert_eq!(term["optimizer"], shown);
        assert_eq!(term["inputs"]["optimizer"], shown);
    }
    let deepseek = fixture("models/deepseek-v3").display().to_string();
    let out = iteragpu()
        .args(["estimate", "--model", &deepseek, "--context", "1000"])
        .output()
        .unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("61 layers × 576 values (latent 512 + rope 64"),
        "{table}"
    );
    assert!(!table.contains("(K + V) ×"), "{table}");

    let twice = |args: &[&str], reason: &str| {
        let err = refused(args, &[reason]);
        assert_eq!(err.matches(reason).count(), 1, "{err}");
    };
    twice(&["--model", "/nonexistent/config.json"], "does not exist");
    twice(
        &["--parameters", "10000000000000000000", "--bits", "32"],
        "18.4 EB",
    );
    twice(
        &[
            "--kv-layers",
            "1",
            "--kv-heads",
            "1",
            "--head-dim",
            "1",
            "--tokens",
            "18446744073709551615",
            "--sequences",
            "18446744073709551615",
            "--kv-bytes",
            "8",
        ],
        "18.4 EB",
    );

    for (flag, value) in [
        ("--reserve", "٣GiB"),
        ("--reserve", "４GB"),
        ("--reserve-gib", "٣"),
        ("--bits", "４"),
        ("--kv-layers", "３"),
    ] {
        let mut args = vec!["--parameters", "7", "--bits", "16"];
        if flag == "--bits" {
            args = vec!["--parameters", "7"];
        }
        args.extend([flag, value]);
        let err = refused(&args, &[&format!("`{value}`")]);
        assert!(!err.contains("``"), "{err}");
    }
}

/// `estimate --train --shard …`: the per-rank model states reproduce DeepSpeed's estimators for
/// mixed-precision AdamW on Llama-3-8B (research-issue13.md §5), from the config and from
/// --parameters with --largest-layer-parameters alike.
#[test]
fn sharded_training_reproduces_deepspeed() {
    let llama = fixture("models/llama-3-8b").display().to_string();
    let from_config = |extra: &[&str]| {
        estimate_json(
            &[
                &[
                    "--model",
                    llama.as_str(),
                    "--train",
                    "--precision",
                    "bf16-mixed",
                ][..],
                extra,
            ]
            .concat(),
        )
    };
    let from_numbers = |extra: &[&str]| {
        estimate_json(
            &[
                &[
                    "--parameters",
                    "8030261248",
                    "--bits",
                    "16",
                    "--train",
                    "--precision",
                    "bf16-mixed",
                    "--largest-layer-parameters",
                    "525336576",
                ][..],
                extra,
            ]
            .concat(),
        )
    };
    // (shard, world size, offload, DeepSpeed gpu_mem, DeepSpeed cpu_mem per node)
    type Case<'a> = (&'a str, &'a str, Option<&'a str>, u64, Option<u64>);
    let cases: [Case; 7] = [
        ("zero2", "8", None, 34_128_610_304, Some(385_452_539_904)),
        (
            "zero2",
            "8",
            Some("optimizer"),
            16_060_522_496,
            Some(385_452_539_904),
        ),
        ("zero3", "8", None, 20_169_434_112, Some(25_216_155_648)),
        (
            "zero3",
            "8",
            Some("optimizer"),
            4_108_911_616,
            Some(192_726_269_952),
        ),
        (
            "zero3",
            "8",
            Some("parameters"),
            2_101_346_304,
            Some(216_817_053_696),
        ),
        ("zero2", "64", None, 18_319_033_472, None),
        ("zero3", "64", None, 4_359_857_280, None),
    ];
    for (shard, n, offload, gpu, cpu) in cases {
        let mut extra = vec!["--shard", shard, "--world-size", n];
        if let Some(o) = offload {
            extra.extend(["--offload", o]);
        }
        if n == "64" {
            extra.extend(["--gpus-per-node", "8"]);
        }
        let docs = if shard == "zero3" {
            vec![from_config(&extra), from_numbers(&extra)]
        } else {
            // --largest-layer-parameters is ZeRO-3's only.
            vec![
                from_config(&extra),
                estimate_json(
                    &[
                        &[
                            "--parameters",
                            "8030261248",
                            "--bits",
                            "16",
                            "--train",
                            "--precision",
                            "bf16-mixed",
                        ][..],
                        &extra,
                    ]
                    .concat(),
                ),
            ]
        };
        for doc in docs {
            let sh = &doc["sharding"];
            let what = format!("{shard} N={n} {offload:?}");
            assert_eq!(sh["model_states_bytes"], gpu, "{what}");
            assert_eq!(sh["deepspeed"]["gpu_bytes"], gpu, "{what}");
            assert_eq!(sh["per_rank"], true);
            assert_eq!(sh["strategy"], shard);
            assert_eq!(sh["world_size"], n.parse::<u64>().unwrap());
            if let Some(cpu) = cpu {
                assert_eq!(sh["deepspeed"]["cpu_bytes_per_node"], cpu, "{what}");
                assert_eq!(sh["deepspeed"]["additional_buffer_factor"], 1.5);
                assert_eq!(id_bytes(&doc, "deepspeed_host"), cpu);
            }
            // Per rank: the model states plus NCCL's assumed 1 GiB, nothing pooled.
            assert_eq!(doc["total_bytes"], gpu + (1 << 30), "{what}");
            assert_eq!(sh["comm_reserve_bytes"], 1u64 << 30);
            if shard == "zero3" {
                assert_eq!(sh["largest_module"]["parameters"], 525_336_576u64);
            }
        }
    }
    // The config names the largest module as DeepSpeed's walk would find it.
    let doc = from_config(&["--shard", "zero3", "--world-size", "8"]);
    assert_eq!(
        doc["sharding"]["largest_module"]["name"],
        "model.embed_tokens"
    );
    // The ZeRO paper's closed forms, shown for comparison: 16Ψ/N for ZeRO-3 (14.96 GiB at N=8).
    assert_eq!(
        doc["sharding"]["zero_paper_bytes"],
        16 * 8_030_261_248u64 / 8
    );
    let z1 = from_config(&["--shard", "zero1", "--world-size", "8"]);
    assert_eq!(
        z1["sharding"]["zero_paper_bytes"],
        4 * 8_030_261_248u64 + 12 * 8_030_261_248 / 8
    );
    assert_eq!(
        z1["sharding"]["model_states_bytes"],
        4 * 8_030_261_248u64 + 16 * 8_030_261_248 / 8
    );
    assert!(z1["sharding"]["deepspeed"].is_null());
    // An offload's own host figure: what the terms moved, per node.
    let off = from_config(&[
        "--shard",
        "zero3",
        "--world-size",
        "8",
        "--offload",
        "parameters",
    ]);
    assert_eq!(
        off["sharding"]["host_memory_per_node_bytes"],
        8 * 18 * (8_030_261_248u64 / 8)
    );
    let host = term_by_id(&off, "host_offloaded_states");
    assert_eq!(host["in_total"], false);
    assert_eq!(host["inputs"]["memory"], "host");
}

/// DDP, FSDP, the table, the JSON object, and world size 1.
#[test]
fn sharded_training_per_rank_terms() {
    let llama = fixture("models/llama-3-8b").display().to_string();
    let p = 8_030_261_248u64;
    let base = [
        "--model",
        llama.as_str(),
        "--train",
        "--precision",
        "bf16-mixed",
    ];
    let plain = estimate_json(&base);
    assert!(
        plain.get("sharding").is_none(),
        "no sharding key without --shard"
    );

    let ddp = estimate_json(&[&base[..], &["--shard", "ddp", "--world-size", "4"]].concat());
    let buckets = term_by_id(&ddp, "ddp_buckets");
    assert_eq!(buckets["bytes"], 4 * p);
    assert_eq!(buckets["dtype"], "fp32");
    assert_eq!(
        ddp["total_bytes"].as_u64().unwrap(),
        plain["total_bytes"].as_u64().unwrap() + 4 * p + (1 << 30)
    );
    assert_eq!(ddp["sharding"]["gpus_per_node"], 4);
    assert_eq!(ddp["sharding"]["nodes"], 1);

    let fsdp = estimate_json(
        &[
            &base[..],
            &[
                "--shard",
                "fsdp",
                "--world-size",
                "16",
                "--comm-reserve",
                "600MiB",
                "--batch",
                "2",
                "--context",
                "2048",
            ],
        ]
        .concat(),
    );
    assert_eq!(fsdp["sharding"]["model_states_bytes"], 16 * p / 16);
    assert_eq!(fsdp["sharding"]["padding_counted"], true);
    assert_eq!(fsdp["sharding"]["batch_per_rank"], 2);
    assert_eq!(fsdp["sharding"]["gpus_per_node"], 8);
    assert_eq!(fsdp["sharding"]["nodes"], 2);
    let nccl = term_by_id(&fsdp, "nccl_buffers");
    assert_eq!(nccl["bytes"], 600u64 << 20);
    assert_eq!(nccl["kind"], "assumed");
    assert_eq!(nccl["in_total"], true);
    // The activations are those of the per-rank batch: the same as without --shard.
    let single = estimate_json(&[&base[..], &["--batch", "2", "--context", "2048"]].concat());
    assert_eq!(
        id_bytes(&fsdp, "activations"),
        id_bytes(&single, "activations")
    );
    for (id, dtype) in [
        ("fsdp_root_group", "bf16"),
        ("fsdp_gathered_blocks", "bf16"),
        ("fsdp_reduce_scatter_inputs", "fp32"),
    ] {
        let term = term_by_id(&fsdp, id);
        assert!(term["bytes"].as_u64().unwrap() > 0, "{id}");
        assert_eq!(term["dtype"], dtype, "{id}");
    }
    // The sharded states say where they live; every term has its own id.
    for (id, shard) in [
        ("weights", "fsdp_shard"),
        ("gradients", "fsdp_shard"),
        ("optimizer_states", "fsdp_shard"),
    ] {
        assert_eq!(term_by_id(&fsdp, id)["shard"], shard, "{id}");
    }
    for doc in [&ddp, &fsdp] {
        for t in doc["terms"].as_array().unwrap() {
            term_by_id(doc, t["id"].as_str().expect("every term has an id"));
        }
    }

    // The table says per rank, with GB and GiB side by side.
    let out = iteragpu()
        .args(["estimate"])
        .args(base)
        .args([
            "--shard",
            "zero3",
            "--world-size",
            "8",
            "--offload",
            "optimizer",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "ONE rank's GPU memory, never a total over ranks",
        "preparation hypothesis, per rank",
        "HOST memory per node (CPU RAM, not GPU)",
        "estimate_zero3_model_states_mem_needs",
        "NCCL communicator buffers",
    ] {
        assert!(table.contains(needle), "{needle:?} not in {table}");
    }
    assert!(
        predicate::str::is_match(
            r"weights and gradients \(16-bit\) of the gathered largest module\s+2,101,346,304\s+2\.10 GB\s+1\.96 GiB\s+assumed"
        )
        .unwrap()
        .eval(&table),
        "{table}"
    );
}

/// `--world-size 1 --shard zero3` degenerates to the unsharded estimate plus DeepSpeed's gathered
/// largest module (4·L), without NCCL and without torch's foreach AdamW temporaries (DeepSpeed's
/// fused Adam steps in place); FSDP on one rank keeps 16 bytes per parameter of states.
#[test]
fn sharding_over_one_rank_degenerates() {
    let llama = fixture("models/llama-3-8b").display().to_string();
    let base = [
        "--model",
        llama.as_str(),
        "--train",
        "--precision",
        "bf16-mixed",
        "--batch",
        "1",
        "--context",
        "1024",
    ];
    let plain = estimate_json(&base);
    let zero3 = estimate_json(&[&base[..], &["--shard", "zero3", "--world-size", "1"]].concat());
    assert_eq!(
        zero3["total_bytes"].as_u64().unwrap(),
        plain["total_bytes"].as_u64().unwrap() - id_bytes(&plain, "optimizer_step_temporaries")
            + 4 * 525_336_576
    );
    assert_eq!(
        id_bytes(&plain, "optimizer_step_temporaries"),
        4 * 8_030_261_248
    );
    assert!(zero3["sharding"]["comm_reserve_bytes"].is_null());
    let ids: Vec<&str> = zero3["terms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert!(!ids.contains(&"nccl_buffers"), "{ids:?}");
    assert!(ids.contains(&"gathered_largest_module"), "{ids:?}");
    assert!(
        zero3["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("--world-size 1")),
        "the difference is named"
    );
    let fsdp = estimate_json(&[&base[..], &["--shard", "fsdp", "--world-size", "1"]].concat());
    assert_eq!(
        fsdp["sharding"]["model_states_bytes"],
        16 * 8_030_261_248u64
    );
}

/// Every sharding mistake: exit 1, nothing on stdout, the value and the fix in the message.
#[test]
fn sharding_mistakes_are_refused() {
    let llama = fixture("models/llama-3-8b").display().to_string();
    let bnb = fixture("models/llama-3-8b-bnb-4bit").display().to_string();
    let m = ["--model", llama.as_str()];
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            [&m[..], &["--shard", "zero2", "--world-size", "8"]].concat(),
            vec!["--shard zero2", "add --train"],
        ),
        (
            [&m[..], &["--train", "--world-size", "8"]].concat(),
            vec!["--world-size", "add --shard"],
        ),
        (
            [
                &m[..],
                &[
                    "--train",
                    "--comm-reserve",
                    "1GiB",
                    "--offload",
                    "optimizer",
                ],
            ]
            .concat(),
            vec!["--offload, --comm-reserve", "drop them"],
        ),
        (
            [&m[..], &["--train", "--shard", "fsdp"]].concat(),
            vec!["add --world-size N"],
        ),
        (
            [&m[..], &["--train", "--shard", "fsdp", "--world-size", "0"]].concat(),
            vec!["'0'", "greater than 0"],
        ),
        (
            [
                &m[..],
                &[
                    "--train",
                    "--shard",
                    "fsdp",
                    "--world-size",
                    "12",
                    "--gpus-per-node",
                    "8",
                ],
            ]
            .concat(),
            vec![
                "--gpus-per-node 8 does not divide --world-size 12",
                "e.g. --gpus-per-node 6",
            ],
        ),
        (
            [
                &m[..],
                &["--train", "--shard", "fsdp", "--world-size", "12"],
            ]
            .concat(),
            vec!["--world-size 12", "give --gpus-per-node G"],
        ),
        (
            [
                &m[..],
                &[
                    "--train",
                    "--shard",
                    "zero2",
                    "--world-size",
                    "8",
                    "--offload",
                    "parameters",
                ],
            ]
            .concat(),
            vec![
                "--offload parameters with --shard zero2",
                "--shard zero3 --offload parameters",
            ],
        ),
        (
            [
                &m[..],
                &[
                    "--train",
                    "--shard",
                    "ddp",
                    "--world-size",
                    "8",
                    "--offload",
                    "optimizer",
                ],
            ]
            .concat(),
            vec!["--offload optimizer with --shard ddp"],
        ),
        (
            [
                &m[..],
                &[
                    "--train",
                    "--shard",
                    "fsdp",
                    "--world-size",
                    "8",
                    "--offload",
                    "optimizer",
                ],
            ]
            .concat(),
            vec!["use --offload parameters"],
        ),
        (
            [
                &m[..],
                &[
                    "--train",
                    "--shard",
                    "zero1",
                    "--world-size",
                    "8",
                    "--offload",
                    "optimizer",
                ],
            ]
            .concat(),
            vec!["--shard zero1", "--shard zero2 --offload optimizer"],
        ),
        (
            [
                &m[..],
                &[
                    "--train",
                    "--shard",
                    "fsdp",
                    "--world-size",
                    "8",
                    "--lora-rank",
                    "16",
                    "--lora-targets",
                    "q_proj",
                ],
            ]
            .concat(),
            vec!["--lora-rank with --shard fsdp", "drop --lora-rank"],
        ),
        (
            vec![
                "--model",
                &bnb,
                "--train",
                "--shard",
                "fsdp",
                "--world-size",
                "8",
            ],
            vec!["is quantized", "unquantized model's config.json"],
        ),
        (
            vec![
                "--parameters",
                "1000",
                "--bits",
                "4",
                "--train",
                "--shard",
                "ddp",
                "--world-size",
                "2",
            ],
            vec!["--bits 4", "--bits 16 or 32"],
        ),
        (
            vec![
                "--parameters",
                "1000",
                "--bits",
                "16",
                "--train",
                "--shard",
                "zero3",
                "--world-size",
                "2",
            ],
            vec!["add --largest-layer-parameters N", "--model PATH"],
        ),
        (
            [
                &m[..],
                &[
                    "--train",
                    "--shard",
                    "zero3",
                    "--world-size",
                    "2",
                    "--largest-layer-parameters",
                    "5",
                ],
            ]
            .concat(),
            vec!["--largest-layer-parameters is read from --model", "drop it"],
        ),
        (
            [
                &m[..],
                &[
                    "--train",
                    "--shard",
                    "fsdp",
                    "--world-size",
                    "1",
                    "--comm-reserve",
                    "1GiB",
                ],
            ]
            .concat(),
            vec!["--comm-reserve with --world-size 1", "drop --comm-reserve"],
        ),
        (
            [
                &m[..],
                &[
                    "--train",
                    "--shard",
                    "zero2",
                    "--world-size",
                    "2",
                    "--precision",
                    "bf16",
                ],
            ]
            .concat(),
            vec!["--precision bf16 with --shard zero2", "bf16-mixed"],
        ),
        (
            [
                &m[..],
                &[
                    "--train",
                    "--shard",
                    "fsdp",
                    "--world-size",
                    "2",
                    "--optimizer",
                    "adafactor",
                ],
            ]
            .concat(),
            vec!["--optimizer adafactor with --shard fsdp", "use adamw"],
        ),
        (
            vec![
                "--parameters",
                "18446744073709551615",
                "--bits",
                "16",
                "--train",
                "--shard",
                "ddp",
                "--world-size",
                "1",
            ],
            vec!["18.4 EB"],
        ),
        (
            vec![
                "--parameters",
                "18446744073709551615",
                "--bits",
                "16",
                "--train",
                "--shard",
                "zero3",
                "--world-size",
                "18446744073709551615",
                "--gpus-per-node",
                "1",
                "--largest-layer-parameters",
                "18446744073709551615",
            ],
            vec!["18.4 EB"],
        ),
    ];
    for (args, needles) in cases {
        refused(&args, &needles);
    }
    // A huge world size is fine when nothing overflows: the partitions shrink.
    let doc = estimate_json(&[
        "--parameters",
        "1000",
        "--bits",
        "16",
        "--train",
        "--shard",
        "zero2",
        "--world-size",
        "18446744073709551615",
        "--gpus-per-node",
        "1",
    ]);
    assert_eq!(doc["sharding"]["nodes"], u64::MAX);
}

/// `--lora-targets all-linear` is peft's: every linear layer but the output head, so the same
/// adapters as naming the seven projections of a Llama block (and fewer than adding `lm_head`).
#[test]
fn lora_all_linear_is_every_linear_layer_but_the_head() {
    let model = fixture("models/llama-3-8b");
    let model = model.to_str().expect("a UTF-8 path");
    let adapters = |targets: &str| {
        let doc = estimate_json(&[
            "--model",
            model,
            "--train",
            "--lora-rank",
            "16",
            "--lora-targets",
            targets,
        ]);
        id_bytes(&doc, "lora_adapters")
    };
    let all = adapters("all-linear");
    let seven = adapters("q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj");
    assert_eq!(all, seven);
    // 32 layers × r 16 × Σ(in + out) of the seven projections × 4 bytes (float32 adapters).
    let per_layer: u64 = [(4096, 4096), (4096, 1024), (4096, 1024), (4096, 4096)]
        .iter()
        .chain(&[(4096, 14336), (4096, 14336), (14336, 4096)])
        .map(|(i, o)| 16 * (i + o))
        .sum();
    assert_eq!(all, 32 * per_layer * 4);
    assert!(adapters("q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,lm_head") > all);
}

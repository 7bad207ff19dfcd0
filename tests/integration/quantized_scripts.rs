//! Quantized scripts (issue 29): quantized weights on a prediction, with the real bitsandbytes (its CPU build) and peft on the
//! CPU: QLoRA end to end (a 4-bit load through transformers' `BitsAndBytesConfig`,
//! `prepare_model_for_kbit_training`, LoRA on all linear layers, gradient checkpointing,
//! `PagedAdamW8bit`), an 8-bit load and `generate`, bitsandbytes' `Linear4bit` and
//! `Linear8bitLt` used directly, and checkpoint formats whose library is missing. Bytes are
//! held to bitsandbytes' own packing: its CPU `quantize_4bit` run here, and the packing formula
//! from the model's config.
//!
//! No test name here says "predict": `.ci/run` runs the predict suite a second time on torch
//! 2.6, whose environment has no bitsandbytes.

use crate::common::{PhaseStatus, Phases, PredictionDoc, Run, fixture, python_with};
use std::path::Path;

/// The interpreter with torch, transformers, peft and bitsandbytes.
fn bnb_python() -> String {
    python_with(&["torch", "transformers", "peft", "bitsandbytes"])
}

/// `iteragpu predict --script fixtures/scripts/predict/NAME -- ARGS` for the H200: the document,
/// what was printed and the exit code.
fn run(python: &str, dir: &Path, name: &str, args: &[&str]) -> (PredictionDoc, String, i32) {
    let run = Run::predict()
        .args(["--python", python, "--card", "H200"])
        .output(dir.join(format!("{name}{}.json", args.join("-").replace('/', "_"))))
        .arg("--script")
        .arg(fixture(&format!("scripts/predict/{name}")))
        .arg("--")
        .args(args)
        .finish();
    let stderr = run.stderr();
    assert!(
        run.document().exists(),
        "{name}: no prediction written: {stderr}"
    );
    (run.prediction(), stderr, run.code().unwrap_or(-1))
}

/// What the caching allocator hands out for one storage (512-byte blocks).
fn rounded(bytes: u64) -> u64 {
    bytes.max(1).div_ceil(512) * 512
}

fn config(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixture(&format!("{name}/config.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn field(c: &serde_json::Value, key: &str) -> u64 {
    c[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in the config"))
}

/// The numbers of elements of a Llama layer's seven linear weights (q, k, v, o, gate, up, down).
fn llama_linears(c: &serde_json::Value) -> [u64; 7] {
    let (h, i) = (field(c, "hidden_size"), field(c, "intermediate_size"));
    let kv = field(c, "num_key_value_heads") * (h / field(c, "num_attention_heads"));
    [h * h, h * kv, h * kv, h * h, h * i, h * i, i * h]
}

/// The device bytes bitsandbytes 0.50 keeps for one weight of `n` elements in nf4/fp4 with
/// double quantization, blocksize 64 (`functional.quantize_4bit`): the packed data (n/2 bytes of
/// uint8), the 8-bit absmax of each 64-block, the nested state (fp32 absmax of each 256 of those,
/// and its own copy of the 256-entry dynamic map), the 16-entry 4-bit code and the fp32 offset.
fn nf4_double_quant_bytes(n: u64) -> u64 {
    let blocks = n.div_ceil(64);
    rounded(n / 2)
        + rounded(blocks)
        + rounded(4 * blocks.div_ceil(256))
        + rounded(256 * 4)
        + rounded(16 * 4)
        + rounded(4)
}

/// Σ of the storages bitsandbytes itself makes on the CPU for one `rows × cols` bf16 weight
/// (`quantize_4bit`: the packed data and every tensor of its quant state), each as the caching
/// allocator would hold it, then the dynamic map it caches once per device (`name2qmap`).
fn bnb_cpu_bytes(
    python: &str,
    rows: u64,
    cols: u64,
    quant_type: &str,
    double: bool,
    storage: &str,
) -> u64 {
    let code = format!(
        "import torch, bitsandbytes.functional as F\n\
         r = lambda n: max(1, -(-n // 512)) * 512\n\
         q, s = F.quantize_4bit(torch.randn({rows}, {cols}, dtype=torch.bfloat16), blocksize=64, \
         compress_statistics={double}, quant_type='{quant_type}', quant_storage=torch.{storage})\n\
         ts = [q, s.absmax, s.code] + ([s.offset, s.state2.absmax, s.state2.code] if s.nested else [])\n\
         shared = [F.name2qmap['dynamic']] if s.nested else []\n\
         print(sum(r(t.nbytes) for t in ts + shared))",
        double = if double { "True" } else { "False" },
    );
    let out = std::process::Command::new(python)
        .args(["-c", &code])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no byte count printed: {stdout}"))
}

/// `Linear4bit` quantized by its own `.to("cuda")` on data-less tensors: the layer holds exactly
/// the storages bitsandbytes makes for it on the CPU (nf4 with double quantization, fp4
/// without, a bf16 `quant_storage`), and its forward and backward through bitsandbytes'
/// `dequantize_4bit` are predicted.
#[test]
#[ignore = "needs torch, transformers, peft and bitsandbytes"]
fn bnb_linear4bit_holds_what_bitsandbytes_packs() {
    let python = bnb_python();
    let dir = tempfile::tempdir().unwrap();
    for (quant_type, double, storage) in [
        ("nf4", true, "uint8"),
        ("fp4", false, "uint8"),
        ("nf4", true, "bfloat16"),
    ] {
        // Llama-3-8B's gate_proj: its packed data (28 MiB) fills whole 2 MiB pages, so the
        // caching allocator's large block holds no unsplit remainder (which PyTorch would count
        // as allocated too) and the allocated bytes are the storages' own.
        let args = [
            "4bit",
            "4096",
            "14336",
            "8",
            quant_type,
            if double { "1" } else { "0" },
            storage,
        ];
        let (doc, stderr, code) = run(&python, dir.path(), "bnb_linear.py", &args);
        assert_eq!(code, 0, "{args:?}: {stderr}");
        let quantize = doc.phase("quantize");
        assert_eq!(quantize.status, PhaseStatus::Predicted, "{stderr}");
        let expected = bnb_cpu_bytes(&python, 14336, 4096, quant_type, double, storage);
        assert_eq!(
            quantize.end_allocated_bytes,
            Some(expected),
            "{args:?}: the layer's storages after its quantization"
        );
        if double && storage == "uint8" {
            // bitsandbytes' packing, from the shape alone, plus its one cached dynamic map.
            assert_eq!(expected, nf4_double_quant_bytes(4096 * 14336) + 1024);
        }
        let step = doc.phase("forward_backward");
        assert_eq!(step.status, PhaseStatus::Predicted, "{stderr}");
        // The dequantized weight (14336 × 4096 in bf16) is a temporary of the forward.
        let dequantized = 14336 * 4096 * 2;
        assert!(
            step.peak_allocated_bytes.unwrap() >= expected + dequantized,
            "{args:?}: {:?}",
            step.peak_allocated_bytes
        );
        assert!(stderr.contains("Params4bit"), "{stderr}");
    }
}

/// LLM.int8 loaded through transformers' `BitsAndBytesConfig(load_in_8bit=True)`: each linear
/// weight is int8 with one fp32 scale per output row (`Int8Params`: `CB`, `SCB`), `lm_head`
/// kept in fp16; `generate` is predicted without outliers (`llm_int8_threshold=0`). With the
/// default threshold the outlier columns depend on the data: the phase is bounded (no outlier
/// column to every column one) with bitsandbytes' op named, the load predicted.
#[test]
#[ignore = "needs torch, transformers, peft and bitsandbytes"]
fn bnb_int8_load_and_generate() {
    let python = bnb_python();
    let dir = tempfile::tempdir().unwrap();
    let model = fixture("tiny/llama").display().to_string();
    let c = config("tiny/llama");
    let (h, l, v) = (
        field(&c, "hidden_size"),
        field(&c, "num_hidden_layers"),
        field(&c, "vocab_size"),
    );
    let kv = field(&c, "num_key_value_heads") * (h / field(&c, "num_attention_heads"));
    let i = field(&c, "intermediate_size");
    let rows = [h, kv, kv, h, i, i, h];
    let layer: u64 = llama_linears(&c)
        .iter()
        .zip(rows)
        .map(|(n, out)| rounded(*n) + rounded(out * 4))
        .sum();
    let head_dim = h / field(&c, "num_attention_heads");
    // Embeddings and lm_head in fp16, the norms, and the rotary's inv_freq and original_inv_freq.
    let expected = l * layer
        + 2 * rounded(v * h * 2)
        + (2 * l + 1) * rounded(h * 2)
        + 2 * rounded(head_dim / 2 * 4);

    let (doc, stderr, code) = run(
        &python,
        dir.path(),
        "bnb_int8_generate.py",
        &[&model, "0.0"],
    );
    assert_eq!(code, 0, "{stderr}");
    let weights = doc.phase("weights");
    assert_eq!(weights.status, PhaseStatus::Predicted, "{stderr}");
    assert_eq!(weights.end_allocated_bytes, Some(expected), "{stderr}");
    let generate = doc.phase("generate");
    assert_eq!(generate.status, PhaseStatus::Predicted, "{stderr}");
    assert!(generate.peak_allocated_bytes.unwrap() > expected);
    assert!(stderr.contains("generated 4 tokens"), "{stderr}");

    // `Linear8bitLt` used directly, without outliers: int8 data and one fp32 scale per row,
    // then a forward and a backward.
    let (doc, stderr, code) = run(
        &python,
        dir.path(),
        "bnb_linear.py",
        &["8bit", "4096", "4096", "8", "0.0"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        doc.phase("quantize").end_allocated_bytes,
        Some(4096 * 4096 + rounded(4096 * 4))
    );
    assert_eq!(
        doc.phase("forward_backward").status,
        PhaseStatus::Predicted,
        "{stderr}"
    );
    assert!(stderr.contains("Int8Params torch.int8"), "{stderr}");
    let (doc, stderr, _) = run(
        &python,
        dir.path(),
        "bnb_int8_generate.py",
        &[&model, "6.0"],
    );
    assert_eq!(
        doc.phase("weights").status,
        PhaseStatus::Predicted,
        "{stderr}"
    );
    assert_eq!(doc.phase("weights").end_allocated_bytes, Some(expected));
    // Bounded: its figures at every column an outlier, `lower` at none (a second run).
    let generate = doc.phase("generate");
    assert_eq!(generate.status, PhaseStatus::Bounded, "{stderr}");
    let upper = generate.peak_allocated_bytes.expect("the upper figures");
    let lower = generate.lower.as_ref().and_then(|l| l.peak_allocated_bytes);
    assert!(lower.is_some_and(|l| l <= upper), "{lower:?} vs {upper}");
    assert!(
        generate
            .unpredictable
            .iter()
            .any(|u| u.op.contains("bitsandbytes.int8_vectorwise_quant")
                && u.reason.contains("depends on the data")),
        "{:?}",
        generate.unpredictable
    );
}

/// QLoRA on Llama-3-8B's config: nf4 with double quantization and bf16 compute through
/// transformers, `prepare_model_for_kbit_training` with gradient checkpointing, LoRA r=16 on all
/// linear layers, `PagedAdamW8bit`, two steps. The load holds exactly bitsandbytes' packing of
/// every linear weight plus the modules kept in bf16 (embeddings, lm_head, norms); the paged
/// states (uint8, two per LoRA weight of at least 1e5 elements) are unified memory outside the
/// allocator, said apart; both steps are predicted. The same with DoRA and the 32-bit
/// `PagedAdamW`.
#[test]
#[ignore = "needs torch, transformers, peft and bitsandbytes"]
fn qlora_llama_3_8b_nf4_paged_adamw_8bit() {
    let python = bnb_python();
    let dir = tempfile::tempdir().unwrap();
    let model = fixture("models/llama-3-8b").display().to_string();
    let (doc, stderr, code) = run(&python, dir.path(), "qlora_sft.py", &[&model, "1", "64"]);
    assert_eq!(code, 0, "{stderr}");
    let c = config("models/llama-3-8b");
    let (h, l, v) = (
        field(&c, "hidden_size"),
        field(&c, "num_hidden_layers"),
        field(&c, "vocab_size"),
    );
    let head_dim = h / field(&c, "num_attention_heads");
    let packed: u64 = llama_linears(&c)
        .iter()
        .map(|n| nf4_double_quant_bytes(*n))
        .sum();
    // bitsandbytes' dynamic map, cached once per device; embeddings, lm_head and norms in bf16;
    // the rotary's inv_freq and original_inv_freq.
    let expected = l * packed
        + 1024
        + 2 * rounded(v * h * 2)
        + (2 * l + 1) * rounded(h * 2)
        + 2 * rounded(head_dim / 2 * 4);
    let weights = doc.phase("weights");
    assert_eq!(weights.status, PhaseStatus::Predicted, "{stderr}");
    assert_eq!(weights.end_allocated_bytes, Some(expected), "{stderr}");
    assert_eq!(expected, 5_702_756_352);

    // PagedAdamW8bit pages the states of the LoRA weights of at least 1e5 elements (down_proj's
    // A, gate_proj's and up_proj's B: 16 × intermediate_size): two uint8 states each.
    let i = field(&c, "intermediate_size");
    let paged = l * 3 * (16 * i) * 2;
    for step in ["step0", "step1"] {
        let phase = doc.phase(step);
        assert_eq!(phase.status, PhaseStatus::Predicted, "{step}: {stderr}");
        assert_eq!(phase.peak_managed_bytes, Some(paged), "{step}");
        // prepare_model_for_kbit_training upcasts the bf16 embeddings and lm_head to fp32.
        assert!(phase.start_allocated_bytes.unwrap() > expected + 2 * v * h * 2);
    }
    assert!(
        doc.notes
            .iter()
            .any(|n| n.contains("unified memory")
                && n.contains("outside PyTorch's caching allocator")),
        "{:?}",
        doc.notes
    );
    // LoRA r=16 on the 7 linear layers of each of the 32 layers.
    let lora: u64 = [(h, h), (h, 1024), (h, 1024), (h, h), (h, i), (h, i), (i, h)]
        .iter()
        .map(|(a, b)| 16 * (a + b))
        .sum::<u64>()
        * l;
    assert!(stderr.contains(&format!("trainable {lora}")), "{stderr}");
    // DoRA with the 32-bit PagedAdamW: peft copies the quantized weights (a `Params4bit` copy is
    // `type(self).__new__(type(self))`, then its state); the same states paged, in fp32.
    let (doc, stderr, code) = run(
        &python,
        dir.path(),
        "qlora_sft.py",
        &[&model, "1", "64", "PagedAdamW", "nf4", "1", "1"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(doc.phase("weights").end_allocated_bytes, Some(expected));
    for step in ["step0", "step1"] {
        let phase = doc.phase(step);
        assert_eq!(phase.status, PhaseStatus::Predicted, "{step}: {stderr}");
        assert_eq!(phase.peak_managed_bytes, Some(paged * 4), "{step}");
    }
    // DoRA's magnitude: one vector of each adapted layer's output size.
    let magnitude = l * (3 * h + 2 * 1024 + 2 * i);
    assert!(
        stderr.contains(&format!("trainable {}", lora + magnitude)),
        "{stderr}"
    );
}

/// GPTQ and AWQ checkpoints whose library the predicting Python lacks are built packed and
/// predicted (packed.rs), as compressed-tensors' and HQQ's are (packed.rs), FP8 through
/// transformers' reference (packed.rs): the fixtures load here, predicted, never a crash.
#[test]
#[ignore = "needs torch, transformers, peft and bitsandbytes"]
fn quantized_checkpoints_without_their_library_load_packed_with_figures() {
    let python = bnb_python();
    let dir = tempfile::tempdir().unwrap();
    let gptq = fixture("models/llama-2-7b-gptq").display().to_string();
    let awq = fixture("models/mistral-7b-awq").display().to_string();
    for model in [&gptq, &awq] {
        let (doc, stderr, _) = run(
            &python,
            dir.path(),
            "quantized_checkpoint.py",
            &[model.as_str()],
        );
        assert_eq!(
            doc.phase("weights").status,
            PhaseStatus::Predicted,
            "{model}: {stderr}"
        );
    }
}

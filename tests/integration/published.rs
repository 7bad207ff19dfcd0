//! Published readings as regression tests (issue 43, item 3): public figures of GPU memory whose
//! code is re-created in `tests/fixtures/scripts/published/` (each script's docstring cites its
//! source, the figure and what differs), predicted here and held within 1% of the figure, so a
//! change that breaks storage lifetimes, the optimizers' states or the allocator's rounding shows
//! at once. Each script prints the figure as its source reads it (`COUNTER name value`).
//!
//! Readings tried and left out (their re-creation does not land within 1%, or cannot be made
//! faithfully): the same anatomy page's training figure (14949 MB on nvidia-smi, 2022: torch
//! 1.10, BERT's eager attention of then and transformers' own AdamW; predicted 11,016 MiB of
//! reserved memory with today's eager attention, 19% short), LitGPT's quantize tutorial
//! (falcon-7b `generate/base.py`, "Memory used: 14.51 GB": lit-gpt's own model, and which counter
//! it printed changed between lit-gpt versions), and torchao's "ao (offload gradients)" 4.01 GB
//! (its gradient hook calls `record_stream` with its own stream: the prediction stops there).

use crate::common::{fixture, python_with, torch_python};
use std::collections::BTreeMap;

/// `predict --card CARD --script fixtures/scripts/published/NAME -- ARGS`: the `COUNTER name v…`
/// lines the script printed, by name.
fn counters(python: &str, card: &str, name: &str, args: &[&str]) -> BTreeMap<String, Vec<u64>> {
    crate::lifetimes::predicted_counters(python, card, &format!("published/{name}"), args).0
}

/// The predicted figure within 1% of the published one.
fn within_1_percent(predicted: u64, published: f64, what: &str) {
    let error = predicted as f64 / published - 1.0;
    assert!(
        error.abs() < 0.01,
        "{what}: predicted {predicted} bytes, published {published} bytes ({:+.2}%)",
        error * 100.0
    );
}

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

#[test]
#[ignore = "needs torch and transformers"]
fn predict_bert_large_load_takes_the_anatomy_pages_1288_mib() {
    // transformers' "Model training anatomy" page
    // (https://huggingface.co/docs/transformers/model_memory_anatomy), V100 16GB: NVML's used
    // memory "1343 MB" after `torch.ones((1, 1)).to("cuda")`, "2631 MB" after BERT-large for
    // sequence classification `.to("cuda")`: the weights took 2631 - 1343 = 1288 MiB, read here
    // as the allocator's reserved bytes before and after (the context is in both readings).
    let c = counters(
        &torch_python(),
        "V100 16GB",
        "bert_large_load.py",
        &[fixture("models/bert-large-uncased").to_str().unwrap()],
    );
    let load = c["reserved_after"][0] - c["reserved_before"][0];
    within_1_percent(load, 1288.0 * MIB, "BERT-large's weights on the GPU");
    // Predicted exactly: 1288 MiB (the page's figure is whole MiB).
    assert_eq!(c["load_mib"], [1288]);
}

#[test]
#[ignore = "needs torch and transformers"]
fn predict_octocoder_generate_peaks_at_the_llm_optimization_pages_29_03_gib() {
    // transformers' "Optimizing LLMs for Speed and Memory" page
    // (https://huggingface.co/docs/transformers/llm_tutorial_optimization): bigcode/octocoder
    // (15.5B, GPTBigCode) in bfloat16, a pipeline generating 60 new tokens;
    // `bytes_to_giga_bytes(torch.cuda.max_memory_allocated())` printed 29.0260648727417 (GiB).
    // Predicted 31,157,600,256 bytes (-0.03%).
    let c = counters(&torch_python(), "A100 40GB", "octocoder_generate.py", &[]);
    assert_eq!(c["new_tokens"], [60]);
    within_1_percent(
        c["peak_allocated"][0],
        29.0260648727417 * GIB,
        "octocoder's generate peak",
    );
}

#[test]
#[ignore = "needs torch, timm and bitsandbytes"]
fn torchao_benchmark_vit_h_fused_adamw_and_bnb_8bit_peaks() {
    // torchao/optim/README.md, "Benchmarks"
    // (https://github.com/pytorch/ao/blob/main/torchao/optim/README.md): timm's ViT-H fine-tuned
    // with BF16 AMP, batch size 8, on a 4070Ti SUPER (AD103, sm89, 16 GB: the catalog's RTX 4080
    // is the same chip); "Peak memory allocated (GB)" = `torch.cuda.max_memory_allocated() / 1e9`.
    // Predicted: fused 12,262,271,488 (+0.26%), bnb 8-bit 8,335,926,784 (+0.19%).
    let python = python_with(&["torch", "timm", "bitsandbytes"]);
    for (optim, published_gb) in [("AdamW", 12.23), ("AdamW8bitBnb", 8.32)] {
        let c = counters(&python, "RTX 4080", "torchao_low_bit_adam.py", &[optim]);
        within_1_percent(c["peak_allocated"][0], published_gb * 1e9, optim);
    }
}

#[test]
#[ignore = "needs torch, timm and torchao"]
fn torchao_benchmark_vit_h_low_bit_adamw_peaks() {
    // The same table: ao 8-bit 8.33 GB, ao FP8 E4M3 8.33 GB, ao 4-bit 7.72 GB. Predicted
    // 8,336,258,560 (+0.08%), 8,335,924,736 (+0.07%), 7,717,279,232 (-0.04%).
    let python = python_with(&["torch", "timm", "torchao"]);
    for (optim, published_gb) in [
        ("AdamW8bitAo", 8.33),
        ("AdamWFp8Ao", 8.33),
        ("AdamW4bitAo", 7.72),
    ] {
        let c = counters(&python, "RTX 4080", "torchao_low_bit_adam.py", &[optim]);
        within_1_percent(c["peak_allocated"][0], published_gb * 1e9, optim);
    }
}

#[test]
#[ignore = "needs torch, timm and torchao"]
fn torchao_benchmark_vit_giant_optimizer_cpu_offload_peaks() {
    // torchao/optim/README.md, "Optimizer CPU offload": timm/vit_giant_patch14_dinov2.lvd142m,
    // eager, full BF16, activation checkpointing, batch size 32, 4070Ti SUPER; "Max memory":
    // None 9.82 GB, ao (`CPUOffloadOptimizer`) 5.24 GB. Predicted 9,779,061,760 (-0.42%) and
    // 5,205,667,328 (-0.65%).
    let python = python_with(&["torch", "timm", "torchao"]);
    for (offload, published_gb) in [("none", 9.82), ("ao", 5.24)] {
        let c = counters(
            &python,
            "RTX 4080",
            "torchao_offload_vit_giant.py",
            &[offload],
        );
        within_1_percent(c["peak_allocated"][0], published_gb * 1e9, offload);
    }
}

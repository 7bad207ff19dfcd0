//! `estimate` and `predict` answer the same question alike (issue 20, item 4): the same default
//! precision and the same meaning of each, so that the estimate of "my question" and the prediction
//! of "my script" agree. Three questions, each asked of both with real torch, transformers and peft
//! on the CPU: a full fine-tune with AdamW, LoRA r16 on q_proj,v_proj, inference with a KV cache.
//! The weights, gradients, optimizer states and KV cache are held equal to the byte (the fixture's
//! tensors are multiples of 512 bytes, so the allocator's rounding adds nothing); the totals within
//! the estimate's activation terms, the one part the estimate models rather than counts.

use crate::common::{PredictionDoc, Run, estimate_json, fixture, id_bytes, torch_python};
use predicates::prelude::*;

/// A Llama of 492 M parameters whose every tensor is a multiple of 512 bytes in 16 and 32 bits.
const MODEL: &str = "models/llama-style-8l";

fn predict(dir: &std::path::Path, name: &str, args: &[&str]) -> PredictionDoc {
    let python = torch_python();
    let model = fixture(MODEL).display().to_string();
    Run::predict()
        .args([
            "--python",
            &python,
            "--workload",
            "causal-lm",
            "--model",
            &model,
        ])
        .args(args)
        .output(dir.join(format!("{name}.json")))
        .succeeds()
        .prediction()
}

fn estimate(args: &[&str]) -> serde_json::Value {
    let model = fixture(MODEL).display().to_string();
    let mut all = vec!["--model", &model];
    all.extend(args);
    estimate_json(&all)
}

/// A category's bytes at a phase's peak (0 when nothing of it was alive).
fn at_peak(doc: &PredictionDoc, phase: &str, category: &str) -> u64 {
    let phase = doc
        .phases
        .iter()
        .find(|p| p.name == phase)
        .unwrap_or_else(|| panic!("no phase {phase}"));
    let at = phase
        .at_peak
        .as_ref()
        .expect("a predicted phase has its peak");
    at.by_category.get(category).copied().unwrap_or(0)
}

/// The highest peak allocated over the phases: what the estimate's total stands for.
fn peak(doc: &PredictionDoc) -> u64 {
    doc.phases
        .iter()
        .filter_map(|p| p.peak_allocated_bytes)
        .max()
        .expect("phases with peaks")
}

/// |estimate's total − predicted peak| within the activation terms.
fn totals_within(estimate: &serde_json::Value, predicted: u64, activation_ids: &[&str]) {
    let total = estimate["total_bytes"].as_u64().unwrap();
    let share: u64 = activation_ids.iter().map(|id| id_bytes(estimate, id)).sum();
    assert!(
        total.abs_diff(predicted) <= share,
        "estimate {total} vs predicted peak {predicted}: gap {} above the activations' {share}",
        total.abs_diff(predicted)
    );
}

/// Both commands name the precision: the estimate's default is predict's (fp32).
fn same_precision(estimate: &serde_json::Value, doc: &PredictionDoc, precision: &str) {
    assert_eq!(estimate["training"]["precision"], precision);
    assert_eq!(
        serde_json::to_value(&doc.spec).unwrap()["precision"],
        precision,
        "the prediction's spec"
    );
}

#[test]
#[ignore = "needs torch and transformers"]
fn a_full_fine_tune_agrees() {
    let dir = tempfile::tempdir().unwrap();
    // Neither side is told the precision: both take fp32.
    let load = ["--context", "128", "--batch", "2"];
    let est = estimate(&[&["--train", "--optimizer", "adamw"][..], &load].concat());
    assert_eq!(est["training"]["precision_stated"], false);
    let doc = predict(
        dir.path(),
        "full",
        &[&["--task", "train", "--optimizer", "adamw"][..], &load].concat(),
    );
    same_precision(&est, &doc, "fp32");
    assert!(
        doc.notes.iter().any(|n| n.starts_with(
            "training precision: --precision fp32 (the default, as estimate's; --precision bf16-mixed, fp16-mixed or bf16 to choose): trained parameters float32, compute float32, gradients float32, optimizer states float32"
        )),
        "{:?}",
        doc.notes
    );
    // At the first optimizer step's peak every state is alive, and the foreach temporaries.
    for (id, category) in [
        ("weights", "parameter"),
        ("gradients", "gradient"),
        ("optimizer_states", "optimizer state"),
        ("optimizer_step_temporaries", "temporary"),
    ] {
        assert_eq!(
            id_bytes(&est, id),
            at_peak(&doc, "optimizer_step", category),
            "{id} vs {category}"
        );
    }
    totals_within(&est, peak(&doc), &["activations", "logits_and_loss"]);
}

#[test]
#[ignore = "needs torch, transformers and peft"]
fn a_lora_fine_tune_agrees_in_every_precision() {
    let dir = tempfile::tempdir().unwrap();
    let lora = [
        "--lora-rank",
        "16",
        "--lora-targets",
        "q_proj,v_proj",
        "--context",
        "128",
        "--batch",
        "2",
    ];
    // fp32: the base in fp32; bf16: the base in bf16, but peft's adapters still in fp32.
    for precision in ["fp32", "bf16-mixed", "bf16"] {
        let est = estimate(&[&["--train", "--precision", precision][..], &lora].concat());
        let doc = predict(
            dir.path(),
            precision,
            &[&["--task", "train", "--precision", precision][..], &lora].concat(),
        );
        same_precision(&est, &doc, precision);
        // The frozen base and the adapters are the parameters; the rotary buffer is apart.
        assert_eq!(
            id_bytes(&est, "weights") + id_bytes(&est, "lora_adapters"),
            at_peak(&doc, "optimizer_step", "parameter"),
            "{precision}: weights"
        );
        for (id, category) in [
            ("gradients", "gradient"),
            ("optimizer_states", "optimizer state"),
            ("optimizer_step_temporaries", "temporary"),
        ] {
            assert_eq!(
                id_bytes(&est, id),
                at_peak(&doc, "optimizer_step", category),
                "{precision}: {id} vs {category}"
            );
        }
        totals_within(&est, peak(&doc), &["activations", "logits_and_loss"]);
    }
}

#[test]
#[ignore = "needs torch and transformers"]
fn inference_with_a_kv_cache_agrees() {
    let dir = tempfile::tempdir().unwrap();
    // 96 prompt tokens + 32 generated: the estimate's context is their sum.
    let est = estimate(&["--context", "128", "--batch", "2"]);
    let doc = predict(
        dir.path(),
        "generate",
        &[
            "--prompt-tokens",
            "96",
            "--new-tokens",
            "32",
            "--batch",
            "2",
        ],
    );
    // Both in the config's torch_dtype (bfloat16).
    assert_eq!(
        serde_json::to_value(&doc.spec).unwrap()["dtype"],
        "bfloat16"
    );
    assert_eq!(
        id_bytes(&est, "weights"),
        at_peak(&doc, "decode", "parameter")
    );
    // The cache object's real size after decoding, as the workload reads it.
    let decode = doc.phases.iter().find(|p| p.name == "decode").unwrap();
    assert_eq!(
        id_bytes(&est, "kv_cache"),
        decode.inputs["cache_bytes"].as_u64().unwrap()
    );
    totals_within(&est, peak(&doc), &["prefill_transient"]);
}

/// Each command says the precision it assumed, in its output and its file: estimate in its table
/// and its JSON, measure (here with the fake torch) in its notes.
#[test]
fn every_command_says_the_precision_it_assumed() {
    let model = fixture(MODEL).display().to_string();
    crate::common::iteragpu()
        .args(["estimate", "--model", &model, "--train"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "training: --precision fp32 (the default, as predict and measure), adamw: trained parameters float32, compute float32, gradients float32, optimizer states float32",
        ));
    let lora = estimate(&[
        "--train",
        "--precision",
        "bf16-mixed",
        "--lora-rank",
        "8",
        "--lora-targets",
        "q_proj",
    ]);
    let t = &lora["training"];
    assert_eq!(t["precision_stated"], true);
    assert_eq!(t["compute_dtype"], "bfloat16");
    assert_eq!(t["lora_base_dtype"], "bfloat16");
    assert_eq!(t["parameters_dtype"], "float32");
    assert_eq!(term_dtype(&lora, "weights"), "bfloat16");

    let dir = tempfile::tempdir().unwrap();
    for (extra, said) in [
        (&[][..], "--precision fp32 (the default, as estimate's;"),
        (
            &["--precision", "bf16-mixed"][..],
            "--precision bf16-mixed: trained parameters float32, compute bfloat16",
        ),
    ] {
        let result = Run::measure()
            .fake_torch()
            .args(["--task", "train", "--width", "64", "--no-prediction"])
            .args(extra)
            .output(dir.path().join(format!("train{}.json", extra.len())))
            .succeeds()
            .result();
        assert!(
            result
                .notes
                .iter()
                .any(|n| n.starts_with("training precision: ") && n.contains(said)),
            "{said:?} in {:?}",
            result.notes
        );
    }
}

/// The `dtype` a term was counted in.
fn term_dtype<'a>(doc: &'a serde_json::Value, id: &str) -> &'a str {
    crate::common::term_by_id(doc, id)["dtype"]
        .as_str()
        .expect("a dtype")
}

/// `estimate --workload vision` against `predict` of the same images (issue 22): a ViT-base from
/// its config, with transformers' default SDPA and with eager attention (the config's
/// `attn_implementation`). The weights are held to the allocator's rounding of each tensor (512
/// bytes); the activation terms, the estimate's model of what the layers keep, to 1% of the
/// prediction's bytes of that category at the phase's peak.
mod vision {
    use super::{at_peak, fixture, id_bytes, torch_python};
    use crate::common::{PredictionDoc, Run, estimate_json};

    fn config(dir: &std::path::Path, attention: Option<&str>) -> String {
        config_of(dir, "vit-base-defaults", attention)
    }

    fn config_of(dir: &std::path::Path, fixture_name: &str, attention: Option<&str>) -> String {
        let path = fixture(&format!("models/{fixture_name}/config.json"));
        let mut raw: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        if let Some(kernel) = attention {
            raw["attn_implementation"] = kernel.into();
        }
        let out = dir.join(format!(
            "{fixture_name}-{}.json",
            attention.unwrap_or("default")
        ));
        std::fs::write(&out, raw.to_string()).unwrap();
        out.display().to_string()
    }

    /// The same images asked of both; `train`: `--train` to estimate, `--task train` to predict.
    fn both(
        dir: &std::path::Path,
        model: &str,
        args: &[&str],
        train: bool,
    ) -> (serde_json::Value, PredictionDoc) {
        let estimate_train: &[&str] = if train { &["--train"] } else { &[] };
        let predict_train: &[&str] = if train { &["--task", "train"] } else { &[] };
        let est =
            estimate_json(&[&["vision", "--model", model][..], args, estimate_train].concat());
        let name = format!("{}-{train}.json", model.replace('/', "_"));
        let doc = Run::predict()
            .args([
                "--python",
                &torch_python(),
                "--workload",
                "vision",
                "--model",
                model,
            ])
            .args(args)
            .args(predict_train)
            .output(dir.join(name))
            .succeeds()
            .prediction();
        (est, doc)
    }

    fn within(what: &str, estimated: u64, predicted: u64, percent: u64) {
        println!("{what}: estimate {estimated} bytes, predict {predicted} bytes");
        assert!(
            estimated.abs_diff(predicted) * 100 <= predicted * percent,
            "{what}: estimate {estimated} vs predicted {predicted}, beyond {percent}%"
        );
    }

    fn weights_agree(est: &serde_json::Value, doc: &PredictionDoc, phase: &str) {
        let (estimated, predicted) = (id_bytes(est, "weights"), at_peak(doc, phase, "parameter"));
        // 200 tensors, each rounded up to 512 bytes by the allocator.
        assert!(
            predicted >= estimated && predicted - estimated <= 200 * 512,
            "weights {estimated} vs parameters {predicted}"
        );
    }

    #[test]
    #[ignore = "needs torch and transformers"]
    fn inference_agrees() {
        let dir = tempfile::tempdir().unwrap();
        // DeiT: CLS and distillation tokens, and a config whose `architectures` is null.
        for (name, sequence) in [("vit-base-defaults", 197), ("deit-base-defaults", 198)] {
            let model = config_of(dir.path(), name, None);
            let (est, doc) = both(dir.path(), &model, &["--images", "8"], false);
            assert_eq!(est["vision"]["sequence"], sequence, "{name}");
            assert_eq!(est["vision"]["attention"], "sdpa", "{name}");
            weights_agree(&est, &doc, "warm_forward");
            within(
                &format!("{name}: inference transient"),
                id_bytes(&est, "forward_transient") + id_bytes(&est, "attention_scores"),
                at_peak(&doc, "cold_forward", "temporary"),
                1,
            );
        }
    }

    #[test]
    #[ignore = "needs torch and transformers"]
    fn training_agrees_with_sdpa_and_with_eager() {
        let dir = tempfile::tempdir().unwrap();
        let mut kept = Vec::new();
        for attention in [None, Some("eager")] {
            let model = config(dir.path(), attention);
            let (est, doc) = both(
                dir.path(),
                &model,
                &["--images", "4", "--resolution", "256"],
                true,
            );
            assert_eq!(est["vision"]["sequence"], 257);
            weights_agree(&est, &doc, "forward");
            let activations = ["image_inputs", "activations", "attention_scores"]
                .iter()
                .map(|id| id_bytes(&est, id))
                .sum();
            within(
                &format!("training activations ({})", attention.unwrap_or("sdpa")),
                activations,
                at_peak(&doc, "forward", "activation"),
                1,
            );
            kept.push((
                id_bytes(&est, "attention_scores"),
                at_peak(&doc, "forward", "activation"),
            ));
        }
        // Eager's s² term is what the prediction adds to SDPA's, to 1%.
        let ((sdpa_est, sdpa), (eager_est, eager)) = (kept[0], kept[1]);
        within("eager's scores", eager_est - sdpa_est, eager - sdpa, 1);
    }
}

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

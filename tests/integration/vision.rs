//! The vision workload (`--workload vision`): predicted with real torch and transformers on the
//! CPU (ViT and ConvNeXt at two resolutions, DeiT's config without `architectures`, training against inference, a predicted sweep over
//! `resolution`), the refusals, and the fake torch's measure path (which cannot build a
//! transformers model: it says so, exit 2).

use crate::common::*;
use serde_json::Value;

fn model(name: &str) -> String {
    fixture(&format!("models/{name}")).display().to_string()
}

fn phase<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no phase {name}: {doc}"))
}

fn predict_vision(python: &str, dir: &std::path::Path, tag: &str, args: &[&str]) -> Value {
    Run::predict()
        .args(["--python", python, "--workload", "vision"])
        .args(args)
        .output(dir.join(format!("{tag}.json")))
        .succeeds()
        .stdout_has("a PREDICTION, not a measurement")
        .json()
}

/// The peak of the forward grows with the resolution, and the sequence a ViT attends over is
/// its patches plus CLS, (H/p)·(W/p) + 1; ConvNeXt's last feature map is the image over 32.
#[test]
#[ignore = "needs torch and transformers"]
fn predicted_peaks_grow_with_resolution_and_the_sequence_is_the_patches() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let vit = model("vit-base-defaults");
    let convnext = model("convnext-tiny-defaults");
    let mut peaks = Vec::new();
    for (name, path) in [("vit", &vit), ("convnext", &convnext)] {
        let mut last = 0;
        for r in [224u64, 384] {
            let side = r.to_string();
            let doc = predict_vision(
                &python,
                dir.path(),
                &format!("{name}-{r}"),
                &["--model", path, "--resolution", &side, "--images", "4"],
            );
            assert_eq!(doc["dimensions"]["height"], r);
            let forward = phase(&doc, "cold_forward");
            let peak = forward["peak_allocated_bytes"].as_u64().unwrap();
            assert!(peak > last, "{name} at {r}: {peak} after {last}");
            last = peak;
            let hidden = &forward["inputs"]["hidden_shape"];
            if name == "vit" {
                assert_eq!(hidden[1], (r / 16) * (r / 16) + 1, "{hidden}");
            } else {
                assert_eq!(hidden[2], r / 32, "{hidden}");
            }
            peaks.push(peak);
        }
    }
    assert_eq!(peaks.len(), 4);
}

/// Training holds gradients and AdamW's states beside the weights: its peak is above
/// inference's, and its phases are the training loop's.
#[test]
#[ignore = "needs torch and transformers"]
fn vision_training_predicts_above_inference() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let vit = model("vit-base-defaults");
    let base = ["--model", vit.as_str(), "--images", "2"];
    let infer = predict_vision(&python, dir.path(), "infer", &base);
    let mut train_args = base.to_vec();
    train_args.extend(["--task", "train", "--precision", "bf16-mixed"]);
    let train = predict_vision(&python, dir.path(), "train", &train_args);
    let peak = |doc: &Value| {
        doc["phases"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["peak_allocated_bytes"].as_u64())
            .max()
            .unwrap()
    };
    // AdamW's two states and the gradients: at least three more copies of the fp32 weights.
    let weights = phase(&infer, "model_load")["end_allocated_bytes"]
        .as_u64()
        .unwrap();
    assert!(
        peak(&train) > peak(&infer) + 3 * weights,
        "{} vs {}",
        peak(&train),
        peak(&infer)
    );
    phase(&train, "optimizer_step");
    assert_eq!(train["dimensions"]["precision"], "bf16-mixed");
}

/// DeiT's default config says `"architectures": null`, and DeiT maps to two classifiers in
/// transformers' auto classes, which iterate over it: the workload builds the first,
/// `DeiTForImageClassification`, whose sequence is the patches plus CLS and distillation tokens
/// and whose parameters are the estimate's count.
#[test]
#[ignore = "needs torch and transformers"]
fn a_deit_config_without_architectures_is_predicted() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let deit = model("deit-base-defaults");
    let doc = predict_vision(&python, dir.path(), "deit", &["--model", &deit]);
    assert_eq!(doc["status"], "complete", "{}", doc["failure"]);
    let load = &phase(&doc, "model_load")["inputs"];
    assert_eq!(load["built"], "DeiTForImageClassification");
    assert_eq!(load["parameters"], 85_801_730);
    assert_eq!(
        phase(&doc, "cold_forward")["inputs"]["hidden_shape"][1],
        14 * 14 + 2
    );
}

/// A CLIP/SigLIP-like tower: the SigLIP vision tower of Gemma 3's real config runs alone, its
/// patches without CLS ((896/14)² at its own size, (448/14)² at 448 with interpolation).
#[test]
#[ignore = "needs torch and transformers"]
fn a_multimodal_configs_vision_tower_runs_alone() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let gemma = model("gemma-3-4b-it");
    let doc = predict_vision(
        &python,
        dir.path(),
        "tower",
        &["--model", &gemma, "--resolution", "448"],
    );
    let built = phase(&doc, "model_load")["inputs"]["built"].to_string();
    assert!(built.contains("vision tower"), "{built}");
    assert_eq!(
        phase(&doc, "cold_forward")["inputs"]["hidden_shape"][1],
        32 * 32
    );
    assert_eq!(
        phase(&doc, "inputs")["inputs"]["forward_options"]["interpolate_pos_encoding"],
        true
    );
}

/// `--model timm:NAME` builds timm's own model (no weights downloaded): its feature map is the
/// image over 32 for a ResNet, and the forward's peak grows with the resolution. The name has no
/// "predict" in it: the CI's torch-2.6 pass has no timm.
#[test]
#[ignore = "needs torch and timm"]
fn timm_models_run_by_name() {
    let python = python_with(&["torch", "timm"]);
    let dir = tempfile::tempdir().unwrap();
    let peaks: Vec<u64> = [224u64, 448]
        .iter()
        .map(|&r| {
            let doc = predict_vision(
                &python,
                dir.path(),
                &format!("timm{r}"),
                &[
                    "--model",
                    "timm:resnet18",
                    "--resolution",
                    &r.to_string(),
                    "--images",
                    "2",
                ],
            );
            let built = phase(&doc, "model_load")["inputs"]["built"].to_string();
            assert!(built.contains("timm resnet18"), "{built}");
            let forward = phase(&doc, "cold_forward");
            assert_eq!(
                forward["inputs"]["hidden_shape"],
                serde_json::json!([2, 512, r / 32, r / 32])
            );
            forward["peak_allocated_bytes"].as_u64().unwrap()
        })
        .collect();
    assert!(peaks[1] > peaks[0], "{peaks:?}");
}

/// `sweep --predict --vary resolution=…`: every trial predicted, the peaks growing, and the
/// largest resolution predicted not to fit a limit between the last two.
#[test]
#[ignore = "needs torch and transformers"]
fn a_predicted_sweep_varies_the_resolution() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let vit = model("vit-base-defaults");
    let series = Run::sweep()
        .args([
            "--predict",
            "--python",
            &python,
            "--memory-limit",
            "1792MiB",
        ])
        .args(["--workload", "vision", "--model", &vit, "--images", "16"])
        .args(["--vary", "resolution=224,384,512"])
        .output(dir.path().join("series.json"))
        .succeeds()
        .stdout_has("PREDICTED")
        .json();
    let trials = series["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 3);
    let peaks: Vec<u64> = trials
        .iter()
        .map(|t| t["peak_allocated_bytes"].as_u64().unwrap_or(u64::MAX))
        .collect();
    assert!(peaks.windows(2).all(|w| w[0] < w[1]), "{peaks:?}");
    assert_eq!(trials[0]["values"]["resolution"], 224);
    assert_eq!(trials[0]["out_of_memory"], false);
    assert_eq!(trials[2]["out_of_memory"], true, "{}", trials[2]);
}

/// Bad input is refused with the value and the fix, before any worker starts.
#[test]
fn vision_refusals_name_the_value_and_the_fix() {
    let vit = model("vit-base-defaults");
    let llama = model("llama-3-8b");
    for (args, says) in [
        (
            vec!["--model", vit.as_str(), "--resolution", "0"],
            "0 pixels is not an image side",
        ),
        (
            vec!["--model", vit.as_str(), "--resolution", "224xq"],
            "give N (square, e.g. 224) or HxW",
        ),
        (
            vec!["--model", llama.as_str()],
            "`llama` is not an image model",
        ),
        (vec!["--model", llama.as_str()], "--workload causal-lm"),
        (vec!["--model", vit.as_str(), "--batch", "2"], "--images"),
        (vec![], "--workload vision needs --model"),
        (vec!["--model", "timm:"], "give timm's model name"),
    ] {
        Run::predict()
            .args(["--workload", "vision"])
            .args(&args)
            .expect_status(1)
            .stderr_has(says);
    }
    Run::predict()
        .args(["--images", "2"])
        .expect_status(1)
        .stderr_has("--images has no effect on dense inference");
}

/// The fake torch has no transformers beside it: the measure path says what is missing (exit
/// 2), never an empty result.
#[test]
fn measuring_vision_with_the_fake_torch_says_transformers_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    Run::measure()
        .fake_torch()
        .args(["--workload", "vision", "--model"])
        .arg(model("vit-base-defaults"))
        .args(["--no-prediction"])
        .output(dir.path().join("r.json"))
        .expect_status(2)
        .stderr_has("the vision workload needs transformers")
        .wrote_nothing();
}

/// `estimate vision` needs no torch: the config's figures, and refusals that name the
/// value and the fix.
#[test]
fn vision_estimates_from_the_config_and_refuses_what_it_cannot() {
    let vit = fixture("models/vit-base-defaults").display().to_string();
    let est = estimate_json(&[
        "vision",
        "--model",
        &vit,
        "--resolution",
        "384",
        "--images",
        "2",
        "--train",
    ]);
    assert_eq!(est["vision"]["patches"], 576);
    assert_eq!(est["vision"]["sequence"], 577);
    assert_eq!(id_bytes(&est, "weights"), 85_800_194 * 4);
    assert!(est["left_out"].to_string().contains("logits"), "{est}");
    let siglip = fixture("models/siglip-base-defaults").display().to_string();
    let est = estimate_json(&["vision", "--model", &siglip]);
    assert_eq!(est["vision"]["sequence"], 196, "SigLIP has no CLS token");
    let convnext = fixture("models/convnext-tiny-defaults")
        .display()
        .to_string();
    for (args, words) in [
        (
            vec!["vision", "--model", &convnext],
            "`convnext` is not one of them",
        ),
        (
            vec!["vision", "--model", &vit, "--context", "128"],
            "unexpected argument '--context'",
        ),
        (
            vec!["--workload", "vision", "--model", &vit, "--context", "128"],
            "--context is not part of a vision estimate",
        ),
        (
            vec!["--model", &vit, "--images", "4"],
            "use `iteragpu estimate vision --model DIR`",
        ),
        // One message, whichever workload: never a loop between the two refusals.
        (
            vec!["vision", "--model", &vit, "--images-per-request", "2"],
            "--images-per-request 2: estimate has no multimodal terms (a prompt's images become tokens only through the model's own image processor): use `iteragpu predict --workload vlm --model DIR --images-per-request 2`",
        ),
        (
            vec!["--model", &vit, "--images-per-request", "2"],
            "estimate has no multimodal terms",
        ),
        (
            vec![
                "vision",
                "--model",
                &fixture("models/llama-3-8b").display().to_string(),
            ],
            "`llama` is a language model (its config has no image_size, patch_size, num_channels or vision_config), not an image encoder: estimate it with `iteragpu estimate --model",
        ),
        (
            vec![
                "vision",
                "--model",
                &fixture("models/qwen2-vl-2b-instruct").display().to_string(),
            ],
            "`qwen2_vl` is a multimodal (image+text) model, not an image encoder, and estimate has no multimodal terms: run `iteragpu predict --workload vlm --model",
        ),
    ] {
        iteragpu()
            .arg("estimate")
            .args(&args)
            .assert()
            .code(1)
            .stderr(predicates::str::contains(words));
    }
}

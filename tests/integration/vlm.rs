//! The multimodal-prompt workload (`--workload vlm`): LLaVA-1.5, Qwen2-VL, Gemma 3 and
//! Llama-3.2-Vision predicted
//! with real torch and transformers on the CPU from their hub config.json and
//! preprocessor_config.json (the image tokens each processor makes, the shapes it really
//! processed, the prefill growing with the images), a predicted sweep over
//! `images-per-request`, concurrent requests (`--requests`), the refusals, and the fake torch's
//! measure path.

use crate::common::*;
use serde_json::{Value, json};

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

fn predict_vlm(dir: &std::path::Path, tag: &str, args: &[&str]) -> Value {
    let doc = Run::predict()
        .args(["--python", &torch_python(), "--workload", "vlm"])
        .args(["--prompt-tokens", "16", "--new-tokens", "2"])
        .args(args)
        .output(dir.join(format!("{tag}.json")))
        .succeeds()
        .stdout_has("a PREDICTION, not a measurement")
        .json();
    let phases: Vec<&str> = doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["model_load", "inputs", "prefill", "decode"]);
    assert_eq!(doc["status"], "complete", "{}", doc["failure"]);
    doc
}

fn prefill_peak(doc: &Value) -> u64 {
    phase(doc, "prefill")["peak_allocated_bytes"]
        .as_u64()
        .unwrap()
}

/// LLaVA-1.5's CLIP processor resizes and crops any image to 336×336, and its processor rule
/// gives (336/14)² = 576 image tokens (the CLS dropped by the "default" feature strategy): a
/// 480×640 request is processed at 336×336, and a second image adds 576 tokens and prefill memory.
#[test]
#[ignore = "needs torch and transformers"]
fn predicted_llava_counts_576_tokens_per_image_at_the_processed_size() {
    let dir = tempfile::tempdir().unwrap();
    let llava = model("llava-1.5-7b-hf");
    let mut peaks = Vec::new();
    for n in [1u64, 2] {
        let images = n.to_string();
        let doc = predict_vlm(
            dir.path(),
            &format!("llava-{n}"),
            &[
                "--model",
                &llava,
                "--resolution",
                "480x640",
                "--images-per-request",
                &images,
            ],
        );
        let inputs = &phase(&doc, "inputs")["inputs"];
        assert_eq!(inputs["requested_resolution"], json!([480, 640]));
        assert_eq!(inputs["processed_pixel_shape"], json!([n, 3, 336, 336]));
        assert_eq!(
            inputs["image_tokens_per_image"],
            json!(vec![576; n as usize])
        );
        assert_eq!(inputs["prompt_tokens_per_request"], 576 * n + 16);
        assert_eq!(doc["dimensions"]["images_per_request"], n);
        peaks.push(prefill_peak(&doc));
    }
    assert!(peaks[1] > peaks[0], "{peaks:?}");
}

/// Qwen2-VL keeps the image's size (dynamic resolution): 448×448 is a 32×32 grid of 14-pixel
/// patches, merged 2×2 into 256 tokens; 224×224 gives 64. The prompt holds each image between
/// vision_start and vision_end.
#[test]
#[ignore = "needs torch and transformers"]
fn predicted_qwen2_vl_tokens_follow_the_resolution() {
    let dir = tempfile::tempdir().unwrap();
    let qwen = model("qwen2-vl-2b-instruct");
    let mut peaks = Vec::new();
    for (side, grid, tokens) in [(224u64, 16u64, 64u64), (448, 32, 256)] {
        let r = side.to_string();
        let doc = predict_vlm(
            dir.path(),
            &format!("qwen-{side}"),
            &["--model", &qwen, "--resolution", &r],
        );
        let inputs = &phase(&doc, "inputs")["inputs"];
        assert_eq!(inputs["image_grid_thw"], json!([[1, grid, grid]]));
        assert_eq!(inputs["processed_pixel_shape"], json!([grid * grid, 1176]));
        assert_eq!(inputs["image_tokens_per_image"], json!([tokens]));
        assert_eq!(inputs["prompt_tokens_per_request"], tokens + 2 + 16);
        peaks.push(prefill_peak(&doc));
    }
    assert!(peaks[1] > peaks[0], "{peaks:?}");
}

/// Gemma 3's processor resizes to 896×896 and each image is mm_tokens_per_image = 256 tokens.
#[test]
#[ignore = "needs torch and transformers"]
fn predicted_gemma3_makes_256_tokens_per_image() {
    let dir = tempfile::tempdir().unwrap();
    let doc = predict_vlm(
        dir.path(),
        "gemma",
        &["--model", &model("gemma-3-4b-it"), "--resolution", "512"],
    );
    let inputs = &phase(&doc, "inputs")["inputs"];
    assert_eq!(inputs["processed_pixel_shape"], json!([1, 3, 896, 896]));
    assert_eq!(inputs["image_tokens_per_image"], json!([256]));
    assert_eq!(inputs["prompt_tokens_per_request"], 256 + 2 + 16);
    // The cache holds the prompt and the two tokens fed back while decoding.
    assert_eq!(
        phase(&doc, "decode")["inputs"]["cache_tokens"],
        256 + 2 + 16 + 2
    );
}

/// Llama-3.2-Vision (mllama, the 11B layout): a 480×1000 image is tiled 1×2 (two 560×560
/// tiles, padded to max_image_tiles = 4 slots), every slot encoded into (560/14)² + 1 = 1601
/// states, so the cross-attention layers' keys and values hold 4 × 1601 = 6404 states per image;
/// the prompt holds one <|image|> token per image. The cache is checked to the byte: 8
/// cross-attention layers × K and V × the images' states, plus 32 self-attention layers × K and
/// V × the text, 8 KV heads × 128 in bf16 each. A second image adds its states and prefill memory.
#[test]
#[ignore = "needs torch and transformers"]
fn predicted_llama_3_2_vision_tiles_the_image_and_caches_its_states() {
    let dir = tempfile::tempdir().unwrap();
    let mllama = model("llama-3.2-11b-vision-defaults");
    let mut peaks = Vec::new();
    for n in [1u64, 2] {
        let images = n.to_string();
        let doc = predict_vlm(
            dir.path(),
            &format!("mllama-{n}"),
            &[
                "--model",
                &mllama,
                "--resolution",
                "480x1000",
                "--images-per-request",
                &images,
            ],
        );
        let inputs = &phase(&doc, "inputs")["inputs"];
        assert_eq!(
            inputs["processed_pixel_shape"],
            json!([1, n, 4, 3, 560, 560])
        );
        assert_eq!(inputs["tiles_per_image"], json!(vec![2; n as usize]));
        assert_eq!(inputs["vision_tokens_per_tile"], 1601);
        assert_eq!(inputs["vision_tokens_per_image"], 6404);
        assert_eq!(inputs["image_tokens_per_image"], json!(vec![1; n as usize]));
        assert_eq!(inputs["prompt_tokens_per_request"], n + 16);
        let prefill = &phase(&doc, "prefill")["inputs"];
        assert_eq!(
            prefill["cross_attention_states_shape"],
            json!([[4 * n, 1601, 4096]])
        );
        let kv = |tokens: u64| tokens * 8 * 128 * 2 * 2;
        assert_eq!(
            prefill["cache_bytes"],
            8 * kv(6404 * n) + 32 * kv(n + 16),
            "{prefill}"
        );
        assert_eq!(
            phase(&doc, "model_load")["inputs"]["parameters"],
            10_670_220_835u64
        );
        peaks.push(prefill_peak(&doc));
    }
    assert!(peaks[1] > peaks[0], "{peaks:?}");
}

/// `--requests N`: N requests alive together, each prefilled with its own images into its own
/// cache, then decoded in turn: the decode phase holds N caches (its peak grows with N), each
/// request's cache holding its image tokens, its prompt and its output.
#[test]
#[ignore = "needs torch and transformers"]
fn predicted_vlm_requests_keep_a_cache_each() {
    let dir = tempfile::tempdir().unwrap();
    let qwen = model("qwen2-vl-2b-instruct");
    let mut peaks = Vec::new();
    for n in [1u64, 3] {
        let texts: Vec<u64> = [16, 40, 16][..n as usize].to_vec();
        let outputs: Vec<u64> = [2, 4, 2][..n as usize].to_vec();
        let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let doc = Run::predict()
            .args(["--python", &torch_python(), "--workload", "vlm"])
            .args(["--model", &qwen, "--resolution", "224"])
            .args(["--requests", &n.to_string()])
            .args(["--prompt-lengths", &list(&texts)])
            .args(["--output-lengths", &list(&outputs)])
            .output(dir.path().join(format!("requests-{n}.json")))
            .succeeds()
            .stdout_has("each request is prefilled alone, with its own images, into its own dynamic cache")
            .stdout_has("plus every request's image tokens (the inputs phase lists them: image_tokens_per_request)")
            .json();
        assert_eq!(doc["status"], "complete", "{}", doc["failure"]);
        assert_eq!(doc["dimensions"]["requests"], n);
        assert_eq!(doc["dimensions"]["prompt_lengths"], json!(texts));
        let inputs = &phase(&doc, "inputs")["inputs"];
        // 64 image tokens between vision_start and vision_end, then the text.
        let prompts: Vec<u64> = texts.iter().map(|t| t + 64 + 2).collect();
        // Every request's images, not only the first request's.
        assert_eq!(
            inputs["image_tokens_per_request"],
            json!(vec![64; n as usize])
        );
        assert_eq!(
            inputs["image_tokens_per_image"],
            json!(vec![64; n as usize])
        );
        assert_eq!(
            inputs["image_grid_thw"],
            json!(vec![[1, 16, 16]; n as usize])
        );
        assert_eq!(inputs["prompt_tokens_per_request"], json!(prompts));
        let decode = &phase(&doc, "decode")["inputs"];
        let held: Vec<u64> = prompts.iter().zip(&outputs).map(|(p, o)| p + o).collect();
        assert_eq!(decode["cache_tokens"], json!(held), "{decode}");
        let per_request = decode["cache_bytes_per_request"].as_array().unwrap();
        assert_eq!(per_request.len() as u64, n);
        assert!(per_request.iter().all(|b| b.as_u64().unwrap() > 0));
        peaks.push(
            phase(&doc, "decode")["peak_allocated_bytes"]
                .as_u64()
                .unwrap(),
        );
    }
    assert!(peaks[1] > peaks[0], "{peaks:?}");
}

/// A request past the model's positions is refused: before running, by its text, its output
/// and the least its images take; in the worker, by the total once the images are processed
/// (here 16 text + 66 image tokens + 30 output = 112 against a config of 100 positions).
#[test]
#[ignore = "needs torch and transformers"]
fn predicted_vlm_refuses_a_request_past_the_positions_once_its_images_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short");
    std::fs::create_dir(&short).unwrap();
    let config = std::fs::read_to_string(fixture("models/qwen2-vl-2b-instruct/config.json"))
        .unwrap()
        .replace(
            "\"max_position_embeddings\": 32768",
            "\"max_position_embeddings\": 100",
        );
    assert!(config.contains("\"max_position_embeddings\": 100"));
    std::fs::write(short.join("config.json"), config).unwrap();
    std::fs::copy(
        fixture("models/qwen2-vl-2b-instruct/preprocessor_config.json"),
        short.join("preprocessor_config.json"),
    )
    .unwrap();
    Run::predict()
        .args(["--python", &torch_python(), "--workload", "vlm"])
        .arg("--model")
        .arg(&short)
        .args(["--resolution", "224", "--requests", "2"])
        .args(["--prompt-lengths", "8,16", "--output-lengths", "2,30"])
        .output(dir.path().join("long.json"))
        .expect_status(1)
        .stdout_has("request 1: 82 prompt tokens (16 text + 66 image tokens")
        .stdout_has("+ 30 output tokens = 112, beyond the model's 100 positions");
}

/// `sweep --predict --workload vlm --vary requests=1,2,4`: each trial a set of live requests.
#[test]
#[ignore = "needs torch and transformers"]
fn a_predicted_sweep_varies_the_vlm_requests() {
    let dir = tempfile::tempdir().unwrap();
    let series = Run::sweep()
        .args(["--predict", "--python", &torch_python()])
        .args(["--card", "H100 80GB", "--workload", "vlm"])
        .args(["--model", &model("qwen2-vl-2b-instruct")])
        .args([
            "--resolution",
            "224",
            "--prompt-tokens",
            "16",
            "--new-tokens",
            "2",
        ])
        .args(["--vary", "requests=1,2,4"])
        .output(dir.path().join("series.json"))
        .succeeds()
        .stdout_has("PREDICTED")
        .json();
    let trials = series["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 3);
    for (trial, n) in trials.iter().zip([1, 2, 4]) {
        assert_eq!(trial["values"]["requests"], n, "{trial}");
        assert!(trial["peak_allocated_bytes"].as_u64().is_some(), "{trial}");
    }
}

/// `sweep --predict --vary images-per-request=1,2,4`: every trial predicted, the prefill's peak
/// growing with the images.
#[test]
#[ignore = "needs torch and transformers"]
fn a_predicted_sweep_varies_the_images_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let series = Run::sweep()
        .args([
            "--predict",
            "--python",
            &torch_python(),
            "--card",
            "H100 80GB",
        ])
        .args([
            "--workload",
            "vlm",
            "--model",
            &model("qwen2-vl-2b-instruct"),
        ])
        .args(["--resolution", "896", "--batch", "4"])
        .args(["--prompt-tokens", "16", "--new-tokens", "2"])
        .args(["--vary", "images-per-request=1,2,4"])
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
    assert_eq!(
        trials[2]["values"]["images-per-request"], 4,
        "{}",
        trials[2]
    );
}

/// Bad input is refused with the value and the fix, before any worker starts.
#[test]
fn vlm_refusals_name_the_value_and_the_fix() {
    let qwen = model("qwen2-vl-2b-instruct");
    let text_only = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("models/llama-3-8b/config.json"),
        text_only.path().join("config.json"),
    )
    .unwrap();
    std::fs::copy(
        fixture("models/qwen2-vl-2b-instruct/preprocessor_config.json"),
        text_only.path().join("preprocessor_config.json"),
    )
    .unwrap();
    let text_only = text_only.path().display().to_string();
    let config_file = format!("{qwen}/config.json");
    // A multimodal config without its image processor's file.
    let no_processor = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("models/qwen2-vl-2b-instruct/config.json"),
        no_processor.path().join("config.json"),
    )
    .unwrap();
    let no_processor = no_processor.path().display().to_string();
    for (args, says) in [
        (
            vec!["--model", &no_processor],
            "no preprocessor_config.json there",
        ),
        (
            vec!["--model", &model("gemma-3-1b-it")],
            "model_type `gemma3_text` is not a multimodal (image+text) model (its config has no vision_config); run a language model with --workload causal-lm",
        ),
        (
            vec!["--model", &model("llama-3-8b")],
            "model_type `llama` is not a multimodal (image+text) model (its config has no vision_config); run a language model with --workload causal-lm",
        ),
        (
            vec!["--model", &model("vit-base-defaults")],
            "model_type `vit` is not a multimodal (image+text) model (its config has no vision_config); run an image model with --workload vision",
        ),
        (
            vec!["--model", &text_only],
            "model_type `llama` is not a multimodal (image+text) model",
        ),
        (vec!["--model", &config_file], "give the model's folder"),
        (vec![], "--workload vlm needs --model DIR"),
        (
            vec!["--model", &qwen, "--task", "train"],
            "--workload vlm runs inference only",
        ),
        (
            vec!["--model", &qwen, "--requests", "2", "--batch", "2"],
            "--batch 2 with --requests",
        ),
        (
            vec!["--model", &qwen, "--requests", "2", "--cache", "static"],
            "--cache has no effect on vlm generation",
        ),
        (
            vec![
                "--model",
                &qwen,
                "--requests",
                "1",
                "--prompt-lengths",
                "8,9",
            ],
            "--prompt-lengths lists 2 lengths for --requests 1",
        ),
        (
            vec!["--model", &qwen, "--images", "2"],
            "(vlm: --images-per-request)",
        ),
        (
            vec!["--model", &qwen, "--images-per-request", "0"],
            "images-per-request",
        ),
        (
            vec![
                "--model",
                &qwen,
                "--requests",
                "1",
                "--prompt-lengths",
                "40000",
            ],
            "a request of 40000 text tokens + at least 3 image tokens (1 image) + 32 output tokens = 40035 or more is beyond the model's 32768 positions (max_position_embeddings); shorten --prompt-lengths or --new-tokens",
        ),
        (
            vec!["--model", &qwen, "--prompt-tokens", "40000"],
            "= 40035 or more is beyond the model's 32768 positions (max_position_embeddings); shorten --prompt-tokens or --new-tokens",
        ),
        (
            // LLaVA's limit is in text_config; two images take at least one token each.
            vec![
                "--model",
                &model("llava-1.5-7b-hf"),
                "--prompt-tokens",
                "4000",
                "--new-tokens",
                "95",
                "--images-per-request",
                "2",
            ],
            "= 4097 or more is beyond the model's 4096 positions",
        ),
    ] {
        Run::predict()
            .args(["--workload", "vlm"])
            .args(&args)
            .expect_status(1)
            .stderr_has(says);
    }
    Run::predict()
        .args(["--workload", "causal-lm", "--model", &model("gpt2")])
        .args(["--images-per-request", "2"])
        .expect_status(1)
        .stderr_has("--images-per-request has no effect on causal-lm generation");
}

/// The fake torch has no transformers beside it: the measure path says what is missing (exit
/// 2), never an empty result.
#[test]
fn measuring_vlm_with_the_fake_torch_says_transformers_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    Run::measure()
        .fake_torch()
        .args(["--workload", "vlm", "--model"])
        .arg(model("qwen2-vl-2b-instruct"))
        .args(["--no-prediction"])
        .output(dir.path().join("r.json"))
        .expect_status(2)
        .stderr_has("the vlm workload needs transformers")
        .wrote_nothing();
}

/// Every name a model's files give that reaches a lookup (`image_processor_type`, `model_type`, a
/// dtype), tried with hostile values ("pipeline", "__class__", "os.system", dotted paths…): each is
/// refused naming the value and the file, and the report's exploit (a pipeline with
/// trust_remote_code and a Python file beside the config) runs nothing (`tests/python/untrusted_names.py`).
#[test]
#[ignore = "needs torch and transformers"]
fn file_borne_names_reach_only_allowlisted_lookups() {
    let out = python_checks(&torch_python(), "untrusted_names.py");
    assert!(out.contains("untrusted names: "), "{out}");
}

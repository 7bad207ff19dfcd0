//! The newest releases as users install them (issue 42): transformers 5.25 kernelizes every
//! `from_pretrained` model with kernels from the Hub by default; `predict` never fetches or runs
//! one (each layer runs its own eager forward, each kernel named in the notes), with no network
//! and without `USE_HUB_KERNELS=0`; `measure` records the kernels that ran. TRL's own
//! `trl/scripts/sft.py` as shipped, with and without its QLoRA flags. A library outside the tested
//! range (docs/tested-versions.md) is said.
//!
//! No test name here says "predict" where the oldest environment (torch 2.6, no trl) cannot run it.

use crate::common::{PhaseStatus, PredictionDoc, PredictionStatus, Run, fixture, python_with};
use std::path::Path;

/// transformers' version in the prediction's environment (`5.25.0`) as numbers.
fn transformers_at_least(doc: &PredictionDoc, min: (u64, u64)) -> bool {
    let v = doc
        .assumptions
        .transformers_version
        .clone()
        .unwrap_or_default();
    let mut parts = v.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= min
}

fn notes(doc: &PredictionDoc) -> String {
    doc.notes.join("\n")
}

/// The inputs sft.py needs, made without a download: a tiny Llama checkpoint with a word-level
/// tokenizer, and a local JSON Lines dataset folder.
pub(crate) fn sft_inputs(python: &str, dir: &Path) -> (String, String) {
    let made = std::process::Command::new(python)
        .arg(fixture("scripts/setup/sft_inputs.py"))
        .arg(fixture("tiny/llama"))
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    (
        dir.join("model").display().to_string(),
        dir.join("data").display().to_string(),
    )
}

/// TRL's own script, as the installed trl ships it.
fn trl_sft_script(python: &str) -> String {
    let out = std::process::Command::new(python)
        .args([
            "-c",
            "import os, trl; print(os.path.join(os.path.dirname(trl.__file__), 'scripts', 'sft.py'))",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `trl/scripts/sft.py` as shipped, offline (HF_HUB_OFFLINE, HF_DATASETS_OFFLINE: a kernel fetch
/// would fail, as it did before issue 42), with `USE_HUB_KERNELS` left as the user has it (unset in CI): every phase predicted, and
/// with transformers 5.25 or newer the rotary and RMSNorm kernels named as left out.
fn sft(python: &str, dir: &Path, name: &str, flags: &[&str]) -> PredictionDoc {
    let (model, data) = sft_inputs(python, &dir.join(format!("inputs-{name}")));
    let run = Run::predict()
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
        .args(["--python", python, "--card", "RTX 4090"])
        .output(dir.join(format!("{name}.json")))
        .arg("--script")
        .arg(trl_sft_script(python))
        .arg("--")
        .args(["--model_name_or_path", &model, "--dataset_name", &data])
        .arg("--output_dir")
        .arg(dir.join(format!("out-{name}")))
        .args([
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "2",
            "--max_length",
            "32",
            "--report_to",
            "none",
        ])
        .args(flags)
        .finish();
    let stderr = run.stderr();
    assert_eq!(run.code(), Some(0), "{name}: {stderr}");
    let doc = run.prediction();
    assert_eq!(doc.status, PredictionStatus::Complete, "{name}: {stderr}");
    assert!(
        doc.phases.iter().any(|p| p.name.starts_with("backward")),
        "{name}: {stderr}"
    );
    for phase in &doc.phases {
        assert_eq!(
            phase.status,
            PhaseStatus::Predicted,
            "{name} {}: {stderr}",
            phase.name
        );
    }
    if transformers_at_least(&doc, (5, 25)) {
        let said = notes(&doc);
        for kernel in [
            "Hub kernel kernels-community/rotary",
            "Hub kernel kernels-community/liger-kernels",
        ] {
            assert!(said.contains(kernel), "{name}: {kernel} not said: {said}");
        }
        // The tiny Llama has 3 decoder layers: one rotary per attention, 2 norms per layer + 1.
        assert!(
            said.contains("layer apply_rotary_transformers (3 modules)"),
            "{said}"
        );
        assert!(said.contains("layer LigerRMSNorm (7 modules)"), "{said}");
        assert!(
            said.contains("`measure` on the GPU runs the kernel"),
            "{said}"
        );
    }
    doc
}

fn parameters_at_first_forward(doc: &PredictionDoc) -> u64 {
    let forward = doc
        .phases
        .iter()
        .find(|p| p.name.contains(".forward #1"))
        .unwrap();
    forward.at_peak.as_ref().unwrap().by_category["parameter"]
}

#[test]
#[ignore = "needs torch, transformers, trl, peft, datasets and bitsandbytes"]
fn trl_sft_script_as_shipped_with_and_without_qlora_offline() {
    let python = python_with(&[
        "torch",
        "transformers",
        "trl",
        "peft",
        "datasets",
        "bitsandbytes",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let full = sft(&python, dir.path(), "full", &[]);
    let qlora = sft(
        &python,
        dir.path(),
        "qlora",
        &[
            "--load_in_4bit",
            "--use_peft",
            "--lora_target_modules",
            "all-linear",
            "--optim",
            "paged_adamw_8bit",
            "--gradient_checkpointing",
        ],
    );
    assert!(
        qlora
            .phases
            .iter()
            .any(|p| p.name.starts_with("PeftModelForCausalLM.forward")),
        "the QLoRA flags build a PEFT model: {:?}",
        qlora.phases.iter().map(|p| &p.name).collect::<Vec<_>>()
    );
    // 4-bit linear weights: fewer parameter bytes than the full-precision run.
    assert!(parameters_at_first_forward(&qlora) < parameters_at_first_forward(&full));
}

/// A script that calls the `kernels` package itself: the load fails with the reason (no eager
/// forward is known for it), said in the notes; nothing is fetched.
#[test]
#[ignore = "needs torch and kernels"]
fn a_hub_kernel_a_script_loads_itself_is_refused_with_the_reason() {
    let python = python_with(&["torch", "kernels"]);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("direct.py");
    std::fs::write(
        &script,
        "import torch\nfrom kernels import get_kernel\nx = torch.ones(4, device='cuda')\nact = get_kernel('kernels-community/activation', version=1)\n",
    )
    .unwrap();
    let run = Run::predict()
        .env("HF_HUB_OFFLINE", "1")
        .args(["--python", &python, "--card", "H200"])
        .output(dir.path().join("direct.json"))
        .arg("--script")
        .arg(&script)
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(1), "{said}");
    assert!(
        said.contains("the Hub kernel kernels-community/activation was not fetched and not run"),
        "{said}"
    );
    let doc = run.prediction();
    assert!(
        notes(&doc).contains(
            "Hub kernel kernels-community/activation (version 1) left out: 1 load by the script"
        ),
        "{}",
        notes(&doc)
    );
}

/// `measure` records the Hub kernels the process loaded (`kernels.get_loaded_kernels()`), with
/// their repository and commit, in the document and its notes.
#[test]
fn measure_records_the_hub_kernels_that_ran() {
    let dir = tempfile::tempdir().unwrap();
    let run = Run::measure()
        .fake_torch()
        .arg("--script")
        .arg(fixture("scripts/hub_kernels_ran.py"))
        .output(dir.path().join("m.json"))
        .succeeds();
    let json = run.json();
    let ran = &json["identity"]["declared"]["hub_kernels"][0];
    assert_eq!(ran["repository"], "kernels-community/rotary");
    assert_eq!(ran["revision"], "0123456789abcdef0123456789abcdef01234567");
    assert_eq!(ran["name"], "rotary");
    assert_eq!(ran["version"], 2);
    let notes = json["notes"].to_string();
    assert!(
        notes
            .contains("Hub kernels ran in this process: kernels-community/rotary@0123456789abcdef"),
        "{notes}"
    );
}

/// `use_kernels=True` with a `KernelConfig` (transformers' documented choice of kernels): the
/// replacements are not made, the forward runs eager and is predicted, the kernel is named.
#[test]
#[ignore = "needs torch, transformers and kernels"]
fn a_kernel_config_runs_eager_and_names_its_kernel() {
    let python = python_with(&["torch", "transformers", "kernels"]);
    let dir = tempfile::tempdir().unwrap();
    let (model, _) = sft_inputs(&python, dir.path());
    let run = Run::predict()
        .env("HF_HUB_OFFLINE", "1")
        .args(["--python", &python, "--card", "H200"])
        .output(dir.path().join("kc.json"))
        .arg("--script")
        .arg(fixture("scripts/predict/kernel_config.py"))
        .arg("--")
        .arg(&model)
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(0), "{said}");
    assert!(said.contains("logits (1, 16, "), "{said}");
    let doc = run.prediction();
    assert_eq!(doc.status, PredictionStatus::Complete, "{said}");
    let notes = notes(&doc);
    assert!(
        notes.contains("Hub kernel kernels-community/layer_norm (version 1) left out: layer LlamaRMSNorm (7 modules), 1 load outside kernelize"),
        "{notes}"
    );
    assert!(
        notes.contains("the KernelConfig's layer replacements and fusions were not made"),
        "{notes}"
    );
}

/// A library newer than the newest tested release (docs/tested-versions.md) is said in the
/// output and in the file's notes; one inside the range is not. The installed versions are what
/// `importlib.metadata` reads: a distribution's metadata folder made here, beside the fake torch.
#[test]
fn a_library_newer_than_the_newest_tested_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    // peft at its newest tested release, as the table says it today.
    let table = std::fs::read_to_string(fixture("../../docs/tested-versions.md")).unwrap();
    let peft = table
        .lines()
        .find_map(|l| l.strip_prefix("| peft |"))
        .and_then(|rest| rest.split('|').nth(1))
        .unwrap()
        .trim()
        .to_string();
    for (name, version) in [("transformers", "99.0.0"), ("peft", peft.as_str())] {
        let info = site.join(format!("{name}-{version}.dist-info"));
        std::fs::create_dir_all(&info).unwrap();
        std::fs::write(
            info.join("METADATA"),
            format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"),
        )
        .unwrap();
    }
    let path = format!("{}:{}", fixture("../fake_torch").display(), site.display());
    let run = Run::measure()
        .fake_torch()
        .env("PYTHONPATH", path)
        .arg("--script")
        .arg(fixture("scripts/nested_markers.py"))
        .output(dir.path().join("m.json"))
        .succeeds();
    let said = format!("{}{}", run.stdout(), run.stderr());
    let expected = "transformers 99.0.0 is newer than the newest release iteragpu is tested on";
    assert!(said.contains(expected), "{said}");
    let notes = run.json()["notes"].to_string();
    assert!(notes.contains(expected), "{notes}");
    assert!(
        !notes.contains("peft 0.21.2"),
        "peft is in the range: {notes}"
    );
    assert_eq!(
        run.json()["environment"]["python"]["libraries"]["transformers"],
        "99.0.0"
    );
}

/// The `kernels` package's own `kernelize` with its default fallback (which would raise on a
/// kernel that cannot load): the layer runs its own forward, predicted to the byte.
#[test]
#[ignore = "needs torch and kernels"]
fn kernelize_with_the_default_fallback_runs_the_layers_own_forward() {
    let python = python_with(&["torch", "kernels"]);
    let dir = tempfile::tempdir().unwrap();
    let run = Run::predict()
        .env("HF_HUB_OFFLINE", "1")
        .args(["--python", &python, "--card", "H200"])
        .output(dir.path().join("k.json"))
        .arg("--script")
        .arg(fixture("scripts/predict/kernelize.py"))
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(0), "{said}");
    assert!(said.contains("out (64, 1024)"), "{said}");
    let doc = run.prediction();
    assert_eq!(doc.status, PredictionStatus::Complete, "{said}");
    assert!(
        notes(&doc).contains("Hub kernel kernels-community/activation (version 1) left out: layer SiluAndMul (1 module)"),
        "{}",
        notes(&doc)
    );
}

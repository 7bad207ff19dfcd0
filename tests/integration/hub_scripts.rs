//! Hub ids inside a predicted script (issue 44, item 3): `from_pretrained("ORG/NAME")` served by
//! the tool's Hub client against a Hub on 127.0.0.1 (`hub_server.rs`), the weights materialised
//! from their safetensors headers in the worker's overlay, never downloaded, never left where a
//! real run could load them.

use std::collections::BTreeMap;
use std::path::Path;

use super::common::{Run, fixture, python_with};
use super::hub_server::{Behaviour, File, Hub, Repo, commit_of, shard};

const REPO: &str = "org/tiny-llama-train";

/// A shard's tensors: name, safetensors dtype, shape.
type Tensors = Vec<(String, &'static str, Vec<u64>)>;

/// A Llama of 2 layers (hidden 256, vocabulary 32,000) in bfloat16: its config, and one
/// `model.safetensors` whose tensors follow from it (about 36 MB, nearly all of it data).
fn tiny_llama() -> (Vec<u8>, Tensors) {
    let (vocab, hidden, inter, kv) = (32_000u64, 256u64, 512u64, 128u64);
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
        "tie_word_embeddings": false, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-5,
    });
    let t = super::hub_server::llama_tensors_of(vocab, hidden, inter, kv, 2);
    (serde_json::to_vec_pretty(&config).unwrap(), t)
}

/// The whole repository's files, and the weight file's length.
fn repository() -> (Repo, u64) {
    let (config, tensors) = tiny_llama();
    let weights = shard(&tensors);
    let File::Shard { len, .. } = &weights else {
        unreachable!()
    };
    let len = *len;
    let mut files = BTreeMap::new();
    files.insert("config.json".to_string(), File::Bytes(config));
    files.insert(
        "generation_config.json".into(),
        File::Bytes(br#"{"bos_token_id": 1, "eos_token_id": 2}"#.to_vec()),
    );
    files.insert("model.safetensors".into(), weights);
    (
        Repo {
            commit: commit_of(REPO),
            files,
            behaviour: Behaviour::Normal,
        },
        len,
    )
}

/// A local copy of the same model: its config and the weight file written whole (header, then
/// every data byte, zeros: what the Hub serves), as `hf download --local-dir` would leave it.
fn local_copy(dir: &Path) {
    let (config, tensors) = tiny_llama();
    std::fs::write(dir.join("config.json"), config).unwrap();
    let File::Shard { head, len } = shard(&tensors) else {
        unreachable!()
    };
    let mut bytes = head;
    bytes.resize(len as usize, 0);
    std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
}

fn predict(
    python: &str,
    home: &Path,
    tmp: &Path,
    hub: &Hub,
    model: &str,
    out: &Path,
) -> super::common::Ran {
    Run::predict()
        .output(out)
        .args(["--python", python, "--card", "H100 80GB", "--script"])
        .arg(fixture("scripts/hub/from_pretrained_train.py"))
        .args(["--", model])
        .env("HF_HOME", home)
        .env("HF_ENDPOINT", &hub.endpoint)
        .env("TMPDIR", tmp)
        .env("HF_HUB_DISABLE_XET", "1")
        .finish()
}

/// The files under `dir` whose name ends with `suffix`.
fn files_ending(dir: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            found.extend(files_ending(&path, suffix));
        } else if path.to_string_lossy().ends_with(suffix) {
            found.push(path);
        }
    }
    found
}

#[test]
#[ignore = "needs torch and transformers"]
fn predict_a_scripts_hub_id_without_its_weights_equals_a_local_copy() {
    let python = python_with(&["torch", "transformers"]);
    let (repo, weight_len) = repository();
    let hub = Hub::start(BTreeMap::from([(REPO.to_string(), repo)]));
    let home = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();

    let by_id = predict(
        &python,
        home.path(),
        tmp.path(),
        &hub,
        REPO,
        &out.path().join("hub.json"),
    );
    let said = format!("{}{}", by_id.stdout(), by_id.stderr());
    assert_eq!(by_id.code(), Some(0), "{said}");
    let sent = hub.bytes_sent();
    let doc = by_id.prediction();
    assert_eq!(
        doc.status,
        iteragpu::schema::prediction::PredictionStatus::Complete,
        "{said}"
    );

    // Less than 1% of the weight file's bytes crossed the network (configs and the header only).
    assert!(
        sent * 100 < weight_len,
        "{sent} bytes sent for a {weight_len}-byte weight file"
    );
    let [served] = doc.hub.as_slice() else {
        panic!("one repository served: {:?}", doc.hub)
    };
    assert_eq!(served.repo, REPO);
    assert_eq!(served.commit.as_deref(), Some(commit_of(REPO).as_str()));
    assert_eq!(served.hole_filled, ["model.safetensors"]);
    assert_eq!(served.hole_filled_bytes, weight_len);
    assert!(
        served.files.contains(&"config.json".to_string()),
        "{served:?}"
    );
    assert!(
        doc.notes.iter().any(|n| n.contains(&commit_of(REPO))),
        "{:?}",
        doc.notes
    );

    // Nothing hole-filled in the user's cache: its config is there, no weight file; the overlay
    // is gone with the run.
    let cache = home.path().join("hub");
    assert!(
        files_ending(&cache, "config.json")
            .iter()
            .any(|p| p.to_string_lossy().contains("tiny-llama-train"))
    );
    assert_eq!(
        files_ending(&cache, ".safetensors"),
        Vec::<std::path::PathBuf>::new()
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("iteragpu-hub-overlay"))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // The same script on a local copy of the same model: the same figures, phase by phase.
    let copy = tempfile::tempdir().unwrap();
    local_copy(copy.path());
    let by_path = predict(
        &python,
        home.path(),
        tmp.path(),
        &hub,
        copy.path().to_str().unwrap(),
        &out.path().join("local.json"),
    );
    assert_eq!(
        by_path.code(),
        Some(0),
        "{}{}",
        by_path.stdout(),
        by_path.stderr()
    );
    let local = by_path.prediction();
    assert!(local.hub.is_empty());
    // `snapshot_download` first, then the folder it returns: the overlay's snapshot folder.
    let snapshot = predict(
        &python,
        home.path(),
        tmp.path(),
        &hub,
        &format!("snapshot:{REPO}"),
        &out.path().join("snapshot.json"),
    );
    assert_eq!(
        snapshot.code(),
        Some(0),
        "{}{}",
        snapshot.stdout(),
        snapshot.stderr()
    );
    let snapshot = snapshot.prediction();
    assert_eq!(snapshot.hub.len(), 1, "{:?}", snapshot.hub);
    assert_eq!(snapshot.hub[0].hole_filled, ["model.safetensors"]);
    let peaks = |d: &iteragpu::schema::prediction::PredictionDoc| -> Vec<(String, Option<u64>)> {
        d.phases
            .iter()
            .map(|p| (p.name.clone(), p.peak_allocated_bytes))
            .collect()
    };
    assert!(peaks(&doc).len() >= 3, "{:?}", peaks(&doc));
    assert_eq!(peaks(&doc), peaks(&local));
    assert_eq!(peaks(&snapshot), peaks(&local));

    // A real run afterwards: offline, transformers finds no weights (never zeros of ours);
    // online, it downloads the real file whole.
    let real = |offline: bool| {
        let mut cmd = std::process::Command::new(&python);
        cmd.env("HF_HOME", home.path())
            .env("HF_ENDPOINT", &hub.endpoint)
            .env("HF_HUB_DISABLE_XET", "1")
            .env_remove("HF_HUB_CACHE")
            .args(["-c", &format!("from transformers import AutoModelForCausalLM\nm = AutoModelForCausalLM.from_pretrained({REPO:?})\nprint('loaded', sum(p.numel() for p in m.parameters()))")]);
        if offline {
            cmd.env("HF_HUB_OFFLINE", "1");
        }
        cmd.output().unwrap()
    };
    let offline = real(true);
    let text = String::from_utf8_lossy(&offline.stderr);
    assert!(!offline.status.success(), "loaded offline: {text}");
    assert!(
        text.contains("model.safetensors")
            || text.contains("does not appear to have")
            || text.contains("couldn't connect")
            || text.contains("cannot find"),
        "{text}"
    );
    let online = real(false);
    assert!(
        online.status.success(),
        "{}",
        String::from_utf8_lossy(&online.stderr)
    );
    let found = files_ending(&cache, "model.safetensors");
    let [weights] = found.as_slice() else {
        panic!("one weight file in the cache: {found:?}")
    };
    let meta = std::fs::metadata(weights).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(meta.len(), weight_len);
    assert!(
        meta.blocks() * 512 >= weight_len,
        "the real download is whole, not a hole: {} blocks",
        meta.blocks()
    );
}

/// What the Hub refuses, a checkpoint without a header and a Hub out of reach: the prediction
/// fails with the reason and the fix, as `--model ORG/NAME` does (exit 4 for the network).
#[test]
#[ignore = "needs torch and transformers"]
fn predict_a_scripts_hub_failures_say_the_reason_and_the_fix() {
    let python = python_with(&["torch", "transformers"]);
    let (config, _) = tiny_llama();
    let mut bin_only = BTreeMap::new();
    bin_only.insert("config.json".to_string(), File::Bytes(config));
    bin_only.insert(
        "pytorch_model.bin".into(),
        File::Shard {
            head: Vec::new(),
            len: 16_000_000_000,
        },
    );
    let repos = BTreeMap::from([
        (
            "org/gated".to_string(),
            super::hub_server::small_repo("org/gated", "gpt2", Behaviour::Gated),
        ),
        (
            "org/bin-only".to_string(),
            Repo {
                commit: commit_of("org/bin-only"),
                files: bin_only,
                behaviour: Behaviour::Normal,
            },
        ),
    ]);
    let hub = Hub::start(repos);
    let home = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();

    let gated = predict(
        &python,
        home.path(),
        tmp.path(),
        &hub,
        "org/gated",
        &out.path().join("g.json"),
    );
    let said = format!("{}{}", gated.stdout(), gated.stderr());
    assert_eq!(gated.code(), Some(1), "{said}");
    let doc = gated.prediction();
    let failure = doc.failure.clone().unwrap_or_default();
    assert!(
        failure.contains("gated") && failure.contains("HF_TOKEN"),
        "{failure}"
    );
    assert!(
        doc.hub[0]
            .failure
            .as_deref()
            .is_some_and(|f| f.contains("gated")),
        "{:?}",
        doc.hub
    );

    hub.reset_counts();
    let bin = predict(
        &python,
        home.path(),
        tmp.path(),
        &hub,
        "org/bin-only",
        &out.path().join("b.json"),
    );
    let said = format!("{}{}", bin.stdout(), bin.stderr());
    assert_eq!(bin.code(), Some(1), "{said}");
    let failure = bin.prediction().failure.unwrap_or_default();
    assert!(
        failure.contains("pytorch_model.bin")
            && failure.contains("without a header")
            && failure.contains("--model org/bin-only"),
        "{failure}"
    );
    assert!(
        hub.bytes_sent() < 1 << 20,
        "{} bytes sent",
        hub.bytes_sent()
    );

    let unreachable = Run::predict()
        .output(out.path().join("u.json"))
        .args(["--python", &python, "--card", "H100 80GB", "--script"])
        .arg(fixture("scripts/hub/from_pretrained_train.py"))
        .args(["--", "org/anything"])
        .env("HF_HOME", home.path())
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .env("HF_HUB_DOWNLOAD_TIMEOUT", "2")
        .env("TMPDIR", tmp.path())
        .finish();
    let said = format!("{}{}", unreachable.stdout(), unreachable.stderr());
    assert_eq!(unreachable.code(), Some(4), "{said}");
    let doc = unreachable.prediction();
    assert!(doc.hub.iter().any(|h| h.network_failure), "{:?}", doc.hub);
    assert!(
        doc.failure.unwrap_or_default().contains("network"),
        "{said}"
    );
}

/// `datasets.load_dataset` of a Hub data set too large to fetch: refused with its size and the
/// fix before a byte of its data is fetched (data are never invented).
#[test]
#[ignore = "needs torch and datasets"]
fn a_data_set_too_large_to_fetch_is_refused_with_its_size() {
    let python = python_with(&["torch", "datasets"]);
    let mut files = BTreeMap::new();
    files.insert("README.md".to_string(), File::Bytes(b"# data".to_vec()));
    for i in 0..3 {
        files.insert(
            format!("data/train-0000{i}-of-00003.parquet"),
            File::Shard {
                head: b"PAR1".to_vec(),
                len: 5_000_000_000,
            },
        );
    }
    let repos = BTreeMap::from([(
        "datasets/org/big-corpus".to_string(),
        Repo {
            commit: commit_of("org/big-corpus"),
            files,
            behaviour: Behaviour::Normal,
        },
    )]);
    let hub = Hub::start(repos);
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("data.py");
    std::fs::write(
        &script,
        "import torch\nfrom datasets import load_dataset\nx = torch.zeros(1024, device='cuda')\nds = load_dataset('org/big-corpus', split='train')\n",
    )
    .unwrap();
    let run = Run::predict()
        .output(dir.path().join("d.json"))
        .args(["--python", &python, "--card", "H100 80GB", "--script"])
        .arg(&script)
        .env("HF_HOME", home.path())
        .env("HF_ENDPOINT", &hub.endpoint)
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(1), "{said}");
    let failure = run.prediction().failure.unwrap_or_default();
    assert!(
        failure.contains("15,000,000,000 bytes") && failure.contains("streaming=True"),
        "{failure}"
    );
    assert!(
        !hub.requests().iter().any(|r| r.contains(".parquet")),
        "{:?}",
        hub.requests()
    );
}

/// A LoRA adapter by Hub id on a base model by Hub id (peft's `PeftModel.from_pretrained`):
/// both repositories served without their weights, the adapter's tensors data-less.
#[test]
#[ignore = "needs torch, transformers and peft"]
fn predict_a_peft_adapter_from_the_hub_on_a_hub_base_model() {
    let python = python_with(&["torch", "transformers", "peft"]);
    let (base, _) = repository();
    let (rank, hidden, kv) = (8u64, 256u64, 128u64);
    let mut tensors: Tensors = Vec::new();
    for l in 0..2 {
        for (m, out) in [("q_proj", hidden), ("v_proj", kv)] {
            let p = format!("base_model.model.model.layers.{l}.self_attn.{m}");
            tensors.push((format!("{p}.lora_A.weight"), "BF16", vec![rank, hidden]));
            tensors.push((format!("{p}.lora_B.weight"), "BF16", vec![out, rank]));
        }
    }
    let adapter_config = serde_json::json!({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": REPO,
        "r": rank, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": ["q_proj", "v_proj"],
        "bias": "none", "inference_mode": true,
    });
    let mut files = BTreeMap::new();
    files.insert(
        "adapter_config.json".to_string(),
        File::Bytes(serde_json::to_vec(&adapter_config).unwrap()),
    );
    files.insert("adapter_model.safetensors".into(), shard(&tensors));
    let adapter = "org/tiny-lora";
    let hub = Hub::start(BTreeMap::from([
        (REPO.to_string(), base),
        (
            adapter.to_string(),
            Repo {
                commit: commit_of(adapter),
                files,
                behaviour: Behaviour::Normal,
            },
        ),
    ]));
    let home = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let run = Run::predict()
        .output(tmp.path().join("lora.json"))
        .args(["--python", &python, "--card", "H100 80GB", "--script"])
        .arg(fixture("scripts/hub/peft_adapter.py"))
        .args(["--", REPO, adapter])
        .env("HF_HOME", home.path())
        .env("HF_ENDPOINT", &hub.endpoint)
        .env("HF_HUB_DISABLE_XET", "1")
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(0), "{said}");
    // peft counts the adapter's parameters: 2 layers x (q: 8x256 + 256x8 = 4,096; v: 8x256 + 128x8 = 3,072).
    assert!(said.contains("lora parameters 14336"), "{said}");
    let doc = run.prediction();
    let served: Vec<&str> = doc.hub.iter().map(|h| h.repo.as_str()).collect();
    assert!(
        served.contains(&REPO) && served.contains(&adapter),
        "{:?}",
        doc.hub
    );
    let lora = doc.hub.iter().find(|h| h.repo == adapter).unwrap();
    assert_eq!(lora.hole_filled, ["adapter_model.safetensors"]);
    assert!(
        lora.files.contains(&"adapter_config.json".to_string()),
        "{lora:?}"
    );
    assert!(
        doc.phases.iter().all(|p| p.peak_allocated_bytes.is_some()),
        "{said}"
    );
}

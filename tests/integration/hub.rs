//! `--model ORG/NAME[@REVISION]`: a model by its Hub id, against a Hub on 127.0.0.1
//! (`hub_server.rs`) started by each test; never the real network.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::common::{fixture, iteragpu};
use super::hub_server::{Hub, TOKEN, commit_of, fixture_repos};

const LLAMA: &str = "meta-llama/Llama-3.1-8B";

/// `iteragpu ARGS` against `hub`, with `home` as HF_HOME and nothing else of the Hub's
/// environment (no token, no proxy, no offline mode) unless `env` says so.
fn run(
    hub: Option<&Hub>,
    home: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut cmd = iteragpu();
    for var in [
        "HF_TOKEN",
        "HF_TOKEN_PATH",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_HUB_DOWNLOAD_TIMEOUT",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("HF_HOME", home).env(
        "HF_ENDPOINT",
        hub.map_or("http://127.0.0.1:9", |h| h.endpoint.as_str()),
    );
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.timeout(Duration::from_secs(60))
        .args(args)
        .output()
        .expect("iteragpu runs")
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on standard output")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn snapshot(home: &Path, repo: &str) -> PathBuf {
    home.join("hub")
        .join(format!("models--{}", repo.replace('/', "--")))
        .join("snapshots")
        .join(commit_of(repo))
}

#[test]
fn estimate_by_hub_id_reads_configs_and_headers_only() {
    let hub = Hub::start(fixture_repos());
    let home = tempfile::tempdir().unwrap();
    let out = run(
        Some(&hub),
        home.path(),
        &["estimate", "--model", LLAMA, "--json"],
        &[],
    );
    let doc = json_of(&out);
    let commit = commit_of(LLAMA);
    assert_eq!(doc["hub"]["repo"], LLAMA);
    assert_eq!(doc["hub"]["commit"], commit.as_str());
    // The exact count and dtypes, from the 30 shards' headers.
    assert_eq!(doc["stored"]["elements"], 8_030_261_248u64);
    assert_eq!(doc["stored"]["shards"].as_array().unwrap().len(), 30);
    assert!(doc["stored"]["by_dtype"]["BF16"].is_object());
    // No weight was sent: a few hundred kilobytes in all, and only header ranges of the shards.
    assert!(hub.bytes_sent() < 2 << 20, "{} bytes", hub.bytes_sent());
    for r in hub.requests() {
        assert!(!r.contains("original/"), "{r}");
        assert!(!r.contains("README"), "{r}");
        if r.contains("/cdn/") {
            assert!(r.contains("bytes="), "a shard read whole: {r}");
        }
    }
    // huggingface_hub's layout: refs/main, the snapshot's files linked to blobs.
    let repo_dir = home.path().join("hub/models--meta-llama--Llama-3.1-8B");
    assert_eq!(
        std::fs::read_to_string(repo_dir.join("refs/main")).unwrap(),
        commit
    );
    let snap = snapshot(home.path(), LLAMA);
    for f in [
        "config.json",
        "generation_config.json",
        "model.safetensors.index.json",
    ] {
        let link = std::fs::read_link(snap.join(f)).unwrap();
        assert!(link.starts_with("../../blobs"), "{f} -> {}", link.display());
    }
    assert!(!snap.join("model-00001-of-00030.safetensors").exists());
    assert!(!repo_dir.join(format!("refs/{commit}")).exists());
    // The same estimate as from the committed config, beside the stored format.
    let local = json_of(&run(
        None,
        home.path(),
        &[
            "estimate",
            "--model",
            fixture("models/llama-3.1-8b").to_str().unwrap(),
            "--json",
        ],
        &[],
    ));
    assert_eq!(doc["model"]["parameters"], local["model"]["parameters"]);
    assert!(local.get("hub").is_none());
    // The table says where the model is from.
    let table = run(
        None,
        home.path(),
        &["estimate", "--model", LLAMA],
        &[("HF_HUB_OFFLINE", "1")],
    );
    assert!(table.status.success(), "{}", stderr(&table));
    assert!(
        String::from_utf8_lossy(&table.stdout)
            .contains(&format!("from the Hub: {LLAMA} at commit {commit}")),
    );
}

#[test]
fn a_second_run_uses_the_cache_and_offline_mode_never_the_network() {
    let hub = Hub::start(fixture_repos());
    let home = tempfile::tempdir().unwrap();
    let args = ["estimate", "--model", LLAMA, "--json"];
    let first = json_of(&run(Some(&hub), home.path(), &args, &[]));
    hub.reset_counts();
    let again = json_of(&run(Some(&hub), home.path(), &args, &[]));
    assert_eq!(first["total_bytes"], again["total_bytes"]);
    // Only the file list is asked again: every file and header is in the caches.
    let requests = hub.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(requests[0].contains("/api/models/"), "{requests:?}");
    // Offline, with no Hub at all: the cache answers.
    let offline = json_of(&run(None, home.path(), &args, &[("HF_HUB_OFFLINE", "1")]));
    assert_eq!(offline["total_bytes"], first["total_bytes"]);
    assert_eq!(offline["stored"], first["stored"]);
    // The Hub out of reach (not offline): the cache answers too, and says so.
    let unreachable = run(
        None,
        home.path(),
        &args,
        &[("HF_HUB_DOWNLOAD_TIMEOUT", "1")],
    );
    assert!(unreachable.status.success(), "{}", stderr(&unreachable));
    assert!(stderr(&unreachable).contains("using the copy in the Hugging Face cache"));
    // Offline with an empty cache: refused, naming the cause and the fix.
    let empty = tempfile::tempdir().unwrap();
    let out = run(None, empty.path(), &args, &[("HF_HUB_OFFLINE", "1")]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("HF_HUB_OFFLINE") && err.contains(LLAMA),
        "{err}"
    );
}

#[test]
fn a_revision_is_resolved_to_its_commit() {
    let hub = Hub::start(fixture_repos());
    let home = tempfile::tempdir().unwrap();
    let commit = commit_of("org/gpt2");
    let id = format!("org/gpt2@{commit}");
    let doc = json_of(&run(
        Some(&hub),
        home.path(),
        &["estimate", "--model", &id, "--json"],
        &[],
    ));
    assert_eq!(doc["hub"]["commit"], commit.as_str());
    // A commit asked for leaves no ref behind (huggingface_hub writes none either).
    let refs = home.path().join("hub/models--org--gpt2/refs");
    assert!(!refs.join(&commit).exists());
    let out = run(
        Some(&hub),
        home.path(),
        &["estimate", "--model", "org/gpt2@no-such-branch"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("no such revision") && err.contains("Invalid rev id"),
        "{err}"
    );
}

#[test]
fn gated_private_and_missing_repositories_say_the_hubs_reason_and_the_fix() {
    let hub = Hub::start(fixture_repos());
    let home = tempfile::tempdir().unwrap();
    let estimate = |id: &str, env: &[(&str, &str)]| {
        run(
            Some(&hub),
            home.path(),
            &["estimate", "--model", id, "--json"],
            env,
        )
    };
    let gated = estimate("org/gated", &[]);
    assert_eq!(gated.status.code(), Some(1));
    let err = stderr(&gated);
    assert!(err.contains("gated") && err.contains("GatedRepo"), "{err}");
    assert!(
        err.contains("Accept its conditions") && err.contains("HF_TOKEN"),
        "{err}"
    );
    assert!(err.contains("Please log in"), "the Hub's own words: {err}");
    let with_token = estimate("org/gated", &[("HF_TOKEN", TOKEN)]);
    assert!(
        stderr(&with_token).contains("403"),
        "{}",
        stderr(&with_token)
    );

    let private = estimate("org/private", &[]);
    assert_eq!(private.status.code(), Some(1));
    let err = stderr(&private);
    assert!(
        err.contains("private, or does not exist") && err.contains("HF_TOKEN"),
        "{err}"
    );
    // The token from the environment, or from huggingface_hub's token file.
    json_of(&estimate("org/private", &[("HF_TOKEN", TOKEN)]));
    let other_home = tempfile::tempdir().unwrap();
    std::fs::write(other_home.path().join("token"), format!("{TOKEN}\n")).unwrap();
    json_of(&run(
        Some(&hub),
        other_home.path(),
        &["estimate", "--model", "org/private", "--json"],
        &[],
    ));

    let missing = estimate("org/does-not-exist", &[]);
    assert_eq!(missing.status.code(), Some(1));
    let err = stderr(&missing);
    assert!(
        err.contains("org/does-not-exist is not a local path"),
        "{err}"
    );
    assert!(err.contains("RepoNotFound"), "{err}");

    let no_config = estimate("org/no-config", &[]);
    assert_eq!(no_config.status.code(), Some(1));
    assert!(
        stderr(&no_config).contains("no config.json"),
        "{}",
        stderr(&no_config)
    );

    let huge = estimate("org/huge-header", &[]);
    assert_eq!(huge.status.code(), Some(1));
    assert!(
        stderr(&huge).contains("above the 100000000-byte cap"),
        "{}",
        stderr(&huge)
    );
    assert!(hub.bytes_sent() < 1 << 20, "the huge header was not read");
}

#[test]
fn slow_and_dropped_answers_are_bounded_and_tried_again() {
    let hub = Hub::start(fixture_repos());
    let home = tempfile::tempdir().unwrap();
    let timeout = [("HF_HUB_DOWNLOAD_TIMEOUT", "1")];
    // One dropped connection: tried again, and it works.
    json_of(&run(
        Some(&hub),
        home.path(),
        &["estimate", "--model", "org/flaky", "--json"],
        &timeout,
    ));
    for id in ["org/slow", "org/dropped"] {
        let start = Instant::now();
        let out = run(
            Some(&hub),
            home.path(),
            &["estimate", "--model", id],
            &timeout,
        );
        // The network's failure, told apart from bad input (README, "Exit codes").
        assert_eq!(out.status.code(), Some(4), "{id}");
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{id}: {:?}",
            start.elapsed()
        );
        let err = stderr(&out);
        assert!(
            err.contains("network: ")
                && err.contains("did not succeed in 3 tries of at most 1 s")
                && err.contains("HF_HUB_DOWNLOAD_TIMEOUT"),
            "{id}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn a_local_path_wins_over_a_hub_id() {
    let hub = Hub::start(fixture_repos());
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let local = cwd.path().join("meta-llama/Llama-3.1-8B");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::copy(
        fixture("models/gpt2/config.json"),
        local.join("config.json"),
    )
    .unwrap();
    let out = iteragpu()
        .current_dir(cwd.path())
        .env("HF_HOME", home.path())
        .env("HF_ENDPOINT", &hub.endpoint)
        .args(["estimate", "--model", LLAMA, "--json"])
        .output()
        .unwrap();
    let doc = json_of(&out);
    assert_eq!(doc["model"]["architecture"]["model_type"], "gpt2");
    assert!(hub.requests().is_empty(), "{:?}", hub.requests());
}

#[test]
fn every_estimate_mode_takes_a_hub_id() {
    let hub = Hub::start(fixture_repos());
    let home = tempfile::tempdir().unwrap();
    let serve = json_of(&run(
        Some(&hub),
        home.path(),
        &[
            "estimate",
            "serve",
            "vllm",
            "--model",
            LLAMA,
            "--card",
            "H100 80GB",
            "--json",
        ],
        &[],
    ));
    assert_eq!(serve["hub"]["commit"], commit_of(LLAMA).as_str());
    let vit = json_of(&run(
        Some(&hub),
        home.path(),
        &[
            "estimate",
            "vision",
            "--model",
            "google/vit-base-patch16-224",
            "--json",
        ],
        &[],
    ));
    assert_eq!(vit["hub"]["repo"], "google/vit-base-patch16-224");
    // A multimodal repository: its processor's config comes with it (the family is not one
    // `estimate` reads: refused by name, after the fetch).
    let vl = "Qwen/Qwen2-VL-2B-Instruct";
    let out = run(Some(&hub), home.path(), &["estimate", "--model", vl], &[]);
    assert!(
        stderr(&out).contains("unknown model_type `qwen2_vl`"),
        "{}",
        stderr(&out)
    );
    assert!(
        snapshot(home.path(), vl)
            .join("preprocessor_config.json")
            .is_file()
    );
    // The tokenizer is the vlm workload's need, not the estimate's.
    assert!(!snapshot(home.path(), vl).join("tokenizer.json").exists());
    // A training estimate reads the same folder.
    let train = json_of(&run(
        Some(&hub),
        home.path(),
        &["estimate", "--model", "org/gpt2", "--train", "--json"],
        &[],
    ));
    assert_eq!(train["hub"]["repo"], "org/gpt2");
}

/// `measure` and `predict` resolve the id before their worker starts: the worker gets the
/// snapshot folder (here the fake torch has no transformers: the workload stops there, exit 2,
/// after the folder was fetched and checked).
#[test]
fn workers_get_the_snapshot_folder() {
    let hub = Hub::start(fixture_repos());
    let home = tempfile::tempdir().unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let pythonpath =
        std::env::join_paths([fixture("no_transformers"), fixture("../fake_torch")]).unwrap();
    let out = super::common::with_fake_torch()
        .env("PYTHONPATH", pythonpath)
        .env("HF_HOME", home.path())
        .env("HF_ENDPOINT", &hub.endpoint)
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HF_TOKEN")
        .args([
            "measure",
            "--workload",
            "causal-lm",
            "--model",
            "org/tiny-llama",
        ])
        .args([
            "--batch",
            "1",
            "--prompt-tokens",
            "8",
            "--new-tokens",
            "2",
            "--output",
        ])
        .arg(out_dir.path().join("m.json"))
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("needs transformers"),
        "{}",
        stderr(&out)
    );
    assert!(
        snapshot(home.path(), "org/tiny-llama")
            .join("config.json")
            .is_file()
    );
    // A sweep resolves the id once, before its first trial.
    let pythonpath =
        std::env::join_paths([fixture("no_transformers"), fixture("../fake_torch")]).unwrap();
    let out = super::common::with_fake_torch()
        .env("PYTHONPATH", pythonpath)
        .env("HF_HOME", home.path())
        .env("HF_ENDPOINT", &hub.endpoint)
        .env_remove("HF_HUB_OFFLINE")
        .args(["sweep", "--workload", "causal-lm", "--model", "org/gpt2"])
        .args([
            "--vary",
            "batch=1,2",
            "--prompt-tokens",
            "8",
            "--new-tokens",
            "2",
            "--output",
        ])
        .arg(out_dir.path().join("s.json"))
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(!stderr(&out).contains("does not exist"), "{}", stderr(&out));
    assert!(
        snapshot(home.path(), "org/gpt2")
            .join("config.json")
            .is_file(),
        "{}",
        stderr(&out)
    );
    // The vlm workload's processor reads the tokenizer: its files come with the folder.
    let vl = "Qwen/Qwen2-VL-2B-Instruct";
    let pythonpath =
        std::env::join_paths([fixture("no_transformers"), fixture("../fake_torch")]).unwrap();
    let out = super::common::with_fake_torch()
        .env("PYTHONPATH", pythonpath)
        .env("HF_HOME", home.path())
        .env("HF_ENDPOINT", &hub.endpoint)
        .env_remove("HF_HUB_OFFLINE")
        .args(["measure", "--workload", "vlm", "--model", vl, "--output"])
        .arg(out_dir.path().join("v.json"))
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    for f in [
        "config.json",
        "preprocessor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        assert!(
            snapshot(home.path(), vl).join(f).is_file(),
            "{f}: {}",
            stderr(&out)
        );
    }
}

/// A prediction from a Hub id: built by transformers from the snapshot folder, offline, and the
/// document names the repository and its commit.
#[test]
#[ignore = "needs torch and transformers (ITERAGPU_TEST_PYTHON)"]
fn a_prediction_from_a_hub_id_records_its_commit() {
    let python = super::common::torch_python();
    let hub = Hub::start(fixture_repos());
    let home = tempfile::tempdir().unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let doc_path = out_dir.path().join("p.json");
    let out = run(
        Some(&hub),
        home.path(),
        &[
            "predict",
            "--workload",
            "causal-lm",
            "--model",
            "org/tiny-llama",
            "--batch",
            "1",
            "--prompt-tokens",
            "8",
            "--new-tokens",
            "2",
            "--card",
            "A100 40GB",
            "--python",
            &python,
            "--output",
            doc_path.to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = super::common::read_json(&doc_path);
    let dims = &doc["dimensions"];
    assert_eq!(dims["model_repo"], "org/tiny-llama", "{dims}");
    assert_eq!(dims["model_commit"], commit_of("org/tiny-llama").as_str());
    let model = dims["model"].as_str().unwrap();
    assert!(
        model.starts_with(snapshot(home.path(), "org/tiny-llama").to_str().unwrap()),
        "{model}"
    );
}

/// huggingface_hub reads what the tool cached as its own: the file, the ref, the scan.
#[test]
#[ignore = "needs huggingface_hub and transformers (ITERAGPU_TEST_PYTHON)"]
fn huggingface_hub_reads_the_cache_the_tool_wrote() {
    let python = super::common::python_with(&["huggingface_hub", "transformers"]);
    let hub = Hub::start(fixture_repos());
    let home = tempfile::tempdir().unwrap();
    json_of(&run(
        Some(&hub),
        home.path(),
        &["estimate", "--model", LLAMA, "--json"],
        &[],
    ));
    let script = format!(
        r#"
import json, os
from huggingface_hub import hf_hub_download, scan_cache_dir, try_to_load_from_cache
from transformers import AutoConfig
repo = "{LLAMA}"
path = hf_hub_download(repo, "config.json", local_files_only=True)
assert "/snapshots/{commit}/" in path, path
assert json.load(open(path))["model_type"] == "llama"
assert try_to_load_from_cache(repo, "model.safetensors.index.json", revision="{commit}")
info = scan_cache_dir()
assert not info.warnings, info.warnings
[r] = [r for r in info.repos if r.repo_id == repo]
[rev] = list(r.revisions)
assert rev.commit_hash == "{commit}" and "main" in rev.refs, (rev.commit_hash, rev.refs)
assert {{f.file_name for f in rev.files}} >= {{"config.json", "generation_config.json", "model.safetensors.index.json"}}
config = AutoConfig.from_pretrained(repo, local_files_only=True)
assert config.num_hidden_layers == 32
print("1 passed, 0 failed")
"#,
        commit = commit_of(LLAMA)
    );
    let out = std::process::Command::new(python)
        .env("HF_HOME", home.path())
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("HF_HUB_CACHE")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every file under `dir`, links included (not followed), as paths relative to it.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() && !path.is_symlink() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out
}

/// A hostile HF_ENDPOINT names a blob `../../../../tmp/x` or a commit that is a path, or sends a
/// file to another host that asks for the token: each is refused, naming the value and the
/// endpoint, before anything is written from it; nothing lands outside HF_HOME, and the token
/// never leaves the Hub's origin.
#[test]
fn a_hostile_hub_writes_nothing_outside_the_cache_and_gets_no_token_elsewhere() {
    let hub = Hub::start(fixture_repos());
    let outer = tempfile::tempdir().unwrap();
    let home = outer.path().join("home");
    std::fs::create_dir(&home).unwrap();
    for (id, value) in [
        ("org/hostile-etag", "../../../../tmp/x"),
        ("org/hostile-commit", "../../../../tmp/x"),
    ] {
        let out = run(
            Some(&hub),
            &home,
            &["estimate", "--model", id, "--json"],
            &[("HF_TOKEN", TOKEN)],
        );
        assert_eq!(out.status.code(), Some(1), "{id}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(value) && err.contains(&hub.endpoint) && err.contains("not usable"),
            "{id}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        let repo_dir = home.join(format!("hub/models--{}", id.replace('/', "--")));
        assert!(
            !repo_dir.join("blobs").exists() || tree(&repo_dir.join("blobs")).is_empty(),
            "{id}: {:?}",
            tree(&repo_dir)
        );
    }
    let out = run(
        Some(&hub),
        &home,
        &["estimate", "--model", "org/redirect-away", "--json"],
        &[("HF_TOKEN", TOKEN)],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("localhost") && err.contains("the token goes only to the Hub"),
        "{err}"
    );
    let seen = hub.seen();
    let away: Vec<_> = seen
        .iter()
        .filter(|r| r.host.starts_with("localhost"))
        .collect();
    assert!(!away.is_empty(), "the redirect was followed: {seen:?}");
    assert!(away.iter().all(|r| !r.token), "{away:?}");
    assert!(
        seen.iter()
            .filter(|r| r.host.starts_with("127.0.0.1"))
            .all(|r| r.token),
        "the Hub itself gets the token: {seen:?}"
    );
    // Nothing beside HF_HOME, nothing in /tmp of that name from here.
    let beside: Vec<_> = std::fs::read_dir(outer.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(beside, ["home"]);
    assert!(
        tree(&home)
            .iter()
            .all(|p| !p.to_string_lossy().contains("..")),
        "{:?}",
        tree(&home)
    );
}

/// The proxy variables as curl and huggingface_hub read them: a proxy for the scheme, and
/// NO_PROXY's hosts reached directly.
#[test]
fn proxies_from_the_environment_and_no_proxy() {
    let hub = Hub::start(fixture_repos());
    let home = tempfile::tempdir().unwrap();
    let dead = "http://user:secret@127.0.0.1:9";
    let proxied = [("HTTP_PROXY", dead), ("HTTPS_PROXY", dead)];
    let args = ["estimate", "--model", "org/gpt2", "--json"];
    let env = |extra: &[(&'static str, &'static str)]| {
        let mut env = vec![("HF_HUB_DOWNLOAD_TIMEOUT", "2")];
        env.extend_from_slice(&proxied);
        env.extend_from_slice(extra);
        env
    };
    // Through the dead proxy: the network's failure, naming the proxy (not its password).
    let out = run(Some(&hub), home.path(), &args, &env(&[]));
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("through the proxy http://127.0.0.1:9 (from HTTP_PROXY)"),
        "{err}"
    );
    assert!(!err.contains("secret"), "{err}");
    assert!(hub.requests().is_empty(), "{:?}", hub.requests());
    // NO_PROXY names the Hub's host (an address, a host:port, or every host): reached directly.
    let port_entry: &'static str =
        Box::leak(format!("example.com, 127.0.0.1:{}", hub.port()).into_boxed_str());
    for no_proxy in [
        ("NO_PROXY", "127.0.0.1"),
        ("no_proxy", port_entry),
        ("NO_PROXY", "*"),
    ] {
        let fresh = tempfile::tempdir().unwrap();
        let doc = json_of(&run(Some(&hub), fresh.path(), &args, &env(&[no_proxy])));
        assert_eq!(doc["hub"]["repo"], "org/gpt2", "{no_proxy:?}");
    }
    // A proxy this client cannot use is said, with its variable (bad input, exit 1).
    let fresh = tempfile::tempdir().unwrap();
    let out = run(
        Some(&hub),
        fresh.path(),
        &args,
        &[("ALL_PROXY", "ftp://127.0.0.1:9")],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("ftp://127.0.0.1:9 (from ALL_PROXY) is not one this tool can use"),
        "{}",
        stderr(&out)
    );
    // HTTPS_PROXY alone is for https: an http Hub is reached directly, as curl does.
    let fresh = tempfile::tempdir().unwrap();
    json_of(&run(
        Some(&hub),
        fresh.path(),
        &args,
        &[("HTTPS_PROXY", dead)],
    ));
}

//! A model by its Hub id: `--model ORG/NAME[@REVISION]` turned into a local folder (the snapshot in
//! huggingface_hub's cache) before anything reads it, so that every command taking a model folder
//! takes an id through this one function ([`resolve`]). A local path that exists always wins; a
//! value shaped `ORG/NAME` that is no path is looked up on the Hub.
//!
//! Only what a command reads is fetched: the configs, the index of shards, and each shard's
//! safetensors header through two HTTP range reads (never a weight). Nothing of the repository is
//! ever run: the files are read as data, and workers get the local folder, so transformers never
//! reaches the network from a worker.
//!
//! The requests are made here ([`http`]: ureq with timeouts, proxies and `NO_PROXY` from the
//! environment, redirects checked hop by hop, the token sent only to the Hub's own origin), and
//! the files written in huggingface_hub's cache layout by [`super::hub_cache`]. Hugging Face's
//! Rust client (`hf-hub` 0.4) was used before; it names a blob after the server's ETag and writes
//! it before anything checks the name, so a hostile `HF_ENDPOINT` could write outside the cache,
//! and its agent has no timeout and no `NO_PROXY`. Here no name from the server (commit, ETag,
//! redirect, file name) reaches a path before it is checked: a commit is 40 hexadecimal digits,
//! an ETag a git or LFS hash (40 or 64), a file one of the names asked for, a shard a plain name.

mod http;
pub mod overlay;
mod proxy;

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use self::http::{Client, Failure};
use super::hub_cache::{self, is_commit, repo_folder};
use super::safetensors::HEADER_CAP;

/// `ORG/NAME`, with the revision asked for (`@REVISION`; the default branch without).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubId {
    pub repo: String,
    pub revision: Option<String>,
}

impl HubId {
    /// An id as huggingface_hub accepts one (`validate_repo_id`): two names of letters, digits,
    /// `-`, `_` and `.`, neither starting or ending with `-` or `.`, without `--` or `..`, at most
    /// 96 characters; `None` for anything else (a path, `timm:NAME`).
    pub fn parse(value: &str) -> Option<HubId> {
        let (repo, revision) = match value.split_once('@') {
            Some((repo, rev)) => (repo, Some(rev)),
            None => (value, None),
        };
        let (org, name) = repo.split_once('/')?;
        let part_ok = |p: &str| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                && !p.starts_with(['-', '.'])
                && !p.ends_with(['-', '.'])
                && !p.contains("--")
                && !p.contains("..")
        };
        if !part_ok(org) || !part_ok(name) || repo.len() > 96 {
            return None;
        }
        let revision = match revision {
            None => None,
            // A branch, tag or commit: no control characters, no climbing out of `refs/`.
            Some(rev)
                if !rev.is_empty()
                    && rev.len() <= 256
                    && !rev
                        .split('/')
                        .any(|c| c.is_empty() || c == "." || c == "..")
                    && rev.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                Some(rev.to_string())
            }
            Some(_) => return None,
        };
        Some(HubId {
            repo: repo.to_string(),
            revision,
        })
    }

    fn revision(&self) -> &str {
        self.revision.as_deref().unwrap_or("main")
    }
}

/// What the command reads besides the configs and the shards' headers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Needs {
    /// The tokenizer files a multimodal processor loads (the vlm workload).
    pub tokenizer: bool,
}

/// The small files fetched whenever the repository has them.
const CONFIGS: [&str; 5] = [
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "model.safetensors.index.json",
];

/// The files `AutoProcessor` reads for its tokenizer, fetched only for the vlm workload.
const TOKENIZER: [&str; 9] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.json",
    "chat_template.jinja",
];

/// Why a Hub id could not be turned into a folder.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error(
        "{id} is not a local path, and the Hub at {endpoint} refuses it ({status}{reason}): the repository is gated. Accept its conditions on {endpoint}/{repo} with your account, then give a token of that account in HF_TOKEN (or `hf auth login`)"
    )]
    Gated {
        id: String,
        repo: String,
        endpoint: String,
        status: u16,
        reason: String,
    },
    #[error(
        "{id} is not a local path, and the Hub at {endpoint} refuses it ({status}{reason}): it is private, or does not exist. {fix}"
    )]
    Refused {
        id: String,
        endpoint: String,
        status: u16,
        reason: String,
        fix: &'static str,
    },
    #[error(
        "{id} is not a local path, and the Hub at {endpoint} has no such {what} ({status}{reason}); check the path, the id (ORG/NAME) and the revision (@REVISION)"
    )]
    NotFound {
        id: String,
        endpoint: String,
        what: &'static str,
        status: u16,
        reason: String,
    },
    #[error("{id}: {what} failed: {reason}")]
    Failed {
        id: String,
        what: String,
        reason: String,
    },
    #[error(
        "{id}: network: {what} did not succeed in {tries} tries of at most {seconds} s each (last: {reason}); check the network, HF_ENDPOINT and the proxy variables (HTTPS_PROXY, NO_PROXY…), or raise HF_HUB_DOWNLOAD_TIMEOUT"
    )]
    Unreachable {
        id: String,
        what: String,
        tries: u32,
        seconds: u64,
        reason: String,
    },
    #[error(
        "{id} is not in the Hugging Face cache at {cache} ({missing}), and HF_HUB_OFFLINE forbids the network: run once without HF_HUB_OFFLINE, or give a local folder"
    )]
    NotCached {
        id: String,
        cache: PathBuf,
        missing: String,
    },
    #[error(
        "{id}: the answer of the Hub at {endpoint} is not usable ({problem}); nothing was written from it. Check HF_ENDPOINT points at a Hugging Face Hub"
    )]
    BadAnswer {
        id: String,
        endpoint: String,
        problem: String,
    },
    #[error(
        "{id}: shard {shard} declares a {declared}-byte safetensors header, above the {HEADER_CAP}-byte cap; the file is corrupt or not a safetensors file"
    )]
    HeaderTooLarge {
        id: String,
        shard: String,
        declared: u64,
    },
    #[error(
        "the Hugging Face cache has no place: neither HF_HUB_CACHE, HF_HOME nor HOME is set; set HF_HOME"
    )]
    NoCache,
    #[error(
        "cannot write the Hugging Face cache at {path}: {reason}; check its permissions, or set HF_HOME"
    )]
    Cache {
        path: PathBuf,
        reason: std::io::Error,
    },
}

/// The Hub's settings, from the environment huggingface_hub reads.
#[derive(Clone, Debug)]
struct Settings {
    cache: PathBuf,
    endpoint: String,
    token: Option<String>,
    offline: bool,
    timeout: Duration,
    tries: u32,
}

/// huggingface_hub's default for `HF_HUB_DOWNLOAD_TIMEOUT`.
const DEFAULT_TIMEOUT_S: u64 = 10;
/// Tries of each request (a dropped connection, a 5xx or a timeout is tried again).
const TRIES: u32 = 3;
/// Shard headers read at once.
const PARALLEL: usize = 8;

impl Settings {
    fn from_env() -> Result<Settings, HubError> {
        let var = |name| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let cache = hub_cache::hub_dir().ok_or(HubError::NoCache)?;
        let token = var("HF_TOKEN").or_else(|| {
            let path = var("HF_TOKEN_PATH")
                .map(PathBuf::from)
                .or_else(|| hub_cache::home_dir().map(|h| h.join("token")))?;
            let text = super::files::read_capped(&path, 64 * 1024, "token file").ok()?;
            let token = String::from_utf8(text).ok()?.trim().to_string();
            (!token.is_empty()).then_some(token)
        });
        let truthy = |name| {
            var(name).is_some_and(|v| {
                ["1", "true", "yes", "on"].contains(&v.trim().to_ascii_lowercase().as_str())
            })
        };
        let seconds = var("HF_HUB_DOWNLOAD_TIMEOUT")
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .map_or(Duration::from_secs(DEFAULT_TIMEOUT_S), |s| {
                Duration::from_secs_f64(s.min(3600.0))
            });
        Ok(Settings {
            cache,
            endpoint: var("HF_ENDPOINT")
                .unwrap_or_else(|| "https://huggingface.co".into())
                .trim_end_matches('/')
                .to_string(),
            token,
            offline: truthy("HF_HUB_OFFLINE") || truthy("TRANSFORMERS_OFFLINE"),
            timeout: seconds,
            tries: TRIES,
        })
    }
}

/// `--model VALUE` as a local path: VALUE itself when it exists or is no Hub id, else the snapshot
/// folder of the Hub repository it names, fetched into (or found in) the Hugging Face cache.
pub fn resolve(value: &Path, needs: Needs) -> Result<PathBuf, HubError> {
    if std::fs::symlink_metadata(value).is_ok() {
        return Ok(value.to_path_buf());
    }
    let Some(id) = value.to_str().and_then(HubId::parse) else {
        return Ok(value.to_path_buf());
    };
    resolve_id(&id, needs)
}

/// The snapshot folder of `id`.
pub fn resolve_id(id: &HubId, needs: Needs) -> Result<PathBuf, HubError> {
    let s = Settings::from_env()?;
    if s.offline {
        return cached(&s, id);
    }
    match fetch(&s, id, needs) {
        // The Hub out of reach (not a refusal): the cache answers, as huggingface_hub does.
        Err(e @ HubError::Unreachable { .. }) => match cached(&s, id) {
            Ok(dir) => {
                crate::say!(
                    "note: {e}; using the copy in the Hugging Face cache, {}",
                    dir.display()
                );
                Ok(dir)
            }
            Err(_) => Err(e),
        },
        other => other,
    }
}

fn display(id: &HubId) -> String {
    match &id.revision {
        Some(rev) => format!("{}@{rev}", id.repo),
        None => id.repo.clone(),
    }
}

/// The commit the cache knows for `id`, without the network: its `refs/REVISION`, or the
/// revision itself when it is a commit.
fn cached_commit(s: &Settings, id: &HubId) -> Result<String, HubError> {
    let repo_dir = s.cache.join(repo_folder(&id.repo));
    let not_cached = |missing: String| HubError::NotCached {
        id: display(id),
        cache: s.cache.clone(),
        missing,
    };
    let rev = id.revision();
    if is_commit(rev) {
        return Ok(rev.to_string());
    }
    let path = repo_dir.join("refs").join(rev);
    let text =
        std::fs::read_to_string(&path).map_err(|_| not_cached(format!("no {}", path.display())))?;
    let commit = text.trim().to_string();
    if !is_commit(&commit) {
        return Err(not_cached(format!("{} names no commit", path.display())));
    }
    Ok(commit)
}

/// The snapshot the cache holds for `id`, without the network.
fn cached(s: &Settings, id: &HubId) -> Result<PathBuf, HubError> {
    let repo_dir = s.cache.join(repo_folder(&id.repo));
    let not_cached = |missing: String| HubError::NotCached {
        id: display(id),
        cache: s.cache.clone(),
        missing,
    };
    let commit = cached_commit(s, id)?;
    let dir = repo_dir.join("snapshots").join(&commit);
    if !dir.join("config.json").is_file() {
        return Err(not_cached(format!(
            "no {}",
            dir.join("config.json").display()
        )));
    }
    Ok(dir)
}

/// One failed attempt: tried again, or final.
enum Attempt {
    Again(String),
    Final(HubError),
}

/// What the Hub said about a refused request, in its own words (`X-Error-Message`).
fn refusal(s: &Settings, id: &HubId, status: u16, response: ureq::Response, file: bool) -> Attempt {
    let code = response.header("x-error-code").unwrap_or("").to_string();
    let message = response
        .header("x-error-message")
        .map(str::to_string)
        .or_else(|| {
            let mut body = String::new();
            response
                .into_reader()
                .take(4096)
                .read_to_string(&mut body)
                .ok()?;
            let json: serde_json::Value = serde_json::from_str(&body).ok()?;
            json.get("error")?.as_str().map(str::to_string)
        })
        .unwrap_or_default();
    let message = crate::output::terminal_safe(&message).into_owned();
    let code = crate::output::terminal_safe(&code).into_owned();
    let reason = match (code.as_str(), message.as_str()) {
        ("", "") => String::new(),
        ("", m) => format!(": the Hub says \"{m}\""),
        (c, "") => format!(", {c}"),
        (c, m) => format!(", {c}: the Hub says \"{m}\""),
    };
    let (id_text, endpoint) = (display(id), s.endpoint.clone());
    let e = match status {
        _ if code == "GatedRepo" => HubError::Gated {
            id: id_text,
            repo: id.repo.clone(),
            endpoint,
            status,
            reason,
        },
        401 | 403 if code != "RepoNotFound" || s.token.is_none() => HubError::Refused {
            id: id_text,
            endpoint,
            status,
            reason,
            fix: if s.token.is_some() {
                "The token in HF_TOKEN (or the token file) has no access to it: check the id, or use a token that has"
            } else {
                "If it is yours or shared with you, set HF_TOKEN to a token with access (or `hf auth login`); else check the id"
            },
        },
        401 | 403 | 404 => HubError::NotFound {
            id: id_text,
            endpoint,
            what: match code.as_str() {
                "RevisionNotFound" => "revision",
                "EntryNotFound" => "file",
                _ if file => "file",
                _ => "repository",
            },
            status,
            reason,
        },
        429 | 500..=599 => return Attempt::Again(format!("the Hub answered {status}{reason}")),
        _ => HubError::Failed {
            id: id_text,
            what: "a request to the Hub".into(),
            reason: format!("the Hub answered {status}{reason}"),
        },
    };
    Attempt::Final(e)
}

/// A failed request as an attempt: a refusal is final, no answer is tried again.
fn of_failure(s: &Settings, id: &HubId, failure: Failure, file: bool) -> Attempt {
    match failure {
        Failure::Status(status, response) => refusal(s, id, status, *response, file),
        Failure::Transport(reason) => Attempt::Again(reason),
        Failure::Refused(problem) => Attempt::Final(bad_answer(s, id, problem)),
        Failure::Proxy(reason) => Attempt::Final(HubError::Failed {
            id: display(id),
            what: "choosing a proxy".into(),
            reason,
        }),
    }
}

fn bad_answer(s: &Settings, id: &HubId, problem: String) -> HubError {
    HubError::BadAnswer {
        id: display(id),
        endpoint: s.endpoint.clone(),
        problem,
    }
}

/// A value the server chose, as a message shows it: control characters escaped, at most 100.
fn shown(value: &str) -> String {
    let safe = crate::output::terminal_safe(value);
    match safe.char_indices().nth(100) {
        Some((at, _)) => format!("{}…", &safe[..at]),
        None => safe.into_owned(),
    }
}

/// Bytes of a small file (a config, an index, a tokenizer) read at most.
const FILE_CAP: u64 = 128 << 20;
/// Bytes of the repository's description (its commit and file list) read at most.
const INFO_CAP: u64 = 32 << 20;

/// The body of `response`, at most `cap` bytes (more is refused, as a corrupt answer).
fn body(
    s: &Settings,
    id: &HubId,
    response: ureq::Response,
    cap: u64,
    what: &str,
) -> Result<Vec<u8>, Attempt> {
    let mut bytes = Vec::new();
    response
        .into_reader()
        .take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Attempt::Again(e.to_string()))?;
    if bytes.len() as u64 > cap {
        return Err(Attempt::Final(bad_answer(
            s,
            id,
            format!("{what} is over {cap} bytes"),
        )));
    }
    Ok(bytes)
}

/// The repository's commit at the revision asked for, and its files (huggingface_hub's
/// `model_info`: `GET /api/models/ORG/NAME/revision/REV`).
fn repo_info(s: &Settings, id: &HubId, client: &Client) -> Result<(String, Vec<String>), Attempt> {
    #[derive(serde::Deserialize)]
    struct Info {
        sha: Option<String>,
        #[serde(default)]
        siblings: Vec<Sibling>,
    }
    #[derive(serde::Deserialize)]
    struct Sibling {
        rfilename: String,
    }
    let url = format!(
        "{}/api/models/{}/revision/{}",
        s.endpoint,
        id.repo,
        encode(id.revision())
    );
    let reply = client
        .get(&url, None)
        .map_err(|f| of_failure(s, id, f, false))?;
    let bytes = body(
        s,
        id,
        reply.response,
        INFO_CAP,
        "the repository's description",
    )?;
    let info: Info = serde_json::from_slice(&bytes).map_err(|e| {
        Attempt::Final(bad_answer(
            s,
            id,
            format!("the repository's description is not its JSON: {e}"),
        ))
    })?;
    let sha = info.sha.unwrap_or_default();
    if !is_commit(&sha) {
        return Err(Attempt::Final(bad_answer(
            s,
            id,
            format!("the commit `{}` is not 40 hexadecimal digits", shown(&sha)),
        )));
    }
    Ok((
        sha,
        info.siblings.into_iter().map(|f| f.rfilename).collect(),
    ))
}

/// A revision as one segment of a URL path (`refs/pr/1` → `refs%2Fpr%2F1`, as huggingface_hub
/// quotes it).
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// One small file of the repository at `commit`, into the cache; its commit and ETag are checked
/// before a byte is written. Returns the bytes received.
fn download(
    s: &Settings,
    id: &HubId,
    client: &Client,
    commit: &str,
    file: &str,
    repo_dir: &Path,
) -> Result<u64, Attempt> {
    let url = format!("{}/{}/resolve/{commit}/{file}", s.endpoint, id.repo);
    let reply = client
        .get(&url, None)
        .map_err(|f| of_failure(s, id, f, true))?;
    let refuse = |problem: String| Attempt::Final(bad_answer(s, id, problem));
    match reply.commit.as_deref() {
        Some(c) if c == commit => {}
        Some(c) if is_commit(c) => {
            return Err(refuse(format!(
                "{file} came from commit {c}, not the commit {commit} asked for"
            )));
        }
        Some(c) => {
            return Err(refuse(format!(
                "the X-Repo-Commit `{}` of {file} is not 40 hexadecimal digits",
                shown(c)
            )));
        }
        None => return Err(refuse(format!("{file} came with no X-Repo-Commit"))),
    }
    let etag = reply.etag.as_deref().unwrap_or_default();
    let Some(blob) = hub_cache::blob_name(etag) else {
        return Err(refuse(format!(
            "the ETag `{}` of {file} is not a git or LFS hash (40 or 64 lowercase hexadecimal digits), the name huggingface_hub gives a blob",
            shown(etag)
        )));
    };
    let bytes = body(s, id, reply.response, FILE_CAP, file)?;
    hub_cache::store_file(repo_dir, commit, file, &blob, &bytes).map_err(|reason| {
        Attempt::Final(HubError::Cache {
            path: repo_dir.to_path_buf(),
            reason,
        })
    })?;
    Ok(bytes.len() as u64)
}

/// The repository's commit and files, its small files in the cache, its shards' headers in the
/// tool's cache.
fn fetch(s: &Settings, id: &HubId, needs: Needs) -> Result<PathBuf, HubError> {
    let client = Client::new(&s.endpoint, s.token.clone(), s.timeout).map_err(|reason| {
        HubError::Failed {
            id: display(id),
            what: format!("reading HF_ENDPOINT `{}`", shown(&s.endpoint)),
            reason,
        }
    })?;
    let (commit, siblings) = tried(s, id, "reading the repository's file list", || {
        repo_info(s, id, &client)
    })?;
    let files: BTreeSet<&str> = siblings.iter().map(String::as_str).collect();
    if !files.contains("config.json") {
        return Err(HubError::Failed {
            id: display(id),
            what: "finding config.json".into(),
            reason: format!(
                "the repository at commit {commit} has no config.json at its root; it is not a transformers model (give --parameters N --bits B instead)"
            ),
        });
    }
    let repo_dir = s.cache.join(repo_folder(&id.repo));
    let snapshot = repo_dir.join("snapshots").join(&commit);
    let wanted = CONFIGS
        .iter()
        .chain(if needs.tokenizer { &TOKENIZER[..] } else { &[] })
        .filter(|f| files.contains(**f));
    let mut fetched = 0usize;
    for file in wanted {
        if snapshot.join(file).is_file() {
            continue;
        }
        tried(s, id, &format!("downloading {file}"), || {
            download(s, id, &client, &commit, file, &repo_dir).map(|_| ())
        })?;
        fetched += 1;
    }
    if id.revision() != commit {
        hub_cache::write_ref(&repo_dir, id.revision(), &commit).map_err(|reason| {
            HubError::Cache {
                path: repo_dir.join("refs"),
                reason,
            }
        })?;
    }
    let shards = shard_names(&snapshot, &files).map_err(|p| bad_answer(s, id, p))?;
    let headers = fetch_headers(s, id, &client, &commit, &snapshot, &shards)?;
    if fetched + headers > 0 {
        crate::say!(
            "{}: commit {commit}, {fetched} file(s) and {headers} safetensors header(s) fetched from {} into {}",
            display(id),
            s.endpoint,
            snapshot.display()
        );
    }
    Ok(snapshot)
}

/// The shards transformers would load: those the index names, else the `*.safetensors` files at
/// the repository's root. Each must be a plain file name (it names a file of the cache).
fn shard_names(snapshot: &Path, files: &BTreeSet<&str>) -> Result<Vec<String>, String> {
    let index = snapshot.join("model.safetensors.index.json");
    let names: BTreeSet<String> = if index.is_file() {
        let text = super::files::read_capped(
            &index,
            super::safetensors::INDEX_CAP,
            "model.safetensors.index.json",
        )
        .map_err(|e| e.to_string())?;
        let json: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", index.display()))?;
        json.get("weight_map")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| format!("{} has no `weight_map` object", index.display()))?
            .values()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    } else {
        files
            .iter()
            .filter(|f| f.ends_with(".safetensors") && !f.contains('/'))
            .map(|f| f.to_string())
            .collect()
    };
    for name in &names {
        let plain = !name.contains(['/', '\\'])
            && name != ".."
            && !name.starts_with('.')
            && !name.chars().any(char::is_control);
        if !plain {
            return Err(format!(
                "the shard name `{}` is not a plain file name",
                crate::output::terminal_safe(name)
            ));
        }
    }
    Ok(names.into_iter().collect())
}

/// Each shard's first bytes by two range reads (the 8-byte length, then the header), a few
/// shards at once, into the tool's header cache; returns how many were fetched.
fn fetch_headers(
    s: &Settings,
    id: &HubId,
    client: &Client,
    commit: &str,
    snapshot: &Path,
    shards: &[String],
) -> Result<usize, HubError> {
    let dir = hub_cache::headers_dir(snapshot).ok_or(HubError::NoCache)?;
    let todo: Vec<&String> = shards
        .iter()
        .filter(|name| {
            !snapshot.join(name.as_str()).is_file()
                && hub_cache::cached_header(snapshot, name).is_none()
        })
        .collect();
    if todo.is_empty() {
        return Ok(0);
    }
    let next = AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL.min(todo.len()) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(name) = todo.get(i) else { break };
                    let url = format!("{}/{}/resolve/{commit}/{name}", s.endpoint, id.repo);
                    let result = header_of(s, id, client, &url, name).and_then(|(len, head)| {
                        hub_cache::write_header(&dir, name, len, &head).map_err(|reason| {
                            HubError::Cache {
                                path: dir.clone(),
                                reason,
                            }
                        })
                    });
                    let failed = result.is_err();
                    results
                        .lock()
                        .expect("no thread panics holding it")
                        .push(result);
                    if failed {
                        break;
                    }
                }
            });
        }
    });
    let results = results.into_inner().expect("no thread panics holding it");
    let count = results.len();
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    Ok(count)
}

/// One shard's length and first bytes, by range reads with tries.
fn header_of(
    s: &Settings,
    id: &HubId,
    client: &Client,
    url: &str,
    name: &str,
) -> Result<(u64, Vec<u8>), HubError> {
    let what = format!("reading the header of {name}");
    let (first, len) = tried(s, id, &what, || range(s, id, client, url, 0, 8))?;
    if first.len() < 8 {
        // Shorter than a length: the parser says so, as for a local shard.
        return Ok((len, first));
    }
    let declared = u64::from_le_bytes(first.as_slice().try_into().expect("eight bytes"));
    if declared > HEADER_CAP {
        return Err(HubError::HeaderTooLarge {
            id: display(id),
            shard: name.to_string(),
            declared,
        });
    }
    let mut head = first;
    if declared > 0 && 8 + declared <= len {
        let (rest, _) = tried(s, id, &what, || range(s, id, client, url, 8, declared))?;
        head.extend_from_slice(&rest);
    }
    // A header longer than the file is reported by the parser, as for a local shard.
    Ok((len, head))
}

/// Tries `call` (bounded in time by the client's timeouts) up to `s.tries` times.
fn tried<T>(
    s: &Settings,
    id: &HubId,
    what: &str,
    call: impl Fn() -> Result<T, Attempt>,
) -> Result<T, HubError> {
    let mut last = String::new();
    for attempt in 0..s.tries {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(200 * 2u64.pow(attempt)));
        }
        match call() {
            Ok(v) => return Ok(v),
            Err(Attempt::Final(e)) => return Err(e),
            Err(Attempt::Again(reason)) => last = reason,
        }
    }
    Err(HubError::Unreachable {
        id: display(id),
        what: what.to_string(),
        tries: s.tries,
        seconds: s.timeout.as_secs_f64().ceil() as u64,
        reason: last,
    })
}

/// `count` bytes from `start`, and the file's whole length (from `Content-Range`). A server that
/// ignores the range (200) is refused before its body is read: it would send the whole shard.
fn range(
    s: &Settings,
    id: &HubId,
    client: &Client,
    url: &str,
    start: u64,
    count: u64,
) -> Result<(Vec<u8>, u64), Attempt> {
    let response = client
        .get(url, Some((start, count)))
        .map_err(|f| of_failure(s, id, f, true))?
        .response;
    let bad = |problem: String| Attempt::Final(bad_answer(s, id, problem));
    if response.status() != 206 {
        return Err(bad(format!(
            "{url} answered {} to a range request instead of 206 Partial Content",
            response.status()
        )));
    }
    let total = response
        .header("content-range")
        .and_then(|r| r.rsplit_once('/'))
        .and_then(|(_, total)| total.trim().parse::<u64>().ok())
        .ok_or_else(|| bad(format!("{url} sent no Content-Range with its length")))?;
    let mut body = Vec::with_capacity(count.min(HEADER_CAP) as usize);
    response
        .into_reader()
        .take(count + 1)
        .read_to_end(&mut body)
        .map_err(|e| Attempt::Again(e.to_string()))?;
    let expected = count.min(total.saturating_sub(start));
    if body.len() as u64 != expected {
        return Err(Attempt::Again(format!(
            "{url} sent {} bytes of the {expected} asked for",
            body.len()
        )));
    }
    Ok((body, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ids_and_refuses_paths() {
        let id = HubId::parse("meta-llama/Llama-3.1-8B@refs/pr/1").unwrap();
        assert_eq!(id.repo, "meta-llama/Llama-3.1-8B");
        assert_eq!(id.revision.as_deref(), Some("refs/pr/1"));
        assert_eq!(HubId::parse("Qwen/Qwen3-8B").unwrap().revision, None);
        for not_id in [
            "gpt2",
            "./a/b",
            "/abs/path",
            "a/b/c",
            "timm:resnet50",
            "a--b/c",
            "a/..",
            "../x",
            "a/b@",
            "a/b@../../etc",
            "a/b@x y",
            "-a/b",
        ] {
            assert_eq!(HubId::parse(not_id), None, "{not_id}");
        }
    }

    #[test]
    fn an_existing_path_wins() {
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("org");
        std::fs::create_dir_all(local.join("name")).unwrap();
        let value = local.join("name");
        assert_eq!(resolve(&value, Needs::default()).unwrap(), value);
    }
}

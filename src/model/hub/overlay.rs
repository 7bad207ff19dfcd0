//! Hub ids inside a predicted script (`from_pretrained("ORG/NAME")`, `snapshot_download`,
//! `hf_hub_download`), served by this client instead of huggingface_hub's, without their weights.
//!
//! The predicting worker asks for files over its answer pipe (`hub_query` events,
//! `python/iteragpu/predict/hub_files.py`); each answer names files in an **overlay**: a
//! Hugging Face cache of the worker's own (huggingface_hub's layout: `refs/`, `snapshots/COMMIT/`,
//! `.no_exist/`), in a temporary folder removed when the prediction ends, which the worker takes
//! as its `HF_HUB_CACHE`. In it:
//! * a small file (a config, a tokenizer, an index) is a link to the real file in the user's
//!   cache, fetched there first if it is not already (what a later real run reads anyway);
//! * a `*.safetensors` weight file is materialised from its header (two range reads, kept in the
//!   tool's header cache) at its true size with its data a hole (a sparse file): the worker's
//!   readers give its tensors back data-less. No weight byte crosses the network, and no
//!   hole-filled file is ever written where a real run could load it;
//! * a file the repository does not have is marked missing (`.no_exist/COMMIT/FILE`), as
//!   huggingface_hub marks it, so that optional files (`generation_config.json`) stay optional;
//! * a checkpoint without a header (`*.bin`, `*.pth`, …) larger than [`SMALL_CHECKPOINT`] is
//!   refused with the fix: its shapes cannot be read without downloading it whole.
//!
//! What was served (commit, files, bytes) is kept for the prediction file ([`HubServed`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::http::Client;
use super::{HubError, HubId, Settings, display, download, header_of, repo_info, tried};
use crate::model::hub_cache::{self, repo_folder, repo_path_ok};
use crate::model::safetensors::HEADER_CAP;

/// A checkpoint without a header at most this large is fetched whole (a tokenizer's
/// `tokenizer.model`, a small `training_args.bin`); above it, it is refused with the fix.
pub const SMALL_CHECKPOINT: u64 = 16 << 20;

/// Weight formats that carry no header to read shapes from.
const HEADERLESS: [&str; 12] = [
    ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx", ".pkl", ".pickle", ".npz",
    ".tflite",
];

/// The environment variable naming the overlay to the worker.
pub const OVERLAY_VARIABLE: &str = "ITERAGPU_HUB_OVERLAY";

/// A worker's question: files of one repository at one revision.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct HubQuery {
    pub id: u64,
    pub repo: String,
    #[serde(default)]
    pub revision: Option<String>,
    /// The files wanted, as paths inside the repository.
    #[serde(default)]
    pub files: Vec<String>,
    /// Also answer the repository's file list (`snapshot_download`'s patterns apply to it).
    #[serde(default)]
    pub list: bool,
    /// The cache the script named (`cache_dir=`); null for the user's default cache.
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// The overlay cache over it, named by the worker: `default` (its `HF_HUB_CACHE`) or
    /// `cache-` and 16 hexadecimal digits (a hash of the folder the script named).
    #[serde(default)]
    pub overlay: Option<String>,
    /// The script asked for the cache only (`local_files_only=True`, `HF_HUB_OFFLINE`).
    #[serde(default)]
    pub local_only: bool,
}

/// One Hub repository (at one revision) as a prediction served it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HubServed {
    /// `ORG/NAME`.
    pub repo: String,
    /// The revision the code asked for (`main` when it named none).
    pub revision: String,
    /// The commit it resolved to (40 hexadecimal digits); null when the Hub refused before one
    /// was known.
    pub commit: Option<String>,
    /// Small files read (configs, tokenizers, indexes), real, in the Hugging Face cache as
    /// huggingface_hub lays it out.
    pub files: Vec<String>,
    /// Weight files materialised from their safetensors headers at their true size, their data a
    /// hole, in the worker's own overlay (removed when the run ended; never in the user's cache).
    pub hole_filled: Vec<String>,
    /// The bytes those weight files stand for (none of them crossed the network).
    pub hole_filled_bytes: u64,
    /// Bytes received from the Hub for this repository (small files and headers).
    pub bytes_fetched: u64,
    /// Why a request was refused or failed (gated, missing, unreachable, a checkpoint without a
    /// header); null when every request was served.
    pub failure: Option<String>,
    /// Whether that failure was the network's (the Hub out of reach): the prediction then exits 4,
    /// as `--model ORG/NAME` does.
    #[serde(default)]
    pub network_failure: bool,
}

/// Why a query was refused, with the repository and revision it was for (when they were read).
type Refusal = (HubError, Option<(String, String)>);

/// A repository at a revision, as resolved once per prediction.
struct Resolved {
    commit: String,
    /// The repository's files (unknown offline).
    files: Option<BTreeSet<String>>,
}

/// The overlay of one prediction, and what it served.
pub struct Overlay {
    dir: tempfile::TempDir,
    client: Option<Client>,
    resolved: BTreeMap<(PathBuf, String, String), Resolved>,
    served: BTreeMap<(String, String), HubServed>,
}

impl Overlay {
    /// A new, empty overlay in the temporary folder.
    pub fn new() -> std::io::Result<Overlay> {
        let dir = tempfile::Builder::new()
            .prefix("iteragpu-hub-overlay-")
            .tempdir()?;
        Ok(Overlay {
            dir,
            client: None,
            resolved: BTreeMap::new(),
            served: BTreeMap::new(),
        })
    }

    /// The overlay's folder (given to the worker in [`OVERLAY_VARIABLE`]).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The overlay cache the worker named ([`HubQuery::overlay`]), inside the overlay's folder;
    /// `None` for any other name.
    fn cache_for(&self, name: Option<&str>) -> Option<PathBuf> {
        let name = name.unwrap_or("default");
        let hashed = name.strip_prefix("cache-").is_some_and(|h| {
            h.len() == 16
                && h.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
        (name == "default" || hashed).then(|| self.dir.path().join(name))
    }

    /// One note per repository served: its commit, what was read and what stood in for weights.
    pub fn notes(&self) -> Vec<String> {
        self.served
            .values()
            .filter(|h| h.commit.is_some())
            .map(|h| {
                format!(
                    "{}@{}: commit {}; {} small file(s) read from the Hugging Face cache (fetched there when missing), {} weight file(s) ({}) materialised from their safetensors headers in the worker's own overlay, their data a hole, removed when the prediction ended; {} received from the Hub, no weight byte",
                    h.repo,
                    h.revision,
                    h.commit.as_deref().unwrap_or("?"),
                    h.files.len(),
                    h.hole_filled.len(),
                    crate::units::Bytes(h.hole_filled_bytes).both(),
                    crate::units::Bytes(h.bytes_fetched).both(),
                )
            })
            .collect()
    }

    /// What each repository served, for the prediction file.
    pub fn served(&self) -> Vec<HubServed> {
        self.served.values().cloned().collect()
    }

    /// The answer to `query`, one JSON line for the worker's answer pipe:
    /// `{"id", "commit", "cache", "snapshot", "files": {FILE: PATH or null}, "listing"}`, or
    /// `{"id", "error": {"kind", "message"}}` (kinds: `network`, `refused`).
    pub fn answer(&mut self, query: &HubQuery) -> String {
        let value = match self.serve(query) {
            Ok(mut v) => {
                v["id"] = serde_json::json!(query.id);
                v
            }
            Err(refusal) => {
                let (e, repo_rev) = *refusal;
                let network = matches!(e, HubError::Unreachable { .. });
                let message = e.to_string();
                if let Some(key) = repo_rev {
                    let served = self.entry(&key.0, &key.1);
                    if served.failure.is_none() {
                        served.failure = Some(message.clone());
                        served.network_failure = network;
                    }
                }
                serde_json::json!({
                    "id": query.id,
                    "error": {"kind": if network { "network" } else { "refused" }, "message": message},
                })
            }
        };
        value.to_string()
    }

    fn entry(&mut self, repo: &str, revision: &str) -> &mut HubServed {
        self.served
            .entry((repo.to_string(), revision.to_string()))
            .or_insert_with(|| HubServed {
                repo: repo.to_string(),
                revision: revision.to_string(),
                ..HubServed::default()
            })
    }

    fn serve(&mut self, query: &HubQuery) -> Result<serde_json::Value, Box<Refusal>> {
        let text = match &query.revision {
            Some(rev) => format!("{}@{rev}", query.repo),
            None => query.repo.clone(),
        };
        let Some(id) = HubId::parse(&text) else {
            return Err(Box::new((
                HubError::Failed {
                    id: crate::output::terminal_safe(&text).into_owned(),
                    what: "reading the repository id".into(),
                    reason: "not an id of the Hub (ORG/NAME[@REVISION])".into(),
                },
                None,
            )));
        };
        let key = (id.repo.clone(), id.revision().to_string());
        let fail = |e: HubError| Box::new((e, Some(key.clone())));
        let mut s = Settings::from_env().map_err(fail)?;
        s.offline |= query.local_only;
        if let Some(dir) = &query.cache_dir {
            s.cache = dir.clone();
        }
        let Some(overlay_cache) = self.cache_for(query.overlay.as_deref()) else {
            return Err(fail(HubError::Failed {
                id: display(&id),
                what: "choosing the overlay's cache".into(),
                reason: format!(
                    "`{}` is not one of its names",
                    crate::output::terminal_safe(query.overlay.as_deref().unwrap_or(""))
                ),
            }));
        };
        let resolved = self.resolve(&s, &id).map_err(fail)?;
        let (commit, files) = (resolved.commit.clone(), resolved.files.clone());
        let overlay_repo = overlay_cache.join(repo_folder(&id.repo));
        if id.revision() != commit {
            hub_cache::write_ref(&overlay_repo, id.revision(), &commit).map_err(|reason| {
                fail(HubError::Cache {
                    path: overlay_repo.join("refs"),
                    reason,
                })
            })?;
        }
        self.entry(&key.0, &key.1).commit = Some(commit.clone());
        let mut answered = serde_json::Map::new();
        for file in &query.files {
            let path = self
                .serve_file(&s, &id, &commit, files.as_ref(), file, &overlay_repo)
                .map_err(fail)?;
            answered.insert(
                file.clone(),
                path.map_or(serde_json::Value::Null, |p| {
                    serde_json::json!(p.display().to_string())
                }),
            );
        }
        let listing = match (&files, query.list) {
            (Some(f), true) => serde_json::json!(f.iter().collect::<Vec<_>>()),
            (None, true) => {
                // Offline: the snapshot's files in the user's cache are the listing.
                let snapshot = s
                    .cache
                    .join(repo_folder(&id.repo))
                    .join("snapshots")
                    .join(&commit);
                serde_json::json!(list_files(&snapshot))
            }
            _ => serde_json::Value::Null,
        };
        Ok(serde_json::json!({
            "commit": commit,
            "cache": overlay_cache.display().to_string(),
            "snapshot": overlay_repo.join("snapshots").join(&commit).display().to_string(),
            "files": answered,
            "listing": listing,
        }))
    }

    /// The commit (and files) of `id`, asked once per prediction.
    fn resolve(&mut self, s: &Settings, id: &HubId) -> Result<&Resolved, HubError> {
        let key = (s.cache.clone(), id.repo.clone(), id.revision().to_string());
        if !self.resolved.contains_key(&key) {
            let resolved = if s.offline {
                resolved_from_cache(s, id)?
            } else {
                let client = self.client(s, id)?;
                match tried(s, id, "reading the repository's file list", || {
                    repo_info(s, id, client)
                }) {
                    Ok((commit, files)) => Resolved {
                        commit,
                        files: Some(files.into_iter().collect()),
                    },
                    // Out of reach: the cache answers, as huggingface_hub's does.
                    Err(e @ HubError::Unreachable { .. }) => {
                        resolved_from_cache(s, id).map_err(|_| e)?
                    }
                    Err(e) => return Err(e),
                }
            };
            self.resolved.insert(key.clone(), resolved);
        }
        Ok(&self.resolved[&key])
    }

    fn client(&mut self, s: &Settings, id: &HubId) -> Result<&Client, HubError> {
        if self.client.is_none() {
            let client =
                Client::new(&s.endpoint, s.token.clone(), s.timeout).map_err(|reason| {
                    HubError::Failed {
                        id: display(id),
                        what: format!("reading HF_ENDPOINT `{}`", super::shown(&s.endpoint)),
                        reason,
                    }
                })?;
            self.client = Some(client);
        }
        Ok(self.client.as_ref().expect("set above"))
    }

    /// One file into the overlay (see the module's doc); `None` when the repository has none.
    fn serve_file(
        &mut self,
        s: &Settings,
        id: &HubId,
        commit: &str,
        files: Option<&BTreeSet<String>>,
        file: &str,
        overlay_repo: &Path,
    ) -> Result<Option<PathBuf>, HubError> {
        let cache_error = |path: &Path| {
            let path = path.to_path_buf();
            move |reason| HubError::Cache { path, reason }
        };
        if !repo_path_ok(file) {
            return Err(HubError::Failed {
                id: display(id),
                what: format!("reading `{}`", crate::output::terminal_safe(file)),
                reason: "not a path inside a repository".into(),
            });
        }
        let target = overlay_repo.join("snapshots").join(commit).join(file);
        if std::fs::symlink_metadata(&target).is_ok() {
            return Ok(Some(target));
        }
        let user_repo = s.cache.join(repo_folder(&id.repo));
        let user_snapshot = user_repo.join("snapshots").join(commit);
        let local = user_snapshot.join(file);
        if files.is_some_and(|f| !f.contains(file)) && !local.is_file() {
            let marker = overlay_repo.join(".no_exist").join(commit).join(file);
            if let Some(parent) = marker.parent() {
                std::fs::create_dir_all(parent).map_err(cache_error(parent))?;
            }
            std::fs::write(&marker, b"").map_err(cache_error(&marker))?;
            return Ok(None);
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(cache_error(parent))?;
        }
        let key = (id.repo.clone(), id.revision().to_string());
        if file.ends_with(".safetensors") {
            let (len, head, fetched) = self.header(s, id, commit, file, &user_snapshot)?;
            write_hole_filled(&target, len, &head).map_err(cache_error(&target))?;
            let served = self.entry(&key.0, &key.1);
            served.hole_filled.push(file.to_string());
            served.hole_filled_bytes += len;
            served.bytes_fetched += fetched;
            return Ok(Some(target));
        }
        let mut fetched = 0;
        if !local.is_file() {
            if s.offline {
                return Err(HubError::NotCached {
                    id: display(id),
                    cache: s.cache.clone(),
                    missing: format!("no {}", local.display()),
                });
            }
            let client = self.client(s, id)?;
            if HEADERLESS.iter().any(|ext| file.ends_with(ext)) {
                let url = format!("{}/{}/resolve/{commit}/{file}", s.endpoint, id.repo);
                let what = format!("reading the size of {file}");
                let (_, len) = tried(s, id, &what, || super::range(s, id, client, &url, 0, 1))?;
                if len > SMALL_CHECKPOINT {
                    return Err(HubError::Failed {
                        id: display(id),
                        what: format!("reading {file}"),
                        reason: format!(
                            "it is a checkpoint without a header ({}), whose tensors' shapes cannot be read without downloading it whole; give `--model {}` at a revision with safetensors weights, or download it and give the local copy's path",
                            crate::units::Bytes(len).both(),
                            id.repo
                        ),
                    });
                }
            }
            fetched = tried(s, id, &format!("downloading {file}"), || {
                download(s, id, client, commit, file, &user_repo)
            })?;
            if id.revision() != commit {
                hub_cache::write_ref(&user_repo, id.revision(), commit)
                    .map_err(cache_error(&user_repo))?;
            }
        }
        let real = std::fs::canonicalize(&local).map_err(cache_error(&local))?;
        #[cfg(unix)]
        std::os::unix::fs::symlink(&real, &target).map_err(cache_error(&target))?;
        #[cfg(not(unix))]
        std::fs::copy(&real, &target).map_err(cache_error(&target))?;
        let served = self.entry(&key.0, &key.1);
        served.files.push(file.to_string());
        served.bytes_fetched += fetched;
        Ok(Some(target))
    }

    /// A shard's length and first bytes (its 8-byte length and header): from the user's copy,
    /// else the tool's header cache, else two range reads (kept in the header cache); with the
    /// bytes received.
    fn header(
        &mut self,
        s: &Settings,
        id: &HubId,
        commit: &str,
        file: &str,
        user_snapshot: &Path,
    ) -> Result<(u64, Vec<u8>, u64), HubError> {
        let local = user_snapshot.join(file);
        if local.is_file() {
            let read = || -> std::io::Result<(u64, Vec<u8>)> {
                let mut f = std::fs::File::open(&local)?;
                let len = f.metadata()?.len();
                let mut first = [0u8; 8];
                f.read_exact(&mut first)?;
                let declared = u64::from_le_bytes(first).min(HEADER_CAP);
                let mut head = first.to_vec();
                f.take(declared).read_to_end(&mut head)?;
                Ok((len, head))
            };
            return read()
                .map(|(len, head)| (len, head, 0))
                .map_err(|reason| HubError::Cache {
                    path: local.clone(),
                    reason,
                });
        }
        if let Some(path) = hub_cache::cached_header(user_snapshot, file) {
            let (len, head) =
                hub_cache::read_header(&path, HEADER_CAP + 16).map_err(|e| HubError::Failed {
                    id: display(id),
                    what: format!("reading the cached header {}", path.display()),
                    reason: e.to_string(),
                })?;
            return Ok((len, head, 0));
        }
        if s.offline {
            return Err(HubError::NotCached {
                id: display(id),
                cache: s.cache.clone(),
                missing: format!("no header of {file} (nor the file)"),
            });
        }
        let client = self.client(s, id)?;
        let url = format!("{}/{}/resolve/{commit}/{file}", s.endpoint, id.repo);
        let (len, head) = header_of(s, id, client, &url, file)?;
        if let Some(dir) = hub_cache::headers_dir(user_snapshot) {
            hub_cache::write_header(&dir, file, len, &head)
                .map_err(|reason| HubError::Cache { path: dir, reason })?;
        }
        let fetched = head.len() as u64;
        Ok((len, head, fetched))
    }
}

/// `id` resolved from the user's cache alone (offline): its commit, its files unknown.
fn resolved_from_cache(s: &Settings, id: &HubId) -> Result<Resolved, HubError> {
    Ok(Resolved {
        commit: super::cached_commit(s, id)?,
        files: None,
    })
}

/// The files under `snapshot`, as repository paths.
fn list_files(snapshot: &Path) -> Vec<String> {
    walkdir_files(snapshot, snapshot)
}

fn walkdir_files(root: &Path, dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walkdir_files(root, &path));
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
    out.sort();
    out
}

/// `head` (the shard's length field and header), then a hole up to `len` bytes: the shard's true
/// size, no data (a sparse file, as `predict` writes checkpoints of data-less tensors).
fn write_hole_filled(path: &Path, len: u64, head: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(head)?;
    f.set_len(len.max(head.len() as u64))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_names_only_caches_inside_the_overlay() {
        let overlay = Overlay::new().unwrap();
        let root = overlay.path().to_path_buf();
        assert_eq!(overlay.cache_for(None), Some(root.join("default")));
        assert_eq!(
            overlay.cache_for(Some("cache-0123456789abcdef")),
            Some(root.join("cache-0123456789abcdef"))
        );
        for bad in [
            "../x",
            "cache-../../etc",
            "cache-0123",
            "/tmp",
            "cache-0123456789ABCDEF",
        ] {
            assert_eq!(overlay.cache_for(Some(bad)), None, "{bad}");
        }
    }

    #[test]
    fn a_hole_filled_shard_has_its_true_size_and_no_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let head = [
            16u8, 0, 0, 0, 0, 0, 0, 0, b'{', b'}', b' ', b' ', b' ', b' ', b' ', b' ', b' ', b' ',
            b' ', b' ', b' ', b' ', b' ', b' ',
        ];
        write_hole_filled(&path, 1 << 30, &head).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), 1 << 30);
        use std::os::unix::fs::MetadataExt;
        assert!(meta.blocks() * 512 < 1 << 20, "{} blocks", meta.blocks());
        assert_eq!(&std::fs::read(&path).unwrap()[..head.len()], &head);
    }

    #[test]
    fn an_overlay_is_removed_with_its_prediction() {
        let overlay = Overlay::new().unwrap();
        let root = overlay.path().to_path_buf();
        std::fs::create_dir_all(root.join("default/models--a--b/snapshots")).unwrap();
        drop(overlay);
        assert!(!root.exists());
    }
}

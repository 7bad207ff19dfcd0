//! The Hugging Face cache on disk, in huggingface_hub's own layout (`HF_HUB_CACHE`, else
//! `HF_HOME/hub`: `models--ORG--NAME/{refs,blobs,snapshots/COMMIT}`), so that a model fetched by
//! its Hub id is the model transformers finds, and one the user already has is not fetched again;
//! and the tool's own cache of safetensors headers beside it (`HF_HOME/iteragpu/safetensors-headers`),
//! since huggingface_hub has no place for part of a file. Everything here follows from a
//! snapshot's path alone: whoever reads the folder finds its headers and its origin.

use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::files::{FileError, read_capped, regular_file};

/// Where a model folder came from on the Hub: written with every estimate, prediction and result
/// made from it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct HubOrigin {
    /// `ORG/NAME`.
    pub repo: String,
    /// The commit the files are from (40 hexadecimal digits).
    pub commit: String,
}

/// huggingface_hub's hub cache: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
/// `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`.
pub fn hub_dir() -> Option<PathBuf> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("HF_HUB_CACHE").or_else(|| var("HUGGINGFACE_HUB_CACHE")) {
        return Some(PathBuf::from(dir));
    }
    Some(home_dir()?.join("hub"))
}

/// huggingface_hub's `HF_HOME` (where its token file is).
pub fn home_dir() -> Option<PathBuf> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(home) = var("HF_HOME") {
        return Some(PathBuf::from(home));
    }
    let cache = var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(cache.join("huggingface"))
}

/// `models--ORG--NAME`, huggingface_hub's folder for a model repository.
pub fn repo_folder(repo: &str) -> String {
    format!("models--{}", repo.replace('/', "--"))
}

/// Whether `text` is a full commit hash (what a snapshot folder is named by).
pub fn is_commit(text: &str) -> bool {
    text.len() == 40
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The blob name an ETag gives, as huggingface_hub names blobs: the value without `W/` and its
/// quotes, which must be a git blob's sha1 (40 lowercase hexadecimal digits) or an LFS file's
/// sha256 (64); `None` for anything else (it would name a path chosen by the server).
pub fn blob_name(etag: &str) -> Option<String> {
    let name = etag.trim();
    let name = name.strip_prefix("W/").unwrap_or(name).trim_matches('"');
    let hex = name
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (hex && (name.len() == 40 || name.len() == 64)).then(|| name.to_string())
}

/// Whether `file` is a path inside a repository that may name a file of the cache: names
/// separated by `/` (a subfolder, as diffusers' `unet/config.json`), none empty, `.`, `..` or
/// hidden, without `\\` or control characters, at most 512 bytes.
pub fn repo_path_ok(file: &str) -> bool {
    !file.is_empty()
        && file.len() <= 512
        && !file.contains('\\')
        && !file.chars().any(char::is_control)
        && file
            .split('/')
            .all(|c| !c.is_empty() && !c.starts_with('.'))
}

/// Keeps `bytes` as huggingface_hub does: the blob `blobs/BLOB` of `repo_dir`, and
/// `snapshots/COMMIT/FILE` a relative link to it, each written whole or not at all (a temporary
/// name in the same folder, renamed into place). `blob` and `commit` must be checked names
/// ([`blob_name`], [`is_commit`]) and `file` a path [`repo_path_ok`] accepts; anything else is
/// refused here too.
pub fn store_file(
    repo_dir: &Path,
    commit: &str,
    file: &str,
    blob: &str,
    bytes: &[u8],
) -> std::io::Result<PathBuf> {
    if blob_name(blob).as_deref() != Some(blob) || !is_commit(commit) || !repo_path_ok(file) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("refused cache names: blob {blob:?}, commit {commit:?}, file {file:?}"),
        ));
    }
    let blobs = repo_dir.join("blobs");
    std::fs::create_dir_all(&blobs)?;
    let blob_path = blobs.join(blob);
    if !blob_path.is_file() {
        let mut tmp = temporary(&blobs)?;
        tmp.write_all(bytes)?;
        tmp.as_file().sync_all()?;
        tmp.persist(&blob_path).map_err(|e| e.error)?;
    }
    let path = repo_dir.join("snapshots").join(commit).join(file);
    let folder = path.parent().unwrap_or(repo_dir);
    std::fs::create_dir_all(folder)?;
    let base = file.rsplit('/').next().unwrap_or(file);
    // `../../blobs` from `snapshots/COMMIT/`, one `..` more for each subfolder.
    let up = "../".repeat(file.matches('/').count());
    let tmp_name = folder.join(format!(
        ".{base}.{}.{}.tmp",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    #[cfg(unix)]
    std::os::unix::fs::symlink(Path::new(&format!("{up}../../blobs")).join(blob), &tmp_name)?;
    #[cfg(not(unix))]
    std::fs::copy(&blob_path, &tmp_name)?;
    if let Err(e) = std::fs::rename(&tmp_name, &path) {
        let _ = std::fs::remove_file(&tmp_name);
        return Err(e);
    }
    Ok(path)
}

/// A temporary file in `dir`, to be renamed into place, readable as any file the user writes
/// (0666 less the umask, as huggingface_hub leaves its blobs; tempfile's own default is 0600,
/// which would hide a shared cache's files from the others who share it).
fn temporary(dir: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(".incomplete-");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    builder.tempfile_in(dir)
}

/// Records that `revision` (a branch or tag, checked by the caller to stay inside `refs/`) is
/// `commit`: `refs/REVISION` holds the hash, replaced whole.
pub fn write_ref(repo_dir: &Path, revision: &str, commit: &str) -> std::io::Result<()> {
    let path = repo_dir.join("refs").join(revision);
    let dir = path.parent().unwrap_or(repo_dir);
    std::fs::create_dir_all(dir)?;
    let mut tmp = temporary(dir)?;
    tmp.write_all(commit.as_bytes())?;
    tmp.persist(&path).map_err(|e| e.error)?;
    Ok(())
}

/// The repository and commit of a snapshot folder `…/models--ORG--NAME/snapshots/COMMIT` (or a
/// file in it), else `None`.
pub fn origin(path: &Path) -> Option<HubOrigin> {
    let (_, repo, commit) = parts(path).or_else(|| parts(path.parent()?))?;
    Some(HubOrigin { repo, commit })
}

/// (hub cache, `ORG/NAME`, commit) of a snapshot folder.
fn parts(dir: &Path) -> Option<(PathBuf, String, String)> {
    let commit = dir.file_name()?.to_str()?;
    let snapshots = dir.parent()?;
    let repo_dir = snapshots.parent()?;
    let folder = repo_dir.file_name()?.to_str()?;
    let name = folder.strip_prefix("models--")?;
    let (org, model) = name.split_once("--")?;
    let ok = snapshots.file_name()? == "snapshots"
        && is_commit(commit)
        && !org.is_empty()
        && !model.is_empty()
        && !model.contains("--");
    ok.then(|| {
        (
            repo_dir.parent().unwrap_or(Path::new("")).to_path_buf(),
            format!("{org}/{model}"),
            commit.to_string(),
        )
    })
}

/// The tool's header cache for a hub cache: beside it, in `iteragpu/safetensors-headers`.
pub fn headers_root(hub: &Path) -> PathBuf {
    hub.parent()
        .unwrap_or(hub)
        .join("iteragpu")
        .join("safetensors-headers")
}

/// Where the headers of a snapshot folder's shards are kept (`None`: not a snapshot folder).
pub fn headers_dir(snapshot: &Path) -> Option<PathBuf> {
    let (hub, repo, commit) = parts(snapshot)?;
    Some(headers_root(&hub).join(repo_folder(&repo)).join(commit))
}

const SUFFIX: &str = ".header";

/// The cached header of shard `name` of a snapshot folder, when there is one.
pub fn cached_header(snapshot: &Path, name: &str) -> Option<PathBuf> {
    let path = headers_dir(snapshot)?.join(format!("{name}{SUFFIX}"));
    regular_file(&path).is_ok().then_some(path)
}

/// The shards of a snapshot folder whose header is cached, by name, sorted.
pub fn cached_shards(snapshot: &Path) -> Vec<String> {
    let Some(dir) = headers_dir(snapshot) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(SUFFIX)?.to_string())
        })
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    names.sort();
    names
}

/// A cached header: the shard's length, then its first bytes (8-byte length and JSON header).
/// The file holds the length as 8 little-endian bytes, then those bytes as the shard has them;
/// one over `cap` bytes is refused unread.
pub fn read_header(path: &Path, cap: u64) -> Result<(u64, Vec<u8>), FileError> {
    let mut bytes = read_capped(path, cap, "cached safetensors header")?;
    if bytes.len() < 8 {
        return Ok((0, Vec::new()));
    }
    let rest = bytes.split_off(8);
    let len = u64::from_le_bytes(bytes.try_into().expect("eight bytes"));
    Ok((len, rest))
}

/// Keeps a shard's first bytes (`head`: the 8-byte length and the header) and its length, written
/// whole or not at all (a temporary file renamed into place).
pub fn write_header(dir: &Path, name: &str, file_len: u64, head: &[u8]) -> std::io::Result<()> {
    let path = dir.join(format!("{name}{SUFFIX}"));
    let folder = path.parent().unwrap_or(dir);
    std::fs::create_dir_all(folder)?;
    let mut tmp = temporary(folder)?;
    tmp.write_all(&file_len.to_le_bytes())?;
    tmp.write_all(head)?;
    tmp.persist(&path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn a_snapshot_names_its_origin_and_headers() {
        let snap = PathBuf::from(format!(
            "/c/hub/models--meta-llama--Llama-3.1-8B/snapshots/{COMMIT}"
        ));
        let origin = origin(&snap).unwrap();
        assert_eq!(origin.repo, "meta-llama/Llama-3.1-8B");
        assert_eq!(origin.commit, COMMIT);
        assert_eq!(super::origin(&snap.join("config.json")), Some(origin));
        assert_eq!(
            headers_dir(&snap).unwrap(),
            PathBuf::from(format!(
                "/c/iteragpu/safetensors-headers/models--meta-llama--Llama-3.1-8B/{COMMIT}"
            ))
        );
        for other in ["/c/models/llama", "/c/hub/models--x--y/snapshots/main"] {
            assert_eq!(super::origin(Path::new(other)), None, "{other}");
        }
    }

    #[test]
    fn a_header_is_kept_with_its_length() {
        let dir = tempfile::tempdir().unwrap();
        write_header(dir.path(), "a.safetensors", 1234, b"headbytes").unwrap();
        let (len, head) = read_header(&dir.path().join("a.safetensors.header"), 100).unwrap();
        assert_eq!((len, head.as_slice()), (1234, &b"headbytes"[..]));
    }

    #[test]
    fn only_hashes_name_blobs() {
        let sha1 = "0123456789abcdef0123456789abcdef01234567";
        let sha256 = format!("{sha1}{}", &sha1[..24]);
        assert_eq!(blob_name(&format!("\"{sha1}\"")).as_deref(), Some(sha1));
        assert_eq!(blob_name(&format!("W/\"{sha256}\"")), Some(sha256));
        for bad in [
            "\"../../../../tmp/x\"",
            "",
            "\"\"",
            &sha1.to_uppercase(),
            &sha1[..39],
            &format!("{sha1}/x"),
        ] {
            assert_eq!(blob_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_file_is_a_blob_and_a_relative_link() {
        let dir = tempfile::tempdir().unwrap();
        let blob = "0123456789abcdef0123456789abcdef01234567";
        let path = store_file(dir.path(), COMMIT, "config.json", blob, b"{}").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
        #[cfg(unix)]
        assert_eq!(
            std::fs::read_link(&path).unwrap(),
            Path::new("../../blobs").join(blob)
        );
        assert!(store_file(dir.path(), COMMIT, "config.json", "../x", b"{}").is_err());
        assert!(store_file(dir.path(), "../x", "config.json", blob, b"{}").is_err());
        for bad in [
            "../config.json",
            "unet/../../x",
            "/etc/x",
            "a//b",
            ".hidden",
            "a\\b",
            "",
        ] {
            assert!(
                store_file(dir.path(), COMMIT, bad, blob, b"{}").is_err(),
                "{bad}"
            );
        }
        // A subfolder's file links to the same blob, one `..` further up.
        let sub = store_file(dir.path(), COMMIT, "unet/config.json", blob, b"{}").unwrap();
        assert_eq!(
            std::fs::read_link(&sub).unwrap(),
            Path::new("../../../blobs").join(blob)
        );
        assert_eq!(std::fs::read(&sub).unwrap(), b"{}");
        write_ref(dir.path(), "refs/pr/1", COMMIT).unwrap();
        let refs = dir.path().join("refs/refs/pr/1");
        assert_eq!(std::fs::read_to_string(refs).unwrap(), COMMIT);
        let mut names: Vec<_> = std::fs::read_dir(dir.path().join("blobs"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, [blob], "no temporary file is left");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            // 0666 less the umask (Linux says it in /proc), as any file the user writes.
            let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
            let umask = status
                .lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|m| u32::from_str_radix(m.trim(), 8).ok());
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            if let Some(umask) = umask {
                assert_eq!(mode, 0o666 & !umask, "{mode:o}");
            }
        }
    }
}

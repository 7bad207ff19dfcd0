//! The stored format of a checkpoint, read from safetensors headers only.
//!
//! A safetensors file is an 8-byte little-endian header length N, N bytes of JSON describing each
//! tensor (dtype, shape, byte offsets), then the raw data. We read the 8 bytes and the header —
//! never tensor data — cap N before allocating, validate the header with the `safetensors` crate
//! (offsets contiguous, sizes consistent with dtype × shape), and check from the file's metadata
//! that the file really is as long as the header says.

use serde::Serialize;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::files::{FileError, read_capped, regular_file, resolve_inside};
use super::hub_cache;

/// Largest header accepted: the limit of the reference implementation (`safetensors` crate).
pub const HEADER_CAP: u64 = 100_000_000;

/// Largest `model.safetensors.index.json` read: DeepSeek-V3's, with 91,000 tensors in 163
/// shards, is under 10 MB.
pub const INDEX_CAP: u64 = 100_000_000;

/// Why a safetensors file or its index was refused.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    // `reason` rather than `source`: the reason is in the message, and a `source` would be
    // printed a second time by the top-level error chain.
    #[error("cannot read {path}: {reason}")]
    Io {
        path: PathBuf,
        reason: std::io::Error,
    },
    #[error(transparent)]
    File(#[from] FileError),
    #[error(
        "the shards in {dir} describe more than 18,446,744,073,709,551,615 bytes together; they are not a real checkpoint"
    )]
    TooLarge { dir: PathBuf },
    #[error(
        "{path} is {len} bytes long, too short for a safetensors file (at least 8 bytes of header length); the download is probably incomplete"
    )]
    TooShort { path: PathBuf, len: u64 },
    #[error(
        "{path} declares a {declared}-byte header, above the {HEADER_CAP}-byte cap; the file is corrupt or not a safetensors file"
    )]
    HeaderTooLarge { path: PathBuf, declared: u64 },
    #[error(
        "{path} is truncated: its header says it needs {needed} bytes but the file has {actual}; download it again"
    )]
    Truncated {
        path: PathBuf,
        needed: u64,
        actual: u64,
    },
    #[error("{path} has an invalid safetensors header: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error(
        "{index} lists shard `{shard}`, which is not in {dir}; download the missing shard or remove the index"
    )]
    MissingShard {
        index: PathBuf,
        shard: String,
        dir: PathBuf,
    },
}

/// Bytes and elements stored in one dtype.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DtypeTotal {
    pub bytes: u64,
    pub elements: u64,
    pub tensors: u64,
}

/// One safetensors file, as its header describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Shard {
    pub file: String,
    /// Length of the file on disk.
    pub file_bytes: u64,
    /// Length of the JSON header.
    pub header_bytes: u64,
    /// Bytes of tensor data the header describes.
    pub data_bytes: u64,
    pub tensors: u64,
    /// Stored bytes per safetensors dtype (`BF16`, `F32`, `F8_E4M3`, `I32`, …).
    pub by_dtype: BTreeMap<String, DtypeTotal>,
}

/// Every shard of a checkpoint folder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Stored {
    pub shards: Vec<Shard>,
    pub by_dtype: BTreeMap<String, DtypeTotal>,
    pub data_bytes: u64,
    pub elements: u64,
    pub tensors: u64,
    /// `metadata.total_size` of `model.safetensors.index.json`, when present.
    pub index_total_size: Option<u64>,
    /// Bytes this scan read from disk (headers only).
    pub bytes_read: u64,
    /// `*.safetensors` files of the folder that the index does not list (not counted, as
    /// transformers does not load them either).
    pub unlisted: Vec<String>,
}

/// Parses a header given the bytes that follow the 8-byte length; returns per-dtype totals and the
/// data length the header describes. Public so that the fuzz target exercises the same code.
pub fn parse_header(header: &[u8]) -> Result<(u64, u64, BTreeMap<String, DtypeTotal>), String> {
    let metadata: safetensors::tensor::Metadata =
        serde_json::from_slice(header).map_err(|e| e.to_string())?;
    let mut by_dtype: BTreeMap<String, DtypeTotal> = BTreeMap::new();
    let mut count = 0u64;
    // The crate has checked each shape and offset; sums of many tensors are checked here.
    let overflow = || "its tensors' sizes add up to more than 2^64".to_string();
    for info in metadata.tensors().values() {
        let elements = info
            .shape
            .iter()
            .try_fold(1u64, |n, d| n.checked_mul(*d as u64))
            .ok_or_else(overflow)?;
        let bytes = info.data_offsets.1.saturating_sub(info.data_offsets.0) as u64;
        let entry = by_dtype.entry(format!("{:?}", info.dtype)).or_default();
        entry.bytes = entry.bytes.checked_add(bytes).ok_or_else(overflow)?;
        entry.elements = entry.elements.checked_add(elements).ok_or_else(overflow)?;
        entry.tensors += 1;
        count += 1;
    }
    Ok((metadata.data_len() as u64, count, by_dtype))
}

/// Reads one shard's header from any reader whose total length is `file_len`.
pub fn scan_reader<R: Read>(
    path: &Path,
    mut reader: R,
    file_len: u64,
) -> Result<(Shard, u64), HeaderError> {
    let io = |reason| HeaderError::Io {
        path: path.to_path_buf(),
        reason,
    };
    if file_len < 8 {
        return Err(HeaderError::TooShort {
            path: path.to_path_buf(),
            len: file_len,
        });
    }
    let mut len_bytes = [0u8; 8];
    reader.read_exact(&mut len_bytes).map_err(io)?;
    let declared = u64::from_le_bytes(len_bytes);
    if declared > HEADER_CAP {
        return Err(HeaderError::HeaderTooLarge {
            path: path.to_path_buf(),
            declared,
        });
    }
    // `declared` is at most the cap: this sum cannot overflow.
    if 8 + declared > file_len {
        return Err(HeaderError::Truncated {
            path: path.to_path_buf(),
            needed: 8 + declared,
            actual: file_len,
        });
    }
    let mut header = vec![0u8; declared as usize];
    reader.read_exact(&mut header).map_err(io)?;
    let (data_bytes, tensors, by_dtype) =
        parse_header(&header).map_err(|message| HeaderError::Invalid {
            path: path.to_path_buf(),
            message,
        })?;
    let needed = (8 + declared).checked_add(data_bytes);
    if needed.is_none_or(|needed| needed > file_len) {
        return Err(HeaderError::Truncated {
            path: path.to_path_buf(),
            needed: needed.unwrap_or(u64::MAX),
            actual: file_len,
        });
    }
    let shard = Shard {
        file: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        file_bytes: file_len,
        header_bytes: declared,
        data_bytes,
        tensors,
        by_dtype,
    };
    Ok((shard, 8 + declared))
}

/// Reads one shard's header from disk: a regular file only (opening a FIFO would block).
pub fn scan_file(path: &Path) -> Result<(Shard, u64), HeaderError> {
    let io = |reason| HeaderError::Io {
        path: path.to_path_buf(),
        reason,
    };
    regular_file(path)?;
    let file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    scan_reader(path, file, len)
}

/// Where a shard's header is read: the shard itself, or (a Hub snapshot fetched by id, which holds
/// no weights) the header alone, kept in the tool's cache beside the Hub's
/// ([`hub_cache::cached_header`]).
enum Source {
    File(PathBuf),
    Cached(String),
}

impl Source {
    fn name(&self) -> &std::ffi::OsStr {
        match self {
            Source::File(path) => path.file_name().unwrap_or_default(),
            Source::Cached(name) => std::ffi::OsStr::new(name),
        }
    }
}

/// Reads shard `name`'s cached header as if it were the shard: same checks, same figures.
fn scan_cached(dir: &Path, name: &str) -> Result<(Shard, u64), HeaderError> {
    let path = hub_cache::cached_header(dir, name).ok_or_else(|| FileError::Missing {
        path: dir.join(name),
    })?;
    // The shard's length, its 8-byte header length, and the header.
    let (file_len, head) = hub_cache::read_header(&path, 16 + HEADER_CAP)?;
    let (mut shard, read) = scan_reader(&path, std::io::Cursor::new(head), file_len)?;
    shard.file = name.to_string();
    Ok((shard, read))
}

/// Scans every shard of a folder: those listed by `model.safetensors.index.json` when present,
/// else every `*.safetensors` file. `Ok(None)` when the folder holds none. A shard that is not a
/// regular file (dangling or looping link, directory, FIFO) or that resolves outside the folder is
/// refused with its name, never skipped: a partial download must not look complete.
pub fn scan_folder(dir: &Path) -> Result<Option<Stored>, HeaderError> {
    let index_path = dir.join("model.safetensors.index.json");
    let mut bytes_read = 0u64;
    let mut index_total_size = None;
    let mut listed_by_index = None;
    if std::fs::symlink_metadata(&index_path).is_ok() {
        let text = read_capped(&index_path, INDEX_CAP, "model.safetensors.index.json")?;
        bytes_read += text.len() as u64;
        let index: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| HeaderError::Invalid {
                path: index_path.clone(),
                message: format!(
                    "not valid JSON (line {}, column {}): {e}",
                    e.line(),
                    e.column()
                ),
            })?;
        index_total_size = index
            .pointer("/metadata/total_size")
            .and_then(serde_json::Value::as_u64);
        let map = index
            .get("weight_map")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| HeaderError::Invalid {
                path: index_path.clone(),
                message: "has no `weight_map` object".into(),
            })?;
        let mut names = Vec::with_capacity(map.len());
        for (tensor, shard) in map {
            let Some(name) = shard.as_str() else {
                return Err(HeaderError::Invalid {
                    path: index_path.clone(),
                    message: format!(
                        "maps tensor `{tensor}` to {shard}, not to a file name; fix the index or download it again"
                    ),
                });
            };
            names.push(name);
        }
        names.sort_unstable();
        names.dedup();
        let mut files = Vec::with_capacity(names.len());
        for name in names {
            match resolve_inside(dir, Path::new(name), &index_path) {
                Ok(path) => files.push(Source::File(path)),
                Err(FileError::Missing { .. }) if hub_cache::cached_header(dir, name).is_some() => {
                    files.push(Source::Cached(name.to_string()));
                }
                Err(FileError::Missing { .. }) => {
                    return Err(HeaderError::MissingShard {
                        index: index_path.clone(),
                        shard: name.to_string(),
                        dir: dir.to_path_buf(),
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
        listed_by_index = Some(files);
    }
    let mut in_folder = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|reason| HeaderError::Io {
        path: dir.to_path_buf(),
        reason,
    })? {
        let entry = entry.map_err(|reason| HeaderError::Io {
            path: dir.to_path_buf(),
            reason,
        })?;
        let name = PathBuf::from(entry.file_name());
        if name.extension().is_some_and(|e| e == "safetensors") {
            in_folder.push(name);
        }
    }
    in_folder.sort();
    let mut unlisted = Vec::new();
    let files = match listed_by_index {
        Some(files) => {
            for name in in_folder {
                if !files.iter().any(|f| f.name() == name.as_os_str()) {
                    unlisted.push(name.display().to_string());
                }
            }
            files
        }
        None => {
            let mut files = in_folder
                .iter()
                .map(|name| resolve_inside(dir, name, dir).map(Source::File))
                .collect::<Result<Vec<_>, _>>()?;
            // A snapshot fetched by Hub id holds no shard, only its header in the tool's cache.
            for name in hub_cache::cached_shards(dir) {
                if !in_folder.iter().any(|f| f.as_os_str() == name.as_str()) {
                    files.push(Source::Cached(name));
                }
            }
            files
        }
    };
    if files.is_empty() {
        return Ok(None);
    }
    let mut stored = Stored {
        shards: Vec::with_capacity(files.len()),
        by_dtype: BTreeMap::new(),
        data_bytes: 0,
        elements: 0,
        tensors: 0,
        index_total_size,
        bytes_read,
        unlisted,
    };
    let too_large = || HeaderError::TooLarge {
        dir: dir.to_path_buf(),
    };
    let add = |total: &mut u64, more: u64| -> Result<(), HeaderError> {
        *total = total.checked_add(more).ok_or_else(too_large)?;
        Ok(())
    };
    for file in files {
        let (shard, read) = match &file {
            Source::File(path) => scan_file(path)?,
            Source::Cached(name) => scan_cached(dir, name)?,
        };
        add(&mut stored.bytes_read, read)?;
        add(&mut stored.data_bytes, shard.data_bytes)?;
        add(&mut stored.tensors, shard.tensors)?;
        for (dtype, total) in &shard.by_dtype {
            let entry = stored.by_dtype.entry(dtype.clone()).or_default();
            add(&mut entry.bytes, total.bytes)?;
            add(&mut entry.elements, total.elements)?;
            add(&mut entry.tensors, total.tensors)?;
            add(&mut stored.elements, total.elements)?;
        }
        stored.shards.push(shard);
    }
    Ok(Some(stored))
}

/// Writes a header (no data) for tests and benchmarks; `set_len` then makes the file sparse.
pub fn header_bytes(tensors: &[(&str, &str, Vec<u64>)]) -> (Vec<u8>, u64) {
    let bits = |dtype: &str| -> u64 {
        match dtype {
            "F64" | "I64" | "U64" => 64,
            "F32" | "I32" | "U32" => 32,
            "F16" | "BF16" | "I16" | "U16" => 16,
            "F4" => 4,
            _ => 8,
        }
    };
    let mut offset = 0u64;
    let mut map = serde_json::Map::new();
    for (name, dtype, shape) in tensors {
        let size = shape.iter().product::<u64>() * bits(dtype) / 8;
        map.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}),
        );
        offset += size;
    }
    let json = serde_json::to_vec(&serde_json::Value::Object(map)).expect("a JSON map serializes");
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    (out, offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn reads_header_without_data() {
        let (bytes, data) = header_bytes(&[("a", "BF16", vec![4, 8]), ("b", "F32", vec![3])]);
        let len = bytes.len() as u64 + data;
        let (shard, read) =
            scan_reader(Path::new("x.safetensors"), Cursor::new(&bytes), len).unwrap();
        assert_eq!(shard.data_bytes, 64 + 12);
        assert_eq!(shard.by_dtype["BF16"].bytes, 64);
        assert_eq!(shard.by_dtype["F32"].elements, 3);
        assert_eq!(read, bytes.len() as u64);
    }

    #[test]
    fn a_hub_snapshot_reads_its_cached_headers() {
        let hf = tempfile::tempdir().unwrap();
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let snap = hf.path().join("hub/models--org--m/snapshots").join(commit);
        std::fs::create_dir_all(&snap).unwrap();
        let headers = hub_cache::headers_dir(&snap).unwrap();
        let (bytes, data) = header_bytes(&[("a", "BF16", vec![4, 8])]);
        let len = bytes.len() as u64 + data;
        hub_cache::write_header(&headers, "model.safetensors", len, &bytes).unwrap();
        // No index: the cached shards are the folder's.
        let stored = scan_folder(&snap).unwrap().unwrap();
        assert_eq!(stored.shards[0].file, "model.safetensors");
        assert_eq!((stored.elements, stored.data_bytes), (32, 64));
        // An index naming a shard neither in the folder nor cached is still refused.
        std::fs::write(
            snap.join("model.safetensors.index.json"),
            r#"{"weight_map": {"a": "model.safetensors", "b": "other.safetensors"}}"#,
        )
        .unwrap();
        assert!(matches!(
            scan_folder(&snap),
            Err(HeaderError::MissingShard { shard, .. }) if shard == "other.safetensors"
        ));
    }

    #[test]
    fn refuses_truncated_and_oversized() {
        let (bytes, data) = header_bytes(&[("a", "BF16", vec![4, 8])]);
        let short = bytes.len() as u64 + data - 1;
        assert!(matches!(
            scan_reader(Path::new("x"), Cursor::new(&bytes), short),
            Err(HeaderError::Truncated { .. })
        ));
        let mut huge = (HEADER_CAP + 1).to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert!(matches!(
            scan_reader(Path::new("x"), Cursor::new(&huge), u64::MAX),
            Err(HeaderError::HeaderTooLarge { .. })
        ));
        assert!(matches!(
            scan_reader(Path::new("x"), Cursor::new(&[1u8, 2]), 2),
            Err(HeaderError::TooShort { .. })
        ));
    }
}

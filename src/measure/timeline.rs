//! `measure --timeline`: where the allocator's snapshot goes. The worker dumps it into a hidden
//! temporary file beside the result (the CLI owns the files); the CLI then moves it to
//! `RESULT.snapshot.pickle` without replacing anything, records its size and SHA-256, and
//! summarises it (`explain::snapshot`).

use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::explain::snapshot;
use crate::output::{self, OutputError};
use crate::schema::measure::{MeasureResult, Timeline};

/// The snapshot's final path for a result path: `r.json` → `r.snapshot.pickle`.
pub fn snapshot_path(result: &Path) -> PathBuf {
    let stem = match result.extension().and_then(|e| e.to_str()) {
        Some("json") => result.with_extension(""),
        _ => result.to_path_buf(),
    };
    let mut name = stem.file_name().unwrap_or_default().to_os_string();
    name.push(".snapshot.pickle");
    stem.with_file_name(name)
}

/// The temporary file the worker writes, and where it goes once written.
pub struct Staged {
    temporary: tempfile::NamedTempFile,
    destination: PathBuf,
}

impl Staged {
    /// Refuses before the run when the snapshot's path exists or cannot be created.
    pub fn new(result: &Path) -> Result<Staged, OutputError> {
        let destination = snapshot_path(result);
        output::check_new(&destination)?;
        let folder = destination
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let temporary = tempfile::Builder::new()
            .prefix(".iteragpu-snapshot-")
            .suffix(".pickle")
            .tempfile_in(folder)
            .map_err(|e| OutputError::io(&destination, &e))?;
        Ok(Staged {
            temporary,
            destination,
        })
    }

    pub fn temporary(&self) -> &Path {
        self.temporary.path()
    }
}

/// Moves the snapshot into place (or says why there is none) and records it in the result.
pub fn keep(staged: Staged, result: &mut MeasureResult) {
    let mut timeline = result.timeline.take().unwrap_or_else(|| Timeline {
        reason: Some(format!(
            "the worker ended ({}) before dumping the allocator's snapshot",
            result.status
        )),
        ..Timeline::default()
    });
    if timeline.path.is_none() {
        // Dropping the staged file removes it.
        result.timeline = Some(timeline);
        return;
    }
    let path = match staged.temporary.persist_noclobber(&staged.destination) {
        Ok(_) => staged.destination,
        Err(e) => {
            // The destination appeared meanwhile: keep the snapshot where it was written.
            let kept = e.file.into_temp_path();
            match kept.keep() {
                Ok(p) => {
                    result.notes.push(format!(
                        "the snapshot could not be moved to {} ({}); it stays in {}",
                        staged.destination.display(),
                        output::reason(&e.error),
                        p.display()
                    ));
                    p
                }
                Err(e) => {
                    timeline.path = None;
                    timeline.reason = Some(format!(
                        "the snapshot could not be kept: {}",
                        output::reason(&e.error)
                    ));
                    result.timeline = Some(timeline);
                    return;
                }
            }
        }
    };
    match read_once(&path, &options(result)) {
        Ok((bytes, sha, summary)) if bytes > 0 => {
            timeline.bytes = Some(bytes);
            timeline.sha256 = Some(sha);
            match summary {
                Ok(s) => timeline.summary = Some(s),
                Err(e) => timeline.summary_reason = Some(e.to_string()),
            }
        }
        Ok(_) => timeline.reason = Some("the worker wrote an empty snapshot".into()),
        Err(e) => {
            timeline.reason = Some(format!(
                "cannot read the snapshot back: {}",
                output::reason(&e)
            ))
        }
    }
    timeline.path = Some(path);
    result.timeline = Some(timeline);
}

/// How the snapshot was recorded: its bound, and the phases' wall-clock bounds (for the
/// allocations of threads that carry no marker).
fn options(result: &MeasureResult) -> snapshot::SummaryOptions {
    snapshot::SummaryOptions {
        max_entries: result.history.as_ref().and_then(|h| h.max_entries),
        phase_bounds: result
            .phases
            .iter()
            .filter_map(|p| {
                Some(snapshot::PhaseBound {
                    index: p.index,
                    name: p.name.clone(),
                    start_us: i64::try_from(p.started_at_unix_us?).ok()?,
                    end_us: i64::try_from(p.ended_at_unix_us?).ok()?,
                })
            })
            .collect(),
    }
}

/// A reader that hashes and counts what passes through it.
struct Hashing<R> {
    inner: R,
    hasher: Sha256,
    bytes: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

/// Size, SHA-256 and summary of a snapshot in one pass over the file (it can hold gigabytes):
/// the summary reads it as a stream, and whatever lies after the pickle's end is hashed too.
fn read_once(
    path: &Path,
    options: &snapshot::SummaryOptions,
) -> std::io::Result<(
    u64,
    String,
    Result<snapshot::SnapshotSummary, snapshot::SnapshotError>,
)> {
    let mut reader = Hashing {
        inner: std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path)?),
        hasher: Sha256::new(),
        bytes: 0,
    };
    // The summary is bounded (memory and size) whatever the file holds; should the reader still
    // fail on some input, the measurement is kept all the same, with the reason.
    let summary = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        snapshot::summarize(&mut reader, options)
    }))
    .unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(snapshot::SnapshotError::Failed(what))
    });
    std::io::copy(&mut reader, &mut std::io::sink())?;
    let sha = reader
        .hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((reader.bytes, sha, summary))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshot_sits_beside_its_result() {
        assert_eq!(
            snapshot_path(Path::new("/runs/r.json")),
            Path::new("/runs/r.snapshot.pickle")
        );
        assert_eq!(
            snapshot_path(Path::new("out")),
            Path::new("out.snapshot.pickle")
        );
    }
}

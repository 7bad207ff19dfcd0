//! Result files are never overwritten: an existing path is refused before anything runs, and the
//! file is created with create-new semantics at the end, so nothing is ever truncated.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Why an output path cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error(
        "{0} already exists; iteragpu never overwrites a result: choose a new file name for this series"
    )]
    Exists(PathBuf),
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the folder of {0} does not exist; create it or choose another path")]
    NoFolder(PathBuf),
}

/// Checks before a run that `path` can be created.
pub fn check_new(path: &Path) -> Result<(), OutputError> {
    if path.exists() || path.is_symlink() {
        return Err(OutputError::Exists(path.to_path_buf()));
    }
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() && !parent.is_dir() => {
            Err(OutputError::NoFolder(path.to_path_buf()))
        }
        _ => Ok(()),
    }
}

/// Creates `path` (failing if it exists) and writes `bytes`.
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    let io = |source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                OutputError::Exists(path.to_path_buf())
            } else {
                io(e)
            }
        })?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)
}

/// Writes `bytes` with create-new semantics; if the path appeared meanwhile, a sibling name is
/// used so that a measurement is not lost. Returns where it was written.
pub fn write_new_or_sibling(path: &Path, bytes: &[u8]) -> Result<PathBuf, OutputError> {
    match write_new(path, bytes) {
        Ok(()) => Ok(path.to_path_buf()),
        Err(OutputError::Exists(_)) => {
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "result".into());
            let other = path.with_file_name(format!("{stem}-{}.json", std::process::id()));
            write_new(&other, bytes)?;
            eprintln!(
                "warning: {} appeared during the run; the result was written to {}",
                path.display(),
                other.display()
            );
            Ok(other)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        check_new(&path).unwrap();
        write_new(&path, b"first").unwrap();
        assert!(matches!(check_new(&path), Err(OutputError::Exists(_))));
        assert!(matches!(
            write_new(&path, b"second"),
            Err(OutputError::Exists(_))
        ));
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        assert!(matches!(
            check_new(&dir.path().join("no/such/dir.json")),
            Err(OutputError::NoFolder(_))
        ));
    }
}

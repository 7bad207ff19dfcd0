//! Opening the files of a model folder safely: only regular files are read (a FIFO would block
//! forever, a dangling link means an incomplete download), never more than a cap, and never a
//! path that resolves outside the folder.

use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::{Component, Path, PathBuf};

use crate::units::group_thousands;

/// Why a file of the model could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    // `reason` rather than `source`: the reason is in the message, and a `source` would be
    // printed a second time by the top-level error chain.
    #[error("cannot read {path}: {reason}; check the path and its permissions")]
    Io {
        path: PathBuf,
        reason: std::io::Error,
    },
    #[error("{path} does not exist; check the path")]
    Missing { path: PathBuf },
    #[error(
        "{path} is a symbolic link to {target}, which does not exist: the download is incomplete; download the file again or remove the link"
    )]
    Dangling { path: PathBuf, target: PathBuf },
    #[error("{path} is a symbolic link loop (it never reaches a file); fix the link or remove it")]
    Loop { path: PathBuf },
    #[error(
        "{path} is a directory, not a file; remove it or rename it so that it no longer looks like a model file"
    )]
    Directory { path: PathBuf },
    #[error(
        "{path} is a named pipe (FIFO), not a file: reading it would wait for a writer; give the file itself"
    )]
    Fifo { path: PathBuf },
    #[error("{path} is a {kind}, not a regular file; give the file itself")]
    Special { path: PathBuf, kind: &'static str },
    #[error(
        "{path} is {} bytes, above the {}-byte cap for a {what}; it is not a real {what} (check the path)",
        group_thousands(*len as u128),
        group_thousands(*cap as u128)
    )]
    TooLarge {
        path: PathBuf,
        len: u64,
        cap: u64,
        what: &'static str,
    },
    #[error(
        "{subject} {why}, outside the model folder {dir}; every file of a model must be inside its folder: fix the entry, or copy the file into the folder"
    )]
    Outside {
        /// `` `name` (named by INDEX) `` or the path found in the folder.
        subject: String,
        why: String,
        dir: PathBuf,
    },
}

/// The metadata of `path` if it is a regular file (symbolic links followed), else why not: THE
/// check every input path goes through before it is opened (a FIFO is refused here, never opened:
/// opening one blocks until a writer comes; a path longer than PATH_MAX says so).
pub fn regular_file(path: &Path) -> Result<Metadata, FileError> {
    let io = |reason| FileError::Io {
        path: path.to_path_buf(),
        reason,
    };
    let link = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(FileError::Missing {
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(io(e)),
    };
    let meta = if link.file_type().is_symlink() {
        match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(FileError::Dangling {
                    path: path.to_path_buf(),
                    target: std::fs::read_link(path).unwrap_or_default(),
                });
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(FileError::Loop {
                    path: path.to_path_buf(),
                });
            }
            Err(e) => return Err(io(e)),
        }
    } else {
        link
    };
    let kind = meta.file_type();
    let path = path.to_path_buf();
    if kind.is_file() {
        Ok(meta)
    } else if kind.is_dir() {
        Err(FileError::Directory { path })
    } else if kind.is_fifo() {
        Err(FileError::Fifo { path })
    } else if kind.is_socket() {
        Err(FileError::Special {
            path,
            kind: "socket",
        })
    } else {
        Err(FileError::Special {
            path,
            kind: "device file",
        })
    }
}

/// Reads a whole regular file of at most `cap` bytes (`what` names it in the message); a larger
/// one is refused before it is read.
pub fn read_capped(path: &Path, cap: u64, what: &'static str) -> Result<Vec<u8>, FileError> {
    let io = |reason| FileError::Io {
        path: path.to_path_buf(),
        reason,
    };
    let too_large = |len| FileError::TooLarge {
        path: path.to_path_buf(),
        len,
        cap,
        what,
    };
    let len = regular_file(path)?.len();
    if len > cap {
        return Err(too_large(len));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    File::open(path)
        .map_err(io)?
        .take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    // The file may have grown since its length was read.
    if bytes.len() as u64 > cap {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Where `relative`, named by `listed_in` (an index, or the folder's own listing), really is, refusing anything that resolves outside `dir`
/// (absolute paths, `..`, symbolic links pointing out). A Hugging Face cache snapshot
/// (`…/snapshots/<revision>/`) links its files to the repository's `blobs/` folder: that folder
/// counts as inside.
pub fn resolve_inside(dir: &Path, relative: &Path, listed_in: &Path) -> Result<PathBuf, FileError> {
    let outside = |why: String| FileError::Outside {
        subject: if listed_in == dir {
            dir.join(relative).display().to_string()
        } else {
            format!(
                "`{}` (named by {})",
                relative.display(),
                listed_in.display()
            )
        },
        why,
        dir: dir.to_path_buf(),
    };
    if relative.is_absolute() {
        return Err(outside("is an absolute path".into()));
    }
    if relative
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(outside("climbs out with `..`".into()));
    }
    let path = dir.join(relative);
    regular_file(&path)?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |reason| FileError::Io { path, reason }
    };
    let root = std::fs::canonicalize(dir).map_err(io(dir))?;
    let resolved = std::fs::canonicalize(&path).map_err(io(&path))?;
    let hub_blobs = root
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == "snapshots"))
        .and_then(Path::parent)
        .map(|repo| repo.join("blobs"));
    let inside = resolved.starts_with(&root)
        || hub_blobs
            .as_ref()
            .is_some_and(|blobs| resolved.starts_with(blobs));
    if !inside {
        return Err(outside(format!("resolves to {}", resolved.display())));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("ok"), b"x").unwrap();
        std::os::unix::fs::symlink(d.join("absent"), d.join("dangling")).unwrap();
        std::os::unix::fs::symlink(d.join("loop"), d.join("loop")).unwrap();
        std::fs::create_dir(d.join("dir")).unwrap();
        assert!(regular_file(&d.join("ok")).is_ok());
        assert!(matches!(
            regular_file(&d.join("dangling")),
            Err(FileError::Dangling { .. })
        ));
        assert!(matches!(
            regular_file(&d.join("loop")),
            Err(FileError::Loop { .. })
        ));
        assert!(matches!(
            regular_file(&d.join("dir")),
            Err(FileError::Directory { .. })
        ));
        assert!(matches!(
            regular_file(&d.join("absent")),
            Err(FileError::Missing { .. })
        ));
        assert!(matches!(
            regular_file(Path::new("/dev/null")),
            Err(FileError::Special { .. })
        ));
    }

    #[test]
    fn caps_what_it_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"12345").unwrap();
        assert_eq!(read_capped(&path, 5, "test").unwrap(), b"12345");
        assert!(matches!(
            read_capped(&path, 4, "test"),
            Err(FileError::TooLarge { len: 5, cap: 4, .. })
        ));
    }

    #[test]
    fn stays_inside_the_folder() {
        let outer = tempfile::tempdir().unwrap();
        let dir = outer.path().join("model");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(outer.path().join("secret"), b"x").unwrap();
        std::fs::write(dir.join("a"), b"x").unwrap();
        std::os::unix::fs::symlink("a", dir.join("inner_link")).unwrap();
        std::os::unix::fs::symlink("../secret", dir.join("out_link")).unwrap();
        let index = dir.join("index.json");
        assert!(resolve_inside(&dir, Path::new("a"), &index).is_ok());
        assert!(resolve_inside(&dir, Path::new("inner_link"), &index).is_ok());
        for name in ["../secret", "out_link"] {
            assert!(
                matches!(
                    resolve_inside(&dir, Path::new(name), &index),
                    Err(FileError::Outside { .. })
                ),
                "{name}"
            );
        }
        let absolute = outer.path().join("secret").display().to_string();
        assert!(matches!(
            resolve_inside(&dir, Path::new(&absolute), &index),
            Err(FileError::Outside { .. })
        ));
    }

    #[test]
    fn a_hub_snapshot_may_link_to_its_blobs() {
        let repo = tempfile::tempdir().unwrap();
        let snapshot = repo.path().join("snapshots/abc123");
        std::fs::create_dir_all(&snapshot).unwrap();
        std::fs::create_dir(repo.path().join("blobs")).unwrap();
        std::fs::write(repo.path().join("blobs/deadbeef"), b"x").unwrap();
        std::os::unix::fs::symlink("../../blobs/deadbeef", snapshot.join("model.safetensors"))
            .unwrap();
        let index = snapshot.join("index.json");
        assert!(resolve_inside(&snapshot, Path::new("model.safetensors"), &index).is_ok());
    }
}

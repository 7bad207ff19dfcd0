//! Files iteragpu writes are never overwritten and a measurement is never lost:
//! * before anything runs, the path is checked by creating (then removing) a temporary sibling, so
//!   a read-only file system, a folder, a trailing `/` or a missing folder is refused at once;
//! * a result is created with create-new semantics at the end (nothing is ever truncated); if the
//!   path appeared meanwhile a sibling name is used, and if the write still fails (a full disk) the
//!   result is saved in the temporary folder and the message says where;
//! * what can be made again (a fiche, a CSV) is staged next to its path and moved into place only
//!   once everything else (the line on standard output) succeeded, so a failure leaves nothing.

pub mod table;

use std::borrow::Cow;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A line on standard error that never panics: `eprintln!` panics when standard error is closed
/// (`iteragpu … 2>&1 | head` after `head` exits), and a message nobody can read is no reason to
/// abort with a panic.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!($($arg)*);
        let _ = writeln!(std::io::stderr().lock(), "{}", $crate::output::terminal_safe(&line));
    }};
}

/// Whether a character of text read from a file or a script is shown escaped by every renderer:
/// control characters (ESC, BEL, carriage return, C1 controls, DEL; line breaks and tabs stay) and
/// the bidirectional controls that reorder what is shown (the overrides and embeddings
/// U+202A–U+202E, the isolates U+2066–U+2069, and the marks U+200E, U+200F, U+061C: "Trojan
/// Source", CVE-2021-42574).
pub fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || c == '\u{7f}'
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}')
}

/// The one sanitiser for text from files and scripts, used by every renderer (the terminal tables,
/// error messages and every line on standard error through [`say!`], Markdown, HTML and CSV):
/// each [`unsafe_char`] is shown as an escape, `\x1b` for a control character up to U+00FF and
/// `\u{202e}` beyond, so an escape that clears the screen or sets the window title, a carriage
/// return that hides a line, or a bidirectional override that reverses a name is seen, never
/// obeyed.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            let code = c as u32;
            if code <= 0xff {
                out.push_str(&format!("\\x{code:02x}"));
            } else {
                out.push_str(&format!("\\u{{{code:x}}}"));
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A new file name in the current folder, `STEM-YYYYMMDD-HHMMSS.EXT`, with `-2`, `-3`… added
/// while the name is taken: used when a command may choose its own output (never overwriting).
pub fn new_name(stem: &str, ext: &str) -> PathBuf {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    let first = PathBuf::from(format!("{stem}-{stamp}.{ext}"));
    if !first.exists() {
        return first;
    }
    (2..)
        .map(|k| PathBuf::from(format!("{stem}-{stamp}-{k}.{ext}")))
        .find(|p| !p.exists())
        .expect("a free name exists")
}

/// Why an output path cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{} already exists; iteragpu never overwrites a file: choose a new file name", .0.display())]
    Exists(PathBuf),
    #[error("{} is a folder; give a file name (e.g. {}/result.json)", .0.display(), .0.display())]
    Folder(PathBuf),
    #[error("`{0}` ends with `/`: give a file name, not a folder")]
    TrailingSlash(String),
    #[error("cannot write {}: {reason}", path.display())]
    Io { path: PathBuf, reason: String },
    #[error("the folder of {} does not exist; create it or choose another path", .0.display())]
    NoFolder(PathBuf),
}

impl OutputError {
    pub fn io(path: &Path, e: &std::io::Error) -> OutputError {
        OutputError::Io {
            path: path.to_path_buf(),
            reason: reason(e),
        }
    }
}

/// The OS's reason without the "(os error N)" suffix, so that a message never says it twice.
pub fn reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Checks before a run that `path` can be created: it does not exist, is not a folder, and its
/// folder accepts a new file (a temporary sibling is created, then removed).
pub fn check_new(path: &Path) -> Result<(), OutputError> {
    let text = path.to_string_lossy();
    if text.ends_with('/') {
        return Err(OutputError::TrailingSlash(text.into_owned()));
    }
    // The OS's own answer, not `is_dir()`/`exists()`, which read every error (a path longer than
    // PATH_MAX, a folder without permission) as "absent".
    match std::fs::symlink_metadata(path) {
        Ok(_) if path.is_dir() => return Err(OutputError::Folder(path.to_path_buf())),
        Ok(_) => return Err(OutputError::Exists(path.to_path_buf())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(OutputError::io(path, &e)),
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent {
        match std::fs::metadata(parent) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(OutputError::NoFolder(path.to_path_buf())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(OutputError::NoFolder(path.to_path_buf()));
            }
            Err(e) => return Err(OutputError::io(path, &e)),
        }
    }
    let probe = sibling(path, "probe");
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| OutputError::io(path, &e))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// A hidden name next to `path`, unique to this process.
fn sibling(path: &Path, what: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{what}-{}", std::process::id()))
}

/// Creates `path` (failing if it exists) and writes `bytes`; a partial file is removed.
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                OutputError::Exists(path.to_path_buf())
            } else {
                OutputError::io(path, &e)
            }
        })?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    if let Err(e) = written {
        drop(file);
        let _ = std::fs::remove_file(path);
        return Err(OutputError::io(path, &e));
    }
    Ok(())
}

/// Where a result ended up.
#[derive(Debug)]
pub enum Saved {
    /// At the requested path.
    Here(PathBuf),
    /// The requested path appeared during the run: a sibling name was used.
    Sibling(PathBuf),
    /// The requested path could not be written: the result is in the temporary folder.
    Elsewhere { path: PathBuf, why: OutputError },
}

impl Saved {
    pub fn path(&self) -> &Path {
        match self {
            Saved::Here(p) | Saved::Sibling(p) | Saved::Elsewhere { path: p, .. } => p,
        }
    }
}

/// Writes a measurement so that it is not lost: at `path`, else at a sibling name if `path`
/// appeared meanwhile, else (a full disk, a file system gone read-only) in the temporary folder.
/// Fails only when none of these could be written.
pub fn save_result(path: &Path, bytes: &[u8]) -> Result<Saved, OutputError> {
    let why = match write_new(path, bytes) {
        Ok(()) => return Ok(Saved::Here(path.to_path_buf())),
        Err(OutputError::Exists(_)) => {
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "result".into());
            let other = path.with_file_name(format!("{stem}-{}.json", std::process::id()));
            match write_new(&other, bytes) {
                Ok(()) => return Ok(Saved::Sibling(other)),
                Err(e) => e,
            }
        }
        Err(e) => e,
    };
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "result".into());
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S");
    let elsewhere = std::env::temp_dir().join(format!(
        "iteragpu-{stem}-{stamp}-{}.json",
        std::process::id()
    ));
    match write_new(&elsewhere, bytes) {
        Ok(()) => Ok(Saved::Elsewhere {
            path: elsewhere,
            why,
        }),
        Err(second) => Err(OutputError::Io {
            path: path.to_path_buf(),
            reason: format!("{why}; saving it in the temporary folder failed too: {second}"),
        }),
    }
}

/// A file written next to its path and moved into place by [`Staged::commit`]; dropped without a
/// commit, it leaves nothing behind.
pub struct Staged {
    file: tempfile::NamedTempFile,
    path: PathBuf,
}

/// Writes `bytes` to a temporary sibling of `path`.
pub fn stage(path: &Path, bytes: &[u8]) -> Result<Staged, OutputError> {
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut file = tempfile::Builder::new()
        .prefix(".iteragpu-")
        // As a plain create would (the umask applies), not the temporary file's private 0600.
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(folder)
        .map_err(|e| OutputError::io(path, &e))?;
    file.write_all(bytes)
        .and_then(|()| file.as_file().sync_all())
        .map_err(|e| OutputError::io(path, &e))?;
    Ok(Staged {
        file,
        path: path.to_path_buf(),
    })
}

impl Staged {
    /// Moves the file into place, refusing to replace anything that appeared meanwhile.
    pub fn commit(self) -> Result<(), OutputError> {
        let path = self.path;
        self.file.persist_noclobber(&path).map_err(|e| {
            if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                OutputError::Exists(path.clone())
            } else {
                OutputError::io(&path, &e.error)
            }
        })?;
        Ok(())
    }

    /// Moves the file into place over the previous version this process wrote.
    pub fn replace(self) -> Result<(), OutputError> {
        let path = self.path;
        self.file
            .persist(&path)
            .map_err(|e| OutputError::io(&path, &e.error))?;
        Ok(())
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
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "probe removed"
        );
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
        assert!(matches!(check_new(dir.path()), Err(OutputError::Folder(_))));
        let slash = PathBuf::from(format!("{}/x.json/", dir.path().display()));
        assert!(matches!(
            check_new(&slash),
            Err(OutputError::TrailingSlash(_))
        ));
    }

    #[test]
    fn a_result_that_finds_its_path_taken_goes_to_a_sibling() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        std::fs::write(&path, b"someone else's").unwrap();
        let saved = save_result(&path, b"ours").unwrap();
        assert!(matches!(saved, Saved::Sibling(_)));
        assert_eq!(std::fs::read(saved.path()).unwrap(), b"ours");
        assert_eq!(std::fs::read(&path).unwrap(), b"someone else's");
    }

    #[test]
    fn a_result_that_cannot_be_written_goes_to_the_temporary_folder() {
        let dir = tempfile::tempdir().unwrap();
        // A path under a regular file cannot be created.
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, b"").unwrap();
        let path = blocker.join("r.json");
        let saved = save_result(&path, b"measured").unwrap();
        let Saved::Elsewhere {
            path: elsewhere,
            why,
        } = &saved
        else {
            panic!("{saved:?}")
        };
        assert!(elsewhere.starts_with(std::env::temp_dir()));
        assert_eq!(std::fs::read(elsewhere).unwrap(), b"measured");
        assert!(why.to_string().contains("cannot write"), "{why}");
        std::fs::remove_file(elsewhere).unwrap();
    }

    #[test]
    fn a_staged_file_appears_only_on_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fiche.html");
        drop(stage(&path, b"draft").unwrap());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        stage(&path, b"final").unwrap().commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"final");
        assert!(matches!(
            stage(&path, b"again").unwrap().commit(),
            Err(OutputError::Exists(_))
        ));
        assert_eq!(std::fs::read(&path).unwrap(), b"final");
    }
}

#[cfg(test)]
mod terminal_tests {
    use super::terminal_safe;

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(terminal_safe("plain\tname\n"), "plain\tname\n");
        assert_eq!(terminal_safe("a\u{1b}[2Jb"), "a\\x1b[2Jb");
        assert_eq!(
            terminal_safe("x\u{1b}]0;title\u{7}y"),
            "x\\x1b]0;title\\x07y"
        );
        assert_eq!(terminal_safe("over\rwrite"), "over\\x0dwrite");
        assert_eq!(terminal_safe("c1\u{9b}31m"), "c1\\x9b31m");
        assert_eq!(terminal_safe("bell\u{7}"), "bell\\x07");
        // Bidirectional overrides and isolates are shown, never applied.
        assert_eq!(terminal_safe("ab\u{202e}cd"), "ab\\u{202e}cd");
        assert_eq!(terminal_safe("\u{2066}x\u{2069}"), "\\u{2066}x\\u{2069}");
        assert_eq!(terminal_safe("\u{202a}\u{202d}"), "\\u{202a}\\u{202d}");
        assert_eq!(terminal_safe("é 日本"), "é 日本");
    }
}

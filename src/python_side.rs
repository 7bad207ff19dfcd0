//! The Python files the binary carries (recorder, workloads, worker, probe), written into a
//! private folder at run time and put first on the worker's PYTHONPATH: nothing to install.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

// Every file of the `iteragpu` Python package, with its path inside the package (listed by build.rs).
include!(concat!(env!("OUT_DIR"), "/python_files.rs"));

/// `sha256:…` of the Python package: identifies the measuring code in every result.
pub fn code_hash() -> String {
    let mut hasher = Sha256::new();
    for (path, text) in FILES {
        hasher.update(path.as_bytes());
        hasher.update([0]);
        hasher.update(text.as_bytes());
        hasher.update([0]);
    }
    sha256_text(hasher)
}

fn sha256_text(hasher: Sha256) -> String {
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// What identifies the code of a run: `code_hash` for the result's identity and, for a script,
/// the script's own `sha256:…`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeHash {
    pub code_hash: String,
    pub script_sha256: Option<String>,
}

/// The code a `--script` workload runs: the tool's package (`code_hash()`, then a NUL), the
/// script's bytes (their length as 8 little-endian bytes, then the bytes) and its arguments (each
/// followed by a NUL), so that two scripts, or one script with other arguments, never share a
/// hash; a measurement and a prediction of the same script and arguments always do. A script that
/// cannot be read is said in the hash itself: `unreadable-script:sha256:…` (the tool and the
/// arguments only), with no script hash.
pub fn script_code_hash(script: &Path, args: &[String]) -> CodeHash {
    let bytes = std::fs::read(script);
    let mut hasher = Sha256::new();
    hasher.update(code_hash().as_bytes());
    hasher.update([0]);
    match &bytes {
        Ok(bytes) => {
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        }
        Err(_) => hasher.update(b"unreadable\0"),
    }
    for a in args {
        hasher.update(a.as_bytes());
        hasher.update([0]);
    }
    let combined = sha256_text(hasher);
    match bytes {
        Ok(bytes) => CodeHash {
            code_hash: combined,
            script_sha256: Some(sha256_text(Sha256::new_with_prefix(&bytes))),
        },
        Err(_) => CodeHash {
            code_hash: format!("unreadable-script:{combined}"),
            script_sha256: None,
        },
    }
}

/// The package written into a temporary folder, removed when dropped.
pub struct Package {
    dir: tempfile::TempDir,
}

/// How old a leftover temporary folder of a dead iteragpu must be before it is removed.
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// A private temporary folder, `iteragpu-KIND-PID-random`: the pid names its owner, so that a
/// later run can remove what a killed one (SIGKILL leaves no chance to clean up) left behind.
pub fn private_dir(kind: &str) -> std::io::Result<tempfile::TempDir> {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(|| {
        sweep_stale(&std::env::temp_dir(), STALE_AFTER);
    });
    tempfile::Builder::new()
        .prefix(&format!("iteragpu-{kind}-{}-", std::process::id()))
        .tempdir()
}

/// Removes the `iteragpu-KIND-PID-…` folders in `tmp` older than `age` whose owner process is
/// gone; returns how many. Folders of live processes, recent ones and any other name are kept.
pub fn sweep_stale(tmp: &Path, age: std::time::Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("iteragpu-")) else {
            continue;
        };
        // KIND-PID-random, KIND being one word.
        let mut parts = rest.splitn(3, '-');
        let (Some(_kind), Some(pid), Some(_)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        let old = meta
            .modified()
            .ok()
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|e| e >= age);
        let alive = Path::new(&format!("/proc/{pid}")).exists();
        if meta.is_dir() && old && !alive && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

impl Package {
    pub fn write() -> std::io::Result<Package> {
        let dir = private_dir("python")?;
        for (path, text) in FILES {
            let target = dir.path().join(path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(target, text)?;
        }
        Ok(Package { dir })
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// PYTHONPATH with the package first, then whatever the user had.
    pub fn pythonpath(&self) -> std::ffi::OsString {
        let mut paths: Vec<PathBuf> = vec![self.root().to_path_buf()];
        if let Some(existing) = std::env::var_os("PYTHONPATH") {
            paths.extend(std::env::split_paths(&existing));
        }
        std::env::join_paths(paths).unwrap_or_else(|_| self.root().as_os_str().to_owned())
    }
}

/// The interpreter to use: `--python`, else `ITERAGPU_PYTHON`, else the Python beside this
/// binary (`pip install iteragpu` puts both in the environment's `bin`: the one that has torch),
/// else `python3` from the `PATH`.
pub fn interpreter(flag: Option<&Path>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| std::env::var_os("ITERAGPU_PYTHON").map(PathBuf::from))
        .or_else(|| std::env::current_exe().ok().and_then(|exe| beside(&exe)))
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// `python3` (else `python`) in the folder of `exe`, when it is an executable file.
fn beside(exe: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let folder = exe.parent()?;
    ["python3", "python"]
        .iter()
        .map(|name| folder.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two scripts, or one script with other arguments, never share a hash; the same script and
    /// arguments always do; an unreadable script is said so.
    #[test]
    fn a_scripts_hash_covers_its_bytes_and_arguments() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.py");
        let b = dir.path().join("b.py");
        std::fs::write(&a, "print('a')\n").unwrap();
        std::fs::write(&b, "print('b')\n").unwrap();
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ha = script_code_hash(&a, &args(&["--batch", "8"]));
        assert!(ha.code_hash.starts_with("sha256:"));
        assert_ne!(ha.code_hash, code_hash(), "not the tool's hash alone");
        assert_eq!(ha, script_code_hash(&a, &args(&["--batch", "8"])));
        assert_ne!(ha, script_code_hash(&b, &args(&["--batch", "8"])));
        assert_ne!(
            ha.code_hash,
            script_code_hash(&a, &args(&["--batch", "16"])).code_hash
        );
        // Arguments are delimited: ["ab"] is not ["a", "b"].
        assert_ne!(
            script_code_hash(&a, &args(&["ab"])).code_hash,
            script_code_hash(&a, &args(&["a", "b"])).code_hash
        );
        assert_eq!(
            ha.script_sha256.as_deref(),
            Some("sha256:62bdb208de6dc6b169a467f646f50ca39e6c203fa6f6732431624d8dec1e77fb")
        );
        assert_eq!(
            script_code_hash(&a, &[]).script_sha256,
            ha.script_sha256,
            "the script's own hash ignores the arguments"
        );
        let missing = script_code_hash(&dir.path().join("gone.py"), &args(&["x"]));
        assert!(
            missing.code_hash.starts_with("unreadable-script:sha256:"),
            "{}",
            missing.code_hash
        );
        assert_eq!(missing.script_sha256, None);
        // Edited in place: another hash.
        std::fs::write(&a, "print('a2')\n").unwrap();
        assert_ne!(ha, script_code_hash(&a, &args(&["--batch", "8"])));
    }

    #[test]
    fn the_python_beside_the_binary_is_the_environments() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("iteragpu");
        assert_eq!(beside(&exe), None, "no interpreter there");
        let python = dir.path().join("python");
        std::fs::write(&python, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(beside(&exe), None, "not executable");
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(beside(&exe), Some(python));
        let python3 = dir.path().join("python3");
        std::fs::write(&python3, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&python3, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(beside(&exe), Some(python3), "python3 first");
    }
}

#[cfg(test)]
mod stale_tests {
    use super::sweep_stale;

    /// Only folders of dead owners older than the age are removed.
    #[test]
    fn stale_folders_of_dead_runs_are_swept() {
        let tmp = tempfile::tempdir().unwrap();
        let dead = tmp.path().join("iteragpu-python-999999999-abc");
        let live = tmp
            .path()
            .join(format!("iteragpu-ranks-{}-abc", std::process::id()));
        let other = tmp.path().join("iteragpu-python-notapid");
        for d in [&dead, &live, &other] {
            std::fs::create_dir(d).unwrap();
        }
        // Not old enough yet: kept.
        assert_eq!(
            sweep_stale(tmp.path(), std::time::Duration::from_secs(3600)),
            0
        );
        assert_eq!(sweep_stale(tmp.path(), std::time::Duration::ZERO), 1);
        assert!(!dead.exists());
        assert!(live.exists() && other.exists());
    }
}

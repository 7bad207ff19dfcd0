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
    let digest = hasher.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The package written into a temporary folder, removed when dropped.
pub struct Package {
    dir: tempfile::TempDir,
}

impl Package {
    pub fn write() -> std::io::Result<Package> {
        let dir = tempfile::Builder::new()
            .prefix("iteragpu-python-")
            .tempdir()?;
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

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

/// The interpreter to use: `--python`, else `ITERAGPU_PYTHON`, else `python3`.
pub fn interpreter(flag: Option<&Path>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| std::env::var_os("ITERAGPU_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"))
}

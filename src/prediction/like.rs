//! `predict --like FILE`: the GPU machine's versions, read from a measurement made there
//! (`iteragpu.measure/1`, its `environment.python`) or from `iteragpu environment --json` run
//! there, before anything runs; compared with the prediction's once it is made
//! (`versions::Like`).

use anyhow::{Result, bail};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

use crate::environment::{Environment, PythonEnvironment};
use crate::schema::measure::MeasureResult;
use crate::schema::prediction::Assumptions;
use crate::schema::versions::{Like, Versions};

/// Largest `--like` file read: a measurement is kilobytes to a few megabytes (its phases, its
/// embedded prediction); anything larger is not one.
pub const LIKE_CAP: u64 = 64 << 20;

const TAKES: &str = "--like takes a measurement made on the GPU machine (iteragpu.measure/1) or the output of `iteragpu environment --json` run there";

/// A `--like` file, read and checked.
#[derive(Clone, Debug)]
pub struct LikeFile {
    pub path: PathBuf,
    pub sha256: String,
    /// `measurement` or `environment`.
    pub kind: &'static str,
    /// The GPU the file names (its first device), when it names one.
    pub device: Option<String>,
    pub versions: Versions,
}

impl LikeFile {
    /// The comparison with a prediction's versions.
    pub fn compare(&self, assumptions: &Assumptions) -> Like {
        Like::compare(
            self.path.display().to_string(),
            Some(self.sha256.clone()),
            self.kind,
            self.device.clone(),
            &assumptions.versions(),
            &self.versions,
        )
    }
}

/// Reads `path`: a regular file of at most [`LIKE_CAP`] bytes, a measurement or an environment
/// report with the interpreter's side; any other file is refused with what `--like` takes.
pub fn load(path: &Path) -> Result<LikeFile> {
    let bytes = crate::model::files::read_capped(path, LIKE_CAP, "measurement or environment")?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        anyhow::anyhow!(
            "{} is not valid JSON (line {}, column {}): {e}; {TAKES}",
            path.display(),
            e.line(),
            e.column()
        )
    })?;
    let sha256 = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let (kind, python, device) = match value.get("schema").and_then(Value::as_str) {
        Some(crate::schema::measure::SCHEMA) => {
            let r: MeasureResult = serde_json::from_value(value).map_err(|e| {
                anyhow::anyhow!(
                    "{} does not match {}: {e}; the file was edited by hand or comes from another tool",
                    path.display(),
                    crate::schema::measure::SCHEMA
                )
            })?;
            let Some(python) = r.environment.python else {
                bail!(
                    "{} records no Python environment (its worker did not report one): its versions are unknown; {TAKES}",
                    path.display()
                );
            };
            let device = r
                .scope
                .devices
                .first()
                .and_then(|d| python.device(d))
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
                .map(String::from);
            ("measurement", python, device)
        }
        Some(other) => bail!("{} is a `{other}` file; {TAKES}", path.display()),
        None if is_environment(&value) => {
            let env: Environment = serde_json::from_value(value).map_err(|e| {
                anyhow::anyhow!(
                    "{} does not match `iteragpu environment --json`'s output: {e}; the file was edited by hand or comes from another tool",
                    path.display()
                )
            })?;
            let Some(python) = env.python else {
                bail!(
                    "{} has no interpreter's side ({}): its versions are unknown; run `iteragpu environment --json --python PYTHON` there with the interpreter the GPU runs use",
                    path.display(),
                    env.python_reason.as_deref().unwrap_or("no reason given")
                );
            };
            let device = first_device(&python).or_else(|| {
                env.driver
                    .as_ref()
                    .and_then(|d| d.gpus.first())
                    .and_then(|g| g.name.clone())
            });
            ("environment", python, device)
        }
        None => bail!(
            "{} is neither an iteragpu measurement nor `iteragpu environment --json` output (it has no `schema` field and no `python`/`driver` fields); {TAKES}",
            path.display()
        ),
    };
    Ok(LikeFile {
        path: path.to_path_buf(),
        sha256,
        kind,
        device,
        versions: Versions::of(&python),
    })
}

/// `iteragpu environment --json` writes an object with exactly these four fields.
fn is_environment(value: &Value) -> bool {
    value.as_object().is_some_and(|o| {
        ["driver", "driver_reason", "python", "python_reason"]
            .iter()
            .all(|k| o.contains_key(*k))
    })
}

fn first_device(python: &PythonEnvironment) -> Option<String> {
    python
        .torch
        .as_ref()?
        .get("devices")?
        .get(0)?
        .get("name")?
        .as_str()
        .map(String::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn python(torch: &str, transformers: &str) -> Value {
        serde_json::json!({
            "python": {"executable": "/usr/bin/python3", "version": "3.12.3", "implementation": "CPython"},
            "settings": {}, "transformers_version": transformers, "peft_version": null,
            "torch": {"version": torch, "cuda_version": "13.0", "hip_version": null, "backend": "cuda",
                "devices": [{"index": 0, "name": "NVIDIA H200", "total_memory": 150_011_543_552u64,
                    "capability": [9, 0]}]},
            "can_measure": true, "reason": null
        })
    }

    fn write(dir: &Path, name: &str, value: &Value) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_vec(value).unwrap()).unwrap();
        path
    }

    #[test]
    fn an_environment_report_gives_the_gpu_machines_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "env.json",
            &serde_json::json!({"driver": null, "driver_reason": "no driver",
                "python": python("2.11.0+cu130", "5.17.0"), "python_reason": null}),
        );
        let like = load(&path).unwrap();
        assert_eq!(like.kind, "environment");
        assert_eq!(like.device.as_deref(), Some("NVIDIA H200"));
        assert_eq!(like.versions.torch.as_deref(), Some("2.11.0+cu130"));
        assert_eq!(like.versions.transformers.as_deref(), Some("5.17.0"));
        assert_eq!(like.versions.cuda.as_deref(), Some("13.0"));
        assert_eq!(like.versions.peft, None);
        assert_eq!(like.sha256.len(), 64);
    }

    #[test]
    fn other_files_are_refused_with_what_like_takes() {
        let dir = tempfile::tempdir().unwrap();
        for (name, value, message) in [
            (
                "series.json",
                serde_json::json!({"schema": "iteragpu.series/1"}),
                "is a `iteragpu.series/1` file; --like takes a measurement",
            ),
            (
                "estimate.json",
                serde_json::json!({"schema": "iteragpu.estimate/1", "terms": []}),
                "is a `iteragpu.estimate/1` file",
            ),
            (
                "other.json",
                serde_json::json!({"hello": 1}),
                "is neither an iteragpu measurement nor",
            ),
            (
                "no_python.json",
                serde_json::json!({"driver": null, "driver_reason": "x", "python": null,
                    "python_reason": "cannot run python9"}),
                "has no interpreter's side (cannot run python9)",
            ),
            (
                "bad_measure.json",
                serde_json::json!({"schema": "iteragpu.measure/1"}),
                "does not match iteragpu.measure/1",
            ),
        ] {
            let path = write(dir.path(), name, &value);
            let e = load(&path).unwrap_err().to_string();
            assert!(e.contains(message), "{name}: {e}");
        }
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        let text = dir.path().join("text.json");
        std::fs::write(&text, "{\"driver\": ").unwrap();
        let e = load(&text).unwrap_err().to_string();
        assert!(e.contains("is not valid JSON (line 1"), "{e}");
    }
}

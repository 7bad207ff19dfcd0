//! The Python side of the environment, as the interpreter itself reports it (`iteragpu.probe`).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::python_side::Package;

/// What `python -m iteragpu.probe` reports. Kept as JSON objects where PyTorch's own structure is
/// richer than we need to type; the documented fields are below.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PythonEnvironment {
    /// `executable`, `version`, `implementation`.
    pub python: Value,
    /// Allocator and device settings from the environment (PYTORCH_CUDA_ALLOC_CONF, …); null if unset.
    pub settings: Value,
    pub transformers_version: Option<String>,
    pub peft_version: Option<String>,
    /// `version`, `cuda_version`, `hip_version`, `backend` (cuda or hip), `cudnn_version`,
    /// `cuda_available`, `device_count`, `devices` (name, total_memory as PyTorch declares it),
    /// `allocator_backend`, `null_reasons`. Null when PyTorch cannot be imported.
    pub torch: Option<Value>,
    /// Whether `measure` can run with the requested devices.
    pub can_measure: bool,
    /// Why not, when it cannot.
    pub reason: Option<String>,
}

/// The index of a device name: `cuda:1` → 1, `cuda` → 0.
pub fn device_index(name: &str) -> Option<usize> {
    match name.split_once(':') {
        None => (name == "cuda").then_some(0),
        Some((_, i)) => i.parse().ok(),
    }
}

impl PythonEnvironment {
    /// What PyTorch declares about a device (`name`, `total_memory`, …), by device name.
    pub fn device(&self, name: &str) -> Option<&Value> {
        self.torch
            .as_ref()?
            .get("devices")?
            .get(device_index(name)?)
    }

    pub fn torch_str(&self, key: &str) -> Option<&str> {
        self.torch.as_ref()?.get(key)?.as_str()
    }
    pub fn allocator_backend(&self) -> Option<&str> {
        self.torch_str("allocator_backend")
    }
}

/// Runs the probe with `python`; an error string says why it could not run at all.
pub fn probe(python: &Path, devices: &[String]) -> Result<PythonEnvironment, String> {
    let package =
        Package::write().map_err(|e| format!("cannot write iteragpu's Python files: {e}"))?;
    let request = serde_json::json!({ "devices": devices }).to_string();
    let output = Command::new(python)
        .args(["-m", "iteragpu.probe", &request])
        .env("PYTHONPATH", package.pythonpath())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            format!(
                "cannot run the Python interpreter `{}`: {e}; install Python 3 or choose one with --python or ITERAGPU_PYTHON",
                python.display()
            )
        })?;
    let text = String::from_utf8_lossy(&output.stdout);
    for line in text.lines() {
        if let Ok(event) = serde_json::from_str::<Value>(line)
            && event["type"] == "environment"
        {
            return serde_json::from_value(event["data"].clone())
                .map_err(|e| format!("the probe's report is malformed: {e}"));
        }
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    Err(format!(
        "`{}` did not report its environment (exit {:?}): {}",
        python.display(),
        output.status.code(),
        stderr
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join(" | ")
    ))
}

//! The Python side of the environment, as the interpreter itself reports it (`iteragpu.probe`).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::python_side::Package;
use crate::signals::{Stop, StopRequest};

/// What `python -m iteragpu.probe` reports. Kept as JSON objects where PyTorch's own structure is
/// richer than we need to type; the documented fields are below.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PythonEnvironment {
    /// `executable`, `version`, `implementation`.
    pub python: Value,
    /// Allocator and device settings from the environment (PYTORCH_CUDA_ALLOC_CONF, …); null if unset.
    pub settings: Value,
    pub transformers_version: Option<String>,
    pub peft_version: Option<String>,
    /// The installed versions of the libraries the tested-versions table names
    /// (`environment::tested`; `importlib.metadata`, the ones not installed left out). Older
    /// workers said none.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub libraries: std::collections::BTreeMap<String, String>,
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

/// How long the probe may take by default: importing torch and initialising CUDA takes seconds,
/// an interpreter that hangs must not block `environment` (or a sweep) forever.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

/// Why the probe could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot write iteragpu's Python files: {0}")]
    Files(std::io::Error),
    #[error(
        "cannot run the Python interpreter `{}`: {reason}; install Python 3 or choose one with --python or ITERAGPU_PYTHON",
        .python.display()
    )]
    Spawn { python: PathBuf, reason: String },
    #[error(
        "`{}` did not report its environment within {secs} s and was stopped; check that it starts (`{} -c \"import torch\"`), or give more time with --timeout",
        .python.display(),
        .python.display()
    )]
    Timeout { python: PathBuf, secs: u64 },
    #[error("the probe of `{}` was stopped by {}", .python.display(), .signal.name())]
    Stopped { python: PathBuf, signal: Stop },
    #[error("the probe's report is malformed: {0}")]
    Malformed(serde_json::Error),
    /// No report: how the interpreter ended and the last lines of its stderr.
    #[error("`{}` did not report its environment ({ended}): {stderr_tail}", .python.display())]
    Silent {
        python: PathBuf,
        ended: String,
        stderr_tail: String,
    },
}

/// Runs the probe with `python`; the error says why it could not run at all (including a probe
/// still silent after `timeout`, which is then killed with its whole process group).
pub fn probe(
    python: &Path,
    devices: &[String],
    timeout: Duration,
    stop: Option<&StopRequest>,
) -> Result<PythonEnvironment, ProbeError> {
    probe_seeing(python, devices, None, timeout, stop)
}

/// [`probe`] with `CUDA_VISIBLE_DEVICES` set to `visible` (`None`: ours): what PyTorch sees of
/// exactly those GPUs, in that order.
pub fn probe_seeing(
    python: &Path,
    devices: &[String],
    visible: Option<&str>,
    timeout: Duration,
    stop: Option<&StopRequest>,
) -> Result<PythonEnvironment, ProbeError> {
    let package = Package::write().map_err(ProbeError::Files)?;
    let request = serde_json::json!({ "devices": devices }).to_string();
    let mut command = Command::new(python);
    if let Some(visible) = visible {
        command.env("CUDA_VISIBLE_DEVICES", visible);
    }
    command
        .args(["-m", "iteragpu.probe", &request])
        .env("PYTHONPATH", package.pythonpath())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    crate::signals::die_with_parent(&mut command);
    let child = command.spawn().map_err(|e| ProbeError::Spawn {
        python: python.to_path_buf(),
        reason: crate::output::reason(&e),
    })?;
    let output = wait_or_kill(child, timeout, stop).map_err(|why| match why {
        Ended::Timeout => ProbeError::Timeout {
            python: python.to_path_buf(),
            secs: timeout.as_secs(),
        },
        Ended::Stopped(signal) => ProbeError::Stopped {
            python: python.to_path_buf(),
            signal,
        },
    })?;
    let text = String::from_utf8_lossy(&output.stdout);
    for line in text.lines() {
        if let Ok(event) = serde_json::from_str::<Value>(line)
            && event["type"] == "environment"
        {
            return serde_json::from_value(event["data"].clone()).map_err(ProbeError::Malformed);
        }
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    Err(ProbeError::Silent {
        python: python.to_path_buf(),
        ended: match output.status.code() {
            Some(c) => format!("exit status {c}"),
            None => "killed by a signal".to_string(),
        },
        stderr_tail: stderr
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join(" | "),
    })
}

/// Waits for `child` at most `timeout`, then kills its group: its output, or why it has none
/// (a short phrase: "timed out after 120 s", "was stopped by SIGINT").
pub fn wait_bounded(child: Child, timeout: Duration) -> Result<Output, String> {
    wait_or_kill(child, timeout, None).map_err(|why| match why {
        Ended::Timeout => format!("timed out after {} s", timeout.as_secs()),
        Ended::Stopped(signal) => format!("was stopped by {}", signal.name()),
    })
}

/// Why a probe was killed.
enum Ended {
    Timeout,
    Stopped(Stop),
}

/// Waits for `child` (in its own process group) with its output read on threads; past `timeout`,
/// or on a stop signal, the whole group is killed.
fn wait_or_kill(
    mut child: Child,
    timeout: Duration,
    stop: Option<&StopRequest>,
) -> Result<Output, Ended> {
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = child.stdout.take().map(|p| read(Box::new(p)));
    let stderr = child.stderr.take().map(|p| read(Box::new(p)));
    let started = Instant::now();
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        let why = match stop.and_then(StopRequest::get) {
            Some(signal) => Some(Ended::Stopped(signal)),
            None => (started.elapsed() > timeout).then_some(Ended::Timeout),
        };
        if let Some(why) = why {
            // SAFETY: killpg only sends a signal; a group that is gone returns ESRCH.
            unsafe {
                libc::killpg(child.id() as libc::pid_t, libc::SIGKILL);
            }
            let _ = child.wait();
            return Err(why);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let join = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
        h.and_then(|h| h.join().ok()).unwrap_or_default()
    };
    Ok(Output {
        status,
        stdout: join(stdout),
        stderr: join(stderr),
    })
}

//! What a run will really use: GPUs as the driver declares them (NVML) and the Python/PyTorch
//! side as the interpreter reports it (the probe), never guessed.

pub mod nvml;
pub mod python;
pub mod render;
pub mod tested;

use serde::{Deserialize, Serialize};

pub use nvml::DriverView;
pub use python::{PROBE_TIMEOUT, ProbeError, PythonEnvironment, device_index, probe, probe_seeing};

/// The whole environment report (`iteragpu environment --json`, and embedded in every result).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Environment {
    /// NVML's view, or null with `driver_reason`.
    pub driver: Option<DriverView>,
    pub driver_reason: Option<String>,
    /// The interpreter's view (python, torch, allocator, settings), or null with `python_reason`.
    pub python: Option<PythonEnvironment>,
    pub python_reason: Option<String>,
}

/// Reads both views: NVML's, and the interpreter's through the probe.
pub fn collect(
    devices: &[String],
    python: Option<&std::path::Path>,
    timeout: std::time::Duration,
) -> Environment {
    let (driver, driver_reason) = match nvml::open() {
        Ok(n) => (Some(nvml::read(&n)), None),
        Err(reason) => (None, Some(reason)),
    };
    let interpreter = crate::python_side::interpreter(python);
    let (python, python_reason) = match probe(&interpreter, devices, timeout, None) {
        Ok(env) => (Some(env), None),
        Err(reason) => (None, Some(reason.to_string())),
    };
    Environment {
        driver,
        driver_reason,
        python,
        python_reason,
    }
}

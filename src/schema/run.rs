//! What every run document shares: who ran what (`Identity`) and how it ended (`RunStatus`).
//! Measurements, their events and predictions all hold these, so they sit below all three.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How a run, or one of its phases, ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[derive(strum::Display, strum::AsRefStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum RunStatus {
    /// Every phase completed.
    Ok,
    /// A phase raised an exception (out of memory among others); the worker reported it.
    Failed,
    /// The worker was killed by a signal or exited unexpectedly.
    Crashed,
    /// Stopped by the CLI after `--timeout`.
    Timeout,
    /// Stopped by the user (Ctrl-C, SIGINT).
    Interrupted,
    /// Stopped by SIGTERM or SIGHUP sent to iteragpu (`stop_signal` says which).
    Terminated,
}

impl RunStatus {
    pub fn is_ok(self) -> bool {
        self == RunStatus::Ok
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Identity {
    /// Built-in workload name (`dense`, …) or `script`.
    pub workload: String,
    /// `sha256:` of the Python code that measured; for a script, of the tool's code, the
    /// script's bytes and its arguments together (`python_side::script_code_hash`).
    pub code_hash: String,
    /// `sha256:` of the script file alone (`--script` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script_sha256: Option<String>,
    pub seed: Option<u64>,
    /// What the workload declared about itself (model, revision, architecture, parameters…).
    pub declared: Map<String, Value>,
}

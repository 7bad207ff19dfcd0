//! Exit statuses, as documented in the README ("Exit codes"): what a script calling iteragpu can
//! rely on; and [`CliError`], the one error a command returns (uv's pattern: a command ends with
//! `Result<ExitStatus, CliError>`, `lib.rs` prints the error once and exits with its status).

use std::fmt;

/// How the process ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// Success (a sweep that found out-of-memory frontiers also succeeded: those are findings).
    Ok = 0,
    /// Bad input or an internal error: nothing was run, nothing was overwritten.
    BadInput = 1,
    /// PyTorch or a GPU is missing: nothing was measured and no result file was written.
    MissingRuntime = 2,
    /// The workload failed, crashed, timed out or was interrupted: the results so far are kept.
    WorkloadFailed = 3,
    /// The network failed: a server the command needs (the Hub for `--model ORG/NAME`) did not
    /// answer in its tries, and no cached copy could stand in. Nothing was run; the same command
    /// may succeed later, which is why a script is told apart from bad input.
    Network = 4,
}

impl From<ExitStatus> for std::process::ExitCode {
    fn from(status: ExitStatus) -> Self {
        std::process::ExitCode::from(status as u8)
    }
}

/// What a command could not do: the message, printed once as `error: …`, and the exit status.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CliError {
    message: String,
    status: ExitStatus,
}

impl CliError {
    pub fn bad_input(message: impl fmt::Display) -> CliError {
        CliError {
            message: message.to_string(),
            status: ExitStatus::BadInput,
        }
    }

    pub fn missing_runtime(message: impl fmt::Display) -> CliError {
        CliError {
            message: message.to_string(),
            status: ExitStatus::MissingRuntime,
        }
    }

    /// `what`, then the error and its causes: "cannot write to standard output: Broken pipe".
    pub fn because(what: impl fmt::Display, err: &dyn std::error::Error) -> CliError {
        CliError::bad_input(format!("{what}: {}", chain(err)))
    }

    pub fn status(&self) -> ExitStatus {
        self.status
    }
}

/// An error and its causes, joined by ": " as `anyhow` writes them with `{:#}`.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

impl From<anyhow::Error> for CliError {
    fn from(err: anyhow::Error) -> Self {
        CliError::bad_input(format!("{err:#}"))
    }
}

/// A domain error that reaches a command is bad input, worded by the error itself.
macro_rules! bad_input_from {
    ($($error:ty),* $(,)?) => {
        $(impl From<$error> for CliError {
            fn from(err: $error) -> Self {
                CliError::bad_input(chain(&err))
            }
        })*
    };
}

bad_input_from!(
    std::io::Error,
    serde_json::Error,
    crate::output::OutputError,
    crate::schema::load::InputError,
    crate::ledger::LedgerError,
    crate::schema::target::TargetError,
    crate::estimate::kv_cache::CacheError,
    crate::estimate::EstimateError,
    crate::model::ModelError,
    crate::model::safetensors::HeaderError,
);

/// The Hub out of reach is the network's failure (exit 4); its refusals (gated, private, missing),
/// a bad answer or the cache are the input's (exit 1).
impl From<crate::model::hub::HubError> for CliError {
    fn from(err: crate::model::hub::HubError) -> Self {
        let status = match err {
            crate::model::hub::HubError::Unreachable { .. } => ExitStatus::Network,
            _ => ExitStatus::BadInput,
        };
        CliError {
            message: chain(&err),
            status,
        }
    }
}

/// The interpreter cannot be started: PyTorch is missing as far as the user can tell.
impl From<crate::workload::process::StartError> for CliError {
    fn from(err: crate::workload::process::StartError) -> Self {
        use crate::workload::process::StartError;
        match err {
            StartError::Interpreter { .. } => CliError::missing_runtime(err),
            StartError::Files(_) => CliError::bad_input(chain(&err)),
        }
    }
}

//! A command line as typed after `--` (`python -m pkg.train`, `torchrun --nproc-per-node 8
//! train.py`, `accelerate launch …`, `deepspeed …`, a console script such as `trl sft …`),
//! resolved to the entry point each rank would run. The launchers' own parsers do it, in the
//! user's interpreter (`python/iteragpu/launch.py`); this side runs it, bounded, and reads its
//! one JSON line. Nothing of the user's code is imported there.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Deserialize;

use crate::python_side::Package;
use crate::schema::spec::ScriptEntry;

/// How long the launchers' parsers may take (importing torch or accelerate, cold).
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(120);

/// What the command runs, for rank 0 (every rank runs the same entry point).
#[derive(Clone, Debug, Deserialize)]
pub struct Launched {
    /// `python`, `torchrun`, `accelerate`, `deepspeed` or `console`.
    pub launcher: String,
    /// The file that runs (the script, or the module's file).
    pub script: PathBuf,
    pub entry: Option<ScriptEntry>,
    pub args: Vec<String>,
    /// The ranks the launcher starts; None for one process.
    pub world_size: Option<u64>,
    #[serde(default)]
    pub notes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Answer {
    Refused { error: String },
    Launched(Launched),
}

/// Resolves `command` with `python`'s launchers; the message says why not (naming the command
/// and the fix) when it cannot be.
pub fn resolve(python: &Path, command: &[String]) -> Result<Launched, String> {
    let shown = command.join(" ");
    let package = Package::write().map_err(|e| format!("-- {shown}: {e}"))?;
    let mut cmd = Command::new(python);
    cmd.args(["-m", "iteragpu.launch", "--"])
        .args(command)
        .env("PYTHONPATH", package.pythonpath())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    crate::signals::die_with_parent(&mut cmd);
    let child = cmd.spawn().map_err(|e| {
        format!(
            "-- {shown}: {} cannot be started to resolve the command ({}); give --python PATH",
            python.display(),
            crate::output::reason(&e)
        )
    })?;
    let output =
        crate::environment::python::wait_bounded(child, RESOLVE_TIMEOUT).map_err(|why| {
            format!(
                "-- {shown}: resolving the command with {} {why}",
                python.display()
            )
        })?;
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().rev().find(|l| l.trim_start().starts_with('{'));
    match line.map(serde_json::from_str::<Answer>) {
        Some(Ok(Answer::Launched(l))) => Ok(l),
        Some(Ok(Answer::Refused { error })) => Err(format!("-- {shown}: {error}")),
        _ => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
            Err(format!(
                "-- {shown}: {} could not resolve the command ({}): {}",
                python.display(),
                output.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ))
        }
    }
}

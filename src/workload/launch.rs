//! A command line as typed after `--` (`python -m pkg.train`, `torchrun --nproc-per-node 8
//! train.py`, `accelerate launch …`, `deepspeed …`, a console script such as `trl sft …`),
//! resolved to the entry point each rank would run. The launchers' own parsers do it, in the
//! user's interpreter (`python/iteragpu/launch.py`); this side runs it, bounded, and reads its
//! one JSON line. Nothing of the user's code is imported there.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Deserialize;

use crate::python_side::Package;
use crate::schema::spec::ScriptEntry;
use crate::workload::options::RunOptions;

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
    /// What the launcher's own code sets for a rank (rank 0's RANK and LOCAL_RANK).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// DeepSpeed's launcher passes `--local_rank=N` before the script's arguments.
    #[serde(default)]
    pub local_rank_arg: bool,
    /// One node's share of a multi-rank command, which `measure` runs under torchrun.
    #[serde(default)]
    pub nproc_per_node: Option<u64>,
    #[serde(default)]
    pub nnodes: Option<u64>,
    #[serde(default)]
    pub node_rank: Option<u64>,
    #[serde(default)]
    pub rdzv_endpoint: Option<String>,
    #[serde(default)]
    pub rdzv_id: Option<String>,
    #[serde(default)]
    pub notes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Answer {
    Refused { error: String },
    Launched(Box<Launched>),
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
        Some(Ok(Answer::Launched(l))) => Ok(*l),
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

/// The options of the torchrun job that runs a command's ranks for real (`measure`): its node's
/// share as the launcher's own parser gave it, beside the options given (which win for the
/// multi-node ones). None when the command starts one process, or when `--nproc-per-node` was
/// given and says the same; a different count is refused.
pub fn node_options(args: &RunOptions, l: &Launched) -> Result<Option<RunOptions>, String> {
    let Some(world) = l.world_size.filter(|n| *n > 1) else {
        return Ok(None);
    };
    let nproc = l.nproc_per_node.unwrap_or(world);
    let nnodes = l.nnodes.unwrap_or(1);
    if let Some(n) = args.nproc_per_node {
        if n != nproc || args.nnodes.unwrap_or(1) != nnodes {
            return Err(format!(
                "--nproc-per-node {n} and -- {} (which starts {nnodes} node(s) × {nproc} ranks) disagree: drop --nproc-per-node (the command's own count is run)",
                args.script_args.join(" ")
            ));
        }
        return Ok(None);
    }
    let mut node = args.clone();
    node.nproc_per_node = Some(nproc);
    node.nnodes = Some(nnodes);
    node.node_rank = args.node_rank.or(l.node_rank);
    node.rdzv_endpoint = args.rdzv_endpoint.clone().or(l.rdzv_endpoint.clone());
    node.rdzv_id = args.rdzv_id.clone().or(l.rdzv_id.clone());
    Ok(Some(node))
}

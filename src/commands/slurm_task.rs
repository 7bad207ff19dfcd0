//! `iteragpu slurm-task ARRAY_DIR` (hidden): what a task of `sweep --executor slurm` runs on its
//! node. It plans the sweep again from the command as typed (`sweep.json`), takes the cell of its
//! index (`cells.json`, `SLURM_ARRAY_TASK_ID`), runs it through the runner a local sweep uses
//! (measured in a fresh worker, or predicted), and writes the trial into the array's folder,
//! where the sweep reads it back.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;

use crate::cli::{Command, SlurmTaskArgs};
use crate::exit::{CliError, ExitStatus};
use crate::measure::trial::ProcessRunner;
use crate::progress::NoProgress;
use crate::schema::series::SweepMode;
use crate::schema::torchrun::Rendezvous;
use crate::signals;
use crate::sweep::plan::{Cell, SweepPlan};
use crate::sweep::runner::measured::Measured;
use crate::sweep::runner::predicted::Predicted;
use crate::sweep::runner::slurm::script::RDZV_ENV;
use crate::sweep::runner::slurm::{CellKey, SweepCommand, TaskOutcome, outcome_path};
use crate::sweep::runner::{Ran, Runner};

pub fn run(args: &SlurmTaskArgs, _out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let stop = signals::stop_request();
    let dir = &args.array_dir;
    let task: usize = std::env::var("SLURM_ARRAY_TASK_ID")
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            CliError::bad_input(
                "slurm-task runs as a task of a Slurm job array (SLURM_ARRAY_TASK_ID is not set)",
            )
        })?;
    let command: SweepCommand = read(&dir.join("../sweep.json"))?;
    let keys: Vec<CellKey> = read(&dir.join("cells.json"))?;
    let key = keys.get(task).ok_or_else(|| {
        CliError::bad_input(format!("task {task}: cells.json has {} cells", keys.len()))
    })?;
    let crate::cli::Cli {
        command: Command::Sweep(sweep),
        ..
    } = crate::cli::Cli::try_parse_from(&command.argv)
        .map_err(|e| CliError::bad_input(e.to_string()))?
    else {
        return Err(CliError::bad_input("sweep.json holds no sweep command"));
    };
    let plan = super::sweep::plan(&sweep)?;
    let mut cell = find(&plan, key)?;
    let node = node_share(&mut cell)?;
    let began = Instant::now();
    let ran = if plan.predict {
        Predicted::for_card(&plan, stop)?.run(&cell, &NoProgress)?
    } else {
        let process = ProcessRunner::new(stop);
        Measured::new(&process).run(&cell, &NoProgress)?
    };
    let ran = match ran {
        Ran::Trial(mut t) => {
            t.duration_s = began.elapsed().as_secs_f64();
            Ran::Trial(t)
        }
        other => other,
    };
    let path = match node {
        0 => outcome_path(dir, task),
        n => dir.join(format!("task-{task}.node-{n}.outcome.json")),
    };
    let tmp = path.with_extension("json.part");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&TaskOutcome::from(ran))?)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| CliError::bad_input(format!("cannot write {}: {e}", path.display())))?;
    Ok(ExitStatus::Ok)
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, CliError> {
    let bytes = std::fs::read(path)
        .map_err(|e| CliError::bad_input(format!("cannot read {}: {e}", path.display())))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| CliError::bad_input(format!("{}: {e}", path.display())))
}

/// The cell `key` names: a frontier's by its value, the others' among the plan's cells.
fn find(plan: &SweepPlan, key: &CellKey) -> Result<Cell> {
    if plan.mode == SweepMode::Frontier {
        let variable = plan.vary[0].variable;
        let value = key
            .values
            .get(variable.name())
            .and_then(|v| v.as_u64())
            .with_context(|| format!("the cell names no {variable}"))?;
        return plan.cell_at(variable, value);
    }
    for cell in plan.cells()? {
        let cell = cell?;
        if cell.values == key.values && cell.load == key.load {
            return Ok(cell);
        }
    }
    bail!("the sweep has no cell {:?} {:?}", key.values, key.load)
}

/// This node's share of a torchrun trial over several nodes (its rank from `SLURM_NODEID`, the
/// rendezvous the script found on the first node); 0 for any other trial.
fn node_share(cell: &mut Cell) -> Result<u64> {
    let Some(t) = cell.plan.torchrun.as_mut().filter(|t| t.nnodes > 1) else {
        return Ok(0);
    };
    let rank: u64 = std::env::var("SLURM_NODEID")
        .ok()
        .and_then(|v| v.parse().ok())
        .context("a torchrun trial over several nodes runs under srun (SLURM_NODEID is not set)")?;
    let endpoint = std::env::var(RDZV_ENV).with_context(|| format!("{RDZV_ENV} is not set"))?;
    let id = std::env::var("SLURM_JOB_ID").unwrap_or_else(|_| "iteragpu".into());
    t.node_rank = rank;
    t.rendezvous = Rendezvous::C10d { endpoint, id };
    Ok(rank)
}

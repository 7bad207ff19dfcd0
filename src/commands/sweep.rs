//! `iteragpu sweep`: arguments → a validated sweep plan → trials in fresh workers (measured, or
//! with `--predict` predicted on the CPU for a card) → the series
//! (rewritten after each trial, never overwriting a file) → the table or the JSON.

use std::io::Write;

use super::{options, progress};
use crate::cli::{ClusterArgs, SweepArgs};
use crate::exit::{CliError, ExitStatus};
use crate::measure::trial::ProcessRunner;
use crate::schema::series::Writer;
use crate::signals;
use crate::sweep::driver::{self, Finish};
use crate::sweep::plan::SweepPlan;
use crate::sweep::render;
use crate::sweep::resume::{self, Resumed};
use crate::sweep::runner::Runner;
use crate::sweep::runner::measured::Measured;
use crate::sweep::runner::predicted::Predicted;
use crate::sweep::runner::slurm::{self, Executor, Slurm, SlurmOptions, SweepCommand};

pub fn run(args: &SweepArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    // Handlers first: a signal from here on is recorded, never the default sudden death.
    let stop = signals::stop_request();
    let plan = plan(args)?;
    let m = &args.run;
    let output_path = super::required_output(m)?;
    let slurm = slurm_options(&args.cluster)?;
    if slurm.is_some() && plan.gpus.is_some() {
        refuse!(
            "--gpus picks this machine's GPUs; under --executor slurm each task gets its GPU from Slurm: ask with --gres gpu:1"
        );
    }
    let writer = Writer::new(output_path)?;
    let job_dir = slurm::job_dir_for(output_path);
    if let Some(options) = &slurm {
        if std::fs::symlink_metadata(&job_dir).is_ok() {
            refuse!(
                "the job folder {} already exists; iteragpu never reuses one: choose another --output",
                job_dir.display()
            );
        }
        options.check()?;
    }
    let display = progress::trials(m.json);
    // The local runner: each trial measured (with a frontier's hint predicted for this
    // machine's card), or with `--predict` predicted on the CPU for the target card. Under
    // `--executor slurm` each task runs it on its node.
    let process = ProcessRunner::new(stop);
    let measured;
    let predicted;
    let (local, hint): (&dyn Runner, _) = if plan.predict {
        predicted = Predicted::for_card(&plan, stop)?;
        (&predicted, None)
    } else {
        // With --gpus, one trial per GPU at once, the GPUs named and checked before any trial.
        measured = match &plan.gpus {
            None => Measured::new(&process),
            Some(gpus) => Measured::on_gpus(
                &process,
                resolve(gpus, &plan.base.python, stop, plan.allow_mixed)?,
            ),
        };
        (&measured, Some(Predicted::for_device(stop)))
    };
    let cluster = match slurm {
        Some(options) => Some(Slurm::new(
            local.kind(),
            local.protocol(&plan),
            options,
            job_dir,
            SweepCommand {
                argv: std::env::args().collect(),
                cwd: std::env::current_dir()?,
                executable: std::env::current_exe()?,
            },
            stop,
        )?),
        None => None,
    };
    let runner: &dyn Runner = match &cluster {
        Some(s) => s,
        None => local,
    };
    let resumed = match &args.cluster.resume {
        Some(path) => {
            let r = Resumed::new(runner, resume::read(path, &plan, runner)?);
            crate::say!(
                "resuming {}: {} trial(s) kept (ok, out of memory or unpredictable), the others run again",
                path.display(),
                r.kept()
            );
            Some(r)
        }
        None => None,
    };
    let runner: &dyn Runner = match &resumed {
        Some(r) => r,
        None => runner,
    };
    let finish = driver::run(
        &plan,
        runner,
        hint.as_ref().map(|h| h as &dyn Runner),
        writer,
        &*display,
    );
    display.finish();
    let (series, moved) = match finish? {
        Finish::Unavailable(reason) if plan.predict => {
            return Err(CliError::missing_runtime(format!(
                "nothing predicted: {reason}"
            )));
        }
        Finish::Unavailable(reason) => {
            return Err(super::nothing_measured(&reason, "series"));
        }
        Finish::Done { series, moved } => (series, moved),
    };
    let path = moved.as_ref().map_or(output_path, |(_, p)| p.as_path());
    let text = super::json_or(m.json, &series, || render::table(&series, path))?;
    super::print_saved(out, &text, "series", path);
    if let Some((why, elsewhere)) = moved {
        refuse!(
            "{why}; the series was saved to {} instead",
            elsewhere.display()
        );
    }
    Ok(if driver::failed(&series) {
        ExitStatus::WorkloadFailed
    } else {
        ExitStatus::Ok
    })
}

/// The plan `iteragpu sweep ARGS` runs: the sweep driver's tests describe sweeps as a user types
/// them.
#[cfg(test)]
pub(crate) fn plan_of(args: &[&str]) -> anyhow::Result<SweepPlan> {
    use clap::Parser;
    let argv = ["iteragpu", "sweep"].iter().chain(args);
    let crate::cli::Command::Sweep(args) = crate::cli::Cli::try_parse_from(argv)?.command else {
        unreachable!("parsed as sweep")
    };
    plan(&args)
}

/// `--executor slurm`'s options; the Slurm options without it are refused.
fn slurm_options(c: &ClusterArgs) -> Result<Option<SlurmOptions>, CliError> {
    let options = SlurmOptions {
        partition: c.partition.clone(),
        gres: c.gres.clone(),
        time: c.time.clone(),
        account: c.account.clone(),
        sbatch_args: c.sbatch_arg.clone(),
    };
    match c.executor {
        Executor::Slurm => Ok(Some(options)),
        Executor::Local if options.args().is_empty() => Ok(None),
        Executor::Local => refuse!(
            "{} apply to Slurm's sbatch: add --executor slurm (the trials run on this machine otherwise)",
            options.args().join(" ")
        ),
    }
}

/// The GPUs of `--gpus`, named and of one model (unless `--allow-mixed`).
fn resolve(
    gpus: &crate::measure::gpus::Gpus,
    python: &std::path::Path,
    stop: &'static signals::StopRequest,
    allow_mixed: bool,
) -> anyhow::Result<crate::schema::series::Devices> {
    let named = crate::measure::gpus::resolve(gpus, python, stop)?;
    crate::measure::gpus::devices(named, allow_mixed)
}

/// The sweep the arguments ask for, validated.
pub(crate) fn plan(args: &SweepArgs) -> anyhow::Result<SweepPlan> {
    let (sweep, mut base) = options::sweep(args)?;
    // Under Slurm a torchrun trial over several nodes meets on its allocation's first node,
    // which only the task knows: the plan holds a stand-in that each task replaces.
    if args.cluster.executor == Executor::Slurm
        && base.nnodes.is_some_and(|n| n > 1)
        && base.rdzv_endpoint.is_none()
        && base.rdzv_id.is_none()
    {
        base.rdzv_endpoint = Some(slurm::script::RDZV_STANDIN.into());
        base.rdzv_id = Some("slurm".into());
    }
    SweepPlan::new(&sweep, &base)
}

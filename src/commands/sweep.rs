//! `iteragpu sweep`: arguments → a validated sweep plan → trials in fresh workers (measured, or
//! with `--predict` predicted on the CPU for a card) → the series
//! (rewritten after each trial, never overwriting a file) → the table or the JSON.

use std::io::Write;

use super::{options, progress};
use crate::cli::SweepArgs;
use crate::exit::{CliError, ExitStatus};
use crate::measure::trial::ProcessRunner;
use crate::schema::series::Writer;
use crate::signals;
use crate::sweep::driver::{self, Finish};
use crate::sweep::plan::SweepPlan;
use crate::sweep::render;
use crate::sweep::runner::measured::Measured;
use crate::sweep::runner::predicted::Predicted;

pub fn run(args: &SweepArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    // Handlers first: a signal from here on is recorded, never the default sudden death.
    let stop = signals::stop_request();
    let plan = plan(args)?;
    let m = &args.run;
    let output_path = super::required_output(m)?;
    let writer = Writer::new(output_path)?;
    let display = progress::trials(m.json);
    let finish = if plan.predict {
        // `--predict`: each trial predicted on the CPU, for the target card.
        Predicted::for_card(&plan, stop)
            .and_then(|predicted| driver::run(&plan, &predicted, None, writer, &*display))
    } else {
        // Measured, with a frontier's hint predicted for this machine's card; with --gpus, one
        // trial per GPU at once, the GPUs named and checked before any trial.
        let process = ProcessRunner::new(stop);
        let hint = Predicted::for_device(stop);
        let measured = match &plan.gpus {
            None => Ok(Measured::new(&process)),
            Some(gpus) => resolve(gpus, &plan.base.python, stop, plan.allow_mixed)
                .map(|devices| Measured::on_gpus(&process, devices)),
        };
        measured.and_then(|measured| driver::run(&plan, &measured, Some(&hint), writer, &*display))
    };
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
fn plan(args: &SweepArgs) -> anyhow::Result<SweepPlan> {
    let (sweep, base) = options::sweep(args)?;
    SweepPlan::new(&sweep, &base)
}

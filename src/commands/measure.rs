//! `iteragpu measure`: arguments → a validated plan and its prediction → one trial in a fresh
//! worker → the result file (never overwritten) → the table or the JSON.

use anyhow::{Context, Result};
use std::io::{IsTerminal, Write};
use std::time::Duration;

use crate::cli::MeasureArgs;
use crate::measure::plan::MeasurePlan;
use crate::measure::render;
use crate::measure::trial::{ProcessRunner, TrialOutcome, TrialRunner};
use crate::measure::worker_process::StartError;
use crate::{exit, output, prediction, signals};

pub fn run(args: &MeasureArgs, out: &mut dyn Write) -> Result<u8> {
    let plan = MeasurePlan::from_args(args)?;
    let prediction = prediction::for_plan(&plan)?;
    let trial = plan.trial();
    output::check_new(&args.output)?;
    // A spinner with the current phase, only on a terminal and never with --json.
    let bar = (std::io::stderr().is_terminal() && !args.json).then(|| {
        let bar =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {elapsed} {prefix}")
                .expect("valid template"),
        );
        bar.set_prefix("starting the worker");
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    });
    let outcome = ProcessRunner::new(signals::interrupted()).run(&trial, bar.as_ref());
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let outcome = match outcome {
        Ok(o) => o,
        Err(e @ StartError::Interpreter { .. }) => {
            eprintln!("error: {e}");
            return Ok(exit::MISSING_RUNTIME);
        }
        Err(e) => return Err(e.into()),
    };
    let mut result = match outcome {
        TrialOutcome::Unavailable { reason } => {
            eprintln!("error: nothing measured: {reason}");
            eprintln!("(no result file was written; run `iteragpu environment` for details)");
            return Ok(exit::MISSING_RUNTIME);
        }
        TrialOutcome::Measured(result) => result,
    };
    prediction.attach(&mut result);
    let path = output::write_new_or_sibling(&args.output, &serde_json::to_vec_pretty(&result)?)?;
    let text = if args.json {
        serde_json::to_string_pretty(&*result)? + "\n"
    } else {
        render::table(&result, &path)
    };
    out.write_all(text.as_bytes())
        .context("cannot write to standard output")?;
    Ok(if result.status.is_ok() {
        exit::OK
    } else {
        exit::WORKLOAD_FAILED
    })
}

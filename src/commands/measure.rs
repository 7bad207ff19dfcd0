//! `iteragpu measure`: arguments → a validated plan and its prediction → one trial in a fresh
//! worker → the result file (never overwritten) → the table or the JSON.

use anyhow::Result;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use crate::cli::MeasureArgs;
use crate::measure::history::HistoryMode;
use crate::measure::plan::MeasurePlan;
use crate::measure::render;
use crate::measure::result::MeasureResult;
use crate::measure::timeline;
use crate::measure::trial::{ProcessRunner, TrialOutcome, TrialRunner};
use crate::measure::worker_process::StartError;
use crate::output::{self, Saved};
use crate::prediction::check;
use crate::prediction::run::{self, Outcome};
use crate::signals::StopRequest;
use crate::{exit, prediction, signals};

pub fn run(args: &MeasureArgs, out: &mut dyn Write) -> Result<u8> {
    // Handlers first: a signal from here on is recorded, never the default sudden death.
    let stop = signals::stop_request();
    let plan = MeasurePlan::from_args(args)?;
    let kv_estimates = prediction::kv_estimates(&plan)?;
    let mut trial = plan.trial();
    output::check_new(&args.output)?;
    // --timeline: the worker dumps the allocator's snapshot into a temporary file next to the
    // result; the CLI then moves it to RESULT.snapshot.pickle, never over an existing file.
    let snapshot = match &mut trial.spec.history {
        Some(h) if h.mode == HistoryMode::Timeline => {
            let staged = timeline::Staged::new(&args.output)?;
            h.snapshot = Some(staged.temporary().to_path_buf());
            Some(staged)
        }
        _ => None,
    };
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
    let outcome = ProcessRunner::new(stop).run(&trial, bar.as_ref());
    let outcome = match outcome {
        Ok(o) => o,
        Err(e @ StartError::Interpreter { .. }) => {
            if let Some(bar) = &bar {
                bar.finish_and_clear();
            }
            eprintln!("error: {e}");
            return Ok(exit::MISSING_RUNTIME);
        }
        Err(e) => return Err(e.into()),
    };
    let mut result = match outcome {
        TrialOutcome::Unavailable { reason } => {
            if let Some(bar) = &bar {
                bar.finish_and_clear();
            }
            eprintln!("error: nothing measured: {reason}");
            eprintln!("(no result file was written; run `iteragpu environment` for details)");
            return Ok(exit::MISSING_RUNTIME);
        }
        TrialOutcome::Measured(result) => result,
    };
    check::kv_cache(&mut result, &kv_estimates);
    if let Some(staged) = snapshot {
        timeline::keep(staged, &mut result);
    }
    if args.no_prediction {
        result
            .notes
            .push("no prediction: skipped (--no-prediction)".into());
    } else if stop.get().is_none() {
        predict_next_to(&plan, &mut result, stop, bar.as_ref());
    }
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let saved = output::save_result(&args.output, &serde_json::to_vec_pretty(&result)?)?;
    let text = if args.json {
        serde_json::to_string_pretty(&*result)? + "\n"
    } else {
        render::table(&result, saved.path())
    };
    // The result is saved: a closed or full standard output costs only the table.
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        eprintln!(
            "warning: cannot write to standard output ({}); the result is in {}",
            output::reason(&e),
            saved.path().display()
        );
    }
    Ok(match saved {
        Saved::Here(_) | Saved::Sibling(_) if result.status.is_ok() => exit::OK,
        Saved::Here(_) | Saved::Sibling(_) => exit::WORKLOAD_FAILED,
        Saved::Elsewhere { path, why } => {
            eprintln!(
                "error: {why}; the result was saved to {} instead",
                path.display()
            );
            exit::BAD_INPUT
        }
    })
}

/// The prediction for the measured card, run after the measurement (on the CPU, every GPU hidden
/// from it), compared phase by phase; a note says why when there is none.
fn predict_next_to(
    plan: &MeasurePlan,
    result: &mut MeasureResult,
    stop: &'static StopRequest,
    bar: Option<&indicatif::ProgressBar>,
) {
    let Some(target) = prediction::measured_target(result) else {
        result.notes.push(
            "no prediction: PyTorch did not report the device's name, compute capability and total memory".into(),
        );
        return;
    };
    if let Some(bar) = bar {
        bar.set_prefix("predicting the same workload on the CPU");
    }
    match run::predict(plan, &target, stop, bar) {
        // Stopped by a signal or the timeout: its first phases are not the workload's prediction.
        Ok(Outcome::Predicted(doc)) if doc.stopped() => {
            result.notes.push(format!(
                "no prediction: {}",
                doc.failure.as_deref().unwrap_or(&doc.status)
            ));
        }
        Ok(Outcome::Predicted(doc)) => {
            check::predictions(result, &doc, 0);
            result.prediction = Some(doc);
        }
        Ok(Outcome::Unavailable(reason)) => {
            result.notes.push(format!("no prediction: {reason}"));
        }
        Err(e) => result.notes.push(format!("no prediction: {e}")),
    }
}

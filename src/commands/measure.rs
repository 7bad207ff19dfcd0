//! `iteragpu measure`: arguments → a validated plan and its prediction → one trial in a fresh
//! worker → the result file (never overwritten) → the table or the JSON.

use std::io::Write;

use super::{options, progress};
use crate::cli::MeasureArgs;
use crate::exit::{CliError, ExitStatus};
use crate::measure::build::TrialOutcome;
use crate::measure::render;
use crate::measure::timeline;
use crate::measure::trial::{ProcessRunner, TrialRunner};
use crate::output::{self, Saved};
use crate::prediction::run::{self, Outcome};
use crate::progress::Progress;
use crate::schema::check;
use crate::schema::history::HistoryMode;
use crate::schema::measure::MeasureResult;
use crate::signals::StopRequest;
use crate::workload::plan::RunPlan;
use crate::{prediction, signals};

pub fn run(args: &MeasureArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    // Handlers first: a signal from here on is recorded, never the default sudden death.
    let stop = signals::stop_request();
    let output_path = super::required_output(&args.run)?;
    let plan = RunPlan::new(&options::measure(args)?)?;
    let kv_estimates = prediction::kv_estimates(&plan)?;
    let mut trial = plan.trial();
    output::check_new(output_path)?;
    // --timeline: the worker dumps the allocator's snapshot into a temporary file next to the
    // result; the CLI then moves it to RESULT.snapshot.pickle, never over an existing file.
    let snapshot = match &mut trial.spec.history {
        Some(h) if h.mode == HistoryMode::Timeline => {
            let staged = timeline::Staged::new(output_path)?;
            h.snapshot = Some(staged.temporary().to_path_buf());
            Some(staged)
        }
        _ => None,
    };
    // A spinner with the current phase, only on a terminal and never with --json; cleared
    // before an error is printed.
    let display = progress::spinner(args.run.json, "starting the worker");
    let mut result = match ProcessRunner::new(stop).run(&trial, &*display)? {
        TrialOutcome::Unavailable { reason } => {
            return Err(super::nothing_measured(&reason, "result"));
        }
        TrialOutcome::Measured(result) => result,
    };
    check::kv_cache(&mut result, &kv_estimates);
    result.notes.extend(plan.launch_notes.iter().cloned());
    result.notes.extend(plan.precision_note());
    result.notes.extend(plan.requests_note());
    result.notes.extend(plan.packed().map(|p| p.note()));
    if let Some(staged) = snapshot {
        timeline::keep(staged, &mut result);
    }
    if args.no_prediction {
        result
            .notes
            .push("no prediction: skipped (--no-prediction)".into());
    } else if stop.get().is_none() {
        predict_next_to(&plan, &mut result, stop, &*display);
    }
    display.finish();
    let saved = output::save_result(output_path, &serde_json::to_vec_pretty(&result)?)?;
    let text = super::json_or(args.run.json, &*result, || {
        render::table(&result, saved.path())
    })?;
    super::print_saved(out, &text, "result", saved.path());
    match saved {
        Saved::Here(_) | Saved::Sibling(_) if result.status.is_ok() => Ok(ExitStatus::Ok),
        Saved::Here(_) | Saved::Sibling(_) => Ok(ExitStatus::WorkloadFailed),
        Saved::Elsewhere { path, why } => {
            refuse!("{why}; the result was saved to {} instead", path.display())
        }
    }
}

/// The prediction for the measured card, run after the measurement (on the CPU, every GPU hidden
/// from it), compared phase by phase; a note says why when there is none.
fn predict_next_to(
    plan: &RunPlan,
    result: &mut MeasureResult,
    stop: &'static StopRequest,
    display: &dyn Progress,
) {
    let Some(target) = prediction::measured_target(result) else {
        result.notes.push(
            "no prediction: PyTorch did not report the device's name, compute capability and total memory".into(),
        );
        return;
    };
    display.set_stage("predicting the same workload on the CPU");
    match run::predict(plan, &target, stop, display) {
        // Stopped by a signal or the timeout: its first phases are not the workload's prediction.
        Ok(Outcome::Predicted(doc)) if doc.stopped() => {
            result.notes.push(format!(
                "no prediction: {}",
                doc.failure.as_deref().unwrap_or(doc.status.as_ref())
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

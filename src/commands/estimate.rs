//! `iteragpu estimate`: arguments → the plan's options (`options`) → a validated request
//! (`estimate::plan`) → terms → table or JSON.

mod options;

use std::io::Write;

use crate::cli::{EstimateArgs, EstimateMode, EstimateWorkload};
use crate::estimate::plan::{self, ServingOptions};
use crate::estimate::serving::{ActivationPeak, Engine, ProfileShape};
use crate::estimate::{self, Estimate};
use crate::exit::{CliError, ExitStatus};
use crate::prediction::serve_profile::{self, ProfileError};

pub fn run(args: &EstimateArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let (est, json) = match (&args.mode, args.serve.serve) {
        (Some(EstimateMode::Serve(s)), _) => (serve(&options::serving(s)?)?, s.json),
        (Some(EstimateMode::Vision(v)), _) => (
            estimate::estimate(&plan::vision_plan(&options::vision(v)?)?)?,
            v.json,
        ),
        (None, Some(engine)) => {
            if let Some(method) = args.quantize.quantize {
                refuse!(
                    "--quantize {method} is estimated for a language model's own load, not for a serving plan (the engine's planner reads the checkpoint's own quantization_config): drop --quantize"
                );
            }
            let est = serve(&options::legacy_serving(args, engine)?)?;
            (with_note(est, &serve_note(engine)), args.json)
        }
        (None, None) if args.vision.workload == Some(EstimateWorkload::Vision) => {
            if let Some(method) = args.quantize.quantize {
                refuse!(
                    "--quantize {method} is estimated for a language model's own load (weights, training, KV cache), not for --workload vision: drop --quantize"
                );
            }
            let request = plan::vision_plan(&options::legacy_vision(args)?)?;
            let note = "`estimate --workload vision` is spelled `estimate vision` now (its own options and help); the old spelling still estimates, until the next release";
            (with_note(estimate::estimate(&request)?, note), args.json)
        }
        (None, None) => (
            estimate::estimate(&plan::plan(&options::estimate(args)?)?)?,
            args.json,
        ),
    };
    let text = if json {
        estimate::render::json(&est)
    } else {
        crate::output::terminal_safe(&estimate::render::table(&est)).into_owned()
    };
    out.write_all(text.as_bytes())
        .map_err(|e| CliError::because("cannot write the estimate to standard output", &e))?;
    // A serving engine predicted to refuse to start is an answer, printed in full, with the
    // status `predict` gives a workload predicted not to fit the card (README, "Exit codes").
    if est.serving.as_ref().is_some_and(|s| !s.start.starts) {
        return Ok(ExitStatus::WorkloadFailed);
    }
    Ok(ExitStatus::Ok)
}

/// An old spelling's note, in the estimate and on the terminal.
fn with_note(mut est: Estimate, note: &str) -> Estimate {
    crate::say!("note: {note}");
    est.notes.push(note.into());
    est
}

fn serve_note(engine: Engine) -> String {
    format!(
        "`estimate --serve {engine}` is spelled `estimate serve {engine}` now (its own options and help); the old spelling still plans, until the next release"
    )
}

/// `estimate serve`, with `--activation-peak predict`'s profile run predicted on data-less
/// tensors (a spinner on the terminal while it runs).
fn serve(o: &ServingOptions) -> Result<Estimate, CliError> {
    plan::serve(o, |shape: &ProfileShape, card: &str| {
        let display = super::progress::spinner(false, "predicting the profile run");
        let peak = serve_profile::predict_peak(
            shape,
            card,
            None,
            crate::signals::stop_request(),
            &*display,
        );
        display.finish();
        let peak = peak.map_err(|e| match e {
            ProfileError::Unavailable(_) => CliError::missing_runtime(e),
            ProfileError::Failed(_) => CliError::bad_input(e),
        })?;
        Ok(ActivationPeak::Predicted {
            bytes: peak.bytes,
            how: peak.how,
        })
    })
}

//! `iteragpu explain`: a result (with an estimate and a prediction) → the gap ledger → table or JSON.

use std::io::Write;

use crate::cli::ExplainArgs;
use crate::exit::{CliError, ExitStatus};
use crate::ledger::{self, render};
use crate::schema::load::{self, InputFile};

pub fn run(args: &ExplainArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let result = load::load(&args.result)?;
    let estimate = args.estimate.as_deref().map(load::load).transpose()?;
    let r = match &result.doc {
        InputFile::Measure(r) => r,
        InputFile::Prediction(p) => return prediction(args, p, estimate.as_ref(), out),
        _ => {
            return Err(result
                .wrong(&format!("{} or {}", load::MEASURE, load::PREDICTION), "explain reads a measure result or a prediction; give the estimate with --estimate and a prediction with --prediction")
                .into());
        }
    };
    // Each file beside the result is read, then refused when it is of another run.
    let estimate = Option::transpose(estimate.as_ref().map(|l| -> Result<_, CliError> {
        let e = l.as_estimate()?;
        load::check_estimate_of(r, e, l)?;
        Ok(e)
    }))?;
    let prediction = args.prediction.as_deref().map(load::load).transpose()?;
    let prediction = Option::transpose(prediction.as_ref().map(|l| -> Result<_, CliError> {
        let p = l.as_prediction()?;
        load::check_prediction_of(r, p, l)?;
        Ok(p)
    }))?;
    let ledger = match ledger::of_result(r, estimate, prediction) {
        Ok(l) => l,
        Err(why) => refuse!("{}: {why}", args.result.display()),
    };
    let text = super::json_or(args.json, &ledger, || render::table(&ledger))?;
    out.write_all(text.as_bytes())?;
    Ok(ExitStatus::Ok)
}

/// `explain PRED.json`: the prediction's ledger, by storage category, beside the estimate.
fn prediction(
    args: &ExplainArgs,
    p: &crate::schema::prediction::PredictionDoc,
    estimate: Option<&load::Loaded>,
    out: &mut dyn Write,
) -> Result<ExitStatus, CliError> {
    if let Some(other) = &args.prediction {
        refuse!(
            "--prediction {}: {} is already a prediction; give one or the other",
            other.display(),
            args.result.display()
        );
    }
    let estimate = Option::transpose(estimate.map(|l| -> Result<_, CliError> {
        let e = l.as_estimate()?;
        load::check_estimate_of_prediction(p, e, l)?;
        Ok(e)
    }))?;
    let ledger = match ledger::of_prediction(p, estimate) {
        Ok(l) => l,
        Err(why) => refuse!("{}: {why}", args.result.display()),
    };
    let text = super::json_or(args.json, &ledger, || render::table(&ledger))?;
    out.write_all(text.as_bytes())?;
    Ok(ExitStatus::Ok)
}

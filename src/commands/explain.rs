//! `iteragpu explain`: a result (with an estimate and a prediction) → the gap ledger → table or JSON.

use std::io::Write;

use crate::cli::ExplainArgs;
use crate::exit::{CliError, ExitStatus};
use crate::ledger::{self, render};
use crate::schema::load::{self, InputFile};

pub fn run(args: &ExplainArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let result = load::load(&args.result)?;
    let InputFile::Measure(r) = &result.doc else {
        return Err(result
            .wrong(load::MEASURE, "explain reads a measure result; give the estimate with --estimate and a prediction with --prediction")
            .into());
    };
    // Each file beside the result is read, then refused when it is of another run.
    let estimate = args.estimate.as_deref().map(load::load).transpose()?;
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

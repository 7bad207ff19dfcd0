//! `iteragpu from-events EVENTS --output RESULT`: a notebook Recorder's events → the result file
//! (built as `measure` builds one, never overwriting) → the table or the JSON.

use std::io::{BufReader, Write};

use crate::cli::FromEventsArgs;
use crate::exit::{CliError, ExitStatus};
use crate::measure::{recorded, render};
use crate::output::{self, Saved};

pub fn run(args: &FromEventsArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    output::check_new(&args.output)?;
    crate::model::files::regular_file(&args.events)
        .map_err(|e| CliError::bad_input(e.to_string()))?;
    let events = std::fs::File::open(&args.events).map_err(|e| {
        CliError::bad_input(format!(
            "cannot read {}: {}",
            args.events.display(),
            output::reason(&e)
        ))
    })?;
    let result = recorded::build_result(BufReader::new(events))?;
    let saved = output::save_result(&args.output, &serde_json::to_vec_pretty(&result)?)?;
    let text = super::json_or(args.json, &result, || render::table(&result, saved.path()))?;
    super::print_saved(out, &text, "result", saved.path());
    match saved {
        Saved::Here(_) | Saved::Sibling(_) if result.status.is_ok() => Ok(ExitStatus::Ok),
        Saved::Here(_) | Saved::Sibling(_) => Ok(ExitStatus::WorkloadFailed),
        Saved::Elsewhere { path, why } => {
            refuse!("{why}; the result was saved to {} instead", path.display())
        }
    }
}

//! `iteragpu compare`: runs side by side in one unit, warnings for every differing condition.

use std::io::Write;

use crate::cli::CompareArgs;
use crate::exit::{CliError, ExitStatus};
use crate::output;
use crate::report::comparison;
use crate::schema::load;

pub fn run(args: &CompareArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    if let Some(csv) = &args.csv {
        output::check_new(csv)?;
    }
    let loaded = args
        .files
        .iter()
        .map(|p| load::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    // The node files of one multi-node job are one run.
    let loaded = load::gather_nodes(loaded, args.allow_mismatch)?;
    if loaded.len() < 2 {
        refuse!(
            "the files given are the nodes of one run: compare needs two runs or more (a fiche of that run: iteragpu report {})",
            args.files
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let c = comparison::compare(&loaded)?;
    // The CSV is staged and moved into place only once the table is out: all or nothing.
    let staged = match &args.csv {
        Some(csv) => Some(output::stage(csv, comparison::csv(&c).as_bytes())?),
        None => None,
    };
    let text = super::json_or(args.json, &c, || comparison::table(&c))?;
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| {
            CliError::bad_input(format!(
                "cannot write to standard output: {}{}",
                output::reason(&e),
                if staged.is_some() {
                    "; no CSV was written"
                } else {
                    ""
                }
            ))
        })?;
    if let Some(staged) = staged {
        staged.commit()?;
    }
    Ok(ExitStatus::Ok)
}

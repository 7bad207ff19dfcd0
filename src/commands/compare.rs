//! `iteragpu compare`: runs side by side in one unit, warnings for every differing condition.

use anyhow::Result;
use std::io::Write;

use crate::cli::CompareArgs;
use crate::report::{comparison, inputs};
use crate::{exit, output};

pub fn run(args: &CompareArgs, out: &mut dyn Write) -> Result<u8> {
    if let Some(csv) = &args.csv {
        output::check_new(csv)?;
    }
    let loaded = args
        .files
        .iter()
        .map(|p| inputs::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    let c = comparison::compare(&loaded)?;
    if let Some(csv) = &args.csv {
        output::write_new(csv, comparison::csv(&c).as_bytes())?;
    }
    let text = if args.json {
        serde_json::to_string_pretty(&c)? + "\n"
    } else {
        comparison::table(&c)
    };
    out.write_all(text.as_bytes())?;
    Ok(exit::OK)
}

//! `iteragpu report`: the fiche, as Markdown or one self-contained HTML file.

use anyhow::{Result, bail};
use std::io::Write;

use crate::cli::ReportArgs;
use crate::report::document::{Exporter, Html, Markdown};
use crate::report::{fiche, inputs};
use crate::{exit, output};

pub fn run(args: &ReportArgs, out: &mut dyn Write) -> Result<u8> {
    let exporter: Box<dyn Exporter> = match args
        .output
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("md") | Some("markdown") => Box::new(Markdown),
        Some("html") | Some("htm") => Box::new(Html),
        _ => bail!(
            "--output {}: give a .md (Markdown) or .html (self-contained HTML) file name",
            args.output.display()
        ),
    };
    output::check_new(&args.output)?;
    let result = inputs::load(&args.result)?;
    let series = args.series.as_deref().map(inputs::load).transpose()?;
    let estimate = args.estimate.as_deref().map(inputs::load).transpose()?;
    let doc = fiche::build(&result, series.as_ref(), estimate.as_ref(), args.lang)?;
    output::write_new(&args.output, exporter.render(&doc).as_bytes())?;
    writeln!(out, "fiche: {}", args.output.display())?;
    Ok(exit::OK)
}

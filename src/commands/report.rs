//! `iteragpu report`: the fiche, as Markdown or one self-contained HTML file.

use std::io::Write;

use crate::cli::ReportArgs;
use crate::exit::{CliError, ExitStatus};
use crate::output;
use crate::report::{export, fiche};
use crate::schema::load;

pub fn run(args: &ReportArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let Some(exporter) = export::for_path(&args.output) else {
        refuse!(
            "--output {}: give a .md (Markdown) or .html (self-contained HTML) file name",
            args.output.display()
        );
    };
    output::check_new(&args.output)?;
    let loaded = args
        .files
        .iter()
        .map(|p| load::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    let mut files = load::gather_nodes(loaded, args.allow_mismatch)?.into_iter();
    let result = files.next().expect("clap requires one file");
    let series: Vec<_> = files.by_ref().take(2).collect();
    if let Some(extra) = files.next() {
        refuse!(
            "{}: a fiche is made of one run and at most two series (one measured, one predicted); the node files of one multi-node job are merged only when they share a run id",
            extra.path.display()
        );
    }
    let estimate = args.estimate.as_deref().map(load::load).transpose()?;
    let series: Vec<&load::Loaded> = series.iter().collect();
    let fiche = fiche::build(
        &result,
        &series,
        estimate.as_ref(),
        crate::report::format::Style::new(args.lang, args.units),
    )?;
    for warning in &fiche.warnings {
        crate::say!("warning: {warning}");
    }
    let doc = fiche.document;
    // Staged, announced, then moved into place: if standard output fails, nothing is written.
    let staged = output::stage(&args.output, exporter.render(&doc).as_bytes())?;
    writeln!(out, "fiche: {}", args.output.display())
        .and_then(|()| out.flush())
        .map_err(|e| {
            CliError::bad_input(format!(
                "cannot write to standard output: {}; no fiche was written",
                output::reason(&e)
            ))
        })?;
    staged.commit()?;
    Ok(ExitStatus::Ok)
}

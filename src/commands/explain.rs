//! `iteragpu explain`: a result (with an estimate and a prediction) → the gap ledger → table or JSON;
//! `--snapshot FILE`: any PyTorch memory snapshot → `iteragpu.snapshot/1` → text, JSON or a file.

use std::io::Write;

use crate::cli::ExplainArgs;
use crate::exit::{CliError, ExitStatus};
use crate::ledger::{self, render};
use crate::schema::load::{self, InputFile};

pub fn run(args: &ExplainArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    if let Some(file) = &args.snapshot {
        return snapshot(args, file, out);
    }
    let result_path = args
        .result
        .as_deref()
        .expect("clap requires a result without --snapshot");
    let result = load::load(result_path)?;
    let estimate = args.estimate.as_deref().map(load::load).transpose()?;
    let r = match &result.doc {
        InputFile::Measure(r) => r,
        InputFile::Prediction(p) => {
            return prediction(args, result_path, p, estimate.as_ref(), out);
        }
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
        Err(why) => refuse!("{}: {why}", result_path.display()),
    };
    write_ledger(args, &ledger, out)
}

/// `explain PRED.json`: the prediction's ledger, by storage category, beside the estimate.
fn prediction(
    args: &ExplainArgs,
    result_path: &std::path::Path,
    p: &crate::schema::prediction::PredictionDoc,
    estimate: Option<&load::Loaded>,
    out: &mut dyn Write,
) -> Result<ExitStatus, CliError> {
    if let Some(other) = &args.prediction {
        refuse!(
            "--prediction {}: {} is already a prediction; give one or the other",
            other.display(),
            result_path.display()
        );
    }
    let estimate = Option::transpose(estimate.map(|l| -> Result<_, CliError> {
        let e = l.as_estimate()?;
        load::check_estimate_of_prediction(p, e, l)?;
        if let Some(warning) = load::estimate_of_another_model(p, e) {
            crate::say!("warning: {warning}");
        }
        Ok(e)
    }))?;
    let ledger = match ledger::of_prediction(p, estimate) {
        Ok(l) => l,
        Err(why) => refuse!("{}: {why}", result_path.display()),
    };
    write_ledger(args, &ledger, out)
}

/// The ledger on standard output (the table, or JSON with `--json`), or with `--output`: `-` for
/// the JSON document alone on standard output, else a new file (JSON for `.json` or `--json`,
/// the table otherwise), staged and never overwriting, with the table shown as well.
fn write_ledger(
    args: &ExplainArgs,
    ledger: &ledger::Ledger,
    out: &mut dyn Write,
) -> Result<ExitStatus, CliError> {
    let json = || -> Result<String, CliError> { Ok(serde_json::to_string_pretty(ledger)? + "\n") };
    let Some(path) = &args.output else {
        let text = super::json_or(args.json, ledger, || render::table(ledger))?;
        out.write_all(text.as_bytes())?;
        return Ok(ExitStatus::Ok);
    };
    if path.as_os_str() == "-" {
        out.write_all(json()?.as_bytes())?;
        return Ok(ExitStatus::Ok);
    }
    crate::output::check_new(path)?;
    let as_json = args.json
        || path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let bytes = if as_json {
        json()?
    } else {
        render::table(ledger)
    };
    let staged = crate::output::stage(path, bytes.as_bytes())?;
    staged.commit()?;
    let text = render::table(ledger) + &format!("written: {}\n", path.display());
    super::print_saved(out, &text, "ledger", path);
    Ok(ExitStatus::Ok)
}

/// `explain --snapshot FILE`: any PyTorch memory snapshot → `iteragpu.snapshot/1` → terminal
/// text, JSON, or a new .html/.md/.json file.
fn snapshot(
    args: &ExplainArgs,
    file: &std::path::Path,
    out: &mut dyn Write,
) -> Result<ExitStatus, CliError> {
    use crate::explain::snapshot::{self, view::SnapshotDoc};
    use crate::report::{
        export, export::Exporter as _, format::Style, format::Units, snapshot as page,
    };
    // `-`: the document alone on standard output, as for the ledger.
    let to_stdout = args.output.as_deref().is_some_and(|p| p.as_os_str() == "-");
    let output = args.output.as_deref().filter(|_| !to_stdout);
    let json_file = output.filter(|p| {
        p.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
    });
    let exporter = match output {
        Some(path) if json_file.is_none() => match export::for_path(path) {
            Some(e) => Some(e),
            None => refuse!(
                "--output {}: give a .html (with the timeline chart), .md or .json file name",
                path.display()
            ),
        },
        _ => None,
    };
    if let Some(path) = output {
        crate::output::check_new(path)?;
    }
    // Checked before it is opened: a FIFO would block the open until a writer came.
    crate::model::files::regular_file(file)
        .map_err(|e| CliError::bad_input(format!("--snapshot: {e}")))?;
    let expected = "expected a PyTorch memory snapshot, as torch.cuda.memory._dump_snapshot() writes it (a pickle, torch 2.1+)";
    // pickle.dump writes PROTO first from protocol 2 on; torch never writes protocols 0 and 1.
    let mut first = [0u8; 1];
    let start = std::fs::File::open(file).and_then(|mut f| std::io::Read::read(&mut f, &mut first));
    if matches!(start, Ok(1)) && first[0] != 0x80 {
        refuse!(
            "{}: it does not start with pickle's PROTO opcode (0x80) but with byte {:#04x}: it is not a pickle, or one of protocol 0 or 1; {expected}",
            file.display(),
            first[0]
        );
    }
    let summary = snapshot::summarize_file(file, &Default::default())
        .map_err(|e| CliError::bad_input(format!("{}: {e}; {expected}", file.display())))?;
    let file_bytes = std::fs::metadata(file).ok().map(|m| m.len());
    let doc = SnapshotDoc::of(summary, file.display().to_string(), file_bytes);
    let style = Style::new(args.lang, Units::Gib);
    let page = page::document(&doc, style);
    let Some(path) = output else {
        let text = super::json_or(args.json || to_stdout, &doc, || {
            export::Terminal.render(&page)
        })?;
        out.write_all(text.as_bytes())?;
        return Ok(ExitStatus::Ok);
    };
    let bytes = match exporter {
        Some(e) => e.render(&page),
        None => serde_json::to_string_pretty(&doc)? + "\n",
    };
    // Staged, announced, then moved into place, as `report` writes a fiche.
    let staged = crate::output::stage(path, bytes.as_bytes())?;
    let text = if args.json {
        serde_json::to_string_pretty(&doc)? + "\n"
    } else {
        export::Terminal.render(&page)
    };
    out.write_all(text.as_bytes())
        .and_then(|()| writeln!(out, "written: {}", path.display()))
        .and_then(|()| out.flush())
        .map_err(|e| {
            CliError::bad_input(format!(
                "cannot write to standard output: {}; {} was not written",
                crate::output::reason(&e),
                path.display()
            ))
        })?;
    staged.commit()?;
    Ok(ExitStatus::Ok)
}

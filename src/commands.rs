//! One function per subcommand: turn validated arguments into work, and write the output. Each
//! returns `Result<ExitStatus, CliError>`; `lib.rs` prints the error once.

/// The result file measure and sweep write (they need one: a measurement is never only printed).
fn required_output(run: &crate::cli::RunArgs) -> Result<&std::path::Path, crate::exit::CliError> {
    run.output.as_deref().ok_or_else(|| {
        crate::exit::CliError::bad_input(
            "--output PATH is required: the result file to create (an existing file is never overwritten)",
        )
    })
}

/// The JSON document (`--json`) or the terminal table.
fn json_or<T: serde::Serialize + ?Sized>(
    json: bool,
    doc: &T,
    table: impl FnOnce() -> String,
) -> Result<String, crate::exit::CliError> {
    Ok(if json {
        serde_json::to_string_pretty(doc)? + "\n"
    } else {
        // The one sanitiser, on every table a command prints (idempotent on those already safe).
        crate::output::terminal_safe(&table()).into_owned()
    })
}

/// Writes `text` once the document it shows is saved at `path`: a closed or full standard output
/// then costs only the text, with a warning that says where the `what` is.
fn print_saved(out: &mut dyn std::io::Write, text: &str, what: &str, path: &std::path::Path) {
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        crate::say!(
            "warning: cannot write to standard output ({}); the {what} is in {}",
            crate::output::reason(&e),
            path.display()
        );
    }
}

/// A measurement or a sweep that found no PyTorch or no GPU: nothing written, and what to try.
fn nothing_measured(reason: &str, file: &str) -> crate::exit::CliError {
    let instead = if file == "series" {
        "`iteragpu sweep --predict --card NAME` with the same options predicts every trial on the CPU, for the card you name"
    } else {
        "`iteragpu predict` with the same options predicts every phase on the CPU, for the card you name with --card"
    };
    crate::exit::CliError::missing_runtime(format!(
        "nothing measured: {reason}\n(no {file} file was written; run `iteragpu environment` for details)\nwithout a GPU: {instead}"
    ))
}

/// Refuses the input: returns a bad-input [`CliError`](crate::exit::CliError) from the function.
macro_rules! refuse {
    ($($arg:tt)*) => {
        return Err($crate::exit::CliError::bad_input(format!($($arg)*)))
    };
}

pub mod cards;
pub mod compare;
pub mod environment;
pub mod estimate;
pub mod explain;
pub mod from_events;
pub mod measure;
mod options;
pub mod predict;
pub mod progress;
pub mod report;
pub mod slurm_task;
pub mod sweep;

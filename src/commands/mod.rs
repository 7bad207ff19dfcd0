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
pub mod measure;
mod options;
pub mod predict;
pub mod progress;
pub mod report;
pub mod sweep;

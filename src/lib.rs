//! iteragpu: why a GPU memory peak exceeds its estimate, and whether a workload fits on a card.
//!
//! The library holds every concept in its own module; the binary only parses, runs the command
//! and prints its error once, exiting with the command's [`exit::ExitStatus`] (0 ok, 1 bad input,
//! 2 PyTorch or GPU missing, 3 workload failed, results kept).

// Printing macros panic when the stream is closed (`… | head`): the product writes through
// `say!` and the commands' writers instead.
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

pub(crate) mod cards;
pub(crate) mod cli;
pub(crate) mod commands;
pub mod dtype;
pub(crate) mod environment;
pub mod estimate;
pub mod exit;
pub mod explain;
pub mod ledger;
pub mod measure;
pub mod model;
pub(crate) mod output;
pub mod prediction;
pub mod progress;
pub mod python_side;
pub(crate) mod report;
pub mod schema;
pub(crate) mod signals;
pub mod sweep;
pub mod units;
pub mod workload;

#[cfg(test)]
mod layers;

use std::ffi::OsString;
use std::process::ExitCode;

use exit::ExitStatus;

/// Parses `args`, runs the command and returns the exit status. Never panics on bad input.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match cli::Cli::parse_args(args) {
        Ok(cli) => cli,
        Err(err) => {
            // clap exits 2 on a usage error; here 2 means "PyTorch or GPU missing", so usage
            // errors become 1. Help and version still print and succeed.
            let status = if err.use_stderr() {
                ExitStatus::BadInput
            } else {
                ExitStatus::Ok
            };
            let _ = err.print();
            return status.into();
        }
    };
    guarded(|| dispatch(&cli))
}

/// Runs `work`; a panic (a bug, or an overflow the release build's `overflow-checks` caught
/// instead of wrapping silently) becomes one `error: internal error …` line and exit 1, never
/// Rust's backtrace banner and exit 101. The workers die with this process (`die_with_parent`).
fn guarded(work: impl FnOnce() -> ExitCode + std::panic::UnwindSafe) -> ExitCode {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        crate::say!("{}", internal_error(&what, &at));
    }));
    let status = std::panic::catch_unwind(work).unwrap_or_else(|_| ExitStatus::BadInput.into());
    std::panic::set_hook(previous);
    status
}

/// The line a panic prints: what and where, that no result was overwritten, and whom to tell.
fn internal_error(what: &str, at: &str) -> String {
    format!(
        "error: internal error: {what}{at}. This is a bug in iteragpu, not in your input: \
         nothing was overwritten (results are written to a temporary file first); please report \
         it with the command line"
    )
}

fn dispatch(cli: &cli::Cli) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    let result = match &cli.command {
        cli::Command::Estimate(args) => commands::estimate::run(args, &mut stdout),
        cli::Command::Environment(args) => commands::environment::run(args, &mut stdout),
        cli::Command::Measure(args) => commands::measure::run(args, &mut stdout),
        cli::Command::Sweep(args) => commands::sweep::run(args, &mut stdout),
        cli::Command::Report(args) => commands::report::run(args, &mut stdout),
        cli::Command::Compare(args) => commands::compare::run(args, &mut stdout),
        cli::Command::Cards(args) => commands::cards::run(args, &mut stdout),
        cli::Command::Predict(args) => commands::predict::run(args, &mut stdout),
        cli::Command::Explain(args) => commands::explain::run(args, &mut stdout),
        cli::Command::FromEvents(args) => commands::from_events::run(args, &mut stdout),
        cli::Command::SlurmTask(args) => commands::slurm_task::run(args, &mut stdout),
    };
    match result {
        Ok(status) => status.into(),
        Err(err) => {
            crate::say!("error: {err}");
            err.status().into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_an_internal_error_with_exit_1() {
        let status = guarded(|| {
            let big = std::hint::black_box(u64::MAX);
            // What a wrapped length would be in a release build without overflow checks.
            let sum = big.checked_add(1).expect("a length sum overflowed");
            ExitCode::from(sum as u8)
        });
        assert_eq!(status, ExitStatus::BadInput.into());
        let line = internal_error("a length sum overflowed", " at src/x.rs:3");
        assert!(line.starts_with("error: internal error: a length sum overflowed at src/x.rs:3."));
        assert!(line.contains("nothing was overwritten"), "{line}");
    }
}

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

use clap::Parser;

use exit::ExitStatus;

/// Parses `args`, runs the command and returns the exit status. Never panics on bad input.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match cli::Cli::try_parse_from(args) {
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
    };
    match result {
        Ok(status) => status.into(),
        Err(err) => {
            crate::say!("error: {err}");
            err.status().into()
        }
    }
}

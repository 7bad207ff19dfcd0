//! `iteragpu sweep`: arguments → a validated sweep plan → trials in fresh workers → the series
//! (rewritten after each trial, never overwriting a file) → the table or the JSON.

use anyhow::Result;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};

use crate::cli::SweepArgs;
use crate::measure::trial::ProcessRunner;
use crate::sweep::driver::{self, Finish};
use crate::sweep::plan::SweepPlan;
use crate::sweep::render;
use crate::sweep::series::Writer;
use crate::{exit, signals};

pub fn run(args: &SweepArgs, out: &mut dyn Write) -> Result<u8> {
    // Handlers first: a signal from here on is recorded, never the default sudden death.
    let stop = signals::stop_request();
    let plan = SweepPlan::from_args(args)?;
    let m = &args.measure;
    let writer = Writer::new(&m.output)?;
    let bar = progress(std::io::stderr().is_terminal() && !m.json);
    let mut runner = ProcessRunner::new(stop);
    let finish = driver::run(&plan, &mut runner, writer, &bar);
    bar.finish_and_clear();
    let (series, moved) = match finish? {
        Finish::Unavailable(reason) => {
            eprintln!("error: nothing measured: {reason}");
            eprintln!("(no series file was written; run `iteragpu environment` for details)");
            return Ok(exit::MISSING_RUNTIME);
        }
        Finish::Done { series, moved } => (series, moved),
    };
    let path = moved
        .as_ref()
        .map_or(m.output.as_path(), |(_, p)| p.as_path());
    let text = if m.json {
        serde_json::to_string_pretty(&series)? + "\n"
    } else {
        render::table(&series, path)
    };
    // The series is saved: a closed or full standard output costs only the table.
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        eprintln!(
            "warning: cannot write to standard output ({}); the series is in {}",
            crate::output::reason(&e),
            path.display()
        );
    }
    if let Some((why, elsewhere)) = moved {
        eprintln!(
            "error: {why}; the series was saved to {} instead",
            elsewhere.display()
        );
        return Ok(exit::BAD_INPUT);
    }
    Ok(driver::exit_status(&series))
}

/// "trial k of N" with the running value, only on a terminal; hidden otherwise.
fn progress(on_terminal: bool) -> ProgressBar {
    if !on_terminal {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} trial {k}{of} {elapsed} {msg} {prefix}")
            .expect("valid template")
            .with_key(
                "k",
                |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{}", state.pos() + 1);
                },
            )
            .with_key(
                "of",
                |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    if let Some(n) = state.len() {
                        let _ = write!(w, " of {n}");
                    }
                },
            ),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

//! The terminal's progress display: indicatif behind the domain's [`Progress`] trait, shown only
//! when standard error is a terminal and `--json` is not given.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use crate::progress::{NoProgress, Progress};

/// A spinner with the elapsed time and the stage ("phase 2 (forward)"), starting at `stage`.
pub fn spinner(json: bool, stage: &str) -> Box<dyn Progress> {
    if !shown(json) {
        return Box::new(NoProgress);
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {elapsed} {prefix}").expect("valid template"),
    );
    bar.set_prefix(stage.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    Box::new(Terminal(bar))
}

/// "trial k of N" with the running trial and its stage.
pub fn trials(json: bool) -> Box<dyn Progress> {
    if !shown(json) {
        return Box::new(NoProgress);
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} trial {k}{of} {elapsed} {msg} {prefix}")
            .expect("valid template")
            .with_key("k", |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{}", state.pos() + 1);
            })
            .with_key(
                "of",
                |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                    if let Some(n) = state.len() {
                        let _ = write!(w, " of {n}");
                    }
                },
            ),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    Box::new(Terminal(bar))
}

fn shown(json: bool) -> bool {
    std::io::stderr().is_terminal() && !json
}

/// The command's display; cleared when finished or dropped (an error then prints on a clean line).
struct Terminal(ProgressBar);

impl Progress for Terminal {
    fn set_stage(&self, text: &str) {
        self.0.set_prefix(text.to_string());
    }
    fn set_message(&self, text: &str) {
        self.0.set_message(text.to_string());
    }
    fn set_length(&self, steps: u64) {
        self.0.set_length(steps);
    }
    fn inc(&self) {
        self.0.inc(1);
    }
    fn println(&self, line: &str) {
        self.0.println(line);
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
    fn forwarder(&self) -> Option<Arc<dyn Progress>> {
        Some(Arc::new(Above(self.0.clone())))
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// The same bar seen from the threads forwarding the workload's output: lines go above it.
struct Above(ProgressBar);

impl Progress for Above {
    fn println(&self, line: &str) {
        self.0.println(line);
    }
    /// Handed to a parallel sweep's predictions: their workers' output (transformers' warnings)
    /// goes above the bar too, never into the middle of it.
    fn forwarder(&self) -> Option<Arc<dyn Progress>> {
        Some(Arc::new(Above(self.0.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use indicatif::{InMemoryTerm, TermLike};

    /// A warning the workload prints while the bar is drawn (transformers' are the usual ones)
    /// lands on its own line above the bar, never in the middle of it.
    #[test]
    fn forwarded_lines_go_above_the_bar() {
        let term = InMemoryTerm::new(10, 80);
        let bar = ProgressBar::with_draw_target(
            Some(4),
            ProgressDrawTarget::term_like(Box::new(term.clone())),
        );
        bar.set_style(ProgressStyle::with_template("trial {pos} of {len} {msg}").unwrap());
        bar.set_message("running batch=4");
        let display = Terminal(bar);
        display.inc();
        let forwarder = display.forwarder().expect("a terminal display forwards");
        forwarder.println("`torch_dtype` is deprecated! Use `dtype` instead!");
        display.inc();
        let screen = term.contents();
        let lines: Vec<&str> = screen.lines().collect();
        assert_eq!(
            lines,
            [
                "`torch_dtype` is deprecated! Use `dtype` instead!",
                "trial 2 of 4 running batch=4"
            ],
            "{screen:?}"
        );
        assert_eq!(term.height(), 10);
    }
}

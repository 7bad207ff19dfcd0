//! What a running trial, prediction or sweep tells a progress display (uv's `Reporter`). The
//! domain knows only this trait; the terminal display is `commands::progress`'s, and tests and
//! quiet runs pass [`NoProgress`].

use std::fmt;
use std::sync::Arc;

/// A progress display. Every method does nothing by default.
pub trait Progress: Send + Sync {
    /// What runs now: the worker starting, "phase 2 (forward)".
    fn set_stage(&self, _text: &str) {}
    /// The step of a sweep that runs now: "running batch=4 (last: ok, …)".
    fn set_message(&self, _text: &str) {}
    /// How many steps (a sweep's trials) are planned.
    fn set_length(&self, _steps: u64) {}
    /// One more step is done.
    fn inc(&self) {}
    /// A line kept above the display (a finished trial); dropped when there is no display.
    fn println(&self, _line: &str) {}
    /// The display is no longer needed: it is cleared.
    fn finish(&self) {}
    /// A handle the threads forwarding the workload's own output print through, above the
    /// display; `None`: they write to stderr themselves.
    fn forwarder(&self) -> Option<Arc<dyn Progress>> {
        None
    }
}

/// No display: tests, `--json`, a standard error that is not a terminal.
pub struct NoProgress;

impl Progress for NoProgress {}

impl fmt::Debug for dyn Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Progress")
    }
}

//! The user's request to stop: Ctrl-C sets a flag that every runner polls; the runner then stops
//! the worker's whole process group and the results so far are kept.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The flag, with the handler installed on first use.
pub fn interrupted() -> &'static AtomicBool {
    let _ = ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::SeqCst));
    &INTERRUPTED
}

//! The user's request to stop: SIGINT (Ctrl-C), SIGTERM and SIGHUP only record which signal
//! arrived; every runner polls that record, stops the worker's whole process group, writes what
//! was measured with the status `interrupted` (SIGINT) or `terminated` (SIGTERM, SIGHUP) and removes
//! its temporary files. Nothing is done inside the handler but one atomic store, so a signal that
//! arrives while a file is being written never cuts that write short.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A signal that asks iteragpu to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGINT: Ctrl-C on a terminal.
    Interrupt,
    /// SIGTERM or SIGHUP (the signal number): a process manager or a closed terminal.
    Terminate(i32),
}

impl Stop {
    /// `SIGINT`, `SIGTERM`, `SIGHUP`.
    pub fn name(self) -> &'static str {
        match self {
            Stop::Interrupt => "SIGINT",
            Stop::Terminate(libc::SIGHUP) => "SIGHUP",
            Stop::Terminate(_) => "SIGTERM",
        }
    }

    fn from_number(n: usize) -> Option<Stop> {
        match n as i32 {
            0 => None,
            libc::SIGINT => Some(Stop::Interrupt),
            other => Some(Stop::Terminate(other)),
        }
    }
}

/// Where the handlers record the last stop signal (0: none).
pub struct StopRequest {
    signal: AtomicUsize,
}

impl StopRequest {
    /// A request nobody can send: for tests and for code that must not be stopped.
    pub const fn never() -> StopRequest {
        StopRequest {
            signal: AtomicUsize::new(0),
        }
    }

    /// The stop signal received so far, if any.
    pub fn get(&self) -> Option<Stop> {
        Stop::from_number(self.signal.load(Ordering::SeqCst))
    }
}

static REQUEST: StopRequest = StopRequest::never();
static INSTALLED: OnceLock<()> = OnceLock::new();

/// The process's stop request, with the SIGINT, SIGTERM and SIGHUP handlers installed on first
/// use (before any worker starts).
pub fn stop_request() -> &'static StopRequest {
    INSTALLED.get_or_init(|| {
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // Registration fails only for forbidden signals, which these are not; if it ever did,
            // the default action (end the process) would still apply.
            let _ = signal_hook::flag::register_usize(signal, &REQUEST.signal, signal as usize);
        }
    });
    &REQUEST
}

/// Asks the kernel to kill the worker if the CLI dies without stopping it (SIGKILL of the CLI):
/// no orphan keeps GPU memory.
pub(crate) fn die_with_parent(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl and getppid are async-signal-safe and touch only the calling (child) process.
    unsafe {
        command.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            // The parent may have died before the request was made: then do not start at all.
            if libc::getppid() != parent {
                return Err(std::io::Error::other(
                    "iteragpu ended before its worker started",
                ));
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        assert_eq!(Stop::from_number(0), None);
        assert_eq!(
            Stop::from_number(libc::SIGINT as usize),
            Some(Stop::Interrupt)
        );
        assert_eq!(
            Stop::from_number(libc::SIGHUP as usize).unwrap().name(),
            "SIGHUP"
        );
        assert_eq!(
            Stop::from_number(libc::SIGTERM as usize).unwrap().name(),
            "SIGTERM"
        );
        assert_eq!(StopRequest::never().get(), None);
    }
}

//! One trial = one fresh worker process. The runner owns its lifetime: it starts the worker in its
//! own process group, reads events as they arrive, forwards the workload's own output to stderr,
//! enforces the timeout, reacts to Ctrl-C, and kills the whole group (PyTorch may fork) so that no
//! orphan survives.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::events::{Line, parse};
use crate::python_side::Package;
use crate::signals::{Stop, StopRequest};

/// How to start a worker.
#[derive(Clone, Debug)]
pub struct WorkerCommand {
    pub python: PathBuf,
    /// The trial's specification, written to a file the worker reads.
    pub spec: Value,
    pub timeout: Option<Duration>,
    /// Forward the workload's stderr (and its redirected prints) to ours.
    pub forward_output: bool,
    /// A progress display on a terminal: forwarded lines are printed above it.
    pub progress: Option<indicatif::ProgressBar>,
    /// Environment changes in order: `Some` sets, `None` removes (a prediction hides every GPU
    /// from its worker; `--alloc-conf` replaces the allocator's variables).
    pub env: Vec<(String, Option<String>)>,
}

/// How the worker ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    Timeout,
    /// Stopped by a signal the CLI received (SIGINT, SIGTERM, SIGHUP).
    Stopped(Stop),
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit status {c}"),
            Exit::Signal(s) => write!(f, "killed by signal {s}"),
            Exit::Timeout => f.write_str("stopped after the timeout"),
            Exit::Stopped(stop) => write!(f, "stopped by {}", stop.name()),
        }
    }
}

/// What the runner saw besides events.
#[derive(Clone, Debug)]
pub struct WorkerRun {
    pub exit: Exit,
    pub pid: u32,
    /// The last lines the worker wrote on stderr.
    pub stderr_tail: Vec<String>,
}

/// Why a worker could not be started at all.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "cannot run the Python interpreter `{python}`: {reason}; install Python 3 or choose one with --python or ITERAGPU_PYTHON"
    )]
    Interpreter { python: String, reason: String },
    #[error("cannot prepare the worker's files: {}", crate::output::reason(.0))]
    Files(std::io::Error),
}

enum Msg {
    Line(String),
    Closed,
}

const STDERR_TAIL: usize = 40;

/// Asks the kernel to kill the worker if the CLI dies without stopping it (SIGKILL of the CLI):
/// no orphan keeps GPU memory.
pub(crate) fn die_with_parent(command: &mut Command) {
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

fn kill_group(pid: u32, signal: i32) {
    // SAFETY: killpg only sends a signal; a group that no longer exists returns ESRCH.
    unsafe {
        libc::killpg(pid as libc::pid_t, signal);
    }
}

/// Runs one worker to the end, calling `on_line` for each line of its event channel.
pub fn run(
    cmd: &WorkerCommand,
    stop: &StopRequest,
    mut on_line: impl FnMut(Line),
) -> Result<WorkerRun, StartError> {
    let package = Package::write().map_err(StartError::Files)?;
    let spec_path = package.root().join("spec.json");
    std::fs::write(&spec_path, cmd.spec.to_string()).map_err(StartError::Files)?;
    let mut command = Command::new(&cmd.python);
    command
        .arg("-m")
        .arg("iteragpu.worker")
        .arg(&spec_path)
        .env("PYTHONPATH", package.pythonpath())
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for (key, value) in &cmd.env {
        match value {
            Some(v) => command.env(key, v),
            None => command.env_remove(key),
        };
    }
    die_with_parent(&mut command);
    let mut child = command.spawn().map_err(|e| StartError::Interpreter {
        python: cmd.python.display().to_string(),
        reason: crate::output::reason(&e),
    })?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("stdout is piped");
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            match line {
                Ok(l) => {
                    if tx.send(Msg::Line(l)).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = tx.send(Msg::Closed);
    });
    let tail = Arc::new(Mutex::new(VecDeque::new()));
    let stderr = child.stderr.take().expect("stderr is piped");
    let (tail2, forward, progress) = (Arc::clone(&tail), cmd.forward_output, cmd.progress.clone());
    let errors = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if forward {
                match &progress {
                    Some(bar) => bar.println(&line),
                    None => {
                        let _ = writeln!(std::io::stderr().lock(), "{line}");
                    }
                }
            }
            let mut t = tail2.lock().unwrap_or_else(|p| p.into_inner());
            if t.len() == STDERR_TAIL {
                t.pop_front();
            }
            t.push_back(line);
        }
    });

    let started = Instant::now();
    let mut forced: Option<Exit> = None;
    let mut closed = false;
    let status = loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(Msg::Line(line)) => on_line(parse(&line)),
            Ok(Msg::Closed) => closed = true,
            Err(_) => {}
        }
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        let timed_out = cmd.timeout.is_some_and(|t| started.elapsed() > t);
        let stopped = stop.get();
        if forced.is_none() && (timed_out || stopped.is_some()) {
            forced = Some(match stopped {
                Some(signal) => Exit::Stopped(signal),
                None => Exit::Timeout,
            });
            kill_group(pid, libc::SIGTERM);
            let grace = Instant::now();
            while grace.elapsed() < Duration::from_secs(2) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            kill_group(pid, libc::SIGKILL);
        }
        if closed && forced.is_some() {
            // Keep waiting for the exit status; nothing more will arrive.
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // The worker is gone: end anything it left in its group, then drain the channel.
    kill_group(pid, libc::SIGKILL);
    let drain_until = Instant::now() + Duration::from_secs(5);
    while !closed && Instant::now() < drain_until {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(Msg::Line(line)) => on_line(parse(&line)),
            Ok(Msg::Closed) => closed = true,
            Err(mpsc::RecvTimeoutError::Disconnected) => closed = true,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
    let _ = reader.join();
    let _ = errors.join();
    let exit = forced.unwrap_or_else(|| match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(sig)) => Exit::Signal(sig),
        (None, None) => Exit::Code(-1),
    });
    let stderr_tail = tail
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .cloned()
        .collect();
    Ok(WorkerRun {
        exit,
        pid,
        stderr_tail,
    })
}

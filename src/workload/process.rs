//! One trial = one fresh worker process. The runner owns its lifetime: it starts the worker in its
//! own process group, reads events as they arrive, forwards the workload's own output to stderr,
//! enforces the timeout, reacts to Ctrl-C, and kills the whole group (PyTorch may fork) so that no
//! orphan survives.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::progress::Progress;
use crate::python_side::Package;
use crate::schema::events::{Line, TOKEN_ENV, new_token, parse_signed};
use crate::schema::measure::WorkerInfo;
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
    /// A progress display on a terminal (`Progress::forwarder`): forwarded lines are printed
    /// above it.
    pub progress: Option<Arc<dyn Progress>>,
    /// Environment changes in order: `Some` sets, `None` removes (a prediction hides every GPU
    /// from its worker; `--alloc-conf` replaces the allocator's variables).
    pub env: Vec<(String, Option<String>)>,
    /// One worker, or one per local rank under torchrun.
    pub launch: Launch,
    /// Set (by the caller's `on_line`) to give the worker up at once: its whole group is killed
    /// without a grace period and the run ends as a killed process would (`Exit::Signal`); the
    /// events already sent are still read. `predict` sets it when the worker's torch is not one
    /// it supports.
    pub abandon: Option<Arc<AtomicBool>>,
    /// Name the processes the workload left running, but leave them (`--keep-children`).
    pub keep_children: bool,
    /// A predicting worker's answer pipe (its standard input), else none (standard input reads
    /// nothing).
    pub answers: Option<AnswerPipe>,
    /// The most of its own memory the worker may hold on the host (`RssAnon`, watched by the
    /// run loop): a predicting worker gets [`predict_memory_cap`]; a measuring worker only
    /// [`measure_memory_cap`], the cap the user set (`None`: unwatched).
    pub memory_cap: Option<u64>,
    /// Start the worker as a child of this fork server instead of a fresh interpreter
    /// (`sweep --predict`: `prediction::fork_server`); `Launch::Worker` only.
    pub forker: Option<Arc<dyn Forker>>,
}

/// Starts a worker as a child forked from a process that already imported what it needs (a
/// predicting fork server), instead of a fresh `python -m iteragpu.worker`. The child is the
/// worker a fresh process would be: the same spec, environment changes and standard streams, its
/// own process group; the run loop treats it as it treats a spawned one (events, timeout,
/// signals, memory cap), reading its end from [`Forked::ended`].
pub trait Forker: Send + Sync + std::fmt::Debug {
    /// Forks one worker for `spec` with `env` applied in order, its standard input, output and
    /// error the three descriptors given. `Err`: why it could not (the trial then starts fresh).
    fn fork(
        &self,
        spec: &Value,
        env: &[(String, Option<String>)],
        streams: [OwnedFd; 3],
    ) -> Result<Forked, String>;
}

/// A forked worker: its pid (its process group) and its end.
pub struct Forked {
    pub pid: u32,
    /// The raw wait status once it ended; disconnected when the server died (its children are
    /// killed with it).
    pub ended: mpsc::Receiver<i32>,
}

/// The worker being run: spawned here, or forked by a server (not this process's child).
enum Proc {
    Spawned(std::process::Child),
    Forked {
        ended: mpsc::Receiver<i32>,
        status: Option<std::process::ExitStatus>,
    },
}

impl Proc {
    fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        match self {
            Proc::Spawned(child) => child.try_wait().ok().flatten(),
            Proc::Forked { ended, status } => {
                if status.is_none() {
                    *status = match ended.try_recv() {
                        Ok(raw) => Some(std::process::ExitStatus::from_raw(raw)),
                        Err(mpsc::TryRecvError::Empty) => None,
                        // The server is gone, and its children with it (they die with it).
                        Err(mpsc::TryRecvError::Disconnected) => {
                            Some(std::process::ExitStatus::from_raw(libc::SIGKILL))
                        }
                    };
                }
                *status
            }
        }
    }
}

/// The host memory a predicting worker may hold by default: its anonymous resident memory
/// (`RssAnon` in `/proc/PID/status`: heap and private pages it touched, the real data a script
/// keeps on the CPU; data-less CUDA tensors take none). Measured with torch 2.15: a Llama-3-70B
/// prediction's worker peaks at 0.81 GiB resident. Not a kernel limit: `RLIMIT_AS` breaks
/// `import torch` (3.7 GiB of address space mapped and never used), and `RLIMIT_DATA` counts
/// private file mappings, so a checkpoint loaded through safetensors' `mmap` (16 GB for an 8B
/// model, its pages never touched) failed under it. The run loop reads it every 200 ms and
/// stops the worker above it, saying so.
pub const PREDICT_MEMORY_CAP: u64 = 4 << 30;

/// The cap of a measuring worker: only the one the user sets in [`MEMORY_CAP_ENV`]. A measured
/// run is the user's real job, which may hold a dataset or optimizer states offloaded to the CPU,
/// and the CUDA driver's own host memory grows with the GPU's use: no default fits every job, so
/// none is imposed. `RunPlan` checks the variable before anything runs.
pub fn measure_memory_cap() -> Option<u64> {
    std::env::var_os(MEMORY_CAP_ENV).and_then(|_| predict_memory_cap().ok())
}

/// How often the run loop reads a capped worker's resident memory.
const MEMORY_CHECK_EVERY: Duration = Duration::from_millis(200);

/// The variable that sets another cap (a size: `16GiB`, `8GB`).
pub const MEMORY_CAP_ENV: &str = "ITERAGPU_WORKER_MEMORY";

/// The cap of a predicting worker: [`MEMORY_CAP_ENV`] when it is set to a size, else
/// [`PREDICT_MEMORY_CAP`]. A value that is not a size is an error naming it.
pub fn predict_memory_cap() -> Result<u64, String> {
    match std::env::var(MEMORY_CAP_ENV) {
        Err(_) => Ok(PREDICT_MEMORY_CAP),
        Ok(text) => match crate::units::parse_size(&text) {
            Ok(b) if b.0 > 0 => Ok(b.0),
            _ => Err(format!(
                "{MEMORY_CAP_ENV}={:?} is not a size of memory: give one such as 16GiB or 8GB, or unset it (a predicting worker then gets {}, a measuring worker no cap)",
                crate::output::terminal_safe(&text),
                crate::units::Bytes(PREDICT_MEMORY_CAP).both()
            )),
        },
    }
}

/// A process's state letter and parent pid, from `/proc/PID/stat` (`pid (comm) state ppid …`; the
/// command may hold spaces and parentheses).
fn state_and_parent(pid: u32) -> Option<(String, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?.to_string();
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// The anonymous resident memory of a process (`RssAnon`), `None` where /proc cannot tell.
fn resident_anonymous(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Lines written back to a predicting worker: the allocator model's answers to the script's own
/// `torch.cuda` memory calls (`prediction::answers`). The worker keeps its standard input for
/// them (the workload's own reads nothing); set once the worker is started.
#[derive(Clone, Debug, Default)]
pub struct AnswerPipe(Arc<Mutex<Option<std::fs::File>>>);

impl AnswerPipe {
    /// Writes one line; false when the worker is gone (or never started).
    pub fn send(&self, line: &str) -> bool {
        let mut pipe = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(stdin) = pipe.as_mut() else {
            return false;
        };
        let sent = stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.write_all(b"\n"))
            .and_then(|()| stdin.flush());
        if sent.is_err() {
            *pipe = None;
        }
        sent.is_ok()
    }

    fn set(&self, stdin: Option<std::fs::File>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = stdin;
    }
}

/// How the worker processes are started.
#[derive(Clone, Debug)]
pub enum Launch {
    /// `python -m iteragpu.worker SPEC.json`: its events on its standard output (source 0).
    Worker,
    /// `python -m torch.distributed.run … -m iteragpu.worker SPEC.json`: one worker per local
    /// rank, each a connection to a Unix socket of the CLI (sources 0, 1, … in connection order).
    Torchrun(crate::schema::torchrun::Torchrun),
}

/// How the worker ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    Timeout,
    /// Stopped by a signal the CLI received (SIGINT, SIGTERM, SIGHUP).
    Stopped(Stop),
    /// Stopped by the CLI: its resident memory passed this cap (`WorkerCommand::memory_cap`).
    MemoryCap(u64),
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit status {c}"),
            Exit::Signal(s) => write!(f, "killed by signal {s}"),
            Exit::Timeout => f.write_str("stopped after the timeout"),
            Exit::Stopped(stop) => write!(f, "stopped by {}", stop.name()),
            Exit::MemoryCap(cap) => write!(
                f,
                "stopped by iteragpu: it held more than {} of its own memory on the host (RssAnon)",
                crate::units::Bytes(*cap).both()
            ),
        }
    }
}

/// What the runner saw besides events.
#[derive(Clone, Debug)]
pub struct WorkerRun {
    pub exit: Exit,
    /// The worker's pid (torchrun's, under torchrun).
    pub pid: u32,
    /// The last lines the worker wrote on stderr.
    pub stderr_tail: Vec<String>,
    /// Event sources in the order their channel closed (a rank that died first is first).
    pub closed: Vec<usize>,
    /// Processes the workload started that outlived the worker (a detached child, a daemon),
    /// found as this process's adopted children and ended: `pid (command)`.
    pub left_running: Vec<String>,
    /// Why the fork server could not start this worker, which then ran in a fresh process.
    pub not_forked: Option<String>,
}

impl WorkerRun {
    /// What the result says of this worker; `pid` is the one it reported itself, if any.
    pub fn info(&self, pid: Option<u32>) -> WorkerInfo {
        let (exit_code, signal) = match self.exit {
            Exit::Code(c) => (Some(c), None),
            Exit::Signal(s) => (None, Some(s)),
            _ => (None, None),
        };
        let stderr_tail = self.stderr_tail.clone();
        WorkerInfo {
            pid: pid.or(Some(self.pid)),
            exit_code,
            signal,
            stderr_tail,
        }
    }

    /// `: LINE | LINE …`, the worker's last words on stderr for a message, or nothing.
    pub fn stderr_said(&self) -> String {
        if self.stderr_tail.is_empty() {
            String::new()
        } else {
            format!(": {}", self.stderr_tail.join(" | "))
        }
    }

    /// The signal the CLI received that stopped the worker, if one did.
    pub fn stopped(&self) -> Option<Stop> {
        match self.exit {
            Exit::Stopped(signal) => Some(signal),
            _ => None,
        }
    }

    /// The note a result carries for each process the workload left running.
    pub fn left_running_notes(&self, kept: bool) -> impl Iterator<Item = String> + '_ {
        self.left_running.iter().map(move |p| {
            if kept {
                format!(
                    "the workload left process {p} running after its worker ended (started in its own session): kept running (--keep-children); what it holds on the GPU is not this run's"
                )
            } else {
                format!(
                    "the workload left process {p} running after its worker ended (started in its own session): it was ended, so it holds no GPU memory after the run (--keep-children leaves it)"
                )
            }
        })
    }
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
    Line(usize, String),
    Closed(usize),
    /// Every expected source has connected, or none will any more.
    Accepted,
}

const STDERR_TAIL: usize = 40;

/// How long the output forwarders may still read after the worker ended: a descendant that keeps
/// the pipes open (a detached child) never delays the end of the run by more than this.
const FORWARDER_GRACE: Duration = Duration::from_secs(2);

/// Makes this process the reaper of its orphaned descendants (once, process-wide): a child that the
/// workload detached into its own session is adopted by the CLI when the worker ends, instead of
/// by init, so it can be named and ended.
fn become_subreaper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER only sets a flag of this process.
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
        }
    });
}

/// The workers running now (`sweep --predict` runs several at once, one per thread): never
/// mistaken for what another worker's workload left running.
static LIVE_WORKERS: Mutex<std::collections::BTreeSet<u32>> =
    Mutex::new(std::collections::BTreeSet::new());

/// Keeps a long-lived child of this process (a fork server) off the list of what a worker's
/// workload left running, while it lives (registered as it is spawned: `LiveProcess::spawn`).
#[derive(Debug)]
pub struct LiveProcess(u32);

impl LiveProcess {
    /// Spawns with `spawn` and registers the child it returns, with no worker's end in between
    /// (a worker ending meanwhile never takes it for something its workload left running).
    pub fn spawn(
        spawn: impl FnOnce() -> std::io::Result<std::process::Child>,
    ) -> std::io::Result<(std::process::Child, LiveProcess)> {
        // What its children leave running is adopted here, as a worker's is.
        become_subreaper();
        let mut live = LIVE_WORKERS.lock().unwrap_or_else(|e| e.into_inner());
        let child = spawn()?;
        live.insert(child.id());
        let pid = child.id();
        Ok((child, LiveProcess(pid)))
    }
}

impl Drop for LiveProcess {
    fn drop(&mut self) {
        LIVE_WORKERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.0);
    }
}

/// The processes this process adopted (their parent is us) other than `except` and the workers
/// still running: what the workload left running after the worker ended. Each is killed with its
/// group, then reaped.
fn end_adopted(except: u32, ranks: &[u32], keep: bool) -> Vec<String> {
    let me = std::process::id();
    let live = LIVE_WORKERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut left = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return left;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == except || pid == me || live.contains(&pid) {
            continue;
        }
        // Ranks under torchrun were ended on purpose: reaped, not reported.
        let rank = ranks.contains(&pid);
        let Some((state, ppid)) = state_and_parent(pid) else {
            continue;
        };
        if ppid != me {
            continue;
        }
        if state != "Z" && !rank {
            let command = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .split('\0')
                        .filter(|a| !a.is_empty())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            left.push(format!(
                "{pid} ({})",
                command.chars().take(200).collect::<String>()
            ));
            if keep {
                continue;
            }
            // SAFETY: signals to a process we adopted (and its own group, when it leads one).
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
                libc::killpg(pid as libc::pid_t, libc::SIGKILL);
            }
        }
        // SAFETY: reaps our own child; WNOHANG never blocks.
        unsafe {
            let mut status = 0;
            for _ in 0..50 {
                if libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) != 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    left
}

fn kill_group(pid: u32, signal: i32) {
    // Group 0 is this process's own and group 1 init's: never a worker's.
    if pid <= 1 {
        return;
    }
    // SAFETY: killpg only sends a signal; a group that no longer exists returns ESRCH.
    unsafe {
        libc::killpg(pid as libc::pid_t, signal);
    }
}

/// `MemAvailable` from `/proc/meminfo` (Linux), in bytes; `None` elsewhere or if unreadable.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

pub(crate) fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Reads one event channel line by line into `tx`, tagged with its source.
fn read_lines(source: usize, stream: impl std::io::Read + Send + 'static, tx: mpsc::Sender<Msg>) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            match line {
                Ok(l) => {
                    if tx.send(Msg::Line(source, l)).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = tx.send(Msg::Closed(source));
    });
}

/// Forwards a stream of the workload's own output (stderr; torchrun's stdout too) to ours, above
/// the progress display, keeping its last lines.
fn forward_lines(
    stream: impl std::io::Read + Send + 'static,
    forward: bool,
    progress: Option<Arc<dyn Progress>>,
    tail: Arc<Mutex<VecDeque<String>>>,
    mute: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            // Once the CLI stops a torchrun job, torchrun's own traceback (its reaction to the
            // signal) is kept in the result's stderr tail, not printed.
            if forward && !mute.load(Ordering::Relaxed) {
                match &progress {
                    Some(display) => display.println(&line),
                    None => {
                        let _ = writeln!(std::io::stderr().lock(), "{line}");
                    }
                }
            }
            let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
            if t.len() == STDERR_TAIL {
                t.pop_front();
            }
            t.push_back(line);
        }
    })
}

/// Accepts up to `expected` connections on the events socket (a thread each), until `finished`
/// is set; then says `Accepted`.
fn accept_ranks(
    listener: UnixListener,
    expected: usize,
    tx: mpsc::Sender<Msg>,
    finished: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let _ = listener.set_nonblocking(true);
        let mut accepted = 0;
        while accepted < expected && !finished.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((stream, _)) => {
                    let _ = stream.set_nonblocking(false);
                    read_lines(accepted, stream, tx.clone());
                    accepted += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(_) => break,
            }
        }
        let _ = tx.send(Msg::Accepted);
    })
}

/// How long a stopped torchrun gets to stop its ranks (they write their last events) before
/// everything is killed; torchrun's own grace is 30 s.
const TORCHRUN_GRACE: Duration = Duration::from_secs(5);
/// Once a rank has ended, how long the others get to be stopped by torchrun before the CLI
/// kills them itself (a rank blocked in a collective may never see torchrun's SIGTERM).
const RANK_FAILURE_GRACE: Duration = Duration::from_secs(10);

/// Runs one worker (or one torchrun job of this node) to the end, calling `on_line` with each
/// line of an event channel and its source.
pub fn run(
    cmd: &WorkerCommand,
    stop: &StopRequest,
    on_line: impl FnMut(usize, Line),
) -> Result<WorkerRun, StartError> {
    become_subreaper();
    // The channel's token: only lines that carry it are the worker's, or a rank's under
    // torchrun (which hands its environment to each rank); schema/events.rs.
    let token = new_token();
    let mut not_forked = None;
    if let (Some(forker), Launch::Worker) = (&cmd.forker, &cmd.launch) {
        match fork(cmd, forker.as_ref(), &token) {
            Ok(started) => return supervise(cmd, stop, on_line, started, token, None),
            Err(why) => not_forked = Some(why),
        }
    }
    let package = Package::write().map_err(StartError::Files)?;
    let spec_path = package.root().join("spec.json");
    std::fs::write(&spec_path, cmd.spec.to_string()).map_err(StartError::Files)?;
    let mut command = Command::new(&cmd.python);
    // Under torchrun: a private folder for the socket (a short path: Unix sockets allow ~107
    // bytes) and torchrun's logs.
    let mut socket_dir = None;
    let mut listener = None;
    match &cmd.launch {
        Launch::Worker => {}
        Launch::Torchrun(t) => {
            let dir = crate::python_side::private_dir("ranks").map_err(StartError::Files)?;
            let socket = dir.path().join("ev.sock");
            listener = Some(UnixListener::bind(&socket).map_err(StartError::Files)?);
            command.args(t.args(&dir.path().join("logs")));
            for var in crate::schema::torchrun::Torchrun::scrubbed(std::env::vars().map(|(k, _)| k))
            {
                command.env_remove(var);
            }
            command.env(crate::schema::torchrun::EVENTS_SOCKET, &socket);
            // What torchrun sets when it is unset (and says so in a banner on every run).
            if std::env::var_os("OMP_NUM_THREADS").is_none() {
                command.env("OMP_NUM_THREADS", "1");
            }
            socket_dir = Some(dir);
        }
    }
    command
        .arg("-m")
        .arg("iteragpu.worker")
        .arg(&spec_path)
        .env("PYTHONPATH", package.pythonpath())
        .env("PYTHONUNBUFFERED", "1")
        .stdin(if cmd.answers.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for (key, value) in &cmd.env {
        match value {
            Some(v) => command.env(key, v),
            None => command.env_remove(key),
        };
    }
    command.env(TOKEN_ENV, &token);
    crate::signals::die_with_parent(&mut command);
    // Registered while spawned, so that a worker ending meanwhile on another thread never takes
    // this one for something its workload left running.
    let mut live = LIVE_WORKERS.lock().unwrap_or_else(|e| e.into_inner());
    let mut child = command.spawn().map_err(|e| StartError::Interpreter {
        python: cmd.python.display().to_string(),
        reason: crate::output::reason(&e),
    })?;
    let pid = child.id();
    live.insert(pid);
    drop(live);
    let started = Started {
        pid,
        stdin: child
            .stdin
            .take()
            .map(|s| std::fs::File::from(OwnedFd::from(s))),
        stdout: Box::new(child.stdout.take().expect("stdout is piped")),
        stderr: Box::new(child.stderr.take().expect("stderr is piped")),
        proc: Proc::Spawned(child),
    };
    let mut run = supervise(
        cmd,
        stop,
        on_line,
        started,
        token,
        Some((listener, socket_dir)),
    )?;
    run.not_forked = not_forked;
    drop(package);
    Ok(run)
}

/// A worker just started, its standard streams (ours to read and write).
struct Started {
    pid: u32,
    proc: Proc,
    stdin: Option<std::fs::File>,
    stdout: Box<dyn std::io::Read + Send>,
    stderr: Box<dyn std::io::Read + Send>,
}

/// Asks `forker` for a worker running `cmd`, on three fresh pipes.
fn fork(cmd: &WorkerCommand, forker: &dyn Forker, token: &str) -> Result<Started, String> {
    let pipes = || std::io::pipe().map_err(|e| format!("cannot make a pipe: {e}"));
    let (stdin_read, stdin_write) = pipes()?;
    let (stdout_read, stdout_write) = pipes()?;
    let (stderr_read, stderr_write) = pipes()?;
    let stdin_child = if cmd.answers.is_some() {
        OwnedFd::from(stdin_read)
    } else {
        // Standard input reads nothing, as a fresh worker's.
        drop(stdin_read);
        OwnedFd::from(
            std::fs::File::open("/dev/null").map_err(|e| format!("cannot open /dev/null: {e}"))?,
        )
    };
    let mut env = vec![
        ("PYTHONUNBUFFERED".to_string(), Some("1".to_string())),
        (TOKEN_ENV.to_string(), Some(token.to_string())),
    ];
    env.extend(cmd.env.iter().cloned());
    let forked = forker.fork(
        &cmd.spec,
        &env,
        [
            stdin_child,
            OwnedFd::from(stdout_write),
            OwnedFd::from(stderr_write),
        ],
    )?;
    Ok(Started {
        pid: forked.pid,
        proc: Proc::Forked {
            ended: forked.ended,
            status: None,
        },
        stdin: cmd
            .answers
            .is_some()
            .then(|| std::fs::File::from(OwnedFd::from(stdin_write))),
        stdout: Box::new(stdout_read),
        stderr: Box::new(stderr_read),
    })
}

/// Follows a started worker to its end (see [`run`]); `torchrun` holds the ranks' socket and its
/// folder under torchrun.
fn supervise(
    cmd: &WorkerCommand,
    stop: &StopRequest,
    mut on_line: impl FnMut(usize, Line),
    started: Started,
    token: String,
    torchrun: Option<(Option<UnixListener>, Option<tempfile::TempDir>)>,
) -> Result<WorkerRun, StartError> {
    let Started {
        pid,
        proc: mut child,
        stdin,
        stdout,
        stderr,
    } = started;
    let (listener, socket_dir) = torchrun.unwrap_or((None, None));
    if let Some(answers) = &cmd.answers {
        answers.set(stdin);
    }
    let (tx, rx) = mpsc::channel();
    let tail = Arc::new(Mutex::new(VecDeque::new()));
    let finished = Arc::new(AtomicBool::new(false));
    let mute = Arc::new(AtomicBool::new(false));
    let mut forwarders = match listener {
        None => {
            read_lines(0, stdout, tx.clone());
            let _ = tx.send(Msg::Accepted);
            Vec::new()
        }
        Some(l) => {
            let expected = match &cmd.launch {
                Launch::Torchrun(t) => t.nproc_per_node as usize,
                Launch::Worker => 1,
            };
            let acceptor = accept_ranks(l, expected, tx.clone(), Arc::clone(&finished));
            // torchrun's stdout carries only the ranks' stray output and its own logs.
            let out = forward_lines(
                stdout,
                cmd.forward_output,
                cmd.progress.clone(),
                Arc::clone(&tail),
                Arc::clone(&mute),
            );
            vec![acceptor, out]
        }
    };
    drop(tx);
    forwarders.push(forward_lines(
        stderr,
        cmd.forward_output,
        cmd.progress.clone(),
        Arc::clone(&tail),
        Arc::clone(&mute),
    ));
    let torchrun = matches!(cmd.launch, Launch::Torchrun(_));

    let started = Instant::now();
    let mut last_memory_check = started;
    let mut forced: Option<Exit> = None;
    let mut ch = Channels {
        torchrun,
        token,
        launcher: pid,
        ..Channels::default()
    };
    let mut first_rank_end: Option<Instant> = None;
    let mut abandoned = false;
    let status = loop {
        if let Ok(msg) = rx.recv_timeout(Duration::from_millis(20)) {
            ch.handle(msg, &mut on_line);
        }
        if !abandoned
            && cmd
                .abandon
                .as_ref()
                .is_some_and(|a| a.load(Ordering::Relaxed))
        {
            abandoned = true;
            kill_group(pid, libc::SIGKILL);
            ch.kill_ranks();
        }
        if let Some(status) = child.try_wait() {
            break status;
        }
        if forced.is_none()
            && let Some(cap) = cmd.memory_cap
            && last_memory_check.elapsed() >= MEMORY_CHECK_EVERY
        {
            last_memory_check = Instant::now();
            if resident_anonymous(pid).is_some_and(|held| held > cap) {
                forced = Some(Exit::MemoryCap(cap));
                kill_group(pid, libc::SIGKILL);
                ch.kill_ranks();
            }
        }
        let timed_out = cmd.timeout.is_some_and(|t| started.elapsed() > t);
        let stopped = stop.get();
        if torchrun && !ch.closed.is_empty() && first_rank_end.is_none() {
            first_rank_end = Some(Instant::now());
        }
        if first_rank_end.is_some_and(|t| t.elapsed() > RANK_FAILURE_GRACE) {
            // torchrun stops the other ranks when one ends; one that did not stop is killed.
            ch.kill_ranks();
        }
        if forced.is_none() && (timed_out || stopped.is_some()) {
            forced = Some(match stopped {
                Some(signal) => Exit::Stopped(signal),
                None => Exit::Timeout,
            });
            // torchrun forwards the signal to every rank, which records it and ends.
            if torchrun {
                mute.store(true, Ordering::Relaxed);
            }
            kill_group(pid, libc::SIGTERM);
            let grace = Instant::now();
            let limit = if torchrun {
                TORCHRUN_GRACE
            } else {
                Duration::from_secs(2)
            };
            while grace.elapsed() < limit {
                if child.try_wait().is_some() {
                    break;
                }
                while let Ok(msg) = rx.try_recv() {
                    ch.handle(msg, &mut on_line);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            kill_group(pid, libc::SIGKILL);
            ch.kill_ranks();
        }
    };
    // The worker is gone: end anything it left in its group (and the ranks' groups), then
    // drain the channels.
    if let Some(answers) = &cmd.answers {
        answers.set(None);
    }
    kill_group(pid, libc::SIGKILL);
    ch.kill_ranks();
    finished.store(true, Ordering::Relaxed);
    // What the workload left running (adopted by this process now that the worker is gone) is
    // named and ended first: a detached child holding the pipes would delay the drain.
    LIVE_WORKERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&pid);
    let left_running = end_adopted(pid, &ch.rank_groups, cmd.keep_children);
    let drain_until = Instant::now() + Duration::from_secs(5);
    while !ch.drained() && Instant::now() < drain_until {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(msg) => ch.handle(msg, &mut on_line),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
    // The forwarders get a bounded time to finish reading.
    let join_until = Instant::now() + FORWARDER_GRACE;
    for f in forwarders {
        while !f.is_finished() && Instant::now() < join_until {
            std::thread::sleep(Duration::from_millis(10));
        }
        if f.is_finished() {
            let _ = f.join();
        }
    }
    drop(socket_dir);
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
        closed: ch.closed,
        left_running,
        not_forked: None,
    })
}

/// The event channels of a run: which are open, which closed (in order), the ranks' groups.
#[derive(Default)]
struct Channels {
    torchrun: bool,
    /// Sources seen so far (a source's first message opens it).
    connected: usize,
    open: usize,
    closed: Vec<usize>,
    /// Every expected source connected, or none will any more.
    all_accepted: bool,
    /// Each rank leads its own session under torchrun: its pid is its group.
    rank_groups: Vec<u32>,
    /// The token each line carries, on the worker's stdout or a rank's socket connection: a
    /// line without it (a forked child's, a stray connection's) is forged, and a forged `hello`
    /// never makes its pid one of the ranks' groups to stop.
    token: String,
    /// The process the CLI started (torchrun, or the worker).
    launcher: u32,
}

impl Channels {
    fn handle(&mut self, msg: Msg, on_line: &mut impl FnMut(usize, Line)) {
        match msg {
            Msg::Line(source, line) => {
                if source >= self.connected {
                    self.connected = source + 1;
                    self.open += 1;
                }
                let parsed = parse_signed(&line, &self.token);
                // A rank is torchrun's own child: no other pid becomes a group to stop.
                if let Line::Event(crate::schema::events::Event::Hello { pid, .. }) = &parsed
                    && self.torchrun
                    && state_and_parent(*pid).is_some_and(|(_, parent)| parent == self.launcher)
                {
                    self.rank_groups.push(*pid);
                }
                on_line(source, parsed);
            }
            Msg::Closed(source) => {
                if source >= self.connected {
                    self.connected = source + 1;
                } else {
                    self.open = self.open.saturating_sub(1);
                }
                self.closed.push(source);
            }
            Msg::Accepted => self.all_accepted = true,
        }
    }

    fn drained(&self) -> bool {
        self.all_accepted && self.open == 0 && self.closed.len() >= self.connected
    }

    fn kill_ranks(&self) {
        for g in &self.rank_groups {
            kill_group(*g, libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what is printed above a display.
    #[derive(Default)]
    struct Above(Mutex<Vec<String>>);

    impl Progress for Above {
        fn println(&self, line: &str) {
            self.0.lock().unwrap().push(line.to_string());
        }
    }

    /// With a display up, the workload's own lines go through it (above the bar), in order, and
    /// are kept in the tail; never written to standard error under the bar.
    #[test]
    fn the_workloads_lines_go_through_the_display() {
        let display = Arc::new(Above::default());
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let text = "warning: one\nwarning: two\n";
        forward_lines(
            std::io::Cursor::new(text.as_bytes().to_vec()),
            true,
            Some(display.clone() as Arc<dyn Progress>),
            Arc::clone(&tail),
            Arc::new(AtomicBool::new(false)),
        )
        .join()
        .unwrap();
        assert_eq!(*display.0.lock().unwrap(), ["warning: one", "warning: two"]);
        assert_eq!(tail.lock().unwrap().len(), 2);
    }
}

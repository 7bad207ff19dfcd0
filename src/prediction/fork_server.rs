//! The predicting fork server's client: one Python process (`python/iteragpu/fork_server.py`)
//! imports torch and the workload's libraries once, then forks one child per trial, each the
//! predicting worker a fresh process would be (its own process group, the same spec, environment,
//! standard streams, memory cap, timeout and signals: `workload::process::run` follows it as it
//! follows a spawned worker). A 10-trial dense frontier thus imports torch once, not ten times.
//!
//! One server forking up to the sweep's parallelism at once, not a pool of servers: a fork costs
//! milliseconds whatever the number of children, and each server would import torch again (seconds
//! of a core, and a few hundred MB of its own memory); the children share its pages.
//!
//! The protocol is JSON messages over an anonymous `SOCK_SEQPACKET` socketpair (the server's
//! standard input), each fork request carrying the trial's three standard streams as descriptors
//! (`SCM_RIGHTS`): no name on the filesystem, nothing another process can connect to.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::Duration;

use crate::python_side::Package;
use crate::workload::plan::RunPlan;
use crate::workload::process::{Forked, Forker, LiveProcess};

/// The variable that turns the server off (`0`): every prediction in a fresh process.
pub const ENV: &str = "ITERAGPU_FORK_SERVER";

/// How long the server may take to import torch and the libraries (minutes on a loaded machine).
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the server may take to end by itself once its requests end.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// How long a fork request may wait for its child's pid: a trial that shares a build
/// (`python/iteragpu/built_once.py`) starts once the model is built (minutes for the largest).
const FORK_TIMEOUT: Duration = Duration::from_secs(300);

type Waiting = HashMap<u64, (Option<mpsc::Sender<Result<u32, String>>>, mpsc::Sender<i32>)>;

/// A running fork server; dropped, it is killed (its children die with it: each set
/// `PR_SET_PDEATHSIG`, and the run loop kills each child's group at its trial's end).
pub struct ForkServer {
    control: UnixDatagram,
    waiting: Arc<Mutex<Waiting>>,
    next: AtomicU64,
    /// The server's pid.
    pub pid: u32,
    /// Its torch's version.
    pub torch: String,
    /// Ends the keeper thread, which kills and reaps the server.
    shutdown: Mutex<Option<mpsc::Sender<()>>>,
    keeper: Mutex<Option<std::thread::JoinHandle<()>>>,
    _package: Package,
}

/// Whether predictions may go through a fork server (`ITERAGPU_FORK_SERVER` is not `0`).
pub fn enabled() -> bool {
    std::env::var(ENV).map_or(true, |v| v.trim() != "0")
}

impl std::fmt::Debug for ForkServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ForkServer(pid {}, torch {})", self.pid, self.torch)
    }
}

impl ForkServer {
    /// Starts a server with `python`, preloading what `spec`'s workload imports; `Err` says why
    /// it cannot serve (no torch, an import error, an old Python), and the caller predicts in
    /// fresh processes.
    pub fn start(python: &Path, spec: &Value) -> Result<ForkServer, String> {
        let package = Package::write().map_err(|e| format!("cannot write its files: {e}"))?;
        let (ours, theirs) = seqpacket_pair().map_err(|e| format!("no socketpair: {e}"))?;
        let mut command = Command::new(python);
        command
            .arg("-m")
            .arg("iteragpu.fork_server")
            .env("PYTHONPATH", package.pythonpath())
            .env("PYTHONUNBUFFERED", "1")
            // Never a GPU, as each predicting worker (its children set it again).
            .env("CUDA_VISIBLE_DEVICES", "")
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        // The server dies with the thread that spawned it (PR_SET_PDEATHSIG): a keeper thread
        // that lives as long as the server, whichever sweep thread asked first.
        let (started_tx, started_rx) = mpsc::channel();
        let (shutdown_tx, shutdown_rx) = mpsc::channel::<()>();
        let keeper = std::thread::spawn(move || {
            crate::signals::die_with_parent(&mut command);
            let (mut child, live) = match LiveProcess::spawn(|| command.spawn()) {
                Ok(c) => c,
                Err(e) => {
                    let _ = started_tx.send(Err(crate::output::reason(&e)));
                    return;
                }
            };
            let stderr = child.stderr.take();
            let _ = started_tx.send(Ok((child.id(), stderr)));
            // Until dropped (or this process ends).
            let _ = shutdown_rx.recv();
            // Its request channel closed, the server kills its children and ends by itself
            // (removing its temporary folders); killed after a grace period regardless.
            let until = std::time::Instant::now() + SHUTDOWN_GRACE;
            while std::time::Instant::now() < until && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(10));
            }
            // SAFETY: signals the server's own group (it leads it: process_group(0)).
            unsafe {
                libc::killpg(child.id() as libc::pid_t, libc::SIGKILL);
            }
            let _ = child.wait();
            drop(live);
        });
        let (pid, stderr) = match started_rx.recv() {
            Ok(Ok(started)) => started,
            Ok(Err(why)) => return Err(format!("`{}` did not start: {why}", python.display())),
            Err(_) => return Err("its keeper thread ended".into()),
        };
        // Its last words on stderr, for the reason it gives up.
        let said = Arc::new(Mutex::new(Vec::<String>::new()));
        if let Some(stderr) = stderr {
            let said = Arc::clone(&said);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let mut s = said.lock().unwrap_or_else(|e| e.into_inner());
                    if s.len() == 8 {
                        s.remove(0);
                    }
                    s.push(line);
                }
            });
        }
        let control = UnixDatagram::from(ours);
        let mut server = ForkServer {
            control,
            waiting: Arc::default(),
            next: AtomicU64::new(0),
            pid,
            torch: String::new(),
            shutdown: Mutex::new(Some(shutdown_tx)),
            keeper: Mutex::new(Some(keeper)),
            _package: package,
        };
        let why_not = |what: String| {
            let said = said.lock().unwrap_or_else(|e| e.into_inner()).join(" | ");
            if said.is_empty() {
                what
            } else {
                format!("{what}: {said}")
            }
        };
        // A builder (built_once.py) is no trial the run loop watches: it caps its own memory.
        let cap = crate::workload::process::predict_memory_cap().ok();
        let preload = json!({"type": "preload", "spec": spec, "memory_cap": cap}).to_string();
        server
            .control
            .send(preload.as_bytes())
            .map_err(|e| why_not(format!("it did not take its first request ({e})")))?;
        server
            .control
            .set_read_timeout(Some(READY_TIMEOUT))
            .map_err(|e| e.to_string())?;
        let mut buffer = vec![0u8; 1 << 16];
        let n = server.control.recv(&mut buffer).map_err(|e| {
            why_not(format!(
                "it was not ready after {} s ({e})",
                READY_TIMEOUT.as_secs()
            ))
        })?;
        let reply: Value = serde_json::from_slice(&buffer[..n]).map_err(|_| {
            std::thread::sleep(Duration::from_millis(100));
            why_not("it ended before it was ready".into())
        })?;
        match reply["type"].as_str() {
            Some("ready") => server.torch = reply["torch"].as_str().unwrap_or("?").to_string(),
            Some("unavailable") => {
                return Err(format!(
                    "it could not import what predictions need ({})",
                    reply["reason"].as_str().unwrap_or("no reason given")
                ));
            }
            _ => return Err(format!("it answered {reply} instead of ready")),
        }
        server
            .control
            .set_read_timeout(None)
            .map_err(|e| e.to_string())?;
        let reader = server.control.try_clone().map_err(|e| e.to_string())?;
        let waiting = Arc::clone(&server.waiting);
        std::thread::spawn(move || read_replies(&reader, &waiting));
        Ok(server)
    }
}

/// A sweep's fork server, started by the first prediction that asks (on whichever thread), shared
/// by every later one; where it cannot start, why (each prediction then runs in a fresh process
/// and says so in its notes).
#[derive(Debug, Default)]
pub struct Shared(OnceLock<Option<Result<Arc<ForkServer>, String>>>);

impl Shared {
    /// The server for `plan`'s predictions: `None` when turned off (`ITERAGPU_FORK_SERVER=0`),
    /// `Err` why it could not start.
    pub fn get(&self, plan: &RunPlan) -> Option<Result<Arc<dyn Forker>, String>> {
        let started = self.0.get_or_init(|| {
            if !enabled() {
                return None;
            }
            let spec = serde_json::to_value(&plan.trial().spec).unwrap_or_default();
            Some(ForkServer::start(&plan.python, &spec).map(Arc::new))
        });
        started.as_ref().map(|s| match s {
            Ok(server) => Ok(Arc::clone(server) as Arc<dyn Forker>),
            Err(why) => Err(why.clone()),
        })
    }
}

/// Routes the server's replies to the trial that asked; when the server is gone, every waiting
/// trial sees its channels closed (its child died with the server).
fn read_replies(control: &UnixDatagram, waiting: &Mutex<Waiting>) {
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let n = match control.recv(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let Ok(reply) = serde_json::from_slice::<Value>(&buffer[..n]) else {
            continue;
        };
        let Some(id) = reply["id"].as_u64() else {
            continue;
        };
        let mut w = waiting.lock().unwrap_or_else(|e| e.into_inner());
        match reply["type"].as_str() {
            Some("started") => {
                if let Some((started, _)) = w.get_mut(&id)
                    && let Some(tx) = started.take()
                {
                    let pid = reply["pid"].as_u64().unwrap_or(0) as u32;
                    let _ = tx.send(Ok(pid));
                }
            }
            Some("exit") => {
                if let Some((_, ended)) = w.remove(&id) {
                    let _ = ended.send(reply["status"].as_i64().unwrap_or(0) as i32);
                }
            }
            _ => {
                if let Some((Some(started), _)) = w.remove(&id) {
                    let why = reply["reason"].as_str().unwrap_or("no reason given");
                    let _ = started.send(Err(why.to_string()));
                }
            }
        }
    }
    waiting.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

impl Forker for ForkServer {
    fn fork(
        &self,
        spec: &Value,
        env: &[(String, Option<String>)],
        streams: [OwnedFd; 3],
    ) -> Result<Forked, String> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (started_tx, started_rx) = mpsc::channel();
        let (ended_tx, ended_rx) = mpsc::channel();
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, (Some(started_tx), ended_tx));
        let request = json!({"type": "fork", "id": id, "spec": spec, "env": env}).to_string();
        let fds: Vec<RawFd> = streams.iter().map(AsRawFd::as_raw_fd).collect();
        let sent = send_with_fds(&self.control, request.as_bytes(), &fds);
        // The server holds its own copies now (or never will).
        drop(streams);
        let forget = || {
            self.waiting
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id)
        };
        if let Err(e) = sent {
            forget();
            return Err(format!("the fork server did not take the request: {e}"));
        }
        match started_rx.recv_timeout(FORK_TIMEOUT) {
            Ok(Ok(pid)) => Ok(Forked {
                pid,
                ended: ended_rx,
            }),
            Ok(Err(why)) => Err(why),
            Err(_) => {
                forget();
                Err(
                    "the fork server did not start the child (it is gone, or took over a minute)"
                        .into(),
                )
            }
        }
    }
}

impl Drop for ForkServer {
    fn drop(&mut self) {
        let _ = self.control.shutdown(std::net::Shutdown::Both);
        self.shutdown
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(keeper) = self.keeper.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = keeper.join();
        }
    }
}

/// Two connected `SOCK_SEQPACKET` sockets (message boundaries kept), closed on exec.
fn seqpacket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: socketpair writes two descriptors into the array on success.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sends one message with `fds` attached (`SCM_RIGHTS`).
fn send_with_fds(socket: &UnixDatagram, data: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let payload = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
    // u64s: the control buffer must be aligned for cmsghdr.
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain data; every pointer set below outlives the sendmsg call, and the
    // control buffer has CMSG_SPACE(payload) bytes for the one header written into it.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(payload) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr() as *const u8,
            libc::CMSG_DATA(cmsg),
            payload as usize,
        );
        if libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

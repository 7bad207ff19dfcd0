"""A predicted sweep's model built once: a builder process, and one copy of it per trial.

Every trial of a predicted sweep over `batch`, `context`, `prompt`/`new-tokens` or `images` builds
the same data-less model first (an 8B model quantized to nf4 and wrapped in LoRA adapters: seconds
of a core per trial), because nothing the varied dimension decides is read before the model is
built. The fork server (`fork_server.py`) hands such trials to a *builder*:

* the builder is a child of the server that runs the predicting worker for the first trial's spec
  up to the workload's build point (`resume`, called by a built-in workload right after its
  `model_load` phase), with no CLI on its streams: its events and standard error go to memory
  files. A built-in workload's phases ask the CLI nothing (`Recorder.reads_counters`), and a
  question all the same (`memory.ask`: an allocator counter, a Hub file) abandons the build
  (`abandon`), as does a thread left running: the trials are then forked by the server as before,
  each building its own model. The prediction's self-test backward runs in a throwaway fork
  (`check_apart`): a process forked after a backward cannot run one (autograd's device threads);
* at the build point the builder keeps what was written, says `built` to the server, and forks one
  grandchild per trial. The grandchild takes the trial's three streams, its environment (the
  channel's token, the answer pipe), becomes the worker (`on_adopt` hooks: every "only the worker
  speaks" check follows it), writes the build's events and standard error first, then a note, and
  returns the trial's own spec to the workload, which goes on.

The CLI reads a trial's stream as it reads a fresh worker's: the build's events replay through the
allocator model exactly as they would, so the state at the build point is carried into each trial
exactly; the documents are those of per-trial builds (tests/integration/built_once.rs holds them
equal). The builder relays each grandchild's pid and wait status through the server.

Only keys a workload reads after its build point may differ between the trials that share a builder
(`AFTER_BUILD`); any other difference (the card, the quantization, an environment variable other
than the channel's token and the Hub overlay) is another builder. `ITERAGPU_BUILD_ONCE=0` turns builders off.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import threading
from typing import Any, Callable

# The variable that turns builders off (`0`): every trial builds its own model.
ENV: str = "ITERAGPU_BUILD_ONCE"

# Set in a trial whose sweep could not share its build: why (the prediction says it in a note).
NOT_SHARED: str = "ITERAGPU_BUILD_NOT_SHARED"

# Per built-in workload, the spec's keys read only after its build point (`resume`).
AFTER_BUILD: dict[str, frozenset[str]] = {
    "causal-lm": frozenset({"batch", "context", "prompt_tokens", "new_tokens", "steps", "whole_loop"}),
    "vision": frozenset({"images", "steps", "whole_loop"}),
}

# Environment variables that differ between trials without changing what is built.
# (The Hub overlay is each prediction's own folder: hub_files.py follows the trial's.)
# A sweep's symbolic trace is asked at the build point (`on_resume`), the build itself unchanged.
_PER_TRIAL_ENV: frozenset[str] = frozenset({"ITERAGPU_CHANNEL_TOKEN", "ITERAGPU_HUB_OVERLAY", "ITERAGPU_PREDICT_SYMBOLIC_TRACE"})

MESSAGE_BYTES: int = 1 << 20

# The real `os._exit`: a workload's stand-in (workload.explain_hard_exit) speaks for the worker.
_EXIT: Callable[[int], Any] = os._exit

# The predicting worker's memory cap (the CLI's, from the server's first request): a builder is no
# trial the CLI watches, so it holds its data segment under twice the cap itself (RLIMIT_DATA
# counts reserved, not resident, memory); over it, the build fails and each trial builds its own.
MEMORY_CAP: int | None = None

# Set in a builder process: the state `resume` serves from (None elsewhere).
_BUILDER: _Builder | None = None
_ADOPT: list[Callable[[], None]] = []
_RESUME: list[Callable[[Any], Any]] = []
_IN_TRIAL: bool = False
_FLUSH: Callable[[], None] | None = None


def key(doc: Any, env: list[Any]) -> str | None:
    """What trials share a builder when equal; None when this trial cannot share one (not a
    built-in workload with a build point, a sharded or multi-rank run, builders turned off)."""
    if os.environ.get(ENV) == "0" or not isinstance(doc, dict) or not isinstance(doc.get("predict"), dict):
        return None
    after = AFTER_BUILD.get(str(doc.get("workload")))
    if after is None or doc.get("world_size") or doc.get("shard") or doc.get("script"):
        return None
    kept = {k: v for k, v in doc.items() if k not in after}
    variables = sorted((str(k), v) for k, v in env if k not in _PER_TRIAL_ENV)
    return json.dumps([kept, variables], sort_keys=True, default=str)


def on_adopt(hook: Callable[[], None]) -> None:
    """`hook()` runs in each trial forked from a builder, once the trial's streams and environment
    are in place: what checks "am I the worker" by pid follows the new process."""
    _ADOPT.append(hook)


def check_apart(check: Callable[[], None]) -> str | None:
    """In a builder: `check()` run in a throwaway forked copy of this process; what it raised, or
    None when it passed. A check that runs a backward starts
    autograd's device threads, and no process forked after that can run one: the builder's
    trials could not."""
    builder = _BUILDER
    assert builder is not None  # called by a builder only
    reading, writing = os.pipe()
    said = builder.channel._said_fork
    builder.channel._said_fork = True  # our own fork: no note for the workload
    try:
        pid = os.fork()
    finally:
        builder.channel._said_fork = said
    if pid == 0:
        os.close(reading)
        code = 0
        try:
            check()
        except BaseException as exc:  # the reason goes back to the builder, whatever it is
            os.write(writing, str(exc).encode()[:4000] or type(exc).__name__.encode())
            code = 1
        _EXIT(code)
    os.close(writing)
    with os.fdopen(reading, "rb") as f:
        reason = f.read().decode("utf-8", "replace")
    _, status = os.waitpid(pid, 0)
    return None if status == 0 else (reason or f"the check ended with wait status {status}")


def in_trial() -> bool:
    """Whether this process is a trial forked from a builder."""
    return _IN_TRIAL


def building() -> bool:
    """Whether this process is a builder still before its build point."""
    return _BUILDER is not None


def abandon(reason: str) -> None:
    """In a builder: the build cannot be shared (`reason`); the server forks the trials itself."""
    builder = _BUILDER
    if builder is None:
        return
    try:
        _send(builder.control, {"type": "unbuildable", "reason": reason})
    finally:
        _EXIT(0)


def resume(spec: Any) -> Any:
    """The build point of a built-in workload: `spec` itself in a worker; in a builder, it returns
    in each trial's process with that trial's spec."""
    builder = _BUILDER
    if builder is not None:
        spec = builder.serve()
    for hook in _RESUME:
        spec = hook(spec)
    return spec


def on_resume(hook: Callable[[Any], Any]) -> None:
    """`hook(spec)` runs at the build point, in the trial, and returns the spec the workload goes
    on with (a sweep's symbolic trace: `predict/symbolic.py`)."""
    _RESUME.append(hook)


class _Builder:
    def __init__(self, control: socket.socket, events_fd: int, stderr_fd: int, channel: Any) -> None:
        self.control = control
        self.events_fd = events_fd
        self.stderr_fd = stderr_fd
        self.channel = channel
        self.data_limit: int | None = None  # the soft RLIMIT_DATA a trial gets back
        self.threads: int | None = None  # torch's intra-op threads a trial gets back

    def serve(self) -> Any:
        """Says `built`, then forks a trial per request; returns only in a trial."""
        global _BUILDER, _IN_TRIAL
        if _FLUSH is not None:
            _FLUSH()
        sys.stdout.flush()
        sys.stderr.flush()
        others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
        if others:
            abandon(f"threads still running at the build point ({', '.join(others)}) would not exist in a forked copy")
        events = _read_all(self.events_fd).decode("utf-8", "replace").splitlines()
        errors = _read_all(self.stderr_fd)
        self.channel._said_fork = True  # a trial's fork is not the workload's: no note
        _send(self.control, {"type": "built", "pid": os.getpid(), "events": len(events)})
        builder = os.getpid()
        children: dict[int, tuple[Any, int]] = {}  # pidfd -> (request id, pid)
        while True:
            waited: list[Any] = [self.control, *children]
            ready, _, _ = select.select(waited, [], [])
            for ready_fd in ready:
                if isinstance(ready_fd, int):
                    ident, pid = children.pop(ready_fd)
                    _, status = os.waitpid(pid, 0)
                    os.close(ready_fd)
                    _send(self.control, {"type": "exit", "id": ident, "pid": pid, "status": status})
                    continue
                message, fds, _, _ = socket.recv_fds(self.control, MESSAGE_BYTES, 3)
                if not message:
                    for _, pid in children.values():
                        _kill_group(pid)
                    _EXIT(0)
                request = json.loads(message)
                ident = request.get("id")
                if len(fds) != 3:
                    for fd in fds:
                        os.close(fd)
                    _send(self.control, {"type": "failed", "id": ident, "reason": "a request without its three streams"})
                    continue
                try:
                    pid = os.fork()
                except OSError as exc:
                    for fd in fds:
                        os.close(fd)
                    _send(self.control, {"type": "failed", "id": ident, "reason": f"fork failed: {exc}"})
                    continue
                if pid == 0:
                    _BUILDER, _IN_TRIAL = None, True
                    return self._become(request, fds, [*children], builder, events, errors)
                for fd in fds:
                    os.close(fd)
                try:
                    os.setpgid(pid, pid)
                except OSError:  # the child did it first, or already ended
                    pass
                children[os.pidfd_open(pid)] = (ident, pid)
                _send(self.control, {"type": "started", "id": ident, "pid": pid})

    def _become(self, request: dict[str, Any], fds: list[int], others: list[int], builder: int, events: list[str], errors: bytes) -> Any:
        """In a trial's process: the trial's streams and environment, the build's output first."""
        from . import spec as specs

        os.setpgid(0, 0)
        _die_with(builder)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in [*fds, *others, self.control.fileno(), self.events_fd, self.stderr_fd]:
            if fd > 2:
                try:
                    os.close(fd)
                except OSError:  # closed already
                    pass
        for name, value in request.get("env", []):
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        if self.data_limit is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_DATA, (self.data_limit, resource.getrlimit(resource.RLIMIT_DATA)[1]))
        if self.threads is not None:
            sys.modules["torch"].set_num_threads(self.threads)
        self.channel.adopt()
        for hook in _ADOPT:
            hook()
        os.write(2, errors)
        self.channel.write_lines(events)
        self.channel.emit(
            "note",
            {
                "text": "the model was built once for this sweep's trials: this trial went on from a copy (fork) of a process "
                "that built it with the same spec, whose build events are replayed first (ITERAGPU_BUILD_ONCE=0 builds it in every trial)"
            },
        )
        return specs.parse(request["spec"])


def become_builder(control: socket.socket, channel: Any, events_fd: int, stderr_fd: int) -> None:
    """Makes this new process a builder (`fork_server` then runs the worker in it): `resume`
    serves from it at the build point."""
    global _BUILDER
    _BUILDER = _Builder(control, events_fd, stderr_fd, channel)
    # OpenMP's thread pool (torch's CPU ops on known values during the build) does not survive a
    # fork: a copy that uses it hangs. The build runs on one thread; each trial gets the count a
    # fresh worker has back.
    torch = sys.modules.get("torch")
    if torch is not None:
        _BUILDER.threads = torch.get_num_threads()
        torch.set_num_threads(1)
    if MEMORY_CAP is not None:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        _BUILDER.data_limit = soft
        capped = 2 * MEMORY_CAP if hard == resource.RLIM_INFINITY else min(2 * MEMORY_CAP, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (capped, hard))


def ended_early(code: int) -> str:
    """Why a builder's worker ended before its build point: its `done` event's error, if any."""
    builder = _BUILDER
    why = f"the workload ended before its build point (exit code {code})"
    if builder is None:
        return why
    if _FLUSH is not None:
        _FLUSH()
    for line in reversed(_read_all(builder.events_fd).decode("utf-8", "replace").splitlines()):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("type") in ("done", "unavailable"):
            data = event.get("data") or {}
            error = data.get("error") or {}
            said = f"{error.get('type')}: {error.get('message')}" if error else data.get("reason")
            return f"{why}: {str(said)[:600]}" if said else why
    return why


def set_flush(flush: Callable[[], None]) -> None:
    """The running prediction's flush of its pending events, called at the build point."""
    global _FLUSH
    _FLUSH = flush


def _read_all(fd: int) -> bytes:
    """A memory file's bytes from its start (`pread`: the writers' offset is left as it is)."""
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def _die_with(parent: int) -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # no prctl (not Linux): the CLI still kills the trial's group
        pass
    if os.getppid() != parent:
        _EXIT(1)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:  # already gone
        pass


def _send(control: socket.socket, message: dict[str, Any]) -> None:
    control.send(json.dumps(message).encode() + b"\n")

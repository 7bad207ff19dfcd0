"""A predicting worker that imports torch once and forks one child per trial (`sweep --predict`).

`python -m iteragpu.fork_server` is started by the CLI with a Unix SOCK_SEQPACKET socket (an
anonymous socketpair, never a name) as its standard input. Each message is one JSON object:

* CLI → server, first: `{"type": "preload", "spec": SPEC}`: the server imports torch, the predicting
  modules and the libraries the spec's workload imports (transformers and the model's modeling
  module, peft for LoRA), then answers `{"type": "ready", "pid", "torch", "threads"}` or
  `{"type": "unavailable", "reason"}` (the CLI then predicts in fresh processes and says so);
* CLI → server: `{"type": "fork", "id", "spec", "env"}` with three descriptors attached
  (SCM_RIGHTS): the trial's standard input (the answer pipe), output (the event channel) and error;
* server → CLI: `{"type": "started", "id", "pid"}`, then `{"type": "exit", "id", "pid", "status"}`
  (the raw wait status) when the child ends, or `{"type": "failed", "id", "reason"}`.

Why fork and not one interpreter reused: a trial's workload may monkeypatch torch, set environment
variables, leave threads, fill caches or crash the process (a segfault, `os._exit`, `sys.exit`); a
forked child's changes die with it, so the next trial starts from the state the server had after
its imports, as a fresh process starts from its own imports. Proving a reused interpreter clean
would mean undoing whatever a user's script did, which nothing can check.

What makes the fork safe: the server runs no tensor op, so torch's intra-op thread pool, the
autograd engine's threads and the fake CUDA device (`predict/native.py`, the shims) are set up in
each child as a fresh worker sets them up. The server itself is single-threaded: importing torch
starts one thread, numpy's OpenBLAS pool, which OpenBLAS stops before each fork
(`pthread_atfork`) and restarts on demand; `ready` reports the count. Children end with
`os._exit`; one that crashes is that trial's failure, read from its wait status, and the server
keeps serving.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import traceback
from typing import Any

from . import built_once

MESSAGE_BYTES: int = 1 << 20


def _send(control: socket.socket, message: dict[str, Any]) -> None:
    control.send(json.dumps(message).encode() + b"\n")


def preload(spec: dict[str, Any]) -> str:
    """Imports what every trial of `spec`'s workload imports, without running anything; returns
    torch's version."""
    import importlib

    import torch

    # FakeTensorMode's constructor imports torch._dynamo (3 s of a 2-core machine's 4 s dense
    # prediction): an import, nothing run. On torch 2.6 it makes a temporary folder, the
    # server's (each child forgets its finalizer; the server removes it as it ends).
    import torch._dynamo  # noqa: F401
    import torch._subclasses.fake_tensor  # noqa: F401  (every prediction's FakeTensorMode)

    from . import predict, worker, workload  # noqa: F401
    from .predict import memory, native, session, steady, tracker  # noqa: F401

    kind = spec.get("workload")
    module = {"dense": "dense", "causal-lm": "causal_lm", "vision": "vision", "vlm": "vlm"}.get(str(kind))
    if module is not None:
        importlib.import_module(f"{__package__}.workloads.{module}")
    if kind in ("causal-lm", "vision", "vlm"):
        try:
            import transformers

            config = spec.get("model_config")
            if isinstance(config, str) and os.path.isfile(config):
                with open(config, encoding="utf-8") as f:
                    model_type = json.load(f).get("model_type")
                # transformers loads each model family's module lazily: the modeling module of
                # this family, imported once here (an import, no model built). The file's name
                # reaches the import only as one of transformers' own model types.
                from transformers.models.auto.configuration_auto import (
                    CONFIG_MAPPING_NAMES,
                    model_type_to_module_name,
                )

                if isinstance(model_type, str) and model_type in CONFIG_MAPPING_NAMES:  # allowlisted
                    name = model_type_to_module_name(model_type)
                    try:
                        importlib.import_module(f"transformers.models.{name}.modeling_{name}")
                    except Exception:  # a family with another module layout: the child imports it
                        pass
            if spec.get("lora_rank"):
                try:
                    import peft  # noqa: F401
                except Exception:  # peft missing: the child reports it as the workload does
                    pass
            del transformers
        except Exception:  # transformers missing or broken: each child says so as a fresh worker does
            pass
    # What each child must set up itself, as a fresh worker does: checked, never assumed.
    if native._ENABLED or torch.cuda.is_initialized():
        raise RuntimeError("importing the workload's libraries set up CUDA state (the shims or a CUDA context) before any fork")
    # The children's collector as a fresh worker's (predict/collector.py), the imports frozen once
    # here: their pages then stay shared with every child.
    from .predict import collector

    collector.tune()
    collector.freeze_imports()
    return str(torch.__version__)


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def _fresh(control: socket.socket, fds: list[int], others: list[int], server: int, env: list[Any]) -> None:
    """In a forked child: the process state a fresh interpreter starts with (its own group, dying
    with the server, default signals, `fds` as its standard streams, `env` applied)."""
    os.setpgid(0, 0)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: dies with the server
    except Exception:  # no prctl (not Linux): the CLI still kills the child's group
        pass
    if os.getppid() != server:
        os._exit(1)
    # The signal handling a fresh interpreter starts with.
    for signum in signal.valid_signals():
        if signum in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            if signum == signal.SIGINT:
                signal.signal(signum, signal.default_int_handler)
            elif signum in (signal.SIGPIPE, getattr(signal, "SIGXFSZ", signal.SIGPIPE)):
                signal.signal(signum, signal.SIG_IGN)
            else:
                signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):  # a signal Python may not touch
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    # The trial's own standard streams; nothing of the server's stays open.
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    for fd in fds + others:
        if fd > 2:
            os.close(fd)
    control.close()
    _forget_parent_finalizers()
    for key, value in env:
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    # A fresh interpreter's random states come from the OS; the workload seeds its own.
    import random

    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        try:
            numpy.random.seed()
        except Exception:  # an unusual numpy: its global state is the workload's to seed
            pass


def _child(control: socket.socket, request: dict[str, Any], fds: list[int], others: list[int], server: int) -> None:
    """In the forked child: becomes a fresh predicting worker for `request`, then `os._exit`."""
    code = 1
    try:
        _fresh(control, fds, others, server, request.get("env", []))
        from . import worker
        from .channel import Channel

        sys.argv = [worker.__file__]
        code = worker.run_spec(Channel.take_stdout(), request["spec"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # anything the worker let through is this trial's, as a fresh one's would be
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _forget_parent_finalizers() -> None:
    """A temporary folder the server made at import is the server's: a child's exit never removes
    it (`predict.finish` removes the child's own)."""
    from .predict import temporary_directory_finalizers

    for finalizer in temporary_directory_finalizers():
        finalizer.detach()


def _builder(control: socket.socket, own: socket.socket, request: dict[str, Any], others: list[int], server: int) -> None:
    """In a forked child: a builder (built_once.py) for `request`'s spec, its streams in memory
    files; ends with `os._exit` whatever happens."""
    try:
        events = os.memfd_create("iteragpu-build-events")
        errors = os.memfd_create("iteragpu-build-stderr")
        empty = os.open(os.devnull, os.O_RDONLY)
        # The channel's token is each trial's own (built_once._become); the answer pipe is the
        # trial's too: a build that asks the CLI anything is abandoned (memory.ask).
        env = [(k, v) for k, v in request.get("env", []) if k != "ITERAGPU_CHANNEL_TOKEN"]
        kept = (os.dup(events), os.dup(errors))  # read back at the build point
        _fresh(control, [empty, events, errors], others, server, env)
        from . import worker
        from .channel import Channel

        sys.argv = [worker.__file__]
        own.setblocking(True)
        channel = Channel.take_stdout()
        built_once.become_builder(own, channel, *kept)
        code = worker.run_spec(channel, request["spec"], end=False)
        if built_once.in_trial():  # a trial forked at the build point ends as a predicting worker ends
            from .predict import finish

            finish(code)
        built_once.abandon(built_once.ended_early(code))
        built_once._EXIT(1)
    except SystemExit as exc:
        if built_once.in_trial():  # a trial forked at the build point ends as `_child` ends
            sys.stdout.flush()
            sys.stderr.flush()
            built_once._EXIT(exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1))
        built_once._EXIT(1)
    except BaseException as exc:  # anything at all: the trials are the server's to fork
        if built_once.in_trial():
            traceback.print_exc()
            sys.stderr.flush()
            built_once._EXIT(1)
        try:
            _send(own, {"type": "unbuildable", "reason": f"{type(exc).__name__}: {exc}"})
        finally:
            built_once._EXIT(1)


class _Build:
    """The server's side of one builder: the requests sent to it, with the server's copies of
    their streams until it says it started them (or dies, and the server forks them itself)."""

    def __init__(self, pid: int, control: socket.socket) -> None:
        self.pid = pid
        self.pidfd = os.pidfd_open(pid)
        self.control = control
        self.sent: dict[Any, tuple[dict[str, Any], list[int]]] = {}
        self.running: dict[Any, int] = {}  # request id -> pid

    def close_streams(self, ident: Any) -> dict[str, Any] | None:
        request, fds = self.sent.pop(ident, (None, []))
        for fd in fds:
            os.close(fd)
        return request


def _said(request: dict[str, Any], why: str) -> dict[str, Any]:
    """`request` with why its model could not be built once (`built_once.NOT_SHARED`): its
    prediction says so in a note."""
    return {**request, "env": [*request.get("env", []), (built_once.NOT_SHARED, why)]}


def serve(control: socket.socket) -> int:
    server = os.getpid()
    children: dict[int, tuple[Any, int]] = {}  # pidfd -> (request id, pid)
    builds: dict[str, _Build] = {}  # built_once.key -> its builder
    abandoned: dict[str, str] = {}  # keys whose build could not be shared, and why

    def own_fds() -> list[int]:
        return [*children, *(fd for b in builds.values() for fd in (b.pidfd, b.control.fileno()))]

    def fork_child(request: dict[str, Any], fds: list[int]) -> None:
        ident = request.get("id")
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            _send(control, {"type": "failed", "id": ident, "reason": f"fork failed: {exc}"})
            return
        if pid == 0:
            _child(control, request, fds, own_fds(), server)
        for fd in fds:
            os.close(fd)
        try:
            os.setpgid(pid, pid)  # also here: the group exists before the CLI hears the pid
        except OSError:  # the child did it first, or already ended
            pass
        children[os.pidfd_open(pid)] = (ident, pid)
        _send(control, {"type": "started", "id": ident, "pid": pid})

    def to_builder(key: str, request: dict[str, Any], fds: list[int]) -> bool:
        build = builds.get(key)
        if build is None:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = os.fork()
            except OSError:
                ours.close()
                theirs.close()
                return False
            if pid == 0:
                ours.close()
                _builder(control, theirs, request, [*own_fds(), *fds], server)
            theirs.close()
            build = builds[key] = _Build(pid, ours)
        try:
            socket.send_fds(build.control, [json.dumps(request).encode()], fds)
        except OSError:
            return False
        build.sent[request.get("id")] = (request, fds)
        return True

    def from_builder(key: str, build: _Build) -> None:
        while True:
            try:
                message = build.control.recv(MESSAGE_BYTES, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                message = b""
            if not message:
                return
            reply = json.loads(message)
            kind, ident = reply.get("type"), reply.get("id")
            if kind == "unbuildable":
                abandoned[key] = str(reply.get("reason"))
            elif kind == "started":
                build.close_streams(ident)
                build.running[ident] = int(reply["pid"])
                _send(control, reply)
            elif kind == "exit":
                build.running.pop(ident, None)
                _send(control, reply)
            elif kind == "failed":
                build.close_streams(ident)
                _send(control, reply)

    def builder_ended(key: str, build: _Build) -> None:
        from_builder(key, build)
        _, status = os.waitpid(build.pid, 0)
        os.close(build.pidfd)
        build.control.close()
        del builds[key]
        abandoned.setdefault(key, f"the builder ended (wait status {status})")
        # Trials it started died with it (PR_SET_PDEATHSIG: SIGKILL); those it had not, the
        # server forks as it forks any other.
        for ident, pid in build.running.items():
            _send(control, {"type": "exit", "id": ident, "pid": pid, "status": signal.SIGKILL})
        for ident in list(build.sent):
            request, fds = build.sent.pop(ident)
            fork_child(_said(request, abandoned[key]), fds)

    try:
        while True:
            waited: list[Any] = [control, *children, *(b.control for b in builds.values()), *(b.pidfd for b in builds.values())]
            ready, _, _ = select.select(waited, [], [])
            for key, build in list(builds.items()):
                if build.control in ready:
                    from_builder(key, build)
            for key, build in list(builds.items()):
                if build.pidfd in ready:
                    builder_ended(key, build)
            for ready_fd in ready:
                if isinstance(ready_fd, int) and ready_fd in children:
                    ident, pid = children.pop(ready_fd)
                    _, status = os.waitpid(pid, 0)
                    os.close(ready_fd)
                    _send(control, {"type": "exit", "id": ident, "pid": pid, "status": status})
            if control not in ready:
                continue
            message, fds, _, _ = socket.recv_fds(control, MESSAGE_BYTES, 3)
            if not message:
                return 0  # the CLI is gone: the children are ended below
            request = json.loads(message)
            ident = request.get("id")
            if request.get("type") != "fork" or len(fds) != 3:
                for fd in fds:
                    os.close(fd)
                _send(control, {"type": "failed", "id": ident, "reason": "a request without its three streams"})
                continue
            shared = built_once.key(request.get("spec"), request.get("env", []))
            if shared is not None and shared not in abandoned and to_builder(shared, request, fds):
                continue
            fork_child(_said(request, abandoned[shared]) if shared in abandoned else request, fds)
    finally:
        for _, pid in children.values():
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:  # already gone
                pass
        for build in builds.values():
            build.control.close()  # its trials are ended by the builder, or die with it
            try:
                os.killpg(build.pid, signal.SIGKILL)
            except OSError:  # already gone
                pass


def _end(code: int) -> None:
    """Ends the server as a predicting worker ends (`predict.finish`): its temporary folders
    removed, no interpreter finalization."""
    from . import predict

    predict.remove_temporary_directories()
    os._exit(code)


def main() -> int:
    control = socket.socket(fileno=os.dup(0))
    empty = os.open(os.devnull, os.O_RDONLY)
    os.dup2(empty, 0)
    os.close(empty)
    first = control.recv(MESSAGE_BYTES)
    if not first:
        return 0
    request = json.loads(first)
    try:
        if not hasattr(os, "pidfd_open") or not hasattr(socket, "recv_fds"):
            raise RuntimeError(f"Python {sys.version.split()[0]} lacks os.pidfd_open or socket.recv_fds (3.9+ on Linux 5.3+)")
        version = preload(request.get("spec") or {})
        cap = request.get("memory_cap")
        if isinstance(cap, int) and cap > 0:
            built_once.MEMORY_CAP = cap
    except Exception as exc:  # an import of any kind may fail (old torch, broken install): said, and the CLI falls back
        _send(control, {"type": "unavailable", "reason": f"{type(exc).__name__}: {exc}"})
        return 2
    _send(control, {"type": "ready", "pid": os.getpid(), "torch": version, "threads": _threads()})
    _end(serve(control))
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
    return str(torch.__version__)


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def _child(control: socket.socket, request: dict[str, Any], fds: list[int], others: list[int], server: int) -> None:
    """In the forked child: becomes a fresh predicting worker for `request`, then `os._exit`."""
    code = 1
    try:
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
        for key, value in request.get("env", []):
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


def serve(control: socket.socket) -> int:
    server = os.getpid()
    children: dict[int, tuple[int, int]] = {}  # pidfd -> (request id, pid)
    try:
        while True:
            waited: list[Any] = [control, *children]
            ready, _, _ = select.select(waited, [], [])
            for ready_fd in ready:
                if isinstance(ready_fd, int):
                    ident, pid = children.pop(ready_fd)
                    _, status = os.waitpid(pid, 0)
                    os.close(ready_fd)
                    _send(control, {"type": "exit", "id": ident, "pid": pid, "status": status})
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
                sys.stdout.flush()
                sys.stderr.flush()
                try:
                    pid = os.fork()
                except OSError as exc:
                    for fd in fds:
                        os.close(fd)
                    _send(control, {"type": "failed", "id": ident, "reason": f"fork failed: {exc}"})
                    continue
                if pid == 0:
                    _child(control, request, fds, list(children), server)
                for fd in fds:
                    os.close(fd)
                try:
                    os.setpgid(pid, pid)  # also here: the group exists before the CLI hears the pid
                except OSError:  # the child did it first, or already ended
                    pass
                children[os.pidfd_open(pid)] = (ident, pid)
                _send(control, {"type": "started", "id": ident, "pid": pid})
    finally:
        for _, pid in children.values():
            try:
                os.killpg(pid, signal.SIGKILL)
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
    except Exception as exc:  # an import of any kind may fail (old torch, broken install): said, and the CLI falls back
        _send(control, {"type": "unavailable", "reason": f"{type(exc).__name__}: {exc}"})
        return 2
    _send(control, {"type": "ready", "pid": os.getpid(), "torch": version, "threads": _threads()})
    _end(serve(control))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Predictions: the worker's own workloads (built-in or the user's script) run on data-less CUDA
tensors in a CPU process, and every storage allocated and freed on the target device is streamed
to the CLI, which replays the stream through its model of PyTorch's caching allocator.

How CUDA's rules are followed without a GPU (the design, checked on a CPU-only machine):
* tensors are FakeTensorMode tensors on device `cuda`: dispatch, autocast (the real C++ CUDA op
  lists and weight-cast cache), `x.is_cuda`, `.cuda()`, `torch.device("cuda")` all behave as on a
  GPU; two small native shims (`native.py`) let autograd run backward without a driver;
* `torch.cuda` answers as the target card would (`cuda_api.py`): available, its name, compute
  capability and total memory; `memory_allocated()` and friends from the CLI's allocator model,
  the replay's own, asked over the answer pipe (`memory.py`);
* SDPA picks the backend CUDA would pick on that card (`sdpa.py`, a port of PyTorch's rules),
  where PyTorch's own choice falls back to the math path without a driver;
* optimizers take their CUDA default (foreach) instead of the per-tensor loop chosen for tensors
  PyTorch does not recognise;
* what depends on data is never guessed (`tracker.py`).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, NoReturn

from .native import Unavailable

if TYPE_CHECKING:
    from ..channel import Channel
    from ..spec import WorkerSpec

__all__ = ["Unavailable", "run"]


def run(channel: Channel, spec: WorkerSpec, target: dict[str, Any]) -> int:
    """Runs `spec`'s workload on fake CUDA tensors for `target`; returns the worker's exit code."""
    import torch

    if getattr(torch, "IS_ITERAGPU_FAKE", False):
        channel.emit("unavailable", {"reason": "the test suite's fake torch has no FakeTensorMode: nothing can be predicted with it"})
        return 2
    from . import collector

    collector.tune()
    try:
        from . import native, session

        native.enable(torch)
        fake_mode_class = session.fake_mode_class(torch)
        from .. import built_once

        not_shared = os.environ.pop(built_once.NOT_SHARED, None)
        if not_shared:
            channel.emit("note", {"text": f"this trial built its own model: its sweep's could not be built once and shared ({not_shared})"})
        if built_once.building():
            failed = built_once.check_apart(lambda: native.self_test(torch, fake_mode_class))
            if failed is not None:
                raise Unavailable(failed)
            native.self_test(torch, fake_mode_class, backward=False)
        else:
            native.self_test(torch, fake_mode_class)
    except Unavailable as exc:
        channel.emit("unavailable", {"reason": str(exc)})
        return 2
    except Exception as exc:  # an older or unusual torch may fail anywhere in the setup: said, never a crash
        channel.emit(
            "unavailable",
            {"reason": f"torch {getattr(torch, '__version__', '?')} cannot run predictions here: {type(exc).__name__}: {exc}"},
        )
        return 2
    from . import memory as allocator
    from . import steady, symbolic

    collector.freeze_imports()  # before any workload code: what the imports made

    lock = threading.RLock()  # re-entered by the stop handler below, on the same thread
    pending: list[str] = []
    owner = [os.getpid()]  # the predicting process (a trial forked from a builder adopts it)
    answers = allocator.take_answers()
    changes = allocator.CHANGES
    model: list[allocator.Memory] = []  # the session's, once made

    def emit(kind: str, data: Any) -> None:
        if os.getpid() != owner[0]:
            return  # a forked child (a DataLoader worker): only the predicting process reports
        # Storage events are many (one per tensor): written in batches; anything else flushes
        # (a memory_query first sends every event before it, so the model's answer covers them).
        with lock:
            if kind in changes and model:
                model[0].changed()
            line = json.dumps({"type": kind, "data": data}, allow_nan=False, default=symbolic.json_default)
            pending.append(line)
            if steady.TAP is not None:
                steady.TAP(kind, line)
            if len(pending) >= 512 or kind not in ("alloc", "free", "tag"):
                channel.write_lines(pending)
                pending.clear()

    def emit_encoded(kind: str, line: str) -> None:
        # A storage event already encoded by the tracker (the same characters json.dumps writes).
        if os.getpid() != owner[0]:
            return
        with lock:
            if kind in changes and model:
                model[0].changed()
            pending.append(line)
            if steady.TAP is not None:
                steady.TAP(kind, line)
            if len(pending) >= 512:
                channel.write_lines(pending)
                pending.clear()

    def emit_many(lines: list[str], changes_model: bool) -> None:
        # Storage events already encoded, in order (a steady state's replayed steps: steady.py).
        if os.getpid() != owner[0]:
            return
        with lock:
            if changes_model and model:
                model[0].changed()
            pending.extend(lines)
            channel.write_lines(pending)
            pending.clear()

    emit.encoded = emit_encoded  # type: ignore[attr-defined]
    emit.encoded_many = emit_many  # type: ignore[attr-defined]

    def stopped(signum: int, frame: FrameType | None) -> None:
        # The CLI stops the worker (--timeout, Ctrl-C): what was predicted so far reaches it
        # before the process ends, so the phases are kept.
        with lock:
            channel.write_lines(pending)
            pending.clear()
        finish(128 + signum)

    import signal

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stopped)
    def flush() -> None:
        with lock:
            channel.write_lines(pending)
            pending.clear()

    def adopt() -> None:
        # A trial forked from a builder: it predicts now, and answers come on its own pipe.
        owner[0] = os.getpid()
        if model:
            model[0].adopt()
        if answers is not None and os.environ.pop(allocator.ANSWERS_VARIABLE, None) == "stdin":
            os.dup2(0, answers.fileno())
            empty = os.open(os.devnull, os.O_RDONLY)
            os.dup2(empty, 0)
            os.close(empty)

    built_once.set_flush(flush)
    built_once.on_adopt(adopt)

    try:
        run = session.Session(torch, emit, spec, target, fake_mode_class, answers)
        model.append(run.tracker.memory)
        run.flush = flush
        return run.run()
    finally:
        with lock:
            channel.write_lines(pending)
            pending.clear()


# The real one: a script's os._exit is replaced during a prediction (session.py).
_EXIT: Callable[[int], NoReturn] = os._exit


def finish(code: int) -> NoReturn:
    """Ends the predicting process without interpreter finalization (see native.py)."""
    sys.stdout.flush()
    sys.stderr.flush()
    remove_temporary_directories()
    _EXIT(code)


def remove_temporary_directories() -> None:
    """Removes every `tempfile.TemporaryDirectory` still open, as a normal exit would.

    os._exit skips the interpreter's exit, and with it these folders' removal: on torch 2.6,
    `import torch._dynamo` makes one (torch/distributed/nn/jit/instantiator.py), which would be
    left in the user's temporary folder by every prediction. Only those finalizers run; nothing
    else registered at exit (a script's own handlers) is called.
    """
    for finalizer in temporary_directory_finalizers():
        try:
            finalizer()
        except Exception:  # a folder already gone or unremovable: exiting regardless
            pass


def temporary_directory_finalizers() -> list[Any]:
    """The `weakref.finalize` entries of every `tempfile.TemporaryDirectory` still open (none where
    this Python keeps them elsewhere)."""
    import tempfile
    import weakref

    cleanup = getattr(getattr(tempfile.TemporaryDirectory, "_cleanup", None), "__func__", None)
    registry = getattr(weakref.finalize, "_registry", None)
    if cleanup is None or not isinstance(registry, dict):
        return []
    return [f for f, info in list(registry.items()) if getattr(info.func, "__func__", None) is cleanup]

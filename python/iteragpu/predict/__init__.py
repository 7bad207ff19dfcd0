"""Predictions: the worker's own workloads (built-in or the user's script) run on data-less CUDA
tensors in a CPU process, and every storage allocated and freed on the target device is streamed
to the CLI, which replays the stream through its model of PyTorch's caching allocator.

How CUDA's rules are followed without a GPU (the design, checked on a CPU-only machine):
* tensors are FakeTensorMode tensors on device `cuda`: dispatch, autocast (the real C++ CUDA op
  lists and weight-cast cache), `x.is_cuda`, `.cuda()`, `torch.device("cuda")` all behave as on a
  GPU; two small native shims (`native.py`) let autograd run backward without a driver;
* `torch.cuda` answers as the target card would (`cuda_api.py`): available, its name, compute
  capability and total memory; `memory_allocated()` and friends from the tracker;
* SDPA picks the backend CUDA would pick on that card (`sdpa.py`, a port of PyTorch's rules),
  where PyTorch's own choice falls back to the math path without a driver;
* optimizers take their CUDA default (foreach) instead of the per-tensor loop chosen for tensors
  PyTorch does not recognise;
* what depends on data is never guessed (`tracker.py`).
"""

import os
import sys
import threading

from .native import Unavailable

__all__ = ["Unavailable", "run"]


def run(channel, spec, target):
    """Runs `spec`'s workload on fake CUDA tensors for `target`; returns the worker's exit code."""
    import torch

    from . import native, session

    try:
        native.enable(torch)
        fake_mode_class = session.fake_mode_class(torch)
        native.self_test(torch, fake_mode_class)
    except Unavailable as exc:
        channel.emit("unavailable", {"reason": str(exc)})
        return 2
    lock = threading.Lock()

    def emit(kind, data):
        with lock:
            channel.emit(kind, data)

    return session.Session(torch, emit, spec, target, fake_mode_class).run()


def finish(code):
    """Ends the predicting process without interpreter finalization (see native.py)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

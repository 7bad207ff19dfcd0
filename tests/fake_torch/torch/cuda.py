"""Fake torch.cuda: the allocator counters of the simulated devices; torch.cuda.memory (the
allocation history and snapshots) lives in torch/_cuda_memory.py."""

import os
import sys

import torch as _torch

from . import _cuda_memory as memory

sys.modules[__name__ + ".memory"] = memory

OutOfMemoryError = _torch.OutOfMemoryError


def _a(dev=None):
    if isinstance(dev, int):
        dev = _torch.device("cuda", dev)
    dev = _torch.device(dev) if dev is not None else _torch.device("cuda:0")
    if dev.index >= len(_torch._ALLOCATORS):
        raise RuntimeError(f"CUDA error: invalid device ordinal {dev.index}")
    return _torch._ALLOCATORS[dev.index]


def is_available():
    return not os.environ.get("FAKE_TORCH_NO_CUDA") and _torch.version.cuda is not None


def device_count():
    return len(_torch._ALLOCATORS) if is_available() else 0


class _Props:
    def __init__(self, index):
        physical = _torch._VISIBLE[index] if index < len(_torch._VISIBLE) else index
        names = _torch._NAMES
        self.name = names[physical] if physical < len(names) else "Fake GPU (iteragpu tests, not a real device)"
        self.total_memory = _torch._CAPACITY
        self.major, self.minor = 9, 0
        self.index = index
        if names:
            self.uuid = f"fake-{physical}"


def get_device_properties(index):
    return _Props(_torch.device(index).index if not isinstance(index, int) else index)


def synchronize(device=None):
    _a(device)
    _torch._SYNCS += 1


def memory_allocated(device=None):
    return _a(device).allocated


def memory_reserved(device=None):
    return _a(device).reserved


def max_memory_allocated(device=None):
    return _a(device).peak_allocated


def max_memory_reserved(device=None):
    return _a(device).peak_reserved


def reset_peak_memory_stats(device=None):
    _a(device).reset_peaks()


def mem_get_info(device=None):
    a = _a(device)
    return (_torch._CAPACITY - a.reserved, _torch._CAPACITY)


def empty_cache():
    for a in _torch._ALLOCATORS:
        a.empty_cache()


def get_allocator_backend():
    return os.environ.get("FAKE_TORCH_BACKEND", "native")


def memory_stats(device=None):
    """PyTorch's flat statistics ("<stat>.all.current/peak" and the event counters), sorted by
    key as PyTorch returns them. The fake frees at once, so active equals allocated."""
    a = _a(device)
    stats = {
        "active_bytes.all.current": a.allocated,
        "active_bytes.all.peak": a.peak_allocated,
        "allocated_bytes.all.current": a.allocated,
        "allocated_bytes.all.peak": a.peak_allocated,
        "inactive_split_bytes.all.current": a.inactive_split(),
        "inactive_split_bytes.all.peak": a.peak_inactive_split,
        "requested_bytes.all.current": a.requested,
        "requested_bytes.all.peak": a.peak_requested,
        "reserved_bytes.all.current": a.reserved,
        "reserved_bytes.all.peak": a.peak_reserved,
        "segment.all.current": len(a.segments),
        "segment.all.peak": a.peak_segments,
        "num_alloc_retries": a.num_alloc_retries,
        "num_ooms": a.num_ooms,
        "num_device_alloc": a.num_device_alloc,
        "num_device_free": a.num_device_free,
    }
    return dict(sorted(stats.items()))


def memory_snapshot():
    """The segments of every device, as torch.cuda.memory_snapshot() returns them."""
    return memory._snapshot()["segments"]


def set_per_process_memory_fraction(fraction, device=None):
    _a(device).limit = int(fraction * _torch._CAPACITY)

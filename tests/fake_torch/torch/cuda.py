"""Fake torch.cuda: the allocator counters of the simulated devices."""

import os

import torch as _torch

OutOfMemoryError = _torch.OutOfMemoryError


def _a(dev=None):
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
        self.name = "Fake GPU (iteragpu tests, not a real device)"
        self.total_memory = _torch._CAPACITY
        self.major, self.minor = 9, 0
        self.index = index


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
    a = _a(device)
    a.peak_allocated, a.peak_reserved = a.allocated, a.reserved


def mem_get_info(device=None):
    a = _a(device)
    return (_torch._CAPACITY - a.reserved, _torch._CAPACITY)


def empty_cache():
    for a in _torch._ALLOCATORS:
        a.reserved = (a.allocated + a.SEGMENT - 1) // a.SEGMENT * a.SEGMENT


def get_allocator_backend():
    return os.environ.get("FAKE_TORCH_BACKEND", "native")


def memory_stats(device=None):
    return {"num_ooms": _a(device).num_ooms}


def set_per_process_memory_fraction(fraction, device=None):
    _a(device).limit = int(fraction * _torch._CAPACITY)

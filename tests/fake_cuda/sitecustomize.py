"""Test-only: real PyTorch (for torchrun and torch.distributed with gloo on the CPU) with a fake
CUDA device whose memory counters the test scripts drive. Never a product mode: it lives under
tests/ and is active only when this folder is on PYTHONPATH and FAKE_CUDA_DEVICES is set.

torch.__version__ gains "+fakecuda" (".fakecuda" after a local part such as "+cu132"), so every result recorded with it says that it is not a GPU
measurement. A script allocates fake device memory with `torch.cuda._fake_allocate(nbytes)` and
frees it with `torch.cuda._fake_free(nbytes)`; tensors themselves stay on the CPU.
"""

import importlib.abc
import importlib.util
import os
import sys
import types

CAPACITY = int(os.environ.get("FAKE_CUDA_CAPACITY", str(16 << 30)))
SEGMENT = 2 << 20


class _Counters:
    def __init__(self):
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0

    def allocate(self, nbytes):
        size = (int(nbytes) + 511) // 512 * 512
        need = self.allocated + size
        if need > self.reserved:
            grow = (need - self.reserved + SEGMENT - 1) // SEGMENT * SEGMENT
            if self.reserved + grow > CAPACITY:
                raise _OOM(
                    f"CUDA out of memory. Tried to allocate {size / 2**20:.2f} MiB. GPU 0 has a total capacity of "
                    f"{CAPACITY / 2**30:.2f} GiB of which {(CAPACITY - self.reserved) / 2**20:.2f} MiB is free. "
                    f"Of the allocated memory {self.allocated / 2**20:.2f} MiB is allocated by PyTorch, and "
                    f"{(self.reserved - self.allocated) / 2**20:.2f} MiB is reserved by PyTorch but unallocated."
                )
            self.reserved += grow
        self.allocated = need
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def free(self, nbytes):
        self.allocated = max(0, self.allocated - (int(nbytes) + 511) // 512 * 512)


class _OOM(RuntimeError):
    pass


def _patch(torch):
    devices = int(os.environ["FAKE_CUDA_DEVICES"])
    counters = [_Counters() for _ in range(devices)]
    current = [0]
    cuda = torch.cuda

    def index(device=None):
        if device is None:
            return current[0]
        if isinstance(device, int):
            return device
        d = torch.device(device)
        return current[0] if d.index is None else d.index

    def props(device=None):
        return types.SimpleNamespace(
            name="Fake CUDA on real torch (iteragpu tests, not a real device)",
            total_memory=CAPACITY,
            major=9,
            minor=0,
            multi_processor_count=132,
        )

    global _OOM
    _OOM = getattr(torch, "OutOfMemoryError", _OOM)
    # A valid PEP 440 version still (libraries such as DeepSpeed parse it): a local part, or one more segment of it.
    version = str(torch.__version__)
    torch.__version__ = version + (".fakecuda" if "+" in version else "+fakecuda")
    cuda.is_available = lambda: True
    cuda.device_count = lambda: devices
    cuda.get_device_properties = props
    cuda.get_device_name = lambda device=None: props().name
    cuda.get_device_capability = lambda device=None: (9, 0)
    cuda.current_device = lambda: current[0]
    cuda.set_device = lambda device: current.__setitem__(0, index(device))
    cuda.synchronize = lambda device=None: None
    cuda.empty_cache = lambda: None
    cuda.get_allocator_backend = lambda: "native"
    cuda.memory_allocated = lambda device=None: counters[index(device)].allocated
    cuda.memory_reserved = lambda device=None: counters[index(device)].reserved
    cuda.max_memory_allocated = lambda device=None: counters[index(device)].peak_allocated
    cuda.max_memory_reserved = lambda device=None: counters[index(device)].peak_reserved

    def reset(device=None):
        c = counters[index(device)]
        c.peak_allocated, c.peak_reserved = c.allocated, c.reserved

    cuda.reset_peak_memory_stats = reset
    cuda.mem_get_info = lambda device=None: (CAPACITY - counters[index(device)].reserved, CAPACITY)
    cuda._fake_allocate = lambda nbytes, device=None: counters[index(device)].allocate(nbytes)
    cuda._fake_free = lambda nbytes, device=None: counters[index(device)].free(nbytes)


class _PatchTorchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("FAKE_CUDA_DEVICES"):
    sys.meta_path.insert(0, _PatchTorchOnImport())

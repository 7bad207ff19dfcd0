"""`torch.cuda` as the target card would answer, in the predicting process: available, one device
with the card's name, compute capability and total memory; the memory counters from the CLI's
allocator model, the one the prediction's replay uses (`memory.py`), so that what the script
prints and what the file says agree; streams, events and synchronisation do nothing."""

from __future__ import annotations

import collections
import contextlib
from typing import Any, Literal


class _Stream:
    def __init__(self, device: Any = None, priority: int = 0, **_: Any) -> None:
        import torch

        self.device = torch.device("cuda", 0)
        self.cuda_stream = 0
        self.priority = priority
        # What torch.cuda.Stream carries (FSDP2 records its gradients' stream by these).
        self.stream_id = 0
        self.device_index = 0
        self.device_type = 1

    def synchronize(self) -> None:
        pass

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> Any:
        return event or _Event()

    def query(self) -> bool:
        return True

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        return False


class _Event:
    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        pass

    def record(self, stream: Any = None) -> None:
        pass

    def wait(self, stream: Any = None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, other: Any) -> float:
        return 0.0


class _DeviceContext:
    def __init__(self, device: Any) -> None:
        pass

    def __enter__(self) -> _DeviceContext:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        return False


def properties(target: dict[str, Any]) -> Any:
    """A `_CudaDeviceProperties`-like object for the target card."""
    fields = {
        "name": target["name"],
        "major": target["capability"][0],
        "minor": target["capability"][1],
        "total_memory": target["total_memory"],
        "multi_processor_count": target.get("multi_processor_count", 132),
        "is_integrated": False,
        "is_multi_gpu_board": False,
        "L2_cache_size": 50 << 20,
        "warp_size": 32,
        "max_threads_per_multi_processor": 2048,
        "regs_per_multiprocessor": 65536,
        "gcnArchName": target["name"],
        "uuid": "iteragpu-prediction",
        "pci_bus_id": 0,
        "pci_device_id": 0,
        "pci_domain_id": 0,
        "shared_memory_per_block": 49152,
        "shared_memory_per_block_optin": 232448,
        "shared_memory_per_multiprocessor": 233472,
    }
    return collections.namedtuple("_CudaDeviceProperties", list(fields))(**fields)


def install(torch: Any, target: dict[str, Any], tracker: Any) -> None:
    """Replaces the driver-facing parts of `torch.cuda` for this process."""
    c = torch.cuda
    props = properties(target)
    current = [0]
    c.is_available = lambda: True
    c.device_count = lambda: 1
    c.is_initialized = lambda: True
    c._lazy_init = lambda: None
    c.init = lambda: None
    c.current_device = lambda: current[0]
    c.set_device = lambda device: None
    c.get_device_name = lambda device=None: props.name
    c.get_device_capability = lambda device=None: (props.major, props.minor)
    c.get_device_properties = lambda device=None: props
    c.is_bf16_supported = lambda including_emulation=True: props.major >= 8
    c.get_arch_list = lambda: [f"sm_{props.major}{props.minor}"]
    c.synchronize = lambda device=None: None
    # The memory counters: each asks the one allocator model (memory.py).
    memory = tracker.memory
    c.empty_cache = memory.empty_cache
    c.memory_allocated = lambda device=None: memory.stat("allocated_bytes.all.current")
    c.max_memory_allocated = lambda device=None: memory.stat("allocated_bytes.all.peak")
    c.memory_reserved = lambda device=None: memory.stat("reserved_bytes.all.current")
    c.max_memory_reserved = lambda device=None: memory.stat("reserved_bytes.all.peak")
    c.memory_cached = c.memory_reserved
    c.max_memory_cached = c.max_memory_reserved
    c.reset_peak_memory_stats = memory.reset_peaks
    c.reset_max_memory_allocated = memory.reset_peaks
    c.reset_max_memory_cached = memory.reset_peaks
    c.reset_accumulated_memory_stats = memory.reset_accumulated
    c.mem_get_info = lambda device=None: memory.mem_get_info()
    c.memory_stats = lambda device=None: collections.OrderedDict(sorted(memory.stats().items()))
    c.get_allocator_backend = lambda: target.get("allocator_backend", "native")
    c.set_per_process_memory_fraction = lambda fraction, device=None: None
    c.Stream = _Stream
    c.Event = _Event
    c.current_stream = lambda device=None: _Stream()
    c.default_stream = lambda device=None: _Stream()
    c.stream = lambda stream=None: contextlib.nullcontext()
    # Optimizers and transformers ask whether a CUDA graph is being captured (the real question
    # needs a driver: torch 2.6-2.11's step() asks it whenever torch.cuda.is_available()).
    c.is_current_stream_capturing = lambda: False
    if hasattr(c, "graphs"):
        c.graphs.is_current_stream_capturing = c.is_current_stream_capturing
    c.device = _DeviceContext
    c.manual_seed = lambda seed: None
    c.manual_seed_all = lambda seed: None
    c.seed = lambda: None
    c.seed_all = lambda: None
    c.get_rng_state = lambda device="cuda": torch.zeros(16, dtype=torch.uint8)
    c.set_rng_state = lambda state, device="cuda": None
    c.get_rng_state_all = lambda: [torch.zeros(16, dtype=torch.uint8)]
    c.set_rng_state_all = lambda states: None

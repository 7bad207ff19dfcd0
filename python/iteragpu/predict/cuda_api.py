"""`torch.cuda` as the target card would answer, in the predicting process: available, one device
with the card's name, compute capability and total memory; the memory counters from the CLI's
allocator model, the one the prediction's replay uses (`memory.py`), so that what the script prints
and what the file says agree; streams, events and synchronisation do nothing; the
default CUDA generator keeps a real CUDA generator's state (seed and Philox offset, 16 bytes).

Every answer comes from ONE table (`answers`: a name of `torch.cuda` or of one of its submodules ->
its answer), bound wherever the original is bound: the `torch.cuda` namespace, each submodule that
defines it, and every module that imported it by name (`torch.cuda.random` keeps its own
import-time `current_device`, transformers' Trainer reaches it through
`torch.cuda.random.get_rng_state()` at every checkpoint). What is deliberately left unanswered is in
`NOT_ANSWERED`, with the reason. `tests/python/cuda_answers.py` scans torch.cuda's submodules
(their bytecode, transitively) for every public function or class that reaches the driver
(`torch._C._cuda_*`, `_cudart`, NVML) and fails on one that is in neither."""

from __future__ import annotations

import collections
import contextlib
import struct
import sys
import threading
from typing import Any, Callable, Literal


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



class _ExternalStream(_Stream):
    def __init__(self, stream_ptr: int = 0, device: Any = None, **_: Any) -> None:
        super().__init__(device)
        self.cuda_stream = stream_ptr


# PyTorch's seed of a CUDA generator made before any seeding (c10's default_rng_seed_val).
DEFAULT_RNG_SEED: int = 67280421310721


class CudaGenerator:
    """The default CUDA generator of the target card (`torch.cuda.default_generators[0]`), kept as
    PyTorch's CUDAGeneratorImpl keeps it (aten/src/ATen/cuda/CUDAGeneratorImpl.cpp): a 64-bit seed
    and a Philox offset; its state is a CPU uint8 tensor of 16 bytes (the seed, then the offset,
    little-endian), `set_state` takes 16 bytes (or 8: the seed alone) and refuses any other size,
    so a checkpoint's RNG state saves and restores as on a GPU. The fake kernels draw no numbers:
    the offset moves only when a state is set."""

    def __init__(self, torch: Any, index: int = 0) -> None:
        import random

        self._torch = torch
        self.device = torch.device("cuda", index)
        # A default generator is seeded nondeterministically at its first use (getDefaultCUDAGenerator).
        self._seed = random.SystemRandom().getrandbits(64)
        self._offset = 0
        self._lock = threading.Lock()

    def get_state(self) -> Any:
        with self._lock:
            data = struct.pack("<Qq", self._seed, self._offset)
        return self._torch.frombuffer(bytearray(data), dtype=self._torch.uint8).clone()

    def set_state(self, state: Any) -> CudaGenerator:
        torch = self._torch
        if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or state.device.type != "cpu":
            raise TypeError("RNG state must be a torch.ByteTensor")
        data = bytes(state.contiguous().tolist())
        if len(data) not in (8, 16):
            raise RuntimeError("RNG state is wrong size")
        seed = struct.unpack("<Q", data[:8])[0]
        offset = struct.unpack("<q", data[8:])[0] if len(data) == 16 else 0
        if offset % 4:
            raise RuntimeError("offset must be a multiple of 4")
        with self._lock:
            self._seed, self._offset = seed, offset
        return self

    def manual_seed(self, seed: int) -> CudaGenerator:
        with self._lock:
            self._seed, self._offset = int(seed) & (2**64 - 1), 0
        return self

    def seed(self) -> int:
        import random

        value = random.SystemRandom().getrandbits(64)
        self.manual_seed(value)
        return value

    def initial_seed(self) -> int:
        return self._seed

    def get_offset(self) -> int:
        return self._offset

    def set_offset(self, offset: int) -> None:
        if offset % 4:
            raise RuntimeError("offset must be a multiple of 4")
        self._offset = int(offset)

    def graphsafe_get_state(self) -> CudaGenerator:
        return self

    def graphsafe_set_state(self, other: CudaGenerator) -> None:
        self._seed, self._offset = other._seed, other._offset

    def clone_state(self) -> CudaGenerator:
        copy = CudaGenerator(self._torch, self.device.index or 0)
        copy._seed, copy._offset = self._seed, self._offset
        return copy


class _CudaRt:
    """`torch.cuda.cudart()`: the runtime calls scripts make (the profiler's start and stop, host
    registration) succeed (cudaSuccess) and do nothing."""

    def __getattr__(self, name: str) -> Callable[..., int]:
        if not name.startswith("cuda"):
            raise AttributeError(name)
        return lambda *args, **kwargs: 0


def answers(torch: Any, target: dict[str, Any], tracker: Any) -> dict[str, Any]:
    """The one table: a name bound in `torch.cuda` or one of its submodules -> what the target
    card answers. `install` binds each answer wherever torch bound the original."""
    props = properties(target)
    generators = (CudaGenerator(torch),)

    def idle() -> Callable[..., None]:
        # A new function for each name: torch._dynamo refuses one object under two names.
        return lambda *args, **kwargs: None

    # The memory counters: each asks the one allocator model (memory.py), the replay's.
    memory = tracker.memory

    def reset() -> Callable[..., None]:
        def reset_peak(device: Any = None) -> None:
            memory.reset_peaks()

        return reset_peak

    def stat(key: str) -> Callable[..., int]:
        return lambda device=None: memory.stat(key)

    def stats(device: Any = None) -> dict[str, int]:
        return collections.OrderedDict(sorted(memory.stats().items()))

    def summary(device: Any = None, abbreviated: bool = False) -> str:
        got = memory.stats()
        return (
            "iteragpu prediction (the allocator model's counters, the prediction's own)\n"
            f"Allocated memory: {got['allocated_bytes.all.current']} bytes (peak {got['allocated_bytes.all.peak']})\n"
            f"Reserved memory: {got['reserved_bytes.all.current']} bytes (peak {got['reserved_bytes.all.peak']})\n"
        )

    def visible_devices() -> int:
        """The GPUs a rank sees: CUDA_VISIBLE_DEVICES's list when set, else the node's ranks
        under `--world-size` (torchrun gives every rank the whole node), else the one card."""
        import os

        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None and visible.strip():
            return with_generators(len([d for d in visible.split(",") if d.strip() and not d.strip().startswith("-")]))
        local = os.environ.get("LOCAL_WORLD_SIZE", "")
        return with_generators(int(local) if local.isdigit() and int(local) > 0 else 1)

    def with_generators(n: int) -> int:
        """`n` devices, each with its default generator (`manual_seed_all` seeds one per device)."""
        have = torch.cuda.default_generators
        if isinstance(have, tuple) and have and isinstance(have[0], CudaGenerator) and len(have) < n:
            torch.cuda.default_generators = have + tuple(CudaGenerator(torch, i) for i in range(len(have), n))
        return n

    def nested(device: Any = None) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in stats(device).items():
            node = result
            parts = key.split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = value
        return result

    return {
        # the device
        "is_available": lambda: True,
        "device_count": visible_devices,
        "is_initialized": lambda: True,
        "_lazy_init": idle(),
        "init": idle(),
        "current_device": lambda: 0,
        "set_device": idle(),
        "_exchange_device": lambda device: 0 if device >= 0 else -1,
        "_maybe_exchange_device": lambda device: 0 if device >= 0 else -1,
        "get_device_name": lambda device=None: props.name,
        "get_device_capability": lambda device=None: (props.major, props.minor),
        "get_device_properties": lambda device=None: props,
        "is_bf16_supported": lambda including_emulation=True: props.major >= 8,
        "is_tf32_supported": lambda: props.major >= 8,
        "get_arch_list": lambda: [f"sm_{props.major}{props.minor}"],
        "can_device_access_peer": lambda device, peer_device: False,
        "synchronize": idle(),
        "ipc_collect": idle(),
        "_sleep": idle(),
        "current_blas_handle": lambda: 0,
        "current_solver_handle": lambda: 0,
        "get_sync_debug_mode": lambda: 0,
        "set_sync_debug_mode": idle(),
        "cudart": lambda: _CudaRt(),
        "check_error": lambda res: None,
        # telemetry (NVML): a card that is idle and cool
        "device_memory_used": lambda device=None: memory.stat("reserved_bytes.all.current") + target.get("context_bytes", 0),
        "memory_usage": lambda device=None: 0,
        "utilization": lambda device=None: 0,
        "temperature": lambda device=None: 0,
        "power_draw": lambda device=None: 0,
        "clock_rate": lambda device=None: 0,
        "list_gpu_processes": lambda device=None: "GPU:0\nno processes are running",
        # memory: the replay's allocator model (memory.py); resets and releases are trace events
        "empty_cache": lambda: memory.empty_cache(),
        "memory_allocated": stat("allocated_bytes.all.current"),
        "max_memory_allocated": stat("allocated_bytes.all.peak"),
        "memory_reserved": stat("reserved_bytes.all.current"),
        "max_memory_reserved": stat("reserved_bytes.all.peak"),
        "memory_cached": stat("reserved_bytes.all.current"),
        "max_memory_cached": stat("reserved_bytes.all.peak"),
        "reset_peak_memory_stats": reset(),
        "reset_max_memory_allocated": reset(),
        "reset_max_memory_cached": reset(),
        "reset_accumulated_memory_stats": lambda device=None: memory.reset_accumulated(),
        "memory_stats": stats,
        "memory_stats_as_nested_dict": nested,
        "memory_summary": summary,
        "host_memory_stats": lambda: {},
        "host_memory_stats_as_nested_dict": lambda: {},
        "reset_accumulated_host_memory_stats": idle(),
        "reset_peak_host_memory_stats": idle(),
        "mem_get_info": lambda device=None: memory.mem_get_info(),
        "get_allocator_backend": lambda: target.get("allocator_backend", "native"),
        "set_per_process_memory_fraction": idle(),
        "get_per_process_memory_fraction": lambda device=None: 1.0,
        # streams and events
        "Stream": _Stream,
        "ExternalStream": _ExternalStream,
        "Event": _Event,
        "current_stream": lambda device=None: _Stream(),
        "default_stream": lambda device=None: _Stream(),
        "get_stream_from_external": lambda data_ptr, device=None: _ExternalStream(data_ptr),
        "set_stream": idle(),
        "_set_stream_by_id": idle(),
        "stream": lambda stream=None: contextlib.nullcontext(),
        "device": _DeviceContext,
        "device_of": type("device_of", (_DeviceContext,), {}),
        # Optimizers and transformers ask whether a CUDA graph is being captured (the real question
        # needs a driver: torch 2.6-2.11's step() asks it whenever torch.cuda.is_available()).
        "is_current_stream_capturing": lambda: False,
        # TunableOp (its other settings need no driver: NOT_ANSWERED): nothing tuned, PyTorch's
        # default rotating buffer (the card's L2 cache, in MB)
        "get_results": lambda: (),
        "get_validators": lambda: (),
        "get_rotating_buffer_size": lambda: props.L2_cache_size >> 20,
        # random numbers: one generator, whose state is a real CUDA generator's
        "default_generators": generators,
    }


# What is deliberately left to reach the driver (it then fails with CUDA's own error, which the
# prediction reports where the script raised), or reaches a `torch._C._cuda_*` function that needs
# no driver: the name in torch.cuda (`submodule.name` for one not in the namespace) -> why. Checked,
# with the table, by tests/python/cuda_answers.py against every public function and class of
# torch.cuda's submodules.
NOT_ANSWERED: dict[str, str] = {
    **dict.fromkeys(
        ["CUDAGraph", "graph", "graph_pool_handle", "make_graphed_callables", "export_dot", "graph_annotations.is_available"],
        "CUDA graphs capture and replay kernels: predict runs eager",
    ),
    **dict.fromkeys(
        ["caching_allocator_alloc", "caching_allocator_delete"],
        "a raw pointer from the allocator, outside any tensor: not followed",
    ),
    **dict.fromkeys(
        ["caching_allocator_enable", "change_current_allocator", "CUDAPluggableAllocator", "MemPool"],
        "another allocator or pool: the prediction replays PyTorch's caching allocator's default pool",
    ),
    **dict.fromkeys(
        ["GreenContext", "green_contexts.SMPartition", "green_contexts.get_num_locality_domains", "green_contexts.is_localization_supported"],
        "green contexts partition the SMs of a real device",
    ),
    **dict.fromkeys(
        ["gds.GdsFile", "gds.gds_register_buffer", "gds.gds_deregister_buffer"],
        "GPUDirect Storage moves file bytes to the device without the host: not followed",
    ),
    "memory_snapshot": "the allocator's blocks are the CLI replay's, not this process's: an empty snapshot would be a wrong answer (the recorder says why it has none)",
    "CudaError": "made only from an error code a runtime call returned; the answers return cudaSuccess",
    **dict.fromkeys(
        [
            f"tunable.{name}"
            for name in (
                "enable", "is_enabled", "tuning_enable", "tuning_is_enabled", "record_untuned_enable",
                "record_untuned_is_enabled", "set_max_tuning_duration", "get_max_tuning_duration",
                "set_max_tuning_iterations", "get_max_tuning_iterations", "set_filename", "get_filename",
                "read_file", "set_rotating_buffer_size",
                "set_numerical_check_tolerances", "set_cublaslt_requested_algo_count",
                "get_cublaslt_requested_algo_count", "wildcard_fallback_enable", "wildcard_fallback_is_enabled",
                "tune_gemm_in_file", "mgpu_tune_gemm_in_file",
            )
        ],
        "TunableOp's settings live in PyTorch's C++ TuningContext and reach no driver (the getters are called on a CPU-only machine by tests/python/cuda_answers.py); tuning itself runs no kernel in a prediction",
    ),
}


def install(torch: Any, target: dict[str, Any], tracker: Any) -> None:
    """Replaces the driver-facing parts of `torch.cuda` for this process: each answer of the table
    is bound in `torch.cuda`, and wherever torch.cuda's original object of that name is bound (a
    submodule's `from . import current_device`, `from torch.cuda import current_device` in any
    module already imported); a module imported later takes the answers from torch.cuda."""
    table = answers(torch, target, tracker)
    cuda_modules = [m for n, m in list(sys.modules.items()) if m is not None and (n == "torch.cuda" or n.startswith("torch.cuda."))]
    replaced: dict[int, Any] = {}  # id(original) -> its answer
    keep: list[Any] = []  # the originals, alive while their ids are keys
    for name, answer in table.items():
        original = _original(torch, cuda_modules, name)
        if original is _ABSENT:
            continue  # not in this torch
        setattr(torch.cuda, name, answer)
        if callable(original):
            # Functions and classes are found elsewhere by identity (a submodule's own
            # `is_available`, NCCL's, is another function and keeps its binding); a value such as
            # default_generators' empty tuple is bound by name in torch.cuda only.
            replaced[id(original)] = answer
            keep.append(original)
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            answer = replaced.get(id(value))
            if answer is not None and value is not answer:
                namespace[key] = answer
    del keep
    install_accelerator(torch)
    _record_stream(torch)


def _record_stream(torch: Any) -> None:
    """`tensor.record_stream(stream)` with one of these streams (FSDP1 records its unsharded
    parameters' and its gradients' streams) is accepted and does nothing: C++ refuses a stream it
    did not make, and the replay has one stream, so a block's reuse held back until another
    stream's work ends is not followed."""
    original = torch.Tensor.record_stream
    if getattr(original, "_iteragpu", False):
        return

    def record_stream(self: Any, stream: Any) -> Any:
        if isinstance(stream, _Stream):
            return None
        return original(self, stream)

    record_stream._iteragpu = True  # type: ignore[attr-defined]
    torch.Tensor.record_stream = record_stream


def install_accelerator(torch: Any) -> None:
    """`torch.accelerator` (torch 2.6 on) answers for the predicted CUDA device as torch.cuda does.
    On torch 2.6-2.x its `current_accelerator()` asks the C++ runtime, which raises on a CPU-only
    build ("Cannot access accelerator device when none is available"); accelerate >= 1.16
    (`get_torch_accelerator_backend`) then found no GPU and a Trainer left its batches on the CPU.
    Later torch answers from torch.cuda already; the same answers are bound there."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return
    table: dict[str, Callable[..., Any]] = {
        "current_accelerator": lambda check_available=False: torch.device("cuda"),
        "is_available": lambda: True,
        "device_count": lambda: torch.cuda.device_count(),
        "current_device_index": lambda: torch.cuda.current_device(),
        "current_device_idx": lambda: torch.cuda.current_device(),
    }
    for name, answer in table.items():
        if name in vars(accelerator):
            setattr(accelerator, name, answer)


_ABSENT: Any = object()


def _original(torch: Any, cuda_modules: list[Any], name: str) -> Any:
    """torch.cuda's own object of that name: the namespace's, else the one submodule binding it
    (_ABSENT when this torch has none, or several submodules bind different objects)."""
    if name in vars(torch.cuda):
        return vars(torch.cuda)[name]
    found = {id(vars(m)[name]): vars(m)[name] for m in cuda_modules if name in vars(m)}
    return next(iter(found.values())) if len(found) == 1 else _ABSENT

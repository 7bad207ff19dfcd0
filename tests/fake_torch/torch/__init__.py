"""A fake `torch` for iteragpu's tests. NOT PyTorch, never a product mode.

It simulates just enough of torch.cuda's caching allocator (allocated and reserved bytes with
peaks, 512-byte rounding, 2 MiB segments, an out-of-memory error past a capacity) and of torch.nn
for the dense workload. Its version string and device name say "fake" so that no file it helps
produce can pass for a GPU measurement.

Controls (environment variables):
  FAKE_TORCH_DEVICES=N          number of devices (default 1)
  FAKE_TORCH_CAPACITY=BYTES     capacity of each device (default 16 GiB)
  FAKE_TORCH_NO_CUDA=1          torch.cuda.is_available() is False
  FAKE_TORCH_CPU_ONLY=1         a CPU-only build (torch.version.cuda is None)
  FAKE_TORCH_CRASH_AFTER_SYNC=K the first allocation after the K-th synchronize() kills the process (SIGSEGV)
  FAKE_TORCH_HANG_AFTER_SYNC=K  the first allocation after the K-th synchronize() sleeps for an hour
  FAKE_TORCH_NOISE=1            writes noise to stdout (print and raw fd 1) on every randn()
  FAKE_TORCH_BACKEND=NAME       allocator backend name (default "native")
  FAKE_TORCH_HANG_ABOVE=BYTES   an allocation larger than BYTES sleeps for an hour
  FAKE_TORCH_NAMES=A,B,…        the model of each of the FAKE_TORCH_DEVICES devices (default: one fake name)
  FAKE_TORCH_TRACE=DIR          a worker writes DIR/PID.json at its exit: its pid, CUDA_VISIBLE_DEVICES,
                                start and end times; and lasts FAKE_TORCH_TRACE_HOLD seconds at least

CUDA_VISIBLE_DEVICES is honoured as CUDA does: the devices are those it lists (indices into the
FAKE_TORCH_DEVICES devices, or their UUIDs GPU-fake-N), up to the first entry that names none.

Besides the counters, the fake lays its memory out as PyTorch's snapshot shows it: segments (one
per growth of the reserved bytes, at made-up addresses) split into blocks, each allocated or
inactive (free). The counters stay the fake's truth: its pool has no fragmentation, so an
allocation that no single free block can hold is spread over several blocks, and empty_cache()
brings the reserved bytes down to the allocated bytes rounded up to 2 MiB, returning whole free
segments first (segment_free), then cutting free blocks out of segments (segment_unmap). On top
of that layout torch.cuda.memory (torch/_cuda_memory.py) records the allocation history and
writes snapshots, and torch.cuda.memory_stats() reports PyTorch's counters.
"""

import contextlib
import os
import signal
import sys
import time

__version__ = "0.0.0+fake"
IS_ITERAGPU_FAKE = True

_PHYSICAL = int(os.environ.get("FAKE_TORCH_DEVICES", "1"))
_NAMES = [n for n in os.environ.get("FAKE_TORCH_NAMES", "").split(",") if n]


def _visible():
    """The physical devices CUDA_VISIBLE_DEVICES leaves visible, in its order."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return list(range(_PHYSICAL))
    seen = []
    for entry in listed.split(","):
        entry = entry.strip()
        index = int(entry) if entry.isdigit() else None
        if entry.startswith("GPU-fake-") and entry[9:].isdigit():
            index = int(entry[9:])
        if index is None or index >= _PHYSICAL or index in seen:
            break
        seen.append(index)
    return seen


_VISIBLE = _visible()
_DEVICES = len(_VISIBLE)


def _trace():
    """FAKE_TORCH_TRACE: a worker records when and where it ran (sweep --gpus's tests)."""
    folder = os.environ.get("FAKE_TORCH_TRACE")
    if not folder or "iteragpu.worker" not in getattr(sys, "orig_argv", sys.argv):
        return
    import atexit
    import builtins
    import json

    start = time.time()

    def write():
        time.sleep(max(0.0, start + builtins.float(os.environ.get("FAKE_TORCH_TRACE_HOLD", "0")) - time.time()))
        record = {
            "pid": os.getpid(),
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "start": start,
            "end": time.time(),
        }
        with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as f:
            json.dump(record, f)

    atexit.register(write)


_trace()
_CAPACITY = int(os.environ.get("FAKE_TORCH_CAPACITY", str(16 << 30)))
_SYNCS = 0


class _Version:
    cuda = None if os.environ.get("FAKE_TORCH_CPU_ONLY") else "12.8"
    hip = None


version = _Version()


class _CModule:
    """The few private entry points of `torch._C` the worker uses."""

    _OOM_OBSERVERS = []

    @staticmethod
    def _cuda_attach_out_of_memory_observer(observer):
        """Called with (device, requested bytes, allocated bytes, free bytes) before an
        out-of-memory is raised, as PyTorch's caching allocator does."""
        _CModule._OOM_OBSERVERS.append(observer)


_C = _CModule()


class OutOfMemoryError(RuntimeError):
    pass


class dtype:
    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize

    def __repr__(self):
        return f"torch.{self.name}"


float32 = dtype("float32", 4)
float = float32
float16 = dtype("float16", 2)
half = float16
bfloat16 = dtype("bfloat16", 2)
float64 = dtype("float64", 8)
uint8 = dtype("uint8", 1)


class device:
    def __init__(self, spec, index=None):
        if isinstance(spec, device):
            self.type, self.index = spec.type, spec.index
            return
        kind, _, idx = str(spec).partition(":")
        self.type = kind
        self.index = int(idx) if idx else (index if index is not None else (0 if kind == "cuda" else None))

    def __str__(self):
        return f"{self.type}:{self.index}" if self.index is not None else self.type

    __repr__ = __str__

    def __eq__(self, other):
        return str(self) == str(device(other))

    def __hash__(self):
        return hash(str(self))


def _round(n):
    return (n + 511) // 512 * 512


class _Block:
    """A piece of a segment: allocated (to a tensor) or inactive (free, cached)."""

    __slots__ = ("address", "size", "requested", "allocated", "frames")

    def __init__(self, address, size):
        self.address, self.size = address, size
        self.requested, self.allocated, self.frames = 0, False, None


class _Segment:
    """A range the fake reserved at once (PyTorch: one cudaMalloc), split into blocks."""

    __slots__ = ("address", "size", "is_large", "blocks", "frames")

    def __init__(self, address, size, is_large, frames):
        self.address, self.size, self.is_large, self.frames = address, size, is_large, frames
        self.blocks = [_Block(address, size)]


class _Allocation:
    """What a tensor holds: its rounded size, the bytes it asked for, and its blocks."""

    __slots__ = ("size", "requested", "blocks", "frames")

    def __init__(self, size, requested, blocks, frames):
        self.size, self.requested, self.blocks, self.frames = size, requested, blocks, frames


class _Allocator:
    SEGMENT = 2 << 20

    def __init__(self, index):
        self.index = index
        self.allocated = self.reserved = 0
        self.peak_allocated = self.peak_reserved = 0
        self.num_ooms = 0
        self.limit = _CAPACITY
        self.requested = self.peak_requested = 0
        self.segments = []
        self.peak_segments = self.peak_inactive_split = 0
        self.num_alloc_retries = self.num_device_alloc = self.num_device_free = 0
        self.next_address = 0x7F0000000000 + (index << 44)

    def alloc(self, nbytes):
        _maybe_fail()
        above = os.environ.get("FAKE_TORCH_HANG_ABOVE")
        if above and nbytes > int(above):
            time.sleep(3600)
        size = _round(nbytes)
        need = self.allocated + size
        history = cuda.memory._HISTORY
        frames = history.alloc_frames()
        if need > self.reserved:
            grow = (need - self.reserved + self.SEGMENT - 1) // self.SEGMENT * self.SEGMENT
            if self.reserved + grow > min(_CAPACITY, self.limit):
                self.num_ooms += 1
                history.record(self.index, "oom", None, size, frames, device_free=_CAPACITY - self.reserved)
                # As PyTorch does: the observers first (they may take a snapshot), then the error,
                # worded as PyTorch 2.2+ words it.
                for observer in list(_C._OOM_OBSERVERS):
                    observer(self.index, size, self.allocated, _CAPACITY - self.reserved)
                raise OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {size / 2**20:.2f} MiB. GPU {self.index} has a total "
                    f"capacity of {_CAPACITY / 2**30:.2f} GiB of which {(_CAPACITY - self.reserved) / 2**20:.2f} MiB is free. "
                    # PyTorch 2.5+ names a memory fraction's limit.
                    + (f"{self.limit / 2**30:.2f} GiB allowed; " if self.limit < _CAPACITY else "")
                    + f"Of the allocated memory {self.allocated / 2**20:.2f} MiB is allocated by PyTorch, and "
                    f"{(self.reserved - self.allocated) / 2**20:.2f} MiB is reserved by PyTorch but unallocated. If reserved "
                    "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
                    "fragmentation.  See documentation for Memory Management  "
                    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
                )
            self.reserved += grow
            segment = _Segment(self.next_address, grow, size > (1 << 20) or grow > self.SEGMENT, history.state_frames(frames))
            self.next_address += grow + self.SEGMENT
            self.segments.append(segment)
            self.num_device_alloc += 1
            history.record(self.index, "segment_alloc", segment.address, grow, frames)
        self.allocated = need
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self.requested += nbytes
        allocation = _Allocation(size, nbytes, self._place(size, nbytes, history.state_frames(frames)), frames)
        self._peaks()
        history.record(self.index, "alloc", allocation.blocks[0].address, size, frames)
        return allocation

    def _place(self, size, requested, frames):
        """The smallest free block that holds `size` (split), else free blocks in address order."""
        best = None
        for segment in self.segments:
            for i, block in enumerate(segment.blocks):
                if not block.allocated and block.size >= size and (best is None or block.size < best[2].size):
                    best = (segment, i, block)
        if best is not None:
            chosen = [best]
        else:
            chosen, left = [], size
            for segment in sorted(self.segments, key=lambda g: g.address):
                for i, block in enumerate(segment.blocks):
                    if left > 0 and not block.allocated:
                        chosen.append((segment, i, block))
                        left -= block.size
        blocks, left, asked = [], size, requested
        for segment, _, block in chosen:
            take = min(block.size, left)
            if block.size > take:
                rest = _Block(block.address + take, block.size - take)
                segment.blocks.insert(segment.blocks.index(block) + 1, rest)
                block.size = take
            block.allocated, block.frames = True, frames
            block.requested = min(take, asked)
            asked -= block.requested
            left -= take
            blocks.append(block)
        return blocks

    def free(self, allocation):
        self.allocated -= allocation.size
        self.requested -= allocation.requested
        for block in allocation.blocks:
            block.allocated, block.requested, block.frames = False, 0, None
        for segment in self.segments:
            if any(b in allocation.blocks for b in segment.blocks):
                merged = []
                for block in segment.blocks:
                    if merged and not block.allocated and not merged[-1].allocated:
                        merged[-1].size += block.size
                    else:
                        merged.append(block)
                segment.blocks = merged
        self._peaks()
        try:
            history = cuda.memory._HISTORY
        except (AttributeError, TypeError):  # interpreter shutdown: the modules are gone
            return
        address = allocation.blocks[0].address
        history.record(self.index, "free_requested", address, allocation.size, history.free_frames(allocation.frames))
        history.record(self.index, "free_completed", address, allocation.size, history.completed_frames(allocation.frames))

    def inactive_split(self):
        return sum(b.size for g in self.segments if len(g.blocks) > 1 for b in g.blocks if not b.allocated)

    def _peaks(self):
        self.peak_requested = max(self.peak_requested, self.requested)
        self.peak_segments = max(self.peak_segments, len(self.segments))
        self.peak_inactive_split = max(self.peak_inactive_split, self.inactive_split())

    def reset_peaks(self):
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved
        self.peak_requested, self.peak_segments = self.requested, len(self.segments)
        self.peak_inactive_split = self.inactive_split()

    def empty_cache(self):
        """Reserved down to the allocated bytes rounded up to 2 MiB: free segments go whole
        (largest first), then free blocks are cut out (largest first)."""
        target = (self.allocated + self.SEGMENT - 1) // self.SEGMENT * self.SEGMENT
        excess = self.reserved - target
        history = cuda.memory._HISTORY
        frames = history.free_frames(None)
        for segment in sorted(self.segments, key=lambda g: -g.size):
            if 0 < segment.size <= excess and len(segment.blocks) == 1 and not segment.blocks[0].allocated:
                self.segments.remove(segment)
                excess -= segment.size
                self.num_device_free += 1
                history.record(self.index, "segment_free", segment.address, segment.size, frames)
        while excess > 0:
            free = [(b.size, g, b) for g in self.segments for b in g.blocks if not b.allocated]
            if not free:
                break
            _, segment, block = max(free, key=lambda x: (x[0], -x[2].address))
            cut = min(block.size, excess)
            start = block.address + block.size - cut
            self._unmap(segment, start, cut)
            excess -= cut
            self.num_device_free += 1
            history.record(self.index, "segment_unmap", start, cut, frames)
        self.reserved = target

    def _unmap(self, segment, start, size):
        """Removes [start, start + size) (inside one free block) from `segment`, splitting it."""
        end = start + size
        left, right = [], []
        for block in segment.blocks:
            b_end = block.address + block.size
            if b_end <= start:
                left.append(block)
            elif block.address >= end:
                right.append(block)
            else:
                if block.address < start:
                    left.append(_Block(block.address, start - block.address))
                if b_end > end:
                    right.append(_Block(end, b_end - end))
        i = self.segments.index(segment)
        parts = []
        for blocks in (left, right):
            if blocks:
                part = _Segment(blocks[0].address, sum(b.size for b in blocks), segment.is_large, segment.frames)
                part.blocks = blocks
                parts.append(part)
        self.segments[i : i + 1] = parts


_ALLOCATORS = [_Allocator(i) for i in range(_DEVICES)]


def _maybe_fail():
    crash = os.environ.get("FAKE_TORCH_CRASH_AFTER_SYNC")
    if crash and _SYNCS >= int(crash):
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
    hang = os.environ.get("FAKE_TORCH_HANG_AFTER_SYNC")
    if hang and _SYNCS >= int(hang):
        time.sleep(3600)


def _allocator(dev):
    dev = device(dev) if dev is not None else device("cuda:0")
    if dev.type != "cuda":
        return None
    if dev.index >= _DEVICES:
        raise RuntimeError(f"CUDA error: invalid device ordinal {dev.index}")
    return _ALLOCATORS[dev.index]


_GRAD = [True]


def is_grad_enabled():
    return _GRAD[0]


class Tensor:
    def __init__(self, shape, dtype_=float32, device_=None, saved=()):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype_
        self.device = device(device_ or "cpu")
        self.requires_grad = False
        self.grad = None
        # Autograd, simulated: outputs keep their inputs alive until backward() (activations).
        self._saved = tuple(saved) if _GRAD[0] else ()
        alloc = _allocator(self.device)
        self._allocation = alloc.alloc(self.nbytes) if alloc else None
        self._alloc = alloc

    def float(self):
        return self.to(dtype=float32)

    def detach(self):
        return self

    def item(self):
        return 0.5

    def backward(self):
        seen, stack, params, largest = set(), [self], [], 0
        while stack:
            t = stack.pop()
            if id(t) in seen:
                continue
            seen.add(id(t))
            if t.requires_grad:
                params.append(t)
            else:
                largest = max(largest, t.nbytes)
            stack.extend(t._saved)
        transient = Tensor((largest,), uint8, self.device) if largest else None
        for p in params:
            if p.grad is None:
                p.grad = Tensor(p.shape, p.dtype, p.device)
        del transient
        stack = [self]
        while stack:
            t = stack.pop()
            stack.extend(x for x in t._saved if not x.requires_grad)
            t._saved = ()

    @property
    def nbytes(self):
        n = 1
        for s in self.shape:
            n *= s
        return n * self.dtype.itemsize

    def numel(self):
        return self.nbytes // self.dtype.itemsize

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def __del__(self):
        if getattr(self, "_alloc", None) is not None:
            self._alloc.free(self._allocation)
            self._alloc = None

    def to(self, dev=None, dtype=None):
        dev = device(dev) if dev is not None else self.device
        dtype = dtype or self.dtype
        if dev == self.device and dtype is self.dtype:
            return self
        return Tensor(self.shape, dtype, dev, saved=(self,))

    def __add__(self, other):
        return Tensor(self.shape, self.dtype, self.device, saved=(self, other))

    __radd__ = __add__

    def contiguous(self):
        return self


class Size(tuple):
    pass


def randn(*shape, device=None, dtype=None):
    if os.environ.get("FAKE_TORCH_NOISE"):
        print("noise from the workload on stdout {not json")
        os.write(1, b"raw noise on fd 1\n")
        print("noise on stderr", file=sys.stderr)
    return Tensor(shape, dtype or float32, device)


def zeros(*shape, device=None, dtype=None):
    return Tensor(shape, dtype or float32, device)


def manual_seed(seed):
    return None


class no_grad:
    def __enter__(self):
        self._prev = _GRAD[0]
        _GRAD[0] = False

    def __exit__(self, *exc):
        _GRAD[0] = self._prev
        return False


@contextlib.contextmanager
def autocast(device_type, dtype=None):
    yield


class Parameter(Tensor):
    def __init__(self, shape, dtype_=float32, device_=None):
        super().__init__(shape, dtype_, device_)
        self.requires_grad = True


from . import backends, cuda, nn, optim, utils  # noqa: E402, F401  (submodules, as torch exposes them)

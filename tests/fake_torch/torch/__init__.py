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
"""

import contextlib
import os
import signal
import sys
import time

__version__ = "0.0.0+fake"
IS_ITERAGPU_FAKE = True

_DEVICES = int(os.environ.get("FAKE_TORCH_DEVICES", "1"))
_CAPACITY = int(os.environ.get("FAKE_TORCH_CAPACITY", str(16 << 30)))
_SYNCS = 0


class _Version:
    cuda = None if os.environ.get("FAKE_TORCH_CPU_ONLY") else "12.8"
    hip = None


version = _Version()


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


class _Allocator:
    SEGMENT = 2 << 20

    def __init__(self, index):
        self.index = index
        self.allocated = self.reserved = 0
        self.peak_allocated = self.peak_reserved = 0
        self.num_ooms = 0
        self.limit = _CAPACITY

    def alloc(self, nbytes):
        _maybe_fail()
        above = os.environ.get("FAKE_TORCH_HANG_ABOVE")
        if above and nbytes > int(above):
            time.sleep(3600)
        size = _round(nbytes)
        need = self.allocated + size
        if need > self.reserved:
            grow = (need - self.reserved + self.SEGMENT - 1) // self.SEGMENT * self.SEGMENT
            if self.reserved + grow > min(_CAPACITY, self.limit):
                self.num_ooms += 1
                raise OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {size / 2**20:.2f} MiB. GPU {self.index} has a total "
                    f"capacity of {_CAPACITY / 2**30:.2f} GiB of which {(_CAPACITY - self.reserved) / 2**20:.2f} MiB is free. "
                    f"Of the allocated memory {self.allocated / 2**20:.2f} MiB is allocated by PyTorch (fake allocator)"
                )
            self.reserved += grow
        self.allocated = need
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return size

    def free(self, size):
        self.allocated -= size


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
        self._alloc = _allocator(self.device)
        self._size = self._alloc.alloc(self.nbytes) if self._alloc else 0

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
            self._alloc.free(self._size)
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


from . import backends, cuda, nn, optim, utils  # noqa: E402

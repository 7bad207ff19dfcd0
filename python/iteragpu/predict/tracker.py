"""Every storage allocated and freed on the target device, in order, with its size, its category
and the module that created it, streamed to the CLI (which replays it through its model of the
caching allocator). Like PyTorch's MemTracker, storages are seen at the dispatcher (each output
storage counted once, however many views share it) and freed when their last reference dies.

Categories: parameter, buffer, gradient, optimizer state, input, activation (saved for backward),
temporary, kv cache, workspace, communication (a collective's buffer), other. A storage gets the category known when it is created
(temporary inside a forward, a backward or an optimizer step, else other) and is re-tagged as soon
as its role shows: registered as a parameter or buffer, accumulated as a gradient, saved for
backward, kept in an optimizer's state, passed as a model's input, held by a KV cache.

What depends on data never gets a guessed number: `.item()` and friends return a placeholder,
counted and reported; an op whose output size depends on data (nonzero, boolean masks, unique)
gets its true size when the inputs that decide it are known (`sizes.py`), else it makes the
phase `unpredictable` (named with the op and the user's file and line), and what it
produces is tainted so that no later phase holding it is presented as predicted either.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import os
import sys
import threading
import weakref
from types import FrameType
from typing import Any, Callable, Iterable, Iterator

import torch
from torch._subclasses import fake_tensor
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes, is_traceable_wrapper_subclass
from torch.utils._pytree import SUPPORTED_NODES, tree_flatten, tree_unflatten

from .. import frames
from . import collectives, encoded, sizes, symbolic
from . import values as known_values

aten: Any = torch.ops.aten

# Ops that run cuBLAS (their first call on a thread creates that thread's cuBLAS workspaces).
BLAS_OPS: set[str] = {
    "mm", "addmm", "bmm", "baddbmm", "addmv", "mv", "dot", "vdot", "addbmm", "_addmm_activation",
    "matmul", "linear", "_scaled_mm", "_int_mm",
}
# A condition that keeps reading unknown data (`while not done.all()`) at one line is answered this
# many times, then the phase is unpredictable (a loop that data alone would end).
LOOP_BUDGET: int = 1_000
# CPU tensors made by factory functions above this many bytes stay data-less (a large synthetic
# batch, a model's weights created on the CPU): nothing costly becomes real.
LARGE_CPU: int = 64 << 20
# What a read of an unknown value answers: never zero (no division by zero, no empty structure),
# never True for a condition (no sequence stops early: the longest case).

def _storage_key(t: Any) -> int:
    """The identity of `t`'s storage, or -1 for a tensor without one (a sparse layout)."""
    try:
        return id(t.untyped_storage())
    except (NotImplementedError, RuntimeError):
        return -1

class Category(str, enum.Enum):
    """What a storage holds (MemTracker's `_MemRefType`). The value is the word the event stream
    carries: src/schema/trace.rs `Category` reads it, and a test compares the two lists."""

    PARAMETER = "parameter"
    BUFFER = "buffer"
    GRADIENT = "gradient"
    OPTIMIZER_STATE = "optimizer state"
    INPUT = "input"
    ACTIVATION = "activation"  # saved for backward
    TEMPORARY = "temporary"  # made inside a forward, a backward or an optimizer step, not kept
    KV_CACHE = "kv cache"
    WORKSPACE = "workspace"  # held by a library (cuBLAS, cuDNN), not by a tensor of the program
    COMMUNICATION = "communication"  # a collective's buffer
    DEQUANTIZED_WEIGHT = "dequantized weight"  # a quantized weight in the compute dtype, for one matmul
    OTHER = "other"


# Ops whose output is a quantized weight dequantized to the compute dtype (bitsandbytes' 4-bit
# path: `MatMul4Bit` and `Linear4bit`'s forward without a fused GEMV; its backward).
DEQUANTIZING: frozenset[str] = frozenset({"bitsandbytes.dequantize_4bit.default"})

# Ops whose CUDA implementation allocates inside itself what their fake kernel does not: op ->
# (its args) -> [(shape, dtype, category)], allocated before the output (quantized.py fills it).
INSIDE: dict[str, Callable[..., list[tuple[tuple[int, ...], Any, Category]]]] = {}

# What a later tag may turn into an activation, an input or a known kind: a storage nobody named.
UNNAMED: frozenset[Category] = frozenset({Category.TEMPORARY, Category.OTHER})


class Live:
    """A storage alive on the target device (MemTracker's `_WeakRefInfo`): its current event id
    (`None` while resized to 0), its bytes, its category, and the id it was first recorded under
    (a weakref's finalizer frees it only while that is still the storage it knows)."""

    __slots__ = ("event", "nbytes", "category", "origin")

    def __init__(self, event: int | None, nbytes: int, category: Category, origin: int) -> None:
        self.event = event
        self.nbytes = nbytes
        self.category = category
        self.origin = origin


PLACEHOLDER: dict[str, bool | int | float] = {"bool": False, "int": 1, "float": 1.0}

# torch's, iteragpu's prediction code's and the recorder's files, and pytest's: by their actual
# directories (frames.py), never by a word in a path (a user's project in a folder named torch or
# iteragpu is theirs).
_INTERNAL: tuple[str, ...] = (
    frames.package_dirs("torch", "_pytest")
    + frames.tool_dir("predict")
    + frames.module_files(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recorder.py"))
)


def _internal(file: str) -> bool:
    return file.startswith("<") or frames.under(file, _INTERNAL)


# A library's op whose output size depends on the data (str(op) -> its largest outputs from its
# arguments; SMALLEST: its smallest), registered by the library's own support (quantized.py:
# bitsandbytes' LLM.int8 outlier columns): the run goes on with them, tainted, the phase bounded.
LARGEST: dict[str, Callable[..., Any]] = {}
SMALLEST: dict[str, Callable[..., Any]] = {}

# Which end of a data-dependent size this run takes: the CLI predicts the largest outputs first
# (the verdict's figures), then, when a phase was bounded, the same workload at the smallest.
BOUND_VARIABLE = "ITERAGPU_PREDICT_BOUND"


class Unpredictable(RuntimeError):
    """An op the fake tensors cannot follow (no fake implementation, or data-dependent with no
    upper bound): the phase stops and is reported unpredictable."""


_PACKAGE: str = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def user_frame() -> tuple[str, int] | tuple[None, None]:
    """(file, line) of the innermost frame outside torch and iteragpu's prediction code; a file of
    iteragpu's own workloads is named inside the package (it runs from a temporary folder)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and _internal(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return None, None
    file = frame.f_code.co_filename
    if file.startswith(_PACKAGE + os.sep):
        file = os.path.relpath(file, _PACKAGE)
    return file, frame.f_lineno


_LIBRARIES: tuple[str, ...] = tuple(
    os.path.join(os.path.realpath(p), "") for p in {sys.prefix, sys.base_prefix, sys.exec_prefix} if p
)


def script_frame() -> tuple[str, int] | tuple[None, None]:
    """(file, line) of the innermost frame of the user's own code: outside torch, iteragpu and
    every installed library or the standard library (a fork's caller, a failure's line)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        file = frame.f_code.co_filename
        if not _internal(file) and not os.path.realpath(file).startswith(_LIBRARIES):
            return file, frame.f_lineno
        frame = frame.f_back
    return user_frame()


_OWN_PACKAGE: str = os.path.join(_PACKAGE, "iteragpu", "")
# co_filename -> the name an allocation's site reports, or None for torch's, iteragpu's
# prediction code's and the installed libraries' files: each file classified once (an
# allocation's site is looked up on every storage).
_SITE_FILES: dict[str, str | None] = {}


def _site_file(file: str) -> str | None:
    if file in _SITE_FILES:
        return _SITE_FILES[file]
    name: str | None
    if _internal(file):
        name = None
    elif file.startswith(_OWN_PACKAGE):
        # iteragpu's own workloads: named inside the package (they run from a temporary folder).
        name = os.path.relpath(file, _PACKAGE)
    elif os.path.realpath(file).startswith(_LIBRARIES):
        name = None
    else:
        name = file
    _SITE_FILES[file] = name
    return name


def alloc_site() -> tuple[str, int] | tuple[None, None]:
    """(file, line) of the innermost frame of the user's own code (`script_frame`'s rule; a
    built-in workload's file named inside the package): the line a predicted out-of-memory
    points to."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = _site_file(frame.f_code.co_filename)
        if name is not None:
            return name, frame.f_lineno
        frame = frame.f_back
    return None, None


class Tracker(TorchDispatchMode):
    """Sits above FakeTensorMode: sees every op first, then registers what it produced."""

    def __init__(self, emit: Callable[[str, Any], None], workspaces: list[tuple[int, str]]) -> None:
        super().__init__()
        self._emit = emit
        # The session's emit of an event already encoded (storage events: thousands a step), when
        # it has one; else every event goes through `emit` as a dict.
        self._emit_line: Callable[[str, str], None] | None = getattr(emit, "encoded", None)
        # The FakeTensorMode every op on the target device runs under (set by the session).
        self.fake_mode: Any = None
        # The symbolic trace of a sweep's dimension, once it began (symbolic.py).
        self.symbolic: symbolic.Trace | None = None
        # FakeTensorMode's cached answers reused without entering it (memo.py; set by the session).
        self.memo: Any = None
        self.fake_lock = threading.RLock()
        self.values = known_values.Values()
        self._workspaces = workspaces  # [(bytes, what)] allocated on a thread's first BLAS call
        self.lock = threading.RLock()
        # id(storage) -> what is known of it
        self.live: dict[int, Live] = {}
        self.next_id = 0
        # The script's torch.cuda memory calls: answered by the CLI's allocator model (memory.py;
        # set by the session), the one the replay uses.
        self.memory: Any = None
        self.tainted: set[int] = set()  # event ids
        self.blas_threads: set[int] = set()
        self.local = _Local()
        self.placeholders: collections.Counter[tuple[str | None, int | None]] = collections.Counter()
        self.loop_hits: collections.Counter[tuple[str | None, int | None]] = collections.Counter()
        self.in_optimizer = 0
        # Ops run with no fake implementation, said once per op.
        self.unsupported: set[str] = set()
        # Says a note once in the prediction (set by the idioms; nothing before).
        self.note: Callable[[str], None] = lambda text: None

    # ---------------------------------------------------------------- what each storage is
    def module(self) -> str | None:
        if torch._C._current_graph_task_id() != -1:
            return "(backward)"
        stack = getattr(self.local, "modules", None)
        return stack[-1] if stack else None

    def push_module(self, name: str) -> None:
        stack = getattr(self.local, "modules", None)
        if stack is None:
            stack = self.local.modules = []
        stack.append(name)

    def pop_module(self) -> None:
        stack = getattr(self.local, "modules", None)
        if stack:
            stack.pop()

    def default_category(self) -> Category:
        if torch._C._current_graph_task_id() != -1 or self.in_optimizer:
            return Category.TEMPORARY
        if getattr(self.local, "modules", None):
            return Category.TEMPORARY
        return Category.OTHER

    # ---------------------------------------------------------------- events
    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Storages made inside are not the workload's (DTensor's shape inference)."""
        depth = getattr(self.local, "suspended", 0)
        self.local.suspended = depth + 1
        try:
            yield
        finally:
            self.local.suspended = depth

    def managed(self, t: Any, category: Category) -> int:
        """Records `t`'s storage as memory outside PyTorch's caching allocator (CUDA unified
        memory, `cudaMallocManaged`: bitsandbytes' paged optimizer states), made by the caller
        inside `suspended()`: its alloc says `managed`, the replay keeps it out of the allocator's
        figures. Freed when its last reference dies, as any storage. Returns its bytes."""
        st = t.untyped_storage()
        key = id(st)
        nbytes = int(st.nbytes())
        with self.lock:
            if key in self.live:
                self._free(key)
            ident = self.next_id
            self.next_id += 1
            self.live[key] = Live(ident, nbytes, category, ident)
            file, line = alloc_site()
            self._emit(
                "alloc",
                {
                    "id": ident,
                    "bytes": nbytes,
                    "category": category.value,
                    "module": self.module(),
                    "shape": list(t.size()),
                    "dtype": _dtype_name(t.dtype),
                    "tainted": False,
                    "managed": True,
                    **({} if file is None else {"file": file, "line": line}),
                },
            )
        weakref.finalize(st, self._finalized, key, ident)
        return nbytes

    def resized(self, storage: Any, nbytes: int) -> None:
        """`UntypedStorage.resize_` on a tracked storage (FSDP2's free and refill of unsharded
        parameters): a free, then a new block of the new size."""
        key = id(storage)
        with self.lock:
            known = self.live.get(key)
            if known is None or known.nbytes == nbytes:
                return
            category, origin = known.category, known.origin
            self._free(key)
            if nbytes == 0:
                # An empty storage stays known, so that its refill is seen as one.
                self.live[key] = Live(None, 0, category, origin)
                return
            ident = self.next_id
            self.next_id += 1
            self.live[key] = Live(ident, nbytes, category, origin)
            self._alloc(ident, nbytes, category, self.module(), [nbytes], "uint8", False)

    def _storage(self, t: Any) -> Any:
        if type(t) is FakeTensor:
            # The usual case, and never a wrapper subclass (whose test costs an AttributeError).
            if t.device.type != "cuda":
                return None
        elif not isinstance(t, torch.Tensor) or t.device.type != "cuda" or is_traceable_wrapper_subclass(t):
            return None
        try:
            return t.untyped_storage()
        except Exception:  # a tensor subclass without storage may refuse with any error: not tracked
            return None

    def register(self, t: Any, category: Category | None = None, tainted: bool = False) -> int | None:
        """Records the storage behind `t` if it is new (or resized); returns its event id. A
        wrapper subclass (a DTensor: the global shape around a rank's local shard) holds no
        memory of its own: its inner tensors are what the device holds."""
        if self.local.suspended:
            return None
        if type(t) is not FakeTensor and is_traceable_wrapper_subclass(t):
            ids = [self.register(inner, category, tainted) for inner in _inner(t)]
            return next((i for i in ids if i is not None), None)
        if getattr(t, "layout", None) is torch.sparse_coo:
            # A sparse COO tensor (an `Embedding(sparse=True)`'s gradient) has no storage of its
            # own: its indices and values are what the device holds.
            self.note(
                "a sparse COO tensor was met (an Embedding(sparse=True)'s gradient, SparseAdam): its indices and values are "
                "followed where FakeTensorMode makes them as tensors of their own; the sparse ops' own temporaries "
                "(coalesce) are not, and were never checked on a GPU: the figures may be low by about the sparse gradient's size"
            )
            ids = [self.register(inner, category, tainted) for inner in (t._indices(), t._values())]
            return next((i for i in ids if i is not None), None)
        st = self._storage(t)
        if st is None:
            return None
        key = id(st)
        raw = st.nbytes()
        # A size that depends on a traced symbol (symbolic.py) is kept as its expression; its
        # value at the hint serves every comparison, which takes no guard.
        nbytes = raw if type(raw) is int else symbolic.hint(raw)
        with self.lock:
            known = self.live.get(key)
            if known is not None:
                if known.nbytes == nbytes:
                    if tainted and known.event is not None:
                        self.tainted.add(known.event)
                    return known.event
                self._free(key)  # resized in place: the allocator sees a new block
            ident = self.next_id
            self.next_id += 1
            category = category or self.default_category()
            self.live[key] = Live(ident, nbytes, category, ident)
            if tainted:
                self.tainted.add(ident)
            self._alloc(ident, raw, category, self.module(), list(t.size()), _dtype_name(t.dtype), tainted)
        weakref.finalize(st, self._finalized, key, ident)
        return ident

    def _finalized(self, key: int, origin: int) -> None:
        with self.lock:
            known = self.live.get(key)
            if known is not None and known.origin == origin:
                self._free(key)

    def _alloc(self, ident: int, nbytes: int, category: Category, module: str | None, shape: list[int], dtype: str, tainted: bool) -> None:
        """Says that storage `ident` of `nbytes` was allocated (with where in the user's code)."""
        site = alloc_site()
        word = category.value
        if self._emit_line is not None and type(nbytes) is int and (module is None or type(module) is str) and all(type(d) is int for d in shape):
            # json.dumps's own characters (default separators, ASCII escapes), written directly.
            self._emit_line(
                "alloc",
                f'{{"type": "alloc", "data": {{"id": {ident}, "bytes": {nbytes}, "category": {encoded.json_string(word)}, '
                f'"module": {"null" if module is None else encoded.json_string(module)}, "shape": [{", ".join(map(int.__repr__, shape))}], '
                f'"dtype": {encoded.json_string(dtype)}, "tainted": {"true" if tainted else "false"}{encoded.site_text(site)}}}}}',
            )
            return
        file, line = site
        exprs = None
        if self.symbolic is not None:
            nbytes, shape, exprs = self.symbolic.alloc(nbytes, shape)
        self._emit(
            "alloc",
            {
                "id": ident,
                "bytes": nbytes,
                "category": word,
                "module": module,
                "shape": shape,
                "dtype": dtype,
                "tainted": tainted,
                **({} if file is None else {"file": file, "line": line}),
                **({} if exprs is None else {"exprs": exprs}),
            },
        )

    def _free(self, key: int) -> None:
        ident = self.live.pop(key).event
        if ident is None:
            return
        if self._emit_line is not None:
            self._emit_line("free", f'{{"type": "free", "data": {{"id": {ident}}}}}')
        else:
            self._emit("free", {"id": ident})

    def tag(self, t: Any, category: Category, only_from: Iterable[Category] | None = None) -> None:
        """Gives the storage behind `t` a category (if it has one of `only_from`, when given)."""
        if is_traceable_wrapper_subclass(t):
            for inner in _inner(t):
                self.tag(inner, category, only_from)
            return
        st = self._storage(t)
        if st is None:
            return
        with self.lock:
            known = self.live.get(id(st))
            if known is None:
                self.register(t, category)
                return
            if known.category == category or (only_from is not None and known.category not in only_from):
                return
            known.category = category
            if known.event is not None:
                if self._emit_line is not None:
                    self._emit_line("tag", f'{{"type": "tag", "data": {{"id": {known.event}, "category": {encoded.json_string(category.value)}}}}}')
                else:
                    self._emit("tag", {"id": known.event, "category": category.value})

    def workspace(self) -> None:
        """A thread's first BLAS call: its cuBLAS workspaces, held until the process ends."""
        thread = threading.get_ident()
        with self.lock:
            if thread in self.blas_threads:
                return
            self.blas_threads.add(thread)
            for nbytes, what in self._workspaces:
                ident = self.next_id
                self.next_id += 1
                module = f"{what} ({'autograd thread' if torch._C._current_graph_task_id() != -1 else 'main thread'})"
                self._alloc(ident, nbytes, Category.WORKSPACE, module, [nbytes], "uint8", False)

    # ---------------------------------------------------------------- dispatch
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        """Only what goes to the GPU is fake: an op on a fake tensor, or one that makes a tensor on
        the target device, runs under FakeTensorMode; every other CPU op runs for real (data
        pipelines, augmentation, CPU RNG, `.numpy()` give true answers), except factories of large
        CPU tensors, which stay data-less."""
        meta = _META_QUERIES.get(func)
        if meta is not None and len(args) == 1 and isinstance(args[0], FakeTensor):
            # `t.device`, `t.size()` asked from C++ (autograd, foreach grouping: several thousand
            # a training step): FakeTensorMode's own answer, without entering it.
            return meta(args)
        kwargs = kwargs or {}
        if func in _READS:
            return self._scalar(func, args, kwargs)
        flat = _flatten(args, kwargs)
        spec = None
        if flat is None:
            flat, spec = tree_flatten((args, kwargs))
        # A wrapper subclass (a DTensor) holds fake tensors: its op runs under the fake mode and
        # its inner tensors are registered.
        fakes = any(isinstance(a, FakeTensor) for a in flat)
        fake_in = fakes or any(is_traceable_wrapper_subclass(a) for a in flat)
        if not fake_in and not _targets_cuda(flat) and not _large_factory(func, args, kwargs, flat):
            return func(*args, **kwargs)
        if fakes and func.overloadpacket in _READ_BACK:
            read = self._read_back(func, args, kwargs)
            if read is not NotImplemented:
                return read
        return self._fake_call(func, args, kwargs, flat, spec)

    def to_fake(self, t: Any, keep_values: bool = True) -> Any:
        """A real CPU tensor as a data-less one of the same shape, strides and dtype; a small one
        keeps its values (they are known) unless told otherwise."""
        with self.fake_lock, _disable_current_modes():
            fake = self.fake_mode.from_tensor(t)
            small = t.device.type == "cpu" and t.numel() <= known_values.SMALL
            value = t.detach().clone() if keep_values and small else None
        if value is not None:
            self.values.set(fake, value)
        return fake

    def _fake_call(self, func: Any, args: Any, kwargs: Any, flat: list[Any], spec: Any) -> Any:
        name = getattr(func, "_opname", None) or str(func)
        if name in BLAS_OPS:
            self.workspace()
        if any(_real(a) for a in flat):
            flat, spec = tree_flatten((args, kwargs))
            flat = [self.to_fake(a) if _real(a) else a for a in flat]
            args, kwargs = tree_unflatten(flat, spec)
        inputs = [a for a in flat if isinstance(a, torch.Tensor)]
        tainted = bool(self.tainted) and any(self._is_tainted(a) for a in inputs)
        # What the op's CUDA implementation allocates inside itself (its fake kernel gives the
        # output alone): alive until the output is counted, freed when this call returns.
        inside = self._inside(func, args, kwargs, inputs)  # noqa: F841 (held alive on purpose)
        try:
            # FakeTensorMode keeps its entries on a list: threads enter it one at a time.
            with self.fake_lock:
                out = self._fake_dispatch(func, args, kwargs)
        except fake_tensor.DynamicOutputShapeException:
            # The op's own temporaries (a mask's positions): alive until its output is counted.
            held: list[Any] = []
            out = self._known_shape(func, args, kwargs, flat, spec or tree_flatten((args, kwargs))[1], held)
            if out is None:
                out = self._upper_bound(func, name, args, kwargs)
                tainted = True
        except fake_tensor.UnsupportedOperatorException:
            out = self._unsupported(func, args, kwargs)
            tainted = True
        except (RuntimeError, NotImplementedError) as exc:
            if sizes.byte_mask_index(func, args):
                # FakeTensorMode refuses the (deprecated) uint8 masks that CUDA's index still takes.
                held = []
                out = self._known_shape(func, args, kwargs, flat, spec or tree_flatten((args, kwargs))[1], held)
                if out is None:
                    out = self._upper_bound(func, name, args, kwargs)
                    tainted = True
            elif not _no_fake_implementation(exc):
                raise
            else:
                # A custom op registered without a fake implementation says so in its own words.
                out = self._unsupported(func, args, kwargs)
                tainted = True
        except fake_tensor.DataDependentOutputException as exc:
            file, line = user_frame()
            self._emit("unpredictable", {"op": str(func), "file": file, "line": line, "reason": "its result depends on the data"})
            raise Unpredictable(f"{func} depends on the data ({file}:{line})") from exc
        out_flat = _flatten_out(out)
        for o in out_flat:
            # A scalar made from a data-dependent tensor (its sum, its max) has a known size.
            self.register(o, tainted=tainted and isinstance(o, torch.Tensor) and o.dim() > 0)
        # A collective's buffers (FSDP2's all-gather output, its reduce-scatter input).
        if "allgather" in name or "all_gather" in name:
            self._tag_all(args[:1], Category.COMMUNICATION)
        elif "reduce_scatter" in name:
            self._tag_all(args[1:2], Category.COMMUNICATION)
        elif str(func) in DEQUANTIZING:
            self._tag_all(out_flat, Category.DEQUANTIZED_WEIGHT)
        self._follow_values(func, args, kwargs, out, flat, spec, out_flat)
        return out

    def _fake_dispatch(self, func: Any, args: Any, kwargs: Any) -> Any:
        """The op under FakeTensorMode, or its answer reused from FakeTensorMode's cache (memo.py)."""
        if self.symbolic is not None:
            # What a symbolic trace runs instead (symbolic.py).
            direct, args = symbolic.adjust(func, args)
            if direct is not None:
                with self.fake_mode:
                    return direct(*args, **kwargs)
        if self.memo is not None:
            return self.memo.call(func, args, kwargs)
        with self.fake_mode:
            return func(*args, **kwargs)

    def _unsupported(self, func: Any, args: Any, kwargs: Any) -> Any:
        """An op with no fake implementation (a custom op): its phase is unpredictable, and the run
        goes on with outputs shaped like its first tensor input (tainted: never counted as
        predicted)."""
        file, line = user_frame()
        self._emit("unpredictable", {"op": str(func), "file": file, "line": line, "reason": "no fake implementation (a custom or unsupported operator): its outputs are guessed and every phase holding them is unpredictable"})
        first = next((a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)), None)
        returns = getattr(getattr(func, "_schema", None), "returns", [])
        if first is None or not returns or not all("Tensor" in str(r.type) for r in returns):
            raise Unpredictable(f"{func} has no fake implementation ({file}:{line})")
        with self.fake_lock, self.fake_mode:
            outs = [torch.empty_like(first) for _ in returns]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _read_back(self, func: Any, args: Any, kwargs: Any) -> Any:
        """A fake tensor read back into a real CPU one (`.cpu()`, `.tolist()`, `.numpy()`, a copy
        into a host buffer): its values when known, else a placeholder per the stated policy
        (counted per call site); a large unknown one stays a data-less CPU tensor."""
        packet = getattr(func, "overloadpacket", None)
        src = args[0] if args else None
        if packet in (aten._to_copy, aten.to) and isinstance(src, FakeTensor) and src.device.type == "cuda":
            device = kwargs.get("device") or next((a for a in args[1:] if isinstance(a, torch.device)), None)
            if device is None or torch.device(device).type != "cpu":
                return NotImplemented
            dtype = kwargs.get("dtype") or next((a for a in args[1:] if isinstance(a, torch.dtype)), None) or src.dtype
            value = self._host_value(src)
            if value is None:
                return NotImplemented
            with _disable_current_modes():
                return value.to(dtype).clone()
        if packet is aten.copy_ and len(args) >= 2 and isinstance(args[1], FakeTensor) and not isinstance(args[0], FakeTensor):
            dst = args[0]
            if dst.device.type != "cpu":
                return NotImplemented
            value = self._host_value(args[1], large_ok=True)
            with _disable_current_modes():
                if value is None:
                    dst.fill_(self._placeholder_value(args[1]))
                else:
                    dst.copy_(value)
            return dst
        return NotImplemented

    def _host_value(self, t: Any, large_ok: bool = False) -> Any:
        """The real values of fake `t` (a copy), or a placeholder tensor (counted) when they are
        unknown and `t` is small enough to hold them; None for a large unknown tensor."""
        known = self.values.known(t)
        if known is not None:
            return known
        if t.numel() > known_values.SMALL and not large_ok:
            return None
        answer = self._placeholder_value(t)
        with _disable_current_modes():
            return torch.full(t.shape, answer, dtype=t.dtype, device="cpu") if t.numel() <= known_values.SMALL else None

    def _placeholder_value(self, t: Any) -> bool | int | float:
        file, line = user_frame()
        self._count_placeholder(file, line, t.dtype)
        return _placeholder_for(t.dtype)

    def _follow_values(self, func: Any, args: Any, kwargs: Any, out: Any, flat: list[Any], spec: Any, out_flat: list[Any] | None = None) -> None:
        """The output's real values when they follow from known inputs (see values.py): the same
        op run on the CPU over the known values. `spec` None: computed when needed; `out_flat`:
        `out` flattened, when the caller has it."""
        if out_flat is None:
            out_flat = tree_flatten(out)[0]
        outs = [o for o in out_flat if isinstance(o, FakeTensor)]
        mutated = []
        name = _base_name(func)
        if getattr(func, "namespace", None) in collectives.NAMESPACES and self._follow_collective(name, args, kwargs, out):
            return
        keeps = known_values.KEEPS.get(name)
        for i, name in _written(func):
            value = kwargs.get(name) if i is None or i >= len(args) else args[i]
            if keeps is not None and name in keeps[0]:
                # Its values are decided by a stated policy (values.py): they stay as they were.
                if any(isinstance(m, FakeTensor) and self.values.get(m) is not None for m in tree_flatten(value)[0]):
                    self.note(keeps[1])
                continue
            mutated += [m for m in tree_flatten(value)[0] if isinstance(m, FakeTensor)]
        targets = outs + mutated
        if not targets:
            return
        bases = self.values.bases

        def forget() -> None:
            if bases:
                for t in targets:
                    self.values.drop(t)

        # Most ops read weights or activations, whose values nobody knows: a cheap check first.
        fake_inputs = [a for a in flat if isinstance(a, FakeTensor)]
        partial_op = name in known_values.PARTIAL
        # A factory (no fake input: `full`, `arange`) is followed even before any value is known.
        if fake_inputs and (not bases or (not partial_op and not all(_storage_key(a) in bases for a in fake_inputs))):
            forget()
            return
        if getattr(func, "namespace", None) not in ("aten", "prims") or any(t.numel() > known_values.SMALL for t in targets):
            forget()
            return
        if self.symbolic is not None and any(type(a) is torch.SymInt or (isinstance(a, FakeTensor) and a._has_symbolic_sizes_strides) for a in flat):
            # Run on the CPU, the op would make a traced symbol concrete: its values are unknown.
            forget()
            return
        got = {}
        for a in flat:
            if isinstance(a, FakeTensor):
                got[id(a)] = self.values.get(a)
            elif isinstance(a, torch.Tensor) and a.numel() > known_values.REAL_INPUT:
                forget()
                return
        complete = all(g is not None and g[1] is None for g in got.values())
        if not complete and (name not in known_values.PARTIAL or not any(g is not None for g in got.values())):
            forget()
            return
        if spec is None:
            spec = tree_flatten((args, kwargs))[1]
        with _disable_current_modes():
            filled = []
            for a in flat:
                if isinstance(a, FakeTensor):
                    g = got[id(a)]
                    a = g[0] if g is not None else torch.zeros(a.shape, dtype=a.dtype, device="cpu")
                elif isinstance(a, torch.device) and a.type != "cpu":
                    a = torch.device("cpu")
                filled.append(a)
            cargs, ckwargs = tree_unflatten(filled, spec)
            try:
                result = func(*cargs, **ckwargs)
            except Exception:  # any op may fail on the CPU where CUDA would not: values unknown, not an error
                forget()
                return
            mask = None
            if not complete:
                pairs = []
                for a, f in zip(flat, filled):
                    if isinstance(a, FakeTensor):
                        g = got[id(a)]
                        m = torch.zeros(a.shape, dtype=torch.bool, device="cpu") if g is None else (torch.ones(a.shape, dtype=torch.bool, device="cpu") if g[1] is None else g[1])
                        pairs.append((f, m))
                    elif isinstance(a, torch.Tensor):
                        pairs.append((a, torch.ones(a.shape, dtype=torch.bool, device="cpu")))
                    elif isinstance(a, (bool, int)):
                        pairs.append((torch.tensor(a, device="cpu"), torch.tensor(True, device="cpu")))
                shape = outs[0].shape if outs else mutated[0].shape
                try:
                    mask = known_values.known_mask(name, pairs, shape)
                except RuntimeError:
                    mask = None
                if mask is None:
                    forget()
                    return
        results = list(tree_flatten(result)[0])
        if len(results) == len(out_flat):
            for o, r in zip(out_flat, results):
                if isinstance(o, FakeTensor):
                    if isinstance(r, torch.Tensor):
                        self.values.set(o, r, mask)
                    else:
                        self.values.drop(o)
        else:
            forget()

    def _follow_collective(self, name: str, args: Any, kwargs: Any, out: Any) -> bool:
        """A collective's outputs as identical ranks would make them (collectives.py)."""
        import torch.distributed as dist

        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if name.startswith(("all_gather_into_tensor", "reduce_scatter_tensor")) and any(isinstance(a, int) and not isinstance(a, bool) for a in args[1:3]):
            world = next(a for a in args[1:3] if isinstance(a, int) and not isinstance(a, bool))  # the functional op's group size
        else:
            with _disable_current_modes():
                world = collectives.group_size(torch, tuple(args), world)

        def known(t: Any) -> Any:
            got = self.values.get(t) if isinstance(t, FakeTensor) else None
            return got[0] if got is not None and got[1] is None else None

        def set_known(t: Any, value: Any) -> None:
            if isinstance(t, FakeTensor):
                self.values.set(t, value)

        def forget(t: Any) -> None:
            if isinstance(t, FakeTensor):
                self.values.drop(t)

        with _disable_current_modes():
            return collectives.follow(torch, name, args, kwargs, out, known, set_known, forget, world)

    def _inside(self, func: Any, args: Any, kwargs: Any, inputs: list[Any]) -> list[Any]:
        """The storages `func`'s own CUDA code makes before its output (`INSIDE`), registered
        with their category on the device of its first tensor input; [] for every other op."""
        plan = INSIDE.get(str(func))
        if plan is None or not inputs:
            return []
        held: list[Any] = []
        for shape, dtype, category in plan(*args, **kwargs):
            t = sizes._fake(self, shape, dtype, inputs[0].device, register=True, held=held)
            self.tag(t, category, only_from=UNNAMED)
        return held

    def _tag_all(self, values: Iterable[Any], category: Category) -> None:
        for t in tree_flatten(values)[0]:
            if isinstance(t, torch.Tensor):
                self.tag(t, category, only_from=UNNAMED)

    def _is_tainted(self, t: Any) -> bool:
        st = self._storage(t)
        if st is None:
            return False
        known = self.live.get(id(st))
        return known is not None and known.event in self.tainted

    def _scalar(self, func: Any, args: Any, kwargs: Any) -> Any:
        """`.item()`, `bool(t)`, `float(t)`, `format(t)`: the real value when it is known (values
        followed from known inputs, a constant), else a placeholder per the stated policy,
        counted per call site: False for a condition (nothing stops early), 1 for a number."""
        # A functional collective's pending result (AsyncCollectiveTensor): read as the tensor it
        # wraps (the collective's output, whose values were followed), as its own dispatch does
        # once waited for; the wait itself moves nothing on the fake process group.
        args = tuple(a.elem if type(a).__name__ == "AsyncCollectiveTensor" and isinstance(getattr(a, "elem", None), torch.Tensor) else a for a in args)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not any(isinstance(a, FakeTensor) for a in tensors):
            return func(*args, **kwargs)
        t = next(a for a in tensors if isinstance(a, FakeTensor))
        known = [self.values.known(a) if isinstance(a, FakeTensor) else a for a in args]
        if all(k is not None for k in known):
            with _disable_current_modes():
                return func(*known, **kwargs)
        try:
            with self.fake_lock, self.fake_mode:
                got = func(*args, **kwargs)
            # Under a symbolic trace's ShapeEnv, FakeTensorMode answers with an unbacked symbol.
            if self.symbolic is None or type(got) in (bool, int, float):
                return got
        except fake_tensor.DataDependentOutputException:
            pass
        file, line = user_frame()
        # is_nonzero and equal answer a condition.
        dtype = t.dtype if func in (aten._local_scalar_dense.default, aten.item.default) else torch.bool
        self._count_placeholder(file, line, dtype)
        if dtype == torch.bool:
            site = (file, line)
            self.loop_hits[site] += 1
            if self.loop_hits[site] > LOOP_BUDGET:
                self._emit("unpredictable", {"op": "a loop on data", "file": file, "line": line, "reason": f"a condition read {LOOP_BUDGET} times from values that depend on the data (answered False each time)"})
                raise Unpredictable(f"a loop condition at {file}:{line} depends on the data")
        return _placeholder_for(dtype)

    def _count_placeholder(self, file: str | None, line: int | None, dtype: Any) -> None:
        site = (file, line)
        self.placeholders[site] += 1
        if self.placeholders[site] == 1:
            kind = _placeholder_kind(dtype)
            self._emit("placeholder", {"op": "item", "file": file, "line": line, "dtype": str(dtype).replace("torch.", ""), "answer": str(PLACEHOLDER[kind])})

    def _known_shape(self, func: Any, args: Any, kwargs: Any, flat: list[Any], spec: Any, held: list[Any]) -> Any:
        """A data-dependent output size decided by known values (`sizes.py`: a known boolean mask
        over unknown hidden states, Qwen2-VL's `repeat_interleave` over `image_grid_thw`): the
        output is a data-less tensor of its true size (its values followed by `_follow_values`
        where they can be). None when an input that decides the size is unknown."""
        return sizes.known_size(self, func, args, kwargs, flat, spec, held)

    def _upper_bound(self, func: Any, name: str, args: Any, kwargs: Any) -> Any:
        """A data-dependent output size: said (the op, its place, the bound this run takes),
        then the largest possible output, or the smallest when the CLI asks for the lower bound
        (`ITERAGPU_PREDICT_BOUND=lower`), so that the run goes on (tainted: the phase is bounded,
        its figures those of this end)."""
        file, line = user_frame()
        lower = os.environ.get(BOUND_VARIABLE) == "lower"
        event: dict[str, Any] = {"op": str(func), "file": file, "line": line, "reason": "its output size depends on the data", "bound": "lower" if lower else "upper"}
        with self.fake_lock, self.fake_mode:
            try:
                out = self._smallest(func, name, args, file, line) if lower else self._largest(func, name, args, file, line)
            except Unpredictable:
                del event["bound"]  # no bound known: unpredictable
                self._emit("unpredictable", event)
                raise
        event["shapes"] = [[symbolic.hint(d) for d in t.shape] for t in _flatten_out(out) if isinstance(t, torch.Tensor)]
        self._emit("unpredictable", event)
        return out

    def _smallest(self, func: Any, name: str, args: Any, file: str | None, line: int | None) -> Any:
        bound = SMALLEST.get(str(func))
        if bound is not None:
            return bound(*args)
        x = args[0]
        if name == "nonzero":
            return torch.empty((0, x.dim()), dtype=torch.long, device=x.device)
        if name == "masked_select":
            return torch.empty((0,), dtype=x.dtype, device=x.device)
        if name == "index":
            indices = []
            for i in args[1]:
                if i is not None and i.dtype in (torch.bool, torch.uint8):
                    indices += [torch.zeros(0, dtype=torch.long, device=i.device)] * i.dim()
                else:
                    indices.append(i)
            return func(x, indices)
        raise Unpredictable(f"{func} has an output size that depends on the data ({file}:{line})")

    def _largest(self, func: Any, name: str, args: Any, file: str | None, line: int | None) -> Any:
        bound = LARGEST.get(str(func))
        if bound is not None:
            return bound(*args)
        x = args[0]
        if name == "nonzero":
            return torch.empty((x.numel(), x.dim()), dtype=torch.long, device=x.device)
        if name == "masked_select":
            return torch.empty((x.numel(),), dtype=x.dtype, device=x.device)
        if name == "index":
            indices = []
            for i in args[1]:
                if i is not None and i.dtype in (torch.bool, torch.uint8):
                    indices += [torch.zeros(i.numel(), dtype=torch.long, device=i.device)] * i.dim()
                else:
                    indices.append(i)
            return func(x, indices)
        raise Unpredictable(f"{func} has an output size that depends on the data ({file}:{line})")


# Metadata queries FakeTensorMode answers before anything else (`prim.device`, `aten.size`,
# `aten.stride`, `aten.storage_offset`): no storage, no value, nothing to follow.
_META_QUERIES: dict[Any, Callable[[Any], Any]] = dict(getattr(fake_tensor, "_DISPATCH_META_HANDLERS", {}))

# Ops that read a value back into Python (`.item()`, `bool(t)`, `torch.equal`).
_READS: set[Any] = {aten._local_scalar_dense.default, aten.item.default, aten.is_nonzero.default, aten.equal.default}


# Ops that may read a fake tensor back into a real CPU one.
_READ_BACK: set[Any] = {aten._to_copy, aten.to, aten.copy_}

# op -> the arguments it writes to, computed once from its schema.
_WRITTEN: dict[Any, list[tuple[int | None, str]]] = {}


def _written(func: Any) -> list[tuple[int | None, str]]:
    """(position or None, name) of the arguments an op writes to (in-place, out=), cached."""
    known = _WRITTEN.get(func)
    if known is None:
        known = []
        schema = getattr(func, "_schema", None)
        for i, arg in enumerate(getattr(schema, "arguments", ())):
            if arg.alias_info is not None and arg.alias_info.is_write:
                known.append((None if arg.kwarg_only else i, arg.name))
        _WRITTEN[func] = known
    return known


def _real(a: Any) -> bool:
    """A real tensor that must become fake to meet a fake one (not a wrapper subclass)."""
    return isinstance(a, torch.Tensor) and not isinstance(a, FakeTensor) and not is_traceable_wrapper_subclass(a)


def _no_fake_implementation(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(
        words in text
        for words in ("no fake impl", "fake impl registered", "no fake kernel", "does not have a fake", "could not run", "meta backend")
    )


def _placeholder_kind(dtype: Any) -> str:
    if dtype == torch.bool:
        return "bool"
    return "float" if dtype.is_floating_point or dtype.is_complex else "int"


def _placeholder_for(dtype: Any) -> bool | int | float:
    return PLACEHOLDER[_placeholder_kind(dtype)]


def _targets_cuda(flat: list[Any]) -> bool:
    """A device argument naming the target (`device="cuda"`, `.to("cuda")`, `.cuda()`)."""
    return any(isinstance(a, torch.device) and a.type == "cuda" for a in flat)


def _large_factory(func: Any, args: Any, kwargs: Any, flat: list[Any] | None = None) -> bool:
    """A CPU factory (`empty`, `zeros`, `randn`…: no tensor input) of more than LARGE_CPU bytes
    (`flat`: the arguments flattened, when the caller has them)."""
    if not args or any(isinstance(a, torch.Tensor) for a in (tree_flatten((args, kwargs))[0] if flat is None else flat)):
        return False
    size = kwargs.get("size")
    if size is None:
        size = next((a for a in args if isinstance(a, (list, tuple))), None)
    if not size or not all(isinstance(d, int) for d in size):
        return False
    dtype = kwargs.get("dtype") or (torch.int64 if "randint" in str(func) else torch.get_default_dtype())
    numel = 1
    for d in size:
        numel *= d
    return numel * getattr(dtype, "itemsize", 4) > LARGE_CPU


def _inner(t: Any) -> list[Any]:
    """The tensors a traceable wrapper subclass (DTensor) is made of."""
    names, _ = t.__tensor_flatten__()
    return [getattr(t, n) for n in names]


class _Local(threading.local):
    """Per-thread state, with class-level defaults: read on every op, an attribute missing from a
    plain `threading.local` costs an AttributeError."""

    suspended: int = 0
    modules: list[str] | None = None


# dtype -> its name in events ("float32"), made once.
_DTYPE_NAMES: dict[Any, str] = {}


def _dtype_name(dtype: Any) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


# op -> known_values.base_name(op), made once.
_BASE_NAMES: dict[Any, str] = {}


def _base_name(func: Any) -> str:
    name = _BASE_NAMES.get(func)
    if name is None:
        name = _BASE_NAMES[func] = known_values.base_name(func)
    return name


def _pytree_node(x: Any) -> bool:
    """Whether pytree flattens `x` (a list, tuple, dict, namedtuple or any registered node)."""
    return isinstance(x, (list, tuple, dict)) or type(x) in SUPPORTED_NODES


def _flatten(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any] | None:
    """`tree_flatten((args, kwargs))[0]` for an op's arguments (leaves, and plain lists or tuples
    of leaves), in the same order, without pytree's generic walk; None for anything nested
    deeper or of another node type (pytree then)."""
    flat: list[Any] = []
    for group in (args, kwargs.values()) if kwargs else (args,):
        for a in group:
            kind = type(a)
            if kind is list or kind is tuple:
                for x in a:
                    if _pytree_node(x):
                        return None
                flat.extend(a)
            elif _pytree_node(a):
                return None
            else:
                flat.append(a)
    return flat


def _flatten_out(out: Any) -> list[Any]:
    """`tree_flatten(out)[0]` for an op's result: one tensor, or a plain list or tuple of leaves."""
    kind = type(out)
    if kind is FakeTensor:
        return [out]
    if (kind is list or kind is tuple) and not any(_pytree_node(x) for x in out):
        return list(out)
    return tree_flatten(out)[0]

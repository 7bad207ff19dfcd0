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
makes the phase `unpredictable` (named with the op and the user's file and line), and what it
produces is tainted so that no later phase holding it is presented as predicted either.
"""

import collections
import contextlib
import os
import sys
import threading
import weakref

import torch
from torch._subclasses import fake_tensor
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten

aten = torch.ops.aten

# Ops that run cuBLAS (their first call on a thread creates that thread's cuBLAS workspaces).
BLAS_OPS = {
    "mm", "addmm", "bmm", "baddbmm", "addmv", "mv", "dot", "vdot", "addbmm", "_addmm_activation",
    "matmul", "linear", "_scaled_mm", "_int_mm",
}
# Output size depends on the data: an upper bound lets the run go on, the phase is unpredictable.
DATA_DEPENDENT = {"nonzero", "masked_select", "unique", "_unique", "_unique2", "unique_consecutive", "unique_dim"}
# A loop whose condition reads data (`while not done.all()`) gets this many placeholder answers.
LOOP_BUDGET = 100_000

_INTERNAL = ("/torch/", "/iteragpu/predict/", "/iteragpu/recorder.py", "/_pytest/", "<frozen")


class Unpredictable(RuntimeError):
    """An op the fake tensors cannot follow (no fake implementation, or data-dependent with no
    upper bound): the phase stops and is reported unpredictable."""


_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def user_frame():
    """(file, line) of the innermost frame outside torch and iteragpu's prediction code; a file of
    iteragpu's own workloads is named inside the package (it runs from a temporary folder)."""
    frame = sys._getframe(2)
    while frame is not None and any(part in frame.f_code.co_filename for part in _INTERNAL):
        frame = frame.f_back
    if frame is None:
        return None, None
    file = frame.f_code.co_filename
    if file.startswith(_PACKAGE + os.sep):
        file = os.path.relpath(file, _PACKAGE)
    return file, frame.f_lineno


class Tracker(TorchDispatchMode):
    """Sits above FakeTensorMode: sees every op first, then registers what it produced."""

    def __init__(self, emit, workspaces):
        super().__init__()
        self._emit = emit
        self._workspaces = workspaces  # [(bytes, what)] allocated on a thread's first BLAS call
        self.lock = threading.RLock()
        # id(storage) -> [event id (None while resized to 0), bytes, category, first event id]
        self.live = {}
        self.next_id = 0
        self.allocated = 0  # 512-byte-rounded live bytes: what the torch.cuda shim answers
        self.peak = 0
        self.reserved = 0
        self.tainted = set()  # event ids
        self.blas_threads = set()
        self.local = threading.local()
        self.placeholders = collections.Counter()
        self.loop_hits = collections.Counter()
        self.in_optimizer = 0

    # ---------------------------------------------------------------- what each storage is
    def module(self):
        if torch._C._current_graph_task_id() != -1:
            return "(backward)"
        stack = getattr(self.local, "modules", None)
        return stack[-1] if stack else None

    def push_module(self, name):
        stack = getattr(self.local, "modules", None)
        if stack is None:
            stack = self.local.modules = []
        stack.append(name)

    def pop_module(self):
        stack = getattr(self.local, "modules", None)
        if stack:
            stack.pop()

    def default_category(self):
        if torch._C._current_graph_task_id() != -1 or self.in_optimizer:
            return "temporary"
        if getattr(self.local, "modules", None):
            return "temporary"
        return "other"

    # ---------------------------------------------------------------- events
    @contextlib.contextmanager
    def suspended(self):
        """Storages made inside are not the workload's (DTensor's shape inference)."""
        depth = getattr(self.local, "suspended", 0)
        self.local.suspended = depth + 1
        try:
            yield
        finally:
            self.local.suspended = depth

    def resized(self, storage, nbytes):
        """`UntypedStorage.resize_` on a tracked storage (FSDP2's free and refill of unsharded
        parameters): a free, then a new block of the new size."""
        key = id(storage)
        with self.lock:
            known = self.live.get(key)
            if known is None or known[1] == nbytes:
                return
            category, origin = known[2], known[3]
            self._free(key)
            if nbytes == 0:
                # An empty storage stays known, so that its refill is seen as one.
                self.live[key] = [None, 0, category, origin]
                return
            ident = self.next_id
            self.next_id += 1
            self.live[key] = [ident, nbytes, category, origin]
            self.allocated += (nbytes + 511) // 512 * 512
            self.peak = max(self.peak, self.allocated)
            self._emit(
                "alloc",
                {
                    "id": ident,
                    "bytes": nbytes,
                    "category": category,
                    "module": self.module(),
                    "shape": [nbytes],
                    "dtype": "uint8",
                    "tainted": False,
                },
            )

    def _storage(self, t):
        if not isinstance(t, torch.Tensor) or t.device.type != "cuda" or is_traceable_wrapper_subclass(t):
            return None
        try:
            return t.untyped_storage()
        except Exception:  # a tensor subclass without storage
            return None

    def register(self, t, category=None, tainted=False):
        """Records the storage behind `t` if it is new (or resized); returns its event id. A
        wrapper subclass (a DTensor: the global shape around a rank's local shard) holds no
        memory of its own: its inner tensors are what the device holds."""
        if getattr(self.local, "suspended", 0):
            return None
        if is_traceable_wrapper_subclass(t):
            ids = [self.register(inner, category, tainted) for inner in _inner(t)]
            return next((i for i in ids if i is not None), None)
        st = self._storage(t)
        if st is None:
            return None
        key = id(st)
        nbytes = int(st.nbytes())
        with self.lock:
            known = self.live.get(key)
            if known is not None:
                if known[1] == nbytes:
                    if tainted:
                        self.tainted.add(known[0])
                    return known[0]
                self._free(key)  # resized in place: the allocator sees a new block
            ident = self.next_id
            self.next_id += 1
            category = category or self.default_category()
            self.live[key] = [ident, nbytes, category, ident]
            rounded = 0 if nbytes == 0 else (nbytes + 511) // 512 * 512
            self.allocated += rounded
            self.peak = max(self.peak, self.allocated)
            self.reserved = max(self.reserved, -(-self.allocated // (2 << 20)) * (2 << 20))
            if tainted:
                self.tainted.add(ident)
            self._emit(
                "alloc",
                {
                    "id": ident,
                    "bytes": nbytes,
                    "category": category,
                    "module": self.module(),
                    "shape": list(t.shape),
                    "dtype": str(t.dtype).replace("torch.", ""),
                    "tainted": tainted,
                },
            )
        weakref.finalize(st, self._finalized, key, ident)
        return ident

    def _finalized(self, key, origin):
        with self.lock:
            known = self.live.get(key)
            if known is not None and known[3] == origin:
                self._free(key)

    def _free(self, key):
        ident, nbytes, _, _ = self.live.pop(key)
        if ident is None:
            return
        self.allocated -= 0 if nbytes == 0 else (nbytes + 511) // 512 * 512
        self._emit("free", {"id": ident})

    def tag(self, t, category, only_from=None):
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
            if known[2] == category or (only_from is not None and known[2] not in only_from):
                return
            known[2] = category
            if known[0] is not None:
                self._emit("tag", {"id": known[0], "category": category})

    def workspace(self):
        """A thread's first BLAS call: its cuBLAS workspaces, held until the process ends."""
        thread = threading.get_ident()
        with self.lock:
            if thread in self.blas_threads:
                return
            self.blas_threads.add(thread)
            for nbytes, what in self._workspaces:
                ident = self.next_id
                self.next_id += 1
                self.allocated += nbytes
                self.peak = max(self.peak, self.allocated)
                self._emit(
                    "alloc",
                    {
                        "id": ident,
                        "bytes": nbytes,
                        "category": "workspace",
                        "module": f"{what} ({'autograd thread' if torch._C._current_graph_task_id() != -1 else 'main thread'})",
                        "shape": [nbytes],
                        "dtype": "uint8",
                        "tainted": False,
                    },
                )

    # ---------------------------------------------------------------- dispatch
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "_opname", None) or str(func)
        if func is aten._local_scalar_dense.default:
            return self._scalar(func, args, kwargs)
        if name in BLAS_OPS:
            self.workspace()
        inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        tainted = bool(self.tainted) and any(self._is_tainted(a) for a in inputs)
        try:
            out = func(*args, **kwargs)
        except fake_tensor.DynamicOutputShapeException:
            out = self._upper_bound(func, name, args, kwargs)
            tainted = True
        except fake_tensor.UnsupportedOperatorException as exc:
            file, line = user_frame()
            self._emit("unpredictable", {"op": str(func), "file": file, "line": line, "reason": "no fake implementation (a custom or unsupported operator)"})
            raise Unpredictable(f"{func} has no fake implementation ({file}:{line})") from exc
        except fake_tensor.DataDependentOutputException as exc:
            file, line = user_frame()
            self._emit("unpredictable", {"op": str(func), "file": file, "line": line, "reason": "its result depends on the data"})
            raise Unpredictable(f"{func} depends on the data ({file}:{line})") from exc
        for o in tree_flatten(out)[0]:
            # A scalar made from a data-dependent tensor (its sum, its max) has a known size.
            self.register(o, tainted=tainted and isinstance(o, torch.Tensor) and o.dim() > 0)
        # A collective's buffers (FSDP2's all-gather output, its reduce-scatter input).
        if "allgather" in name or "all_gather" in name:
            self._tag_all(args[:1], "communication")
        elif "reduce_scatter" in name:
            self._tag_all(args[1:2], "communication")
        return out

    def _tag_all(self, values, category):
        for t in tree_flatten(values)[0]:
            if isinstance(t, torch.Tensor):
                self.tag(t, category, only_from={"temporary", "other"})

    def _is_tainted(self, t):
        st = self._storage(t)
        if st is None:
            return False
        known = self.live.get(id(st))
        return known is not None and known[0] in self.tainted

    def _scalar(self, func, args, kwargs):
        """`.item()`, `bool(t)`, `float(t)`: the real value when fake tensors know it (a constant),
        else a placeholder, counted per call site (bools answer False, so loops run to their bound)."""
        try:
            return func(*args, **kwargs)
        except fake_tensor.DataDependentOutputException:
            pass
        t = args[0]
        file, line = user_frame()
        site = (file, line)
        self.placeholders[site] += 1
        if self.placeholders[site] == 1:
            self._emit("placeholder", {"op": "item", "file": file, "line": line, "dtype": str(t.dtype).replace("torch.", "")})
        if t.dtype == torch.bool:
            self.loop_hits[site] += 1
            if self.loop_hits[site] > LOOP_BUDGET:
                self._emit("unpredictable", {"op": "a loop on data", "file": file, "line": line, "reason": f"a condition read {LOOP_BUDGET} times from data that fake tensors do not have"})
                raise Unpredictable(f"a loop condition at {file}:{line} depends on the data")
            return False
        return 0.0 if t.dtype.is_floating_point else 0

    def _upper_bound(self, func, name, args, kwargs):
        """A data-dependent output size: marked unpredictable, then the largest possible output
        so that the run can go on (tainted: never counted as predicted)."""
        file, line = user_frame()
        self._emit("unpredictable", {"op": str(func), "file": file, "line": line, "reason": "its output size depends on the data"})
        x = args[0]
        if name == "nonzero":
            return torch.empty((x.numel(), x.dim()), dtype=torch.long, device=x.device)
        if name == "masked_select":
            return torch.empty((x.numel(),), dtype=x.dtype, device=x.device)
        if name == "index":
            indices = []
            for i in args[1]:
                if i is not None and i.dtype == torch.bool:
                    indices += [torch.zeros(i.numel(), dtype=torch.long, device=i.device)] * i.dim()
                else:
                    indices.append(i)
            return func(x, indices)
        raise Unpredictable(f"{func} has an output size that depends on the data ({file}:{line})")


def _inner(t):
    """The tensors a traceable wrapper subclass (DTensor) is made of."""
    names, _ = t.__tensor_flatten__()
    return [getattr(t, n) for n in names]

"""The everyday idioms of scripts, made to work on data-less CUDA tensors, each said once in the
prediction's notes when it changes what runs:

* threads (a thread pool loading a checkpoint, `device_map="cuda"`) see the same fake CUDA world;
* `os.fork()` (DataLoader workers): the child runs the real CPU code; its events are dropped by
  the channel (`channel.py`), which says so once;
* `torch.save` writes a real, small file (fake tensors as references), which `torch.load` in the
  same run gives back as the same fake tensors;
* `torch.load(map_location="cuda")`, safetensors' `load_file(device="cuda")` and `safe_open(...,
  device="cuda")`: loaded on the CPU (memory-mapped where possible), then moved, so each tensor
  is counted at its true bytes on the target;
* CUDA events time nothing: `elapsed_time` answers a stated placeholder (1.0 ms);
* `torch.Generator(device="cuda")` is a CPU generator that says it is on cuda;
* `torch.compile` and `Module.compile` run eager, and say so (Inductor's memory planning is not
  traced); Triton kernels are not launched (their outputs are allocated by the caller, so the phase
  is still predicted), and said;
* `format(t, ".4f")`, `.numpy()` and `.tolist()` of fake tensors read values (see tracker.py);
* Hub kernels (the `kernels` package, transformers' default `use_kernels`) are never fetched or
  run: each layer runs its own eager forward (hub_kernels.py).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import struct
import sys
import threading
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, Callable, Sequence

from .. import names
from . import launchers
from .hub_files import HubFiles
from .hub_kernels import HubKernels

# What CUDA events answer for a duration that was never timed.
ELAPSED_MS: float = 1.0


class Idioms:
    """The everyday idioms above, installed once per prediction; each says itself once in `notes`."""

    def __init__(self, torch: Any, tracker: Any, notes: list[str]) -> None:
        self.torch = torch
        self.tracker = tracker
        self.notes = notes
        self.saved: dict[str, Any] = {}  # token -> the known values of a tensor torch.save wrote as a reference (or None)
        # Safetensors files this run wrote with data-less tensors: (st_dev, st_ino) ->
        # (size, mtime_ns, {name: (shape, dtype, known values or None)}, metadata).
        self.written: dict[tuple[int, int], tuple[int, int, dict[str, Any], Any]] = {}
        self._written_file: Callable[[Any], Any] = lambda filename: None
        # Weight files the Hub client hole-filled in the overlay (hub_files.py): (st_dev, st_ino)
        # -> path; read back data-less, as the files this run wrote.
        self.holes: dict[tuple[int, int], str] = {}
        self.hub_kernels = HubKernels(self.note)
        self.hub_files = HubFiles(tracker.memory.ask, self.note, self.hole_filled)

    def hole_filled(self, path: str) -> None:
        """`path` is a weight file the Hub client materialised from its header: its tensors are
        read back data-less."""
        st = os.stat(path)
        self.holes[(st.st_dev, st.st_ino)] = path

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def install(self) -> None:
        self.tracker.note = self.note
        self._threads()
        self._events()
        self._generator()
        self._formatting()
        self._compile()
        self._files()
        # On the package's import, before anything binds `from safetensors import safe_open`
        # (transformers' modeling_utils does, before it imports safetensors.torch).
        after_import("safetensors", lambda package: self._safetensors(importlib.import_module("safetensors.torch")))
        self.hub_files.install(after_import)
        after_import("triton.runtime.jit", self._triton)
        after_import("triton.runtime.autotuner", self._triton)
        after_import("kernels", self.hub_kernels.install)
        after_import("transformers.integrations.hub_kernels", self.hub_kernels.install_transformers)
        after_import("accelerate.commands.launch", lambda module: launchers.install_accelerate(module, self.note))
        for name in ("transformers.pytorch_utils", "accelerate.utils.modeling", "peft.utils.other", "safetensors.torch"):
            after_import(name, self._transformers_storage)

    # ------------------------------------------------------------ threads and processes
    def _threads(self) -> None:
        """Dispatch modes are per thread: a thread the workload starts enters the tracker too."""
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode, _push_mode

        tracker = self.tracker
        original_run = threading.Thread.run

        def run(thread: threading.Thread) -> None:
            pushed = tracker not in _get_current_dispatch_mode_stack()
            if pushed:
                _push_mode(tracker)
            try:
                return original_run(thread)
            finally:
                if pushed:
                    _pop_mode()

        threading.Thread.run = run  # type: ignore[method-assign, assignment]  # every thread enters the tracker

    # ------------------------------------------------------------ CUDA objects
    def _events(self) -> None:
        from . import cuda_api

        note = self.note

        def elapsed_time(event: Any, other: Any) -> float:
            note(f"torch.cuda.Event.elapsed_time answers {ELAPSED_MS} ms: nothing runs on a GPU in a prediction")
            return ELAPSED_MS

        cuda_api._Event.elapsed_time = elapsed_time  # type: ignore[method-assign, assignment]  # says itself once
        if hasattr(self.torch, "Event"):
            self.torch.Event = cuda_api._Event

    def _generator(self) -> None:
        torch = self.torch
        original: Any = torch.Generator
        note = self.note

        class Generator(original):
            """`torch.Generator(device="cuda")`: a CPU generator (the fake kernels draw no numbers)."""

            def __new__(cls, device: Any = "cpu") -> Any:
                if torch.device(device).type == "cuda":
                    note("torch.Generator(device='cuda') is a CPU generator in a prediction (fake kernels draw no numbers)")
                    return original("cpu")
                return original(device)

        torch.Generator = Generator

    def _formatting(self) -> None:
        """`f"{loss:.4f}"` formats the value (known, or the placeholder), as a CUDA tensor does."""
        torch = self.torch
        from torch._subclasses.fake_tensor import FakeTensor

        def format_(t: Any, spec: str) -> str:
            if t.dim() == 0:
                return t.item().__format__(spec)
            return object.__format__(t, spec) if spec else repr(t)

        FakeTensor.__format__ = format_
        original_numpy = torch.Tensor.numpy
        tracker = self.tracker

        def numpy(t: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(t, FakeTensor):
                if t.device.type != "cpu":
                    raise TypeError(
                        f"can't convert {t.device.type} device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first."
                    )
                import numpy as np

                value = tracker._host_value(t)
                if value is not None:
                    return value.numpy()
                # A large data-less CPU tensor: a read-only placeholder array, no memory taken.
                from .tracker import _placeholder_for

                return np.broadcast_to(np.asarray(_placeholder_for(t.dtype), dtype=_numpy_dtype(t.dtype)), tuple(t.shape))
            return original_numpy(t, *args, **kwargs)

        torch.Tensor.numpy = numpy
        original_tolist = torch.Tensor.tolist

        def tolist(t: Any) -> Any:
            if isinstance(t, FakeTensor):
                value = tracker._host_value(t)
                if value is None:
                    raise RuntimeError(
                        f"iteragpu predict: .tolist() of a data-less tensor of {t.numel()} elements (too large to answer with placeholders)"
                    )
                return value.tolist()
            return original_tolist(t)

        torch.Tensor.tolist = tolist
        original_tensor = torch.tensor

        def scalars(data: Any) -> Any:
            if isinstance(data, FakeTensor):
                return tolist(data)
            if isinstance(data, (list, tuple)) and any(isinstance(d, (FakeTensor, list, tuple)) for d in data):
                return [scalars(d) for d in data]
            return data

        def tensor(data: Any, *args: Any, **kwargs: Any) -> Any:
            # `torch.tensor([t0, t1], device=…)` over data-less tensors (Qwen2-VL's rope deltas)
            # reads each one below the dispatch modes, where a fake CUDA tensor needs a driver:
            # their values (known, or the placeholder) are read first, as a CUDA tensor's are.
            if isinstance(data, (list, tuple, FakeTensor)):
                data = scalars(data)
            return original_tensor(data, *args, **kwargs)

        torch.tensor = tensor

    def _compile(self) -> None:
        torch = self.torch
        note = self.note

        def compile(model: Any = None, **kwargs: Any) -> Any:
            note("torch.compile: predicted as eager (Inductor's memory planning and CUDA graphs are not traced; a compiled run usually holds fewer activations)")
            if model is None:
                return lambda m: m
            return model

        torch.compile = compile

        def module_compile(module: Any, *args: Any, **kwargs: Any) -> None:
            note("Module.compile(): predicted as eager (Inductor's memory planning is not traced)")

        torch.nn.Module.compile = module_compile

    def _triton(self, module: Any) -> None:
        note = self.note
        for name in ("JITFunction", "Autotuner", "Heuristics"):
            cls = getattr(module, name, None)
            if cls is None or getattr(cls, "_iteragpu_patched", False):
                continue

            def run(self_: Any, *args: Any, **kwargs: Any) -> None:
                fn = getattr(self_, "fn", self_)
                what = getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None), "__name__", "a kernel")
                note(f"Triton kernel {what} not launched: its outputs are allocated by the caller (counted), its own scratch memory is not")
                return None

            cls.run = run
            cls._iteragpu_patched = True

    def _transformers_storage(self, module: Any) -> None:
        """transformers, accelerate, peft and safetensors find tensors that share memory by their
        data pointer, 0 for every fake tensor: the storage's identity is used instead (save_pretrained,
        save_state and save_model otherwise see every weight as shared, and write one)."""
        from torch._subclasses.fake_tensor import FakeTensor

        for name in ("id_tensor_storage", "_find_shared_tensors"):
            original = getattr(module, name, None)
            if original is None or getattr(original, "_iteragpu", False):
                continue
            identity: Any
            if name == "id_tensor_storage":

                def identity(tensor: Any, _original: Any = original) -> Any:
                    if isinstance(tensor, FakeTensor):
                        st = tensor.untyped_storage()
                        return tensor.device, id(st), st.nbytes()
                    return _original(tensor)

            else:

                def identity(state_dict: dict[str, Any], _original: Any = original) -> Any:
                    # safetensors' groups of names sharing a storage, data-less ones by identity.
                    fake = {k: v for k, v in state_dict.items() if isinstance(v, FakeTensor)}
                    groups = _original({k: v for k, v in state_dict.items() if k not in fake})
                    shared: dict[Any, set[str]] = {}
                    for k, v in fake.items():
                        st = v.untyped_storage()
                        if v.device.type != "meta" and st.nbytes():
                            shared.setdefault((v.device, id(st)), set()).add(k)
                    return groups + list(shared.values())

            identity._iteragpu = True  # marks the wrapper: installed once
            # Every module that bound the original by name (`from ... import id_tensor_storage`).
            for other in list(sys.modules.values()):
                namespace = getattr(other, "__dict__", None)
                if isinstance(namespace, dict):
                    for key, value in list(namespace.items()):
                        if value is original:
                            namespace[key] = identity

    # ------------------------------------------------------------ files
    def _files(self) -> None:
        torch = self.torch
        from torch._subclasses.fake_tensor import FakeTensor

        saved = self.saved
        note = self.note
        tracker = self.tracker
        original_save = torch.save
        original_load = torch.load
        import pickle

        class ReferencePickler(pickle.Pickler):
            """Fake tensors pickled as references: a real, small file."""

            def reducer_override(self, obj: Any) -> Any:
                if isinstance(obj, FakeTensor):
                    token = f"{id(obj):x}-{len(saved)}"
                    # Its values when known, never the tensor itself: a file does not keep a
                    # tensor alive on the GPU.
                    saved[token] = tracker.values.known(obj)
                    return _restore, (token, list(obj.shape), str(obj.dtype).replace("torch.", ""), str(obj.device), bool(obj.requires_grad))
                return NotImplemented

        class pickle_module:
            Pickler = ReferencePickler
            Unpickler = pickle.Unpickler
            HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL
            load = staticmethod(pickle.load)
            dump = staticmethod(pickle.dump)
            __name__ = "pickle"

        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            note("torch.save writes a real file in which data-less tensors are references: a torch.load in the same run gives them back (their data are not written)")
            kwargs.pop("pickle_module", None)
            kwargs["_use_new_zipfile_serialization"] = True
            if args:
                args = args[1:]  # pickle_module given positionally
            return original_save(obj, f, *args, pickle_module=pickle_module, **kwargs)

        def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
            _RESTORE["saved"] = saved
            _RESTORE["tracker"] = tracker
            target = _cuda_target(torch, map_location)
            if target is None:
                _RESTORE["device"] = _plain_device(torch, map_location)
                try:
                    with torch.serialization.safe_globals([_restore]):
                        return original_load(f, map_location, *args, **kwargs)
                finally:
                    _RESTORE["device"] = None
            note(f"torch.load(map_location={map_location!r}): loaded on the CPU (memory-mapped where the file allows), then moved to {target}: each tensor counted at its true bytes")
            with torch.serialization.safe_globals([_restore]):
                try:
                    obj = original_load(f, "cpu", *args, mmap=True, **{k: v for k, v in kwargs.items() if k != "mmap"})
                except (RuntimeError, ValueError):
                    if hasattr(f, "seek"):
                        f.seek(0)
                    obj = original_load(f, "cpu", *args, **kwargs)
            return _move(torch, obj, target)

        torch.save = save
        torch.load = load
        _RESTORE["saved"] = saved
        _RESTORE["tracker"] = tracker

    def _safetensors(self, module: Any) -> None:
        """`load_file(device="cuda")` and `safe_open(..., device="cuda")`: read on the CPU, moved."""
        torch = self.torch
        note = self.note
        import safetensors

        original_open: Any = getattr(safetensors, "safe_open", None)
        if original_open is None or getattr(original_open, "_iteragpu", False):
            return
        idioms = self

        class safe_open:
            _iteragpu = True

            def __new__(cls, filename: Any, framework: str = "pt", device: Any = "cpu", **kwargs: Any) -> Any:
                entry = idioms._written_file(filename) if framework in ("pt", "torch") else None
                if entry is not None:
                    return _WrittenReader(torch, idioms.tracker, filename, entry, device, original_open, kwargs)
                return super().__new__(cls)

            def __init__(self, filename: Any, framework: str = "pt", device: Any = "cpu", **kwargs: Any) -> None:
                self._device = device
                moved = framework in ("pt", "torch") and str(device) != "cpu" and torch.device(device if not isinstance(device, int) else f"cuda:{device}").type == "cuda"
                if moved:
                    note("safetensors opened with device='cuda': read on the CPU, then moved: each tensor counted at its true bytes")
                self._moved = moved
                self._inner = original_open(filename, framework=framework, device="cpu" if moved else device, **kwargs)

            def __enter__(self) -> safe_open:
                self._inner.__enter__()
                return self

            def __exit__(self, *exc: object) -> Any:
                return self._inner.__exit__(*exc)

            def get_tensor(self, name: str) -> Any:
                t = self._inner.get_tensor(name)
                return t.to(self._device) if self._moved else t

            def get_tensors(self, *args: Any, **kwargs: Any) -> Any:
                tensors = self._inner.get_tensors(*args, **kwargs)
                if not self._moved:
                    return tensors
                return {k: t.to(self._device) for k, t in tensors.items()}

            def get_slice(self, name: str) -> Any:
                return self._inner.get_slice(name)

            def __getattr__(self, name: str) -> Any:
                return getattr(self._inner, name)

        # Every module that bound the reader by name before now reads through this one.
        for bound in list(sys.modules.values()):
            names = getattr(bound, "__dict__", None)
            if isinstance(names, dict) and names.get("safe_open") is original_open:
                names["safe_open"] = safe_open
        safetensors.safe_open = safe_open
        module.safe_open = safe_open
        original_save_file: Any = getattr(module, "save_file", None)
        from torch._subclasses.fake_tensor import FakeTensor

        tracker = self.tracker
        written = self.written
        names = {dtype: name for name, dtype in getattr(module, "_TYPES", {}).items()}

        def save_file(tensors: dict[str, Any], filename: Any, metadata: Any = None, *args: Any, **kwargs: Any) -> Any:
            if not any(isinstance(t, FakeTensor) for t in tensors.values()):
                return original_save_file(tensors, filename, metadata, *args, **kwargs)
            note("safetensors.torch.save_file of data-less tensors writes a file of their true size whose data are holes (a sparse file): a load of it in the same run gives them back data-less, with their shapes and dtypes")
            refs = _write_sparse_safetensors(torch, tensors, filename, metadata, names, tracker)
            st = os.stat(filename)
            written[(st.st_dev, st.st_ino)] = (st.st_size, st.st_mtime_ns, refs, metadata)

        if original_save_file is not None:
            module.save_file = save_file

        types: dict[str, Any] = dict(getattr(module, "_TYPES", {}))
        holes = self.holes

        def written_file(filename: Any) -> Any:
            try:
                st = os.stat(filename)
            except (OSError, TypeError, ValueError):
                return None
            key = (st.st_dev, st.st_ino)
            if key in holes and key not in written:
                written[key] = (st.st_size, st.st_mtime_ns, *_hole_filled_refs(holes[key], types))
            entry = written.get(key)
            if entry is None or entry[:2] != (st.st_size, st.st_mtime_ns):
                return None  # not written by this run, or rewritten since
            return entry

        self._written_file = written_file


# ---------------------------------------------------------------- helpers
# What `_restore` needs while torch.load runs: the saved tensors, the tracker, the target device.
_RESTORE: dict[str, Any] = {}


def _restore(token: str, shape: list[int], dtype: str, device: str, requires_grad: bool) -> Any:
    """A tensor that torch.save wrote as a reference, loaded: a new data-less tensor of the same
    shape, as a GPU load allocates new memory for it (on the device map_location names, else the
    one it was saved from); values known for the saved tensor are carried over."""
    import torch

    target = _RESTORE.get("device") or device
    known = (_RESTORE.get("saved") or {}).get(token)
    # The dtype's name comes from a file: only a name that is one of torch's dtypes is taken.
    found = names.dtypes(torch).get(dtype) if isinstance(dtype, str) else None  # allowlisted
    if found is None:
        raise ValueError(f"{dtype!r} in a checkpoint's tensor reference is not a torch dtype")
    t = data_less(_RESTORE.get("tracker"), shape, found, target, known)
    return t.requires_grad_(requires_grad) if t.is_floating_point() and requires_grad else t


def data_less(tracker: Any, shape: Any, dtype: Any, device: Any, known: Any = None) -> Any:
    """A tensor read back from a file this run wrote: on a CUDA device, a new data-less tensor (a
    GPU load allocates: counted), its values set when they were known at the save; on the CPU, the
    known values themselves, else a data-less CPU tensor (no memory, never zeros taken as values)."""
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    device = torch.device(device)
    if device.type == "cpu":
        if known is not None:
            return known.clone().reshape(shape)
        with tracker.fake_lock, _disable_current_modes(), tracker.fake_mode:
            return torch.empty(shape, dtype=dtype, device="cpu")
    t = torch.empty(shape, dtype=dtype, device=device)
    if known is not None:
        tracker.values.set(t, known.reshape(shape))
    return t


def _plain_device(torch: Any, map_location: Any) -> Any:
    """The device a str or torch.device map_location names; for a function (`lambda storage, loc:
    storage`), where it sends an empty CPU storage saved from cuda:0 (cuda when it asks the
    driver); else None (each tensor back on the device it was saved from)."""
    if isinstance(map_location, (str, torch.device)):
        return torch.device(map_location)
    if callable(map_location):
        try:
            moved = map_location(torch.UntypedStorage(0), "cuda:0")
        except Exception:  # a function that moves the storage to cuda asks the driver: cuda
            return torch.device("cuda", 0)
        return torch.device(moved.device) if hasattr(moved, "device") else None
    return None


def _cuda_target(torch: Any, map_location: Any) -> Any:
    """The CUDA device a map_location sends storages to, or None."""
    if map_location is None:
        return None
    if isinstance(map_location, dict):
        targets = [v for v in map_location.values() if "cuda" in str(v)]
        return torch.device(targets[0]) if targets else None
    if isinstance(map_location, (str, torch.device)):
        device = torch.device(map_location)
        return device if device.type == "cuda" else None
    return None


def _move(torch: Any, obj: Any, device: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, torch.nn.Module):
        return obj.to(device)
    if isinstance(obj, dict):
        moved: Any = type(obj)() if type(obj) is not dict else {}
        try:
            for k, v in obj.items():
                moved[k] = _move(torch, v, device)
            return moved
        except TypeError:
            return {k: _move(torch, v, device) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_move(torch, v, device) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_move(torch, v, device) for v in obj)
    return obj


def _numpy_dtype(dtype: Any) -> Any:
    import numpy as np
    import torch

    return {torch.bool: np.bool_, torch.bfloat16: np.float32}.get(dtype) or torch.empty((), dtype=dtype).numpy().dtype


def _hole_filled_refs(path: str, types: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """A hole-filled weight file's tensors (name -> (shape, dtype, None): data-less) and
    metadata, from its header."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    metadata = header.pop("__metadata__", None)
    refs: dict[str, Any] = {}
    for name, info in header.items():
        dtype = types.get(str(info.get("dtype")))
        if dtype is None:
            raise ValueError(f"{path}: tensor {name} has dtype {info.get('dtype')!r}, which this safetensors cannot read")
        refs[name] = (tuple(int(d) for d in info.get("shape", [])), dtype, None)
    return refs, metadata


def _write_sparse_safetensors(torch: Any, tensors: dict[str, Any], filename: Any, metadata: Any, names: dict[Any, str], tracker: Any) -> dict[str, Any]:
    """A safetensors file (the format's header, then each tensor's bytes at its offsets) in which
    real tensors are written and data-less ones are holes; returns what a read gives back for the
    data-less ones: name -> (shape, dtype, known values or None)."""
    from torch._subclasses.fake_tensor import FakeTensor

    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    refs: dict[str, Any] = {}
    chunks: list[tuple[int, bytes]] = []
    offset = 0
    for name, t in sorted(tensors.items(), key=lambda kv: (-kv[1].dtype.itemsize, kv[0])):
        nbytes = t.numel() * t.element_size()
        if t.dtype not in names:
            raise ValueError(f"safetensors cannot write dtype {t.dtype} ({name})")
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + nbytes]}
        if isinstance(t, FakeTensor):
            refs[name] = (tuple(t.shape), t.dtype, tracker.values.known(t))
        elif nbytes:
            chunks.append((offset, t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()))
        offset += nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    start = 8 + len(encoded)
    with open(filename, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded)
        for at, data in chunks:
            f.seek(start + at)
            f.write(data)
        f.truncate(start + offset)
    return refs


class _WrittenSlice:
    """`safe_open(...).get_slice(name)` of a data-less tensor: its shape and dtype; indexing makes
    the tensor (data-less) and indexes it."""

    def __init__(self, reader: _WrittenReader, name: str) -> None:
        self._reader = reader
        self._name = name

    def get_shape(self) -> list[int]:
        return list(self._reader._refs[self._name][0])

    def get_dtype(self) -> str:
        return self._reader._dtype_name(self._name)

    def __getitem__(self, index: Any) -> Any:
        return self._reader.get_tensor(self._name)[index]


class _WrittenReader:
    """`safe_open` of a file this run wrote: the data-less tensors come back data-less (on the
    device asked: a load to cuda allocates), the real ones are read from the file."""

    def __init__(self, torch: Any, tracker: Any, filename: Any, entry: Any, device: Any, original_open: Any, kwargs: dict[str, Any]) -> None:
        self._torch = torch
        self._tracker = tracker
        self._refs: dict[str, Any] = entry[2]
        self._metadata = entry[3]
        self._device = f"cuda:{device}" if isinstance(device, int) else str(device)
        self._inner = original_open(filename, framework="pt", device="cpu", **kwargs)

    def __enter__(self) -> _WrittenReader:
        self._inner.__enter__()
        return self

    def __exit__(self, *exc: object) -> Any:
        return self._inner.__exit__(*exc)

    def keys(self) -> list[str]:
        return list(self._inner.keys())

    def offset_keys(self) -> list[str]:
        inner = getattr(self._inner, "offset_keys", None)
        return list(inner()) if inner is not None else self.keys()

    def metadata(self) -> Any:
        return self._inner.metadata()

    def _dtype_name(self, name: str) -> str:
        return str(self._inner.get_slice(name).get_dtype())

    def get_tensor(self, name: str) -> Any:
        ref = self._refs.get(name)
        if ref is None:
            t = self._inner.get_tensor(name)
            return t if self._device == "cpu" else t.to(self._device)
        shape, dtype, known = ref
        return data_less(self._tracker, shape, dtype, self._device, known)

    def get_tensors(self) -> dict[str, Any]:
        return {name: self.get_tensor(name) for name in self.offset_keys()}

    def get_slice(self, name: str) -> Any:
        if name not in self._refs:
            return self._inner.get_slice(name)
        return _WrittenSlice(self, name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


# ---------------------------------------------------------------- post-import hooks
# Hooks waiting for a module's import: module name -> hook(module), in order.
_HOOKS: dict[str, list[Callable[[ModuleType], None]]] = {}


class _Finder(importlib.abc.MetaPathFinder):
    """Calls the hooks of a module right after it is executed (a library imported by the user's
    script after the prediction began)."""

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in _HOOKS:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader: Any = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            for hook in _HOOKS.get(name, ()):
                hook(module)

        loader.exec_module = exec_module
        return spec


_FINDER: _Finder | None = None


def after_import(name: str, hook: Callable[[ModuleType], None]) -> None:
    """Runs `hook(module)` now if `name` is imported, else right after its import."""
    global _FINDER
    module = sys.modules.get(name)
    if module is not None:
        hook(module)
        return
    _HOOKS.setdefault(name, []).append(hook)
    if _FINDER is None:
        finder = _FINDER = _Finder()
        sys.meta_path.insert(0, finder)

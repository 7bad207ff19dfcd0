"""FakeTensorMode's answers, reused without entering it: the same outputs, made the same way.

A training loop runs the same ops on tensors of the same shapes thousands of times. FakeTensorMode
already caches what an op gives for its inputs' metadata (its dispatch cache, `FakeTensorMode.cache`,
enabled and hit under the tracker), but every call still pays for entering the mode, for its cache
key (`extract_tensor_metadata` and a generic walk of the arguments) and for its generic
`FakeTensor(...)` constructor: most of an op's time.

`Memo` keys each call on what FakeTensorMode's key is made of, read directly (each tensor's dtype,
sizes, strides, storage offset and size, device, requires_grad, inference, conjugate, negative and
quantized bits, constant and owner; each other argument's type and value; the argument structure;
the default dtype and device and inference mode), so that two calls with equal memo keys have
equal FakeTensorMode keys. The first call of a key runs through FakeTensorMode as before; its cache
entry (or its refusal to cache) is then looked up with FakeTensorMode's own key, computed before
the op ran, and kept under the memo key. Later calls with that key make their outputs from that
entry as FakeTensorMode's `_get_output_tensor_from_cache_entry` does (a new meta tensor of the
cached sizes and strides, or the input's storage set under a view, or the input itself for an
in-place op), wrapped as `FakeTensor.__new__` wraps it (the same subclass call, the same attributes,
copied from one it made). An output with a conjugate or negative bit goes through FakeTensorMode's
own function. A custom op (bitsandbytes' kernels), which FakeTensorMode never caches, is memoised
when its schema and what its fake kernel made show fresh outputs or none (`_custom_entry`). What
else FakeTensorMode would not cache (data-dependent ops, in-place views, symbolic shapes, another
mode's tensors, sparse layouts) is never memoised.

`ITERAGPU_PREDICT_MEMO=0` turns it off; `ITERAGPU_PREDICT_MEMO=check` keeps it on and checks every
reuse against FakeTensorMode itself (its key computed afresh equals the one the entry was found
under; the output made equals the one its `_output_from_cache_entry` makes: type, sizes, strides,
offset, dtype, device, bits, storage shared or not, attributes, dispatch keys), raising at the
first difference. The prediction is the same to the byte either way (the test
`predict_memo_changes_nothing`).
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import torch
from torch._subclasses import fake_tensor
from torch._subclasses.fake_tensor import FakeTensor

# Set to "0" to run every op through FakeTensorMode (the reference the memo is held equal to).
ENV: str = "ITERAGPU_PREDICT_MEMO"

_PROXY: Any = torch._C._TorchDispatchModeKey.PROXY
# Plain values an aten schema takes (hashable, compared by value; the type is part of the key
# since 1, 1.0 and True are equal).
_PLAIN: frozenset[type] = frozenset({int, float, bool, str, complex, type(None), torch.dtype, torch.layout, torch.memory_format})
_BYPASS: Any = object()
# Keys kept at most (each a few hundred bytes): a loop whose shapes never repeat starts afresh.
LIMIT: int = 100_000


class _Refused(Exception):
    """An argument the memo does not key on: the call goes through FakeTensorMode."""


def available() -> str | None:
    """None when this torch's FakeTensorMode has what the memo uses, else why not."""
    mode: Any = getattr(fake_tensor, "FakeTensorMode", None)
    for name in ("_cache_key", "_output_from_cache_entry", "_get_output_tensor_from_cache_entry", "_validate_cache_key", "_validate_output_for_cache_entry", "_get_output_info_for_cache_entry"):
        if not callable(getattr(mode, name, None)):
            return f"FakeTensorMode.{name} is missing"
    if not all(hasattr(fake_tensor, n) for n in ("_CacheKeyState", "_DispatchCacheValidEntry", "_DispatchCacheBypassEntry")):
        return "FakeTensorMode's cache entries are not this torch's"
    params = list(inspect.signature(mode._output_from_cache_entry).parameters)
    if params != ["self", "state", "entry", "key", "args"]:
        return f"FakeTensorMode._output_from_cache_entry takes {params}"
    params = list(inspect.signature(mode._get_output_tensor_from_cache_entry).parameters)
    if params != ["self", "state", "entry", "key", "args"]:
        return f"FakeTensorMode._get_output_tensor_from_cache_entry takes {params}"
    params = list(inspect.signature(mode._cache_key).parameters)
    if params != ["self", "state", "func", "args", "kwargs"]:
        return f"FakeTensorMode._cache_key takes {params}"
    return None


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0" and available() is None


def checking() -> bool:
    return os.environ.get(ENV) == "check"


class _Made:
    """How one output of a cache entry is made: `kind` is "inplace" (the argument at `index`),
    "constant" (`value`), "new" or "view" (of the argument at `index`), or "theirs" (through
    FakeTensorMode's own function)."""

    __slots__ = ("kind", "index", "value", "size", "stride", "offset", "dtype", "requires_grad", "device")

    def __init__(self, info: Any) -> None:
        self.kind = "theirs"
        self.index: Any = None
        self.value: Any = None
        md = info.metadata
        if info.inplace_idx is not None:
            self.kind, self.index = "inplace", info.inplace_idx
        elif md is None and info.view_idx is None:
            self.kind, self.value = "constant", info.constant_value
        elif md is not None and md.layout is torch.strided and not md.is_conj and not md.is_neg and isinstance(md.device, torch.device) and (md.device.index is not None or md.device.type in ("cpu", "meta")) and all(type(v) is int for v in (*md.shape, *md.stride, md.storage_offset)):
            self.kind = "new" if info.view_idx is None else "view"
            self.index = info.view_idx
            self.size, self.stride, self.offset = tuple(md.shape), tuple(md.stride), md.storage_offset
            self.dtype, self.requires_grad, self.device = md.dtype, md.requires_grad, md.device


class _Entry:
    """FakeTensorMode's cache entry and how its outputs are made."""

    __slots__ = ("entry", "made", "tuple", "list", "blind", "theirs", "composite", "custom")

    def __init__(self, entry: Any, theirs: Any, as_list: bool = False, blind: bool = False) -> None:
        self.entry = entry
        self.made = [_Made(info) for info in entry.output_infos] if entry is not None else []
        self.tuple = entry.is_output_tuple if entry is not None else False
        self.list = as_list  # returned as a list (the op's own type)
        self.blind = blind  # returns None whatever its floats' values
        self.theirs = theirs  # FakeTensorMode's key (kept for the check)
        self.composite = False  # made from a composite view's own output (`Memo._composite`)
        self.custom = False  # a custom op's outputs, read from what its fake kernel made (`_custom_entry`)


class Memo:
    """Memo key -> FakeTensorMode's cache entry for that call and how its outputs are made (or `_BYPASS`)."""

    def __init__(self, mode: Any, check: bool = False) -> None:
        self.mode = mode
        self.check = check
        self.entries: dict[tuple[Any, ...], Any] = {}
        self.hits = 0
        self.misses = 0
        pin = getattr(fake_tensor, "_pin_device_index", None)
        self._pin = pin if callable(pin) else None
        # The attributes `FakeTensor.__new__` sets on a new tensor, but its device and mode (all
        # None), read from the first one FakeTensorMode makes here; None until then, False when
        # they are not all None (a debug build keeps a traceback: made by FakeTensor() then).
        self._attributes: Any = None
        self._mutable = bool(getattr(mode, "_allow_unsafe_data_ptr_access", False))
        # Ops keyed without their float arguments' values (see `_blind`).
        self.blind: set[Any] = set()

    # ---------------------------------------------------------------- the key
    def _tensor(self, t: Any) -> tuple[Any, ...]:
        if type(t) is not FakeTensor or t.fake_mode is not self.mode or t.constant is not None or t.dispatch_keys is not None or t.is_sparse:
            raise _Refused
        # `stride()` raises for every layout but strided (sparse, compressed, mkldnn): refused by
        # the caller. `size()`, not `shape`: a third of the time.
        return (
            t.dtype,
            t.size(),
            t.stride(),
            t.storage_offset(),
            t.untyped_storage().nbytes(),
            t.fake_device,
            t.requires_grad,
            t.is_inference(),
            t.is_conj(),
            t.is_neg(),
            t.is_quantized,
        )

    def _leaf(self, a: Any, parts: list[Any], blind: bool = False) -> None:
        kind = type(a)
        if kind is FakeTensor:
            parts.append(self._tensor(a))
        elif kind is float and blind:
            parts.append(kind)
        elif kind in _PLAIN:
            parts.append(kind)
            parts.append(a)
        elif kind is torch.device:
            if a.index is None and a.type != "cpu" and a.type != "meta":
                if self._pin is None:
                    raise _Refused
                a = self._pin(a)
            parts.append(kind)
            parts.append(a)
        else:
            # Another tensor (real, a wrapper subclass), a SymInt, a function, a nested structure.
            raise _Refused

    def key(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
        if torch._C._get_dispatch_mode(_PROXY) is not None or not self.mode.cache_enabled or self.mode.shape_env is not None:
            return None
        blind = func in self.blind
        parts: list[Any] = [func, torch.get_default_dtype(), torch._C._get_default_device(), torch.is_inference_mode_enabled(), len(args)]
        try:
            for a in args:
                if type(a) is list or type(a) is tuple:
                    parts.append(type(a))
                    parts.append(len(a))
                    for x in a:
                        self._leaf(x, parts, blind)
                else:
                    self._leaf(a, parts, blind)
            for name, a in kwargs.items():
                parts.append(name)
                if type(a) is list or type(a) is tuple:
                    parts.append(type(a))
                    parts.append(len(a))
                    for x in a:
                        self._leaf(x, parts, blind)
                else:
                    self._leaf(a, parts, blind)
        except (_Refused, RuntimeError):
            return None
        return tuple(parts)

    # ---------------------------------------------------------------- the call
    def call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """`func(*args, **kwargs)` under FakeTensorMode (the caller holds the fake lock)."""
        mode = self.mode
        key = self.key(func, args, kwargs)
        if key is None:
            with mode:
                return func(*args, **kwargs)
        found = self.entries.get(key)
        if found is not None and found is not _BYPASS:
            self.hits += 1
            if found.blind:
                if self.check:
                    # FakeTensorMode itself, with these values: it must answer None too.
                    with mode:
                        out = func(*args, **kwargs)
                    if out is not None:
                        raise AssertionError(f"memo: {func} returned {out!r}, not None")
                return None
            if self.check:
                return self._checked(found, func, args, kwargs)
            return self._outputs(found, args)
        if found is _BYPASS:
            with mode:
                return func(*args, **kwargs)
        # First call with this key: FakeTensorMode's own key, before the op runs (an in-place op
        # may change its inputs' metadata), then the entry its dispatch left under that key.
        self.misses += 1
        state = fake_tensor._CacheKeyState(None)
        try:
            theirs = mode._cache_key(state, func, args, kwargs)
        except Exception:  # FakeTensorMode refuses to key this call (its _BypassDispatchCache, or anything else): never memoised
            theirs = None
        with mode:
            out = func(*args, **kwargs)
        entry = None if theirs is None else fake_tensor.FakeTensorMode.cache.get(theirs)
        as_list = False
        if type(out) is list and isinstance(entry, fake_tensor._DispatchCacheBypassEntry):
            entry, as_list = self._list_entry(state, theirs, func, args, kwargs, out), True
        elif isinstance(entry, fake_tensor._DispatchCacheBypassEntry) and getattr(entry, "reason", None) == "CompositeImplicitAutograd":
            composite = self._composite(out, args, theirs)
            if composite is not None:
                self.entries[key] = composite
                return out
        if len(self.entries) >= LIMIT:
            # Shapes that keep changing (a growing KV cache): the oldest keys are the least likely again.
            self.entries.clear()
        if not isinstance(entry, fake_tensor._DispatchCacheValidEntry):
            if self._attributes is None:
                self._learn(out)
            custom = _custom_entry(self, func, args, kwargs, out, key)
            if custom is not None and custom.blind and func not in self.blind:
                # Its floats (a learning rate, a step) change every call: keyed without them.
                self.blind.add(func)
                key = self.key(func, args, kwargs)
            if key is not None:
                self.entries[key] = _BYPASS if custom is None else custom
        elif self._blind(func, entry, key):
            if func not in self.blind:
                # Keyed again without the float values: later calls with other values hit this entry.
                self.blind.add(func)
                key = self.key(func, args, kwargs)
            if key is not None:
                self.entries[key] = _Entry(entry, theirs, blind=True)
        else:
            self.entries[key] = _Entry(entry, theirs, as_list)
        if self._attributes is None:
            self._learn(out)
        return out

    def _blind(self, func: Any, entry: Any, key: tuple[Any, ...]) -> bool:
        """An op that returns nothing (an optimizer's in-place `_foreach_*_` and `_fused_adamw_`,
        whose learning rate and bias corrections change every step) and takes a float: its answer
        is None whatever the floats' values, which then need not be in its key. Its validity
        checks (list lengths, dtypes, devices, shapes) still see everything else in the key.
        `ITERAGPU_PREDICT_MEMO=check` runs FakeTensorMode on each such call and holds it to None."""
        if func not in self.blind and float not in key:
            return False
        returns = getattr(getattr(func, "_schema", None), "returns", None)
        if returns is None or len(returns) != 0 or getattr(func, "namespace", None) != "aten":
            return False
        info = entry.output_infos
        return not entry.is_output_tuple and len(info) == 1 and info[0].inplace_idx is None and info[0].metadata is None and info[0].constant_value is None

    def _composite(self, out: Any, args: tuple[Any, ...], theirs: Any) -> _Entry | None:
        """A view op with a composite kernel (`reshape`, `to`, `flatten`: under inference mode they
        reach the fake mode whole), which FakeTensorMode runs by decomposing each time and never
        caches, since it may or may not alias its input. Whether it does is decided by the
        metadata its key holds: its output is recorded as the input itself, a view of an input's
        storage, or a new tensor whose storage is exactly its own extent, then made so again;
        anything else is not memoised. `ITERAGPU_PREDICT_MEMO=check` runs the op each time and
        compares."""
        if not self._attributes or type(out) is not FakeTensor or out.fake_mode is not self.mode or out.constant is not None or out.dispatch_keys is not None:
            return None
        if out.is_sparse or out.is_conj() or out.is_neg() or out.is_quantized:
            return None
        made = _Made.__new__(_Made)
        made.value = None
        made.size, made.stride, made.offset = tuple(out.size()), tuple(out.stride()), out.storage_offset()
        made.dtype, made.requires_grad, made.device = out.dtype, out.requires_grad, out.fake_device
        if made.device.index is None and made.device.type not in ("cpu", "meta"):
            return None
        storage = out.untyped_storage()._cdata
        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        same = [i for i in tensors if args[i] is out]
        shared = [i for i in tensors if args[i].untyped_storage()._cdata == storage]
        if same:
            made.kind, made.index = "inplace", same[0]
        elif len(shared) == 1 and type(args[shared[0]]) is FakeTensor:
            made.kind, made.index = "view", shared[0]
        elif not shared and made.offset == 0:
            extent = 1 + sum((n - 1) * st for n, st in zip(made.size, made.stride)) if all(made.size) else 0
            if out.untyped_storage().nbytes() != extent * out.element_size():
                return None
            made.kind, made.index = "new", None
        else:
            return None
        found = _Entry(None, theirs)
        found.made = [made]
        found.composite = True
        return found

    def _list_entry(self, state: Any, theirs: Any, func: Any, args: Any, kwargs: Any, out: list[Any]) -> Any:
        """A cache entry for an op returning a list (`_foreach_sqrt`, `split`), which
        FakeTensorMode makes for tuples but not for lists ("non-FakeTensor output"): its own
        checks and its own per-output records (`_make_cache_entry` for a tuple), or None."""
        mode = self.mode
        try:
            mode._validate_cache_key(func, args, kwargs)
            for o in out:
                mode._validate_output_for_cache_entry(state, theirs, func, args, kwargs, o)
            infos = tuple(mode._get_output_info_for_cache_entry(state, theirs, func, args, kwargs, o) for o in out)
            return fake_tensor._DispatchCacheValidEntry(output_infos=infos, is_output_tuple=True)
        except Exception:  # its _BypassDispatchCache or its assertion on a view with several tensor arguments: not memoised
            return None

    def _learn(self, out: Any) -> None:
        """The attributes of a new fake tensor, from one FakeTensorMode made."""
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if type(t) is FakeTensor and t.fake_mode is self.mode and t.constant is None:
                attributes = dict(vars(t))
                device, mode = attributes.pop("_fake_device", None), attributes.pop("fake_mode", None)
                plain = isinstance(device, torch.device) and mode is self.mode and all(v is None for v in attributes.values())
                self._attributes = attributes if plain else False
                return

    def _outputs(self, found: _Entry, args: tuple[Any, ...]) -> Any:
        if found.tuple:
            infos = found.entry.output_infos if found.entry is not None else [None] * len(found.made)
            outs = [self._output(found, made, info, args) for made, info in zip(found.made, infos)]
            return outs if found.list else tuple(outs)
        return self._output(found, found.made[0], None if found.composite or found.entry is None else found.entry.output_infos[0], args)

    def _output(self, found: _Entry, made: _Made, info: Any, args: tuple[Any, ...]) -> Any:
        kind = made.kind
        if kind == "inplace":
            return args[made.index]
        if kind == "constant":
            return made.value
        attributes = self._attributes
        if kind == "theirs" or not attributes:
            return self.mode._get_output_tensor_from_cache_entry(fake_tensor._CacheKeyState(None), info, None, args)
        # As _get_output_tensor_from_cache_entry: no dispatch mode sees these meta-tensor calls.
        with torch._C._DisableTorchDispatch():
            if kind == "new":
                elem = torch.empty_strided(made.size, made.stride, dtype=made.dtype, device="meta", requires_grad=made.requires_grad)
            else:
                elem = torch.empty_strided((), (), dtype=made.dtype, device="meta", requires_grad=made.requires_grad)
                elem.set_(args[made.index].untyped_storage(), made.offset, made.size, made.stride)
        # As FakeTensor.__new__.
        t = torch.Tensor._make_subclass(FakeTensor, elem, elem.requires_grad, dispatch_device=True, device_for_backend_keys=made.device)
        if self._mutable:
            torch._C._set_warn_deprecated_on_mutable_data_ptr(t)
        else:
            torch._C._set_throw_on_mutable_data_ptr(t)
        d = t.__dict__
        d.update(attributes)
        d["_fake_device"] = made.device
        d["fake_mode"] = self.mode
        return t

    # ---------------------------------------------------------------- ITERAGPU_PREDICT_MEMO=check
    def _checked(self, found: _Entry, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if found.custom:
            ours = self._outputs(found, args)
            with self.mode:
                reference = func(*args, **kwargs)
            for a, b in zip(ours if found.tuple else (ours,), reference if found.tuple else (reference,)):
                difference = _difference(a, b, args)
                if difference:
                    raise AssertionError(f"memo: {func}'s output differs from its fake kernel's: {difference}")
            return ours
        if found.composite:
            ours = self._outputs(found, args)
            with self.mode:
                reference = func(*args, **kwargs)
            difference = _difference(ours, reference, args)
            if difference:
                raise AssertionError(f"memo: {func}'s output differs from FakeTensorMode's: {difference}")
            return ours
        theirs = self.mode._cache_key(fake_tensor._CacheKeyState(None), func, args, kwargs)
        if theirs != found.theirs:
            diffs = [(i, x, y) for i, (x, y) in enumerate(zip(theirs.key, found.theirs.key)) if x != y][:3]
            raise AssertionError(f"memo: {func}'s FakeTensorMode key differs from the one its memo key was found under: {diffs}")
        ours = self._outputs(found, args)
        reference = self.mode._output_from_cache_entry(fake_tensor._CacheKeyState(None), found.entry, None, args)
        if found.list:
            reference = list(reference)
        for a, b in zip(ours if found.tuple else (ours,), reference if found.tuple else (reference,)):
            difference = _difference(a, b, args)
            if difference:
                raise AssertionError(f"memo: {func}'s output differs from FakeTensorMode's: {difference}")
        return ours


def _difference(a: Any, b: Any, args: tuple[Any, ...]) -> str | None:
    """What differs between two outputs made from one cache entry, or None."""
    if not isinstance(b, torch.Tensor):
        return None if type(a) is type(b) and a == b else f"{a!r} != {b!r}"
    if type(a) is not type(b):
        return f"type {type(a)} != {type(b)}"
    if a is b:
        return None
    pairs = {
        "size": (a.size(), b.size()),
        "stride": (a.stride(), b.stride()),
        "offset": (a.storage_offset(), b.storage_offset()),
        "dtype": (a.dtype, b.dtype),
        "device": (a.device, b.device),
        "requires_grad": (a.requires_grad, b.requires_grad),
        "bits": ((a.is_conj(), a.is_neg(), a.is_inference()), (b.is_conj(), b.is_neg(), b.is_inference())),
        "storage bytes": (a.untyped_storage().nbytes(), b.untyped_storage().nbytes()),
        "dispatch keys": (str(torch._C._dispatch_key_set(a)), str(torch._C._dispatch_key_set(b))),
        "attributes": (sorted(vars(a).items(), key=str), sorted(vars(b).items(), key=str)),
        "shares an input's storage": (
            [x.untyped_storage()._cdata == a.untyped_storage()._cdata for x in args if isinstance(x, torch.Tensor)],
            [x.untyped_storage()._cdata == b.untyped_storage()._cdata for x in args if isinstance(x, torch.Tensor)],
        ),
    }
    for name, (x, y) in pairs.items():
        if x != y:
            return f"{name}: {x} != {y}"
    return None


def _custom_entry(memo: Memo, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, before: tuple[Any, ...]) -> _Entry | None:
    """A custom op's answer (bitsandbytes' `gemm_4bit`, `dequantize_4bit`, its 8-bit optimizer
    update), which FakeTensorMode never caches: its fake kernel runs in Python on every call,
    though what it makes depends only on the key. Kept when its schema says it returns new
    tensors (no alias annotation on any return) or nothing, and what it made bears that out: each
    output a fresh dense tensor of this mode (offset 0, a storage of exactly its own extent,
    shared with no input nor other output, plain attributes), or None from an op that left its
    inputs' metadata as they were (its key unchanged after the call). Later calls make the same
    outputs as a "new" cache entry does; `ITERAGPU_PREDICT_MEMO=check` runs its fake kernel on
    every reuse and compares."""
    schema = getattr(func, "_schema", None)
    if schema is None or getattr(func, "namespace", None) in (None, "aten", "prims", "prim") or not memo._attributes:
        return None
    if any(getattr(r, "alias_info", None) is not None for r in schema.returns):
        return None
    entry = _Entry(None, None)
    entry.custom = True
    if out is None:
        if len(schema.returns) != 0 or memo.key(func, args, kwargs) != before:
            return None
        entry.blind = True
        return entry
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if len(outs) != len(schema.returns) or not outs:
        return None
    leaves = [x for a in (*args, *kwargs.values()) for x in (a if isinstance(a, (list, tuple)) else (a,))]
    inputs = {a.untyped_storage()._cdata for a in leaves if isinstance(a, torch.Tensor)}
    seen: set[int] = set()
    for t in outs:
        if type(t) is not FakeTensor or t.fake_mode is not memo.mode or t.constant is not None or t.layout is not torch.strided or t.is_conj() or t.is_neg():
            return None
        storage = t.untyped_storage()
        if storage._cdata in inputs or storage._cdata in seen or t.storage_offset() != 0:
            return None
        seen.add(storage._cdata)
        size, stride = tuple(t.size()), tuple(t.stride())
        if not all(type(v) is int for v in (*size, *stride)):
            return None
        extent = 0 if 0 in size else 1 + sum((n - 1) * st for n, st in zip(size, stride))
        if storage.nbytes() != extent * t.element_size():
            return None
        attributes = dict(vars(t))
        device = attributes.pop("_fake_device", None)
        attributes.pop("fake_mode", None)
        if not isinstance(device, torch.device) or device.index is None or any(v is not None for v in attributes.values()):
            return None
        made = _Made.__new__(_Made)
        made.kind, made.index, made.value = "new", None, None
        made.size, made.stride, made.offset = size, stride, 0
        made.dtype, made.requires_grad, made.device = t.dtype, t.requires_grad, device
        entry.made.append(made)
    entry.tuple = isinstance(out, (tuple, list))
    entry.list = type(out) is list
    return entry

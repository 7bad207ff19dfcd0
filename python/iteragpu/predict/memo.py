"""FakeTensorMode's answers, reused without entering it: the same outputs, made the same way.

A training loop runs the same ops on tensors of the same shapes thousands of times. FakeTensorMode
already caches what an op gives for its inputs' metadata (its dispatch cache, `FakeTensorMode.cache`,
enabled and hit under the tracker), but every call still pays for entering the mode and for its
cache key: `extract_tensor_metadata` and a generic walk of the arguments, most of an op's time.

`Memo` keys each call on what FakeTensorMode's key is made of, read directly (each tensor's dtype,
shape, strides, storage offset and size, device, layout, requires_grad, inference, conjugate and
negative bits, constant and owner; each other argument's type and value; the argument structure;
the default dtype and device and inference mode), so that two calls with equal memo keys have
equal FakeTensorMode keys. The first call of a key runs through FakeTensorMode as before; its cache
entry (or its refusal to cache) is then looked up with FakeTensorMode's own key, computed before
the op ran, and kept under the memo key. Later calls with that key build their outputs from that
entry with FakeTensorMode's own `_output_from_cache_entry`: exactly what FakeTensorMode would have
returned (new fake tensors of the cached metadata, views on the input's storage, in-place results
being the input). What FakeTensorMode would not cache (data-dependent ops, in-place views, custom
ops, symbolic shapes, another mode's tensors) is never memoised.

`ITERAGPU_PREDICT_MEMO=0` turns it off (the prediction must be the same to the byte; the test
`predict_memo_changes_nothing` holds it so).
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

_TensorBase: Any = torch._C.TensorBase
_LAYOUT: Any = torch.Tensor.layout.__get__  # the C getter: FakeTensor's property adds a Python call
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
    mode = getattr(fake_tensor, "FakeTensorMode", None)
    for name in ("_cache_key", "_output_from_cache_entry"):
        if not callable(getattr(mode, name, None)):
            return f"FakeTensorMode.{name} is missing"
    if not hasattr(fake_tensor, "_CacheKeyState") or not hasattr(fake_tensor, "_DispatchCacheValidEntry"):
        return "FakeTensorMode's cache entries are not this torch's"
    params = list(inspect.signature(mode._output_from_cache_entry).parameters)
    if params != ["self", "state", "entry", "key", "args"]:
        return f"FakeTensorMode._output_from_cache_entry takes {params}"
    params = list(inspect.signature(mode._cache_key).parameters)
    if params != ["self", "state", "func", "args", "kwargs"]:
        return f"FakeTensorMode._cache_key takes {params}"
    return None


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0" and available() is None


class Memo:
    """Memo key -> FakeTensorMode's cache entry for that call (or `_BYPASS`)."""

    def __init__(self, mode: Any) -> None:
        self.mode = mode
        self.entries: dict[tuple[Any, ...], Any] = {}
        self.hits = 0
        self.misses = 0
        pin = getattr(fake_tensor, "_pin_device_index", None)
        self._pin = pin if callable(pin) else None

    # ---------------------------------------------------------------- the key
    def _tensor(self, t: Any) -> tuple[Any, ...]:
        if type(t) is not FakeTensor or t.fake_mode is not self.mode or t.constant is not None or t.dispatch_keys is not None:
            raise _Refused
        layout = _LAYOUT(t)
        if layout is not torch.strided:
            raise _Refused
        return (
            t.dtype,
            t.shape,
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

    def _leaf(self, a: Any, parts: list[Any]) -> None:
        kind = type(a)
        if kind is FakeTensor:
            parts.append(self._tensor(a))
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
        parts: list[Any] = [func, torch.get_default_dtype(), torch._C._get_default_device(), torch.is_inference_mode_enabled(), len(args)]
        try:
            for a in args:
                if type(a) is list or type(a) is tuple:
                    parts.append(type(a))
                    parts.append(len(a))
                    for x in a:
                        self._leaf(x, parts)
                else:
                    self._leaf(a, parts)
            for name, a in kwargs.items():
                parts.append(name)
                if type(a) is list or type(a) is tuple:
                    parts.append(type(a))
                    parts.append(len(a))
                    for x in a:
                        self._leaf(x, parts)
                else:
                    self._leaf(a, parts)
        except _Refused:
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
        entry = self.entries.get(key)
        if entry is not None and entry is not _BYPASS:
            self.hits += 1
            return mode._output_from_cache_entry(fake_tensor._CacheKeyState(None), entry, None, args)
        if entry is _BYPASS:
            with mode:
                return func(*args, **kwargs)
        # First call with this key: FakeTensorMode's own key, before the op runs (an in-place op
        # may change its inputs' metadata), then the entry its dispatch left under that key.
        self.misses += 1
        try:
            theirs = mode._cache_key(fake_tensor._CacheKeyState(None), func, args, kwargs)
        except Exception:  # FakeTensorMode refuses to key this call (its _BypassDispatchCache, or anything else): never memoised
            theirs = None
        with mode:
            out = func(*args, **kwargs)
        found = None if theirs is None else fake_tensor.FakeTensorMode.cache.get(theirs)
        if len(self.entries) >= LIMIT:
            # Shapes that keep changing (a growing KV cache): the oldest keys are the least likely again.
            self.entries.clear()
        self.entries[key] = found if isinstance(found, fake_tensor._DispatchCacheValidEntry) else _BYPASS
        return out

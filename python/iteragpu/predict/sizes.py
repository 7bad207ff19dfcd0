"""Data-dependent output sizes from known values.

Some ops have an output whose SIZE depends on the data: boolean-mask indexing (`x[mask]`),
`nonzero` (and `argwhere`, one-argument `torch.where`), `masked_select`, `unique` and its
variants, `repeat_interleave` with tensor repeats, `bincount`. FakeTensorMode refuses them
(`DynamicOutputShapeException`). Yet the inputs that decide the size are often known
(values.py): an SFT loss selects `hidden_states[labels != -100]`, and the labels came from the
CPU. The hidden states' values are never known, but they do not decide the size.

So each op names the inputs that DECIDE its size; when those are known, the true size follows,
whatever the other inputs hold, by exact means that never make a large tensor real:
* a known boolean index becomes its long positions (`nonzero` over the known mask on the CPU: at
  most the mask's own size), and the fake op computes the output from them, as PyTorch's CUDA
  `index` does (`expandTensors`: the mask's `nonzero`, a temporary the GPU allocates too, so it is
  counted, alive while the output is made);
* `masked_select`: the count of the mask broadcast to the input's shape is the mask's own count
  times the broadcast's repetition (each element of the mask is repeated equally), with the
  same temporary (CUDA's `masked_select` is `index` over the broadcast mask);
* `bincount`: `max(minlength, max + 1)` from the known input, in CUDA's dtype (float32 weights
  stay float32, others become float64 through a float64 copy of the weights, counted; no weights:
  int64); the weights' values do not matter;
* `repeat_interleave(repeats)`: the sum of the known repeats given as `output_size`, the fake op
  then makes it;
* any other such op (`nonzero`, `unique`…), when all its inputs are known: run on the CPU over
  their values (at most `values.SMALL` elements each), the output made data-less at that size.

When an input that decides the size is unknown (a mask computed from the model's outputs), the
op stays unpredictable with the tracker's stated policy (the upper bound, tainted).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from . import values as known_values

# Masks an index reads as booleans (uint8 is the deprecated spelling).
_MASKS: tuple[Any, ...] = (torch.bool, torch.uint8)


def known_size(tr: Any, func: Any, args: Any, kwargs: Any, flat: list[Any], spec: Any, held: list[Any]) -> Any:
    """The output of data-dependent `func` at its true size, data-less, when the inputs that
    decide its size are known; None otherwise. Temporaries the GPU makes on the way are
    registered and appended to `held` (the caller keeps them alive until the output is counted)."""
    if getattr(func, "namespace", None) != "aten":
        return None
    name = known_values.base_name(func)
    if name == "index" and len(args) >= 2 and _masks_with_dims(args[1]):
        return _index(tr, args[0], list(args[1]), held, func)
    if name == "masked_select" and len(args) >= 2:
        return _masked_select(tr, args[0], args[1], held)
    if name == "bincount" and args:
        weights = args[1] if len(args) > 1 else kwargs.get("weights")
        minlength = args[2] if len(args) > 2 else kwargs.get("minlength", 0)
        return _bincount(tr, args[0], weights, minlength, held)
    if name == "repeat_interleave" and args and isinstance(args[0], torch.Tensor) and kwargs.get("output_size") is None:
        return _repeat_interleave(tr, func, args, kwargs)
    return _all_known(tr, func, flat, spec)


def byte_mask_index(func: Any, args: Any) -> bool:
    """`aten.index.Tensor` with a uint8 mask among its indices (FakeTensorMode refuses them)."""
    return (
        func is torch.ops.aten.index.Tensor
        and len(args) >= 2
        and any(isinstance(i, torch.Tensor) and i.dtype == torch.uint8 for i in args[1])
    )


def _masks_with_dims(indices: Any) -> bool:
    """Boolean masks among an index's indices, none of them 0-dimensional (`x[True]` adds a
    dimension: left to the CPU run over known values)."""
    masks = [i for i in indices if isinstance(i, torch.Tensor) and i.dtype in _MASKS]
    return bool(masks) and all(m.dim() > 0 for m in masks)


def _fake(tr: Any, shape: Any, dtype: Any, device: Any, register: bool = False, held: list[Any] | None = None) -> Any:
    with tr.fake_lock, tr.fake_mode:
        t = torch.empty(tuple(shape), dtype=dtype, device=device)
    if register:
        tr.register(t)
        if held is not None:
            held.append(t)
    return t


def _positions(tr: Any, known: Any, device: Any, held: list[Any]) -> Any:
    """A known mask's positions, as CUDA's `nonzero` makes them: a [count, dims] int64
    temporary on the mask's device (counted), its values known when small."""
    with _disable_current_modes():
        pos = known.nonzero()
    temp = _fake(tr, pos.shape, torch.long, device, register=True, held=held)
    tr.values.set(temp, pos)
    return temp


def _index(tr: Any, self_: Any, indices: list[Any], held: list[Any], func: Any) -> Any:
    """`self[indices]` with boolean masks among the indices: each known mask becomes its
    positions, and the fake op sizes the output from them."""
    replaced: list[Any] = []
    dim = 0
    for i in indices:
        if not (isinstance(i, torch.Tensor) and i.dtype in _MASKS):
            replaced.append(i)
            dim += 1
            continue
        known = tr.values.known(i)
        if known is None:
            return None
        expected = tuple(self_.shape[dim : dim + i.dim()])
        if tuple(i.shape) != expected:
            raise IndexError(
                f"The shape of the mask {list(i.shape)} at index {dim} does not match the shape of the indexed tensor {list(self_.shape)} at index {dim}"
            )
        temp = _positions(tr, known, i.device, held)
        with tr.fake_lock, tr.fake_mode:
            replaced.extend(temp.unbind(1))
        dim += i.dim()
    with tr.fake_lock, tr.fake_mode:
        return func(self_, replaced)


def _masked_select(tr: Any, self_: Any, mask: Any, held: list[Any]) -> Any:
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or not isinstance(self_, torch.Tensor):
        return None
    known = tr.values.known(mask)
    if known is None:
        return None
    shape = torch.broadcast_shapes(self_.shape, mask.shape)
    numel = math.prod(shape)
    with _disable_current_modes():
        count = int(known.sum()) * (numel // mask.numel()) if mask.numel() else 0
    # CUDA's masked_select indexes the input with the broadcast mask: its positions first.
    _fake(tr, (count, len(shape)), torch.long, mask.device, register=True, held=held)
    return _fake(tr, (count,), self_.dtype, self_.device)


def _bincount(tr: Any, self_: Any, weights: Any, minlength: Any, held: list[Any]) -> Any:
    if not isinstance(self_, torch.Tensor) or self_.dim() != 1 or self_.dtype.is_floating_point:
        return None
    known = tr.values.known(self_)
    if known is None:
        return None
    with _disable_current_modes():
        if known.numel() and int(known.min()) < 0:
            raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
        top = int(known.max()) + 1 if known.numel() else 0
    size = max(int(minlength or 0), top)
    if weights is None:
        dtype = torch.long
    elif weights.dtype == torch.float32:
        dtype = torch.float32
    else:
        # CUDA's _bincount_cuda: other weights are copied to float64 first (a temporary).
        _fake(tr, weights.shape, torch.float64, weights.device, register=True, held=held)
        dtype = torch.float64
    return _fake(tr, (size,), dtype, self_.device)


def _repeat_interleave(tr: Any, func: Any, args: Any, kwargs: Any) -> Any:
    repeats = args[0]
    known = tr.values.known(repeats)
    if known is None:
        return None
    with _disable_current_modes():
        if known.numel() and int(known.min()) < 0:
            raise RuntimeError("repeats can not be negative")
        total = int(known.sum())
    with tr.fake_lock, tr.fake_mode:
        return func(*args, **{**kwargs, "output_size": total})


def _all_known(tr: Any, func: Any, flat: list[Any], spec: Any) -> Any:
    """Any data-dependent op whose every tensor input is known: run on the CPU over the values
    (each at most `values.SMALL` elements), the outputs made data-less at the sizes found."""
    from torch._subclasses.fake_tensor import FakeTensor

    fakes = [a for a in flat if isinstance(a, FakeTensor)]
    if not fakes:
        return None
    known = {id(a): tr.values.known(a) for a in fakes}
    if any(v is None for v in known.values()):
        return None
    with _disable_current_modes():
        filled = [known[id(a)] if isinstance(a, FakeTensor) else (torch.device("cpu") if isinstance(a, torch.device) else a) for a in flat]
        cargs, ckwargs = tree_unflatten(filled, spec)
        try:
            result = func(*cargs, **ckwargs)
        except Exception:  # any op may fail on the CPU where CUDA would not: the upper bound then
            return None
    if not all(isinstance(r, torch.Tensor) or r is None for r in tree_flatten(result)[0]):
        return None
    device = fakes[0].device
    with tr.fake_lock, tr.fake_mode:
        return tree_map(
            lambda r: torch.empty_strided(r.shape, r.stride(), dtype=r.dtype, device=device) if isinstance(r, torch.Tensor) else r,
            result,
        )

"""Elementwise foreach ops over DTensors sharded alike, run on their local shards.

An optimizer's step over FSDP2's parameters calls `torch._foreach_lerp_`, `_foreach_addcdiv_`
and a few more on lists of DTensors, one element per parameter. DTensor works out a sharding for
each element of each list, in Python, and caches the answer by the whole call's schema, so the
first step of a 70B model (723 parameters, about ten foreach ops) spends 15 s of a 29 s
prediction there, every answer a miss; the same step a second time takes 0.5 s.

Where the call is on one mesh, every list's element i has the same placements and global shape, no placement is
`Partial`, and the op is elementwise, DTensor's answer is known without asking: no element is
redistributed, and the op runs on each local shard, its outputs sharded as its inputs. That is
what runs here, on the same local tensors (so the allocations are DTensor's own, in the same
order), each output wrapped by `DTensor.from_local` with the input's global shape and strides. Any
other call (a plain tensor among the lists, a scalar tensor, a reduction such as `_foreach_norm`,
gradients recorded) goes to DTensor unchanged. `ITERAGPU_PREDICT_DTENSOR_FOREACH=0` sends every
call to DTensor (the tests compare both).
"""

from __future__ import annotations

import os
from typing import Any, Callable

ENV = "ITERAGPU_PREDICT_DTENSOR_FOREACH"

# Elementwise by definition: element j of each output depends on element j of each input alone.
ELEMENTWISE = (
    "abs",
    "add",
    "addcdiv",
    "addcmul",
    "clamp_max",
    "clamp_min",
    "copy",
    "div",
    "exp",
    "lerp",
    "log",
    "maximum",
    "minimum",
    "mul",
    "neg",
    "pow",
    "reciprocal",
    "sign",
    "sqrt",
    "sub",
    "zero",
)


def install(torch: Any) -> None:
    """Each of `torch._foreach_<name>` and `torch._foreach_<name>_` for the names above, when
    DTensor exists, first tries its local shards."""
    if os.environ.get(ENV, "1") == "0":
        return
    try:
        from torch._prims_common import make_contiguous_strides_for
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor.placement_types import Partial
    except ImportError:
        return
    for base in ELEMENTWISE:
        for name in (f"_foreach_{base}", f"_foreach_{base}_"):
            original = getattr(torch, name, None)  # allowlisted: the names of ELEMENTWISE above
            if original is None or getattr(original, "_iteragpu", False):
                continue
            wrapper = _local_first(torch, original, name.endswith("_"), DTensor, Partial, make_contiguous_strides_for)
            wrapper._iteragpu = True  # type: ignore[attr-defined]
            setattr(torch, name, wrapper)


def _local_first(torch: Any, original: Callable[..., Any], in_place: bool, dtensor: Any, partial: Any, contiguous: Callable[..., Any]) -> Callable[..., Any]:
    def foreach(*args: Any, **kwargs: Any) -> Any:
        lists = _sharded_alike(torch, args, kwargs, dtensor, partial, contiguous)
        if lists is None:
            return original(*args, **kwargs)

        def local(a: Any) -> Any:
            if isinstance(a, (list, tuple)) and a and isinstance(a[0], dtensor):
                return [t._local_tensor for t in a]
            return a

        out = original(*[local(a) for a in args], **{k: local(v) for k, v in kwargs.items()})
        if not isinstance(out, (list, tuple)):
            return out
        if in_place:
            return args[0]  # the list updated, as the op returns it
        first = lists[0]
        return [dtensor.from_local(o, t.device_mesh, t.placements, run_check=False, shape=t.shape, stride=t.stride()) for o, t in zip(out, first)]

    foreach.__name__ = getattr(original, "__name__", "foreach")
    foreach.__doc__ = getattr(original, "__doc__", None)
    return foreach


def _sharded_alike(torch: Any, args: tuple[Any, ...], kwargs: dict[str, Any], dtensor: Any, partial: Any, contiguous: Callable[..., Any]) -> list[Any] | None:
    """The call's lists of DTensors when all are on one mesh, every list's element i is sharded
    as the first list's (same placements and global shape), none `Partial`, the first list's
    globally contiguous, and nothing else in the call is a tensor; else None (DTensor decides)."""
    lists: list[Any] = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, (list, tuple)):
            if a and isinstance(a[0], dtensor):
                lists.append(a)
            elif any(isinstance(x, torch.Tensor) for x in a):
                return None
        elif isinstance(a, torch.Tensor):
            return None
    if not lists:
        return None
    first = lists[0]
    if any(len(other) != len(first) for other in lists[1:]):
        return None
    grads = torch.is_grad_enabled()
    # One mesh for the whole call: DTensor itself refuses a call across meshes on some releases.
    mesh = getattr(first[0], "device_mesh", None)
    for i, t in enumerate(first):
        if not isinstance(t, dtensor) or (grads and t.requires_grad) or t.device_mesh != mesh:
            return None
        placements, shape = t.placements, t.shape
        if any(isinstance(p, partial) for p in placements) or t.stride() != contiguous(shape):
            return None
        for other in lists[1:]:
            u = other[i]
            if not isinstance(u, dtensor) or u.device_mesh != mesh or u.placements != placements or u.shape != shape or (grads and u.requires_grad):
                return None
    return lists


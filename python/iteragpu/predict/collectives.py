"""The values a collective gives when every rank holds the same data, as in a prediction (rank 0
stands for all): PyTorch's fake process group moves no data, so without this the outputs of an
all-gather are unknown and a check that reads them (DDP's `_verify_params_across_processes`,
which all-gathers each rank's parameter count and shapes) gets a placeholder and fails, where a
real run of identical ranks passes.

For identical ranks: an all-gather's outputs are the input repeated once per rank; a broadcast
leaves the tensor as it is; an all-reduce gives N × the input for SUM, the input itself for AVG,
MAX, MIN and the bitwise ops, input^N for PRODUCT; a reduce-scatter gives the rank's chunk
reduced the same way; an all-to-all gives chunk 0 (what every rank sends rank 0) repeated. An op
whose values cannot be told this way forgets them (the tracker's placeholder rule then applies).

N is the size of the group the collective runs on (a sub-group of a `DeviceMesh`, `new_group`),
read from the op's process group; its reduce op from the op too (torch 2.15's `ReduceOp.unbox`)
or, on releases that cannot read it back, from the `torch.distributed` call that made it.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable

NAMESPACES = {"c10d", "_c10d_functional", "c10d_functional"}
# c10d's eager ops and the functional ones (`torch.distributed._functional_collectives`).
GATHERS = {"allgather_", "_allgather_base_", "allgather_into_tensor_coalesced_", "all_gather_into_tensor", "all_gather_into_tensor_out", "all_gather_into_tensor_coalesced"}
REDUCES = {"allreduce_", "allreduce_coalesced_", "all_reduce", "all_reduce_", "all_reduce_coalesced", "all_reduce_coalesced_"}
SCATTERS = {"_reduce_scatter_base_", "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced_", "reduce_scatter_tensor_coalesced"}
KEEPS = {"broadcast_", "broadcast", "barrier", "monitored_barrier_"}


REDUCE_NAMES = {"SUM", "AVG", "MAX", "MIN", "PRODUCT", "BAND", "BOR", "BXOR", "PREMUL_SUM"}
# The reduce op of the `torch.distributed` call running now (releases whose ReduceOp cannot be unboxed).
_calling = threading.local()


def install(torch: Any) -> None:
    """On releases whose c10d ops carry a ReduceOp that Python cannot read back (torch 2.6),
    `all_reduce`, `reduce_scatter_tensor` and `reduce_scatter` say their op while they run."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    if hasattr(dist.ReduceOp, "unbox"):
        return
    for name in ("all_reduce", "reduce_scatter_tensor", "reduce_scatter"):
        original = getattr(c10d, name, None)  # allowlisted: the three names above
        if original is None or getattr(original, "_iteragpu", False):
            continue

        def wrapper(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            op = kwargs.get("op", next((a for a in args if isinstance(a, dist.ReduceOp) or type(a).__name__ == "RedOpType"), None))
            previous = getattr(_calling, "op", None)
            _calling.op = dist.ReduceOp.SUM if op is None else op
            try:
                return _original(*args, **kwargs)
            finally:
                _calling.op = previous

        wrapped = functools.wraps(original)(wrapper)
        wrapped._iteragpu = True  # type: ignore[attr-defined]
        for module in (c10d, dist):
            if getattr(module, name, None) is original:  # allowlisted: the three names above
                setattr(module, name, wrapped)


def group_size(torch: Any, args: tuple[Any, ...], default: int) -> int:
    """The size of the group a c10d op runs on: its ProcessGroup (eager ops) or its group's name
    (functional ops); `default` (the world) when neither is found."""
    import torch.distributed as dist

    for a in args:
        if isinstance(a, torch.ScriptObject):
            try:
                return int(dist.ProcessGroup.unbox(a).size())
            except (RuntimeError, AttributeError):  # another custom class (a ReduceOp)
                continue
    for a in args[1:]:
        if isinstance(a, str) and a.upper() not in REDUCE_NAMES:
            try:
                return int(dist.distributed_c10d._resolve_process_group(a).size())
            except (RuntimeError, ValueError, KeyError, AttributeError):  # not a group's name
                continue
    return default


def _reduce_name(op: Any) -> str | None:
    """SUM, AVG, MAX… from a ReduceOp (eager ops), a string (functional ops), or None."""
    if isinstance(op, str):
        return op.upper()
    try:
        import torch
        import torch.distributed as dist

        if isinstance(op, torch.ScriptObject):
            op = dist.ReduceOp.unbox(op) if hasattr(dist.ReduceOp, "unbox") else getattr(_calling, "op", None)
    except (ImportError, RuntimeError):  # not a ReduceOp
        return None
    for candidate in (op, getattr(op, "op", None)):
        text = str(candidate).rsplit(".", 1)[-1].upper() if candidate is not None else ""
        if text in REDUCE_NAMES:
            return text
    return None


def _reduced(torch: Any, value: Any, op: str | None, world: int) -> Any:
    if op == "SUM":
        return value * world
    if op in ("AVG", "MAX", "MIN", "BAND", "BOR"):
        return value.clone()
    if op == "PRODUCT":
        return value**world
    if op == "BXOR":
        return value if world % 2 else torch.zeros_like(value)
    return None


def follow(torch: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, known: Callable[[Any], Any], set_known: Callable[[Any, Any], None], forget: Callable[[Any], None], world: int) -> bool:
    """Sets the known values of a collective's outputs (`name` without namespace or overload);
    False when `name` is not a collective this module knows."""

    def tensors(x: Any) -> list[Any]:
        if isinstance(x, torch.Tensor):
            return [x]
        if isinstance(x, (list, tuple)):
            return [t for item in x for t in tensors(item)]
        return []

    def give(target: Any, value: Any) -> None:
        if value is None or value.numel() != target.numel():
            forget(target)  # unknown, or a size this rule does not explain: never raised
        else:
            set_known(target, value.reshape(target.shape).to(target.dtype))

    if name in KEEPS:
        return True
    if name in ("wait_tensor", "_wrap_tensor_autograd"):
        # A functional collective's result, waited for or made differentiable: the same values.
        for o in tensors(out):
            if o is not args[0]:
                give(o, known(args[0]))
        return True
    if name in GATHERS:
        if name in ("allgather_",):
            outputs, inputs = args[0], args[1]
            for outs, inp in zip(outputs, inputs):
                value = known(inp)
                for o in outs:
                    give(o, value)
        elif name in ("all_gather_into_tensor",):
            value = known(args[0])
            for o in tensors(out):
                give(o, None if value is None else torch.cat([value] * world))
        elif name in ("all_gather_into_tensor_out",):
            value = known(args[0])
            for o in tensors(kwargs.get("out", out)):
                give(o, None if value is None else torch.cat([value] * world))
        else:
            # (outputs, inputs, …): each output is its input gathered from every rank.
            outs, ins = tensors(args[0]), tensors(args[1])
            for o, i in zip(outs, ins):
                value = known(i)
                give(o, None if value is None else torch.cat([value.reshape(-1)] * world))
        return True
    if name in REDUCES:
        if name.startswith("allreduce"):
            targets, op = tensors(args[0]), (args[2] if len(args) > 2 else kwargs.get("reduce_op"))
        elif name.endswith("_"):
            targets, op = tensors(args[0]), (args[1] if len(args) > 1 else None)
        else:
            targets, op = tensors(out), (args[1] if len(args) > 1 else None)
            sources = tensors(args[0])
            for t, s in zip(targets, sources):
                value = known(s)
                give(t, None if value is None else _reduced(torch, value, _reduce_name(op), world))
            return True
        for t in targets:
            value = known(t)
            give(t, None if value is None else _reduced(torch, value, _reduce_name(op), world))
        return True
    if name in SCATTERS:
        if name.endswith("_"):
            outs, ins, op = tensors(args[0]), tensors(args[1]), (args[3] if len(args) > 3 else None)
        else:
            outs, ins, op = tensors(out), tensors(args[0]), (args[1] if len(args) > 1 else None)
        for o, i in zip(outs, ins):
            value = known(i)
            chunk = None if value is None or value.numel() != o.numel() * world else value.reshape(-1)[: o.numel()]
            give(o, None if chunk is None else _reduced(torch, chunk, _reduce_name(op), world))
        return True
    return False

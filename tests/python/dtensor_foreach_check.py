"""predict/dtensor_foreach.py on real DTensors (CPU, PyTorch's fake process group of 4 ranks):
each elementwise foreach op an optimizer calls gives the same values, placements, global shapes
and strides as DTensor's own dispatch, without asking DTensor's sharding propagation; a call
DTensor must decide (a Partial placement, a plain tensor among the lists, unlike shardings) still
goes to DTensor. Prints "OK <count of calls run locally>"; any difference raises.

Usage: python dtensor_foreach_check.py (with python/ on PYTHONPATH)"""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from iteragpu.predict import dtensor_foreach

dist.init_process_group("fake", rank=0, world_size=4, store=FakeStore())
mesh = init_device_mesh("cpu", (4,))
mesh_2d = init_device_mesh("cpu", (2, 2))

asked = []


class Asked(TorchDispatchMode):
    """Records each op that reaches dispatch with a DTensor among its arguments (DTensor then
    decides its sharding); a call run on the local shards arrives with plain tensors."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        flat = pytree.tree_leaves((args, kwargs or {}))
        if any(isinstance(a, DTensor) for a in flat):
            asked.append(str(func))
        return func(*args, **(kwargs or {}))


def shard(full, on, placements):
    """Rank 0's DTensor of `full`, its shard cut here (the fake process group moves no data, so
    `distribute_tensor` would leave some releases' shards unset)."""
    local = full
    for dim, p in enumerate(placements):
        if isinstance(p, Shard):
            local = local.chunk(on.size(dim), dim=p.dim)[0]
    return DTensor.from_local(local.contiguous(), on, placements, run_check=False, shape=full.shape, stride=full.stride())


def lists(seed, layout):
    """Parameters as FSDP2 lays them out (uneven Shard(0) on 4 ranks) or FSDP2 + TP does
    ((Shard(0), Shard(1)) on a 2x2 mesh); shapes differ by seed, so that no two calls share a
    schema (DTensor's cache would otherwise hide an ask)."""
    on, placements = layout
    g = torch.Generator().manual_seed(seed)
    shapes = [(10 + seed, 6), (7, 3 + seed), (9, 5)]
    return [shard(torch.rand(s, generator=g), on, placements) for s in shapes]


LAYOUTS = [(mesh, [Shard(0)]), (mesh_2d, [Shard(0), Shard(1)])]


def same(a, b, what):
    assert len(a) == len(b), what
    for x, y in zip(a, b):
        assert isinstance(x, DTensor) and isinstance(y, DTensor), what
        assert x.placements == y.placements and x.device_mesh == y.device_mesh, (what, x.placements, y.placements)
        assert x.shape == y.shape and x.stride() == y.stride() and x.dtype == y.dtype, (what, x.shape, y.shape)
        assert x.to_local().shape == y.to_local().shape, what
        assert torch.equal(x.to_local(), y.to_local()), what


def run(calls, seed, layout):
    """Each call on fresh lists (seeded alike), returning every list and output."""
    params = lists(seed, layout)
    g = torch.Generator().manual_seed(seed + 100)
    grads = [shard(torch.rand(p.shape, generator=g), p.device_mesh, p.placements) for p in params]
    avgs = [shard(torch.zeros(p.shape), p.device_mesh, p.placements) for p in params]
    sqs = [shard(torch.ones(p.shape), p.device_mesh, p.placements) for p in params]
    outs = []
    with torch.no_grad(), Asked():
        for call in calls:
            out = call(params, grads, avgs, sqs)
            if out is not None:
                outs.append(out)
    return [params, grads, avgs, sqs, *outs]


# The elementwise foreach ops of torch.optim's Adam, AdamW, SGD and RMSprop steps.
adam = [
    lambda p, g, m, v: torch._foreach_mul_(p, 1 - 1e-3 * 1e-2),
    lambda p, g, m, v: torch._foreach_lerp_(m, g, 0.1),
    lambda p, g, m, v: torch._foreach_mul_(v, 0.999),
    lambda p, g, m, v: torch._foreach_addcmul_(v, g, g, 0.001),
    lambda p, g, m, v: torch._foreach_sqrt(v),
    lambda p, g, m, v: torch._foreach_div_(v, [0.5, 0.25, 2.0]),
    lambda p, g, m, v: torch._foreach_add_(v, 1e-8),
    lambda p, g, m, v: torch._foreach_addcdiv_(p, m, v, [-1e-3, -2e-3, -3e-3]),
    lambda p, g, m, v: torch._foreach_add(g, p, alpha=0.01),
    lambda p, g, m, v: torch._foreach_neg(g),
    lambda p, g, m, v: torch._foreach_maximum_(v, m),
]

asked.clear()
reference = [run(adam, 1 + k, layout) for k, layout in enumerate(LAYOUTS)]
assert any("_foreach_" in a for a in asked), f"DTensor's own dispatch never asked its propagation: {asked}"

dtensor_foreach.install(torch)
wrapped = torch._foreach_lerp_
assert getattr(wrapped, "_iteragpu", False), "install did not wrap torch._foreach_lerp_"
dtensor_foreach.install(torch)  # twice: wrapped once
assert torch._foreach_lerp_ is wrapped

asked.clear()
local = [run(adam, 1 + k, layout) for k, layout in enumerate(LAYOUTS)]
foreach_asked = [a for a in asked if "_foreach_" in a]
assert not foreach_asked, f"run locally, yet DTensor was asked: {foreach_asked}"
for n, (ref, loc) in enumerate(zip(reference, local)):
    assert len(ref) == len(loc)
    for k, (a, b) in enumerate(zip(ref, loc)):
        same(a, b, f"layout {n}, list {k}")

# Calls DTensor must decide are still its own.
p = lists(20, LAYOUTS[0])
partial = [DTensor.from_local(t.to_local(), t.device_mesh, [Partial()] * t.device_mesh.ndim, run_check=False, shape=t.shape, stride=t.stride()) for t in p]
replicated = [shard(torch.rand(t.shape), t.device_mesh, [Replicate()] * t.device_mesh.ndim) for t in p]
plain = [torch.rand(t.shape) for t in p]
for what, call in [
    ("a Partial placement", lambda: torch._foreach_mul_(partial, 2.0)),
    ("unlike shardings", lambda: torch._foreach_add_(p, replicated)),
    ("a scalar tensor", lambda: torch._foreach_mul_(p, torch.tensor(0.5))),
    ("two meshes", lambda: torch._foreach_mul_([*p, *lists(21, LAYOUTS[1])], 2.0)),
]:
    asked.clear()
    try:
        with torch.no_grad(), Asked():
            call()
    except NotImplementedError:  # DTensor's own refusal (two meshes, on some releases)
        pass
    assert any("_foreach_" in a for a in asked), f"{what}: DTensor was not asked"
asked.clear()
try:
    with torch.no_grad():
        torch._foreach_add_(p, plain)
except Exception:  # DTensor refuses a plain tensor beside DTensors: its own answer, unchanged
    pass
print("OK", len(adam) * len(LAYOUTS))

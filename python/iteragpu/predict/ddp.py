"""A user's `DistributedDataParallel` on a prediction: PyTorch's own DDP cannot run without a GPU
(its C++ reducer records CUDA events at every forward), so the class the script constructs is a
subclass whose `Reducer` does to memory what PyTorch's does; the built-in workload's `--shard ddp`
uses the same `Reducer`. As in `torch/nn/parallel/distributed.py` and `reducer.cpp`:

- at construction, one flat gradient buffer per bucket, assigned by PyTorch's own function: with
  `find_unused_parameters=False` (the default) or `static_graph`, every parameter in one bucket
  (per dtype), since the order gradients arrive in is not known yet;
- the first backward records that order; the next forward (with grad enabled) rebuilds the
  buckets from it, with a first bucket of `dist._DEFAULT_FIRST_BUCKET_BYTES` then
  `bucket_cap_mb` (torch 2.15: a given `bucket_cap_mb` is also the first bucket's cap); the old
  buffers are freed before the new ones are made;
- `gradient_as_bucket_view=True`: each gradient, once accumulated, is copied into its bucket's
  view and `.grad` becomes that view, so the gradient's own tensor is freed (no separate gradient
  bytes); with `False`, gradients and buckets are both held.

The forward is the module's; `no_sync`, `join` and comm hooks behave as their contracts say, moving
no data (the fake process group moves none either). `isinstance(model, DistributedDataParallel)`
holds for libraries that bound the original class (accelerate, the Trainer, Lightning). Not
followed, said in the notes: torch 2.15's `lazy_bucket_allocation` and DDP's `mixed_precision`."""

from __future__ import annotations

import contextlib
import sys
import weakref
from typing import Any, Callable, Iterator


class Reducer:
    """The gradient buckets of one DDP model, held by `holder` (`_iteragpu_ddp_buckets`, which the
    session tags as communication buffers) and rebuilt as PyTorch rebuilds them."""

    def __init__(
        self,
        torch: Any,
        module: Any,
        holder: Any,
        bucket_cap_bytes: int,
        first_cap_bytes: int,
        find_unused: bool = False,
        static_graph: bool = False,
        as_view: bool = False,
        ignored: Any = (),
    ) -> None:
        import torch.distributed as dist

        self.torch = torch
        self.dist = dist
        self.holder = weakref.ref(holder)
        self.bucket_cap = bucket_cap_bytes
        self.first_cap = first_cap_bytes
        self.find_unused = find_unused
        self.static_graph = static_graph
        self.as_view = as_view
        self.params, self.sparse = _params_for_reducer(torch, module, set(ignored))
        self.sparse_of = {id(p): s for p, s in zip(self.params, self.sparse)}
        if static_graph or not find_unused:
            limits = [sys.maxsize]
        elif first_cap_bytes < bucket_cap_bytes:
            limits = [first_cap_bytes, bucket_cap_bytes]
        else:
            limits = [bucket_cap_bytes]
        indices, _ = dist._compute_bucket_assignment_by_size(self.params, limits, self.sparse)
        # DDP reverses them: gradients arrive roughly in the reverse order of the parameters.
        self.buckets: list[Any] = []
        holder._iteragpu_ddp_buckets = self.buckets
        self.views: dict[int, Any] = {}
        self.rebuilt = False
        self.ready_order: list[int] = []
        self._initialize(list(reversed(indices)), self.params)
        for index, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(lambda p, i=index: self._ready(i, p))
        module.register_forward_pre_hook(lambda m, args: self._before_forward())

    def _initialize(self, indices: list[list[int]], order: list[Any]) -> None:
        """`Reducer::initialize_buckets`: the old buffers dropped, one new flat buffer per bucket,
        and (as a view) a gradient already there moved into its bucket."""
        torch = self.torch
        self.buckets.clear()
        self.views.clear()
        for bucket in indices:
            members = [order[i] for i in bucket]
            if any(self.sparse_of[id(p)] for p in members):
                continue  # a sparse gradient's bucket holds no dense buffer
            flat = torch.empty(sum(p.numel() for p in members), dtype=members[0].dtype, device=members[0].device)
            self.buckets.append(flat)
            offset = 0
            for p in members:
                self.views[id(p)] = flat[offset : offset + p.numel()].view(p.shape)
                offset += p.numel()
        if self.as_view:
            for p in self.params:
                view = self.views.get(id(p))
                if view is not None and p.grad is not None:
                    with torch.no_grad():
                        view.copy_(p.grad)
                    p.grad = view

    def _should_rebuild(self) -> bool:
        return (self.static_graph or not self.find_unused) and not self.rebuilt

    def _syncing(self) -> bool:
        holder = self.holder()
        return holder is None or getattr(holder, "require_backward_grad_sync", True)

    def _ready(self, index: int, p: Any) -> None:
        """DDP's autograd hook on one parameter: its arrival recorded for the rebuild, and as a
        view, the gradient moved into the bucket."""
        if not self._syncing():
            return  # no_sync(): the reducer does not expect its hooks
        if self._should_rebuild() and index not in self.ready_order:
            self.ready_order.append(index)
        view = self.views.get(id(p))
        if self.as_view and view is not None and p.grad is not None and p.grad is not view:
            with self.torch.no_grad():
                view.copy_(p.grad)
            p.grad = view

    def _before_forward(self) -> None:
        """`_rebuild_buckets` before a forward with grad enabled, from the order of the first backward."""
        if not self.torch.is_grad_enabled() or not self._should_rebuild() or not self.ready_order:
            return
        order = [self.params[i] for i in self.ready_order]
        limits = [self.first_cap, self.bucket_cap]
        indices, _ = self.dist._compute_bucket_assignment_by_size(
            order, limits, [self.sparse[i] for i in self.ready_order], list(range(len(order)))
        )
        self.rebuilt = True
        self._initialize(indices, order)


def _params_for_reducer(torch: Any, module: Any, ignored: set[str]) -> tuple[list[Any], list[bool]]:
    """`_build_params_for_reducer`: the parameters that require grad, in module order, shared
    ones once, less `_ddp_params_and_buffers_to_ignore`; and whether each has sparse gradients."""
    seen: set[int] = set()
    params: list[Any] = []
    sparse: list[bool] = []
    for module_name, sub in module.named_modules():
        for param_name, p in sub.named_parameters(recurse=False):
            name = f"{module_name}.{param_name}" if module_name else param_name
            if not p.requires_grad or name in ignored or id(p) in seen:
                continue
            seen.add(id(p))
            params.append(p)
            sparse.append(isinstance(sub, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and bool(sub.sparse))
    return params, sparse


def first_bucket_cap(bucket_cap_mb: Any) -> int:
    """The first bucket's cap after the rebuild: torch 2.15's `_BucketCapacityConfig` uses
    `dist._DEFAULT_FIRST_BUCKET_BYTES` only when `bucket_cap_mb` is not given; earlier releases
    always pass the default."""
    import torch.distributed as dist
    import torch.nn.parallel.distributed as distributed

    default = int(getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", 1 << 20))
    if bucket_cap_mb is not None and hasattr(distributed, "_BucketCapacityConfig"):
        return int(bucket_cap_mb * 1024 * 1024)
    return default


def install(torch: Any, note: Callable[[str], None]) -> None:
    import torch.distributed as dist
    import torch.nn.parallel.distributed as distributed

    original = distributed.DistributedDataParallel
    if getattr(original, "_iteragpu", False):
        return

    class DistributedDataParallel(original):  # type: ignore[misc, valid-type]
        _iteragpu = True

        def __init__(
            self,
            module: Any,
            device_ids: Any = None,
            output_device: Any = None,
            dim: int = 0,
            broadcast_buffers: bool = True,
            init_sync: bool = True,
            process_group: Any = None,
            bucket_cap_mb: Any = None,
            find_unused_parameters: bool = False,
            check_reduction: bool = False,
            gradient_as_bucket_view: bool = False,
            static_graph: bool = False,
            **kwargs: Any,
        ) -> None:
            torch.nn.Module.__init__(self)
            self.module = module
            self.device_ids = device_ids
            self.output_device = output_device
            self.dim = dim
            self.broadcast_buffers = broadcast_buffers
            self.process_group = process_group if process_group is not None else dist.group.WORLD
            self.find_unused_parameters = find_unused_parameters
            self.gradient_as_bucket_view = gradient_as_bucket_view
            self.static_graph = static_graph
            self.require_backward_grad_sync = True
            self.require_forward_param_sync = True
            self.mixed_precision = kwargs.get("mixed_precision")
            cap = 25 if bucket_cap_mb is None else bucket_cap_mb
            self.bucket_bytes_cap = int(cap * 1024 * 1024)
            self._iteragpu_reducer = Reducer(
                torch,
                module,
                self,
                self.bucket_bytes_cap,
                first_bucket_cap(bucket_cap_mb),
                find_unused=find_unused_parameters,
                static_graph=static_graph,
                as_view=gradient_as_bucket_view,
                ignored=getattr(module, "_ddp_params_and_buffers_to_ignore", ()),
            )
            world = dist.get_world_size(self.process_group) if dist.is_initialized() else 1
            note(
                f"DistributedDataParallel (the script's, {world} ranks): its gradient buckets laid out and rebuilt as PyTorch's reducer does "
                f"(bucket_cap_mb {cap}, gradient_as_bucket_view={gradient_as_bucket_view}), its all-reduce moving no data; PyTorch's C++ reducer is not run"
            )
            for option in ("lazy_bucket_allocation", "mixed_precision"):
                if kwargs.get(option):
                    note(f"DistributedDataParallel({option}=...): not followed; the buckets are held from construction, in the parameters' dtype")

        def forward(self, *inputs: Any, **kwargs: Any) -> Any:
            return self.module(*inputs, **kwargs)

        @contextlib.contextmanager
        def no_sync(self) -> Iterator[None]:
            previous = self.require_backward_grad_sync
            self.require_backward_grad_sync = False
            try:
                yield
            finally:
                self.require_backward_grad_sync = previous

        @contextlib.contextmanager
        def join(self, *args: Any, **kwargs: Any) -> Iterator[None]:
            yield

        def register_comm_hook(self, state: Any, hook: Any) -> None:
            note("DistributedDataParallel.register_comm_hook: the hook is not run (the buckets' all-reduce moves no data in a prediction)")

        def _register_builtin_comm_hook(self, comm_hook_type: Any) -> None:
            return None

        def _set_static_graph(self) -> None:
            self.static_graph = True
            self._iteragpu_reducer.static_graph = True

        def _get_ddp_logging_data(self) -> dict[str, Any]:
            return {}

        def will_sync_module_buffers(self) -> bool:
            return False

    DistributedDataParallel.__name__ = DistributedDataParallel.__qualname__ = "DistributedDataParallel"
    DistributedDataParallel.__module__ = original.__module__
    # Every module that bound the original by name, torch's own included.
    for other in list(sys.modules.values()):
        namespace = getattr(other, "__dict__", None)
        if isinstance(namespace, dict):
            for key, value in list(namespace.items()):
                if value is original:
                    namespace[key] = DistributedDataParallel

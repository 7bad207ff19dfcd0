"""A user's `DistributedDataParallel` on a prediction: PyTorch's own DDP cannot run without a GPU
(its C++ reducer records CUDA events at every forward), so the class the script constructs is a
subclass that does what DDP does to memory, as the built-in workload's `--shard ddp` does
(`workloads/sharding.py::emulate_ddp`): one flat buffer per gradient bucket, the buckets assigned
by PyTorch's own function with the script's `bucket_cap_mb`, kept alive with the wrapper; the
forward is the module's; `no_sync`, `join` and comm hooks behave as their contracts say, moving no
data (the fake process group moves none either). `isinstance(model, DistributedDataParallel)`
holds for libraries that bound the original class (accelerate, the Trainer, Lightning).

Not followed, said in the notes: `gradient_as_bucket_view=True` (the gradients are views of the
buckets on a GPU; here they stay separate tensors: one gradient's bytes high), and the second
iteration's bucket rebuild."""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Iterator


def install(torch: Any, note: Callable[[str], None]) -> None:
    import torch.distributed as dist
    import torch.nn.parallel.distributed as distributed

    from ..workloads.sharding import emulate_ddp

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
            emulate_ddp(torch, module, int(cap * 1024 * 1024), holder=self)
            world = dist.get_world_size(self.process_group) if dist.is_initialized() else 1
            note(
                f"DistributedDataParallel (the script's, {world} ranks): its gradient buckets laid out as PyTorch assigns them "
                f"(bucket_cap_mb {cap}), its all-reduce moving no data; PyTorch's C++ reducer is not run"
            )
            if gradient_as_bucket_view:
                note("DistributedDataParallel(gradient_as_bucket_view=True): the gradients are views of the buckets on a GPU; here they stay separate tensors (one gradient's bytes high)")

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

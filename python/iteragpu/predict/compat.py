"""What older PyTorch releases do differently with fake tensors, made to behave as the newest do.
Each fix looks at the installed torch itself, never at a version number, and does nothing where
that torch already behaves."""

from __future__ import annotations

from typing import Any, Callable


def install(torch: Any) -> None:
    from .idioms import after_import

    _swap_fake_parameters(torch)
    _collectives_on_fake_tensors(torch)
    _conv_backend_without_a_driver(torch)
    _fused_gru_cell_on_fake_tensors(torch)
    _fused_optimizers_on_fake_tensors(torch)
    after_import("torch.distributed.tensor._random", _dtensor_rng)


def _swap_fake_parameters(torch: Any) -> None:
    """`Module.cuda()` / `.to()` on fake parameters. Newer torch swaps a FakeTensor parameter with
    its moved copy (`Module._apply`: `or isinstance(param, FakeTensor)`); older ones (2.6) assign
    `param.data = moved`, which leaves a FakeTensor's own device attribute on the CPU, so the next
    op mixes cuda:0 and cpu. A module holding a fake parameter is moved with PyTorch's own swap
    path (`torch.__future__.set_swap_module_params_on_conversion`), for that module only."""
    import inspect

    from torch._subclasses.fake_tensor import FakeTensor

    Module = torch.nn.Module
    original = Module._apply
    try:
        if "FakeTensor" in inspect.getsource(original):
            return  # this torch swaps fake parameters itself
    except (OSError, TypeError):
        pass
    future = torch.__future__

    def _apply(module: Any, fn: Any, recurse: bool = True) -> Any:
        if future.get_swap_module_params_on_conversion() or not any(
            isinstance(p, FakeTensor) for p in module._parameters.values()
        ):
            return original(module, fn, recurse)
        future.set_swap_module_params_on_conversion(True)
        try:
            return original(module, fn, recurse)
        finally:
            future.set_swap_module_params_on_conversion(False)

    Module._apply = _apply


# c10d's collectives (the ops behind torch.distributed's calls), given a Meta kernel where the
# installed torch has none.
_C10D_OPS: tuple[str, ...] = (
    "broadcast_", "allreduce_", "allreduce_coalesced_", "allgather_", "_allgather_base_",
    "allgather_coalesced_", "allgather_into_tensor_coalesced_", "reduce_scatter_",
    "_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_", "reduce_", "gather_", "scatter_",
    "alltoall_", "alltoall_base_", "barrier", "monitored_barrier_", "send", "recv_",
    "recv_any_source_",
)
_LIBRARIES: list[Any] = []  # a torch.library registration lasts as long as its Library object


def _collectives_on_fake_tensors(torch: Any) -> None:
    """`dist.all_reduce(t)` and friends on fake tensors, over PyTorch's fake process group. Newer
    torch registers a Meta kernel for every c10d collective (torch/distributed/_meta_registrations.py:
    the tensors are returned as they are, with a finished fake Work); older ones (2.6) have none,
    so FakeTensorMode refuses the op ("no fake impl or Meta kernel") and DDP's and FSDP2's phases
    stop. The same kernels are registered where missing, with the Work of a one-rank
    FakeProcessGroup (already completed: `wait()` returns at once)."""
    try:
        import torch.distributed as dist

        if not dist.is_available():
            return
        from torch._C._distributed_c10d import FakeProcessGroup
    except (ImportError, AttributeError):
        return
    lib = None
    done: list[Any] = []

    def work() -> Any:
        if not done:
            from torch.utils._python_dispatch import _disable_current_modes

            with _disable_current_modes():
                done.append(FakeProcessGroup(0, 1).allreduce([torch.zeros(0)]))
        return done[0].boxed()

    for name in _C10D_OPS:
        packet = getattr(torch.ops.c10d, name, None)
        op = getattr(packet, "default", None) if packet is not None else None
        if op is None or torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "Meta"):
            continue
        returns = [str(r.type) for r in op._schema.returns]
        if lib is None:
            lib = torch.library.Library("c10d", "IMPL")  # noqa: TOR901
            _LIBRARIES.append(lib)
        lib.impl(name, _meta_collective(returns, work), "Meta")


def _fused_gru_cell_on_fake_tensors(torch: Any) -> None:
    """`nn.GRU` with cuDNN disabled on CUDA runs `aten::_thnn_fused_gru_cell` (and its backward)
    per step. Newer torch registers Meta kernels for both (torch/_meta_registrations.py,
    `_thnn_fused_gru_cell_meta` and `_thnn_fused_gru_cell_backward`); older ones (2.6) have the
    LSTM cell's only, so FakeTensorMode falls back to running the CUDA kernel and asks the driver.
    The same kernels, ported from torch 2.15's file, are registered where missing: the cell gives
    hy (hx's shape) and a workspace of [batch, 5 × hidden]; the backward gives the gates' gradients
    [batch, 3 × hidden] twice, hx's, and the biases' (their sums over the batch) when it has them."""
    aten = torch.ops.aten
    cell = getattr(getattr(aten, "_thnn_fused_gru_cell", None), "default", None)
    backward = getattr(getattr(aten, "_thnn_fused_gru_cell_backward", None), "default", None)
    has = torch._C._dispatch_has_kernel_for_dispatch_key

    def gru_cell(input_gates: Any, hidden_gates: Any, hx: Any, input_bias: Any = None, hidden_bias: Any = None) -> Any:
        workspace = hx.new_empty((hx.size(0), hx.size(1) * 5))
        hy = torch.empty_like(hx, memory_format=torch.contiguous_format)
        return hy, workspace

    def gru_cell_backward(grad_hy: Any, workspace: Any, has_bias: bool) -> Any:
        gates_shape = (grad_hy.size(0), grad_hy.size(1) * 3)
        grad_input_gates = workspace.new_empty(gates_shape)
        grad_hidden_gates = workspace.new_empty(gates_shape)
        grad_hx = torch.empty_like(grad_hy, memory_format=torch.contiguous_format)
        grad_input_bias = grad_input_gates.sum(0, keepdim=False) if has_bias else None
        grad_hidden_bias = grad_hidden_gates.sum(0, keepdim=False) if has_bias else None
        return grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias

    lib = None
    for op, kernel in ((cell, gru_cell), (backward, gru_cell_backward)):
        if op is None or has(op.name(), "Meta"):
            continue
        if lib is None:
            lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901
            _LIBRARIES.append(lib)
        lib.impl(op.name().split("::", 1)[1], kernel, "Meta")


# The fused optimizer kernels of torch.optim (`fused=True`): in-place on the parameters, their
# gradients and their states, returning nothing.
FUSED_OPTIMIZERS = ("_fused_sgd_", "_fused_adagrad_", "_fused_adam_", "_fused_adamw_")


def _fused_optimizers_on_fake_tensors(torch: Any) -> None:
    """`torch.optim.SGD(..., fused=True)` and Adagrad's fused step have no Meta kernel in any
    torch from 2.6 to 2.15 (Adam's and AdamW's have one, for a float `lr` only), so FakeTensorMode
    falls back to the CUDA kernel and asks the driver ("Found no NVIDIA driver"). Each of these
    kernels updates its tensor lists in place through `multi_tensor_apply`, which hands the
    tensors' addresses to the kernel as arguments: it allocates no device memory of its own (its
    states, `momentum_buffer` and `step` tensors included, are allocated by torch.optim's Python
    before the call, where the prediction sees them). Its Meta kernel is therefore empty: every
    overload (`.default`, `.tensor_lr`) without one gets it, checked on the installed torch."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    names = [n for n in torch._C._dispatch_get_all_op_names() if n.split(".", 1)[0] in {f"aten::{f}" for f in FUSED_OPTIMIZERS}]
    lib = None
    for name in sorted(names):
        if has(name, "Meta"):
            continue
        if lib is None:
            lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901
            _LIBRARIES.append(lib)
        lib.impl(name.split("::", 1)[1], _in_place_without_allocations, "Meta")


def _in_place_without_allocations(*args: Any, **kwargs: Any) -> None:
    """A kernel that updates its arguments in place and allocates nothing (a fake tensor's data
    are not there to update)."""
    return None


def _conv_backend_without_a_driver(torch: Any) -> None:
    """torch 2.6's fake convolution asks `torch._C._select_conv_backend` for the backend, only to
    choose the output's memory format; for a CUDA tensor that query reaches cuDNN through the
    driver and raises "CUDA driver version is insufficient" on a machine without one (newer torch
    no longer asks). The format sets the output's strides, never its bytes: when the query raises
    a CUDA error, the slow backend's answer (the input's own, contiguous, format) is given."""
    select = getattr(torch._C, "_select_conv_backend", None)
    slow = getattr(getattr(torch._C, "_ConvBackend", None), "Slow2d", None)
    if select is None or slow is None or getattr(select, "_iteragpu_guarded", False):
        return

    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return select(*args, **kwargs)
        except RuntimeError as e:
            if "CUDA" not in str(e):
                raise
            return slow

    guarded._iteragpu_guarded = True  # type: ignore[attr-defined]
    torch._C._select_conv_backend = guarded


def _meta_collective(returns: list[str], work: Callable[[], Any]) -> Callable[..., Any]:
    """What the op returns, from its schema: its first argument (the tensors, modified in place)
    and a Work, a Work alone, or nothing."""
    if not returns:
        return lambda *args, **kwargs: None
    if len(returns) == 1:
        return lambda *args, **kwargs: work()
    return lambda *args, **kwargs: (args[0], work())


def _dtensor_rng(module: Any) -> None:
    """DTensor's random ops (FSDP2's `init_weights` after `to_empty`) on fake tensors. The first one
    creates `OffsetBasedRNGTracker`, which broadcasts rank 0's RNG state and compares it with its
    own element by element (`all(a == b)`: a read of data-less values); torch 2.15 skips that sync
    under fake tensors (`run_state_sync = not _are_we_tracing()`), 2.11 and older do not. Over the
    fake process group nothing is synchronised anyway: the sync is skipped here too. Older trackers
    (2.6) also read their RNG offset with `.item()` at every random op (`get_offset`): there, the
    offset bookkeeping, which only chooses the numbers each shard draws and never the memory, is
    turned off (`distribute_region_enabled = False`)."""
    import inspect

    cls = getattr(module, "OffsetBasedRNGTracker", None)
    if cls is None or getattr(cls, "_iteragpu_compat", False):
        return
    original = cls.__init__
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        return
    if "run_state_sync" not in signature.parameters:
        return
    reads_offsets = hasattr(cls, "get_offset")

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments["run_state_sync"] = False
        original(*bound.args, **bound.kwargs)
        if reads_offsets:
            self.distribute_region_enabled = False

    cls.__init__ = __init__
    cls._iteragpu_compat = True

"""The causal-lm training model spread over the ranks of a torchrun job (`--shard ddp|fsdp`).

- `init`: the process group, in its own phase, with a first collective: NCCL creates its
  communicator and buffers there, outside PyTorch's allocator (the driver's view shows them).
- DDP: a full replica per rank (`DistributedDataParallel`), gradients all-reduced by buckets.
- FSDP2: the model built on the meta device, `fully_shard` on every decoder layer (the model's
  `_no_split_modules`) then on the root (embeddings, final norm, lm_head, tied or not), with
  `MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)` for bf16-mixed (reduce_dtype
  explicit: PyTorch 2.15 changed its default), then materialised on the rank's device with
  `to_empty` and initialised: every rank holds its shard only.

Under `iteragpu predict --world-size N` the process group is already PyTorch's fake one (the
phase still runs its first collective, so that predicted and measured phases match). DDP's C++
reducer cannot run on fake tensors (it reads their data pointers): there, the prediction's own
reducer (`predict/ddp.py`, shared with a script's own DDP) lays out and rebuilds its buckets.
"""

from __future__ import annotations

from typing import Any

from ..recorder import Recorder


def init(rec: Recorder, torch: Any, device: Any) -> Any:
    """The default process group (NCCL on CUDA, gloo on the CPU) and a first all-reduce."""
    import torch.distributed as dist

    with rec.phase("init_process_group") as info:
        if dist.is_initialized():
            pass  # a prediction's fake process group
        elif device.type == "cuda":
            dist.init_process_group("nccl", device_id=device)
        else:
            dist.init_process_group("gloo")
        probe = torch.zeros(1, device=device)
        dist.all_reduce(probe)
        del probe
        info["backend"] = str(dist.get_backend())
        info["world_size"] = dist.get_world_size()
        info["rank"] = dist.get_rank()
    return dist


def decoder_layers(model: Any) -> list[Any]:
    """The modules FSDP2 shards one by one: the model's own `_no_split_modules` classes."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"{type(model).__name__} declares no decoder layer class (_no_split_modules is empty): "
            "iteragpu cannot tell FSDP2 what to shard; use --shard ddp"
        )
    return layers


def build_fsdp(
    torch: Any, transformers: Any, config: Any, dtype: Any, device: Any, precision: str | None, gradient_checkpointing: bool
) -> tuple[Any, dict[str, Any]]:
    """The model sharded with FSDP2 on `device`; returns it and what was done."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    if precision == "bf16-mixed":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    else:
        policy = MixedPrecisionPolicy()
    layers = decoder_layers(model)
    mesh = device_mesh(torch, device)
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    model.to_empty(device=device)
    info: dict[str, Any] = {"shard": "fsdp", "fsdp_groups": len(layers) + 1, "mixed_precision": precision == "bf16-mixed"}
    try:
        with torch.no_grad():
            model.init_weights()
        info["weights"] = "initialised by init_weights() on the shards"
    except Exception as exc:  # transformers' init_weights may raise anything on shards; the values do not change the memory: said, not hidden
        info["weights"] = f"left uninitialised (init_weights failed: {type(exc).__name__}: {exc})"
    return model, info


def predicting() -> bool:
    """True on PyTorch's fake process group (`iteragpu predict --world-size`)."""
    import torch.distributed as dist

    return dist.is_initialized() and str(dist.get_backend()) == "fake"


def device_mesh(torch: Any, device: Any) -> Any:
    """One mesh over every rank of the default group, built once. Its coordinates come from
    real (CPU) tensors even during a prediction: DeviceMesh finds its rank with `nonzero`, which
    fake tensors cannot answer."""
    import contextlib

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    try:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
    except ImportError:
        unset_fake_temporarily = contextlib.nullcontext
    with unset_fake_temporarily():
        return init_device_mesh(device.type, (dist.get_world_size(),))


def wrap_ddp(torch: Any, model: Any, device: Any) -> Any:
    """A full replica per rank, gradients all-reduced in buckets (PyTorch's defaults:
    gradient_as_bucket_view=False, a first bucket of 1 MiB then 25 MiB)."""
    if predicting():
        return emulate_ddp(torch, model)
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def emulate_ddp(torch: Any, model: Any) -> Any:
    """What DDP does to memory, on fake tensors, with PyTorch's defaults (bucket_cap_mb 25,
    gradient_as_bucket_view=False): the prediction's own reducer (`predict/ddp.py`), its buckets
    held with the model."""
    from ..predict.ddp import Reducer, first_bucket_cap

    model._iteragpu_reducer = Reducer(torch, model, model, 25 << 20, first_bucket_cap(None))
    return model


def local(tensor: Any) -> Any:
    """A rank's own part of a sharded tensor (a DTensor's local shard), else the tensor."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor

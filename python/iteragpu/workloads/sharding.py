"""The causal-lm training model spread over the ranks of a torchrun job (`--shard ddp|fsdp`).

- `init`: the process group, in its own phase, with a first collective: NCCL creates its
  communicator and buffers there, outside PyTorch's allocator (the driver's view shows them).
- DDP: a full replica per rank (`DistributedDataParallel`), gradients all-reduced by buckets.
- FSDP2: the model built on the meta device, `fully_shard` on every decoder layer (the model's
  `_no_split_modules`) then on the root (embeddings, final norm, lm_head, tied or not), with
  `MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)` for bf16-mixed (reduce_dtype
  explicit: PyTorch 2.15 changed its default), then materialised on the rank's device with
  `to_empty` and initialised: every rank holds its shard only.

Under `iteragpu predict --world-size N` the process group is already PyTorch's fake one: nothing
is initialised here then.
"""


def init(rec, torch, device):
    """The default process group (NCCL on CUDA, gloo on the CPU) and a first all-reduce."""
    import torch.distributed as dist

    if dist.is_initialized():
        return dist
    with rec.phase("init_process_group") as info:
        if device.type == "cuda":
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


def decoder_layers(model):
    """The modules FSDP2 shards one by one: the model's own `_no_split_modules` classes."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"{type(model).__name__} declares no decoder layer class (_no_split_modules is empty): "
            "iteragpu cannot tell FSDP2 what to shard; use --shard ddp"
        )
    return layers


def build_fsdp(torch, transformers, config, dtype, device, precision, gradient_checkpointing):
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
    for layer in layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    model.to_empty(device=device)
    info = {"shard": "fsdp", "fsdp_groups": len(layers) + 1, "mixed_precision": precision == "bf16-mixed"}
    try:
        with torch.no_grad():
            model.init_weights()
        info["weights"] = "initialised by init_weights() on the shards"
    except Exception as exc:  # the values do not change the memory; said, not hidden
        info["weights"] = f"left uninitialised (init_weights failed: {type(exc).__name__}: {exc})"
    return model, info


def wrap_ddp(torch, model, device):
    """A full replica per rank, gradients all-reduced in buckets (PyTorch's defaults)."""
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def local(tensor):
    """A rank's own part of a sharded tensor (a DTensor's local shard), else the tensor."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor

"""A training loop measured phase by phase: forward, loss, backward, optimizer_step, zero_grad for
every step (the first step creates the optimizer states and is not the steady state), then an
evaluation (no-grad pass) and an export (state dict to CPU, then a safetensors file in a temporary
folder). With `whole_loop`, the same steps run as one phase with no synchronization inside.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from typing import Any, Callable, ContextManager

from ..recorder import Recorder
from ..spec import CausalLm, Dense, Vision
from . import Missing


def make_optimizer(torch: Any, params: list[Any], name: str) -> Any:
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3)
    if name in ("adamw-8bit", "paged-adamw-8bit"):
        try:
            import bitsandbytes as bnb
        except Exception as exc:  # a broken install raises more than ImportError: reported as missing

            raise Missing(f"--optimizer {name} needs bitsandbytes, which cannot be imported: {type(exc).__name__}: {exc}") from exc
        # PagedAdamW8bit keeps its states in CUDA unified memory, outside PyTorch's allocator.
        cls = bnb.optim.AdamW8bit if name == "adamw-8bit" else bnb.optim.PagedAdamW8bit
        return cls(params, lr=1e-4)
    raise ValueError(f"unknown optimizer {name!r}")


def autocast(torch: Any, precision: str) -> ContextManager[Any]:
    if precision == "bf16-mixed":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if precision == "fp16-mixed":
        return torch.autocast("cuda", dtype=torch.float16)
    return contextlib.nullcontext()


class _NoScaler:
    """What GradScaler does when loss scaling is off: nothing."""

    def scale(self, loss: Any) -> Any:
        return loss

    def step(self, optimizer: Any) -> None:
        optimizer.step()

    def update(self) -> None:
        pass


def scaler_for(torch: Any, precision: str) -> Any:
    """fp16-mixed scales the loss (torch.amp.GradScaler), as fp16 training does; else nothing."""
    if precision == "fp16-mixed":
        return torch.amp.GradScaler("cuda")
    return _NoScaler()


def run(
    rec: Recorder,
    torch: Any,
    spec: Dense | CausalLm | Vision,
    model: Any,
    forward: Callable[[Any], Any],
    loss_fn: Callable[[Any], Any],
    batch_inputs: Any,
    trainable: list[Any],
) -> None:
    """`forward(inputs)` → output; `loss_fn(output)` → scalar loss; `trainable` → parameters."""
    assert spec.training is not None  # called for training specs only
    precision = spec.training.precision
    optimizer = make_optimizer(torch, trainable, spec.training.optimizer)
    scaler = scaler_for(torch, precision)
    steps = spec.training.steps
    if spec.whole_loop:
        with rec.phase("whole_loop", steps=steps, protocol="whole-loop") as info:
            losses = []
            for _ in range(steps):
                with autocast(torch, precision):
                    out = forward(batch_inputs)
                    loss = loss_fn(out)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                losses.append(loss)
                del out, loss
            info["losses"] = [float(x.item()) for x in losses]
            del losses
    else:
        for step in range(steps):
            began = time.perf_counter()
            with rec.phase("forward", step=step):
                with autocast(torch, precision):
                    out = forward(batch_inputs)
            with rec.phase("loss", step=step) as info:
                with autocast(torch, precision):
                    loss = loss_fn(out)
                info["loss"] = float(loss.item())
            with rec.phase("backward", step=step):
                scaler.scale(loss).backward()
            del out, loss
            with rec.phase("optimizer_step", step=step, first_step=(step == 0)):
                scaler.step(optimizer)
                scaler.update()
            with rec.phase("zero_grad", step=step) as info:
                optimizer.zero_grad(set_to_none=True)
                info["step_duration_s"] = time.perf_counter() - began
    with rec.phase("evaluation"):
        with torch.no_grad(), autocast(torch, precision):
            out = forward(batch_inputs)
            loss = loss_fn(out)
        del out, loss
    with rec.phase("export") as info:
        # A sharded model exports each rank's own shards (as distributed checkpoints do).
        state = {k: _local(v).detach().to("cpu") for k, v in model_state(model).items()}
        info["tensors"] = len(state)
        try:
            from safetensors.torch import save_file
        except Exception as exc:  # a broken install raises more than ImportError; recorded: the CPU copy was still measured
            info["safetensors"] = f"not saved: {type(exc).__name__}: {exc}"
        else:
            with tempfile.TemporaryDirectory(prefix="iteragpu-export-") as folder:
                save_file({k: v.contiguous() for k, v in state.items()}, f"{folder}/model.safetensors")
            info["safetensors"] = "saved to a temporary folder"
        del state


def _local(tensor: Any) -> Any:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def model_state(model: Any) -> dict[str, Any]:
    if hasattr(model, "state_dict"):
        return model.state_dict()
    return {}

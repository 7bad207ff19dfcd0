"""A small original dense network on synthetic inputs of shape (batch, context, width).

Architecture: `depth` residual blocks, each LayerNorm(width) → Linear(width, 4·width) → GELU →
Linear(4·width, width), added to the block's input. Parameters per block: 8·width² + 7·width.
With several devices the blocks are split into contiguous groups, one group per device, and the
activations move from device to device (pipeline style). Inference passes run under no_grad;
`task = train` runs the training loop of `training.py` with a mean-squared-error loss.
"""

from __future__ import annotations

from typing import Any

from .. import built_once, names
from ..recorder import Recorder
from ..spec import Dense
from . import training


def parameters(width: int, depth: int) -> int:
    return depth * (8 * width * width + 7 * width)


class DenseNet:
    """The blocks and where they live; `state_dict` for the export phase."""

    def __init__(self, torch: Any, width: int, depth: int, dtype: Any, devices: list[Any]) -> None:
        nn = torch.nn
        self.blocks: list[tuple[Any, Any]] = []
        for i in range(depth):
            device = devices[i * len(devices) // depth]
            block = nn.Sequential(
                nn.LayerNorm(width, device=device, dtype=dtype),
                nn.Linear(width, 4 * width, device=device, dtype=dtype),
                nn.GELU(),
                nn.Linear(4 * width, width, device=device, dtype=dtype),
            )
            self.blocks.append((device, block))

    def parameters(self) -> list[Any]:
        return [p for _, block in self.blocks for p in block.parameters()]

    def state_dict(self) -> dict[str, Any]:
        state = {}
        for i, (_, block) in enumerate(self.blocks):
            for k, v in block.state_dict().items():
                state[f"blocks.{i}.{k}"] = v
        return state

    def forward(self, torch: Any, x: Any, checkpoint: bool = False) -> Any:
        for device, block in self.blocks:
            x = x.to(device)
            if checkpoint:
                x = x + torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = x + block(x)
        return x


def run(rec: Recorder, torch: Any, spec: Dense) -> None:
    width, depth = spec.width, spec.depth
    dtype = names.torch_dtype(torch, spec.dtype, "the worker spec")
    devices = [torch.device(d) for d in spec.devices]
    torch.manual_seed(spec.seed)
    rec.describe(
        workload="dense",
        architecture=f"{depth} × [LayerNorm({width}) → Linear({width}, {4 * width}) → GELU → Linear({4 * width}, {width})] + residual",
        parameters=parameters(width, depth),
        dtype=spec.dtype,
    )
    with rec.phase("model_load", parameters=parameters(width, depth)):
        net = DenseNet(torch, width, depth, dtype, devices)
    # The build point (built_once.py): a predicted sweep's trial may trace the batch and context
    # symbolically from here (predict/symbolic.py).
    spec = built_once.resume(spec)
    batch, context = spec.batch, spec.context
    with rec.phase("inputs", requested_shape=[batch, context, width]) as inputs:
        x = torch.randn(batch, context, width, device=devices[0], dtype=dtype)
        inputs["processed_shape"] = list(x.shape)
    if spec.training is not None:
        target = torch.randn(batch, context, width, device=devices[-1], dtype=dtype)
        checkpoint = spec.training.gradient_checkpointing
        training.run(
            rec,
            torch,
            spec,
            net,
            lambda inp: net.forward(torch, inp, checkpoint=checkpoint),
            lambda out: torch.nn.functional.mse_loss(out.float(), target.float()),
            x,
            net.parameters(),
        )
        return
    with torch.no_grad():
        if spec.whole_loop:
            passes = 1 + spec.warmup + spec.repeats
            with rec.phase("whole_loop", passes=passes, protocol="whole-loop"):
                for _ in range(passes):
                    y = net.forward(torch, x)
                    del y
            return
        with rec.phase("cold_forward", processed_shape=list(x.shape)):
            y = net.forward(torch, x)
        del y
        with rec.phase("warmup", passes=spec.warmup):
            for _ in range(spec.warmup):
                y = net.forward(torch, x)
                del y
        for repeat in range(spec.repeats):
            if spec.empty_cache == "between-repeats":
                torch.cuda.empty_cache()
            with rec.phase("warm_forward", repeat=repeat):
                y = net.forward(torch, x)
            del y

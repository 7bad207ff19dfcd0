"""A small original dense network on synthetic inputs of shape (batch, context, width).

Architecture: `depth` residual blocks, each LayerNorm(width) → Linear(width, 4·width) → GELU →
Linear(4·width, width), added to the block's input. Parameters per block: 8·width² + 7·width.
With several devices the blocks are split into contiguous groups, one group per device, and the
activations move from device to device (pipeline style). Forward passes run under no_grad.
"""


def parameters(width, depth):
    return depth * (8 * width * width + 7 * width)


def _build(torch, width, depth, dtype, devices):
    nn = torch.nn
    blocks = []
    for i in range(depth):
        device = devices[i * len(devices) // depth]
        block = nn.Sequential(
            nn.LayerNorm(width, device=device, dtype=dtype),
            nn.Linear(width, 4 * width, device=device, dtype=dtype),
            nn.GELU(),
            nn.Linear(4 * width, width, device=device, dtype=dtype),
        )
        blocks.append((device, block))
    return blocks


def _forward(blocks, x):
    for device, block in blocks:
        x = x.to(device)
        x = x + block(x)
    return x


def run(rec, torch, spec):
    width, depth = spec["width"], spec["depth"]
    batch, context = spec["batch"], spec["context"]
    dtype = getattr(torch, spec["dtype"])
    devices = [torch.device(d) for d in spec["devices"]]
    torch.manual_seed(spec["seed"])
    rec.describe(
        workload="dense",
        architecture=f"{depth} × [LayerNorm({width}) → Linear({width}, {4 * width}) → GELU → Linear({4 * width}, {width})] + residual",
        parameters=parameters(width, depth),
        dtype=spec["dtype"],
    )
    with rec.phase("model_load", parameters=parameters(width, depth)):
        blocks = _build(torch, width, depth, dtype, devices)
    with rec.phase("inputs", requested_shape=[batch, context, width]) as inputs:
        x = torch.randn(batch, context, width, device=devices[0], dtype=dtype)
        inputs["processed_shape"] = list(x.shape)
    with torch.no_grad():
        with rec.phase("cold_forward", processed_shape=list(x.shape)):
            y = _forward(blocks, x)
        del y
        with rec.phase("warmup", passes=spec["warmup"]):
            for _ in range(spec["warmup"]):
                y = _forward(blocks, x)
                del y
        for repeat in range(spec["repeats"]):
            if spec["empty_cache"] == "between-repeats":
                torch.cuda.empty_cache()
            with rec.phase("warm_forward", repeat=repeat):
                y = _forward(blocks, x)
            del y

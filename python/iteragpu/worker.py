"""The measured process: one fresh worker per trial, started by the iteragpu CLI.

`python -m iteragpu.worker SPEC.json` emits JSON Lines events on its original stdout
(hello, environment, describe, phase_start, phase_end, unavailable, done) and exits with
0 (ok), 2 (PyTorch or GPU missing: nothing measured) or 3 (the workload failed).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

from . import history, probe, ranks, recorder
from . import spec as specs
from .channel import PROTOCOL, Channel
from .spec import WorkerSpec
from .workload import explain_hard_exit, run_workload


def run(channel: Channel, spec: WorkerSpec, rank: dict[str, Any] | None = None) -> int:
    hello: dict[str, Any] = {"pid": os.getpid(), "protocol": PROTOCOL}
    if rank is not None:
        hello["rank"] = rank
    channel.emit("hello", hello)
    try:
        import torch
    except Exception as exc:  # a broken install raises more than ImportError (OSError, RuntimeError): reported
        channel.emit(
            "unavailable",
            {
                "reason": f"PyTorch cannot be imported by {sys.executable}: {type(exc).__name__}: {exc}; "
                "install PyTorch with a GPU backend, or choose another interpreter with --python"
            },
        )
        return 2
    if spec.predict is not None:
        channel.emit("environment", probe.collect(torch, []))
        from . import predict

        return predict.run(channel, spec, spec.predict)
    if rank is not None:
        # Before anything touches CUDA: no rank opens a context on another rank's device.
        try:
            torch.cuda.set_device(torch.device(spec.devices[0]))
        except Exception as exc:  # any CUDA error here is said; the probe below refuses an unusable device
            channel.emit("note", {"text": f"torch.cuda.set_device({spec.devices[0]}) failed: {type(exc).__name__}: {exc}"})
    env = probe.collect(torch, list(spec.devices))
    channel.emit("environment", env)
    if not env["can_measure"]:
        channel.emit("unavailable", {"reason": env["reason"]})
        return 2
    rec = recorder.Recorder(torch, list(spec.devices), channel.emit)
    recorder._set_current(rec)
    if spec.history:
        rec.history = history.History(torch, spec.history, channel.emit).start()
    explain_hard_exit(
        rec,
        channel.emit,
        lambda text: channel.emit("note", {"text": text}),
        lambda: rec.history.finish() if rec.history is not None else None,
    )
    try:
        if spec.memory_limit_bytes:
            try:
                rec.describe(memory_limit=emulate_limit(torch, spec))
            except BaseException as exc:
                return failed(channel, exc)
        return run_workload(rec, torch, spec, channel.emit)
    finally:
        if rec.history is not None:
            rec.history.finish()


def failed(channel: Channel, exc: BaseException) -> int:
    channel.emit(
        "done",
        {
            "status": "failed",
            "error": {"type": type(exc).__name__, "message": recorder.bounded_message(exc), "traceback": traceback.format_exc()[-4000:]},
        },
    )
    return 3


def emulate_limit(torch: Any, spec: WorkerSpec) -> dict[str, Any]:
    """Emulates a smaller card: caps PyTorch's allocator at the limit minus the memory this process
    already holds outside it (CUDA context, libraries), measured here, on every device."""
    assert spec.memory_limit_bytes is not None  # run() calls this only with a limit
    limit = int(spec.memory_limit_bytes)
    applied = []
    for name in spec.devices:
        device = torch.device(name)
        free, total = torch.cuda.mem_get_info(device)
        outside = max(0, (total - free) - torch.cuda.memory_reserved(device))
        capacity = torch.cuda.get_device_properties(device).total_memory
        fraction = (limit - outside) / capacity
        if not 0 < fraction <= 1:
            raise ValueError(
                f"cannot emulate {limit} bytes on {name}: the device has {capacity} bytes and "
                f"{outside} are already used outside PyTorch's allocator"
            )
        torch.cuda.set_per_process_memory_fraction(fraction, device)
        applied.append({"device": name, "fraction": fraction, "outside_allocator_bytes": outside, "total_memory": capacity})
    return {"bytes": limit, "emulated": True, "devices": applied}


def main() -> int:
    rank = ranks.identity()
    if rank is None:
        channel = Channel.take_stdout()
    else:
        ranks.die_with_agent()
        channel = Channel(ranks.connect())  # the CLI's socket (iteragpu.ranks)
        ranks.stop_on_signals(channel)
    with open(sys.argv[1], encoding="utf-8") as f:
        doc = json.load(f)
    return run_spec(channel, doc, rank)


def run_spec(channel: Channel, doc: Any, rank: dict[str, Any] | None = None, end: bool = True) -> int:
    """The worker on a spec already read (a fork server's child gets it in its request);
    `end=False` returns instead of ending a predicting process (a builder: built_once.py)."""
    spec = specs.parse(doc)
    if rank is not None:
        spec = ranks.for_rank(spec, rank)
    code = run(channel, spec, rank)
    if spec.predict is not None and end:
        from .predict import finish

        finish(code)
    return code


if __name__ == "__main__":
    sys.exit(main())

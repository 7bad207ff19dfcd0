"""An independent oracle for `iteragpu predict`: the same workload on the same fake CUDA tensors,
with PyTorch's own MemTracker (torch.distributed._tools.mem_tracker) doing the accounting instead of
iteragpu's tracker. Prints one JSON list: per phase, MemTracker's peak of live CUDA storage bytes
(each storage counted once, rounded to 512 bytes, as MemTracker does on CUDA).

Usage: memtracker_oracle.py JOB.json — a worker spec with its `predict` target.
Exits 77 (reason on stderr) when torch or MemTracker is not importable or the shims cannot build.
"""

import json
import os
import sys

try:
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker
except Exception as exc:
    print(f"torch with MemTracker is needed: {type(exc).__name__}: {exc}", file=sys.stderr)
    sys.exit(77)

from torch._subclasses.fake_tensor import DataDependentOutputException
from torch.utils._python_dispatch import TorchDispatchMode

from iteragpu import recorder, worker
from iteragpu import spec as specs
from iteragpu.predict import native, session
from iteragpu.predict.native import Unavailable


class Placeholders(TorchDispatchMode):
    """`.item()` of a fake tensor answers 0 (False), as the prediction does: no accounting here."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            try:
                return func(*args, **(kwargs or {}))
            except DataDependentOutputException:
                return False if args[0].dtype == torch.bool else 0
        return func(*args, **(kwargs or {}))


class Oracle(MemTracker):
    """MemTracker, told that a workload calls its modules again (warm repeats, training steps):
    module statistics restart; the device totals this oracle reads are untouched."""

    class _NoHook:
        def remove(self):
            pass

    # The session's tracker, whose `suspended` flag marks DTensor's shape inference (global-shape
    # fake tensors that no rank ever allocates on a GPU): not counted here either.
    suspend_source = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        source = self.suspend_source
        if source is not None and getattr(source.local, "suspended", 0):
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)

    def _pre_fw_hook(self, module, inputs):
        # MemTracker hooks every parameter's gradient; a frozen one (LoRA's base) cannot take a
        # hook: mark it as hooked already.
        for p in module.parameters():
            if not p.requires_grad and self._param_to_grad_hook_handles.get(p, None) is None:
                self._param_to_grad_hook_handles[p] = (self._NoHook(), self._NoHook())
        try:
            super()._pre_fw_hook(module, inputs)
        except NotImplementedError:
            self.reset_mod_stats()
            super()._pre_fw_hook(module, inputs)

    def _pre_bw_hook(self, module, args):
        if module in self.memory_tracking:
            super()._pre_bw_hook(module, args)

    def _post_bw_hook(self, module, args):
        if module in self.memory_tracking:
            super()._post_bw_hook(module, args)


def main():
    # The workload's own prints go to stderr; the result alone to the original stdout.
    sys.stdout.flush()
    result = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    with open(sys.argv[1], encoding="utf-8") as f:
        job = json.load(f)
    spec = specs.parse(job)
    try:
        native.enable(torch)
        mode_class = session.fake_mode_class(torch)
        native.self_test(torch, mode_class)
    except Unavailable as exc:
        print(str(exc), file=sys.stderr)
        return 77
    s = session.Session(torch, lambda kind, data: None, spec, spec.predict, mode_class)
    s.install()  # the same fake CUDA world; iteragpu's tracker is never entered here
    tracker = Oracle()
    tracker.suspend_source = s.tracker
    peaks = []

    def cuda(snapshot):
        return sum(v["Total"] if isinstance(v, dict) else v for d, v in snapshot.items() if d.type == "cuda")

    def counters():
        # A script's own torch.cuda counters: under `predict` the CLI's allocator model answers
        # them; here, with no CLI, MemTracker's live CUDA bytes (the oracle never reads them).
        now = cuda(tracker.get_tracker_snapshot())
        peak = max(now, sum(v for d, v in tracker._peak_mem.items() if d.type == "cuda"))
        return {f"{name}.all.{field}": value for name in ("allocated_bytes", "reserved_bytes") for field, value in (("current", now), ("peak", peak))}

    s.tracker.memory.stats = counters

    def emit(kind, data):
        if kind == "phase_start":
            # The phase's peak starts from the current level (as reset_peak_memory_stats does).
            tracker._peak_mem_snap = tracker.get_tracker_snapshot()
            tracker._peak_mem = {d: v["Total"] for d, v in tracker._peak_mem_snap.items()}
        elif kind == "phase_end":
            peak = sum(v for d, v in tracker._peak_mem.items() if d.type == "cuda")
            peaks.append({"name": data["name"], "status": data["status"], "peak_bytes": peak})

    rec = recorder.Recorder(torch, list(spec.devices), emit)
    recorder._set_current(rec)
    fake = mode_class(allow_non_fake_inputs=True)
    s.fake_modes.append(fake)
    errors = []

    def done(kind, data):
        if kind == "done" and data.get("error"):
            errors.append(data["error"])

    with fake, Placeholders(), tracker:
        code = worker.run_workload(rec, torch, spec, done)
    result.write(json.dumps({"code": code, "phases": peaks, "errors": errors}) + "\n")
    result.flush()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)

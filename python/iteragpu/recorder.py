"""The phase protocol of the guide, for every selected device:

1. synchronize, then read allocated and reserved (start levels);
2. reset the peak statistics;
3. run the phase, keeping what the next phases need;
4. synchronize, read both peaks and both end levels (and mem_get_info);
5. record success or the error. A value that could not be read is None with a reason, never 0.
"""

import contextlib
import time

_current = None


def _reading(fn, reasons, field):
    try:
        value = fn()
        return int(value)
    except Exception as exc:  # a failed read is recorded, not hidden
        reasons[field] = f"{type(exc).__name__}: {exc}"
        return None


class Recorder:
    """Runs the protocol around each phase and reports it through `emit(type, data)`."""

    def __init__(self, torch, devices, emit, output=None):
        self.torch = torch
        self.devices = [torch.device(d) for d in devices]
        self._emit = emit
        self._index = 0
        self.phases = []
        self.identity = {}
        self.output = output

    def _sync(self, reasons):
        for device in self.devices:
            try:
                self.torch.cuda.synchronize(device)
            except Exception as exc:
                reasons["synchronize"] = f"{type(exc).__name__}: {exc}"

    def _levels(self, device, reasons):
        cuda = self.torch.cuda
        return {
            "allocated": _reading(lambda: cuda.memory_allocated(device), reasons, "allocated"),
            "reserved": _reading(lambda: cuda.memory_reserved(device), reasons, "reserved"),
        }

    def describe(self, **identity):
        """Declares the workload's identity and dimensions (model, revision, batch, context…)."""
        self.identity.update(identity)
        self._emit("describe", dict(identity))

    @contextlib.contextmanager
    def phase(self, name, **inputs):
        cuda = self.torch.cuda
        index = self._index
        self._index += 1
        self._emit("phase_start", {"name": name, "index": index, "inputs": inputs})
        start_reasons = {}
        self._sync(start_reasons)
        starts = [self._levels(d, start_reasons) for d in self.devices]
        for device in self.devices:
            try:
                cuda.reset_peak_memory_stats(device)
            except Exception as exc:
                start_reasons["reset_peak_memory_stats"] = f"{type(exc).__name__}: {exc}"
        began = time.perf_counter()
        error = None
        try:
            yield inputs
        except BaseException as exc:  # recorded, then raised again below
            error = exc
        end_reasons = {}
        self._sync(end_reasons)
        duration = time.perf_counter() - began
        devices = []
        for device, start in zip(self.devices, starts):
            reasons = dict(start_reasons)
            end = self._levels(device, reasons)
            info = None
            try:
                free, total = cuda.mem_get_info(device)
                info = {"free_bytes": int(free), "total_bytes": int(total)}
            except Exception as exc:
                reasons["mem_get_info"] = f"{type(exc).__name__}: {exc}"
            reasons.update(end_reasons)
            devices.append(
                {
                    "device": str(device),
                    "start_allocated_bytes": start["allocated"],
                    "start_reserved_bytes": start["reserved"],
                    "peak_allocated_bytes": _reading(lambda: cuda.max_memory_allocated(device), reasons, "peak_allocated"),
                    "peak_reserved_bytes": _reading(lambda: cuda.max_memory_reserved(device), reasons, "peak_reserved"),
                    "end_allocated_bytes": end["allocated"],
                    "end_reserved_bytes": end["reserved"],
                    "mem_get_info": info,
                    "null_reasons": reasons,
                }
            )
        record = {
            "name": name,
            "index": index,
            "inputs": inputs,
            "status": "ok" if error is None else "failed",
            "duration_s": duration,
            "devices": devices,
            "error": None
            if error is None
            else {
                "type": type(error).__name__,
                "message": str(error)[:4000],
                "out_of_memory": _is_oom(self.torch, error),
            },
        }
        self.phases.append(record)
        self._emit("phase_end", record)
        if error is not None:
            raise error


def _is_oom(torch, error):
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(error, oom):
        return True
    return "out of memory" in str(error).lower()


def _active():
    if _current is None:
        raise RuntimeError(
            "no iteragpu recorder is active: run this script with `iteragpu measure --script`, "
            "or create one with iteragpu.Recorder(...)"
        )
    return _current


def phase(name, **inputs):
    """`with iteragpu.phase("forward"): …` inside a script run by `iteragpu measure --script`."""
    return _active().phase(name, **inputs)


def describe(**identity):
    """Declares the script's identity and dimensions: model=…, revision=…, batch=…, context=…"""
    _active().describe(**identity)


def _set_current(recorder):
    global _current
    _current = recorder

"""The caching allocator's own record of allocations, for the post-mortem and the timeline.

Two modes, chosen by the CLI (`spec.history`):

- ``state`` (the default of `measure`): PyTorch keeps the Python frames of each *live* allocation
  and no event history, so its cost is bounded by what is alive. At an out-of-memory, the observer
  PyTorch calls before raising dumps the snapshot into the folder the CLI gave (``oom_dir``) and
  says where (event ``oom_snapshot``); the CLI summarises it with its snapshot reader, the one
  summary of a snapshot, and removes it.
- ``timeline`` (`measure --timeline`): every allocation and free with its frames, bounded by
  ``max_entries``; each phase is marked in the trace's user metadata where this PyTorch has it
  (thread-local: autograd's threads are not marked, so the CLI also splits by time), and the
  snapshot is dumped at the end to the path the CLI gave, for PyTorch's memory_viz.

Anything this PyTorch or its allocator backend does not support is reported as a reason
(event ``history``), never hidden and never fatal to the measurement.
"""

from __future__ import annotations

import os
import pickle
import time
from typing import Any, Callable


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class History:
    """Starts the allocator's recording and follows the phases; `finish()` dumps the timeline."""

    def __init__(self, torch: Any, config: dict[str, Any], emit: Callable[[str, Any], None]) -> None:
        self.torch = torch
        self.mode = config.get("mode", "state")
        self.max_entries = int(config.get("max_entries") or 100_000)
        self.snapshot = config.get("snapshot")
        self.oom_dir = config.get("oom_dir")
        self.ooms = 0
        self.emit = emit
        self.recording = False
        self.markers = False
        self.observer = False
        self.reasons: dict[str, str] = {}

    def start(self) -> History:
        memory = getattr(self.torch.cuda, "memory", None)
        record = getattr(memory, "_record_memory_history", None)
        if record is None:
            self.reasons["record"] = "this PyTorch has no torch.cuda.memory._record_memory_history"
        else:
            try:
                if self.mode == "timeline":
                    record(enabled="all", context="all", stacks="python", max_entries=self.max_entries)
                else:
                    record(enabled="state", context="alloc", stacks="python")
                self.recording = True
            except Exception as exc:  # any error of PyTorch's private API (cudaMallocAsync and pluggable allocators refuse it): a reason, never fatal
                self.reasons["record"] = _reason(exc)
        supported = getattr(memory, "_memory_metadata_supported", None)
        if self.mode == "timeline" and self.recording and hasattr(memory, "_set_memory_metadata"):
            try:
                self.markers = bool(supported()) if supported else True
            except Exception as exc:  # PyTorch's private API: any error is a reason, never fatal
                self.reasons["markers"] = _reason(exc)
            if not self.markers and "markers" not in self.reasons:
                self.reasons["markers"] = "the allocator backend records no metadata"
        elif self.mode == "timeline":
            self.reasons.setdefault("markers", "this PyTorch has no torch.cuda.memory._set_memory_metadata")
        attach = getattr(getattr(self.torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            self.reasons["observer"] = "this PyTorch has no out-of-memory observer"
        else:
            try:
                attach(self._on_oom)
                self.observer = True
            except Exception as exc:  # PyTorch's private API: any error is a reason, never fatal
                self.reasons["observer"] = _reason(exc)
        self.emit(
            "history",
            {
                "mode": self.mode,
                "recording": self.recording,
                "max_entries": self.max_entries if self.mode == "timeline" else None,
                "phase_markers": self.markers,
                "oom_observer": self.observer,
                "null_reasons": dict(self.reasons),
            },
        )
        return self

    def _on_oom(self, device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        """Called by PyTorch before it raises an out-of-memory: dumps what was alive at that moment
        for the CLI to summarise (each out-of-memory in its own file: the CLI reads them as their
        events arrive, while the workload may go on)."""
        snapshot: str | None = None
        reason = None
        if not self.oom_dir:
            reason = "the CLI gave the worker no folder for the allocator's snapshot"
        else:
            self.ooms += 1
            path = os.path.join(self.oom_dir, f"oom-{os.getpid()}-{self.ooms}.pickle")
            try:
                # What torch.cuda.memory._dump_snapshot writes, from the older _snapshot API.
                with open(path, "wb") as f:
                    pickle.dump(self.torch.cuda.memory._snapshot(), f)
                snapshot = path
            except Exception as exc:  # inside PyTorch's observer, before its own error: nothing may escape
                reason = _reason(exc)
        self.emit(
            "oom_snapshot",
            {
                "device": f"cuda:{int(device)}",
                "requested_bytes": int(alloc),
                "device_allocated_bytes": int(device_allocated),
                "device_free_bytes": int(device_free),
                "at_unix_us": time.time_ns() // 1000,
                "snapshot": snapshot,
                "reason": reason,
            },
        )

    def phase_start(self, index: int, name: str) -> None:
        if self.markers:
            try:
                self.torch.cuda.memory._set_memory_metadata(f"iteragpu phase {index} {name}")
            except Exception as exc:  # PyTorch's private API: any error stops the markers, said
                self.markers = False
                self.reasons["markers"] = _reason(exc)

    def phase_end(self) -> None:
        if self.markers:
            try:
                self.torch.cuda.memory._set_memory_metadata("")
            except Exception as exc:  # PyTorch's private API: any error stops the markers, said
                self.markers = False
                self.reasons["markers"] = _reason(exc)

    def finish(self) -> None:
        """Dumps the timeline (mode ``timeline``) where the CLI asked; says where or why not."""
        if self.mode != "timeline" or not self.snapshot:
            return
        data: dict[str, str | None] = {"path": None, "reason": None}
        if not self.recording:
            data["reason"] = self.reasons.get("record", "the history was not recorded")
        else:
            try:
                self.torch.cuda.memory._dump_snapshot(self.snapshot)
                data["path"] = self.snapshot
            except Exception as exc:  # a full disk, an unwritable path, PyTorch's private API: said
                data["reason"] = _reason(exc)
            try:
                self.torch.cuda.memory._record_memory_history(enabled=None)
            except Exception:  # stopping the recording is best effort: the snapshot is already out
                pass
        self.emit("snapshot", data)

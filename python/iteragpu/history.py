"""The caching allocator's own record of allocations, for the post-mortem and the timeline.

Two modes, chosen by the CLI (`spec.history`):

- ``state`` (the default of `measure`): PyTorch keeps the Python frames of each *live* allocation
  and no event history, so its cost is bounded by what is alive. At an out-of-memory, the observer
  PyTorch calls before raising takes a snapshot and the largest live blocks are reported with
  their frames (event ``oom_snapshot``).
- ``timeline`` (`measure --timeline`): every allocation and free with its frames, bounded by
  ``max_entries``; each phase is marked in the trace's user metadata where this PyTorch has it
  (thread-local: autograd's threads are not marked, so the CLI also splits by time), and the
  snapshot is dumped at the end to the path the CLI gave, for PyTorch's memory_viz.

Anything this PyTorch or its allocator backend does not support is reported as a reason
(event ``history``), never hidden and never fatal to the measurement.
"""

from __future__ import annotations

import time
from typing import Any, Callable

# At an out-of-memory: how many live blocks and frames per block are reported.
LARGEST_LIVE: int = 10
FRAMES: int = 8


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _is_workload(filename: str) -> bool:
    """A frame of the workload: not PyTorch, not iteragpu's machinery (its built-in workloads
    are workloads), not Python's standard library, not code torch.fx generated. The CLI's snapshot
    reader (`Folder::classify`) has the same rule: both are tested on tests/fixtures/workload_frames.json."""
    if "/torch/" in filename or filename.startswith(("torch/", "<eval_with_key")) or "torchinductor_" in filename:
        return False
    if "iteragpu/" in filename and "iteragpu/workloads/" not in filename:
        return False
    if filename.startswith("<frozen") or (
        "/lib/python3" in filename and "site-packages/" not in filename and "dist-packages/" not in filename
    ):
        return False
    return filename.endswith(".py") or filename.startswith("<")


def _frames(block: dict[str, Any]) -> list[dict[str, Any]]:
    """The block's Python frames (innermost first), the workload's own before the others."""
    frames = [
        {"filename": f.get("filename"), "line": f.get("line"), "name": f.get("name")}
        for f in (block.get("frames") or [])
        if f.get("filename")
    ]
    own = [f for f in frames if _is_workload(f["filename"])]
    rest = [f for f in frames if f not in own]
    return (own + rest)[:FRAMES]


def summarize_live(snapshot: dict[str, Any], device_index: int, limit: int = LARGEST_LIVE) -> dict[str, Any]:
    """The device's segments as the allocator saw them: reserved, live and free bytes, the
    largest free block, and the largest live blocks with their frames."""
    reserved = live = free = largest_free = segments = 0
    blocks = []
    for seg in snapshot.get("segments", []):
        if seg.get("device", device_index) != device_index:
            continue
        segments += 1
        reserved += int(seg.get("total_size", 0))
        for b in seg.get("blocks", []):
            size = int(b.get("size", 0))
            state = b.get("state", "")
            if state.startswith("active"):
                live += size
                blocks.append(b)
            elif state == "inactive":
                free += size
                largest_free = max(largest_free, size)
    blocks.sort(key=lambda b: int(b.get("size", 0)), reverse=True)
    return {
        "segments": segments,
        "reserved_bytes": reserved,
        "live_bytes": live,
        "free_bytes": free,
        "largest_free_block": largest_free,
        "largest_live": [
            {
                "bytes": int(b.get("size", 0)),
                "requested_bytes": b.get("requested_size"),
                "frames": _frames(b),
            }
            for b in blocks[:limit]
        ],
    }


class History:
    """Starts the allocator's recording and follows the phases; `finish()` dumps the timeline."""

    def __init__(self, torch: Any, config: dict[str, Any], emit: Callable[[str, Any], None]) -> None:
        self.torch = torch
        self.mode = config.get("mode", "state")
        self.max_entries = int(config.get("max_entries") or 100_000)
        self.snapshot = config.get("snapshot")
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
        """Called by PyTorch before it raises an out-of-memory: what was alive at that moment."""
        try:
            snapshot = self.torch.cuda.memory._snapshot()
            live: dict[str, Any] | None = summarize_live(snapshot, int(device))
            reason = None
        except Exception as exc:  # inside PyTorch's observer, before its own error: nothing may escape
            live, reason = None, _reason(exc)
        self.emit(
            "oom_snapshot",
            {
                "device": f"cuda:{int(device)}",
                "requested_bytes": int(alloc),
                "device_allocated_bytes": int(device_allocated),
                "device_free_bytes": int(device_free),
                "at_unix_us": time.time_ns() // 1000,
                "live": live,
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

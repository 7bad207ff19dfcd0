"""Fake torch.cuda.memory: the allocation history and the memory snapshot.

    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="all",
                                             max_entries=sys.maxsize, clear_history=False)
    torch.cuda.memory._set_memory_metadata(text)      # stamped on the following trace entries
    torch.cuda.memory._get_memory_metadata()
    torch.cuda.memory._snapshot()                     # the dict below
    torch.cuda.memory._dump_snapshot(path)            # pickle.dump of it, as PyTorch does
    torch.cuda.memory.memory_snapshot()               # its "segments"

The snapshot has PyTorch 2.5+'s structure, from the fake allocator's layout:

    {"segments": [{"device", "address", "total_size", "allocated_size", "active_size",
                   "requested_size", "stream": 0, "segment_type": "small" | "large",
                   "segment_pool_id": (0, 0), "is_expandable": False, "frames",
                   "blocks": [{"address", "size", "requested_size",
                               "state": "active_allocated" | "inactive", "frames"}]}],
     "device_traces": [[{"action", "addr" (or "device_free" for "oom"), "size", "stream": 0,
                         "time_us", "compile_context": "N/A", "user_metadata", "frames"?}]
                       one list per device],
     "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF", "max_split_size", ...},
     "external_annotations": []}

Actions: alloc, free_requested, free_completed (together: the fake frees at once),
segment_alloc (a growth of the reserved bytes), segment_free and segment_unmap (empty_cache),
oom. Frames are Python's call stack (traceback.extract_stack(), innermost first, the fake
allocator's own frames left out) as {"name", "filename", "line"} dicts shared between stacks; a
block's frames are the list of its alloc entry. As in PyTorch: context None records no frames,
"state" only on blocks, "alloc" also on alloc entries (and their free_completed), "all" also on
free_requested and segment frees; enabled None stops recording, "state" keeps one entry;
max_entries keeps the newest entries of each device (the oldest are dropped).
"""

import collections
import os
import pickle
import sys
import threading
import time
import traceback

import torch as _torch

_ALLOCATOR_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__init__.py")
_INTERNAL = {"alloc", "free", "_place", "empty_cache", "_unmap"}
_HERE = os.path.abspath(__file__)


class _History:
    def __init__(self):
        self.enabled = None
        self.context = None
        self.max_entries = sys.maxsize
        self.traces = {}
        self.frame_dicts = {}
        self.local = threading.local()

    def _frames(self):
        out = []
        for f in reversed(traceback.extract_stack()):
            path = os.path.abspath(f.filename)
            if path == _HERE or (path == _ALLOCATOR_FILE and f.name in _INTERNAL):
                continue
            key = (f.filename, f.lineno, f.name)
            d = self.frame_dicts.get(key)
            if d is None:
                d = self.frame_dicts[key] = {"name": f.name, "filename": f.filename, "line": f.lineno}
            out.append(d)
        return out

    def alloc_frames(self):
        """The allocating stack, when any context is recorded."""
        return self._frames() if self.enabled is not None and self.context is not None else None

    def state_frames(self, frames):
        return frames if self.context in ("state", "alloc", "all") else None

    def free_frames(self, alloc_frames):
        return self._frames() if self.enabled is not None and self.context == "all" else None

    def completed_frames(self, alloc_frames):
        return alloc_frames if self.context in ("alloc", "all") else None

    def metadata(self):
        return getattr(self.local, "metadata", "")

    def record(self, device, action, addr, size, frames, device_free=None):
        if self.enabled is None:
            return
        entry = {"action": action}
        if action == "oom":
            entry["device_free"] = device_free
        else:
            entry["addr"] = addr
        entry["size"] = size
        entry["stream"] = 0
        entry["time_us"] = time.time_ns() // 1000
        entry["compile_context"] = "N/A"
        entry["user_metadata"] = self.metadata()
        if frames is not None and (action != "alloc" or self.context in ("alloc", "all")):
            entry["frames"] = frames
        trace = self.traces.get(device)
        if trace is None:
            trace = self.traces[device] = collections.deque(maxlen=self.max_entries)
        trace.append(entry)


_HISTORY = _History()


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None, clear_history=False, **_ignored):
    if isinstance(enabled, bool):  # the legacy signature: (enabled, record_context, trace_alloc_max_entries, ...)
        enabled = "all" if enabled else None
    if enabled not in (None, "state", "all"):
        raise RuntimeError("expected state to be 'state', 'all', or None")
    if context not in (None, "state", "alloc", "all"):
        raise RuntimeError("expected context to be 'state', 'alloc', 'all', or None")
    if stacks not in ("python", "all"):
        raise RuntimeError("expected stacks to be 'python', or 'all'")
    h = _HISTORY
    h.enabled, h.context = enabled, context if enabled is not None else None
    h.max_entries = max(1, int(max_entries)) if enabled == "all" else 1
    for index, trace in list(h.traces.items()):
        h.traces[index] = collections.deque([] if clear_history else trace, maxlen=h.max_entries)


def _set_memory_metadata(metadata):
    _HISTORY.local.metadata = str(metadata)


def _get_memory_metadata():
    return _HISTORY.metadata()


_EMPTY_FRAMES = []


def _segment(a, segment):
    blocks, allocated, requested = [], 0, 0
    for b in segment.blocks:
        if b.allocated:
            allocated += b.size
            requested += b.requested
        blocks.append(
            {
                "address": b.address,
                "size": b.size,
                "requested_size": b.requested,
                "state": "active_allocated" if b.allocated else "inactive",
                "frames": b.frames if b.allocated and b.frames is not None else _EMPTY_FRAMES,
            }
        )
    return {
        "device": a.index,
        "address": segment.address,
        "total_size": segment.size,
        "allocated_size": allocated,
        "active_size": allocated,
        "requested_size": requested,
        "stream": 0,
        "segment_type": "large" if segment.is_large else "small",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": segment.frames if segment.frames is not None else _EMPTY_FRAMES,
        "blocks": blocks,
    }


def _settings():
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", os.environ.get("PYTORCH_ALLOC_CONF", ""))
    return {
        "PYTORCH_CUDA_ALLOC_CONF": conf,
        "max_split_size": -1,
        "garbage_collection_threshold": 0.0,
        "expandable_segments": "expandable_segments:true" in conf.replace(" ", "").lower(),
        "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False,
        "roundup_power2_divisions": {},
    }


def _snapshot(device=None, augment_with_fx_traces=False):
    segments = [
        _segment(a, g) for a in _torch._ALLOCATORS for g in sorted(a.segments, key=lambda g: g.address)
    ]
    traces = [list(_HISTORY.traces.get(a.index, ())) for a in _torch._ALLOCATORS]
    return {
        "segments": segments,
        "device_traces": traces,
        "allocator_settings": _settings(),
        "external_annotations": [],
    }


def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False):
    s = _snapshot()
    with open(filename, "wb") as f:
        pickle.dump(s, f)


def memory_snapshot():
    return _snapshot()["segments"]


def memory_stats(device=None):
    return _torch.cuda.memory_stats(device)


def reset_peak_memory_stats(device=None):
    return _torch.cuda.reset_peak_memory_stats(device)

"""The phase protocol of the guide, for every selected device:

1. synchronize, then read allocated and reserved (start levels);
2. reset the peak statistics;
3. run the phase, keeping what the next phases need;
4. synchronize, read both peaks and both end levels (and mem_get_info);
5. record success or the error. A value that could not be read is None with a reason, never 0.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, ContextManager, Dict, Iterator, Literal

from .channel import PROTOCOL, Channel

# An event's sender: `emit(type, data)` (the worker's channel, or nothing in a notebook).
Emit = Callable[[str, Any], None]
# A phase's record (`phase_end`'s data), and the open phase's state between `begin` and `end`.
Record = Dict[str, Any]
# Why a reading is None, by field.
Reasons = Dict[str, str]

_current: Recorder | None = None

# A standalone recorder's events file is its result's name with this suffix.
EVENTS_SUFFIX: str = ".events.jsonl"


def builder() -> str:
    """The `iteragpu` command that builds a notebook's result: $ITERAGPU_BIN, else the one pip
    installed beside this Python (the wheel carries it), else the PATH's (as the lab notebook
    finds it)."""
    import os
    import shutil
    import sysconfig

    return os.environ.get("ITERAGPU_BIN") or shutil.which("iteragpu", path=sysconfig.get_path("scripts")) or shutil.which("iteragpu") or "iteragpu"


def _reading(fn: Callable[[], Any], reasons: Reasons, field: str) -> int | None:
    try:
        value = fn()
        return int(value)
    except Exception as exc:  # a failed read is recorded, not hidden
        reasons[field] = f"{type(exc).__name__}: {exc}"
        return None


class Recorder:
    """Runs the protocol around each phase.

    Inside the worker, the CLI passes `emit` and receives every event. In a notebook,
    `Recorder(output="run.json")` records the same events into `run.json.events.jsonl` and, when
    `save()` is called (or at the end of a `with Recorder(...) as rec:` block), has the `iteragpu`
    command build the result from them, as `iteragpu measure` builds a worker's (without the CLI's
    NVML view, said in the result).
    """

    def __init__(self, torch: Any = None, devices: list[str] | None = None, emit: Emit | None = None, output: str | None = None) -> None:
        if torch is None:
            import torch as installed

            torch = installed
        self.torch: Any = torch
        self.devices: list[Any] = [torch.device(d) for d in (devices or ["cuda:0"])]
        self.phases: list[Record] = []
        self.identity: dict[str, Any] = {}
        self.output = output
        self._index = 0
        # Phases open now, innermost last: a phase opened inside another nests in it.
        self._open: list[Record] = []
        self._standalone = emit is None
        # Whether an automatic phase (one the tool opens where the script marks none) reads and
        # resets torch.cuda's counters; a prediction's do not: the replay computes their figures,
        # and what the script reads stays what PyTorch would answer in a run without the tool.
        # A phase the script marks itself resets them under measure and predict alike.
        self.automatic_reads_counters = True
        # Off: no phase reads or resets the counters (a prediction's built-in workload: the
        # replay computes every figure).
        self.reads_counters = True
        # The allocator's recording (iteragpu.history), when the CLI asked for one.
        self.history: Any = None
        self._emit: Emit = emit or (lambda type_, data: None)
        # The standalone recorder's events file, open until `save()`.
        self._events: Channel | None = None
        if self._standalone:
            self._start_standalone(torch)

    @property
    def events_path(self) -> str:
        """Where a standalone recorder writes its events: beside the result it will build."""
        return f"{self.output}{EVENTS_SUFFIX}"

    def _start_standalone(self, torch: Any) -> None:
        import datetime
        import os

        from . import probe

        if self.output is None:
            raise ValueError("Recorder(output=...) needs a file name for the result")
        # From here on, iteragpu.phase() and iteragpu.describe() record into this one.
        if os.path.exists(self.output):
            raise FileExistsError(
                f"{self.output} already exists; iteragpu never overwrites a result: choose a new file name"
            )
        if os.path.exists(self.events_path):
            raise FileExistsError(
                f"{self.events_path} already exists: the events of an earlier Recorder whose result was not built; "
                f"build it with `iteragpu from-events {self.events_path} --output {self.output}`, or choose a new file name"
            )
        environment = probe.collect(torch, [str(d) for d in self.devices])
        if not environment["can_measure"]:
            raise RuntimeError(f"nothing measured: {environment['reason']}")
        self._events = Channel(open(self.events_path, "x", encoding="utf-8"))
        self._emit = self._events.emit
        notebook = {
            "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "code_hash": code_hash(),
            "devices": [str(d) for d in self.devices],
        }
        self._emit("hello", {"pid": os.getpid(), "protocol": PROTOCOL, "notebook": notebook})
        self._emit("environment", environment)
        _set_current(self)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, kind: object, value: object, tb: object) -> Literal[False]:
        if self._standalone:
            self.save()
        return False

    def save(self) -> str:
        """Ends the recording and has the `iteragpu` command build the result (schema
        iteragpu.measure/1) from its events, with create-new semantics; the events file is removed
        once the result is written, kept otherwise."""
        import os
        import subprocess

        assert self.output is not None  # checked when the standalone recorder started
        if self._events is not None:
            failed = next((p for p in self.phases if p["status"] != "ok"), None)
            self._emit("done", {"status": "failed" if failed else "ok", "error": failed["error"] if failed else None})
            self._events.close()
            self._events = None
            self._emit = lambda type_, data: None
        if _current is self:
            _set_current(None)
        command = [builder(), "from-events", self.events_path, "--output", self.output]
        try:
            built = subprocess.run(command, capture_output=True, text=True)
        except OSError as exc:
            raise FileNotFoundError(
                f"the result {self.output} was not built: the `iteragpu` command that builds it from the recorded events "
                f"could not be run ({command[0]}: {exc.strerror or exc}); install iteragpu in this Python environment "
                "(`pip install iteragpu` carries the command) or set ITERAGPU_BIN to its path, then "
                f"`iteragpu from-events {self.events_path} --output {self.output}` builds it: the events are kept in {self.events_path}"
            ) from exc
        # 3: the workload failed, and its result is written all the same.
        if built.returncode not in (0, 3):
            raise RuntimeError(
                f"`{' '.join(command)}` failed (exit status {built.returncode}): {built.stderr.strip()}; "
                f"the events are kept in {self.events_path}"
            )
        os.remove(self.events_path)
        return self.output

    def _sync(self, reasons: Reasons) -> None:
        for device in self.devices:
            try:
                self.torch.cuda.synchronize(device)
            except Exception as exc:  # a CUDA error (the workload's own, surfacing here) is this reading's reason, never fatal
                reasons["synchronize"] = f"{type(exc).__name__}: {exc}"

    def _levels(self, device: Any, reasons: Reasons) -> dict[str, int | None]:
        cuda = self.torch.cuda
        return {
            "allocated": _reading(lambda: cuda.memory_allocated(device), reasons, "allocated"),
            "reserved": _reading(lambda: cuda.memory_reserved(device), reasons, "reserved"),
        }

    def describe(self, **identity: Any) -> None:
        """Declares the workload's identity and dimensions (model, revision, batch, context…)."""
        self.identity.update(identity)
        self._emit("describe", dict(identity))

    @contextlib.contextmanager
    def phase(self, name: str, **inputs: Any) -> Iterator[dict[str, Any]]:
        state = self.begin(name, inputs)
        error = None
        try:
            # The workload may add to its phase's inputs (a processed shape): kept in the record.
            yield state["inputs"]
        except BaseException as exc:  # recorded, then raised again below
            error = exc
        self.end(state, error)
        if error is not None:
            raise error

    def open_phases(self) -> list[Record]:
        """The phases open now, outermost first (their records so far)."""
        return list(self._open)

    def begin(self, name: str, inputs: dict[str, Any] | None = None, automatic: bool = False) -> Record:
        """Opens a phase (the protocol's steps 1 and 2); `end` closes it. A phase opened inside
        another nests in it: the outer one's peak keeps what it reached before the inner one
        reset the counters."""
        cuda = self.torch.cuda
        inputs = inputs if inputs is not None else {}
        index = self._index
        self._index += 1
        parent = self._open[-1]["index"] if self._open else None
        event: dict[str, Any] = {"name": name, "index": index, "inputs": inputs, "parent": parent}
        if automatic:
            event["automatic"] = True
        self._emit("phase_start", event)
        if self.history is not None:
            self.history.phase_start(index, name)
        started_at = time.time_ns() // 1000
        start_reasons: Reasons = {}
        if not self.reads_counters or (automatic and not self.automatic_reads_counters):
            reasons: Reasons = {"predicted": "the replay computes this phase's figures"}
            unread = self._state(name, index, inputs, parent, automatic, started_at, [{"allocated": None, "reserved": None} for _ in self.devices], reasons)
            unread["unread"] = True
            self._open.append(unread)
            return unread
        self._sync(start_reasons)
        starts = [self._levels(d, start_reasons) for d in self.devices]
        # The enclosing phases' peaks so far, before the counters are reset for this one.
        for outer in self._open:
            for k, device in enumerate(self.devices):
                carried = outer["carried"][k]
                for key, read in (("allocated", cuda.max_memory_allocated), ("reserved", cuda.max_memory_reserved)):
                    try:
                        value = int(read(device))
                    except Exception:  # an unreadable peak is not carried; its own phase says why
                        continue
                    carried[key] = max(carried.get(key, 0), value)
        for device in self.devices:
            try:
                cuda.reset_peak_memory_stats(device)
            except Exception as exc:  # this torch's counters may raise anything (a backend without the call): a reason, never fatal
                start_reasons["reset_peak_memory_stats"] = f"{type(exc).__name__}: {exc}"
        state = self._state(name, index, inputs, parent, automatic, started_at, starts, start_reasons)
        self._open.append(state)
        return state

    def _state(self, name: str, index: int, inputs: dict[str, Any], parent: Any, automatic: bool, started_at: int, starts: list[Any], reasons: Reasons) -> Record:
        """An open phase's record (`end` completes it)."""
        return {
            "name": name,
            "index": index,
            "inputs": inputs,
            "parent": parent,
            "automatic": automatic,
            "started_at": started_at,
            "starts": starts,
            "start_reasons": reasons,
            "carried": [{} for _ in self.devices],
            "began": time.perf_counter(),
        }

    def end(self, state: Record, error: BaseException | None = None) -> Record:
        """Closes a phase (steps 4 and 5); phases opened inside it and still open close first."""
        cuda = self.torch.cuda
        while self._open and self._open[-1] is not state:
            self.end(self._open[-1], RuntimeError("its enclosing phase ended first"))
        if self._open and self._open[-1] is state:
            self._open.pop()
        end_reasons: Reasons = {}
        unread = bool(state.get("unread"))
        if not unread:
            self._sync(end_reasons)
        duration = time.perf_counter() - state["began"]
        ended_at = time.time_ns() // 1000
        if self.history is not None:
            self.history.phase_end()
        devices = []
        for k, (device, start) in enumerate(zip(self.devices, state["starts"])):
            if unread:
                devices.append(_unread(device, state["start_reasons"]))
                continue
            reasons = dict(state["start_reasons"])
            end = self._levels(device, reasons)
            info = None
            try:
                free, total = cuda.mem_get_info(device)
                info = {"free_bytes": int(free), "total_bytes": int(total)}
            except Exception as exc:  # any driver or backend error is this reading's reason, never fatal
                reasons["mem_get_info"] = f"{type(exc).__name__}: {exc}"
            reasons.update(end_reasons)
            carried = state["carried"][k]
            peak_allocated, peak_reserved = _peaks(cuda, device, reasons)
            if peak_allocated is not None and "allocated" in carried:
                peak_allocated = max(peak_allocated, carried["allocated"])
            if peak_reserved is not None and "reserved" in carried:
                peak_reserved = max(peak_reserved, carried["reserved"])
            # The enclosing phases keep this one's peak: the counters are not reset here.
            devices.append(
                {
                    "device": str(device),
                    "start_allocated_bytes": start["allocated"],
                    "start_reserved_bytes": start["reserved"],
                    "peak_allocated_bytes": peak_allocated,
                    "peak_reserved_bytes": peak_reserved,
                    "end_allocated_bytes": end["allocated"],
                    "end_reserved_bytes": end["reserved"],
                    "mem_get_info": info,
                    "allocator": _allocator_stats(cuda, device, reasons),
                    "null_reasons": reasons,
                }
            )
            for outer in self._open:
                kept = outer["carried"][k]
                if peak_allocated is not None:
                    kept["allocated"] = max(kept.get("allocated", 0), peak_allocated)
                if peak_reserved is not None:
                    kept["reserved"] = max(kept.get("reserved", 0), peak_reserved)
        record: Record = {
            "name": state["name"],
            "index": state["index"],
            "inputs": state["inputs"],
            "parent": state["parent"],
            "status": "ok" if error is None else "failed",
            "duration_s": duration,
            "started_at_unix_us": state["started_at"],
            "ended_at_unix_us": ended_at,
            "devices": devices,
            "error": None
            if error is None
            else {
                "type": type(error).__name__,
                "message": bounded_message(error),
                "out_of_memory": _is_oom(self.torch, error),
            },
        }
        if state["automatic"]:
            record["automatic"] = True
        self.phases.append(record)
        self._emit("phase_end", record)
        return record


# memory_stats() fields read at each phase end: ".current" is the end level, ".peak" the phase's
# highest (the peaks were reset at the phase's start).
_STATS: dict[str, str] = {
    "active_bytes": "active_bytes.all",
    "inactive_split_bytes": "inactive_split_bytes.all",
    "requested_bytes": "requested_bytes.all",
    "segments": "segment.all",
}


def _unread(device: Any, reasons: Reasons) -> dict[str, Any]:
    """A device's record with no reading (a prediction's phase: the replay computes them)."""
    keys = ("start_allocated_bytes", "start_reserved_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "end_allocated_bytes", "end_reserved_bytes")
    return {"device": str(device), **dict.fromkeys(keys), "mem_get_info": None, "allocator": None, "null_reasons": dict(reasons)}


def _peaks(cuda: Any, device: Any, reasons: Reasons) -> tuple[int | None, int | None]:
    """The phase's peaks on `device`, allocated then reserved (None with a reason when unreadable)."""
    return (
        _reading(lambda: cuda.max_memory_allocated(device), reasons, "peak_allocated"),
        _reading(lambda: cuda.max_memory_reserved(device), reasons, "peak_reserved"),
    )


def _allocator_stats(cuda: Any, device: Any, reasons: Reasons) -> dict[str, Any] | None:
    """The caching allocator's own counters (fragmentation, rounding, retries), or None with a
    reason; with cudaMallocAsync PyTorch reports fewer of them (the missing ones are None)."""
    try:
        stats = cuda.memory_stats(device)
    except Exception as exc:  # cudaMallocAsync and other backends refuse it in their own ways: a reason, never fatal
        reasons["allocator"] = f"{type(exc).__name__}: {exc}"
        return None
    out: dict[str, Any] = {}
    for name, key in _STATS.items():
        for suffix in ("current", "peak"):
            value = stats.get(f"{key}.{suffix}")
            out[f"{name}_{suffix}"] = int(value) if value is not None else None
    for name in ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free"):
        value = stats.get(name)
        out[name] = int(value) if value is not None else None
    try:
        out["largest_free_block"] = _largest_free_blocks(cuda, device)
    except Exception as exc:  # the snapshot's layout differs across torch versions: a reason, never fatal
        reasons["largest_free_block"] = f"{type(exc).__name__}: {exc}"
        out["largest_free_block"] = None
    return out


def _largest_free_blocks(cuda: Any, device: Any) -> dict[str, int]:
    """The largest inactive block of each pool, from the allocator's snapshot of its segments."""
    index = device.index if getattr(device, "index", None) is not None else 0
    largest = {"small": 0, "large": 0}
    for segment in cuda.memory_snapshot():
        if segment.get("device", index) != index:
            continue
        pool = segment.get("segment_type", "large")
        for block in segment.get("blocks", []):
            if block.get("state") == "inactive":
                largest[pool] = max(largest.get(pool, 0), int(block.get("size", 0)))
    return largest


MESSAGE_LIMIT: int = 4000


def bounded_message(error: object, limit: int = MESSAGE_LIMIT) -> str:
    """An error's text within `limit` characters. A long wrapper message keeps the out-of-memory
    text it wraps (the post-mortem parses it): the window around "out of memory", else its head
    and its tail, the cut said by an ellipsis."""
    text = str(error)
    if len(text) <= limit:
        return text
    at = text.lower().find("out of memory")
    if at >= 0:
        start = max(0, at - limit // 4)
        window = text[start : start + limit - 2]
        return ("…" if start > 0 else "") + window + ("…" if start + len(window) < len(text) else "")
    half = (limit - 3) // 2
    return text[:half] + " … " + text[-half:]


def code_hash() -> str:
    """sha256 of this package's files, computed as the CLI computes it (same order, same bytes): the
    notebook's result names the code that recorded it, even when another iteragpu builds it."""
    import hashlib
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest = hashlib.sha256()

    def walk(folder: str) -> None:
        for entry in sorted(os.scandir(folder), key=lambda e: e.path):
            if entry.is_dir():
                if entry.name != "__pycache__":
                    walk(entry.path)
            elif entry.name.endswith(".py"):
                rel = os.path.relpath(entry.path, root).replace(os.sep, "/")
                digest.update(rel.encode() + b"\0")
                with open(entry.path, "rb") as f:
                    digest.update(f.read() + b"\0")

    walk(os.path.join(root, "iteragpu"))
    return "sha256:" + digest.hexdigest()


def _is_oom(torch: Any, error: BaseException) -> bool:
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(error, oom):
        return True
    return "out of memory" in str(error).lower()


_said_inactive: bool = False


def _active() -> Recorder | None:
    """The recorder in charge, or None — said once on stderr: a script that marks its phases
    runs the same with plain `python script.py`, where nothing is recorded."""
    global _said_inactive
    if _current is None and not _said_inactive:
        _said_inactive = True
        import sys

        print(
            "iteragpu: no recorder is active, phases are not recorded (run the script with "
            "`iteragpu measure --script`, or create an iteragpu.Recorder(output=...) first)",
            file=sys.stderr,
        )
    return _current


def phase(name: str, **inputs: Any) -> ContextManager[dict[str, Any]]:
    """`with iteragpu.phase("forward"): …` — recorded under `iteragpu measure --script` or an
    active Recorder; otherwise the block just runs."""
    rec = _active()
    if rec is None:
        return contextlib.nullcontext(inputs)
    return rec.phase(name, **inputs)


def describe(**identity: Any) -> None:
    """Declares the script's identity and dimensions: model=…, revision=…, batch=…, context=…"""
    rec = _active()
    if rec is not None:
        rec.describe(**identity)


def _set_current(recorder: Recorder | None) -> None:
    global _current
    _current = recorder

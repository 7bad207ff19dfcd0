"""The script's own `torch.cuda` memory calls, answered by the one allocator model: the CLI's.

A predicted script that prints `torch.cuda.max_memory_allocated()` must read what the prediction
file says, to the byte. There is no second model on this side: to read the allocator, the worker
sends the events still batched, then a `memory_query`; the CLI steps its model of PyTorch's caching
allocator (`src/prediction/answers.rs`, the replay's own `Device`) over every event received so far
and writes the allocator's counters back, as `torch.cuda.memory_stats()` names them, on the
worker's answer pipe (its standard input, kept apart from the workload's, which reads nothing).
`reset_peak_memory_stats`, `empty_cache` and `reset_accumulated_memory_stats` are events of the
trace: the replay applies them where the script called them, so its later answers follow.

An answer is kept until the next storage event: reading several counters in a row (a phase's
protocol reads six) costs one question.
"""

from __future__ import annotations

import json
import os
import threading
from typing import IO, Any, Callable

# Events that change what the allocator would answer.
CHANGES: frozenset[str] = frozenset({"alloc", "free", "empty_cache", "reset_peaks", "reset_accumulated"})
# The environment variable by which the CLI says that the worker's standard input carries answers.
ANSWERS_VARIABLE: str = "ITERAGPU_ANSWERS"


class NoModel(RuntimeError):
    """No allocator model answers in this process (no CLI started it, or it stopped answering)."""


def take_answers() -> IO[str] | None:
    """The answer pipe the CLI opened on standard input (None when it opened none); standard input
    itself then reads nothing, as it did before, so a workload never consumes an answer."""
    if os.environ.pop(ANSWERS_VARIABLE, None) != "stdin":
        return None
    answers = os.fdopen(os.dup(0), "r", encoding="utf-8")
    empty = os.open(os.devnull, os.O_RDONLY)
    os.dup2(empty, 0)
    os.close(empty)
    return answers


class Memory:
    """One allocator model's answers for the predicting process (see the module's doc)."""

    def __init__(self, emit: Callable[[str, Any], None], answers: IO[str] | None, target: dict[str, Any]) -> None:
        self._emit = emit
        self._answers = answers
        self._owner = os.getpid()
        self._lock = threading.RLock()
        self._next = 0
        # Bumped by the event stream (`changed`) at each event that changes the answers.
        self.version = 0
        self._answered: tuple[int, dict[str, int]] | None = None
        self._total = int(target["total_memory"])
        self._outside = int(target.get("context_bytes", 0))

    def adopt(self) -> None:
        """A trial forked from a builder (built_once.py) asks as the predicting process."""
        self._owner = os.getpid()

    def changed(self) -> None:
        self.version += 1

    def stats(self) -> dict[str, int]:
        """`torch.cuda.memory_stats()`: the model's counters after every event so far."""
        if os.getpid() != self._owner:
            # As on a GPU: a forked child (a DataLoader worker) cannot use CUDA.
            raise RuntimeError("Cannot re-initialize CUDA in forked subprocess (iteragpu's prediction answers the main process only)")
        with self._lock:
            version = self.version
            if self._answered is not None and self._answered[0] == version:
                return dict(self._answered[1])
            if self._answers is None:
                raise NoModel("no allocator model answers in this process: torch.cuda's memory counters are answered only under `iteragpu predict`")
            got = self.ask("memory_query", {}, "torch.cuda's memory counters")
            stats = {str(k): int(v) for k, v in got["stats"].items()}
            self._answered = (version, stats)
            return dict(stats)

    def ask(self, kind: str, data: dict[str, Any], what: str) -> dict[str, Any]:
        """One question to the CLI (`kind`, with `data` and a fresh `id`), its answer line read
        from the answer pipe; `what` names the question in errors."""
        if os.getpid() != self._owner:
            raise RuntimeError(f"{what}: only the predicting process asks the CLI (this is a forked child)")
        from .. import built_once

        if built_once.building():
            built_once.abandon(f"the build asked the CLI ({what}), and no CLI answers a builder")
        with self._lock:
            if self._answers is None:
                raise NoModel(f"{what}: nothing answers in this process (only `iteragpu predict` does)")
            ident = self._next
            self._next += 1
            self._emit(kind, {**data, "id": ident})
            line = self._answers.readline()
            if not line:
                raise NoModel(f"the CLI stopped answering ({what})")
            got: dict[str, Any] = json.loads(line)
            if got.get("id") != ident:
                raise NoModel(f"the CLI answered question {got.get('id')} for question {ident} ({what})")
            return got

    def stat(self, key: str) -> int:
        return self.stats()[key]

    def mem_get_info(self) -> tuple[int, int]:
        """`torch.cuda.mem_get_info()`: free is the card's memory less what the allocator reserves
        and the memory held outside it (the CUDA context, the libraries)."""
        return max(0, self._total - self.stat("reserved_bytes.all.current") - self._outside), self._total

    def reset_peaks(self, device: Any = None) -> None:
        self._emit("reset_peaks", {})

    def empty_cache(self) -> None:
        self._emit("empty_cache", {})

    def reset_accumulated(self, device: Any = None) -> None:
        self._emit("reset_accumulated", {})

"""The event channel: JSON Lines on the process's original standard output.

The worker keeps a private duplicate of file descriptor 1 for events, then points descriptor 1 at
standard error, so that anything the workload prints — Python's print, warnings, C libraries
writing to fd 1 — lands on stderr and can never corrupt the event stream.

Only the process that opened the channel speaks on it: a child forked by the workload (a
DataLoader worker, a pool) inherits the descriptor, but its events are dropped, and the first
fork is said once (a note with the line that forked), so no phase is ever recorded twice.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from types import FrameType
from typing import IO, Any

# Version of the event protocol (the `hello` event carries it).
PROTOCOL: int = 1


class Channel:
    """The worker's event stream: one JSON object a line, `{"type": …, "data": …}`."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        # A rank's stop watchdog writes from another thread: lines must not interleave.
        self._lock = threading.RLock()
        self._owner = os.getpid()
        self._said_fork = False
        os.register_at_fork(before=self._forking)

    def _forking(self) -> None:
        if os.getpid() != self._owner or self._said_fork:
            return
        self._said_fork = True
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and ("/multiprocessing/" in frame.f_code.co_filename or "/iteragpu/" in frame.f_code.co_filename or "/torch/" in frame.f_code.co_filename):
            frame = frame.f_back
        where = f" at {frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else ""
        self.emit(
            "note",
            {"text": f"the workload forked a child process{where} (a DataLoader worker, a pool): its events are ignored, so no phase is recorded twice"},
        )

    def _mine(self) -> bool:
        return os.getpid() == self._owner

    @classmethod
    def take_stdout(cls) -> Channel:
        sys.stdout.flush()
        events = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        os.dup2(2, 1)
        return cls(events)

    @classmethod
    def connect(cls) -> Channel:
        """A rank's channel under torchrun: the CLI's socket (see iteragpu.ranks)."""
        from . import ranks

        return cls(ranks.connect())

    def emit(self, type_: str, data: Any) -> None:
        if not self._mine():
            return
        line = json.dumps({"type": type_, "data": data}, allow_nan=False, default=str)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()

    def close(self) -> None:
        """Ends the stream (a notebook Recorder's events file): a later fork has nothing to say."""
        with self._lock:
            self._said_fork = True
            self._stream.close()

    def write_lines(self, lines: list[str]) -> None:
        """Events already encoded, written at once (a prediction's many storage events)."""
        if lines and self._mine():
            with self._lock:
                self._stream.write("\n".join(lines) + "\n")
                self._stream.flush()

"""The event channel: JSON Lines on the process's original standard output.

The worker keeps a private duplicate of file descriptor 1 for events, then points descriptor 1 at
standard error, so that anything the workload prints — Python's print, warnings, C libraries
writing to fd 1 — lands on stderr and can never corrupt the event stream.

Only the process that opened the channel speaks on it: a child forked by the workload (a
DataLoader worker, a pool) inherits the descriptor, but its events are dropped, and the first
fork is said once (a note with the line that forked), so no phase is ever recorded twice.

The channel is authenticated both ways: each line begins with the run's token (`{"token": "…", `),
which the CLI generates and passes in `ITERAGPU_CHANNEL_TOKEN` (taken out of the environment at
once, so no program the workload starts inherits it), and a forked child's copy of the
descriptor is pointed at /dev/null and its copy of the token forgotten (`os.register_at_fork`).
The CLI drops every line without the token and says how many ("N forged lines ignored").
"""

from __future__ import annotations

import json
import os
import sys
import threading
from types import FrameType
from typing import IO, Any

from . import frames

# Version of the event protocol (the `hello` event carries it).
PROTOCOL: int = 1

# The environment variable that carries the run's channel token (src/schema/events.rs TOKEN_ENV).
TOKEN_ENV: str = "ITERAGPU_CHANNEL_TOKEN"


class Channel:
    """The worker's event stream: one JSON object a line, `{"type": …, "data": …}`."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        # A rank's stop watchdog writes from another thread: lines must not interleave.
        self._lock = threading.RLock()
        self._owner = os.getpid()
        self._said_fork = False
        token = os.environ.pop(TOKEN_ENV, None)
        # What each line begins with in place of its `{`: the token first (what the CLI checks).
        self._prefix = "{" + f'"token": {json.dumps(token)}, ' if token else "{"
        os.register_at_fork(before=self._forking, after_in_child=self._forked)

    def _forked(self) -> None:
        """In a forked child: the token is forgotten and the inherited descriptor leads nowhere, so
        neither this object nor raw writes on the descriptor can speak for the worker."""
        self._prefix = "{"
        try:
            fd = self._stream.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd, inheritable=False)
            os.close(null)
        except (OSError, ValueError):  # a closed stream (a notebook's finished events file)
            pass

    def _forking(self) -> None:
        if os.getpid() != self._owner or self._said_fork:
            return
        self._said_fork = True
        frame: FrameType | None = sys._getframe(1)
        # By location: a user's script in a folder named iteragpu or torch is still theirs.
        ours = frames.package_dirs("multiprocessing", "iteragpu", "torch")
        while frame is not None and frames.under(frame.f_code.co_filename, ours):
            frame = frame.f_back
        where = f" at {frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else ""
        self.emit(
            "note",
            {"text": f"the workload forked a child process{where} (a DataLoader worker, a pool): its events are ignored, so no phase is recorded twice"},
        )

    def adopt(self) -> None:
        """In a trial forked from a builder (built_once.py), once the trial's streams are on the
        standard descriptors: this process speaks on the trial's standard output, with the
        trial's token, and the workload's own fork is said again."""
        token = os.environ.pop(TOKEN_ENV, None)
        self._prefix = "{" + f'"token": {json.dumps(token)}, ' if token else "{"
        self._owner = os.getpid()
        self._said_fork = False
        sys.stdout.flush()
        os.dup2(1, self._stream.fileno())
        os.dup2(2, 1)

    def _mine(self) -> bool:
        return os.getpid() == self._owner

    @classmethod
    def take_stdout(cls) -> Channel:
        sys.stdout.flush()
        events = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        os.dup2(2, 1)
        return cls(events)

    def emit(self, type_: str, data: Any) -> None:
        if not self._mine():
            return
        line = json.dumps({"type": type_, "data": data}, allow_nan=False, default=str)
        with self._lock:
            self._stream.write(self._prefix + line[1:] + "\n")
            self._stream.flush()

    def close(self) -> None:
        """Ends the stream (a notebook Recorder's events file): a later fork has nothing to say."""
        with self._lock:
            self._said_fork = True
            self._stream.close()

    def write_lines(self, lines: list[str]) -> None:
        """Events already encoded, written at once (a prediction's many storage events)."""
        if lines and self._mine():
            if self._prefix != "{":
                lines = [self._prefix + line[1:] for line in lines]
            with self._lock:
                self._stream.write("\n".join(lines) + "\n")
                self._stream.flush()

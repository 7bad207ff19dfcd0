"""The event channel: JSON Lines on the process's original standard output.

The worker keeps a private duplicate of file descriptor 1 for events, then points descriptor 1 at
standard error, so that anything the workload prints — Python's print, warnings, C libraries
writing to fd 1 — lands on stderr and can never corrupt the event stream.
"""

import json
import os
import sys
import threading

# Version of the event protocol (the `hello` event carries it).
PROTOCOL = 1


class Channel:
    def __init__(self, stream):
        self._stream = stream
        # A rank's stop watchdog writes from another thread: lines must not interleave.
        self._lock = threading.RLock()

    @classmethod
    def take_stdout(cls):
        sys.stdout.flush()
        events = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        os.dup2(2, 1)
        return cls(events)

    @classmethod
    def connect(cls):
        """A rank's channel under torchrun: the CLI's socket (see iteragpu.ranks)."""
        from . import ranks

        return cls(ranks.connect())

    def emit(self, type_, data):
        line = json.dumps({"type": type_, "data": data}, allow_nan=False, default=str)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()

    def write_lines(self, lines):
        """Events already encoded, written at once (a prediction's many storage events)."""
        if lines:
            with self._lock:
                self._stream.write("\n".join(lines) + "\n")
                self._stream.flush()

"""The event channel: JSON Lines on the process's original standard output.

The worker keeps a private duplicate of file descriptor 1 for events, then points descriptor 1 at
standard error, so that anything the workload prints — Python's print, warnings, C libraries
writing to fd 1 — lands on stderr and can never corrupt the event stream.
"""

import json
import os
import sys

# Version of the event protocol (the `hello` event carries it).
PROTOCOL = 1


class Channel:
    def __init__(self, stream):
        self._stream = stream

    @classmethod
    def take_stdout(cls):
        sys.stdout.flush()
        events = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        os.dup2(2, 1)
        return cls(events)

    def emit(self, type_, data):
        line = json.dumps({"type": type_, "data": data}, allow_nan=False, default=str)
        self._stream.write(line + "\n")
        self._stream.flush()

    def write_lines(self, lines):
        """Events already encoded, written at once (a prediction's many storage events)."""
        if lines:
            self._stream.write("\n".join(lines) + "\n")
            self._stream.flush()

"""A worker started by torchrun: one rank of a job, on its own device.

torchrun gives its ranks only file descriptors 0-2 and shares its stdout between them, so a rank
sends its events over the CLI's Unix socket (`ITERAGPU_EVENTS_SOCKET`), one connection per rank.
Ranks run in their own sessions, out of reach of the CLI's process group: each asks the kernel to
kill it when torchrun dies, and turns the signals torchrun forwards into an exception, so that
the phase it was in is recorded as stopped and its last events still reach the CLI.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import socket
from types import FrameType
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .channel import Channel
    from .spec import WorkerSpec

EVENTS_SOCKET: str = "ITERAGPU_EVENTS_SOCKET"


class RankStopped(BaseException):
    """torchrun (or the CLI through it) stopped this rank by a signal. The CLI's
    `measure/ranks.rs` knows this name."""


def identity() -> dict[str, Any] | None:
    """This rank's identity from torchrun's environment, or None for a plain worker."""
    if EVENTS_SOCKET not in os.environ or "LOCAL_RANK" not in os.environ:
        return None
    env = os.environ
    return {
        "rank": int(env.get("RANK", "0")),
        "local_rank": int(env["LOCAL_RANK"]),
        "world_size": int(env.get("WORLD_SIZE", "1")),
        "local_world_size": int(env.get("LOCAL_WORLD_SIZE", "1")),
        "node_rank": int(env.get("GROUP_RANK", "0")),
        "host": socket.gethostname(),
        "run_id": env.get("TORCHELASTIC_RUN_ID"),
        "device": None,
    }


def die_with_agent() -> None:
    """PR_SET_PDEATHSIG: a SIGKILL of torchrun takes this rank with it (no orphan holding a GPU)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass  # not Linux: torchrun's own shutdown is all there is
    if os.getppid() == 1:
        os._exit(70)  # torchrun died before the request was made


def connect() -> IO[str]:
    """The rank's event stream: a connection to the CLI's socket; prints go to stderr."""
    import sys

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ[EVENTS_SOCKET])
    sys.stdout.flush()
    os.dup2(2, 1)
    return s.makefile("w", buffering=1, encoding="utf-8")


STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# After a stop signal, how long the rank's Python code gets to record the phase it was in before
# the watchdog ends the process itself (a rank blocked inside a collective never returns to
# Python, where a signal handler would run).
STOP_GRACE_S: float = 3.0


def _message(signum: int) -> str:
    return (
        f"stopped by {signal.Signals(signum).name}: torchrun stops every rank when one ends, "
        "or the run was interrupted"
    )


def stop_on_signals(channel: Channel) -> None:
    """SIGTERM, SIGINT and SIGHUP (torchrun forwards them) raise RankStopped in the main thread,
    so the phase it was in is recorded as stopped. A rank blocked inside a call (a collective
    waiting for a peer that died) never returns to Python to run that handler: a watchdog thread,
    woken by the signal through the wakeup fd, then reports the stop on the channel itself after
    STOP_GRACE_S and ends the process."""
    import threading
    import time

    def _raise(signum: int, frame: FrameType | None) -> None:
        raise RankStopped(_message(signum))

    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    for sig in STOP_SIGNALS:
        signal.signal(sig, _raise)

    def _watch() -> None:
        data = os.read(read_end, 1)
        signum = data[0] if data else signal.SIGTERM
        time.sleep(STOP_GRACE_S)
        channel.emit(
            "done",
            {
                "status": "failed",
                "error": {
                    "type": RankStopped.__name__,
                    "message": _message(signum)
                    + f"; the rank was inside a call for more than {STOP_GRACE_S:.0f} s and did not return to record its phase",
                },
            },
        )
        os._exit(128 + signum)

    threading.Thread(target=_watch, name="iteragpu-stop", daemon=True).start()


def for_rank(spec: WorkerSpec, rank: dict[str, Any]) -> WorkerSpec:
    """The rank's own spec: its device, `devices[LOCAL_RANK]`."""
    devices = tuple(spec.devices)
    k = rank["local_rank"]
    if k >= len(devices):
        raise ValueError(f"local rank {k} has no device: the spec lists {len(devices)}")
    rank["device"] = devices[k]
    return dataclasses.replace(spec, devices=(devices[k],))

"""A launcher called from inside the predicted process (a recipe CLI such as `trl sft`, which
builds an `accelerate launch` and runs it): accelerate's single-process launcher starts the
training script as a child Python, which would run outside the prediction (on a CPU, without
the fake CUDA world). Here it runs in this process instead, as the child would: the command and
the environment accelerate prepares (its own `prepare_simple_launcher_cmd_env`), then the
script (or `-m module`) as `__main__` with that argv. Said in the notes."""

from __future__ import annotations

import os
import runpy
import sys
from types import ModuleType
from typing import Any, Callable


def install_accelerate(module: ModuleType, note: Callable[[str], None]) -> None:
    prepare = getattr(module, "prepare_simple_launcher_cmd_env", None)
    original = getattr(module, "simple_launcher", None)
    if prepare is None or original is None or getattr(original, "_iteragpu", False):
        return

    def simple_launcher(args: Any) -> None:
        cmd, env = prepare(args)
        if not cmd or os.path.basename(str(cmd[0])) not in {os.path.basename(sys.executable), "python", "python3"}:
            return original(args)  # not a Python child: as accelerate runs it
        note(f"accelerate launch (called by the program): its training script ran in the predicted process, as its single child would ({' '.join(map(str, cmd[1:3]))} …)")
        os.environ.update({k: str(v) for k, v in env.items() if k not in ("CUDA_VISIBLE_DEVICES",)})
        rest = [str(c) for c in cmd[1:]]
        saved = sys.argv
        try:
            if rest[:1] == ["-m"]:
                sys.argv = [rest[1]] + rest[2:]
                runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv = rest
                sys.path.insert(0, os.path.dirname(os.path.abspath(rest[0])))
                runpy.run_path(rest[0], run_name="__main__")
        finally:
            sys.argv = saved

    simple_launcher._iteragpu = True  # type: ignore[attr-defined]
    module.simple_launcher = simple_launcher  # type: ignore[attr-defined]

"""The workload itself, the same for a measurement and a prediction: a built-in workload or the
user's script, run in this process (the worker measures around it, the predicting session runs it
on fake CUDA tensors). Neither runner imports the other: both import this."""

from __future__ import annotations

import os
import sys
import traceback
from types import FrameType
from typing import Any, Callable, ContextManager, NoReturn

from . import frames, hub_kernels, recorder
from .recorder import Emit, Recorder
from .spec import CausalLm, Dense, Script, Vision, Vlm, WorkerSpec
from .workloads import Missing


def run_workload(
    rec: Recorder, torch: Any, spec: WorkerSpec, emit: Emit, whole_run: Callable[[str], ContextManager[Any]] | None = None
) -> int:
    """The workload itself, measured or predicted: 0 ok, 2 a package is missing, 3 it failed.
    `whole_run(label)`, when given (a prediction), is a phase around a whole script."""
    try:
        # The spec's record type is its workload (`spec.parse` picks it from `workload`).
        if isinstance(spec, Dense):
            from .workloads import dense

            dense.run(rec, torch, spec)
        elif isinstance(spec, CausalLm):
            from .workloads import causal_lm

            try:
                causal_lm.run(rec, torch, spec)
            except Missing as exc:
                emit("unavailable", {"reason": str(exc)})
                return 2
        elif isinstance(spec, Vision):
            from .workloads import vision

            try:
                vision.run(rec, torch, spec)
            except Missing as exc:
                emit("unavailable", {"reason": str(exc)})
                return 2
        elif isinstance(spec, Vlm):
            from .workloads import vlm

            try:
                vlm.run(rec, torch, spec)
            except Missing as exc:
                emit("unavailable", {"reason": str(exc)})
                return 2
        elif isinstance(spec, Script):
            if whole_run is not None:
                with whole_run(os.path.basename(spec.script)):
                    code = run_script(spec)
            else:
                code = run_script(spec)
            if code != 0:
                raise RuntimeError(f"the script exited with status {code}")
        else:
            raise ValueError(f"unknown workload {spec.workload!r}")
    except BaseException as exc:  # the workload may raise anything, SystemExit included: reported in the done event
        _hub_kernels(emit)
        emit(
            "done",
            {
                "status": "failed",
                "error": {
                    "type": type(exc).__name__,
                    "message": recorder.bounded_message(exc),
                    "traceback": traceback.format_exc()[-4000:],
                },
            },
        )
        return 3
    _hub_kernels(emit)
    emit("done", {"status": "ok"})
    return 0


def _hub_kernels(emit: Emit) -> None:
    """The Hub kernels that ran (a prediction runs none), in the document's `declared.hub_kernels`."""
    ran = hub_kernels.loaded()
    if ran:
        emit("describe", {"hub_kernels": ran})
        emit("note", {"text": hub_kernels.said(ran)})


def run_script(spec: Script) -> int:
    """Runs the user's script as `__main__` with its own arguments; `iteragpu.phase` marks phases."""
    import runpy

    script = spec.script
    entry = spec.entry or {}
    args = launcher_rank(spec)
    try:
        if entry.get("kind") == "module":
            # `python -m MODULE`: the working directory first on the path, as Python puts it.
            sys.argv = [script] + args
            sys.path.insert(0, os.getcwd())
            runpy.run_module(str(entry["name"]), run_name="__main__", alter_sys=True)
        elif entry.get("kind") == "console":
            # A console script: its `module:attr` called as the installed wrapper calls it. The
            # user typed the command (`trl sft …`); `entry` is the one console script of that name
            # that the interpreter's own installed metadata declares (launch.py found it there,
            # as the shell's wrapper would): the only names looked up are that target's.
            import importlib

            sys.argv = [str(entry.get("program", script))] + args
            module_name, _, attrs = str(entry["name"]).partition(":")
            target: Any = importlib.import_module(module_name.strip())
            for attr in attrs.strip().split(".") if attrs.strip() else ():
                target = getattr(target, attr)  # allowlisted: the installed console script's own target
            result = target()
            return result if isinstance(result, int) else (0 if result is None else 1)
        else:
            sys.argv = [script] + args
            sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    return 0


# What a rank's own launch gives it (torchrun's under `measure`, the prediction's fake process
# group): a launcher's value for these is rank 0's, and stands only where the rank has none.
_RANK_OWN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR", "MASTER_PORT")


def launcher_rank(spec: Script) -> list[str]:
    """The environment the command's launcher gives a rank, set in this process (`spec.env`:
    computed by the launcher's own code in iteragpu.launch), and the script's arguments as the
    launcher passes them: DeepSpeed's `--local_rank=N` first, N this rank's LOCAL_RANK."""
    for key, value in (spec.env or {}).items():
        if key in _RANK_OWN or key.startswith("TORCHELASTIC_"):
            os.environ.setdefault(key, str(value))
        else:
            os.environ[key] = str(value)
    args = list(spec.script_args)
    if spec.local_rank_arg:
        args.insert(0, f"--local_rank={os.environ.get('LOCAL_RANK', '0')}")
    return args


_LIBRARIES: tuple[str, ...] = tuple(os.path.join(os.path.realpath(p), "") for p in {sys.prefix, sys.base_prefix, sys.exec_prefix} if p)


def script_frame() -> tuple[str, int] | tuple[None, None]:
    """(file, line) of the innermost frame of the user's own code: outside iteragpu, torch, every
    installed library and the standard library; None, None when there is none."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        file = frame.f_code.co_filename
        own = file.startswith("<") or frames.under(file, frames.package_dirs("iteragpu", "torch"))
        if not own and not os.path.realpath(file).startswith(_LIBRARIES):
            return file, frame.f_lineno
        frame = frame.f_back
    return None, None


def explain_hard_exit(rec: Recorder, emit: Emit, note: Callable[[str], None], finish: Callable[[], object] | None = None) -> None:
    """`os._exit()` in a script ends the process without unwinding: the phases open then end there,
    the run says where it happened (`note`), and `finish` sends what must still go out."""
    from . import built_once

    original = os._exit
    parent = [os.getpid()]  # the worker (a trial forked from a builder adopts it)
    built_once.on_adopt(lambda: parent.__setitem__(0, os.getpid()))

    def _exit(code: int) -> NoReturn:
        if os.getpid() == parent[0]:
            os._exit = original  # once: what follows must not come back here
            file, line = script_frame()
            note(f"os._exit({code}) at {file}:{line} ended the script at once (no unwinding): the phases open then end there")
            for state in reversed(rec.open_phases()):
                rec.end(state)
            if code == 0:
                emit("done", {"status": "ok"})
            else:
                emit("done", {"status": "failed", "error": {"type": "SystemExit", "message": f"os._exit({code}) at {file}:{line}"}})
            if finish is not None:
                finish()
        original(code)

    os._exit = _exit  # type: ignore[assignment]  # replaced on purpose, restored at the first call


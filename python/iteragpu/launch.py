"""A command line as typed (`predict -- torchrun --nproc-per-node 8 train.py …`) resolved to the
Python entry point a launcher would run in each rank, with the launchers' own argument parsers
(torchrun's `get_args_parser`, accelerate's `launch_command_parser`, DeepSpeed's runner): no
parser of ours for their flags.

`python -m iteragpu.launch -- COMMAND ARGS…` prints one JSON object:
{"launcher", "script" (the file that runs: a script, a module's file, an entry point's module),
"entry" (null for a file; {"kind": "module"|"console", "name", "program"}), "args", "world_size"
(null when the launcher gives one process), "env" (what the launcher sets for a rank), "notes"},
or {"error": "…"} with exit status 1. Nothing of the user's code is imported: a module or an
entry point is found by `importlib.util.find_spec` and `importlib.metadata`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import sys
from typing import Any

PYTHONS = re.compile(r"^python(\d+(\.\d+)?)?$")


class LaunchError(Exception):
    """A command this resolver cannot turn into an entry point, with the fix."""


def _module_file(name: str, run_as_main: bool = True) -> str:
    """The file `python -m name` runs (a package's `__main__.py`), or with `run_as_main` False
    the module's own file (a package's `__init__.py`: where an entry point's function lives)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        raise LaunchError(f"module {name!r} cannot be found by {sys.executable}: {exc}") from exc
    if spec is None:
        raise LaunchError(f"module {name!r} is not installed in {sys.executable}: install it, or give the script's path")
    if spec.submodule_search_locations and run_as_main:
        main = importlib.util.find_spec(f"{name}.__main__")
        if main is None or main.origin is None:
            raise LaunchError(f"package {name!r} has no __main__ module: `python -m {name}` cannot run it")
        return str(main.origin)
    if spec.origin is None or not os.path.isfile(spec.origin):
        raise LaunchError(f"module {name!r} is not a Python file ({spec.origin})")
    return str(spec.origin)


def _python(argv: list[str], launcher: str = "python") -> dict[str, Any]:
    """`python FILE ARGS` or `python -m MODULE ARGS` (interpreter options before them refused)."""
    if not argv:
        raise LaunchError("`python` with nothing to run: give a script or -m MODULE")
    if argv[0] == "-m":
        if len(argv) < 2:
            raise LaunchError("`python -m` without a module name")
        name = argv[1]
        return {"launcher": launcher, "script": _module_file(name), "entry": {"kind": "module", "name": name, "program": name}, "args": argv[2:]}
    if argv[0].startswith("-"):
        raise LaunchError(f"python option {argv[0]!r} is not supported here: give `python FILE …` or `python -m MODULE …`")
    if not os.path.isfile(argv[0]):
        raise LaunchError(f"{argv[0]}: no such file; give the path of your Python script")
    return {"launcher": launcher, "script": os.path.abspath(argv[0]), "entry": None, "args": argv[1:]}


def _count(value: Any, what: str) -> int:
    text = str(value)
    if text.isdigit() and int(text) > 0:
        return int(text)
    if text == "gpu":
        raise LaunchError(f"{what} {text!r}: give the number of processes per node (the GPUs of the machine the run is for)")
    if ":" in text:  # elastic "MIN:MAX"
        return _count(text.split(":")[-1], what)
    raise LaunchError(f"{what} {text!r} is not a number of processes")


def _torchrun(argv: list[str]) -> dict[str, Any]:
    """torchrun's own parser (torch.distributed.run.get_args_parser)."""
    from torch.distributed.run import get_args_parser

    try:
        args = get_args_parser().parse_args(argv)
    except SystemExit as exc:
        raise LaunchError(f"torchrun refused its arguments ({' '.join(argv)})") from exc
    nproc = _count(args.nproc_per_node, "--nproc-per-node")
    nnodes = _count(args.nnodes, "--nnodes")
    if args.no_python:
        raise LaunchError("torchrun --no-python runs a program that is not Python: give the Python script it would run")
    inner = ["-m", args.training_script] if args.module else [args.training_script]
    resolved = _python(inner + list(args.training_script_args), "torchrun")
    world = nproc * nnodes
    resolved["world_size"] = world
    resolved["env"] = {"LOCAL_WORLD_SIZE": str(nproc), "WORLD_SIZE": str(world), "TORCHELASTIC_RUN_ID": "iteragpu"}
    resolved["notes"] = [f"torchrun: {nnodes} node(s) × {nproc} process(es) = {world} ranks (torchrun's own parser)"]
    return resolved


def _accelerate(argv: list[str]) -> dict[str, Any]:
    """`accelerate launch`: accelerate's own parser, its config file's num_processes."""
    if not argv or argv[0] != "launch":
        raise LaunchError("only `accelerate launch …` runs a training script")
    try:
        from accelerate.commands.launch import launch_command_parser
    except ImportError as exc:
        raise LaunchError(f"accelerate is not installed in {sys.executable}: pip install accelerate") from exc
    try:
        args = launch_command_parser().parse_args(argv[1:])
    except SystemExit as exc:
        raise LaunchError(f"accelerate launch refused its arguments ({' '.join(argv[1:])})") from exc
    processes = args.num_processes
    notes = []
    config_file = args.config_file
    if processes is None:
        try:
            from accelerate.commands.config.config_args import default_config_file, load_config_from_file

            if config_file is not None or os.path.isfile(default_config_file):
                config = load_config_from_file(config_file)
                processes = getattr(config, "num_processes", None)
                notes.append(f"accelerate launch: num_processes {processes} from {config_file or default_config_file}")
                plugin = getattr(config, "distributed_type", None)
                if plugin is not None:
                    notes.append(f"accelerate launch: distributed_type {getattr(plugin, 'value', plugin)}")
        except Exception as exc:  # a config accelerate itself refuses: said, one process assumed
            notes.append(f"accelerate launch: its config could not be read ({type(exc).__name__}: {exc}); one process assumed")
    processes = int(processes or 1)
    machines = int(args.num_machines or 1)
    inner = (["-m", args.training_script] if args.module else [args.training_script]) + list(args.training_script_args)
    resolved = _python(inner, "accelerate")
    world = processes * machines if machines > 1 and processes % machines else processes
    resolved["world_size"] = world if world > 1 else None
    resolved["notes"] = notes + [f"accelerate launch: {world} process(es) (accelerate's own parser)"]
    return resolved


def _deepspeed(argv: list[str]) -> dict[str, Any]:
    try:
        from deepspeed.launcher.runner import parse_args
    except ImportError as exc:
        raise LaunchError(f"deepspeed is not installed in {sys.executable}: pip install deepspeed, or give the script with --script") from exc
    try:
        args = parse_args(argv)
    except SystemExit as exc:
        raise LaunchError(f"deepspeed refused its arguments ({' '.join(argv)})") from exc
    gpus = int(args.num_gpus) if getattr(args, "num_gpus", -1) and int(args.num_gpus) > 0 else 1
    nodes = int(args.num_nodes) if getattr(args, "num_nodes", -1) and int(args.num_nodes) > 0 else 1
    inner = (["-m", args.user_script] if getattr(args, "module", False) else [args.user_script]) + list(args.user_args)
    resolved = _python(inner, "deepspeed")
    world = gpus * nodes
    resolved["world_size"] = world if world > 1 else None
    resolved["notes"] = [f"deepspeed: {nodes} node(s) × {gpus} GPU(s) = {world} ranks (DeepSpeed's own parser; --num_gpus unset means one here)"]
    return resolved


def _console(argv: list[str]) -> dict[str, Any]:
    """A console entry point of this environment (`trl sft …`, `tune run …`)."""
    name = os.path.basename(argv[0])
    found = [e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == name]
    if not found:
        on_path = shutil.which(argv[0])
        hint = f" (`{on_path}` is not one of its console scripts)" if on_path else ""
        raise LaunchError(
            f"{argv[0]!r} is neither python, torchrun, accelerate launch, deepspeed nor a console script of {sys.executable}{hint}: "
            "install the package that provides it in this interpreter, or give --script PATH"
        )
    entry = found[0]
    module = entry.value.split(":", 1)[0].strip()
    return {
        "launcher": "console",
        "script": _module_file(module, run_as_main=False),
        "entry": {"kind": "console", "name": entry.value.strip(), "program": name},
        "args": argv[1:],
    }


def resolve(argv: list[str]) -> dict[str, Any]:
    if not argv:
        raise LaunchError("no command after `--`")
    head = os.path.basename(argv[0])
    if PYTHONS.match(head):
        rest = argv[1:]
        if rest[:2] in (["-m", "torch.distributed.run"], ["-m", "torch.distributed.launch"]):
            resolved = _torchrun(rest[2:])
        else:
            resolved = _python(rest)
    elif head == "torchrun":
        resolved = _torchrun(argv[1:])
    elif head == "accelerate":
        resolved = _accelerate(argv[1:])
    elif head == "deepspeed":
        resolved = _deepspeed(argv[1:])
    else:
        resolved = _console(argv)
    resolved.setdefault("world_size", None)
    resolved.setdefault("env", {})
    resolved.setdefault("notes", [])
    return resolved


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    try:
        out: dict[str, Any] = resolve(argv)
        code = 0
    except LaunchError as exc:
        out, code = {"error": str(exc)}, 1
    sys.stdout.write(json.dumps(out) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())

"""A command line as typed (`predict -- torchrun --nproc-per-node 8 train.py …`) resolved to the
Python entry point a launcher would run in each rank, with the launchers' own argument parsers
(torchrun's `get_args_parser`, accelerate's `launch_command_parser`, DeepSpeed's runner): no
parser of ours for their flags.

`python -m iteragpu.launch -- COMMAND ARGS…` prints one JSON object:
{"launcher", "script" (the file that runs: a script, a module's file, an entry point's module),
"entry" (null for a file; {"kind": "module"|"console", "name", "program"}), "args", "world_size"
(null when the launcher gives one process), "env" (what the launcher's own code sets for a rank,
the same on every rank but RANK/LOCAL_RANK, given for rank 0), "local_rank_arg" (DeepSpeed's
`--local_rank=N` before the script's arguments), "nproc_per_node"/"nnodes"/"node_rank"/
"rdzv_endpoint"/"rdzv_id" (one node's share, which `measure` runs as real ranks under torchrun)
where the launcher starts several ranks, "notes"},
or {"error": "…"} with exit status 1. Nothing of the user's code is imported: a module or an
entry point is found by `importlib.util.find_spec` and `importlib.metadata`.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import io
import json
import os
import re
import shutil
import sys
import warnings
from typing import Any, Callable, Iterator

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


def _parsed(parse: Callable[[], Any], launcher: str, argv: list[str]) -> Any:
    """A launcher's own parser on `argv`; what it refuses is said with its own words (argparse's
    last line: the flag it does not know, the value it wants)."""
    said, program = io.StringIO(), sys.argv
    sys.argv = [launcher.split()[0]]  # the program argparse names in its messages
    try:
        with contextlib.redirect_stderr(said):
            return parse()
    except SystemExit as exc:
        why = [line for line in said.getvalue().splitlines() if line.strip()]
        reason = f": {why[-1].strip()}" if why else ""
        raise LaunchError(f"{launcher} refused its arguments ({' '.join(argv)}){reason}") from exc
    finally:
        sys.argv = program


def _torchrun(argv: list[str]) -> dict[str, Any]:
    """torchrun's own parser (torch.distributed.run.get_args_parser)."""
    from torch.distributed.run import get_args_parser

    args = _parsed(lambda: get_args_parser().parse_args(argv), "torchrun", argv)
    nproc = _count(args.nproc_per_node, "--nproc-per-node")
    nnodes = _count(args.nnodes, "--nnodes")
    if args.no_python:
        raise LaunchError("torchrun --no-python runs a program that is not Python: give the Python script it would run")
    inner = ["-m", args.training_script] if args.module else [args.training_script]
    resolved = _python(inner + list(args.training_script_args), "torchrun")
    world = nproc * nnodes
    resolved["world_size"] = world
    resolved.update(_node(nproc, nnodes, args.node_rank, args.rdzv_endpoint, args.rdzv_id))
    # What torchrun's agent gives every rank beside its rank, the same on each (its RANK,
    # LOCAL_RANK, WORLD_SIZE, MASTER_* come from the run itself: torchrun's, or the prediction's).
    resolved["env"] = {"LOCAL_WORLD_SIZE": str(nproc), "GROUP_WORLD_SIZE": str(nnodes), "ROLE_WORLD_SIZE": str(world), "ROLE_NAME": "default"}
    resolved["notes"] = [f"torchrun: {nnodes} node(s) × {nproc} process(es) = {world} ranks (torchrun's own parser)"]
    return resolved


def _node(nproc: int, nnodes: int, node_rank: Any = 0, endpoint: Any = None, run_id: Any = None) -> dict[str, Any]:
    """This node's share of the job, as `measure` gives it to torchrun (its real ranks)."""
    return {
        "nproc_per_node": nproc,
        "nnodes": nnodes,
        "node_rank": int(node_rank or 0),
        "rdzv_endpoint": str(endpoint) if endpoint else None,
        "rdzv_id": str(run_id) if run_id and str(run_id) != "none" else None,
    }


def _launcher_env(env: dict[str, str], notes: list[str], who: str) -> dict[str, str]:
    """What a launcher's own code added to (or changed in) this process's environment for its
    ranks. The devices a rank sees are the run's (the tool's --device, or the prediction's), and
    the interpreter's path is the worker's: both are said, not applied."""
    out: dict[str, str] = {}
    for key, value in sorted(env.items()):
        value = str(value)
        if os.environ.get(key) == value:
            continue
        if key in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "PYTHONPATH"):
            notes.append(f"{who} gives each rank {key}={value}: not applied (the run's own devices and interpreter path stand)")
            continue
        out[key] = value
    return out


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """A launcher's own warnings and log lines (to stderr) stay out of the one JSON line."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stdout(sys.stderr):
            yield


def _accelerate(argv: list[str]) -> dict[str, Any]:
    """`accelerate launch`: accelerate's own parser and validation (which read its config file),
    then the environment its launcher prepares for the ranks (accelerate.utils.launch)."""
    if not argv or argv[0] != "launch":
        raise LaunchError("only `accelerate launch …` runs a training script")
    try:
        from accelerate.commands import launch as commands
        from accelerate.utils import launch as utils
    except ImportError as exc:
        raise LaunchError(f"accelerate is not installed in {sys.executable}: pip install accelerate") from exc
    args = _parsed(lambda: commands.launch_command_parser().parse_args(argv[1:]), "accelerate launch", argv[1:])
    notes: list[str] = []
    try:
        with _quiet():
            # accelerate's own check of its flags, which reads the config file into `args`.
            args, defaults, mp_from_config = commands._validate_launch_command(args)
    except Exception as exc:  # what accelerate itself refuses (a missing config file, conflicting flags)
        raise LaunchError(f"accelerate launch refused its arguments or config ({type(exc).__name__}: {exc})") from exc
    config = f"config {args.config_file or commands.default_config_file}; " if defaults is not None else ""
    processes = int(args.num_processes or 1)
    machines = int(args.num_machines or 1)
    if args.tpu and not args.cpu:
        raise LaunchError("accelerate launch on TPUs: predict and measure follow CUDA ranks; give a GPU config")
    if processes > 1 and not (args.cpu or args.multi_gpu or args.use_fsdp or args.use_deepspeed or args.use_megatron_lm):
        # accelerate picks multi-GPU itself from the GPUs it finds on the machine that runs it.
        args.multi_gpu = True
        notes.append(f"accelerate launch: {processes} processes run as multi-GPU, as accelerate does on a machine with {processes} GPUs")
    if args.no_python:
        raise LaunchError("accelerate launch --no_python runs a program that is not Python: give the Python script it would run")
    try:
        with _quiet():
            if args.use_deepspeed and not args.cpu:
                # As accelerate's launch_command tells its DeepSpeed launcher which fields its config gave.
                fields = list(defaults.deepspeed_config.keys()) if defaults else []
                if mp_from_config:
                    fields.append("mixed_precision")
                args.deepspeed_fields_from_accelerate_config = ",".join(fields)
                plugin, (_, env) = "DeepSpeed", utils.prepare_deepspeed_cmd_env(args)
            elif (args.use_fsdp or args.use_megatron_lm or args.multi_gpu) and not args.cpu:
                plugin = "FSDP" if args.use_fsdp else "Megatron-LM" if args.use_megatron_lm else "multi-GPU (DDP)"
                env = utils.prepare_multi_gpu_env(args)
            else:
                plugin, (_, env) = "one process", utils.prepare_simple_launcher_cmd_env(args)
    except Exception as exc:  # accelerate's own refusal (an unknown precision, a missing plugin)
        raise LaunchError(f"accelerate launch could not prepare its ranks ({type(exc).__name__}: {exc})") from exc
    inner = (["-m", args.training_script] if args.module else [args.training_script]) + list(args.training_script_args)
    resolved = _python(inner, "accelerate")
    env = _launcher_env(env, notes, "accelerate launch")
    nproc = max(processes // machines, 1)
    if plugin != "one process":
        env["LOCAL_WORLD_SIZE"] = str(nproc)  # torchrun, which accelerate runs, gives it
        resolved.update(_node(nproc, machines, args.machine_rank, None, None))
    resolved["world_size"] = processes if processes > 1 else None
    resolved["env"] = env
    named = sorted(k for k in env if k.startswith(("ACCELERATE_USE_", "FSDP_VERSION", "ACCELERATE_DEEPSPEED_ZERO_STAGE", "ACCELERATE_MIXED")))
    resolved["notes"] = notes + [
        f"accelerate launch: {processes} process(es), {plugin} ({config}accelerate's own parser and launcher environment: "
        + ", ".join(f"{k}={env[k]}" for k in named)
        + ")"
    ]
    return resolved


def _deepspeed(argv: list[str]) -> dict[str, Any]:
    """`deepspeed`: DeepSpeed's runner parses the flags and picks the ranks (its hostfile,
    --include/--exclude, --num_nodes/--num_gpus); each rank gets what its launch.py gives it:
    RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT, CROSS_RANK/SIZE, LOCAL_SIZE, and
    `--local_rank=N` before the script's own arguments (unless --no_local_rank)."""
    try:
        with _quiet():
            from deepspeed import constants
            from deepspeed.launcher import runner
    except ImportError as exc:
        raise LaunchError(f"deepspeed is not installed in {sys.executable}: pip install deepspeed, or give the script with --script") from exc
    args = _parsed(lambda: runner.parse_args(argv), "deepspeed", argv)
    if args.no_python:
        raise LaunchError("deepspeed --no_python runs a program that is not Python: give the Python script it would run")
    if args.autotuning:
        raise LaunchError("deepspeed --autotuning runs many experiments: give the configuration to predict or measure")
    notes: list[str] = []
    try:
        with _quiet():
            pool = runner.fetch_hostfile(args.hostfile)
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            if not pool and visible and not (args.include or args.exclude or args.num_nodes > 1 or args.num_gpus > 0):
                args.include = f"localhost:{visible}"  # as the runner respects them on one node
            if not pool:
                # The runner counts this machine's GPUs; the machine the run is for is not this one.
                slots = [int(s) for s in re.findall(r"\d+", args.include.partition(":")[2])] if args.include else []
                pool = {"localhost": max([args.num_gpus, 1] + [s + 1 for s in slots])}
                if args.num_gpus <= 0 and not args.include:
                    notes.append("deepspeed: no --num_gpus, --include or hostfile: one GPU assumed (DeepSpeed would take every GPU of the machine that runs it)")
            active = runner.parse_inclusion_exclusion(pool, args.include, args.exclude)
            active = runner.apply_num_nodes_and_gpus(active, args.num_nodes, args.num_gpus)
    except Exception as exc:  # the runner's own refusal (an --include naming no slot)
        raise LaunchError(f"deepspeed refused its resources ({type(exc).__name__}: {exc})") from exc
    inner = (["-m", args.user_script] if args.module else [args.user_script]) + list(args.user_args)
    resolved = _python(inner, "deepspeed")
    hosts = list(active)
    nproc, nnodes = len(active[hosts[0]]), len(hosts)
    world = sum(len(slots) for slots in active.values())
    if world != nproc * nnodes:
        raise LaunchError(f"deepspeed: the hosts run different numbers of ranks ({dict(active)}): measure and predict follow one node's share of equal nodes")
    master = args.master_addr or ("127.0.0.1" if hosts == ["localhost"] else hosts[0])
    # deepspeed/launcher/launch.py's environment for the first rank of the first node.
    env = {
        "MASTER_ADDR": master,
        "MASTER_PORT": str(args.master_port),
        "WORLD_SIZE": str(world),
        constants.CROSS_RANK: "0",
        constants.CROSS_SIZE: str(nnodes),
        "LOCAL_SIZE": str(nproc),
        "RANK": "0",
        "LOCAL_RANK": "0",
        "CUDA_VISIBLE_DEVICES": ",".join(str(s) for s in active[hosts[0]]),
    }
    resolved["env"] = _launcher_env(env, notes, "deepspeed")
    resolved["world_size"] = world if world > 1 else None
    resolved["local_rank_arg"] = not args.no_local_rank
    resolved.update(_node(nproc, nnodes, 0, f"{master}:{args.master_port}" if nnodes > 1 else None, None))
    said = "" if args.no_local_rank else "; each rank's script gets --local_rank=N first, as DeepSpeed's launcher passes it"
    resolved["notes"] = notes + [f"deepspeed: {nnodes} node(s) × {nproc} GPU(s) = {world} ranks (DeepSpeed's own parser and runner){said}"]
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
    resolved.setdefault("local_rank_arg", False)
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

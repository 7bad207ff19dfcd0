#!/usr/bin/env python
"""Checks iteragpu/predict/cuda_api.py against the installed torch, on a CPU-only machine.

Run: PYTHONPATH=python $ITERAGPU_TEST_PYTHON tests/python/cuda_answers.py (the integration test
`predict_answers_every_torch_cuda_path_from_one_table` does; exits 1 if a check fails).

(a) Coverage: every public function and class of torch.cuda and of each of its public submodules
    (imported all) is followed through its bytecode, transitively (a global, an attribute chain,
    an import inside the function, resolved through the modules as they are bound after
    `cuda_api.install`), down to what reaches the driver: a `torch._C` function or class about
    CUDA (`_cuda_*`, `_CudaStreamBase`, ...), `torch._C._cudart`, NVML or AMD SMI. Each one that
    still reaches it must be in `cuda_api.NOT_ANSWERED` (with its reason); an entry there that no
    longer reaches it, or an answer of the table bound under no name of this torch, fails too. A new
    torch that adds a function reaching the driver fails here until it is answered or excluded.
(b) Bindings: every module that bound one of torch.cuda's originals by identity before the install
    (`torch.cuda.random`'s `current_device`, `from torch.cuda import ...` anywhere) binds the answer.
(c) Answers: the RNG state is a real CUDA generator's (16 uint8 bytes: the seed then the Philox
    offset), it round-trips through set/get and `torch.save`/`torch.load`, a wrong size is refused
    as PyTorch refuses it; transformers' checkpoint calls, `fork_rng`, devices, streams, the
    profiler and the memory counters answer.
"""

import dis
import importlib
import io
import pkgutil
import sys
import types

import torch

from iteragpu.predict import cuda_api

failures: list[str] = []
passed = 0


def check(condition: bool, what: str) -> None:
    global passed
    if condition:
        passed += 1
    else:
        failures.append(what)
        print(f"FAIL {what}")


# ---------------------------------------------------------------- every submodule, imported
MODULES: dict[str, types.ModuleType] = {"torch.cuda": torch.cuda}
for info in pkgutil.walk_packages(torch.cuda.__path__, "torch.cuda."):
    try:
        MODULES[info.name] = importlib.import_module(info.name)
    except Exception as exc:  # an optional dependency missing (e.g. a private tool's): said
        print(f"note: {info.name} not imported ({type(exc).__name__}: {exc})")


def public(name: str) -> bool:
    return all(not part.startswith("_") for part in name.split(".")[2:])


class Memory:
    """Stands for the CLI's allocator model (memory.py asks it over the answer pipe; none here)."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def stats(self) -> dict[str, int]:
        return {
            "allocated_bytes.all.current": 3 << 20,
            "allocated_bytes.all.peak": 5 << 20,
            "reserved_bytes.all.current": 8 << 20,
            "reserved_bytes.all.peak": 8 << 20,
        }

    def stat(self, key: str) -> int:
        return self.stats()[key]

    def mem_get_info(self) -> tuple[int, int]:
        return 150_100_000_000 - (8 << 20), 150_100_000_000

    def reset_peaks(self, device: object = None) -> None:
        self.events.append("reset_peaks")

    def empty_cache(self) -> None:
        self.events.append("empty_cache")

    def reset_accumulated(self, device: object = None) -> None:
        self.events.append("reset_accumulated")


class Tracker:
    def __init__(self) -> None:
        self.memory = Memory()


TARGET = {"name": "NVIDIA H200", "capability": [9, 0], "total_memory": 150_100_000_000}

# Before the install: where each of torch.cuda's originals of the table's names is bound.
table_names = list(cuda_api.answers(torch, TARGET, Tracker()))
cuda_modules = list(MODULES.values())
originals = {n: cuda_api._original(torch, cuda_modules, n) for n in table_names}
bound_before = []
for module_name, module in list(sys.modules.items()):
    namespace = getattr(module, "__dict__", None)
    if not isinstance(namespace, dict):
        continue
    for key, value in list(namespace.items()):
        for n, o in originals.items():
            if o is not cuda_api._ABSENT and callable(o) and value is o:
                bound_before.append((module_name, key, n))

tracker = Tracker()
cuda_api.install(torch, TARGET, tracker)
answers = {id(v) for v in cuda_api.answers(torch, TARGET, tracker).values()}


def is_answer(obj: object) -> bool:
    module = getattr(obj, "__module__", "") or ""
    return module.startswith("iteragpu.") or isinstance(obj, cuda_api.CudaGenerator) or id(obj) in answers


# ---------------------------------------------------------------- (a) what reaches the driver
DRIVER_WORDS = ("cuda", "nvml", "gds", "mempool", "greencontext", "graph")


def primitive(obj: object) -> str | None:
    """What `obj` is when it reaches the driver itself, else None."""
    module = getattr(obj, "__module__", None) or ""
    name = getattr(obj, "__name__", "") or ""
    if isinstance(obj, types.ModuleType):
        if obj.__name__ in ("torch._C._cudart",) or obj.__name__.split(".")[0] in ("pynvml", "amdsmi"):
            return obj.__name__
        return None
    owner = getattr(obj, "__self__", None)
    from_c = module.startswith("torch._C") or (isinstance(owner, types.ModuleType) and owner.__name__.startswith("torch._C"))
    if from_c and isinstance(obj, (types.BuiltinFunctionType, type)) and any(w in name.lower() for w in DRIVER_WORDS):
        return f"torch._C.{name}"
    if module.split(".")[0] in ("pynvml", "amdsmi", "cuda"):
        return f"{module}.{name}"
    return None


def code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from code_objects(const)


def referenced(fn: types.FunctionType):
    """Every object `fn` (and the functions nested in it) names: globals, attribute chains on
    them, imports inside the function; resolved as bound now."""
    package = (fn.__module__ or "").rsplit(".", 1)[0] if fn.__module__ else ""
    builtins = fn.__globals__.get("__builtins__", {})
    for code in code_objects(fn.__code__):
        current: object = None
        imported: object = None
        for ins in dis.get_instructions(code):
            op = ins.opname
            if op in ("CACHE", "EXTENDED_ARG", "PRECALL", "NOP", "PUSH_NULL"):
                continue
            if op in ("LOAD_GLOBAL", "LOAD_NAME"):
                name = ins.argval
                current = fn.__globals__.get(name, builtins.get(name) if isinstance(builtins, dict) else getattr(builtins, name, None))
                if current is not None:
                    yield current
            elif op in ("LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR") and current is not None:
                # Looked up without running a module's lazy __getattr__ (no import made here).
                current = vars(current).get(ins.argval) if isinstance(current, types.ModuleType) else getattr(current, ins.argval, None)
                if current is not None:
                    yield current
            elif op == "IMPORT_NAME":
                name = ins.argval
                if not name:
                    imported = sys.modules.get(package)
                elif name.startswith("."):
                    imported = sys.modules.get(f"{package}{name}")
                else:
                    imported = sys.modules.get(name) or sys.modules.get(f"{package}.{name}")
                current = None
            elif op == "IMPORT_FROM" and imported is not None:
                current = vars(imported).get(ins.argval)
                if current is not None:
                    yield current
            else:
                current = None


reach_memo: dict[int, list[str] | None] = {}


def reach(obj: object, depth: int = 0) -> list[str] | None:
    """The path by which `obj` reaches the driver (names, outermost first), or None."""
    if is_answer(obj):
        return None
    found = primitive(obj)
    if found:
        return [found]
    key = id(obj)
    if key in reach_memo:
        return reach_memo[key]
    reach_memo[key] = None  # a cycle does not reach by itself
    path = None
    module = getattr(obj, "__module__", "") or ""
    if isinstance(obj, types.FunctionType) and module.startswith("torch") and depth < 40:
        for ref in referenced(obj):
            sub = reach(ref, depth + 1)
            if sub:
                path = [getattr(ref, "__qualname__", getattr(ref, "__name__", "?"))] + sub if not primitive(ref) else sub
                break
    elif isinstance(obj, type) and module.startswith("torch.cuda"):
        for base in obj.__mro__[1:]:
            if primitive(base):
                path = [f"base {primitive(base)}"]
                break
        if path is None:
            for attr, value in vars(obj).items():
                fn = value.__func__ if isinstance(value, (staticmethod, classmethod)) else getattr(value, "fget", value)
                if isinstance(fn, types.FunctionType):
                    sub = reach(fn, depth + 1)
                    if sub:
                        path = [attr] + sub
                        break
    reach_memo[key] = path
    return path


reaching: dict[str, list[str]] = {}  # public name -> the path to the driver
exists: set[str] = set()
for module_name, module in MODULES.items():
    if not public(module_name):
        continue
    for name, value in list(vars(module).items()):
        if name.startswith("_") or isinstance(value, types.ModuleType):
            continue
        defined = getattr(value, "__module__", "") or ""
        if not (defined.startswith("torch.cuda") or defined.startswith("torch._C") or is_answer(value)):
            continue  # torch.device, typing, ... imported for use
        # The name NOT_ANSWERED knows it by: torch.cuda's when the namespace binds the same object.
        key = name if vars(torch.cuda).get(name) is value else f"{module_name[len('torch.cuda.'):]}.{name}"
        exists.add(key)
        path = reach(value)
        if path:
            reaching.setdefault(key, [f"{module_name}.{name}"] + path)

for name, path in sorted(reaching.items()):
    check(name in cuda_api.NOT_ANSWERED, f"{' -> '.join(path)} reaches the driver: answer it in cuda_api.answers or say why not in NOT_ANSWERED")
for name, why in cuda_api.NOT_ANSWERED.items():
    if name in exists:
        check(name in reaching, f"NOT_ANSWERED[{name!r}] ({why}) no longer reaches the driver: remove it")
print(f"{len(exists)} public names of torch.cuda's modules followed; {len(reaching)} still reach the driver: {sorted(reaching)}")
for name in table_names:
    check(originals[name] is not cuda_api._ABSENT or name in ("is_tf32_supported", "device_memory_used"), f"the answer {name!r} is bound under no name of torch {torch.__version__}")

# ---------------------------------------------------------------- (b) every binding answered
for module_name, key, name in bound_before:
    value = vars(sys.modules[module_name]).get(key)
    check(is_answer(value), f"{module_name}.{key} still binds torch.cuda's original {name}")
print(f"{len(bound_before)} bindings of the originals outside torch.cuda's namespace, e.g. {sorted({m for m, _, _ in bound_before})[:6]}")

# ---------------------------------------------------------------- (c) the answers
state = torch.cuda.random.get_rng_state()
check(tuple(state.shape) == (16,) and state.dtype == torch.uint8 and state.device.type == "cpu", f"CUDA RNG state {state.shape} {state.dtype}")
torch.manual_seed(1234)  # seeds the CUDA generators too (torch.random.manual_seed)
state = torch.cuda.get_rng_state()
check(int.from_bytes(bytes(state[:8].tolist()), "little") == 1234 and state[8:].sum().item() == 0, f"manual_seed(1234) gives the seed then offset 0: {state.tolist()}")
check(torch.cuda.initial_seed() == 1234 and torch.cuda.random.initial_seed() == 1234, "initial_seed after manual_seed")
other = torch.tensor(list((99).to_bytes(8, "little")) + list((8).to_bytes(8, "little")), dtype=torch.uint8)
torch.cuda.random.set_rng_state(other)
check(torch.equal(torch.cuda.random.get_rng_state(), other), "set_rng_state then get_rng_state round-trips")
states = torch.cuda.random.get_rng_state_all()
check(len(states) == 1 and torch.equal(states[0], other), "get_rng_state_all: one device")
buffer = io.BytesIO()
torch.save({"cuda": states}, buffer)
buffer.seek(0)
torch.cuda.random.manual_seed_all(7)
torch.cuda.random.set_rng_state_all(torch.load(buffer, weights_only=True)["cuda"])
check(torch.equal(torch.cuda.get_rng_state(), other), "a checkpoint's RNG state restored through torch.save/torch.load (Trainer's _save_rng_state/_load_rng_state)")
try:
    torch.cuda.set_rng_state(torch.zeros(5, dtype=torch.uint8))
    check(False, "a 5-byte state is refused")
except RuntimeError as exc:
    check("wrong size" in str(exc), f"a 5-byte state is refused as PyTorch refuses it: {exc}")
with torch.random.fork_rng(devices=[0]):
    torch.cuda.manual_seed(5)
check(torch.equal(torch.cuda.get_rng_state(), other), "fork_rng restores the CUDA state")
check(torch.cuda.default_generators[0].device == torch.device("cuda", 0), "default_generators[0] is on cuda:0")
check(torch.cuda.current_device() == 0 and torch.cuda.random.current_device() == 0 and torch.cuda.device_count() == 1, "one device, current 0")
check(torch.cuda.memory.memory_allocated() == 3 << 20 and torch.cuda.memory.max_memory_allocated() == 5 << 20, "memory counters from the allocator model")
torch.cuda.memory.reset_peak_memory_stats()
torch.cuda.empty_cache()
check(tracker.memory.events == ["reset_peaks", "empty_cache"], f"resets and releases reach the allocator model: {tracker.memory.events}")
check(torch.cuda.memory_stats()["allocated_bytes.all.current"] == 3 << 20, "memory_stats")
check("Allocated memory" in torch.cuda.memory_summary(), "memory_summary is written from memory_stats")
check(torch.cuda.get_device_name() == "NVIDIA H200" and torch.cuda.get_device_capability() == (9, 0), "the card")
with torch.cuda.device(0):
    pass
with torch.cuda.stream(torch.cuda.Stream()):
    pass
torch.cuda.profiler.start()
torch.cuda.profiler.stop()
check(torch.cuda.utilization() == 0 and torch.cuda.mem_get_info()[1] == 150_100_000_000, "telemetry and mem_get_info")
check(not torch.cuda.graphs.is_current_stream_capturing(), "is_current_stream_capturing through torch.cuda.graphs")
# torch.accelerator (2.6 on) answers the predicted device: accelerate >= 1.16 asks it, not torch.cuda.
if hasattr(torch, "accelerator"):
    accelerator = torch.accelerator
    check(accelerator.current_accelerator() == torch.device("cuda") and accelerator.is_available(), "torch.accelerator is the predicted CUDA device")
    check(accelerator.device_count() == 1, "torch.accelerator counts one device")
# The exclusions said to reach no driver: TunableOp's getters answer on this CPU-only machine.
tunable = torch.cuda.tunable
for getter in ("is_enabled", "tuning_is_enabled", "record_untuned_is_enabled", "get_max_tuning_duration", "get_max_tuning_iterations", "get_filename", "get_cublaslt_requested_algo_count", "wildcard_fallback_is_enabled"):
    if hasattr(tunable, getter):
        try:
            getattr(tunable, getter)()
            check(True, getter)
        except Exception as exc:
            check(False, f"tunable.{getter}() needs no driver, as NOT_ANSWERED says: {type(exc).__name__}: {exc}")
# torch._dynamo, imported after the install (by accelerate, transformers, torch.compile), maps
# torch.cuda's functions by identity and refuses one object under two names.
try:
    import torch._dynamo  # noqa: F401

    check(True, "torch._dynamo imports after the install")
except Exception as exc:
    check(False, f"torch._dynamo imports after the install: {type(exc).__name__}: {exc}")
print(f"{passed} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)

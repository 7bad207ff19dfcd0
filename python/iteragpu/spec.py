"""The worker's specification: what the CLI asks one fresh worker to run (measured, or predicted
for the target card in `predict`).

Its Rust twin is `src/schema/spec.rs`, whose module documentation holds the examples both sides
are tested against; the JSON Schema generated from it (`schema/worker-spec.schema.json`) is what
`tests/integration/contract.rs` checks these records' keys against. `parse` turns the JSON object into typed, frozen records and refuses any key
it does not know, so a misspelt or outdated key fails loudly instead of being ignored.
"""

from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, ClassVar, Dict, Iterable, Optional, Set, Tuple, Type, Union


class SpecError(ValueError):
    """The specification does not match this worker: the CLI and the worker disagree."""


@dataclass(frozen=True)
class Training:
    """The training loop: `steps` steps with AdamW or SGD, in fp32, bf16-mixed, fp16-mixed (with a GradScaler) or bf16."""

    steps: int
    optimizer: str
    precision: str
    gradient_checkpointing: bool = False
    shard: Optional[str] = None


@dataclass(frozen=True)
class QuantizedCache:
    """transformers' QuantizedCache settings."""

    kv_quant_bits: int
    kv_group_size: int
    kv_residual: int


@dataclass(frozen=True)
class Quantize:
    """The model's linear layers loaded quantized by bitsandbytes (transformers' BitsAndBytesConfig): nf4, fp4 or int8."""

    quantize: str
    double_quant: bool = False


@dataclass(frozen=True)
class Requests:
    """Concurrent generation requests, each with its own cache: one prompt and one output length per request."""

    requests: int
    prompt_lengths: Tuple[int, ...]
    output_lengths: Tuple[int, ...]


@dataclass(frozen=True)
class Dense:
    workload: ClassVar[str] = "dense"
    devices: Tuple[str, ...]
    seed: int
    batch: int
    context: int
    width: int
    depth: int
    dtype: str
    warmup: int
    repeats: int
    empty_cache: str = "never"
    whole_loop: bool = False
    training: Optional[Training] = None
    memory_limit_bytes: Optional[int] = None
    predict: Optional[dict] = None
    history: Optional[dict] = None
    world_size: Optional[int] = None


@dataclass(frozen=True)
class Packed:
    """A GPTQ, AWQ, compressed-tensors or HQQ checkpoint's quantized linear layers (its config's
    quantization_config); compressed-tensors and HQQ name their scheme too."""

    packed_format: str
    packed_bits: int
    packed_group_size: Optional[int] = None
    packed_skip_modules: Tuple[str, ...] = ()
    packed_storage: Optional[str] = None
    packed_strategy: Optional[str] = None
    packed_symmetric: Optional[bool] = None
    packed_input_quantized: Optional[bool] = None
    packed_static_input: Optional[bool] = None
    packed_scale_dtype: Optional[str] = None
    packed_axis: Optional[int] = None


@dataclass(frozen=True)
class CausalLm:
    workload: ClassVar[str] = "causal-lm"
    devices: Tuple[str, ...]
    seed: int
    model_config: str
    batch: int
    context: int
    prompt_tokens: int
    new_tokens: int
    cache: str
    dtype: str
    window: Optional[int] = None
    whole_loop: bool = False
    lora_rank: Optional[int] = None
    lora_targets: Tuple[str, ...] = ()
    quantized_cache: Optional[QuantizedCache] = None
    training: Optional[Training] = None
    concurrent: Optional[Requests] = None
    quantization: Optional[Quantize] = None
    packed: Optional[Packed] = None
    memory_limit_bytes: Optional[int] = None
    predict: Optional[dict] = None
    history: Optional[dict] = None
    world_size: Optional[int] = None


@dataclass(frozen=True)
class Vision:
    workload: ClassVar[str] = "vision"
    devices: Tuple[str, ...]
    seed: int
    images: int
    height: int
    width: int
    dtype: str
    model_config: Optional[str] = None
    timm_model: Optional[str] = None
    whole_loop: bool = False
    training: Optional[Training] = None
    memory_limit_bytes: Optional[int] = None
    predict: Optional[dict] = None
    history: Optional[dict] = None
    world_size: Optional[int] = None


@dataclass(frozen=True)
class Vlm:
    """A vision-language model from a folder's config.json and preprocessor_config.json: `batch`
    requests of `images_per_request` images of height × width and `prompt_tokens` text tokens each
    (with `concurrent`: that many requests alive together instead, each with its images and cache)."""

    workload: ClassVar[str] = "vlm"
    devices: Tuple[str, ...]
    seed: int
    model_config: str
    processor_config: str
    batch: int
    prompt_tokens: int
    new_tokens: int
    images_per_request: int
    height: int
    width: int
    dtype: str
    concurrent: Optional[Requests] = None
    memory_limit_bytes: Optional[int] = None
    predict: Optional[dict] = None
    history: Optional[dict] = None
    world_size: Optional[int] = None


@dataclass(frozen=True)
class Script:
    workload: ClassVar[str] = "script"
    devices: Tuple[str, ...]
    seed: int
    script: str
    script_args: Tuple[str, ...] = field(default_factory=tuple)
    # What runs when it is not the file itself: {"kind": "module"|"console", "name", "program"}
    # (a command line as typed: `python -m MODULE`, a console script; iteragpu.launch).
    entry: Optional[dict] = None
    # What the command's launcher sets for a rank (accelerate's, DeepSpeed's variables), and
    # whether DeepSpeed's `--local_rank=N` comes before the arguments (iteragpu.launch).
    env: Optional[dict] = None
    local_rank_arg: bool = False
    memory_limit_bytes: Optional[int] = None
    predict: Optional[dict] = None
    history: Optional[dict] = None
    world_size: Optional[int] = None


# What one worker runs: the record `parse` returns.
WorkerSpec = Union[Dense, CausalLm, Vision, Vlm, Script]

WORKLOADS: Dict[str, Type[WorkerSpec]] = {cls.workload: cls for cls in (Dense, CausalLm, Vision, Vlm, Script)}
_NESTED: Dict[str, Tuple[type, Tuple[str, ...]]] = {
    "training": (Training, ("task",)),
    "quantized_cache": (QuantizedCache, ()),
    "concurrent": (Requests, ()),
    "quantization": (Quantize, ()),
    "packed": (Packed, ()),
}


def _required(f: Field[Any]) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def _take(cls: Any, doc: Dict[str, Any], extra: Iterable[str] = ()) -> Tuple[Any, Set[str]]:
    """Builds the record `cls` from the keys of `doc` it names; returns it and the keys it used."""
    missing = [f.name for f in fields(cls) if _required(f) and f.name not in doc]
    if missing:
        raise SpecError(f"the worker's spec lacks {', '.join(missing)} ({cls.__name__})")
    present = {f.name: doc[f.name] for f in fields(cls) if f.name in doc}
    return cls(**present), set(present) | {k for k in extra if k in doc}


def parse(doc: object) -> WorkerSpec:
    """The typed spec of a JSON object (`{"workload": "dense", …}`); SpecError names what is wrong."""
    if not isinstance(doc, dict):
        raise SpecError("the worker's spec is not a JSON object")
    kind: Any = doc.get("workload")
    cls = WORKLOADS.get(kind)
    if cls is None:
        raise SpecError(f"unknown workload {kind!r}; this worker runs {', '.join(WORKLOADS)}")
    used = {"workload"}
    values: Dict[str, Any] = {}
    for f in fields(cls):
        if f.name in _NESTED:
            nested, extra = _NESTED[f.name]
            keys = [n.name for n in fields(nested)]
            if f.name == "training":
                task = doc.get("task", "infer")
                if task not in ("infer", "train"):
                    raise SpecError(f"task {task!r} is neither 'infer' nor 'train'")
                if task == "infer":
                    used |= {"task"} & set(doc)
                    continue
            elif not any(k in doc for k in keys):
                continue
            values[f.name], keys_used = _take(nested, doc, extra)
            used |= keys_used
        elif f.name in doc:
            value = doc[f.name]
            values[f.name] = tuple(value) if isinstance(value, list) else value
            used.add(f.name)
        elif _required(f):
            raise SpecError(f"the worker's spec lacks `{f.name}` for workload {kind!r}")
    unknown = sorted(set(doc) - used)
    if unknown:
        raise SpecError(f"the worker's spec has unknown key(s) {', '.join(unknown)} for workload {kind!r}")
    return cls(**values)

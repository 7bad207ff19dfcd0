"""compressed-tensors and HQQ checkpoints loaded through transformers where the format's library
is not installed (`quantized.py::_checkpoint_formats` swaps them in).

* compressed-tensors: transformers' config class and quantizer refuse without the library. Here
  the config keeps the checkpoint's `quantization_config` as it is, and the quantizer builds every
  quantized linear layer in compressed-tensors' own tensors (`workloads/packed_schemes.py`, the
  layout compressed-tensors 0.20 gives the module before the checkpoint fills it), then, as
  compressed-tensors' decompression hook does, decompresses them all at the model's first
  forward. Said in the notes.
* HQQ: transformers 5.24 and 5.25 build no HQQ layer from a checkpoint even with hqq installed
  (their HQQ quantizer has no load operation: the layers stay float `nn.Linear`, their weights
  newly initialized, the checkpoint's `W_q`, `scale` and `zero` unexpected). Without hqq the
  same model is built (the config no longer needs the library), and said; with hqq, the note is
  said too (`hqq_note`).
"""

from __future__ import annotations

from typing import Any

HQQ_WORDS = (
    "an HQQ checkpoint through transformers' from_pretrained: transformers builds no HQQ layer from a checkpoint "
    "(its HQQ quantizer has no load operation), so the linear layers are float nn.Linear in the load dtype, newly "
    "initialized, as transformers leaves them; hqq's own loader (AutoHQQHFModel.from_quantized) or "
    "`iteragpu estimate --model` give HQQ's packed layout"
)


def packed_of(raw: dict[str, Any], scale_dtype: str) -> Any:
    """The `Packed` record of a compressed-tensors `quantization_config` (its one weight scheme
    over every `Linear`); ValueError names what is not modelled."""
    from ..spec import Packed

    groups = raw.get("config_groups") or {}
    if not isinstance(groups, dict) or len(groups) != 1:
        raise ValueError(f"config_groups holds {len(groups) if isinstance(groups, dict) else 'no'} groups; one scheme over every Linear is modelled")
    group = next(iter(groups.values()))
    weights = group.get("weights") if isinstance(group, dict) else None
    if not isinstance(weights, dict):
        raise ValueError("config_groups' group has no `weights` object")
    if group.get("targets", ["Linear"]) != ["Linear"]:
        raise ValueError(f"targets {group.get('targets')!r}: only [\"Linear\"] is modelled")
    ignore = raw.get("ignore") or ()
    if not isinstance(ignore, (list, tuple)) or not all(isinstance(p, str) for p in ignore):
        raise ValueError("ignore is not a list of module names")
    storage = raw.get("format") or "pack-quantized"
    if storage == "naive-quantized":
        storage = "int-quantized"
    if storage not in ("pack-quantized", "int-quantized", "float-quantized"):
        raise ValueError(f"format {storage!r} is not modelled (pack-quantized, int-quantized, naive-quantized, float-quantized)")
    bits = weights.get("num_bits", 8)
    if not isinstance(bits, int) or not 1 <= bits <= 8:
        raise ValueError(f"num_bits {bits!r} is not 1 to 8")
    size = weights.get("group_size")
    size = int(size) if isinstance(size, int) and size > 0 else None
    strategy = weights.get("strategy") or ("group" if size else "tensor")
    if strategy not in ("tensor", "channel", "group"):
        raise ValueError(f"strategy {strategy!r} is not modelled (tensor, channel, group)")
    inputs = group.get("input_activations")
    if inputs is not None and not isinstance(inputs, dict):
        raise ValueError("input_activations is not an object")
    return Packed(
        "compressed-tensors",
        bits,
        size if strategy == "group" else None,
        tuple(_ignored(p) for p in ignore),
        packed_storage=storage,
        packed_strategy=strategy,
        packed_symmetric=weights.get("symmetric", True) is not False,
        packed_input_quantized=inputs is not None,
        packed_static_input=inputs is not None and not inputs.get("dynamic", False),
        packed_scale_dtype=scale_dtype,
    )


def _ignored(pattern: str) -> str:
    """An `ignore` entry as a module name: a name, or `re:.*NAME$` (as `estimate` reads them)."""
    if not pattern.startswith("re:"):
        return pattern
    core = pattern[3:]
    core = core[2:] if core.startswith(".*") else core
    core = (core[:-1] if core.endswith("$") else core).replace("\\.", ".")
    if not core or not all(c.isalnum() or c in "_." for c in core):
        raise ValueError(f"ignore holds the expression {pattern!r}; module names and re:.*NAME$ are read")
    return core.lstrip(".")


def config_class(cls: Any, method: str) -> Any:
    """transformers' config class for `method`, made not to need the library: the checkpoint's
    `quantization_config` kept as it is."""

    class WithoutItsLibrary(cls):
        def __init__(self, **kwargs: Any) -> None:
            self.quant_method = method
            self.raw = dict(kwargs)
            # compressed-tensors' quantizer reads these two; HQQ's config these.
            self.dequantize = False
            self.use_optimized_inference = False
            self.quantization_config = None
            self.quant_config = kwargs.get("quant_config", {})
            self.skip_modules = kwargs.get("skip_modules", ["lm_head"])

        def post_init(self) -> None:
            pass

        @classmethod
        def from_dict(cls_: Any, config_dict: dict[str, Any], return_unused_kwargs: bool = False, **kwargs: Any) -> Any:
            config = cls_(**config_dict)
            return (config, kwargs) if return_unused_kwargs else config

        def to_dict(self) -> dict[str, Any]:
            return dict(self.raw)

    WithoutItsLibrary.__name__ = f"{cls.__name__}WithoutItsLibrary"
    return WithoutItsLibrary


def quantizer_class(cls: Any, method: str, tracker: Any, refuse: Any) -> Any:
    """transformers' quantizer for `method` without the library (see the module's documentation);
    `refuse(exc)` makes what cannot be modelled unpredictable, named."""
    from transformers.quantizers.base import HfQuantizer

    class WithoutItsLibrary(cls):
        requires_calibration = False
        _iteragpu_checked = True

        def __init__(self, quantization_config: Any, **kwargs: Any) -> None:
            HfQuantizer.__init__(self, quantization_config, **kwargs)

        def validate_environment(self, *args: Any, **kwargs: Any) -> None:
            if method == "hqq":
                tracker.note(HQQ_WORDS + " (hqq is not installed here; the same model is built without it)")
            else:
                tracker.note(
                    "a compressed-tensors checkpoint loaded without its library (compressed-tensors not installed): its linear "
                    "layers were built in compressed-tensors' own tensors (weight_packed and weight_shape, or the int8/FP8 "
                    "weight, with weight_scale), then decompressed at the model's first forward to dense weights in the scales' "
                    "dtype, as compressed-tensors' decompression hook does under transformers (assumed from compressed-tensors 0.20); "
                    "a scheme that quantizes the inputs too (W8A8) holds one input-sized transient per layer for their "
                    "quantize-dequantize (assumed; compressed-tensors' own makes a few)"
                )

        def update_dtype(self, dtype: Any) -> Any:
            return dtype

        def param_needs_quantization(self, *args: Any, **kwargs: Any) -> bool:
            return False

        def get_weight_conversions(self) -> list[Any]:
            return []

        def _process_model_before_weight_loading(self, model: Any, **kwargs: Any) -> Any:
            if method == "hqq":
                return model
            import torch

            from ..workloads.packed import replace_linear

            dtype = next(model.parameters()).dtype
            scale_dtype = str(dtype).removeprefix("torch.") if dtype in (torch.float16, torch.bfloat16, torch.float32) else "float16"
            try:
                packed = packed_of(getattr(self.quantization_config, "raw", {}), scale_dtype)
            except ValueError as exc:
                raise refuse(exc) from exc
            replace_linear(torch, model, packed, dtype, torch.device("meta"))
            return model

        def _process_model_after_weight_loading(self, model: Any, **kwargs: Any) -> Any:
            return model

        @property
        def is_trainable(self) -> bool:
            return False

        def is_serializable(self, *args: Any, **kwargs: Any) -> bool:
            return False

    WithoutItsLibrary.__name__ = f"{cls.__name__}WithoutItsLibrary"
    return WithoutItsLibrary


def hqq_note(cls: Any, tracker: Any) -> None:
    """With hqq installed: transformers' own HQQ quantizer runs; what it builds is said."""
    original = vars(cls).get("_process_model_before_weight_loading")
    if original is None or getattr(original, "_iteragpu", False):
        return

    def before(self: Any, model: Any, **kwargs: Any) -> Any:
        if getattr(self, "pre_quantized", True):
            tracker.note(HQQ_WORDS)
        return original(self, model, **kwargs)

    before._iteragpu = True  # type: ignore[attr-defined]  # wrapped once
    cls._process_model_before_weight_loading = before

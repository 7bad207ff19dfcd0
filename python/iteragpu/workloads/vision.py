"""An image model with random weights, built directly on the device (same shapes and dtypes as the
real model, nothing downloaded), measured on a batch of random images while it infers or trains.

The model: a transformers config (ViT, DeiT, ConvNeXt, Swin, … through
`AutoModelForImageClassification`, else `AutoModel`; a config with a `vision_config`, CLIP's or
SigLIP's, runs its vision tower alone), or a timm model by name (`timm:NAME`, where timm is
installed). Images of another size than the config's `image_size` are run with
`interpolate_pos_encoding=True` where the model takes it, as a pretrained checkpoint is run at
another resolution (the position embeddings keep their trained size).

Inference phases: model_load, inputs, cold_forward, warm_forward (no_grad). Training: the
training loop's phases (`training.py`), with a cross-entropy on random labels for a classifier,
and for a tower without labels the mean square of its last hidden state (a stand-in loss, stated).
"""

from __future__ import annotations

import inspect
import json
from typing import Any, Callable

from .. import built_once, names
from ..recorder import Recorder
from ..spec import Vision
from . import Missing, training


def _transformers_model(torch: Any, spec: Vision, dtype: Any, device: Any, info: dict) -> Any:
    try:
        import transformers
    except Exception as exc:  # a broken install raises more than ImportError (a torch mismatch): reported as missing
        raise Missing(
            f"the vision workload needs transformers for a config.json, which cannot be imported: {type(exc).__name__}: {exc}; "
            "install transformers in this interpreter"
        ) from exc
    assert spec.model_config is not None  # the CLI sends a config or a timm name
    with open(spec.model_config, encoding="utf-8") as f:
        raw = json.load(f)
    raw.pop("quantization_config", None)  # random weights are built in --dtype, never quantized
    if raw.get("model_type") is None:
        raise ValueError(f"{spec.model_config} has no model_type: transformers cannot tell which model it describes")
    model_type = names.check_config(transformers, raw, spec.model_config)
    config = transformers.AutoConfig.for_model(model_type, **raw)
    if getattr(config, "architectures", ()) is None:
        # A config that names no head class (`"architectures": null`, transformers' default) is
        # iterated over by the auto classes where a model type maps to several (DeiT's two
        # classifiers): empty, they take the first, as for a config that names none they know.
        config.architectures = []
    tower = getattr(config, "vision_config", None)
    info["transformers_version"] = transformers.__version__
    info["model_type"] = model_type
    with torch.device(device):
        if tower is not None:
            model = transformers.AutoModel.from_config(tower, dtype=dtype)
            info["built"] = f"the vision tower of {model_type} ({type(model).__name__})"
        else:
            try:
                model = transformers.AutoModelForImageClassification.from_config(config, dtype=dtype)
            except ValueError:  # transformers' word for "no image-classification head for this model type"
                model = transformers.AutoModel.from_config(config, dtype=dtype)
            info["built"] = type(model).__name__
    return model


def _timm_model(torch: Any, spec: Vision, dtype: Any, device: Any, info: dict) -> Any:
    try:
        import timm
    except Exception as exc:  # a broken install raises more than ImportError: reported as missing
        raise Missing(
            f"--model timm:{spec.timm_model} needs timm, which cannot be imported in this interpreter "
            f"({type(exc).__name__}: {exc}); install timm, or give a transformers config.json"
        ) from exc
    info["timm_version"] = timm.__version__
    with torch.device(device):
        model = timm.create_model(spec.timm_model, pretrained=False)
    info["built"] = f"timm {spec.timm_model} ({type(model).__name__})"
    return model.to(dtype=dtype)


def _forward(model: Any, spec: Vision, timm_model: bool) -> tuple[Callable[[Any], Any], dict]:
    """`forward(pixels)` and what it passes beyond the pixels (recorded)."""
    if timm_model:
        return model, {}
    kwargs: dict = {}
    size = getattr(model.config, "image_size", None)
    trained = tuple(size) if isinstance(size, (list, tuple)) else (size, size)
    if trained != (spec.height, spec.width) and "interpolate_pos_encoding" in inspect.signature(model.forward).parameters:
        kwargs["interpolate_pos_encoding"] = True
    return (lambda pixels: model(pixel_values=pixels, **kwargs)), kwargs


def _hidden_shape(model: Any, timm_model: bool) -> list[list[int]]:
    """Shapes of the backbone's last hidden state, appended at each forward (the sequence a
    ViT-like model attends over: patches, plus CLS and distillation tokens)."""
    shapes: list[list[int]] = []
    base = model if timm_model else getattr(model, "base_model", model)

    def hook(_module: Any, _inputs: Any, out: Any) -> None:
        hidden = getattr(out, "last_hidden_state", None)
        if hidden is None and isinstance(out, (tuple, list)) and out:
            hidden = out[0]
        if hidden is None and hasattr(out, "shape"):
            hidden = out
        if hidden is not None and hasattr(hidden, "shape"):
            shapes.append(list(hidden.shape))

    if timm_model and hasattr(model, "forward_features"):
        original = model.forward_features

        def features(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            hook(model, args, out)
            return out

        model.forward_features = features
    else:
        base.register_forward_hook(hook)
    return shapes


def run(rec: Recorder, torch: Any, spec: Vision) -> None:
    dtype = names.torch_dtype(torch, spec.dtype, "the worker spec")
    device = torch.device(spec.devices[0])
    torch.manual_seed(spec.seed)
    timm_model = spec.timm_model is not None
    train_spec = spec.training
    with rec.phase("model_load") as info:
        if timm_model:
            model = _timm_model(torch, spec, dtype, device, info)
        else:
            model = _transformers_model(torch, spec, dtype, device, info)
        info["parameters"] = sum(p.numel() for p in model.parameters())
        info["attention_implementation"] = getattr(getattr(model, "config", None), "_attn_implementation", None)
    # A predicted sweep's trials share the build (built_once.py): only AFTER_BUILD's keys are read below.
    spec = built_once.resume(spec)
    rec.describe(
        workload="vision",
        model=spec.model_config or f"timm:{spec.timm_model}",
        model_type=info.get("model_type"),
        dtype=spec.dtype,
    )
    channels = getattr(getattr(model, "config", None), "num_channels", None) or 3
    forward, extra = _forward(model, spec, timm_model)
    shapes = _hidden_shape(model, timm_model)
    with rec.phase("inputs", requested_shape=[spec.images, channels, spec.height, spec.width]) as info:
        pixels = torch.randn(spec.images, channels, spec.height, spec.width, device=device, dtype=dtype)
        info["processed_shape"] = list(pixels.shape)
        if extra:
            info["forward_options"] = extra
    if train_spec is not None:
        model.train()
        if train_spec.gradient_checkpointing:
            if timm_model and hasattr(model, "set_grad_checkpointing"):
                model.set_grad_checkpointing(True)
            elif not timm_model and getattr(model, "supports_gradient_checkpointing", False):
                model.gradient_checkpointing_enable()
            else:
                raise ValueError(f"--gradient-checkpointing: {type(model).__name__} does not support gradient checkpointing; drop it")
        labels_count = getattr(model, "num_labels", None) or getattr(model, "num_classes", None)
        labels = torch.randint(0, labels_count, (spec.images,), device=device) if labels_count else None

        def loss_fn(out: Any) -> Any:
            logits = out if hasattr(out, "shape") else getattr(out, "logits", None)
            if logits is not None and labels is not None:
                return torch.nn.functional.cross_entropy(logits.float(), labels)
            # A tower has no labels: a stand-in loss on its last hidden state.
            return out.last_hidden_state.float().pow(2).mean()

        training.run(rec, torch, spec, model, forward, loss_fn, pixels, [p for p in model.parameters() if p.requires_grad])
        return
    model.eval()
    with torch.no_grad():
        if spec.whole_loop:
            with rec.phase("whole_loop", protocol="whole-loop") as info:
                for _ in range(2):
                    out = forward(pixels)
                    del out
                info["hidden_shape"] = shapes[-1] if shapes else None
            return
        for name in ("cold_forward", "warm_forward"):
            with rec.phase(name) as info:
                out = forward(pixels)
                del out
                info["hidden_shape"] = shapes[-1] if shapes else None

"""A multimodal prompt: images and text into a vision-language model (LLaVA-1.5, Qwen2-VL,
Gemma 3) built from its config with random weights directly on the device, which then generates
with its KV cache. Inference only.

The images are processed by the model's own image processor, built from the folder's
`preprocessor_config.json` (transformers' PIL backend: numpy, outside torch, no torchvision
needed), on random images of the requested size; the image tokens each image becomes are counted
by the processor's own rule (`_image_tokens`, each rule cited by its transformers file), because
what a configuration says is not the shape really processed: LLaVA-1.5 resizes and crops every
image to 336×336, Qwen2-VL keeps the size (to multiples of 28) and so its token count with it.

Phases: model_load, inputs (the processing, the pixels moved to the device), prefill (the forward
with the images, cold), decode (the new tokens one by one with the cache).
"""

from __future__ import annotations

import json
from typing import Any

from ..recorder import Recorder
from ..spec import Vlm
from .causal_lm import cache_bytes


class Missing(Exception):
    """A package the workload needs is not installed: reported as `unavailable` (exit 2)."""


class Unsupported(ValueError):
    """A model family whose image-token rule this workload does not follow (the run fails, saying so)."""


# The families followed, by `model_type`, with the file whose rule counts their image tokens.
RULES = {
    "llava": "transformers/models/llava/processing_llava.py (LlavaProcessor: (height // patch_size) * (width // patch_size)"
    " + num_additional_image_tokens, less 1 for vision_feature_select_strategy 'default')",
    "qwen2_vl": "transformers/models/qwen2_vl/processing_qwen2_vl.py (image_grid_thw.prod() // merge_size**2)",
    "qwen2_5_vl": "transformers/models/qwen2_5_vl/processing_qwen2_5_vl.py (image_grid_thw.prod() // merge_size**2)",
    "gemma3": "transformers/models/gemma3/processing_gemma3.py (image_seq_length = mm_tokens_per_image per crop,"
    " between boi and eoi)",
}


def _imports() -> tuple[Any, Any]:
    try:
        import numpy
        import transformers
    except Exception as exc:  # a broken install raises more than ImportError (a torch mismatch): reported as missing
        raise Missing(
            f"the vlm workload needs transformers and numpy, which cannot be imported: {type(exc).__name__}: {exc}; "
            "install transformers in this interpreter"
        ) from exc
    return transformers, numpy


def _processor(transformers: Any, path: str) -> Any:
    """The model's image processor from its preprocessor_config.json: the PIL backend
    (`…ImageProcessorPil`), else the torchvision one; never a download."""
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    kind = raw.get("image_processor_type")
    if not isinstance(kind, str):
        raise ValueError(f"{path} names no image_processor_type: transformers cannot tell which processor it describes")
    settings = {k: v for k, v in raw.items() if k not in ("image_processor_type", "processor_class", "auto_map")}
    errors = []
    for name in (kind + "Pil", kind):
        cls = getattr(transformers, name, None)
        if cls is None:
            continue
        try:
            return cls(**settings)
        except ImportError as exc:  # transformers' word for a missing backend (PIL, torchvision)
            errors.append(f"{name}: {str(exc).strip().splitlines()[0]}")
    raise Missing(
        f"the image processor {kind} cannot be built here ({'; '.join(errors) or 'transformers has no such class'}); "
        "install pillow (pip install pillow) in this interpreter"
    )


def _image_tokens(config: Any, processed: dict, images: int) -> list[int]:
    """Image tokens each image becomes in the prompt, by its processor's rule (`RULES`)."""
    kind = config.model_type
    if kind == "llava":
        height, width = processed["pixel_values"].shape[-2:]
        patch = config.vision_config.patch_size
        # CLIP's CLS token: the processor's num_additional_image_tokens (1 on the hub's llava-1.5).
        n = (height // patch) * (width // patch) + 1
        if config.vision_feature_select_strategy == "default":
            n -= 1
        return [int(n)] * images
    if kind in ("qwen2_vl", "qwen2_5_vl"):
        merge = config.vision_config.spatial_merge_size
        return [int(g.prod()) // merge**2 for g in processed["image_grid_thw"]]
    if kind == "gemma3":
        crops = processed.get("num_crops")
        per_crop = int(config.mm_tokens_per_image)
        return [per_crop * (1 + int(c)) for c in crops] if crops is not None else [per_crop] * images
    raise Unsupported(
        f"model_type {kind!r}: the vlm workload follows the image-token rules of {', '.join(sorted(RULES))}; "
        "measure this model with --script"
    )


def _placeholder(config: Any, tokens: int) -> list[int]:
    """The ids one image occupies in the prompt, as its processor writes them."""
    kind = config.model_type
    if kind == "llava":
        return [config.image_token_index] * tokens
    if kind in ("qwen2_vl", "qwen2_5_vl"):
        return [config.vision_start_token_id] + [config.image_token_id] * tokens + [config.vision_end_token_id]
    # gemma3: boi, the image tokens, eoi (the processor's "\n\n" around them are text).
    return [config.boi_token_index] + [config.image_token_index] * tokens + [config.eoi_token_index]


def _text_ceiling(config: Any, vocab: int) -> int:
    """Random text ids stay below every special id the config names (an image id in the text
    would make the model count more image tokens than features)."""
    special = [
        v
        for k, v in vars(config).items()
        if isinstance(v, int) and not isinstance(v, bool) and k.endswith(("token_id", "token_index")) and 0 < v < vocab
    ]
    return min(special + [vocab])


def run(rec: Recorder, torch: Any, spec: Vlm) -> None:
    transformers, numpy = _imports()
    with open(spec.model_config, encoding="utf-8") as f:
        raw = json.load(f)
    raw.pop("quantization_config", None)  # random weights are built in --dtype, never quantized
    model_type = raw.pop("model_type")
    if model_type not in RULES:
        raise Unsupported(
            f"model_type {model_type!r}: the vlm workload follows the image-token rules of {', '.join(sorted(RULES))}; "
            "measure this model with --script"
        )
    config = transformers.AutoConfig.for_model(model_type, **raw)
    dtype = getattr(torch, spec.dtype)
    device = torch.device(spec.devices[0])
    torch.manual_seed(spec.seed)
    processor = _processor(transformers, spec.processor_config)
    rec.describe(
        workload="vlm",
        model=spec.model_config,
        model_type=model_type,
        transformers_version=transformers.__version__,
        image_processor=type(processor).__name__,
        dtype=spec.dtype,
    )
    with rec.phase("model_load") as info:
        with torch.device(device):
            model = transformers.AutoModelForImageTextToText.from_config(config, dtype=dtype)
        info["built"] = type(model).__name__
        info["parameters"] = sum(p.numel() for p in model.parameters())
        info["attention_implementation"] = getattr(model.config, "_attn_implementation", None)
    model.eval()
    images = spec.batch * spec.images_per_request
    with rec.phase(
        "inputs",
        requested_resolution=[spec.height, spec.width],
        images_per_request=spec.images_per_request,
        requests=spec.batch,
        image_processor=type(processor).__name__,
        rule=RULES[model_type],
    ) as info:
        rng = numpy.random.default_rng(spec.seed)
        pictures = [rng.integers(0, 256, (spec.height, spec.width, 3), dtype=numpy.uint8) for _ in range(images)]
        processed = processor(images=pictures, return_tensors="pt")
        per_image = _image_tokens(config, processed, images)
        info["processed_pixel_shape"] = list(processed["pixel_values"].shape)
        if "image_grid_thw" in processed:
            info["image_grid_thw"] = processed["image_grid_thw"].tolist()
        info["image_tokens_per_image"] = per_image
        vocab = config.get_text_config(decoder=True).vocab_size
        ceiling = _text_ceiling(config, vocab)
        rows = []
        for r in range(spec.batch):
            ids: list[int] = []
            for k in range(spec.images_per_request):
                ids += _placeholder(config, per_image[r * spec.images_per_request + k])
            text = torch.randint(0, ceiling, (spec.prompt_tokens,), generator=torch.Generator().manual_seed(spec.seed + r))
            rows.append(ids + text.tolist())
        prompt = torch.tensor(rows, dtype=torch.long)
        info["image_tokens_per_request"] = sum(per_image[: spec.images_per_request])
        info["text_tokens_per_request"] = spec.prompt_tokens
        info["prompt_tokens_per_request"] = prompt.shape[1]
        info["processed_shape"] = list(prompt.shape)
        ids = prompt.to(device)
        mask = torch.ones_like(ids)
        extra: dict = {"pixel_values": processed["pixel_values"].to(device=device, dtype=dtype)}
        if "image_grid_thw" in processed:
            extra["image_grid_thw"] = processed["image_grid_thw"].to(device)
        # The processor's modality ids (processing_utils.py::create_mm_token_type_ids: 1 on image
        # tokens): Qwen2-VL's M-RoPE reads them as `mm_token_type_ids`, Gemma 3's bidirectional
        # image attention as `token_type_ids`.
        if model_type in ("qwen2_vl", "qwen2_5_vl"):
            extra["mm_token_type_ids"] = (prompt == config.image_token_id).long().to(device)
        elif model_type == "gemma3":
            extra["token_type_ids"] = (prompt == config.image_token_index).long().to(device)
    cache = transformers.cache_utils.DynamicCache(config=model.config)
    with torch.no_grad():
        with rec.phase("prefill", prompt_tokens=int(prompt.shape[1]), cache="dynamic") as info:
            out = model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True, logits_to_keep=1, **extra)
            token = out.logits[:, -1:].argmax(-1)
            info["logits_shape"] = list(out.logits.shape)
            del out
            info["cache_bytes"] = cache_bytes(cache, model.device.type)
        del extra
        with rec.phase("decode", new_tokens=spec.new_tokens) as info:
            for _ in range(spec.new_tokens):
                out = model(input_ids=token, past_key_values=cache, use_cache=True, logits_to_keep=1)
                token = out.logits[:, -1:].argmax(-1)
                del out
            info["cache_bytes"] = cache_bytes(cache, model.device.type)
            info["cache_tokens"] = int(cache.get_seq_length())
    del cache, token

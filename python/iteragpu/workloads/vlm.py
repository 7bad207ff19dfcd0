"""A multimodal prompt: images and text into a vision-language model (LLaVA-1.5, Qwen2-VL,
Gemma 3, Llama-3.2-Vision) built from its config with random weights directly on the device, which then generates
with its KV cache. Inference only.

The images are processed by the model's own image processor, built from the folder's
`preprocessor_config.json` (transformers' PIL backend: numpy, outside torch, no torchvision
needed), on random images of the requested size; the image tokens each image becomes are counted
by the processor's own rule (`_image_tokens`, each rule cited by its transformers file), because
what a configuration says is not the shape really processed: LLaVA-1.5 resizes and crops every
image to 336×336, Qwen2-VL keeps the size (to multiples of 28) and so its token count with it.

Phases: model_load, inputs (the processing, the pixels moved to the device), prefill (the forward
with the images, cold), decode (the new tokens one by one with the cache). With `--requests N`
(`spec.concurrent`) the same phases hold N requests alive together, each with its own images and
cache, prefilled one after another and decoded round-robin, as causal_lm.py::_serve does.
"""

from __future__ import annotations

import inspect
import json
import math
from typing import Any

from .. import names
from ..recorder import Recorder
from ..spec import Vlm
from . import Missing
from .causal_lm import cache_bytes


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
    "mllama": "transformers/models/mllama/processing_mllama.py (one <|image|> token per image in the prompt; the"
    " image reaches the text through cross-attention: image_processing_mllama.py tiles it into up to max_image_tiles"
    " tiles of size x size, modeling_mllama.py encodes every tile slot into (image_size // patch_size)**2 + 1 states,"
    " projected as the cross-attention layers' keys and values)",
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
    # Only a class transformers' own image-processor mapping lists, resolved through it: a name
    # from the file never reaches getattr on a module (names.py).
    names.image_processor_class(transformers, kind, path)
    settings = {k: v for k, v in raw.items() if k not in ("image_processor_type", "processor_class", *names.REMOTE_CODE_KEYS)}
    hidden = sorted(k for k in settings if not isinstance(k, str) or k.startswith("_"))
    if hidden:
        raise names.refuse(hidden[0], "setting", path, "a processor setting (a name that does not begin with `_`)")
    errors = []
    for name in (kind + "Pil", kind):
        if name not in names.image_processor_names():
            continue
        cls = names.image_processor_class(transformers, name, path)
        try:
            return cls(**settings)
        except ImportError as exc:  # transformers' word for a missing backend (PIL, torchvision)
            errors.append(f"{name}: {str(exc).strip().splitlines()[0]}")
    if not errors:
        # No class of that name: the file names something this transformers does not have, which
        # no package to install would fix.
        raise ValueError(
            f"{path}: image_processor_type {kind!r} is not an image processor of transformers {transformers.__version__}; "
            "fix the file (the name published with the model, e.g. Qwen2VLImageProcessor), or upgrade transformers if the model is newer"
        )
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
    if kind == "mllama":
        return [1] * images
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
    if kind == "mllama":
        return [config.image_token_index] * tokens
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


def _requests(
    rec: Recorder,
    torch: Any,
    numpy: Any,
    processor: Any,
    config: Any,
    spec: Vlm,
    lengths: list[int],
    outputs: list[int],
    device: Any,
    dtype: Any,
) -> tuple[list[tuple[Any, dict]], dict]:
    """Each request's prompt (`lengths[r]` text tokens after its images' placeholders) and the
    model's image inputs, as one batch when every request has the same length; the inputs phase
    records the processed shapes and every request's image tokens, and refuses a request whose
    prompt and `outputs[r]` new tokens pass the model's positions (`_check_positions`). Returns
    the (input_ids, kwargs) of each forward, and the kwargs each decoding step needs
    (Llama-3.2-Vision's cross-attention mask, one row per new token)."""
    model_type = config.model_type
    per_request = spec.images_per_request
    batched = spec.concurrent is None
    units = [list(range(len(lengths)))] if batched else [[r] for r in range(len(lengths))]
    rng = numpy.random.default_rng(spec.seed)
    vocab = config.get_text_config(decoder=True).vocab_size
    ceiling = _text_ceiling(config, vocab)
    forwards: list[tuple[Any, dict]] = []
    image_tokens = [0] * len(lengths)
    every_image: list[int] = []
    grids: list[list[int]] = []
    with rec.phase(
        "inputs",
        requested_resolution=[spec.height, spec.width],
        images_per_request=per_request,
        requests=len(lengths),
        image_processor=type(processor).__name__,
        rule=RULES[model_type],
    ) as info:
        for unit in units:
            pictures = [
                [rng.integers(0, 256, (spec.height, spec.width, 3), dtype=numpy.uint8) for _ in range(per_request)] for _ in unit
            ]
            # Llama-3.2-Vision's processor takes a list of images per request; the others a flat list.
            flat = [p for row in pictures for p in row]
            processed = processor(images=pictures if model_type == "mllama" else flat, return_tensors="pt")
            per_image = _image_tokens(config, processed, len(flat))
            rows = []
            for k, r in enumerate(unit):
                ids: list[int] = []
                for i in range(per_request):
                    ids += _placeholder(config, per_image[k * per_request + i])
                image_tokens[r] = sum(per_image[k * per_request : (k + 1) * per_request])
                text = torch.randint(0, ceiling, (lengths[r],), generator=torch.Generator().manual_seed(spec.seed + r))
                rows.append(ids + text.tolist())
            prompt = torch.tensor(rows, dtype=torch.long)
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
            elif model_type == "mllama":
                extra.update(_mllama_inputs(torch, processor, config, processed, rows, info))
                extra = {k: v.to(device) if k != "pixel_values" else v for k, v in extra.items()}
            if unit[0] == 0:
                info["processed_pixel_shape"] = list(processed["pixel_values"].shape)
            if "image_grid_thw" in processed:
                grids += processed["image_grid_thw"].tolist()
            every_image += per_image[: len(unit) * per_request]
            forwards.append((prompt.to(device), extra))
        # Every request's images, in request order (with --requests, one entry per request).
        if grids:
            info["image_grid_thw"] = grids
        info["image_tokens_per_image"] = every_image
        info["image_tokens_per_request"] = image_tokens if not batched else image_tokens[0]
        info["text_tokens_per_request"] = lengths if not batched else lengths[0]
        prompt_lengths = [int(ids.shape[1]) for ids, _ in forwards]
        info["prompt_tokens_per_request"] = prompt_lengths if not batched else prompt_lengths[0]
        info["processed_shape"] = [list(ids.shape) for ids, _ in forwards] if not batched else list(forwards[0][0].shape)
        per_row = [int(ids.shape[1]) for ids, _ in forwards for _ in range(int(ids.shape[0]))]
        _check_positions(config, spec, per_row, lengths, outputs)
    return forwards, info


class TooLong(ValueError):
    """A request's prompt (text and image tokens) and output pass the model's positions."""


def _check_positions(config: Any, spec: Vlm, prompts: list[int], lengths: list[int], outputs: list[int]) -> None:
    """Refuses a request longer than the text model's `max_position_embeddings` once its image
    tokens are known (the command line checked the text, the output and the least the images take)."""
    limit = getattr(config.get_text_config(decoder=True), "max_position_embeddings", None)
    if not isinstance(limit, int) or isinstance(limit, bool):
        return
    for r, (prompt, output) in enumerate(zip(prompts, outputs)):
        if prompt + output > limit:
            raise TooLong(
                f"request {r}: {prompt} prompt tokens ({lengths[r]} text + {prompt - lengths[r]} image tokens with their "
                f"markers, {spec.images_per_request} image(s) of {spec.height}x{spec.width}) + {output} output tokens = "
                f"{prompt + output}, beyond the model's {limit} positions (max_position_embeddings); shorten the prompt "
                "or the output, or give fewer or smaller images (--images-per-request, --resolution)"
            )


def _mllama_inputs(torch: Any, processor: Any, config: Any, processed: dict, rows: list[list[int]], info: dict) -> dict:
    """Llama-3.2-Vision's tiles and cross-attention mask, by transformers' own
    processing_mllama.py (`get_cross_attention_token_mask`, `convert_sparse_cross_attention_mask_to_dense`):
    every text token from an image's <|image|> on attends to that image's tiles."""
    from transformers.models.mllama import processing_mllama as pm

    tiles = processed["num_tiles"]
    sparse = [pm.get_cross_attention_token_mask(row, config.image_token_index) for row in rows]
    dense = pm.convert_sparse_cross_attention_mask_to_dense(sparse, tiles, processor.max_image_tiles, len(rows[0]))
    vision = config.vision_config
    # modeling_mllama.py: every tile slot (padding tiles too, masked) is encoded into this many states.
    patches = (vision.image_size // vision.patch_size) ** 2 + 1
    slots = int(processed["pixel_values"].shape[2])
    if "tiles_per_image" not in info:
        info["tiles_per_image"] = [int(t) for row in tiles for t in row]
        info["aspect_ratio_ids"] = processed["aspect_ratio_ids"].tolist()
        info["vision_tokens_per_tile"] = patches
        info["vision_tokens_per_image"] = slots * patches
    return {
        "aspect_ratio_ids": processed["aspect_ratio_ids"],
        "aspect_ratio_mask": processed["aspect_ratio_mask"],
        "cross_attention_mask": torch.as_tensor(dense),
    }


def _step(extra: dict) -> dict:
    """What each decoding step passes besides the token: as `generate` does
    (modeling_mllama.py::_update_model_kwargs_for_generation), Llama-3.2-Vision's new token
    attends to the images the last prompt token did."""
    mask = extra.get("cross_attention_mask")
    return {} if mask is None else {"cross_attention_mask": mask[:, -1:]}


def _watch_states(model: Any, info: dict) -> Any:
    """Records the cross-attention states' shape as modeling_mllama.py passes them to the text
    (the projector's output as (images × tiles, states per tile, hidden)); a handle to remove."""
    projector = getattr(getattr(model, "model", None), "multi_modal_projector", None)
    if projector is None or not hasattr(projector, "out_features"):
        return None

    def hook(_module: Any, _args: Any, out: Any) -> None:
        shape = list(out.shape)
        info.setdefault("cross_attention_states_shape", [])
        info["cross_attention_states_shape"].append([math.prod(shape[:-2]), shape[-2], shape[-1]])

    return projector.register_forward_hook(hook)


def run(rec: Recorder, torch: Any, spec: Vlm) -> None:
    transformers, numpy = _imports()
    with open(spec.model_config, encoding="utf-8") as f:
        raw = json.load(f)
    raw.pop("quantization_config", None)  # random weights are built in --dtype, never quantized
    model_type = names.check_config(transformers, raw, spec.model_config)
    if model_type not in RULES:
        raise Unsupported(
            f"model_type {model_type!r}: the vlm workload follows the image-token rules of {', '.join(sorted(RULES))}; "
            "measure this model with --script"
        )
    config = transformers.AutoConfig.for_model(model_type, **raw)
    dtype = names.torch_dtype(torch, spec.dtype, "the worker spec")
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
    concurrent = spec.concurrent
    if concurrent is None:
        lengths = [spec.prompt_tokens] * spec.batch
        outputs = [spec.new_tokens] * spec.batch
    else:
        lengths, outputs = list(concurrent.prompt_lengths), list(concurrent.output_lengths)
    forwards, _ = _requests(rec, torch, numpy, processor, config, spec, lengths, outputs, device, dtype)
    device_type = model.device.type
    # transformers 5 renames `past_key_values` to `cache` (deprecated until 5.40): the name the model takes.
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    caches: list[Any] = []
    tokens: list[Any] = []
    steps: list[dict] = []
    with torch.no_grad():
        with rec.phase(
            "prefill",
            prompt_tokens=[int(ids.shape[1]) for ids, _ in forwards] if concurrent else int(forwards[0][0].shape[1]),
            requests=len(lengths),
            cache="dynamic",
        ) as info:
            watch = _watch_states(model, info)
            # With --requests, each request is prefilled alone into its own cache while the earlier
            # ones stay alive, as a server admits them (causal_lm.py::_serve).
            while forwards:
                ids, extra = forwards.pop(0)
                cache = transformers.cache_utils.DynamicCache(config=model.config)
                out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True, logits_to_keep=1, **{key: cache}, **extra)
                tokens.append(out.logits[:, -1:].argmax(-1))
                info["logits_shape"] = list(out.logits.shape)
                del out
                steps.append(_step(extra))
                del extra, ids
                caches.append(cache)
            if watch is not None:
                watch.remove()
            per_request = [cache_bytes(c, device_type) for c in caches]
            if concurrent:
                info["cache_bytes_per_request"] = per_request
            info["cache_bytes"] = sum(per_request)
        with rec.phase(
            "decode",
            new_tokens=outputs if concurrent else spec.new_tokens,
            requests=len(lengths),
            schedule="round-robin" if concurrent else "batch",
        ) as info:
            for step in range(max(outputs)):
                for r, cache in enumerate(caches):
                    if step < outputs[r]:
                        out = model(input_ids=tokens[r], use_cache=True, logits_to_keep=1, **{key: cache}, **steps[r])
                        tokens[r] = out.logits[:, -1:].argmax(-1)
                        del out
            per_request = [cache_bytes(c, device_type) for c in caches]
            if concurrent:
                info["cache_bytes_per_request"] = per_request
                info["cache_tokens"] = [int(c.get_seq_length()) for c in caches]
            else:
                info["cache_tokens"] = int(caches[0].get_seq_length())
            info["cache_bytes"] = sum(per_request)
    del caches, tokens, steps

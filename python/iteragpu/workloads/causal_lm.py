"""A language model built from a Hugging Face config with random weights, directly on the device
(same shapes and dtypes as the real model, nothing downloaded), measured while it generates or
trains.

Generation phases: model_load, inputs, prefill (the prompt's first pass, cold), decode (the new
tokens one by one, cold), then prefill_warm and decode_warm (the same generation again, with a
new cache). Greedy decoding with `logits_to_keep=1`, as `generate()` does. The cache object's real
size (the storage of every tensor it holds, counted once) is recorded after prefill and decode.

With `--requests N` (`spec.concurrent`), the same phases hold N requests alive together, each with
its own DynamicCache: `prefill` prefills them one after another (one phase for all: a server admits
them in turn while every earlier cache stays alive, so the phase's peak is the last prefill's
transient on top of every cache held; a phase per request would make the phase list depend on N),
then `decode` decodes them round-robin, one token per request per turn, as a server interleaves
them. A request that has finished keeps its cache until all have (the Σ the estimate counts).
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from .. import built_once, names
from ..recorder import Recorder
from ..spec import CausalLm, Quantize
from . import Missing, packed, packed_lora, sharding, training


def _config(spec: CausalLm) -> tuple[Any, Any]:
    try:
        import transformers
    except Exception as exc:  # a broken install raises more than ImportError (a torch mismatch): reported as missing
        raise Missing(
            f"the causal-lm workload needs transformers, which cannot be imported: {type(exc).__name__}: {exc}; "
            "install transformers in this interpreter"
        ) from exc
    with open(spec.model_config, encoding="utf-8") as f:
        raw = json.load(f)
    # Random weights are built in --dtype; a bitsandbytes config reaches the worker as
    # `spec.quantization` (the CLI reads it), any other format is not loaded by this workload.
    raw.pop("quantization_config", None)
    model_type = names.check_config(transformers, raw, spec.model_config)
    return transformers, transformers.AutoConfig.for_model(model_type, **raw)


def bnb_config(transformers: Any, dtype: Any, quantize: Quantize) -> Any:
    """transformers' BitsAndBytesConfig for `--quantize`: the compute dtype is the model's."""
    if quantize.quantize == "int8":
        return transformers.BitsAndBytesConfig(load_in_8bit=True)
    return transformers.BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=quantize.quantize,
        bnb_4bit_use_double_quant=quantize.double_quant,
        bnb_4bit_compute_dtype=dtype,
    )


def build_quantized(torch: Any, transformers: Any, config: Any, dtype: Any, device: Any, quantize: Quantize) -> tuple[Any, dict[str, Any]]:
    """The model as `from_pretrained(..., quantization_config=BitsAndBytesConfig(...))` loads it,
    with random values in place of the file's: built on the meta device, its linear layers
    replaced by bitsandbytes' (transformers' `replace_with_bnb_linear`, skipping
    `get_keys_to_not_convert`: the output head), then each weight made in `dtype` on the device
    and quantized there one at a time (bitsandbytes' `Params4bit._quantize`, `Int8Params._quantize`),
    so that the load's peak is the quantized model plus one float weight, as from_pretrained's.
    Everything else (embeddings, norms, the head, buffers) is made on the device in `dtype` and
    initialised by the model's own `initialize_weights`."""
    try:
        bnb = importlib.import_module("bitsandbytes")  # by name: no stubs for the type checker
    except Exception as exc:  # a broken install raises more than ImportError: reported as missing
        raise Missing(f"--quantize needs bitsandbytes, which cannot be imported: {type(exc).__name__}: {exc}") from exc
    from transformers.integrations.bitsandbytes import replace_with_bnb_linear
    from transformers.quantizers.base import get_keys_to_not_convert

    qconfig = bnb_config(transformers, dtype, quantize)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    skipped = sorted(get_keys_to_not_convert(model))
    model = replace_with_bnb_linear(model, modules_to_not_convert=skipped, quantization_config=qconfig)
    quantized = 0
    for module in model.modules():
        four = isinstance(module, bnb.nn.Linear4bit)
        if not (four or isinstance(module, bnb.nn.Linear8bitLt)):
            continue
        old = module.weight
        w = torch.empty(old.shape, dtype=dtype, device=device).normal_(0.0, 0.02)
        if four:
            param = bnb.nn.Params4bit(
                w, requires_grad=False, blocksize=old.blocksize, compress_statistics=old.compress_statistics,
                quant_type=old.quant_type, quant_storage=old.quant_storage, module=module,
            )
            module.weight = param._quantize(device)
        else:
            param = bnb.nn.Int8Params(w, requires_grad=False, has_fp16_weights=False)
            module.weight = param._quantize(device)
        del w, param
        if module.bias is not None:
            module.bias = torch.nn.Parameter(torch.zeros(module.bias.shape, dtype=dtype, device=device), requires_grad=False)
        module._is_hf_initialized = True
        quantized += 1
    materialize(torch, model, device)
    model.is_loaded_in_4bit = quantize.quantize != "int8"
    model.is_loaded_in_8bit = quantize.quantize == "int8"
    model.is_quantized = True
    model.quantization_method = "bitsandbytes"
    model.config.quantization_config = qconfig
    details = {
        "quantization": qconfig.to_dict(),
        "quantized_linear_layers": quantized,
        "kept_unquantized": skipped,
    }
    return model, details


def materialize(torch: Any, model: Any, device: Any) -> None:
    """Every parameter and buffer still on the meta device made on `device` (the layers already
    built there are left as they are), then the model's own initialisation and tying. A
    parameter already tied on the meta device (an output head sharing the embeddings) is made
    once, as `from_pretrained` loads it once: made twice, the second copy would be a transient of
    the embeddings' size until `tie_weights`."""
    made: dict[int, tuple[Any, Any]] = {}  # id of the meta parameter -> (it, kept alive; its twin)
    for module in model.modules():
        for name, p in list(module.named_parameters(recurse=False)):
            if p.device.type == "meta":
                if id(p) not in made:
                    made[id(p)] = (p, torch.nn.Parameter(torch.empty_like(p, device=device), requires_grad=p.requires_grad))
                setattr(module, name, made[id(p)][1])
        for name, b in list(module.named_buffers(recurse=False)):
            if b.device.type == "meta":
                module._buffers[name] = torch.empty_like(b, device=device)
    model.initialize_weights()
    model.tie_weights()


def cache_tensors(cache: Any, device_type: str = "cuda") -> list[Any]:
    """Every tensor reachable from a cache object's layers on `device_type`, each storage once."""
    seen: dict[int, Any] = {}

    def visit(obj: Any, depth: int = 0) -> None:
        if depth > 4 or obj is None:
            return
        if hasattr(obj, "untyped_storage") and hasattr(obj, "device"):
            if obj.device.type == device_type and obj.numel() > 0:
                seen.setdefault(id(obj.untyped_storage()), obj)
            return
        if isinstance(obj, (list, tuple)):
            for item in obj:
                visit(item, depth + 1)
        elif isinstance(obj, dict):
            for item in obj.values():
                visit(item, depth + 1)
        elif hasattr(obj, "__dict__") and depth < 3:
            for item in vars(obj).values():
                visit(item, depth + 1)

    try:
        visit(getattr(cache, "layers", cache))
    finally:
        # `visit` refers to itself: unbroken, that cycle would keep `seen` (and so every tensor
        # the cache held at this call) alive until the garbage collector runs.
        visit = None  # type: ignore[assignment]  # dropped on purpose: the cycle is the point
    return list(seen.values())


def cache_bytes(cache: Any, device_type: str = "cuda") -> int:
    """Bytes of GPU storage held by a cache object: every tensor reachable from its layers,
    each storage counted once (a sliding layer keeps a view of a larger tensor)."""
    return sum(t.untyped_storage().nbytes() for t in cache_tensors(cache, device_type))


def _new_cache(transformers: Any, torch: Any, model: Any, spec: CausalLm) -> Any:
    kind = spec.cache
    config = model.config
    total = spec.prompt_tokens + spec.new_tokens
    cu = transformers.cache_utils
    if kind == "dynamic":
        return cu.DynamicCache(config=config)
    if kind == "static":
        return cu.StaticCache(config=config, max_cache_len=total)
    if kind == "offloaded":
        return cu.DynamicCache(config=config, offloading=True)
    if kind == "sliding":
        text = config.get_text_config(decoder=True)
        window = spec.window or getattr(text, "sliding_window", None)
        if not window:
            raise ValueError("--cache sliding needs --window N: this model has no sliding_window")
        cache = cu.DynamicCache(config=config)
        cache.layers = [cu.DynamicSlidingWindowLayer(sliding_window=window) for _ in cache.layers]
        return cache
    if kind == "quantized":
        try:
            import optimum.quanto  # noqa: F401
        except Exception as exc:  # a broken install raises more than ImportError: reported as missing
            raise Missing(
                f"--cache quantized needs optimum-quanto, which cannot be imported: {type(exc).__name__}: {exc}"
            ) from exc
        q = spec.quantized_cache
        assert q is not None  # the CLI sends the settings with --cache quantized
        return cu.QuantizedCache(
            backend="quanto", config=config, nbits=q.kv_quant_bits, q_group_size=q.kv_group_size, residual_length=q.kv_residual
        )
    raise ValueError(f"unknown cache {kind!r}")


def _generate(rec: Recorder, torch: Any, transformers: Any, model: Any, ids: Any, mask: Any, spec: CausalLm, suffix: str) -> None:
    cache = _new_cache(transformers, torch, model, spec)
    with rec.phase("prefill" + suffix, processed_shape=list(ids.shape), cache=spec.cache) as info:
        out = model(input_ids=ids, attention_mask=mask, **_cache(model, cache), use_cache=True, logits_to_keep=1)
        token = out.logits[:, -1:].argmax(-1)
        info["logits_shape"] = list(out.logits.shape)
        del out
        info["cache_bytes"] = cache_bytes(cache, model.device.type)
    with rec.phase("decode" + suffix, new_tokens=spec.new_tokens) as info:
        for _ in range(spec.new_tokens):
            out = model(input_ids=token, **_cache(model, cache), use_cache=True, logits_to_keep=1)
            token = out.logits[:, -1:].argmax(-1)
            del out
        info["cache_bytes"] = cache_bytes(cache, model.device.type)
        tokens = cache.get_seq_length()
        # A number, or a tensor (a static cache's count); a sweep's symbolic trace keeps its symbol.
        info["cache_tokens"] = tokens if isinstance(tokens, torch.SymInt) else int(tokens)
    del cache, token


def _serve(rec: Recorder, torch: Any, transformers: Any, model: Any, prompts: list[Any], spec: CausalLm, suffix: str) -> None:
    """N live requests, each its own cache: prefilled one after another, then decoded in turn."""
    concurrent = spec.concurrent
    assert concurrent is not None  # the CLI sends the lengths with --requests
    outputs = list(concurrent.output_lengths)
    caches: list[Any] = []
    tokens: list[Any] = []
    device_type = model.device.type
    with rec.phase("prefill" + suffix, requests=len(prompts), prompt_lengths=list(concurrent.prompt_lengths), cache="dynamic") as info:
        for ids in prompts:
            cache = transformers.cache_utils.DynamicCache(config=model.config)
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids), **_cache(model, cache), use_cache=True, logits_to_keep=1)
            tokens.append(out.logits[:, -1:].argmax(-1))
            del out
            caches.append(cache)
        per_request = [cache_bytes(c, device_type) for c in caches]
        info["cache_bytes_per_request"] = per_request
        info["cache_bytes"] = sum(per_request)
    with rec.phase("decode" + suffix, requests=len(prompts), output_lengths=outputs, schedule="round-robin") as info:
        for step in range(max(outputs)):
            for r, cache in enumerate(caches):
                if step < outputs[r]:
                    out = model(input_ids=tokens[r], **_cache(model, cache), use_cache=True, logits_to_keep=1)
                    tokens[r] = out.logits[:, -1:].argmax(-1)
                    del out
        per_request = [cache_bytes(c, device_type) for c in caches]
        info["cache_bytes_per_request"] = per_request
        info["cache_bytes"] = sum(per_request)
        info["cache_tokens"] = sum(int(c.get_seq_length()) for c in caches)
    del caches, tokens


def run(rec: Recorder, torch: Any, spec: CausalLm) -> None:
    transformers, config = _config(spec)
    dtype = names.torch_dtype(torch, spec.dtype, "the worker spec")
    device = torch.device(spec.devices[0])
    torch.manual_seed(spec.seed)
    rec.describe(
        workload="causal-lm",
        model=spec.model_config,
        model_type=config.model_type,
        transformers_version=transformers.__version__,
        dtype=spec.dtype,
    )
    train_spec = spec.training
    train = train_spec is not None
    shard = train_spec.shard if train_spec is not None else None
    precision = train_spec.precision if train_spec is not None else None
    # Gradient checkpointing is a training setting: off while generating.
    checkpointing = train_spec is not None and train_spec.gradient_checkpointing
    checkpointing_done = False
    if shard:
        sharding.init(rec, torch, device)
    with rec.phase("model_load") as info:
        if shard == "fsdp":
            model, details = sharding.build_fsdp(
                torch, transformers, config, dtype, device, precision, checkpointing
            )
            info.update(details)
            checkpointing_done = checkpointing
        elif spec.quantization is not None:
            model, details = build_quantized(torch, transformers, config, dtype, device, spec.quantization)
            info.update(details)
        elif spec.packed is not None:
            model, details = packed.build_packed(torch, transformers, config, dtype, device, spec.packed, materialize)
            info.update(details)
        else:
            with torch.device(device):
                model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
        # The model's parameters (a DTensor counts its global shape), and this rank's own.
        info["parameters"] = sum(p.numel() for p in model.parameters())
        if shard == "fsdp":
            info["local_parameters"] = sum(sharding.local(p).numel() for p in model.parameters())
        info["attention_implementation"] = getattr(model.config, "_attn_implementation", None)
        if train and spec.lora_rank:
            try:
                import peft
            except Exception as exc:  # a broken install raises more than ImportError: reported as missing
                raise Missing(f"--lora-rank needs peft, which cannot be imported: {type(exc).__name__}: {exc}") from exc
            if spec.quantization is not None:
                # QLoRA's recipe: the norms and the head upcast to float32, the input
                # embeddings' outputs made to require grad, gradient checkpointing when asked.
                model = peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=checkpointing)
            # "all-linear" is peft's own value (every linear layer but the output head), passed as is.
            targets = "all-linear" if list(spec.lora_targets) == ["all-linear"] else list(spec.lora_targets)
            if spec.packed is not None:
                lora, said = packed_lora.lora_config(peft, model, spec.lora_rank, targets, packed.packed_linear_class(torch))
                info["lora"] = said
            else:
                lora = peft.LoraConfig(r=spec.lora_rank, lora_alpha=2 * spec.lora_rank, target_modules=targets)
            model = peft.get_peft_model(model, lora)
        if shard == "ddp":
            if checkpointing:
                model.gradient_checkpointing_enable()
                model.config.use_cache = False
                if spec.lora_rank:
                    model.enable_input_require_grads()
                checkpointing_done = True
            model = sharding.wrap_ddp(torch, model, device)
            info["shard"] = "ddp"
        info["trainable_parameters"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    # A predicted sweep's trials share the build (built_once.py): only AFTER_BUILD's keys are read below.
    spec = built_once.resume(spec)
    vocab = config.get_text_config(decoder=True).vocab_size
    if spec.concurrent is not None and not train:
        lengths = list(spec.concurrent.prompt_lengths)
        with rec.phase("inputs", requested_shape=[[1, n] for n in lengths]) as info:
            prompts = [torch.randint(0, vocab, (1, n), device=device) for n in lengths]
            info["processed_shape"] = [list(p.shape) for p in prompts]
        model.eval()
        with torch.no_grad():
            _serve(rec, torch, transformers, model, prompts, spec, "")
            _serve(rec, torch, transformers, model, prompts, spec, "_warm")
        return
    length = spec.context if train else spec.prompt_tokens
    with rec.phase("inputs", requested_shape=[spec.batch, length]) as info:
        ids = torch.randint(0, vocab, (spec.batch, length), device=device)
        mask = torch.ones_like(ids)
        info["processed_shape"] = list(ids.shape)
    if train:
        model.train()
        if checkpointing and not checkpointing_done:
            model.gradient_checkpointing_enable()
            model.config.use_cache = False
            if spec.lora_rank:
                # Frozen embeddings give checkpointed layers inputs without grad: peft's fix.
                model.enable_input_require_grads()

        def loss_fn(out: Any) -> Any:
            # As transformers' ForCausalLMLoss: logits upcast to float32, shifted labels.
            logits = out.logits.float()
            return torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)
            )

        training.run(
            rec,
            torch,
            spec,
            model,
            lambda inp: model(input_ids=inp, attention_mask=mask, use_cache=False),
            loss_fn,
            ids,
            [p for p in model.parameters() if p.requires_grad],
        )
        return
    model.eval()
    with torch.no_grad():
        if spec.whole_loop:
            with rec.phase("whole_loop", protocol="whole-loop") as info:
                cache = _new_cache(transformers, torch, model, spec)
                out = model(input_ids=ids, attention_mask=mask, **_cache(model, cache), use_cache=True, logits_to_keep=1)
                token = out.logits[:, -1:].argmax(-1)
                for _ in range(spec.new_tokens):
                    out = model(input_ids=token, **_cache(model, cache), use_cache=True, logits_to_keep=1)
                    token = out.logits[:, -1:].argmax(-1)
                info["cache_bytes"] = cache_bytes(cache, model.device.type)
                del out, cache, token
            return
        _generate(rec, torch, transformers, model, ids, mask, spec, "")
        _generate(rec, torch, transformers, model, ids, mask, spec, "_warm")


def _cache(model: Any, cache: Any) -> dict[str, Any]:
    """The cache as the model's forward takes it: transformers 5 renames `past_key_values` to
    `cache` (the old name warns until it is removed in 5.40); a model that names neither (a
    wrapper taking **kwargs) gets the old name, which every release reads."""
    import inspect

    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    return {key: cache}

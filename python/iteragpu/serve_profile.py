"""vLLM's profile run, as a script the predicting worker runs on data-less CUDA tensors
(`iteragpu estimate serve vllm --activation-peak predict`).

What vLLM runs to size its KV pool (docs/research/serving/engine-rules.md §5):
* V0 `worker/model_runner.py profile_run` (0.6.3:1203-1300): `max_num_seqs` prompts whose lengths
  sum to `max_num_batched_tokens` (`tokens // seqs`, one more for the first `tokens % seqs`), the
  KV caches empty tensors, one `execute_model` with `SamplingParams(top_p=0.99, top_k=vocab - 1)`;
* V1 `v1/worker/gpu_model_runner.py profile_run` (0.11.0:3325-): `_dummy_run(max_num_batched_tokens)`
  over `min(tokens, max_num_seqs)` requests, then `_dummy_sampler_run` on their last tokens.

Here the weights are transformers' model built from its config on the fake device. The forward:
* for the families vLLM serves with Llama's layout (`VLLM_LLAMA_LAYOUT`, dense), the activations
  that layout allocates, replayed tensor by tensor over the unpadded tokens (`_vllm_llama_forward`);
* for the others, transformers' own forward over a (requests, ceil(tokens / requests)) batch with
  no KV cache (its modules are not vLLM's fused ones, and its attention runs where V1 skips it).
The final hidden states stay alive, as vLLM holds them; each request's last token goes through the
output head, then the release's sampler: V0's (`model_executor/layers/sampler.py` 0.6.4-0.7.3) or
V1's native one (`v1/sample/sampler.py` 0.9-0.11; FlashInfer's, used when `flashinfer-python` is
installed, is not modelled), the whole-vocabulary sort's kernel scratch included (`_sort`).
The phase `profile_run` starts with the weights alone on the device: its peak above its start is
vLLM's "PyTorch activation peak memory" (`torch_peak_increase`, `vllm/utils.py memory_profiling`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch

from iteragpu import names, phase


def _config(path: str, tp: int) -> Any:
    import transformers

    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    raw.pop("quantization_config", None)  # activations run in the compute dtype, never quantized
    model_type = names.check_config(transformers, raw, path)
    config = transformers.AutoConfig.for_model(model_type, **raw)
    text = config.get_text_config(decoder=True)
    if tp > 1:
        # One rank's shard, as vLLM's column/row-parallel layers cut it: heads and the MLP width
        # divided, KV heads divided (replicated below 1), the vocabulary whole (the logits are
        # gathered to the driver before sampling).
        heads = text.num_attention_heads
        text.head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
        text.num_attention_heads = max(1, heads // tp)
        kv = getattr(text, "num_key_value_heads", None) or heads
        text.num_key_value_heads = max(1, kv // tp)
        if getattr(text, "intermediate_size", None):
            text.intermediate_size = -(-text.intermediate_size // tp)
    return transformers, config


# model_type of the families whose vLLM module is Llama's layout (`model_executor/models/llama.py`,
# `qwen2.py`, `qwen3.py`, the same in 0.6.4-0.11.0): one fused qkv_proj, attention into a new
# output, o_proj, fused add-RMSNorm in place, one gate_up_proj, SiluAndMul, down_proj. A plain
# comparison with the config's string, never a lookup: other families run transformers' forward.
VLLM_LLAMA_LAYOUT = frozenset({"llama", "mistral", "qwen2", "qwen3"})

# PyTorch's stable sort of [rows, vocab] (`aten/src/ATen/native/cuda/SortStable.cu`): the segmented
# radix sort's reverse indices (int64) and CUB's temporary storage (a third keys buffer, fp32, and
# a third values buffer, int64) come from the caching allocator inside the kernel's call, so they
# never appear as tensors: 8 + 4 + 8 bytes per element, charged here for the sort's duration.
SORT_SCRATCH_BYTES_PER_ELEMENT = 20


def _sort(logits: Any) -> tuple[Any, Any]:
    """`logits.sort(dim=-1)` with the sort's kernel-internal scratch held while it runs."""
    scratch = torch.empty(logits.numel() * SORT_SCRATCH_BYTES_PER_ELEMENT, dtype=torch.uint8, device=logits.device)
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    del scratch
    return logits_sort, logits_idx


def _apply_top_k_top_p_v0(logits: Any, p: Any, k: Any) -> Any:
    """`model_executor/layers/sampler.py _apply_top_k_top_p` (0.6.4-0.7.3): every local lives to the return."""
    logits_sort, logits_idx = _sort(logits)
    top_k_mask = logits_sort.size(1) - k.to(torch.long)
    top_k_mask = logits_sort.gather(1, top_k_mask.unsqueeze(dim=1))
    top_k_mask = logits_sort < top_k_mask
    logits_sort.masked_fill_(top_k_mask, -float("inf"))
    probs_sort = logits_sort.softmax(dim=-1)
    probs_sum = probs_sort.cumsum(dim=-1)
    top_p_mask = probs_sum <= 1 - p.unsqueeze(dim=1)
    top_p_mask[:, -1] = False
    logits_sort.masked_fill_(top_p_mask, -float("inf"))
    # Re-sort the probabilities (0.6.4-0.7.3; releases before 0.6 inverted the indices and gathered).
    return torch.empty_like(logits_sort).scatter_(dim=-1, index=logits_idx, src=logits_sort)


def _sampler_v0(logits: Any, vocab: int) -> None:
    """V0's `Sampler.forward` on the profile run's parameters (top_p 0.99, top_k vocab - 1,
    temperature 1; no penalties, no prompt logprobs): fp32 logits, the top-k/top-p sort, the
    probabilities and log-probabilities, `_multinomial`'s copy and exponential draw."""
    rows = logits.shape[0]
    logits = logits.to(torch.float)
    logits.div_(torch.ones(rows, 1, device=logits.device))
    p = torch.full((rows,), 0.99, device=logits.device)
    k = torch.full((rows,), vocab - 1, device=logits.device, dtype=torch.int)
    logits = _apply_top_k_top_p_v0(logits, p, k)
    probs = torch.softmax(logits, dim=-1, dtype=torch.float)
    logprobs = torch.log_softmax(logits, dim=-1, dtype=torch.float)
    chosen = probs[torch.arange(rows, device=logits.device)]
    q = torch.empty_like(chosen).exponential_()
    chosen.div_(q).argmax(dim=1)
    del probs, logprobs, chosen, q


def _sampler_v1_triton(logits: Any) -> None:
    """V1's `_dummy_sampler_run` where the release's top-k/top-p is the Triton kernel
    (`v1/sample/ops/topk_topp_triton.py`, 0.17+ for 8 rows or more, every batch from 0.30): no sort;
    the kernel's cached buffer is at most SMs x vocab float32 (132 SMs assumed), then
    `random_sample`'s probabilities and exponential draws."""
    rows, vocab = logits.shape
    logits = logits.to(torch.float32)
    logits.argmax(dim=-1)
    buffer = torch.empty(min(rows, 132), vocab, dtype=torch.float32, device=logits.device)
    probs = logits.softmax(dim=-1, dtype=torch.float32)
    q = torch.empty_like(probs).exponential_()
    probs.div_(q).argmax(dim=-1)
    del buffer, probs, q


def _sampler_v1(logits: Any, vocab: int) -> None:
    """V1's `_dummy_sampler_run` (`v1/worker/gpu_model_runner.py` 0.9-0.11: temperature 0.5, top_p
    0.9, top_k vocab - 1, no penalties, no logprobs) through `v1/sample/sampler.py` with the
    PyTorch-native `apply_top_k_top_p` (`ops/topk_topp_sampler.py`: the cumsum written over the
    sorted probabilities, the scatter out of place) and `random_sample`."""
    rows = logits.shape[0]
    logits = logits.to(torch.float32)
    logits.argmax(dim=-1)
    logits.div_(torch.full((rows, 1), 0.5, device=logits.device))
    p = torch.full((rows,), 0.9, device=logits.device)
    k = torch.full((rows,), vocab - 1, device=logits.device, dtype=torch.int32)
    logits_sort, logits_idx = _sort(logits)
    top_k_mask = logits_sort.size(1) - k.to(torch.long)
    top_k_mask = logits_sort.gather(1, top_k_mask.unsqueeze(dim=1))
    top_k_mask = logits_sort < top_k_mask
    logits_sort.masked_fill_(top_k_mask, -float("inf"))
    probs_sort = logits_sort.softmax(dim=-1)
    probs_sum = torch.cumsum(probs_sort, dim=-1, out=probs_sort)
    top_p_mask = probs_sum <= 1 - p.unsqueeze(dim=1)
    top_p_mask[:, -1] = False
    logits_sort.masked_fill_(top_p_mask, -float("inf"))
    sampled = logits_sort.scatter(dim=-1, index=logits_idx, src=logits_sort)
    del logits_sort, logits_idx, top_k_mask, probs_sort, probs_sum, top_p_mask
    probs = sampled.softmax(dim=-1, dtype=torch.float32)
    q = torch.empty_like(probs).exponential_()
    probs.div_(q).argmax(dim=-1)
    del sampled, probs, q


def _vllm_llama_forward(text: Any, tokens: int, dtype: Any) -> Any:
    """The decoder body as vLLM's Llama-layout module allocates it: the first layer (its residual is
    its input), then one layer in steady state (every later layer is alike); the caller holds each
    layer's input until it returns. `text` is one rank's shard already (`_config`). Returns the final
    hidden states [tokens, hidden] (the final norm is fused and in place)."""
    h = text.hidden_size
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or h // heads
    kv = getattr(text, "num_key_value_heads", None) or heads
    q_width = heads * head_dim
    kv_width = kv * head_dim
    inter = text.intermediate_size
    new = {"device": "cuda", "dtype": dtype}

    def layer(x: Any, residual: Any) -> tuple[Any, Any]:
        if residual is None:
            residual, normed = x, torch.empty(tokens, h, **new)
        else:
            normed = x  # fused_add_rms_norm: x and residual updated in place
        qkv = torch.empty(tokens, q_width + 2 * kv_width, **new)
        attn = torch.empty(tokens, q_width, **new)  # V0 computes it; V1's profile run skips the kernel
        out = torch.empty(tokens, h, **new)  # o_proj
        del qkv, attn, normed
        gate_up = torch.empty(tokens, 2 * inter, **new)
        act = torch.empty(tokens, inter, **new)  # SiluAndMul
        del gate_up
        down = torch.empty(tokens, h, **new)
        del act, out
        return down, residual

    # The first layer's first matmul creates the thread's cuBLAS workspaces, held from there on.
    torch.mm(torch.empty(1, 1, **new), torch.empty(1, 1, **new))
    hidden = torch.empty(tokens, h, **new)  # embed_tokens
    residual = None
    for _ in range(2):
        hidden, residual = layer(hidden, residual)
    del residual
    return hidden


def _llama_layout(raw: dict[str, Any], text: Any) -> bool:
    """Whether vLLM serves this config with Llama's layer layout (dense: no experts)."""
    experts = ("num_experts", "num_local_experts", "n_routed_experts")
    return (
        raw.get("model_type") in VLLM_LLAMA_LAYOUT
        and bool(getattr(text, "intermediate_size", None))
        and not any(getattr(text, e, None) for e in experts)
    )


def _encoder_batch(model: Any, images: int, side: int, dtype: Any) -> tuple[Any, Any]:
    """V1's multimodal dummy batch (`profile_run`, 0.9-0.11): `images` dummy images of the largest
    size, float32 from the processor, through the vision tower and its projector; the batch (a
    local of `profile_run`) and the embeddings (the encoder cache) stay held through the language
    model's dummy run."""
    pixels = torch.empty(images, 3, side, side, dtype=torch.float32, device="cuda")
    features = model.get_image_features(pixel_values=pixels.to(dtype))
    return pixels, features


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", required=True, help="the model's config.json")
    p.add_argument("--tokens", type=int, required=True, help="max_num_batched_tokens")
    p.add_argument("--seqs", type=int, required=True, help="max_num_seqs")
    p.add_argument("--dtype", required=True, help="the compute dtype (bfloat16, float16, float32)")
    p.add_argument("--tp", type=int, default=1, help="tensor_parallel_size: one rank's shard")
    p.add_argument("--engine", choices=("v0", "v1"), default="v0", help="the release's engine: V0 (< 0.8) or V1")
    p.add_argument("--top-k-top-p", choices=("sort", "triton"), default="sort", help="V1's top-k/top-p: the whole-vocabulary sort or the Triton kernel")
    p.add_argument("--images", type=int, default=0, help="V1's multimodal dummy batch: images through the vision tower first")
    p.add_argument("--image-size", type=int, default=0, help="the dummy images' side in pixels")
    a = p.parse_args()
    transformers, config = _config(a.config, a.tp)
    with open(a.config, encoding="utf-8") as f:
        raw = json.load(f)
    text = config.get_text_config(decoder=True)
    dtype = names.torch_dtype(torch, a.dtype, "the profile run's arguments")
    requests = max(1, min(a.seqs, a.tokens))
    vocab = text.vocab_size
    layout = _llama_layout(raw, text)
    with phase("weights"):
        with torch.device("cuda"):
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
        model.eval()
    head = model.get_output_embeddings()
    if layout:
        # V0 splits the tokens without padding (`tokens // seqs`, one more for the first
        # `tokens % seqs`); each request's last token is a row of the logits.
        length = -(-a.tokens // requests)
        ends = [min(a.tokens, (i + 1) * (a.tokens // requests) + min(i + 1, a.tokens % requests)) - 1 for i in range(requests)]
        ids = None
    else:
        length = -(-a.tokens // requests)
        ids = torch.randint(0, vocab, (requests, length), device="cuda")
    run = {"requests": requests, "length": length, "tokens": a.tokens if layout else requests * length}
    if a.images:
        run["images"] = a.images
    with phase("profile_run", **run) as info:
        with torch.inference_mode():
            encoder = _encoder_batch(model, a.images, a.image_size, dtype) if a.images else None
            if layout:
                hidden = _vllm_llama_forward(text, a.tokens, dtype)
                rows = torch.tensor(ends, device="cuda")
                last = hidden.index_select(0, rows) if a.engine == "v0" else hidden[rows]
            else:
                # transformers' own forward; the last hidden states stay alive through the sampler
                # (vLLM's execute_model and profile_run hold them), captured at the output head.
                held: list[Any] = []
                hook = head.register_forward_pre_hook(lambda _m, args: held.append(args[0]))
                out = model(input_ids=ids, use_cache=False, logits_to_keep=1)
                hook.remove()
                del out
                hidden = held[0]
                last = hidden[:, -1, :]
            if a.engine == "v1":
                dummy = torch.rand_like(last)  # _dummy_sampler_run's hidden states
                logits = head(dummy)
                if a.top_k_top_p == "triton":
                    _sampler_v1_triton(logits)
                else:
                    _sampler_v1(logits, vocab)
                del dummy
            else:
                logits = head(last)
                if layout:
                    del last  # the logits processor's pruned rows are its own
                _sampler_v0(logits, vocab)
            del logits, hidden, encoder
        info["attention_implementation"] = "vllm-llama-layout" if layout else getattr(model.config, "_attn_implementation", None)
        info["forward"] = "vllm-llama-layout" if layout else "transformers"


if __name__ == "__main__":
    main()

"""vLLM's profile run, as a script the predicting worker runs on data-less CUDA tensors
(`iteragpu estimate serve vllm --activation-peak predict`).

What vLLM runs to size its KV pool (docs/research/serving/engine-rules.md §5):
* V0 `worker/model_runner.py profile_run` (0.6.3:1203-1300): `max_num_seqs` prompts whose lengths
  sum to `max_num_batched_tokens` (`tokens // seqs`, one more for the first `tokens % seqs`), the
  KV caches empty tensors, one `execute_model` with `SamplingParams(top_p=0.99, top_k=vocab - 1)`;
* V1 `v1/worker/gpu_model_runner.py profile_run` (0.11.0:3325-): `_dummy_run(max_num_batched_tokens)`
  over `min(tokens, max_num_seqs)` requests, then `_dummy_sampler_run` on their last tokens.

Here the model is transformers' own, built from its config with random weights on the fake device;
the requests are a (seqs, ceil(tokens / seqs)) batch with no KV cache (`use_cache=False`); the
logits are computed for the last token of each (`logits_to_keep=1`), then the V0 sampler's steps
(`model_executor/layers/sampler.py` 0.6.x: `logits.to(float)`, temperature, `_apply_top_k_top_p`'s
sort, softmax and scatter, the fp32 probabilities and log-probabilities, the exponential draw).
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


def _sampler(logits: Any, vocab: int) -> None:
    """V0's sampler on the profile run's parameters (top_p 0.99, top_k vocab − 1, temperature 1)."""
    rows = logits.shape[0]
    logits = logits.to(torch.float)
    logits.div_(torch.ones(rows, 1, device=logits.device))
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    k = torch.full((rows,), vocab - 1, device=logits.device, dtype=torch.long)
    top_k_mask = logits_sort.gather(1, (logits_sort.size(1) - k).unsqueeze(dim=1))
    logits_sort.masked_fill_(logits_sort < top_k_mask, -float("inf"))
    probs_sort = logits_sort.softmax(dim=-1)
    probs_sum = probs_sort.cumsum(dim=-1)
    top_p_mask = probs_sum <= 1 - 0.99
    top_p_mask[:, -1] = False
    logits_sort.masked_fill_(top_p_mask, -float("inf"))
    del probs_sort, probs_sum, top_p_mask
    logits = logits_sort.scatter(dim=-1, index=logits_idx, src=logits_sort)
    del logits_sort, logits_idx
    probs = torch.softmax(logits, dim=-1, dtype=torch.float)
    logprobs = torch.log_softmax(logits, dim=-1, dtype=torch.float)
    q = torch.empty_like(probs).exponential_()
    probs.div_(q).argmax(dim=-1)
    del probs, logprobs, q


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", required=True, help="the model's config.json")
    p.add_argument("--tokens", type=int, required=True, help="max_num_batched_tokens")
    p.add_argument("--seqs", type=int, required=True, help="max_num_seqs")
    p.add_argument("--dtype", required=True, help="the compute dtype (bfloat16, float16, float32)")
    p.add_argument("--tp", type=int, default=1, help="tensor_parallel_size: one rank's shard")
    a = p.parse_args()
    transformers, config = _config(a.config, a.tp)
    dtype = names.torch_dtype(torch, a.dtype, "the profile run's arguments")
    requests = max(1, min(a.seqs, a.tokens))
    length = -(-a.tokens // requests)
    vocab = config.get_text_config(decoder=True).vocab_size
    with phase("weights"):
        with torch.device("cuda"):
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
        model.eval()
    ids = torch.randint(0, vocab, (requests, length), device="cuda")
    with phase("profile_run", requests=requests, length=length, tokens=requests * length) as info:
        with torch.inference_mode():
            out = model(input_ids=ids, use_cache=False, logits_to_keep=1)
            logits = out.logits[:, -1, :]
            del out
            _sampler(logits, vocab)
        info["attention_implementation"] = getattr(model.config, "_attn_implementation", None)


if __name__ == "__main__":
    main()

"""Builds models from configs on the CPU with transformers and reports the real size of their KV
caches after a prefill and after greedy decoding, with the helper the causal-lm workload uses.

Usage: cache_on_cpu.py JOBS.json, where JOBS.json is a list of
{"config": PATH, "batch": B, "prompt": P, "new": N, "cache": "dynamic"|"static"}.
Prints one JSON list with, per job, the parameter count and the cache bytes.
Exits 77 (with the reason on stderr) when torch or transformers is not importable."""

import json
import sys

try:
    import torch
    import transformers  # noqa: F401
except Exception as exc:
    print(f"torch and transformers are needed: {type(exc).__name__}: {exc}", file=sys.stderr)
    sys.exit(77)

from iteragpu import spec as specs
from iteragpu.workloads import causal_lm


def run(job):
    spec = specs.CausalLm(
        devices=("cpu",), seed=0, model_config=job["config"], batch=job["batch"], context=job["prompt"],
        prompt_tokens=job["prompt"], new_tokens=job["new"], cache=job["cache"], dtype="float32",
    )
    tr, config = causal_lm._config(spec)
    torch.manual_seed(0)
    model = tr.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    cache = causal_lm._new_cache(tr, torch, model, spec)
    vocab = config.get_text_config(decoder=True).vocab_size
    ids = torch.randint(0, vocab, (job["batch"], job["prompt"]))
    with torch.no_grad():
        out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        after_prefill = causal_lm.cache_bytes(cache, "cpu")
        token = out.logits[:, -1:].argmax(-1)
        for _ in range(job["new"]):
            out = model(input_ids=token, past_key_values=cache, use_cache=True, logits_to_keep=1)
            token = out.logits[:, -1:].argmax(-1)
        after_decode = causal_lm.cache_bytes(cache, "cpu")
    return {
        "config": job["config"],
        "cache": job["cache"],
        "parameters": sum(p.numel() for p in model.parameters()),
        "tensors": len(list(model.parameters())),
        "after_prefill": after_prefill,
        "after_decode": after_decode,
        "transformers": tr.__version__,
    }


with open(sys.argv[1], encoding="utf-8") as f:
    jobs = json.load(f)
print(json.dumps([run(job) for job in jobs]))

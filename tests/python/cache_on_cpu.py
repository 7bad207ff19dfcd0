"""Builds a model from a config on the CPU with transformers and reports the real size of its KV
cache after a prefill and after greedy decoding, with the same helper the causal-lm workload uses.
Usage: cache_on_cpu.py CONFIG BATCH PROMPT NEW CACHE. Prints one JSON object.
Exits 77 (with the reason on stderr) when torch or transformers is not importable."""

import json
import sys

try:
    import torch
    import transformers  # noqa: F401
except Exception as exc:
    print(f"torch and transformers are needed: {type(exc).__name__}: {exc}", file=sys.stderr)
    sys.exit(77)

from iteragpu.workloads import causal_lm

config_path, batch, prompt, new, cache_kind = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
spec = {"model_config": config_path, "prompt_tokens": prompt, "new_tokens": new, "cache": cache_kind}
tr, config = causal_lm._config(spec)
model = tr.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
params = sum(p.numel() for p in model.parameters())
cache = causal_lm._new_cache(tr, torch, model, spec)
ids = torch.randint(0, config.vocab_size, (batch, prompt))
with torch.no_grad():
    out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    after_prefill = causal_lm.cache_bytes(cache, "cpu")
    token = out.logits[:, -1:].argmax(-1)
    for _ in range(new):
        out = model(input_ids=token, past_key_values=cache, use_cache=True, logits_to_keep=1)
        token = out.logits[:, -1:].argmax(-1)
    after_decode = causal_lm.cache_bytes(cache, "cpu")
print(json.dumps({"parameters": params, "after_prefill": after_prefill, "after_decode": after_decode,
                  "transformers": tr.__version__}))

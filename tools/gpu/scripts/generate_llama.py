"""Generation as a user writes it: a small Llama built from a config (random weights, nothing
downloaded), bf16 on the GPU, `model.generate` of 32 new tokens after a 1 x 512 random prompt.

No iteragpu markers unless ITERAGPU_MARK=1: the same file measures and predicts with and without
them (tools/gpu/all.sh measures it marked; tools/gpu/predict_returned.sh predicts both ways)."""
import argparse
import contextlib
import os

import torch
from transformers import AutoConfig, AutoModelForCausalLM

if os.environ.get("ITERAGPU_MARK") == "1":
    from iteragpu import phase
else:
    def phase(name, **inputs):
        return contextlib.nullcontext()

HERE = os.path.dirname(os.path.abspath(__file__))
p = argparse.ArgumentParser()
p.add_argument("--config", default=os.path.join(HERE, "../../../tests/fixtures/models/llama-style-8l"))
p.add_argument("--prompt-tokens", type=int, default=512)
p.add_argument("--new-tokens", type=int, default=32)
a = p.parse_args()

config = AutoConfig.from_pretrained(a.config)
with phase("model_load"):
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).cuda().eval()
with phase("inputs"):
    input_ids = torch.randint(0, config.vocab_size, (1, a.prompt_tokens), device="cuda")
    attention_mask = torch.ones_like(input_ids)
with phase("generate"):
    # min_new_tokens: random weights could draw the end-of-sequence token and stop early
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False,
                         max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens)
print("generated", out.shape[1] - input_ids.shape[1], "tokens")

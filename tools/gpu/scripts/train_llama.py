"""A training loop as a user writes it: the same small Llama (fp32 weights, bf16 autocast), AdamW,
3 steps on random tokens, the loss printed every step (a value read from the GPU).

No iteragpu markers unless ITERAGPU_MARK=1 (see generate_llama.py)."""
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
p.add_argument("--batch", type=int, default=2)
p.add_argument("--context", type=int, default=512)
p.add_argument("--steps", type=int, default=3)
a = p.parse_args()

config = AutoConfig.from_pretrained(a.config)
with phase("model_load"):
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).cuda().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(a.steps):
    with phase("train_step", step=step):
        input_ids = torch.randint(0, config.vocab_size, (a.batch, a.context), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=input_ids, labels=input_ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss:.4f}")

"""An EMA copy and a DataLoader as users write them: the model is built on the CPU, copied with
copy.deepcopy as an exponential moving average, both moved with .cuda(); batches come from a
DataLoader with 2 worker processes over a synthetic Dataset of CPU tensors.

No iteragpu markers unless ITERAGPU_MARK=1 (see generate_llama.py)."""
import argparse
import contextlib
import copy
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

if os.environ.get("ITERAGPU_MARK") == "1":
    from iteragpu import phase
else:
    def phase(name, **inputs):
        return contextlib.nullcontext()


class Synthetic(Dataset):
    def __init__(self, n, width):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, width, generator=g)
        self.y = torch.randn(n, width, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


p = argparse.ArgumentParser()
p.add_argument("--width", type=int, default=2048)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--samples", type=int, default=256)
p.add_argument("--decay", type=float, default=0.999)
a = p.parse_args()

with phase("model_load"):
    model = nn.Sequential(*[nn.Sequential(nn.Linear(a.width, 4 * a.width), nn.GELU(), nn.Linear(4 * a.width, a.width))
                            for _ in range(2)])
    ema = copy.deepcopy(model)
    model.cuda()
    ema.cuda().requires_grad_(False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
loader = DataLoader(Synthetic(a.samples, a.width), batch_size=a.batch, shuffle=True, num_workers=2)
for step, (x, y) in enumerate(loader):
    with phase("train_step", step=step):
        x, y = x.cuda(), y.cuda()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    with phase("ema_update", step=step):
        with torch.no_grad():
            for e, w in zip(ema.parameters(), model.parameters()):
                e.lerp_(w, 1 - a.decay)
    print(f"step {step} loss {loss:.4f}")

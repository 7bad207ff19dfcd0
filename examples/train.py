"""A small GPT-like language model trained for a few steps on random tokens: the script the
README predicts and sweeps (`iteragpu predict --script examples/train.py -- --batch 8`).

Plain PyTorch, nothing downloaded, no iteragpu import: it runs as written on a GPU
(`python examples/train.py --batch 8`), on the CPU (`--device cpu`), and under `iteragpu predict`
on a machine without a GPU. Its memory is dominated by the float32 logits and their cross-entropy
(batch × context × vocabulary), so the largest batch that fits a card is a real question.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    """Pre-norm decoder block: causal self-attention (PyTorch's SDPA) then a 4× MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, w // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, w))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, context: int, width: int, depth: int, heads: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tokens(idx) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8, help="sequences per step")
    parser.add_argument("--context", type=int, default=1024, help="tokens per sequence")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = TinyGPT(args.vocab, args.context, args.width, args.depth, args.heads).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step in range(args.steps):
        tokens = torch.randint(args.vocab, (args.batch, args.context + 1), device=args.device)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step}: loss {loss.item():.3f}")


if __name__ == "__main__":
    main()

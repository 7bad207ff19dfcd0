"""Fake activation checkpointing: the block runs without saving activations; only its input
(and its parameters, for backward) stay referenced."""

import torch as _torch


def checkpoint(fn, x, use_reentrant=False):
    with _torch.no_grad():
        out = fn(x)
    out._saved = (x, *fn.parameters())
    return out

"""Fake torch.optim: AdamW creates two states per parameter at its first step; SGD none."""

import torch as _torch


class _Optimizer:
    def __init__(self, params, lr=1e-3):
        self.params = list(params)
        self.state = {}

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None


class AdamW(_Optimizer):
    def step(self):
        for p in self.params:
            if p.grad is not None and id(p) not in self.state:
                self.state[id(p)] = (_torch.Tensor(p.shape, p.dtype, p.device), _torch.Tensor(p.shape, p.dtype, p.device))


class SGD(_Optimizer):
    def step(self):
        pass

"""Fake torch.nn: modules whose parameters and outputs allocate on the fake devices."""

import torch as _torch

from . import functional  # noqa: F401


class Module:
    def __call__(self, x):
        return self.forward(x)

    def parameters(self):
        return list(getattr(self, "_params", []))

    def state_dict(self):
        return {f"p{i}": p for i, p in enumerate(self.parameters())}


class Linear(Module):
    def __init__(self, inp, out, bias=True, device=None, dtype=None):
        dtype = dtype or _torch.float32
        self.out = out
        self._params = [_torch.Parameter((out, inp), dtype, device)]
        if bias:
            self._params.append(_torch.Parameter((out,), dtype, device))

    def forward(self, x):
        return _torch.Tensor(x.shape[:-1] + (self.out,), x.dtype, x.device, saved=(x, *self._params))


class LayerNorm(Module):
    def __init__(self, width, device=None, dtype=None):
        dtype = dtype or _torch.float32
        self._params = [_torch.Parameter((width,), dtype, device), _torch.Parameter((width,), dtype, device)]

    def forward(self, x):
        return _torch.Tensor(x.shape, x.dtype, x.device, saved=(x, *self._params))


class GELU(Module):
    def forward(self, x):
        return _torch.Tensor(x.shape, x.dtype, x.device, saved=(x,))


class Sequential(Module):
    def __init__(self, *modules):
        self.modules = modules

    def forward(self, x):
        for m in self.modules:
            x = m(x)
        return x

    def parameters(self):
        return [p for m in self.modules for p in m.parameters()]

    def state_dict(self):
        return {f"{i}.p{j}": p for i, m in enumerate(self.modules) for j, p in enumerate(m.parameters())}

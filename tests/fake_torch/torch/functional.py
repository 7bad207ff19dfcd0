"""Fake torch.nn.functional."""

import torch as _torch


def mse_loss(a, b):
    return _torch.Tensor((), _torch.float32, a.device, saved=(a, b))

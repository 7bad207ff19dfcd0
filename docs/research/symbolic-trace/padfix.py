# Workaround: aten.constant_pad_nd's C++ kernel reads sizes() and specialises; its Python meta does not.
import torch
from torch.utils._python_dispatch import TorchDispatchMode
try:
    from torch._meta_registrations import _constant_pad_nd_meta
except ImportError:   # torch 2.6: only the reference implementation
    from torch._refs import constant_pad_nd as _constant_pad_nd_meta
class PadFix(TorchDispatchMode):          # stands in for the tracker, which sits above FakeTensorMode
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.constant_pad_nd.default and any(
                isinstance(t, torch.Tensor) and t._has_symbolic_sizes_strides for t in args[:1]):
            return _constant_pad_nd_meta(*args, **kwargs)
        return func(*args, **kwargs)

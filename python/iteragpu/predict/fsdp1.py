"""FSDP1 (`FullyShardedDataParallel`) in a user's script, on a prediction. FSDP1 runs as it is
(its flat parameters are made, sharded and freed by resizing storages, which the session follows);
two things it does differ on fake tensors, and are made to behave as on a GPU:

- it moves a CPU-built module to `device_id` with `param.data = param.to(device)`, as
  `Module._apply` once did. On a fake tensor, `.data =` swaps the storage but leaves the tensor's
  own device attribute where it was, so FSDP's lazy init then finds "parameters on cpu": the
  device of the tensor assigned is kept, as `set_data` keeps it on a GPU;
- `device_id=torch.cuda.current_device()` (an int) becomes `torch.device(int)`, which on torch 2.6
  without a driver raises "Cannot access accelerator device when none is available" (newer
  releases take CUDA): the int is given as `cuda:N`, what it means on a GPU machine."""

from __future__ import annotations

from types import ModuleType
from typing import Any


def install(torch: Any) -> None:
    from .idioms import after_import

    _data_keeps_device(torch)
    after_import("torch.distributed.fsdp.fully_sharded_data_parallel", lambda module: _device_id_as_cuda(torch, module))


def _data_keeps_device(torch: Any) -> None:
    from torch._subclasses.fake_tensor import FakeTensor

    if "data" in vars(FakeTensor):
        return
    original = torch._C.TensorBase.__dict__["data"]

    def get(self: Any) -> Any:
        return original.__get__(self)

    def set_(self: Any, value: Any) -> None:
        original.__set__(self, value)
        device = getattr(value, "fake_device", None)
        if device is not None:
            self.fake_device = device

    FakeTensor.data = property(get, set_)


def _device_id_as_cuda(torch: Any, module: ModuleType) -> None:
    cls = getattr(module, "FullyShardedDataParallel", None)
    if cls is None or getattr(cls.__init__, "_iteragpu", False):
        return
    try:
        torch.device(0)
        return  # this torch takes an index as CUDA's already
    except RuntimeError:
        pass
    import inspect

    original = cls.__init__
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        return
    if "device_id" not in signature.parameters:
        return

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        device_id = bound.arguments.get("device_id")
        if isinstance(device_id, int) and not isinstance(device_id, bool):
            bound.arguments["device_id"] = torch.device("cuda", device_id)
        original(*bound.args, **bound.kwargs)

    __init__._iteragpu = True  # type: ignore[attr-defined]
    cls.__init__ = __init__

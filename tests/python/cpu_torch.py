"""Real torch with `torch.cuda`'s counters replaced by zeros, so that the recorder's protocol
runs around the built-in workloads' own code on the CPU. Measures nothing."""

import types

import torch


class CpuTorch(types.ModuleType):
    """Real torch, except `cuda`: counters that read 0, so the protocol runs on the CPU."""

    def __init__(self):
        super().__init__("torch")
        # torch's own namespace, so that what reads it (vars(), the dtype allowlist) sees real torch.
        self.__dict__.update({k: v for k, v in vars(torch).items() if not k.startswith("__")})
        zero = lambda *a, **k: 0  # noqa: E731
        self.cuda = types.SimpleNamespace(
            synchronize=lambda *a, **k: None,
            memory_allocated=zero,
            memory_reserved=zero,
            max_memory_allocated=zero,
            max_memory_reserved=zero,
            reset_peak_memory_stats=lambda *a, **k: None,
            mem_get_info=lambda *a, **k: (0, 0),
            empty_cache=lambda: None,
            OutOfMemoryError=torch.OutOfMemoryError,
        )

    def __getattr__(self, name):
        return getattr(torch, name)

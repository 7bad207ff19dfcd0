"""What the measured process will really use: Python, PyTorch, its GPU backend, the allocator.

`python -m iteragpu.probe '{"devices": ["cuda:0"]}'` prints one JSON object on the original
standard output; `iteragpu environment` reads it. The worker calls `collect` itself.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import sys
from typing import Any, Callable

SETTINGS: list[str] = [
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "CUDA_MODULE_LOADING",
]

# The libraries of docs/tested-versions.md (the CLI says when one is outside the tested range);
# a Rust test keeps the two lists equal.
LIBRARIES: tuple[str, ...] = (
    "torch",
    "transformers",
    "kernels",
    "peft",
    "accelerate",
    "trl",
    "deepspeed",
    "bitsandbytes",
    "compressed-tensors",
    "hqq",
    "torchao",
    "lightning",
    "timm",
    "datasets",
    "safetensors",
    "pillow",
)


def _try(fn: Callable[[], Any]) -> tuple[Any, str | None]:
    try:
        return fn(), None
    except Exception as exc:  # the torch being probed may raise anything: the value is None with its reason
        return None, f"{type(exc).__name__}: {exc}"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def python_info() -> dict[str, str]:
    return {
        "executable": sys.executable,
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
    }


def device_index(name: str) -> int:
    """`cuda:1` → 1; `cuda` → 0; anything else raises ValueError with the fix."""
    kind, _, index = name.partition(":")
    if kind != "cuda":
        raise ValueError(f"device `{name}` is not a CUDA/HIP device; write cuda:0, cuda:1, …")
    if index == "":
        return 0
    if not index.isdigit():
        raise ValueError(f"device `{name}` has no valid index; write cuda:0, cuda:1, …")
    return int(index)


def collect(torch: Any, devices: list[str]) -> dict[str, Any]:
    """Everything about this interpreter's PyTorch; `can_measure` says whether measure can run."""
    info: dict[str, Any] = {
        "python": python_info(),
        "settings": {k: os.environ.get(k) for k in SETTINGS},
        "transformers_version": _version("transformers"),
        "peft_version": _version("peft"),
        "libraries": {name: v for name in LIBRARIES if (v := _version(name)) is not None},
        "torch": None,
        "can_measure": False,
        "reason": None,
    }
    if torch is None:
        return info
    version = getattr(torch, "version", None)
    cuda_version = getattr(version, "cuda", None)
    hip_version = getattr(version, "hip", None)
    backend = "hip" if hip_version else ("cuda" if cuda_version else None)
    t: dict[str, Any] = {
        "version": getattr(torch, "__version__", None),
        "cuda_version": cuda_version,
        "hip_version": hip_version,
        "backend": backend,
        "cudnn_version": None,
        "cuda_available": False,
        "device_count": 0,
        "devices": [],
        "allocator_backend": None,
        "null_reasons": {},
    }
    info["torch"] = t
    reasons = t["null_reasons"]
    t["cudnn_version"], why = _try(lambda: torch.backends.cudnn.version())
    if why:
        reasons["cudnn_version"] = why
    available, why = _try(lambda: bool(torch.cuda.is_available()))
    t["cuda_available"] = bool(available)
    if why:
        reasons["cuda_available"] = why
    if backend is None:
        info["reason"] = (
            f"PyTorch {t['version']} is a CPU-only build (torch.version.cuda and torch.version.hip are None): "
            "install a CUDA or ROCm build of PyTorch"
        )
        return info
    if not available:
        info["reason"] = (
            f"PyTorch {t['version']} ({backend} {cuda_version or hip_version}) sees no usable GPU "
            "(torch.cuda.is_available() is False): check the driver, the device permissions and CUDA_VISIBLE_DEVICES"
        )
        return info
    count, why = _try(lambda: int(torch.cuda.device_count()))
    t["device_count"] = count or 0
    if why:
        reasons["device_count"] = why
    for index in range(t["device_count"]):
        props, why = _device_properties(torch, index)
        if props is None:
            t["devices"].append({"index": index, "name": None, "total_memory": None, "reason": why})
            continue
        device = {
            "index": index,
            "name": getattr(props, "name", None),
            "total_memory": int(getattr(props, "total_memory", 0)) or None,
            "capability": [getattr(props, "major", None), getattr(props, "minor", None)],
        }
        # The GPU's UUID where this PyTorch declares one (`sweep --gpus` records it).
        uuid = getattr(props, "uuid", None)
        if uuid is not None:
            device["uuid"] = str(uuid)
        t["devices"].append(device)
    t["allocator_backend"], why = _try(lambda: torch.cuda.get_allocator_backend())
    if why:
        reasons["allocator_backend"] = why
    for name in devices:
        try:
            index = device_index(name)
        except ValueError as exc:
            info["reason"] = str(exc)
            return info
        if index >= t["device_count"]:
            info["reason"] = (
                f"device {name} does not exist: PyTorch sees {t['device_count']} device(s) "
                f"(cuda:0 … cuda:{max(t['device_count'] - 1, 0)})"
            )
            return info
    info["can_measure"] = True
    return info


def _device_properties(torch: Any, index: int) -> tuple[Any, str | None]:
    return _try(lambda: torch.cuda.get_device_properties(index))


def main() -> int:
    from .channel import Channel

    channel = Channel.take_stdout()
    request = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    try:
        import torch
    except Exception as exc:  # a broken install raises more than ImportError (OSError, RuntimeError): reported
        info = collect(None, [])
        info["reason"] = (
            f"PyTorch cannot be imported by {sys.executable}: {type(exc).__name__}: {exc}; "
            "install PyTorch with a GPU backend, or choose another interpreter with --python"
        )
        channel.emit("environment", info)
        return 0
    channel.emit("environment", collect(torch, request.get("devices", ["cuda:0"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())

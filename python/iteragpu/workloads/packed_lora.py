"""LoRA on a packed checkpoint's layers (GPTQ, AWQ), for the causal-lm workload's training.

peft trains LoRA on GPTQ layers with its own `GPTQLoraLinear` (`peft/tuners/lora/gptq.py`): the
packed layer's output, plus `lora_B(lora_A(dropout(x))) * scaling` per adapter, no merging. It
dispatches it for the libraries' `QuantLinear` classes only (optimum/gptqmodel, not installed
here); peft's documented hook for other layer types, `LoraConfig._register_custom_module`, maps
`PackedLinear` to that same class, so the adapters, their dropout and scaling are peft's own.

The packed layer's matmul in training: the weight dequantized for the forward, and again for the
backward's input gradient, never kept between them (`DequantizedMatmul`), as bitsandbytes'
`MatMul4Bit` and the formats' Triton kernels do: *assumed* for GPTQ/AWQ, and said.
"""

from __future__ import annotations

from typing import Any

_FUNCTION: list[Any] = []


def dequantized_matmul(torch: Any) -> Any:
    """`x @ W.T` with W dequantized to x's dtype for each pass and freed after it (made once per
    torch)."""
    if _FUNCTION:
        return _FUNCTION[0]

    class DequantizedMatmul(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, out_features: int, bias: Any) -> Any:
            weight = torch.empty((out_features, x.shape[-1]), dtype=x.dtype, device=x.device)
            out = torch.nn.functional.linear(x, weight, bias)
            del weight
            ctx.out_features, ctx.in_features = out_features, x.shape[-1]
            return out

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            weight = torch.empty((ctx.out_features, ctx.in_features), dtype=grad.dtype, device=grad.device)
            grad_x = grad @ weight
            del weight
            return grad_x, None, None

    _FUNCTION.append(DequantizedMatmul)
    return DequantizedMatmul


def lora_config(peft: Any, model: Any, rank: int, targets: list[str] | str, packed_class: Any) -> tuple[Any, list[str]]:
    """peft's LoraConfig for `model`'s packed layers, with `GPTQLoraLinear` registered for them;
    `all-linear` is resolved to the packed layers' names (peft's own resolution picks
    `nn.Linear` only). Returns the config and the notes to say."""
    from peft.tuners.lora.gptq import GPTQLoraLinear

    notes = []
    if targets == "all-linear":
        targets = sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, packed_class)})
        notes.append(f"--lora-targets all-linear on a packed checkpoint: its packed layers ({', '.join(targets)}), as peft's all-linear picks nn.Linear only")
    config = peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets)
    config._register_custom_module({packed_class: GPTQLoraLinear})
    notes.append(
        "LoRA on the packed layers through peft's own GPTQLoraLinear (registered for them with LoraConfig._register_custom_module); "
        "the packed weight dequantized for the forward and again for the backward, never kept between them (assumed, as bitsandbytes and the formats' Triton kernels do)"
    )
    return config, notes

"""GPTQ and AWQ checkpoints built in their packed layout, for the causal-lm workload.

The model is built from its config on the meta device; every linear layer its format quantizes
(all but the output head and the config's `modules_to_not_convert`) becomes a `PackedLinear`
holding the format's own tensors, at their shapes and dtypes, on the device:

* GPTQ (AutoGPTQ/GPTQModel `QuantLinear`): `qweight` int32 [in·bits/32, out], `qzeros` int32
  [groups, out·bits/32], `scales` float16 [groups, out], `g_idx` int32 [in];
* AWQ (AutoAWQ `WQLinear_GEMM`): `qweight` int32 [in, out·bits/32], `qzeros` int32
  [groups, out·bits/32], `scales` float16 [groups, out];

the bytes `estimate` computes for the same layers (`src/model/quantization.rs`). Their values are
zeros (nothing is read from a checkpoint). The forward is the formats' documented reference path,
which the libraries' own torch kernels follow when no fused CUDA kernel applies: the weight
dequantized to the compute dtype ([out, in], one layer at a time, freed after the matmul), then
the matmul. The fused kernels (Marlin, ExLlama, AWQ's GEMM/GEMV) hold less than that one transient:
assumed, and said in the notes.
"""

from __future__ import annotations

from typing import Any, Callable

from ..spec import Packed


def build_packed(
    torch: Any, transformers: Any, config: Any, dtype: Any, device: Any, packed: Packed, materialize: Callable[[Any, Any, Any], None]
) -> tuple[Any, dict[str, Any]]:
    """The model with its linear layers packed as `packed` says (the rest made on the device by
    `materialize`, causal_lm.py's); details for the phase."""
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    skipped, replaced = replace_linear(torch, model, packed, dtype, device)
    materialize(torch, model, device)
    model.eval()
    details = {
        "quantization": {"format": packed.packed_format, "bits": packed.packed_bits, "group_size": packed.packed_group_size},
        "quantized_linear_layers": replaced,
        "kept_unquantized": skipped,
        "forward": "the format's reference path: each weight dequantized to the compute dtype, then the matmul (assumed; fused kernels hold less)",
    }
    return model, details


def replace_linear(torch: Any, model: Any, packed: Packed, dtype: Any, device: Any) -> tuple[list[str], int]:
    """Every `nn.Linear` of `model` but the output head and `packed`'s skipped modules made a
    `PackedLinear` on `device`; returns the names kept and how many were replaced."""
    from transformers.quantizers.base import get_keys_to_not_convert

    skipped = sorted(set(get_keys_to_not_convert(model)) | set(packed.packed_skip_modules))
    layer = _packed_linear_class(torch)
    replaced = 0
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if type(child) is not torch.nn.Linear or any(full == s or full.endswith("." + s) or child_name == s for s in skipped):
                continue
            setattr(module, child_name, layer(child.in_features, child.out_features, child.bias is not None, packed, dtype, device))
            replaced += 1
    return skipped, replaced


_CLASS: list[Any] = []


def _packed_linear_class(torch: Any) -> Any:
    """`PackedLinear`, made once per torch (the module imports torch lazily, as every workload)."""
    if _CLASS:
        return _CLASS[0]

    class PackedLinear(torch.nn.Module):
        """A GPTQ or AWQ linear layer: the format's tensors as buffers; forward dequantizes."""

        def __init__(self, in_features: int, out_features: int, bias: bool, packed: Packed, dtype: Any, device: Any) -> None:
            super().__init__()
            self.in_features, self.out_features = in_features, out_features
            self.bits, self.format = packed.packed_bits, packed.packed_format
            group = packed.packed_group_size if packed.packed_group_size and packed.packed_group_size > 0 else in_features
            groups = -(-in_features // group)
            per_int = 32 // self.bits
            self.compute_dtype = dtype
            kw = {"device": device}
            if self.format == "gptq":
                self.register_buffer("qweight", torch.zeros((-(-in_features // per_int), out_features), dtype=torch.int32, **kw))
                self.register_buffer("g_idx", torch.zeros(in_features, dtype=torch.int32, **kw))
            else:
                self.register_buffer("qweight", torch.zeros((in_features, -(-out_features // per_int)), dtype=torch.int32, **kw))
            self.register_buffer("qzeros", torch.zeros((groups, -(-out_features // per_int)), dtype=torch.int32, **kw))
            self.register_buffer("scales", torch.zeros((groups, out_features), dtype=torch.float16, **kw))
            self.bias = torch.nn.Parameter(torch.zeros(out_features, dtype=torch.float16, **kw), requires_grad=False) if bias else None

        def forward(self, x: Any) -> Any:
            # The reference path: the weight in the compute dtype, for this matmul only.
            weight = torch.empty((self.out_features, self.in_features), dtype=x.dtype, device=x.device)
            out = torch.nn.functional.linear(x, weight, None if self.bias is None else self.bias.to(x.dtype))
            del weight
            return out

    _CLASS.append(PackedLinear)
    return PackedLinear

"""GPTQ, AWQ, compressed-tensors and HQQ checkpoints built in their own layout, for the causal-lm
workload (and a script's load without the format's library, `predict/quantized.py`).

The model is built from its config on the meta device; every linear layer its format quantizes
becomes a layer holding the format's own tensors, at their shapes and dtypes, on the device:

* GPTQ (AutoGPTQ/GPTQModel `QuantLinear`): `qweight` int32 [in·bits/32, out], `qzeros` int32
  [groups, out·bits/32], `scales` float16 [groups, out], `g_idx` int32 [in];
* AWQ (AutoAWQ `WQLinear_GEMM`): `qweight` int32 [in, out·bits/32], `qzeros` int32
  [groups, out·bits/32], `scales` float16 [groups, out];
* compressed-tensors (0.20's compressors, as transformers' quantizer leaves the module before the
  checkpoint fills it): `weight_packed` int32 [out, ⌈in·bits/32⌉] and `weight_shape` int64 [2]
  (pack-quantized) or `weight` int8/float8_e4m3fn [out, in], `weight_scale` [1], [out, 1] or
  [out, groups] in the scales' dtype, the zero point when asymmetric, `input_scale` [1] for static
  input activations: parameters, as compressed-tensors registers them;
* HQQ (hqq 0.2.8's `HQQLinear`): `W_q` uint8 (int32 for 3 bits) packed along the groups, `scale`
  and `zero` [groups, 1] in the compute dtype;

the bytes `estimate` computes for the same layers (`src/model/quantization.rs`). Their values are
zeros (nothing is read from a checkpoint). The forward: GPTQ, AWQ and HQQ the formats' documented
reference path, which the libraries' own torch kernels follow when no fused CUDA kernel applies:
the weight dequantized to the compute dtype ([out, in], one layer at a time, freed after the
matmul), then the matmul; the fused kernels (Marlin, ExLlama, AWQ's GEMM/GEMV, HQQ's backends) hold
less than that one transient: assumed, and said in the notes. compressed-tensors as transformers
runs it: the model's first forward decompresses every quantized layer to a dense weight in the
scales' dtype (compressed-tensors' decompression hook), kept from then on.
"""

from __future__ import annotations

from typing import Any, Callable

from ..spec import Packed
from .packed_lora import dequantized_matmul


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
        "forward": forward_words(packed),
    }
    return model, details


def forward_words(packed: Packed) -> str:
    """What the forward of `packed`'s layers does, in words (the phase's details, the notes)."""
    if packed.packed_format == "compressed-tensors":
        return (
            "as transformers runs compressed-tensors: the first forward decompresses every quantized layer to a dense "
            f"{packed.packed_scale_dtype} weight (compressed-tensors' decompression hook), kept from then on"
        )
    words = "the format's reference path: each weight dequantized to the compute dtype, then the matmul (assumed; fused kernels hold less)"
    if packed.packed_format == "hqq":
        words += "; HQQLinear's layout as hqq's own loader holds it (transformers' from_pretrained builds no HQQ layer)"
    return words


def replace_linear(torch: Any, model: Any, packed: Packed, dtype: Any, device: Any) -> tuple[list[str], int]:
    """Every `nn.Linear` of `model` but the output head and `packed`'s skipped modules made a
    `PackedLinear` on `device`; returns the names kept and how many were replaced."""
    from transformers.quantizers.base import get_keys_to_not_convert

    skipped = set(packed.packed_skip_modules)
    if packed.packed_format in ("gptq", "awq"):
        # compressed-tensors and HQQ convert every Linear not listed (their lists name the head).
        skipped |= set(get_keys_to_not_convert(model))
    layer = packed_linear_class(torch)
    if packed.packed_format in ("compressed-tensors", "hqq"):
        from .packed_schemes import scheme_linear_class

        layer = scheme_linear_class(torch)
    replaced = 0
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if type(child) is not torch.nn.Linear or any(full == s or full.endswith("." + s) or child_name == s for s in skipped):
                continue
            setattr(module, child_name, layer(child.in_features, child.out_features, child.bias is not None, packed, dtype, device))
            replaced += 1
    if packed.packed_format == "compressed-tensors":
        from .packed_schemes import decompress_on_first_forward

        decompress_on_first_forward(torch, model)
    return sorted(skipped), replaced


_CLASS: list[Any] = []


def packed_linear_class(torch: Any) -> Any:
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
            # The reference path: the weight in the compute dtype, for this matmul only (and
            # again for a backward's input gradient, never kept between them).
            bias = None if self.bias is None else self.bias.to(x.dtype)
            return dequantized_matmul(torch).apply(x, self.out_features, bias)

    _CLASS.append(PackedLinear)
    return PackedLinear

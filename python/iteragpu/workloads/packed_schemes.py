"""compressed-tensors and HQQ linear layers in their own tensors, data-less (`packed.py` builds
the model; the layouts and their sources are in its documentation and in
`src/model/quantization/compressed_tensors.rs`, `hqq.rs`)."""

from __future__ import annotations

from typing import Any

from ..spec import Packed

# The dtypes a spec names, looked up in this fixed table only.
_DTYPES = ("float16", "bfloat16", "float32")  # allowlisted

_CLASS: list[Any] = []


def _dtype(torch: Any, name: Any) -> Any:
    if name not in _DTYPES:
        raise ValueError(f"the spec's scale dtype {name!r} is not one of {', '.join(_DTYPES)}")
    return getattr(torch, name)  # allowlisted


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def scheme_linear_class(torch: Any) -> Any:
    """`SchemeLinear`, made once per torch (the module imports torch lazily, as every workload)."""
    if _CLASS:
        return _CLASS[0]

    def frozen(t: Any) -> Any:
        return torch.nn.Parameter(t, requires_grad=False)

    class SchemeLinear(torch.nn.Module):
        """A compressed-tensors or HQQ linear layer: the format's tensors; see `packed.py`."""

        def __init__(self, in_features: int, out_features: int, bias: bool, packed: Packed, dtype: Any, device: Any) -> None:
            super().__init__()
            self.in_features, self.out_features = in_features, out_features
            self.format = packed.packed_format
            self.scale_dtype = _dtype(torch, packed.packed_scale_dtype or "float16")
            self.input_quantized = bool(packed.packed_input_quantized)
            self.decompressed = False
            kw = {"device": device}
            bits, group = packed.packed_bits, packed.packed_group_size
            if self.format == "hqq":
                self._hqq(bits, group, packed.packed_axis if packed.packed_axis is not None else 1, kw)
            else:
                self._compressed_tensors(packed, bits, group, kw)
            self.bias = frozen(torch.zeros(out_features, dtype=dtype, **kw)) if bias else None

        def _compressed_tensors(self, packed: Packed, bits: int, group: Any, kw: dict[str, Any]) -> None:
            out, inp = self.out_features, self.in_features
            strategy = packed.packed_strategy or "tensor"
            scales = (out, _cdiv(inp, group)) if strategy == "group" and group else (out, 1) if strategy == "channel" else (1,)
            symmetric = packed.packed_symmetric is not False
            if packed.packed_storage == "pack-quantized":
                self.weight_packed = frozen(torch.zeros((out, _cdiv(inp * bits, 32)), dtype=torch.int32, **kw))
                self.weight_shape = frozen(torch.zeros(2, dtype=torch.int64, **kw))
                if not symmetric:
                    zero = (_cdiv(out * bits, 32), scales[-1]) if len(scales) == 2 else (1,)
                    self.weight_zero_point = frozen(torch.zeros(zero, dtype=torch.int32 if len(scales) == 2 else torch.int8, **kw))
            else:
                stored = torch.float8_e4m3fn if packed.packed_storage == "float-quantized" else torch.int8
                self.weight = frozen(torch.zeros((out, inp), dtype=stored, **kw))
                if not symmetric:
                    self.weight_zero_point = frozen(torch.zeros(scales, dtype=stored, **kw))
            self.weight_scale = frozen(torch.zeros(scales, dtype=self.scale_dtype, **kw))
            if packed.packed_static_input:
                self.input_scale = frozen(torch.zeros(1, dtype=self.scale_dtype, **kw))

        def _hqq(self, bits: int, group: Any, axis: int, kw: dict[str, Any]) -> None:
            n = self.in_features * self.out_features
            g = group or (self.in_features if axis == 1 else self.out_features)
            groups = _cdiv(n, g)
            rows, cols = (groups, g) if axis == 1 else (g, groups)
            per = {4: 2, 2: 4, 1: 8}.get(bits)
            if bits == 3:
                w_q = torch.zeros((_cdiv(rows, 10), cols), dtype=torch.int32, **kw)
            elif per is not None:
                w_q = torch.zeros((rows // per, cols), dtype=torch.uint8, **kw)
            else:
                w_q = torch.zeros((rows, cols), dtype=torch.uint8, **kw)
            self.W_q = frozen(w_q)
            shape = (groups, 1) if axis == 1 else (1, groups)
            self.register_buffer("scale", torch.zeros(shape, dtype=self.scale_dtype, **kw))
            self.register_buffer("zero", torch.zeros(shape, dtype=self.scale_dtype, **kw))

        def decompress(self) -> None:
            """compressed-tensors' `decompress_module`: the quantized weight replaced by a dense
            one in the scales' dtype (the scales stay on the module)."""
            if self.decompressed or self.format != "compressed-tensors":
                return
            device = self.weight_scale.device
            for name in ("weight_packed", "weight"):
                if name in self._parameters:
                    del self._parameters[name]
            self.weight = frozen(torch.zeros((self.out_features, self.in_features), dtype=self.scale_dtype, device=device))
            self.decompressed = True

        def forward(self, x: Any) -> Any:
            bias = None if self.bias is None else self.bias.to(x.dtype)
            if self.decompressed:
                if self.input_quantized:
                    # compressed-tensors' forward quantizes and dequantizes the input (its QDQ).
                    x = torch.empty_like(x)
                return torch.nn.functional.linear(x, self.weight.to(x.dtype), bias)
            # The reference path: the weight in the compute dtype, for this matmul only.
            weight = torch.empty((self.out_features, self.in_features), dtype=x.dtype, device=x.device)
            out = torch.nn.functional.linear(x, weight, bias)
            del weight
            return out

    _CLASS.append(SchemeLinear)
    return SchemeLinear


def decompress_on_first_forward(torch: Any, model: Any) -> None:
    """compressed-tensors' `add_decompress_hook`: the model's first forward decompresses every
    quantized layer, then the hook removes itself."""
    layer = scheme_linear_class(torch)

    def hook(module: Any, args: Any) -> None:
        for m in module.modules():
            if isinstance(m, layer):
                m.decompress()
        handle.remove()

    handle = model.register_forward_pre_hook(hook)

"""The bytes a quantized load really stores, from the libraries' own code on the CPU, for
`tests/integration/quantized.rs` to hold `iteragpu estimate`'s quantized terms to.

    quantized_bytes.py CONFIG_DIR FORMAT [--double-quant]

FORMAT: nf4, fp4, int8 (bitsandbytes through transformers' BitsAndBytesConfig), or `checkpoint`
(the config's own quantization_config: GPTQ or AWQ).

The model is built by transformers from the config on the meta device (its real module tree), and
transformers' own rule picks what is kept unquantized (`get_keys_to_not_convert`: the output head).
For bitsandbytes, `replace_with_bnb_linear` makes the real `Linear4bit`/`Linear8bitLt` modules;
one weight per distinct shape is then really quantized on the CPU by bitsandbytes
(`Params4bit._quantize`, `Int8Params._quantize`), its stored tensors (the packed data, `absmax`,
the code tables, the nested state and its offset; `CB` and `SCB`) summed, and multiplied by the
number of layers of that shape: quantizing 8 B parameters for real is not needed to know their
bytes. GPTQ and AWQ layers are built as their libraries register their buffers (neither
gptqmodel nor autoawq installs here): AutoGPTQ/GPTQModel `QuantLinear` (qweight int32
[in·bits/32, out], qzeros int32 [⌈in/g⌉, out·bits/32], scales fp16 [⌈in/g⌉, out], g_idx int32
[in]) and AutoAWQ `WQLinear_GEMM` (qweight int32 [in, out·bits/32], qzeros int32
[⌈in/g⌉, out·bits/32], scales fp16 [⌈in/g⌉, out]).

Prints one JSON object: quantized_bytes, quantized_parameters, quantized_layers,
unquantized_bytes (every other parameter in the compute dtype), kept (the modules kept), shapes.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

import torch
import transformers
from transformers.quantizers.base import get_keys_to_not_convert


def stored_tensors(obj: Any, seen: dict[int, torch.Tensor], depth: int = 0) -> None:
    """Every tensor a quantized weight holds (itself, its quant_state, the nested state), once."""
    if depth > 3 or obj is None:
        return
    if isinstance(obj, torch.Tensor):
        seen.setdefault(id(obj.untyped_storage()), obj)
        return
    if isinstance(obj, (list, tuple)):
        for item in obj:
            stored_tensors(item, seen, depth + 1)
        return
    if hasattr(obj, "__dict__"):
        for item in vars(obj).values():
            if not isinstance(item, torch.nn.Module):
                stored_tensors(item, seen, depth + 1)


def nbytes(tensors: dict[int, torch.Tensor]) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors.values())


def model_on_meta(config_dir: str, dtype: Any) -> Any:
    with open(f"{config_dir}/config.json", encoding="utf-8") as f:
        raw = json.load(f)
    raw.pop("quantization_config", None)
    config = transformers.AutoConfig.for_model(raw.pop("model_type"), **raw)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype), raw


def bnb(config_dir: str, fmt: str, double_quant: bool) -> dict[str, Any]:
    import bitsandbytes as bnb_lib
    from transformers.integrations.bitsandbytes import replace_with_bnb_linear

    dtype = torch.bfloat16
    model, _ = model_on_meta(config_dir, dtype)
    kept = sorted(get_keys_to_not_convert(model))
    if fmt == "int8":
        qconfig = transformers.BitsAndBytesConfig(load_in_8bit=True)
    else:
        qconfig = transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type=fmt, bnb_4bit_use_double_quant=double_quant, bnb_4bit_compute_dtype=dtype
        )
    model = replace_with_bnb_linear(model, modules_to_not_convert=kept, quantization_config=qconfig)
    shapes: Counter[tuple[int, int]] = Counter()
    templates: dict[tuple[int, int], Any] = {}
    unquantized = 0
    for module in model.modules():
        if isinstance(module, (bnb_lib.nn.Linear4bit, bnb_lib.nn.Linear8bitLt)):
            key = (module.out_features, module.in_features)
            shapes[key] += 1
            templates.setdefault(key, module.weight)
            if module.bias is not None:
                unquantized += module.bias.numel() * dtype.itemsize
        else:
            unquantized += sum(p.numel() * p.element_size() for p in module.parameters(recurse=False))
    per_shape = {}
    torch.manual_seed(0)
    for (out, inp), template in templates.items():
        w = torch.randn(out, inp, dtype=dtype)
        if fmt == "int8":
            param = bnb_lib.nn.Int8Params(w, requires_grad=False, has_fp16_weights=False)._quantize("cpu")
            held: dict[int, torch.Tensor] = {}
            stored_tensors([param.data, param.SCB], held)
        else:
            param = bnb_lib.nn.Params4bit(
                w, requires_grad=False, blocksize=template.blocksize, compress_statistics=template.compress_statistics,
                quant_type=template.quant_type, quant_storage=template.quant_storage,
            )._quantize("cpu")
            held = {}
            stored_tensors([param.data, param.quant_state], held)
        per_shape[f"{out}x{inp}"] = {
            "count": shapes[(out, inp)],
            "bytes": nbytes(held),
            "tensors": sorted(f"{t.dtype} {list(t.shape)}" for t in held.values()),
        }
    return {
        "quantized_bytes": sum(s["bytes"] * s["count"] for s in per_shape.values()),
        "quantized_parameters": sum(o * i * n for (o, i), n in shapes.items()),
        "quantized_layers": sum(shapes.values()),
        "unquantized_bytes": unquantized,
        "kept": kept,
        "shapes": per_shape,
        "bitsandbytes": bnb_lib.__version__,
    }


def checkpoint(config_dir: str) -> dict[str, Any]:
    with open(f"{config_dir}/config.json", encoding="utf-8") as f:
        q = json.load(f)["quantization_config"]
    method, bits = q["quant_method"], q.get("bits", 4)
    dtype = torch.float16
    model, _ = model_on_meta(config_dir, dtype)
    kept = sorted(get_keys_to_not_convert(model))
    group = q.get("group_size", 128)
    shapes: Counter[tuple[int, int]] = Counter()
    unquantized = 0
    for name, module in model.named_modules():
        if type(module) is torch.nn.Linear and not any(name == k or name.endswith("." + k) for k in kept):
            shapes[(module.out_features, module.in_features)] += 1
            if module.bias is not None:
                unquantized += module.bias.numel() * 2  # the QuantLinear's fp16 bias
        else:
            unquantized += sum(p.numel() * p.element_size() for p in module.parameters(recurse=False))
    per_shape = {}
    for (out, inp), count in shapes.items():
        groups = 1 if group == -1 else -(-inp // group)
        with torch.device("meta"):
            if method == "gptq":
                held = [
                    torch.zeros((inp * bits // 32, out), dtype=torch.int32),  # qweight
                    torch.zeros((groups, out * bits // 32), dtype=torch.int32),  # qzeros
                    torch.zeros((groups, out), dtype=torch.float16),  # scales
                    torch.zeros((inp,), dtype=torch.int32),  # g_idx
                ]
            elif method == "awq":
                held = [
                    torch.zeros((inp, out * bits // 32), dtype=torch.int32),  # qweight
                    torch.zeros((groups, out * bits // 32), dtype=torch.int32),  # qzeros
                    torch.zeros((groups, out), dtype=torch.float16),  # scales
                ]
            else:
                raise SystemExit(f"quant_method {method!r} is not laid out here")
        per_shape[f"{out}x{inp}"] = {
            "count": count,
            "bytes": sum(t.numel() * t.element_size() for t in held),
            "tensors": [f"{t.dtype} {list(t.shape)}" for t in held],
        }
    return {
        "quantized_bytes": sum(s["bytes"] * s["count"] for s in per_shape.values()),
        "quantized_parameters": sum(o * i * n for (o, i), n in shapes.items()),
        "quantized_layers": sum(shapes.values()),
        "unquantized_bytes": unquantized,
        "kept": kept,
        "shapes": per_shape,
    }


def main() -> None:
    config_dir, fmt = sys.argv[1], sys.argv[2]
    double_quant = "--double-quant" in sys.argv[3:]
    doc = checkpoint(config_dir) if fmt == "checkpoint" else bnb(config_dir, fmt, double_quant)
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()

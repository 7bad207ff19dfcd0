"""The bytes compressed-tensors and HQQ checkpoints' layers hold, from the libraries' own code on
the CPU, for `tests/integration/quantized.rs` to hold `iteragpu estimate`'s quantized terms to.

    scheme_bytes.py CONFIG_DIR

* compressed-tensors (the config's `quant_method`): transformers builds the model from the config
  on the meta device; compressed-tensors' own `apply_quantization_config` and `compress_model`
  (what transformers' `CompressedTensorsHfQuantizer` runs before the checkpoint fills the
  modules) leave each quantized module's parameters, whose bytes are summed.
* HQQ: hqq's own `HQQLinear` quantizes one weight per distinct shape for real on the CPU
  (`BaseQuantizeConfig` from the config's `weight_quant_params`, the compute dtype the config's
  `torch_dtype`), its `W_q` and the `scale` and `zero` of its `meta` summed, multiplied by the
  layers of that shape.

Prints one JSON object: quantized_bytes, quantized_parameters, unquantized_bytes, kept.
"""

from __future__ import annotations

import copy
import json
import sys
from collections import Counter
from typing import Any

import torch
import transformers


def main(folder: str) -> None:
    config = transformers.AutoConfig.from_pretrained(folder)
    raw = json.load(open(f"{folder}/config.json"))
    q = raw["quantization_config"]
    dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    dtype = dtypes[raw.get("torch_dtype", "float16")]
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    quantized = parameters = unquantized = 0
    kept: list[str] = []
    if q["quant_method"] == "compressed-tensors":
        from compressed_tensors.compressors import ModelCompressor
        from compressed_tensors.quantization import apply_quantization_config
        from transformers.utils.quantization_config import CompressedTensorsConfig

        compressor = ModelCompressor.from_compression_config(CompressedTensorsConfig.from_dict(q))
        apply_quantization_config(model, copy.deepcopy(compressor.quantization_config), run_compressed=False)
        compressor.compress_model(model=model)
        for name, module in model.named_modules():
            own = dict(module.named_parameters(recurse=False))
            if getattr(module, "quantization_scheme", None) is not None:
                quantized += sum(t.numel() * t.element_size() for n, t in own.items() if n != "bias")
                parameters += module.in_features * module.out_features
                unquantized += sum(t.numel() * t.element_size() for n, t in own.items() if n == "bias")
            else:
                unquantized += sum(t.numel() * t.element_size() for t in own.values())
                if isinstance(module, torch.nn.Linear):
                    kept.append(name)
    else:
        from hqq.core.quantize import BaseQuantizeConfig, HQQLinear

        params = q["quant_config"]["weight_quant_params"]
        hqq_config = BaseQuantizeConfig(nbits=params["nbits"], group_size=params["group_size"], axis=params["axis"])
        # The half-quadratic refinement changes values, not the tensors kept: skipped for speed.
        hqq_config["weight_quant_params"]["optimize"] = False
        shapes: Counter[tuple[int, int]] = Counter()
        for name, module in model.named_modules():
            own = dict(module.named_parameters(recurse=False))
            if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] not in q["skip_modules"]:
                shapes[(module.out_features, module.in_features)] += 1
                parameters += module.in_features * module.out_features
                unquantized += sum(t.numel() * t.element_size() for n, t in own.items() if n == "bias")
            else:
                unquantized += sum(t.numel() * t.element_size() for t in own.values())
                if isinstance(module, torch.nn.Linear):
                    kept.append(name)
        for (out, inp), count in shapes.items():
            linear = torch.nn.Linear(inp, out, bias=False, dtype=dtype)
            # HQQLinear quantizes, then moves its meta to the compute dtype (`Quantizer.cuda`).
            layer: Any = HQQLinear(linear, copy.deepcopy(hqq_config), compute_dtype=dtype, device="cpu")
            stored = [layer.W_q, layer.meta["scale"], layer.meta["zero"]]
            quantized += count * sum(t.numel() * t.element_size() for t in stored)
    print(json.dumps({"quantized_bytes": quantized, "quantized_parameters": parameters, "unquantized_bytes": unquantized, "kept": kept}))


if __name__ == "__main__":
    main(sys.argv[1])

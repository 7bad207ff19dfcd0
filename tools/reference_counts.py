"""Counts the parameters transformers itself creates for every fixture config.

Run by hand (needs torch and transformers; no weights are downloaded: the model is built on the
`meta` device):  python tools/reference_counts.py tests/fixtures/models
Prints one line per fixture: name, parameters, and the KV-cache layer types transformers derives.
The figures are the reference that tests/fixtures/models/REFERENCE.md records.
"""
import json
import pathlib
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText


def count(path: pathlib.Path):
    raw = json.loads((path / "config.json").read_text())
    raw.pop("quantization_config", None)  # count the architecture, not a quantized load
    config = AutoConfig.for_model(raw.pop("model_type"), **raw)
    auto = AutoModelForImageTextToText if "vision_config" in raw else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(config)
    params = sum(p.numel() for p in model.parameters())
    text = config.get_text_config()
    types = getattr(text, "layer_types", None)
    sliding = sum(t == "sliding_attention" for t in types) if types else 0
    return params, sliding


if __name__ == "__main__":
    root = pathlib.Path(sys.argv[1])
    print(f"# transformers {transformers.__version__}, torch {torch.__version__}")
    for path in sorted(p for p in root.iterdir() if (p / "config.json").is_file()):
        try:
            params, sliding = count(path)
            print(f"{path.name}\t{params}\tsliding_layers={sliding}")
        except Exception as exc:  # report and continue: one odd config must not hide the others
            print(f"{path.name}\tERROR {type(exc).__name__}: {exc}")

"""Every name read from a model's files that reaches a lookup, tried with hostile values: each is
refused with a message naming the value and the file, and no file beside the config runs.

Run by tests/integration/vlm.rs::file_borne_names_reach_only_allowlisted_lookups with real
transformers (and torch); prints "N passed, 0 failed" on success.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback

import torch
import transformers

from iteragpu import names
from iteragpu.workloads import vlm

HOSTILE = [
    "pipeline",
    "__class__",
    "os.system",
    "transformers.pipeline",
    "transformers.models.clip.CLIPImageProcessor",
    "../../evil",
    "AutoModel",
    "PreTrainedModel",
    "BaseImageProcessor",
    "ImageProcessingMixin",
    "__import__",
    "eval",
    "",
    "CLIPImageProcessor\x1b]0;title\x07",
    42,
    None,
    ["CLIPImageProcessor"],
]

passed = failed = 0


def check(label: str, ok: bool, detail: str = "") -> None:
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {label}: {detail}")


def refused(label: str, value: object, path: str, call) -> None:  # type: ignore[no-untyped-def]
    try:
        call()
    except names.UntrustedName as exc:
        text = str(exc)
        check(label, repr(value) in text and path in text, f"the refusal names neither {value!r} nor {path}: {text}")
    except Exception:  # noqa: BLE001 - any other outcome is a failure of the check
        check(label, False, f"not refused by the allowlist:\n{traceback.format_exc()}")
    else:
        check(label, False, f"{value!r} was accepted")


with tempfile.TemporaryDirectory() as tmp:
    marker = os.path.join(tmp, "ran")
    # The report's exploit: a pipeline with trust_remote_code and a Python file beside the config.
    with open(os.path.join(tmp, "evil.py"), "w") as f:
        f.write(f"open({marker!r}, 'w').write('ran')\n")
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump({"model_type": "llava", "auto_map": {"AutoModel": "evil.Evil"}}, f)
    preprocessor = os.path.join(tmp, "preprocessor_config.json")

    # image_processor_type in preprocessor_config.json → vlm._processor.
    for value in HOSTILE:
        with open(preprocessor, "w") as f:
            json.dump(
                {"image_processor_type": value, "task": "text-classification", "model": tmp, "trust_remote_code": True},
                f,
            )
        if isinstance(value, str):
            refused(f"image_processor_type {value!r}", value, preprocessor, lambda: vlm._processor(transformers, preprocessor))
        else:
            try:
                vlm._processor(transformers, preprocessor)
                check(f"image_processor_type {value!r}", False, "accepted")
            except Exception as exc:  # a non-string names nothing: refused before any lookup
                check(f"image_processor_type {value!r}", preprocessor in str(exc), str(exc))
    check("no file beside the config ran", not os.path.exists(marker), "evil.py ran")

    # A real processor is still built, and its settings cannot reach private attributes.
    with open(preprocessor, "w") as f:
        json.dump({"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 224}}, f)
    built = vlm._processor(transformers, preprocessor)
    check("CLIPImageProcessor is built", type(built).__name__.startswith("CLIPImageProcessor"), type(built).__name__)
    with open(preprocessor, "w") as f:
        json.dump({"image_processor_type": "CLIPImageProcessor", "__class__": "x"}, f)
    refused("a setting named __class__", "__class__", preprocessor, lambda: vlm._processor(transformers, preprocessor))

    # model_type in config.json → AutoConfig.for_model (every workload's config reader).
    config = os.path.join(tmp, "config.json")
    for value in HOSTILE:
        refused(
            f"model_type {value!r}",
            value,
            config,
            lambda v=value: names.check_config(transformers, {"model_type": v}, config),
        )
    raw = {"model_type": "llama", "auto_map": {"AutoModelForCausalLM": "evil.Evil"}, "trust_remote_code": True}
    check("a known model_type is taken", names.check_config(transformers, raw, config) == "llama", str(raw))
    check("auto_map and trust_remote_code are dropped", "auto_map" not in raw and "trust_remote_code" not in raw, str(raw))

    # A dtype name (the worker spec's, a checkpoint reference's) → torch.
    for value in [*HOSTILE, "Tensor", "nn", "load", "_C", "float32.__class__"]:
        refused(f"dtype {value!r}", value, "the worker spec", lambda v=value: names.torch_dtype(torch, v, "the worker spec"))
    check("bfloat16 is torch.bfloat16", names.torch_dtype(torch, "bfloat16", "x") is torch.bfloat16)
    check("no file beside the config ran (end)", not os.path.exists(marker), "evil.py ran")

print(f"untrusted names: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)

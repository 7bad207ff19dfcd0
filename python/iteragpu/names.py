"""Names read from a model's files, looked up only on transformers' and torch's own lists.

A `config.json` or a `preprocessor_config.json` names classes (`model_type`,
`image_processor_type`, `auto_map`) and dtypes (`torch_dtype`). Looked up with `getattr` on a
module, any such name reaches any attribute: `image_processor_type: "pipeline"` with
`trust_remote_code: true` made transformers import and run a Python file beside the config. Here
every name is checked against the list of what it may name, and the lookup goes through that list:

* `model_type`: a key of transformers' `CONFIG_MAPPING_NAMES` (`check_config`);
* `image_processor_type`: a class listed in transformers' `IMAGE_PROCESSOR_MAPPING_NAMES`, resolved
  through that mapping and then checked to be an `ImageProcessingMixin` (`image_processor_class`);
* a dtype: one of torch's `torch.dtype` objects (`torch_dtype`).

A model's own code (`auto_map`, `trust_remote_code`) is never run: iteragpu has no
`--trust-remote-code` option, and `check_config` drops `auto_map` once `model_type` is one that
transformers builds with its own classes (transformers itself then prefers its own classes).
"""

from __future__ import annotations

from typing import Any

# Keys of a config that ask for a model's own code; never passed on.
REMOTE_CODE_KEYS = ("auto_map", "trust_remote_code")

REMOTE_CODE_RISK = (
    "iteragpu never runs a model's own Python code: it has no --trust-remote-code option, because "
    "trusting it would run whatever the files beside the config (or a Hub repository) hold, with "
    "your permissions"
)


class UntrustedName(ValueError):
    """A name read from a file that is not on the list of what it may name."""


def refuse(value: object, field: str, path: str, what: str) -> UntrustedName:
    return UntrustedName(
        f"{path}: {field} {value!r} is not {what}; iteragpu looks a name from a file up only on that list, "
        f"so that no file can make it import or run code ({REMOTE_CODE_RISK})"
    )


def check_config(transformers: Any, raw: dict[str, Any], path: str, field: str = "model_type") -> str:
    """Pops and checks `model_type` (a key of transformers' CONFIG_MAPPING_NAMES) and drops the
    keys that ask for the model's own code; returns the model type."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    model_type = raw.pop("model_type", None)
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING_NAMES:
        raise refuse(
            model_type,
            field,
            path,
            f"one of the {len(CONFIG_MAPPING_NAMES)} model types transformers {transformers.__version__} builds "
            "with its own classes (a model that needs its own code is not supported)",
        )
    for key in REMOTE_CODE_KEYS:
        raw.pop(key, None)
    return model_type


def image_processor_names() -> set[str]:
    """Every class name transformers' IMAGE_PROCESSOR_MAPPING_NAMES lists (each backend's)."""
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    names: set[str] = set()
    for entry in IMAGE_PROCESSOR_MAPPING_NAMES.values():
        values = entry.values() if isinstance(entry, dict) else entry if isinstance(entry, (tuple, list)) else (entry,)
        names.update(v for v in values if isinstance(v, str))
    return names


def image_processor_class(transformers: Any, name: object, path: str, field: str = "image_processor_type") -> Any:
    """The image processor class `name` names: only a class transformers' own image-processor
    mapping lists, resolved through that mapping (never `getattr` on a module with the file's
    name), and only if it is an `ImageProcessingMixin`."""
    from transformers.image_processing_base import ImageProcessingMixin
    from transformers.models.auto.image_processing_auto import get_image_processor_class_from_name

    if not isinstance(name, str) or name not in image_processor_names():
        raise refuse(name, field, path, f"an image processor class of transformers {transformers.__version__}'s image-processor mapping")
    cls = get_image_processor_class_from_name(name)
    if not (isinstance(cls, type) and issubclass(cls, ImageProcessingMixin)):
        raise refuse(name, field, path, "an image processor class (a subclass of transformers' ImageProcessingMixin)")
    return cls


def dtypes(torch: Any) -> dict[str, Any]:
    """torch's dtypes by name (`bfloat16`, `float32`…), read from the module's own namespace: the
    allowlist a dtype name from a file is checked against before anything is looked up."""
    return {k: v for k, v in vars(torch).items() if isinstance(v, torch.dtype) and not k.startswith("_")}


def torch_dtype(torch: Any, name: object, where: str) -> Any:
    """The torch dtype `name` names (`bfloat16`, `float32`…): only a `torch.dtype` object."""
    found = dtypes(torch).get(name) if isinstance(name, str) else None  # allowlisted
    if not isinstance(found, torch.dtype):
        raise refuse(name, "dtype", where, "one of torch's dtypes (bfloat16, float16, float32…)")
    return found

"""Hub kernels under a prediction: code from the network, never fetched or run.

transformers 5.25 kernelizes every `from_pretrained` model by default (`use_kernels` defaults to
true unless `USE_HUB_KERNELS` says no): its rotary, RMSNorm and activation layers are replaced by
compiled kernels that the `kernels` package downloads from the Hugging Face Hub
(`kernels-community/rotary`, `kernels-community/liger-kernels`, …). A kernel from the Hub is code
from the network, like a model's `trust_remote_code`: a prediction never fetches it, and a
compiled kernel could not run on data-less tensors anyway.

So every loader of the `kernels` package answers as a kernel that cannot be found
(`FileNotFoundError`, which both `kernels.kernelize` with `KernelizeFallback.CANNOT_LOAD` and
transformers' `lazy_load_kernel` take as "use the original forward"); `kernelize` is made to fall
back on it whatever fallback it was given, so each layer runs its own eager forward; `has_kernel`
answers no. Each kernel left out is named in the prediction's notes, with the layer, the calls,
and what is known of the memory it would have changed. A script that calls a kernel's function
itself (`get_kernel(...).gelu_fast(out, x)`) gets the loader's error with the reason: no eager
forward is known for it.

`measure` runs the kernels on the GPU: `iteragpu.hub_kernels.loaded()` lists those that ran.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any, Callable

# The loaders of the `kernels` package (0.4 to 0.19), each of which reaches the Hub or a compiled
# kernel on disk; `has_kernel` only asks the Hub whether one exists.
LOADERS = ("get_kernel", "get_local_kernel", "get_locked_kernel", "load_kernel", "install_kernel")
# transformers' own names for them (`from kernels import get_kernel as get_kernel_hub`).
ALIASES = {"get_kernel_hub": "get_kernel"}
LOAD = "load"  # the repositories' method that fetches their kernel
REPOSITORIES = (
    "LayerRepository",
    "LocalLayerRepository",
    "LockedLayerRepository",
    "FuncRepository",
    "LocalFuncRepository",
    "LockedFuncRepository",
)

# What is known of the memory each kernel would have changed, by the kernel's layer name (the
# kernels' own sources, as transformers 5.25 maps them in integrations/hub_kernels.py).
KNOWN_EFFECT = {
    "apply_rotary_transformers": (
        "the kernel writes into clones of q and k (its outputs); the eager forward also makes q·cos, rotate_half(q) and its "
        "product with sin, up to three transients of q's (and k's) size per call, freed at once: where this op sets a "
        "peak, the prediction is high by about that"
    ),
    "LigerRMSNorm": (
        "Liger's RMSNorm keeps its input and one float32 per row for backward; the eager forward keeps float32 copies "
        "of its input (about 8 more bytes per element of the hidden states per norm in training, none in inference): "
        "a training prediction is high by about that"
    ),
}
UNKNOWN_EFFECT = "its memory beside the eager forward is not known"


class HubKernels:
    """The `kernels` package made to load nothing; what was left out, for the notes."""

    def __init__(self, note: Callable[[str], None]) -> None:
        self.note = note
        # (repository, revision or version, layer) -> the modules kernelized with it (their ids),
        # or, for a load outside `kernelize`, one entry per load.
        self.left_out: dict[tuple[str, str, str], set[int]] = {}
        self._patched: set[int] = set()
        self._kernelizing: Any = None  # the module `kernelize_layer` is replacing now
        self._loads = 0

    # ------------------------------------------------------------ install
    def install(self, kernels: ModuleType) -> None:
        """Patches the package (called right after `import kernels`, or at once if imported)."""
        modules = [m for name, m in list(sys.modules.items()) if name == "kernels" or name.startswith("kernels.")]
        originals: dict[str, Any] = {}
        for module in modules:
            for name in LOADERS:
                value = getattr(module, name, None)
                if callable(value) and not getattr(value, "_iteragpu", False):
                    originals.setdefault(name, value)
        replacements: dict[int, Any] = {}
        for name, original in originals.items():
            replacements[id(original)] = self._loader(name)
        has_kernel = getattr(kernels, "has_kernel", None)
        if callable(has_kernel) and not getattr(has_kernel, "_iteragpu", False):
            replacements[id(has_kernel)] = self._has_kernel()
        # Every module that bound them by name: the package's own, transformers' integration.
        for other in list(sys.modules.values()):
            namespace = getattr(other, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for key, value in list(namespace.items()):
                if callable(value) and id(value) in replacements:
                    namespace[key] = replacements[id(value)]
        for module in modules:
            for name in REPOSITORIES:
                cls = getattr(module, name, None)
                if isinstance(cls, type) and id(cls) not in self._patched:
                    self._patched.add(id(cls))
                    setattr(cls, LOAD, self._repository_load(name))
            self._fall_back_on_load(module)

    def _loader(self, name: str) -> Callable[..., Any]:
        def load(repo_id: Any = None, *args: Any, **kwargs: Any) -> Any:
            revision = kwargs.get("revision") or (f"version {kwargs['version']}" if kwargs.get("version") is not None else "")
            repo = str(repo_id if repo_id is not None else kwargs.get("repo_id") or kwargs.get("repo_path") or "?")
            if self._kernelizing is None:  # a repository's load, below, has counted a kernelized layer
                self._count((repo, str(revision), ""))
            raise FileNotFoundError(
                f"iteragpu predict: the Hub kernel {repo} was not fetched and not run ({name}): a kernel from the Hub is "
                "code from the network, and a compiled kernel cannot run on data-less tensors; `measure` on the GPU runs it"
            )

        load._iteragpu = True  # type: ignore[attr-defined]
        return load

    def _has_kernel(self) -> Callable[..., bool]:
        def has_kernel(repo_id: Any = None, *args: Any, **kwargs: Any) -> bool:
            self.note(f"Hub kernels: has_kernel({repo_id!s}) answered False (a prediction does not ask the Hub): the script's fallback ran")
            return False

        has_kernel._iteragpu = True  # type: ignore[attr-defined]
        return has_kernel

    def _repository_load(self, kind: str) -> Callable[[Any], Any]:
        def load(repo: Any) -> Any:
            repo_id = str(getattr(repo, "_repo_id", None) or getattr(repo, "repo_id", None) or getattr(repo, "_repo_path", "?"))
            revision = getattr(repo, "_revision", None)
            version = getattr(repo, "_version", None)
            where = str(revision) if revision is not None else (f"version {version}" if version is not None else "")
            layer = str(getattr(repo, "layer_name", None) or getattr(repo, "func_name", None) or "")
            self._count((repo_id, where, layer))
            raise FileNotFoundError(
                f"iteragpu predict: the Hub kernel {repo_id} ({layer or kind}) was not fetched and not run: its layer runs "
                "its own eager forward"
            )

        return load

    def install_transformers(self, module: ModuleType) -> None:
        """transformers' `kernel_config=KernelConfig(...)` loads each kernel class before the
        model is built (`register_kernel_replacements_and_fusions`, 5.2x): a kernel left out
        there leaves the config's mapping as the user gave it, so `kernelize` then falls back
        layer by layer (a stateful replacement or a fusion is not made: the model keeps its own
        modules, said in the note)."""
        original = getattr(module, "register_kernel_replacements_and_fusions", None)
        if not callable(original) or getattr(original, "_iteragpu", False):
            return

        def register(cls: Any, config: Any, kernel_config: Any) -> None:
            try:
                original(cls, config, kernel_config)
            except FileNotFoundError as exc:
                if "iteragpu predict" not in str(exc):
                    raise
                self.note(
                    "Hub kernels: the KernelConfig's layer replacements and fusions were not made (their kernels are not fetched): "
                    "the model keeps its own modules, each running its eager forward"
                )

        register._iteragpu = True  # type: ignore[attr-defined]
        module.register_kernel_replacements_and_fusions = register  # type: ignore[attr-defined]

    def _fall_back_on_load(self, module: ModuleType) -> None:
        """`kernelize(..., use_fallback=False)` or `KernelizeFallback.DEFAULT` would raise where the
        kernel cannot load: the prediction makes it fall back to the layer's own forward."""
        original = getattr(module, "kernelize_layer", None)
        flags = getattr(module, "KernelizeFallback", None)
        if not callable(original) or getattr(original, "_iteragpu", False) or flags is None:
            return
        cannot_load = getattr(flags, "CANNOT_LOAD", None)
        if cannot_load is None:
            return

        def kernelize_layer(*args: Any, **kwargs: Any) -> Any:
            fallback = kwargs.get("use_fallback")
            if fallback is not None:
                kwargs["use_fallback"] = fallback | cannot_load
            self._kernelizing = args[0] if args else kwargs.get("module")
            try:
                return original(*args, **kwargs)
            finally:
                self._kernelizing = None

        kernelize_layer._iteragpu = True  # type: ignore[attr-defined]
        for other in list(sys.modules.values()):
            namespace = getattr(other, "__dict__", None)
            if isinstance(namespace, dict):
                for key, value in list(namespace.items()):
                    if value is original:
                        namespace[key] = kernelize_layer

    def _count(self, key: tuple[str, str, str]) -> None:
        """One more layer left out: the module being kernelized (once, however often it is
        kernelized again: `model.train()` does), else one more direct load."""
        self._loads += 1
        target = self._kernelizing
        self.left_out.setdefault(key, set()).add(id(target) if target is not None else -self._loads)

    # ------------------------------------------------------------ what is said
    def notes(self) -> list[str]:
        """One note per kernel left out (said at the end, when the calls are counted)."""
        said = []
        layers: dict[tuple[str, str], list[tuple[str, int, int]]] = {}
        for (repo, where, layer), ids in sorted(self.left_out.items()):
            modules = sum(1 for i in ids if i >= 0)
            layers.setdefault((repo, where), []).append((layer, modules, len(ids) - modules))
        for (repo, where), entries in layers.items():
            named = [(layer, modules) for layer, modules, _ in entries if layer and modules]
            loads = sum(n for _, _, n in entries)
            parts = [f"layer {layer} ({n} module{'s' if n != 1 else ''})" for layer, n in named]
            if loads:
                parts.append(f"{loads} load{'s' if loads != 1 else ''} {'outside kernelize' if named else 'by the script'}")
            what = ", ".join(parts)
            if named:
                effects = "; ".join(KNOWN_EFFECT.get(layer, UNKNOWN_EFFECT) for layer, _ in named)
                instead = f"each layer ran its own eager forward on the data-less tensors; {effects}"
            else:
                instead = "the script's own call of it failed with this reason (no eager forward is known for a kernel called directly)"
            said.append(
                f"Hub kernel {repo}{f' ({where})' if where else ''} left out: {what}; not fetched and not run (code from the "
                f"network, never run by a prediction); {instead}; `measure` on the GPU runs the kernel"
            )
        return said


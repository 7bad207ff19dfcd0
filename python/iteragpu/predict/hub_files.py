"""Hub ids in the predicted script, served by the CLI's Hub client without their weights.

A script that says `AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-70B")`, or a recipe
that calls `snapshot_download`/`hf_hub_download`, would have huggingface_hub download every weight
(140 GB for a 70B) before the question "will it fit?" is even asked. Under a prediction, every
file request of a model repository goes to the CLI instead (a `hub_query` on the answer pipe,
`src/model/hub/overlay.rs`), which answers with files in the worker's **overlay**: a Hugging Face
cache of this worker alone (its `HF_HUB_CACHE`), removed when the prediction ends. Small files are
links to the real ones in the user's cache (fetched there when missing); each `*.safetensors`
weight file is materialised from its header, at its true size with its data a hole, and its
tensors are read back data-less (`idioms.Idioms.hole_filled`). Nothing hole-filled is ever written
where a real run could load it: not the user's cache, not a `local_dir` (the overlay path is
returned instead, said).

Patched, wherever bound by name: huggingface_hub's `hf_hub_download`, `snapshot_download` and
`try_to_load_from_cache` (transformers' `cached_files` reads the cache after downloading; peft,
diffusers, timm, sentence-transformers and the recipe CLIs call the first two). Data sets and
spaces (`repo_type` other than a model) are left to huggingface_hub: their files are data.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
from typing import Any, Callable

OVERLAY_VARIABLE = "ITERAGPU_HUB_OVERLAY"
PATCHED = ("hf_hub_download", "snapshot_download", "try_to_load_from_cache")


class HubUnavailable(OSError):
    """A file the CLI's Hub client could not serve (gated, missing repository, out of reach, a
    checkpoint without a header): its message names the value and the fix."""


class HubFiles:
    """The interception (see the module's doc), installed once per prediction."""

    def __init__(self, ask: Callable[[str, dict[str, Any], str], dict[str, Any]], note: Callable[[str], None], hole_filled: Callable[[str], None]) -> None:
        self.ask = ask
        self.note = note
        self.hole_filled = hole_filled
        self.root = os.environ.get(OVERLAY_VARIABLE) or None
        self.originals: dict[str, Any] = {}
        # Said with a refusal when the script gave a token in code: the Hub client reads the
        # environment's (HF_TOKEN, the token file), never a value from the script's arguments.
        self._token_hint = ""

    def install(self, after_import: Callable[[str, Callable[[Any], None]], None]) -> None:
        """The worker's `HF_HUB_CACHE` becomes the overlay; huggingface_hub is patched now if
        imported, else right after its import (`after_import`: idioms.py's hook)."""
        if self.root is None:
            return
        default = os.path.join(self.root, "default")
        os.makedirs(default, exist_ok=True)
        os.environ["HF_HUB_CACHE"] = default
        os.environ.pop("HUGGINGFACE_HUB_CACHE", None)
        after_import("huggingface_hub", self._patch)
        after_import("datasets", self._patch_datasets)
        from .. import built_once

        built_once.on_adopt(self._follow_trial)

    def _follow_trial(self) -> None:
        """A trial forked from a builder (built_once.py) has an overlay of its own."""
        root = os.environ.get(OVERLAY_VARIABLE) or None
        if root is None or self.root is None:
            return
        self.root = root
        default = os.path.join(root, "default")
        os.makedirs(default, exist_ok=True)
        os.environ["HF_HUB_CACHE"] = default
        constants = sys.modules.get("huggingface_hub.constants")
        for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
            if constants is not None and hasattr(constants, name):
                setattr(constants, name, default)

    # ------------------------------------------------------------ the cache folders
    def _overlay_cache(self, cache_dir: Any) -> tuple[str | None, str]:
        """(the user's cache the script named, or None for the default; the overlay cache over
        it): `default`, or `cache-HASH` for a folder the script named."""
        assert self.root is not None
        if cache_dir is None:
            return None, "default"
        path = os.path.abspath(os.fspath(cache_dir))
        if os.path.commonpath([path, os.path.abspath(self.root)]) == os.path.abspath(self.root):
            return None, "default"  # the worker's HF_HUB_CACHE, passed on by the caller
        return path, "cache-" + hashlib.sha256(path.encode()).hexdigest()[:16]

    # ------------------------------------------------------------ patching
    def _patch(self, package: Any) -> None:
        import huggingface_hub.constants as constants
        import huggingface_hub.file_download as file_download
        from huggingface_hub import _snapshot_download

        assert self.root is not None
        default = os.path.join(self.root, "default")
        for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
            if hasattr(constants, name):
                setattr(constants, name, default)
        originals = {
            "hf_hub_download": file_download.hf_hub_download,
            "snapshot_download": _snapshot_download.snapshot_download,
            "try_to_load_from_cache": file_download.try_to_load_from_cache,
        }
        if any(getattr(f, "_iteragpu", False) for f in originals.values()):
            return
        self.originals = originals
        replacements = {
            "hf_hub_download": self._wrap(originals["hf_hub_download"], self.hf_hub_download),
            "snapshot_download": self._wrap(originals["snapshot_download"], self.snapshot_download),
            "try_to_load_from_cache": self._wrap(originals["try_to_load_from_cache"], self.try_to_load_from_cache),
        }
        # Every module that bound them by name before now (transformers, peft, diffusers imported
        # by the fork server or the script's first lines); later imports get the package's.
        for module in list(sys.modules.values()):
            names = getattr(module, "__dict__", None)
            if not isinstance(names, dict):
                continue
            for name in PATCHED:
                if names.get(name) is originals[name]:
                    names[name] = replacements[name]
        for name in PATCHED:
            package.__dict__[name] = replacements[name]
        self._patch_resolve_revision(package)

    def _patch_resolve_revision(self, package: Any) -> None:
        """huggingface_hub 1.x's `HfApi.resolve_revision` (transformers 5 pins every file of a
        `from_pretrained` to the commit it answers): asked of the CLI too, never of the Hub."""
        from huggingface_hub import hf_api

        original = hf_api.HfApi.__dict__.get("resolve_revision")
        if original is None or getattr(original, "_iteragpu", False):
            return
        replacement = self._wrap(original, self.resolve_revision)
        hf_api.HfApi.resolve_revision = replacement
        default_api = hf_api.__dict__.get("api")
        if isinstance(default_api, hf_api.HfApi):
            for module in (hf_api, package):
                if "resolve_revision" in module.__dict__:
                    module.__dict__["resolve_revision"] = default_api.resolve_revision

    @staticmethod
    def _wrap(original: Any, handler: Callable[..., Any]) -> Any:
        signature = inspect.signature(original)

        def patched(*args: Any, **kwargs: Any) -> Any:
            # Keywords the release no longer names (transformers 5 still passes `proxies`, which
            # huggingface_hub 1.0 dropped and its decorators swallow) are left out of the binding.
            known = {k: v for k, v in kwargs.items() if k in signature.parameters}
            try:
                bound = signature.bind(*args, **known)
            except TypeError:
                return original(*args, **kwargs)  # huggingface_hub's own message for a bad call
            bound.apply_defaults()
            return handler(original, bound.arguments, args, kwargs)

        patched._iteragpu = True  # type: ignore[attr-defined]
        patched.__wrapped__ = original  # type: ignore[attr-defined]
        patched.__name__ = getattr(original, "__name__", "patched")
        patched.__doc__ = original.__doc__
        return patched

    # ------------------------------------------------------------ the answers
    def _query(self, repo: str, revision: Any, files: list[str], cache_dir: Any, local_only: bool, listing: bool = False, token: Any = None) -> dict[str, Any]:
        self._token_hint = (
            " (the token the script passes in code is not used by a prediction: give it in HF_TOKEN, or `hf auth login`)" if isinstance(token, str) else ""
        )
        user_cache, overlay = self._overlay_cache(cache_dir)
        answer = self.ask(
            "hub_query",
            {
                "repo": str(repo),
                "revision": None if revision is None else str(revision),
                "files": files,
                "list": listing,
                "cache_dir": user_cache,
                "overlay": overlay,
                "local_only": bool(local_only) or _offline(),
            },
            f"the Hub files of {repo}",
        )
        error = answer.get("error")
        if error:
            raise HubUnavailable(str(error.get("message")) + self._token_hint)
        for file, path in (answer.get("files") or {}).items():
            if path is not None and file.endswith(".safetensors"):
                self.hole_filled(path)
        return answer

    def hf_hub_download(self, original: Any, a: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if a.get("repo_type") not in (None, "model") or a.get("dry_run"):
            return original(*args, **kwargs)
        filename = str(a["filename"])
        subfolder = a.get("subfolder")
        full = f"{subfolder}/{filename}" if subfolder else filename
        answer = self._query(a["repo_id"], a.get("revision"), [full], a.get("cache_dir"), a.get("local_files_only", False), token=a.get("token"))
        path = (answer.get("files") or {}).get(full)
        if path is None:
            raise _entry_not_found(f"{a['repo_id']} has no file {full} at commit {answer.get('commit')} (iteragpu's Hub client)")
        self._local_dir(a, "hf_hub_download")
        return path

    def snapshot_download(self, original: Any, a: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if a.get("repo_type") not in (None, "model") or a.get("dry_run"):
            return original(*args, **kwargs)
        repo, revision, cache_dir = a["repo_id"], a.get("revision"), a.get("cache_dir")
        local_only = a.get("local_files_only", False)
        listed = self._query(repo, revision, [], cache_dir, local_only, listing=True, token=a.get("token"))
        from huggingface_hub.utils import filter_repo_objects

        files = list(filter_repo_objects(listed.get("listing") or [], allow_patterns=a.get("allow_patterns"), ignore_patterns=a.get("ignore_patterns")))
        answer = self._query(repo, revision, files, cache_dir, local_only, token=a.get("token")) if files else listed
        self._local_dir(a, "snapshot_download")
        return answer["snapshot"]

    def resolve_revision(self, original: Any, a: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        repo, revision = a["repo_id"], a.get("revision")
        if a.get("repo_type") not in (None, "model"):
            return original(*args, **kwargs)
        from huggingface_hub._revision import ResolvedRevision

        if isinstance(revision, ResolvedRevision):
            if revision._repo_id in (None, repo):
                return revision
            revision = revision.initial
        answer = self._query(repo, revision, [], a.get("cache_dir"), a.get("local_files_only", False))
        return ResolvedRevision(resolved=answer["commit"], initial=revision, repo_id=repo, repo_type="model")

    def try_to_load_from_cache(self, original: Any, a: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if a.get("repo_type") not in (None, "model"):
            return original(*args, **kwargs)
        assert self.root is not None
        _, overlay = self._overlay_cache(a.get("cache_dir"))
        a = dict(a, cache_dir=os.path.join(self.root, overlay))
        return original(**a)

    def _local_dir(self, a: dict[str, Any], name: str) -> None:
        if a.get("local_dir") is not None:
            self.note(
                f"{name}(local_dir={os.fspath(a['local_dir'])!r}): the prediction returned the files' place in its own overlay "
                "and wrote nothing in that folder (a hole-filled weight file never lands where a real run could load it)"
            )


    # ------------------------------------------------------------ data sets
    def _patch_datasets(self, package: Any) -> None:
        """`datasets.load_dataset` of a Hub data set: its data are real (a prediction reads the
        lengths of real rows), fetched by `datasets` itself, but one above [`DATA_CAP`] bytes is
        refused before a byte of it is fetched, with its size and the fix. Streaming reads rows
        as they come: left alone."""
        load = package.__dict__.get("load_dataset")
        if load is None or getattr(load, "_iteragpu", False):
            return
        replacement = self._wrap(load, self.load_dataset)
        for module in list(sys.modules.values()):
            names = getattr(module, "__dict__", None)
            if isinstance(names, dict) and names.get("load_dataset") is load:
                names["load_dataset"] = replacement

    def load_dataset(self, original: Any, a: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        path = a.get("path")
        if not isinstance(path, str) or a.get("streaming") or os.path.exists(path) or path in _packaged_builders():
            return original(*args, **kwargs)
        size = _data_set_bytes(path, a.get("revision"), a.get("data_files"), a.get("data_dir"))
        if size is not None and size > DATA_CAP:
            raise HubUnavailable(
                f"load_dataset({path!r}): its data files on the Hub hold {size:,} bytes ({size / 1e9:.2f} GB), above the "
                f"{DATA_CAP / 1e9:.0f} GB a prediction fetches: data are never invented, so give a local sample "
                "(load_dataset('json', data_files='sample.jsonl')), a smaller part (data_files=… or split='train[:1000]' with "
                "data_files naming one shard), or streaming=True"
            )
        return original(*args, **kwargs)


# The most bytes of a data set's files a prediction lets `datasets` fetch.
DATA_CAP = 2_000_000_000


def _packaged_builders() -> set[str]:
    """`datasets`' own builders (`json`, `csv`, `parquet`, …): names that are no Hub id."""
    try:
        from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES
    except ImportError:
        return set()
    return set(_PACKAGED_DATASETS_MODULES)


def _data_set_bytes(path: str, revision: Any, data_files: Any, data_dir: Any) -> int | None:
    """The bytes of the data files `load_dataset` would fetch, from the Hub's file list (None
    when it cannot be read: `datasets` then answers as it would)."""
    import fnmatch

    try:
        from huggingface_hub import HfApi

        info = HfApi().dataset_info(path, revision=None if revision is None else str(revision), files_metadata=True)
    except Exception:  # offline, missing, refused: datasets' own call says so
        return None
    patterns: list[str] = []
    if isinstance(data_files, str):
        patterns = [data_files]
    elif isinstance(data_files, dict):
        for value in data_files.values():
            patterns += [value] if isinstance(value, str) else list(value)
    elif data_files is not None:
        patterns = [str(f) for f in data_files]
    total = 0
    for sibling in info.siblings or []:
        name = sibling.rfilename
        if name.endswith((".md", ".gitattributes", ".py")) or name.startswith("."):
            continue
        if data_dir is not None and not name.startswith(str(data_dir).rstrip("/") + "/"):
            continue
        if patterns and not any(fnmatch.fnmatch(name, p) or name == p for p in patterns):
            continue
        total += int(sibling.size or 0)
    return total


def _offline() -> bool:
    try:
        from huggingface_hub import constants
    except ImportError:
        return False
    check = getattr(constants, "is_offline_mode", None)
    return bool(check()) if callable(check) else bool(getattr(constants, "HF_HUB_OFFLINE", False))


def _entry_not_found(message: str) -> Exception:
    """huggingface_hub's error for a file the repository does not have (transformers takes it as
    an optional file's absence), built as the installed release accepts it."""
    from huggingface_hub import errors

    try:
        return errors.EntryNotFoundError(message)
    except TypeError:  # a release whose HTTP errors require the response
        import httpx

        response = httpx.Response(404, request=httpx.Request("GET", "http://iteragpu.invalid/"))
        return errors.RemoteEntryNotFoundError(message, response=response)

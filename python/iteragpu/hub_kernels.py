"""Which Hub kernels ran in a measured process (transformers' default `use_kernels`, the `kernels`
package called by a script): the measure document records them beside the figures they shaped,
since a run with a kernel and one without allocate differently (predict/hub_kernels.py)."""

from __future__ import annotations

import sys
from typing import Any


def loaded() -> list[dict[str, Any]]:
    """The Hub kernels this process loaded (`kernels.get_loaded_kernels`, kernels 0.19+), for
    `measure`'s document: repository, revision (the commit), name and version."""
    kernels = sys.modules.get("kernels")
    get = getattr(kernels, "get_loaded_kernels", None)
    if kernels is None:
        return []
    if not callable(get):
        version = getattr(kernels, "__version__", "?")
        return [{"repository": None, "revision": None, "name": None, "version": None, "error": f"kernels {version} has no get_loaded_kernels (0.19+): which Hub kernels ran is not known"}]
    out = []
    try:
        for k in get():
            info = getattr(k, "repo_info", None)
            meta = getattr(k, "metadata", None)
            out.append(
                {
                    "repository": str(getattr(info, "repo_id", "")) or None,
                    "revision": str(getattr(info, "revision", "")) or None,
                    "name": str(getattr(meta, "name", "")) or None,
                    "version": version if isinstance(version := getattr(meta, "version", None), int) else None,
                }
            )
    except Exception as exc:  # a newer kernels package may differ: said, not fatal to the run
        return [{"repository": None, "revision": None, "name": None, "version": None, "error": f"{type(exc).__name__}: {exc}"}]
    return out


def said(ran: list[dict[str, Any]]) -> str:
    """The note beside the document's `hub_kernels`."""
    named = [f"{k['repository'] or k['name'] or '?'}@{k['revision'] or '?'}" for k in ran if not k.get("error")]
    errors = [str(k["error"]) for k in ran if k.get("error")]
    return "Hub kernels ran in this process: " + "; ".join(named + errors) + " (their memory is in the figures; `predict` runs each layer's eager forward instead)"

"""Whose a stack frame is, by where its file lies: under a package's actual directory
(`os.path.dirname(module.__file__)`), never by a word in its path. A user whose project lives in a
folder named `iteragpu` or `torch` (a plain `git clone` of this repository is named `iteragpu`)
keeps the file:line of their own code.
"""

from __future__ import annotations

import os
import sys

_TOOL: str = os.path.dirname(os.path.abspath(__file__))


def _forms(directory: str) -> tuple[str, ...]:
    """The directory as given and as resolved, each ending with a separator (a prefix test then
    never takes `/a/torchvision` for `/a/torch`)."""
    return tuple({os.path.join(os.path.abspath(directory), ""), os.path.join(os.path.realpath(directory), "")})


def package_dirs(*modules: str) -> tuple[str, ...]:
    """The directories of the named packages or modules' files, those imported (a module not
    imported has no frame on the stack)."""
    dirs: list[str] = []
    for name in modules:
        if name == "iteragpu":
            dirs.extend(_forms(_TOOL))
            continue
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if isinstance(file, str):
            dirs.extend(_forms(os.path.dirname(file)))
    return tuple(dirs)


def module_files(*files: str) -> tuple[str, ...]:
    """Files given by their full path, in both forms (for a single module such as recorder.py)."""
    out: set[str] = set()
    for f in files:
        out.add(os.path.abspath(f))
        out.add(os.path.realpath(f))
    return tuple(out)


def tool_dir(*parts: str) -> tuple[str, ...]:
    """A folder of iteragpu's own package (`tool_dir("predict")`), in both forms."""
    return _forms(os.path.join(_TOOL, *parts))


def under(file: str, prefixes: tuple[str, ...]) -> bool:
    """Whether `file` (a frame's co_filename) lies under one of `prefixes` (directories ending
    with a separator, or files named exactly)."""
    if not os.path.isabs(file):
        file = os.path.abspath(file)
    return any(file == p or (p.endswith(os.sep) and file.startswith(p)) for p in prefixes)

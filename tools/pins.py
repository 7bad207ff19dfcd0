#!/usr/bin/env python3
"""The pins of CI's Python environments, read from the one table that declares the tested releases
(docs/tested-versions.md, which the tool also reads).

    tools/pins.py newest     every library at its *newest tested* release (`name==X`, one a line)
    tools/pins.py oldest     the oldest environment's libraries at their *oldest tested* release
    tools/pins.py rows       library, oldest, newest, oldest environment (tab-separated)

Standard library only: `.ci/run` calls it before any environment exists.
"""

from __future__ import annotations

import pathlib
import sys

TABLE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "tested-versions.md"
BEGIN = "<!-- tested-versions:begin -->"
END = "<!-- tested-versions:end -->"


def rows(text: str) -> list[tuple[str, str, str, bool]]:
    """(library, oldest, newest, in the oldest environment) for each row between the markers."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    out = []
    for line in text[start:end].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or cells[0] == "library" or cells[0].startswith("---"):
            continue
        out.append((cells[0], cells[1], cells[2], cells[3] == "yes"))
    if not out:
        raise SystemExit(f"{TABLE}: no rows between {BEGIN} and {END}")
    return out


def main(argv: list[str]) -> int:
    what = argv[1] if len(argv) > 1 else ""
    table = rows(TABLE.read_text(encoding="utf-8"))
    if what == "newest":
        print("\n".join(f"{lib}=={newest}" for lib, _, newest, _ in table))
    elif what == "oldest":
        print("\n".join(f"{lib}=={oldest}" for lib, oldest, _, old_env in table if old_env))
    elif what == "rows":
        print("\n".join(f"{lib}\t{oldest}\t{newest}\t{'yes' if old_env else 'no'}" for lib, oldest, newest, old_env in table))
    else:
        print("usage: tools/pins.py newest|oldest|rows", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

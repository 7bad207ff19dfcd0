"""Storage events encoded as json.dumps writes them, without json.dumps: the tracker's hot path
(one alloc per tensor) writes the few strings it repeats from these caches."""

from __future__ import annotations

import json

# A string as json.dumps writes it (categories, module names, dtypes: few), and an allocation
# site's fields as they end an encoded alloc event, each made once (kept up to a bound).
_JSON_STRINGS: dict[str, str] = {}
_SITE_TEXTS: dict[tuple[str | None, int | None], str] = {}
_ENCODED_LIMIT: int = 100_000


def json_string(text: str) -> str:
    encoded = _JSON_STRINGS.get(text)
    if encoded is None:
        encoded = json.dumps(text)
        if len(_JSON_STRINGS) < _ENCODED_LIMIT:
            _JSON_STRINGS[text] = encoded
    return encoded


def site_text(site: tuple[str, int] | tuple[None, None]) -> str:
    """`, "file": …, "line": …` (nothing for no site), as json.dumps writes them."""
    text = _SITE_TEXTS.get(site)
    if text is None:
        file, line = site
        text = "" if file is None else f', "file": {json.dumps(file)}, "line": {json.dumps(line)}'
        if len(_SITE_TEXTS) < _ENCODED_LIMIT:
            _SITE_TEXTS[site] = text
    return text

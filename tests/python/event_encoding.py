"""The tracker's storage events written directly (`Tracker._alloc`, `_free`) are the characters
json.dumps writes for the same event: compared on allocations with and without a module, with
non-ASCII and quoted names, empty and large shapes, tainted or not, with and without a site.
Prints "ok" and the number of events compared; raises at the first difference. Run with
iteragpu's `python` folder on PYTHONPATH."""

import json
import os
import threading

import torch

from iteragpu.predict import tracker

encoded: list[str] = []
plain: list[str] = []


def emit_plain(kind, data):
    plain.append(json.dumps({"type": kind, "data": data}, allow_nan=False, default=str))


def emit_direct(kind, data):
    encoded.append(json.dumps({"type": kind, "data": data}, allow_nan=False, default=str))


emit_direct.encoded = lambda kind, line: encoded.append(line)
direct = tracker.Tracker(emit_direct, [])
reference = tracker.Tracker(emit_plain, [])
assert direct._emit_line is not None and reference._emit_line is None


def both(*event):
    # One line for both: the same allocation site.
    for t in (direct, reference): t._alloc(*event)  # noqa: E701


C = tracker.Category
cases = [
    (0, 4096, C.TEMPORARY, None, [4, 512, 1024], "float32", False),
    (1, 1 << 40, C.PARAMETER, "bert.encoder.layer.3.attention.self.query", [], "bfloat16", True),
    (2, 7, C.ACTIVATION, 'modèle "quoted" \\ ☃ \n', [1 << 33, 0, 1], "uint8", False),
    (3, 0, C.KV_CACHE, "cuBLAS workspace (autograd thread)", [0], "int64", True),
]
for case in cases:
    both(*case)
for ident in (0, 2, 3, 1):
    for t in (direct, reference):
        t.live[ident] = tracker.Live(ident, 1, C.TEMPORARY, ident)
        t._free(ident)
# A site-less allocation: on a thread whose every frame the site walk skips (torch's own code,
# the standard library's threading).
space: dict = {}
# A file under torch's own folder (frames are told apart by location, frames.py).
inner = os.path.join(os.path.dirname(torch.__file__), "inner.py")
space["C"] = C
exec(compile("def run(t):\n    t._alloc(9, 1, C.OTHER, None, [1], 'float16', False)\n", inner, "exec"), space)
for t in (direct, reference):
    thread = threading.Thread(target=space["run"], args=(t,))
    thread.start()
    thread.join()
assert len(encoded) == len(plain) == 2 * len(cases) + 1, (len(encoded), len(plain))
for got, want in zip(encoded, plain):
    assert got == want, f"encoded differently:\n{got}\n{want}"
assert '"file"' in encoded[0] and '"file"' not in encoded[-1], (encoded[0], encoded[-1])
print("ok", len(encoded))

"""A user's file in a folder named `torch` or `iteragpu` is the user's: the prediction's
allocation site (`tracker._site_file`), its user frame (`user_frame`, `script_frame`) and the
measuring worker's (`workload.script_frame`) name it, while torch's and iteragpu's own files stay
theirs. Run by tests/integration/measure.rs::frames_under_folders_named_torch_or_iteragpu_are_the_users.
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch

from iteragpu import workload
from iteragpu.predict import tracker

passed = failed = 0


def check(label: str, ok: bool, detail: object = "") -> None:
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {label}: {detail}")


CODE = """
def call(f):
    return f()
"""

with tempfile.TemporaryDirectory() as tmp:
    for folder in ("torch", "iteragpu", os.path.join("iteragpu", "predict")):
        file = os.path.join(tmp, folder, "s.py")
        os.makedirs(os.path.dirname(file), exist_ok=True)
        with open(file, "w") as f:
            f.write(CODE)
        scope: dict = {}
        exec(compile(CODE, file, "exec"), scope)
        check(f"{folder}: the allocation site", tracker._site_file(file) == file, tracker._site_file(file))
        # user_frame skips two frames (its caller's caller): call → lambda → user_frame.
        got = scope["call"](lambda: tracker.user_frame())
        check(f"{folder}: user_frame", got[0] == file, got)
        got = scope["call"](tracker.script_frame)
        check(f"{folder}: predict's script_frame", got[0] == file, got)
        got = scope["call"](workload.script_frame)
        check(f"{folder}: the worker's script_frame", got[0] == file, got)
    torch_file = torch.nn.modules.module.__file__
    check("torch's own file is torch's", tracker._site_file(torch_file) is None, torch_file)
    check("iteragpu's prediction code is its own", tracker._site_file(tracker.__file__) is None, tracker.__file__)

print(f"frames by location: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)

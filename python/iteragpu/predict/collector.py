"""The predicting worker's garbage collector: full collections ten times rarer, and what was
imported before any workload runs set apart from them.

A prediction makes millions of short-lived Python objects (fake tensors, events, memo entries) and
keeps many long-lived ones (the tracker's records, FakeTensorMode's cache, the memo). CPython
collects its oldest generation whenever a quarter more long-lived objects have piled up since the
last full collection, and each full collection walks every object the worker holds, torch's and
transformers' own included: 1.5 s of a 12 s QLoRA step predicted on Llama-3-8B (8 full collections,
measured with `gc.callbacks`). The worker therefore runs a full collection after 100 collections of
the middle generation rather than CPython's 10, and `freeze_imports()` moves the objects the imports
made (modules, functions, classes: never garbage) into the permanent generation that no collection
walks.

What this changes is only *when* cyclic garbage is found: a tensor held by a reference cycle is
freed at the next collection that reaches its generation, here as in the user's own process, whose
cadence depends on objects the prediction does not make (the tracker's are not the user's). Young
cycles are still collected as CPython does, `gc.collect()` in the user's code still collects
everything, and memory freed by reference counting, nearly all of a PyTorch program's, is freed at
the same moment either way. `ITERAGPU_PREDICT_GC=default` keeps CPython's thresholds and freezes
nothing.
"""

from __future__ import annotations

import gc
import os

# Set to "default" to keep CPython's own collector settings.
ENV: str = "ITERAGPU_PREDICT_GC"
# Collections of the middle generation between two full collections (CPython's: 10).
OLDEST_EVERY: int = 100


def enabled() -> bool:
    return os.environ.get(ENV, "") != "default"


def tune() -> None:
    """Full collections rarer (the two younger generations as CPython sets them)."""
    if not enabled():
        return
    young, middle, _ = gc.get_threshold()
    if young > 0:  # a threshold of 0 means collection is off: left as it is
        gc.set_threshold(young, middle, OLDEST_EVERY)


def freeze_imports() -> None:
    """Every object alive now into the permanent generation: called before any workload code has
    run, when they are what the imports made."""
    if enabled():
        gc.freeze()

"""iteragpu's Python side: the phase protocol that runs inside the measured process.

Only the standard library is imported here; torch is imported by the worker once it knows PyTorch
is wanted, so that `iteragpu environment` can report a missing PyTorch instead of crashing.
"""

from .recorder import Recorder, describe, phase

__all__ = ["Recorder", "describe", "phase"]

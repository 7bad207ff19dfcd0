"""Runs the built-in workloads' own code with real torch (and transformers) on the CPU, with a
stand-in for torch.cuda's counters, so that every call they make into torch, transformers and peft
is exercised for real. Prints one JSON list of the phases each job went through.

Usage: workloads_on_cpu.py JOBS.json — a list of worker specs (devices ["cpu"]).
Exits 77 (reason on stderr) when torch is not importable. Measures nothing: the counters are 0."""

import json
import sys

try:
    import torch  # noqa: F401  (only its absence matters here: said, exit 77)
except Exception as exc:
    print(f"torch is needed: {type(exc).__name__}: {exc}", file=sys.stderr)
    sys.exit(77)

from cpu_torch import CpuTorch  # noqa: E402  (this folder is on sys.path: the script's own)

from iteragpu import recorder
from iteragpu import spec as specs
from iteragpu.workloads import causal_lm, dense


def run(job):
    spec = specs.parse(job)
    phases = []

    def emit(kind, data):
        if kind == "phase_end":
            phases.append({"name": data["name"], "status": data["status"], "error": data["error"], "inputs": data["inputs"]})

    fake = CpuTorch()
    rec = recorder.Recorder(fake, list(spec.devices), emit)
    try:
        {"dense": dense, "causal-lm": causal_lm}[spec.workload].run(rec, fake, spec)
        error = None
    except Exception as exc:  # reported to the test with the phases that ran
        error = f"{type(exc).__name__}: {exc}"
    return {"phases": phases, "error": error}


with open(sys.argv[1], encoding="utf-8") as f:
    jobs = json.load(f)
print(json.dumps([run(job) for job in jobs], default=str))

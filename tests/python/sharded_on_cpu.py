"""One rank of a torchrun job (gloo, CPU tensors) running the causal-lm training workload's own
code with `--shard ddp|fsdp`: DDP and FSDP2 for real, with the recorder's protocol around them and
zero counters (tests/python/cpu_torch.py). Writes the phases this rank went through to
OUT/rank<RANK>.json. Measures nothing.

Usage: python -m torch.distributed.run --standalone --nproc-per-node 2 sharded_on_cpu.py JOB.json OUT"""

import json
import os
import sys
import traceback

from cpu_torch import CpuTorch

from iteragpu import recorder
from iteragpu import spec as specs
from iteragpu.workloads import causal_lm

with open(sys.argv[1], encoding="utf-8") as f:
    spec = specs.parse(json.load(f))
phases = []


def emit(kind, data):
    if kind == "phase_end":
        phases.append({"name": data["name"], "status": data["status"], "error": data["error"], "inputs": data["inputs"]})


fake = CpuTorch()
rec = recorder.Recorder(fake, list(spec.devices), emit)
try:
    causal_lm.run(rec, fake, spec)
    error = None
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
with open(os.path.join(sys.argv[2], f"rank{os.environ['RANK']}.json"), "w", encoding="utf-8") as f:
    json.dump({"phases": phases, "error": error}, f, default=str)

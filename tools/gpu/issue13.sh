#!/usr/bin/env bash
# Issue 13 on the lent GPU (one H200): torchrun with NCCL at world size 1 — the plain loop, DDP and
# FSDP2 side by side, NCCL's memory seen outside PyTorch's allocator after init_process_group and
# the first collective — and the predictions of the same runs (stored beside each measurement), then
# predicted per-rank peaks for world sizes 2–8 to set against the single-rank run. Copy $OUT into
# docs/measurements/<date>-issue13/ and commit it with a note of what it shows.
set -u
BIN=${BIN:-.device-bin/iteragpu}
OUT=${OUT:-$(mktemp -d)}
MODEL=tests/fixtures/models/llama-style-8l
mkdir -p "$OUT"
m() {  # m NAME ARGS…: one measurement, its table, its fiche
  name=$1; shift
  timeout 180 "$BIN" measure "$@" --output "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
  echo "$name: measure exit $?"
  "$BIN" report "$OUT/$name.json" --output "$OUT/$name.html" > /dev/null 2>&1
}
TRAIN="--workload causal-lm --model $MODEL --task train --precision bf16-mixed --batch 2 --context 512"
m plain $TRAIN
m torchrun-plain --nproc-per-node 1 $TRAIN
m torchrun-ddp --nproc-per-node 1 $TRAIN --shard ddp
m torchrun-fsdp --nproc-per-node 1 $TRAIN --shard fsdp
grep -h -A6 "ranks of this node" "$OUT"/torchrun-*.txt
# NCCL's memory: outside PyTorch's allocator per phase, rank 0.
python3 - "$OUT" <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/torchrun-*.json")):
    d = json.load(open(f))
    for r in (d.get("distributed") or {}).get("ranks", []):
        print(f.rsplit("/", 1)[-1], "rank", r["rank"], [
            (p["name"], (p.get("driver") or [{}])[0].get("outside_allocator_at_end_bytes")) for p in r["phases"][:4]])
PY
for world in 2 4 8; do
  timeout 120 "$BIN" predict --card H200 $TRAIN --shard fsdp --world-size $world --json \
    --output "$OUT/predict-fsdp-w$world.json" > /dev/null 2>&1
  echo "predict fsdp world size $world: exit $?"
done

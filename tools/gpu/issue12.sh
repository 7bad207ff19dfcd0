#!/usr/bin/env bash
# Issue 12 on the lent GPU: the gap ledger, the allocator's diagnostics, the out-of-memory
# post-mortem of each class, and the timeline. Copy $OUT into docs/measurements/<date>-issue12/
# and commit it with a note of what it shows.
#   1. --timeline on the guide's case, a causal-lm prefill and a training step: the snapshot
#      beside each result, its summary per phase (largest live allocations with frames, segments,
#      largest free block), `explain` and the HTML fiche with the waterfall and the timeline.
#   2. The recording's overhead: one workload with --no-history, the default (live frames) and
#      --timeline; phase durations and peaks side by side (the peaks must not move).
#   3. Out-of-memory of each class: capacity (a batch too large), fragmentation (the crafted
#      pattern of tests/fixtures/scripts/fragment.py, and its A/B against expandable segments),
#      another process (hold_memory.py holds all but 8 GiB while a 20 GB workload runs).
#   4. The clock: each result's phase bounds against the snapshot's time_us.
set -u
BIN=${BIN:-.device-bin/iteragpu}
OUT=${OUT:-$(mktemp -d)}
MODEL=tests/fixtures/models/llama-style-8l
SCRIPTS=tests/fixtures/scripts
mkdir -p "$OUT"
step() { echo "== $*"; }
m() {  # m NAME ARGS…: a measurement, its table, its explanation and its fiche
  name=$1; shift
  timeout 120 "$BIN" measure "$@" --no-prediction --output "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
  echo "$name: measure exit $?"
  "$BIN" explain "$OUT/$name.json" > "$OUT/$name.explain.txt" 2>&1
  "$BIN" report "$OUT/$name.json" --output "$OUT/$name.html" > /dev/null 2>&1
}
step "1. timelines"
m guide-timeline --batch 2 --context 128 --width 1024 --dtype float32 --warmup 3 --repeats 5 --timeline
m prefill-timeline --workload causal-lm --model $MODEL --dtype bfloat16 --batch 4 --prompt-tokens 2048 \
  --new-tokens 16 --timeline
m train-timeline --workload causal-lm --model $MODEL --task train --precision bf16-mixed --batch 2 \
  --context 512 --steps 2 --timeline
step "2. overhead of the recording"
for mode in "--no-history" "" "--timeline"; do
  tag=${mode:-default}; tag=${tag#--}
  m "overhead-$tag" --batch 8 --context 1024 --width 2048 --dtype bfloat16 --warmup 2 --repeats 10 $mode
done
grep -h "warm_forward\|status" "$OUT"/overhead-*.txt | head -40
step "3. out-of-memory classes"
m oom-capacity --batch 4096 --context 4096 --width 4096 --dtype bfloat16
m oom-fragmentation --script $SCRIPTS/fragment.py
timeout 200 "$BIN" sweep --vary alloc_conf=default,expandable_segments --script $SCRIPTS/fragment.py \
  --output "$OUT/fragment-ab.json" > "$OUT/fragment-ab.txt" 2>&1
echo "fragment A/B: exit $?"
python3 $SCRIPTS/hold_memory.py --leave-gib 8 --seconds 100 > "$OUT/holder.txt" 2>&1 &
holder=$!
for _ in $(seq 60); do grep -q holding "$OUT/holder.txt" 2>/dev/null && break; kill -0 $holder 2>/dev/null || break; sleep 1; done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$OUT/apps-while-holding.csv" 2>&1
m oom-another-process --batch 16 --context 4096 --width 4096 --dtype bfloat16
kill $holder 2>/dev/null; wait $holder 2>/dev/null
grep -h "post-mortem" "$OUT"/oom-*.txt
step "4. the clock of the trace"
python3 - "$OUT" <<'PY'
import json, pickle, sys, glob
for r in sorted(glob.glob(sys.argv[1] + "/*-timeline.json")):
    doc = json.load(open(r))
    t = (doc.get("timeline") or {}).get("path")
    if not t:
        print(r, "no snapshot:", (doc.get("timeline") or {}).get("reason")); continue
    snap = pickle.load(open(t, "rb"))
    times = [e["time_us"] for tr in snap.get("device_traces", []) for e in tr if "time_us" in e]
    meta = sorted({e.get("user_metadata", "") for tr in snap.get("device_traces", []) for e in tr})
    bounds = [(p["name"], p.get("started_at_unix_us"), p.get("ended_at_unix_us")) for p in doc["phases"]]
    print(r, "trace time_us", min(times, default=None), max(times, default=None), "phases", bounds[0], bounds[-1])
    print("  user_metadata values:", meta[:12])
PY

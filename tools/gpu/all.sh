#!/usr/bin/env bash
# Every GPU check in ONE budgeted call (a lent device gives 15 minutes in all, its start included;
# one command may run 10 minutes). On this machine first:
#   cargo build --release && mkdir -p .device-bin && cp target/release/iteragpu .device-bin/
#   pip download --no-deps bitsandbytes==0.50.2 -d .device-bin   # 43 MB, if the device lacks it
# then with the device tool:
#   run(command="bash tools/gpu/all.sh", carry=[".device-bin"], timeout_s=540)
# The whole run stops starting checks BUDGET_S (480) seconds after it began, less MARGIN_S (20) kept
# for the summary. The most valuable checks run first, each under its own `timeout` (never more than
# what is left of the budget); a check that cannot fit is skipped, and the skip is in the summary:
#   1. environment --json, nvidia-smi
#   2. each built-in workload once: dense (the guide's case, bf16 8×2048×4096), causal-lm on the
#      8-layer Llama config (generation with a dynamic cache, a bf16-mixed training step with
#      --timeline: its trace names the stream and request behind step 2's reserved growth, issue 28
#      item 5, docs/notes/issue28-reserved-after-step-1.md; then QLoRA: nf4 with double quantization,
#      LoRA r 16 on all linear layers, paged AdamW 8-bit, issue 29), vision on
#      ViT-base's config (bf16 inference of 64 images at 224, a bf16-mixed training step of 32 at
#      384: the interpolated position embeddings, a longer sequence), 4 concurrent requests of
#      mixed lengths on the 8-layer Llama, and Qwen2-VL-2B with 2 images of 448 per request (vlm:
#      the processor's shapes and image tokens recorded; needs pillow on the device), and the
#      Llama-3.2-11B-Vision layout with 2 images of 480×1000 (tiles, cross-attention states)
#   3. user scripts with `measure --script`: tests/fixtures/scripts/{h200_sequential,train_loop}.py
#      and tools/gpu/scripts/*.py (no markers unless ITERAGPU_MARK=1: measured with them)
#   4. the out-of-memory classes of issue12.sh: capacity, fragmentation (and its A/B against
#      expandable segments), another process holding the memory
#   5. the older issue checks (issue13, 3, 12, 11, 4, 5), each bounded, while time remains (log in
#      issues/issueN.txt, results in issueN/).
# No prediction is computed on the device (tools/gpu/device-iteragpu.sh adds --no-prediction and
# records each measurement's command line in NAME.cmd.json): once the results are back, copy them into
# docs/measurements/<date>/ and run `bash tools/gpu/predict_returned.sh docs/measurements/<date>`
# here (docs/measurements/README.md). Everything is written under $OUT: one folder per group, each
# check's output in GROUP/NAME.txt, summary.json and summary.txt; the table (check, status, seconds)
# is printed last.
#
# Dry run here, with the test suite's fake torch (plumbing only, not GPU readings):
#   ITERAGPU_GPU_DRY=1 ITERAGPU_BIN=target/debug/iteragpu BUDGET_S=60 bash tools/gpu/all.sh
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SELF=$ROOT/tools/gpu/all.sh
MODEL=tests/fixtures/models/llama-style-8l
VIT=tests/fixtures/models/vit-base-defaults
QWEN2VL=tests/fixtures/models/qwen2-vl-2b-instruct
MLLAMA=tests/fixtures/models/llama-3.2-11b-vision-defaults
FIXTURES=tests/fixtures/scripts
SCRIPTS=tools/gpu/scripts
cd "$ROOT" || exit 1

# ------------------------------------------------------------------ steps made of several commands
# (run as `bash all.sh --step NAME` so that each is one check with its own time bound)
step_environment() {
  "$BIN" environment --json > "$OUT/environment/environment.json"
}

step_nvidia_smi() {
  command -v nvidia-smi > /dev/null || { echo "nvidia-smi not found on this machine"; return 127; }
  nvidia-smi > "$OUT/environment/nvidia-smi.txt" 2>&1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/environment/nvidia-smi.csv" 2>&1
}

step_oom_another_process() {  # hold_memory.py keeps all but 8 GiB while a workload runs
  local dir=$OUT/oom holder rc
  python3 "$FIXTURES/hold_memory.py" --leave-gib 8 --seconds 100 > "$dir/holder.txt" 2>&1 &
  holder=$!
  for _ in $(seq 240); do
    grep -q holding "$dir/holder.txt" 2> /dev/null && break
    kill -0 "$holder" 2> /dev/null || break
    sleep 0.25
  done
  if ! grep -q holding "$dir/holder.txt" 2> /dev/null; then
    echo "the holder did not start: $(tail -n 2 "$dir/holder.txt" | tr '\n' ' ')"
    kill "$holder" 2> /dev/null
    return 1
  fi
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$dir/apps-while-holding.csv" 2>&1
  "$BIN" measure --batch 16 --context 4096 --width 4096 --dtype bfloat16 --output "$dir/oom-another-process.json"
  rc=$?
  kill "$holder" 2> /dev/null
  wait "$holder" 2> /dev/null
  return "$rc"
}

step_qlora() {  # QLoRA as people run it (issue 29); bitsandbytes from a carried wheel if the device lacks it
  local py=${ITERAGPU_PYTHON:-python3} site="" whl
  if ! "$py" -c "import bitsandbytes" > /dev/null 2>&1; then
    whl=$(ls "$ROOT"/.device-bin/bitsandbytes-*.whl 2> /dev/null | head -n 1)
    if [ -z "$whl" ]; then
      echo "bitsandbytes is not installed on the device and no wheel was carried (.device-bin/bitsandbytes-*.whl)"
      return 2
    fi
    site=$(mktemp -d)
    "$py" -m pip install -q --no-deps --no-index --target "$site" "$whl" || return 2
  fi
  PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} "$BIN" measure --output "$OUT/workloads/llama8l-qlora-nf4.json" \
    --workload causal-lm --model "$MODEL" --task train --quantize nf4 --double-quant --lora-rank 16 \
    --lora-targets all-linear --precision bf16-mixed --optimizer paged-adamw-8bit --gradient-checkpointing \
    --steps 2 --batch 4 --context 512
}

if [ "${1:-}" = --step ]; then
  step=${2:-}
  "step_${step//-/_}"
  exit $?
fi

# ------------------------------------------------------------------ the budget
START_S=$(date +%s)
BUDGET_S=${BUDGET_S:-480}
MARGIN_S=${MARGIN_S:-20}
DEADLINE=$((START_S + BUDGET_S))

REAL_BIN=${ITERAGPU_BIN:-.device-bin/iteragpu}
if [ ! -x "$REAL_BIN" ]; then
  echo "all.sh: $REAL_BIN is missing. Build it on the development machine and carry it:" >&2
  echo "  cargo build --release && mkdir -p .device-bin && cp target/release/iteragpu .device-bin/" >&2
  echo "  run(command=\"bash tools/gpu/all.sh\", carry=[\".device-bin\"], timeout_s=540)" >&2
  exit 2
fi
ITERAGPU_REAL_BIN=$(cd "$(dirname "$REAL_BIN")" && pwd)/$(basename "$REAL_BIN")
BIN=$ROOT/tools/gpu/device-iteragpu.sh
[ -x "$BIN" ] || chmod +x "$BIN"
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ITERAGPU_LEFT_FOR_CPU=$OUT/predictions-left-for-the-cpu.tsv
export OUT BIN ITERAGPU_REAL_BIN ITERAGPU_LEFT_FOR_CPU

DRY=0
if [ "${ITERAGPU_GPU_DRY:-0}" = 1 ]; then
  DRY=1
  # The test suite's fake torch: checks the plumbing of this script, reads nothing from a GPU.
  export ITERAGPU_PYTHON=${ITERAGPU_DRY_PYTHON:-python3}
  export PYTHONPATH=$ROOT/tests/fake_torch${PYTHONPATH:+:$PYTHONPATH}
  export ITERAGPU_GPU_DRY
  echo "DRY RUN: not GPU readings (the test suite's fake torch in tests/fake_torch)"
fi
echo "budget ${BUDGET_S}s (margin ${MARGIN_S}s), results under $OUT, binary $ITERAGPU_REAL_BIN"

CHECKS=$OUT/checks.tsv
: > "$CHECKS"
HAVE_SETSID=0
command -v setsid > /dev/null && HAVE_SETSID=1

record() {  # record GROUP NAME STATUS EXIT SECONDS NOTE COMMAND
  local note=${6//$'\t'/ } cmd=${7//$'\t'/ }
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "${note//$'\n'/ }" "${cmd//$'\n'/ }" >> "$CHECKS"
  printf '%-28s %-8s %4ss  %s\n' "$2" "$3" "$5" "${note//$'\n'/ }"
}

end_session() {  # whatever the check left behind in its session (an orphaned worker, a holder)
  local sid=$1
  command -v pkill > /dev/null || return 0
  if pgrep -s "$sid" > /dev/null 2>&1; then
    pkill -TERM -s "$sid" 2> /dev/null
    sleep 2
    pkill -KILL -s "$sid" 2> /dev/null
  fi
}

# run_check GROUP NAME MIN_S CAP_S EXPECTED_EXIT COMMAND…: runs COMMAND in its own session under
# `timeout` (at most CAP_S, never past the budget less the margin), output in $OUT/GROUP/NAME.txt;
# skipped when fewer than MIN_S seconds are left. EXPECTED_EXIT: an exit that counts as ok besides 0
# (3: an out-of-memory on purpose), `-` for none, `any` for a script of several commands (`done`).
run_check() {
  local group=$1 name=$2 min=$3 cap=$4 expect=$5
  shift 5
  local cmd now left limit start pid rc seconds status note
  cmd=$(printf '%q ' "$@")
  mkdir -p "$OUT/$group"
  now=$(date +%s)
  left=$((DEADLINE - MARGIN_S - now))
  if [ "$left" -lt "$min" ]; then
    record "$group" "$name" skipped "" 0 "needs ${min}s, ${left}s left of the budget" "$cmd"
    return 0
  fi
  limit=$((cap < left ? cap : left))
  start=$(date +%s)
  (
    export ITERAGPU_CHECK=$name
    if [ "$HAVE_SETSID" = 1 ]; then
      exec setsid timeout -k 5 "$limit" "$@"
    else
      exec timeout -k 5 "$limit" "$@"
    fi
  ) > "$OUT/$group/$name.txt" 2>&1 < /dev/null &
  pid=$!
  CURRENT=$pid
  wait "$pid"
  rc=$?
  CURRENT=""
  [ "$HAVE_SETSID" = 1 ] && end_session "$pid"
  seconds=$(($(date +%s) - start))
  note=""
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    status=timeout
    note="stopped after ${limit}s"
  elif [ "$expect" = any ]; then
    status="done"
    note="exit $rc (its last command's; each measurement's exit is in the log)"
  elif [ "$rc" = 0 ]; then
    status=ok
  elif [ "$rc" = "$expect" ]; then
    status=ok
    note="exit $rc, as expected"
  else
    status=failed
    note="exit $rc: $(grep -m1 -E '^ *(failure in|error|Error)|Traceback|not found' "$OUT/$group/$name.txt" \
      || grep -v '^ *$' "$OUT/$group/$name.txt" | tail -n 1)"
  fi
  record "$group" "$name" "$status" "$rc" "$seconds" "${note:0:160}" "$cmd"
}

measure() {  # measure GROUP NAME MIN_S CAP_S EXPECTED_EXIT ARGS…: one measurement, its table in NAME.txt
  run_check "${@:1:5}" "$BIN" measure --output "$OUT/$1/$2.json" "${@:6}"
}

measure_marked() {  # the same for a script that marks its phases only when ITERAGPU_MARK=1
  run_check "${@:1:5}" env ITERAGPU_MARK=1 "$BIN" measure --output "$OUT/$1/$2.json" "${@:6}"
}

finish() {
  local end elapsed
  end=$(date +%s)
  elapsed=$((end - START_S))
  python3 - "$CHECKS" "$OUT/summary.json" "$DRY" "$BUDGET_S" "$MARGIN_S" "$START_S" "$end" <<'PY' || echo "summary.json not written (python3 failed)"
import json, sys
checks, out, dry, budget, margin, start, end = sys.argv[1:]
rows = []
with open(checks, encoding="utf-8") as f:
    for line in f:
        group, name, status, rc, seconds, note, cmd = line.rstrip("\n").split("\t")
        rows.append({"group": group, "check": name, "status": status, "exit": int(rc) if rc else None,
                     "seconds": int(seconds), "note": note, "command": cmd.strip()})
doc = {
    "schema": "iteragpu-gpu.summary/1",
    "dry_run": dry == "1",
    "note": "DRY RUN: not GPU readings (the test suite's fake torch)" if dry == "1" else "readings of the lent GPU",
    "budget_s": int(budget), "margin_s": int(margin), "started_at_unix": int(start), "ended_at_unix": int(end),
    "elapsed_s": int(end) - int(start),
    "counts": {s: sum(r["status"] == s for r in rows) for s in ("ok", "done", "failed", "timeout", "skipped")},
    "checks": rows,
    "predict_afterwards": "bash tools/gpu/predict_returned.sh <this folder> (on the CPU, never on the device)",
}
with open(out, "w", encoding="utf-8") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
PY
  {
    echo
    [ "$DRY" = 1 ] && echo "DRY RUN: not GPU readings (the test suite's fake torch)"
    echo "elapsed ${elapsed}s of a ${BUDGET_S}s budget; results in $OUT (summary.json)"
    printf '%-28s %-8s %7s\n' check status seconds
    while IFS=$'\t' read -r _ name status _ seconds _ _; do
      printf '%-28s %-8s %7s\n' "$name" "$status" "$seconds"
    done < "$CHECKS"
  } | tee "$OUT/summary.txt"
}
CURRENT=""
stopped() {  # the device tool's own limit, or Ctrl-C: end the running check, still write the summary
  echo "all.sh: stopped by a signal"
  if [ -n "$CURRENT" ]; then
    kill -TERM -- "-$CURRENT" 2> /dev/null || kill -TERM "$CURRENT" 2> /dev/null
    [ "$HAVE_SETSID" = 1 ] && end_session "$CURRENT"
  fi
  finish
  exit 130
}
trap stopped INT TERM

# ------------------------------------------------------------------ 1. the machine
run_check environment environment 10 60 - bash "$SELF" --step environment
run_check environment nvidia-smi 5 30 - bash "$SELF" --step nvidia-smi

# ------------------------------------------------------------------ 2. each built-in workload once
measure workloads dense-guide 20 90 - --batch 2 --context 128 --width 1024 --dtype float32 --warmup 3 --repeats 5
measure workloads dense-bf16 20 90 - --batch 8 --context 2048 --width 4096 --dtype bfloat16
measure workloads llama8l-generate-dynamic 30 150 - --workload causal-lm --model "$MODEL" --dtype bfloat16 \
  --batch 4 --prompt-tokens 1024 --new-tokens 128 --cache dynamic
measure workloads llama8l-train-bf16-mixed 30 150 - --workload causal-lm --model "$MODEL" --task train \
  --precision bf16-mixed --steps 2 --batch 4 --context 512 --timeline
run_check workloads llama8l-qlora-nf4 40 150 - bash "$SELF" --step qlora
measure workloads vit-base-infer-bf16 20 90 - --workload vision --model "$VIT" --dtype bfloat16 --images 64
measure workloads vit-base-train-bf16-mixed 30 120 - --workload vision --model "$VIT" --task train \
  --precision bf16-mixed --steps 2 --images 32 --resolution 384
measure workloads llama8l-requests-4 30 120 - --workload causal-lm --model "$MODEL" --dtype bfloat16 \
  --requests 4 --prompt-lengths 128,512,1024,2048 --output-lengths 64
measure workloads qwen2vl-2b-2images 30 150 - --workload vlm --model "$QWEN2VL" --dtype bfloat16 \
  --resolution 448 --images-per-request 2 --batch 2 --prompt-tokens 64 --new-tokens 32
measure workloads llama32v-11b-2images 40 150 - --workload vlm --model "$MLLAMA" --dtype bfloat16 \
  --resolution 480x1000 --images-per-request 2 --prompt-tokens 32 --new-tokens 16

# ------------------------------------------------------------------ 3. user scripts
measure scripts script-h200-sequential 20 90 - --script "$FIXTURES/h200_sequential.py" -- \
  --batch 8 --context 2048 --width 4096 --dtype bfloat16
measure scripts script-train-loop 20 90 - --script "$FIXTURES/train_loop.py" -- --batch 64 --width 2048
measure_marked scripts script-generate-llama 30 150 - --script "$SCRIPTS/generate_llama.py" -- --config "$MODEL"
measure_marked scripts script-train-llama 30 150 - --script "$SCRIPTS/train_llama.py" -- --config "$MODEL"
measure_marked scripts script-ema-dataloader 20 120 - --script "$SCRIPTS/ema_dataloader.py"

# ------------------------------------------------------------------ 4. out-of-memory classes (exit 3 expected)
measure oom oom-capacity 15 90 3 --batch 4096 --context 4096 --width 4096 --dtype bfloat16
measure oom oom-fragmentation 15 60 3 --script "$FIXTURES/fragment.py"
run_check oom fragment-ab 30 120 3 "$BIN" sweep --vary alloc_conf=default,expandable_segments \
  --script "$FIXTURES/fragment.py" --output "$OUT/oom/fragment-ab.json"
run_check oom oom-another-process 40 150 3 bash "$SELF" --step oom-another-process

# ------------------------------------------------------------------ 5. the older issue checks, while time remains
for issue in 13 3 12 11 4 5; do
  run_check issues "issue$issue" 30 200 any env OUT="$OUT/issue$issue" bash "tools/gpu/issue$issue.sh"
done

finish

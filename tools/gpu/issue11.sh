#!/usr/bin/env bash
# Predictions against measurements on the lent GPU (issue 11): every case below is measured, and
# `measure` stores next to it the prediction of the same workload for the measured card (the same
# code on fake CUDA tensors, on the CPU, every GPU hidden from it). 22 cases: dense at 3 dtypes;
# causal-lm generation with 3 caches at 2 sizes; training fp32 / bf16-mixed / bf16 with AdamW and
# SGD, LoRA, checkpointing; two user scripts. Copy $OUT into docs/measurements/<date>-issue11/,
# commit, and run `cargo bench --bench accuracy` for median / worst error and the share predicted at
# or above. Without a C++ compiler on that machine, build the shims here against the same torch and
# carry them: ITERAGPU_SHIMS=.device-bin/shims (see python/iteragpu/predict/native.py).
set -u
BIN=${BIN:-.device-bin/iteragpu}
OUT=${OUT:-$(mktemp -d)}
MODEL=tests/fixtures/models/llama-style-8l
SCRIPTS=tests/fixtures/scripts
mkdir -p "$OUT"
command -v c++ > "$OUT/compiler.txt" 2>&1 || echo "no c++ on this machine" > "$OUT/compiler.txt"
n=0
run() {  # run NAME ARGS…: one measurement (with its prediction), its table kept beside the result
  name=$1; shift
  n=$((n + 1))
  timeout 120 "$BIN" measure "$@" --output "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
  echo "$n $name: exit $?"
}
for dtype in float32 bfloat16 float16; do
  run "dense-$dtype" --batch 8 --context 1024 --width 2048 --dtype $dtype --warmup 1 --repeats 2
done
for cache in dynamic static sliding; do
  for size in "--batch 1 --prompt-tokens 512 --new-tokens 32" "--batch 4 --prompt-tokens 2048 --new-tokens 64"; do
    tag=$(echo "$size" | awk '{print $2 "x" $4}')
    window=""; [ $cache = sliding ] && window="--window 256"
    run "gen-$cache-$tag" --workload causal-lm --model $MODEL --dtype bfloat16 $size --cache $cache $window
  done
done
for precision in fp32 bf16-mixed bf16; do
  for optimizer in adamw sgd; do
    run "train-$precision-$optimizer" --workload causal-lm --model $MODEL --task train --precision $precision \
      --optimizer $optimizer --batch 2 --context 512
  done
done
run train-lora --workload causal-lm --model $MODEL --task train --precision bf16-mixed --batch 2 --context 512 \
  --lora-rank 16 --lora-targets q_proj,v_proj
run train-checkpointing --workload causal-lm --model $MODEL --task train --precision bf16-mixed --batch 2 \
  --context 512 --gradient-checkpointing
run dense-train-checkpointing --task train --batch 8 --context 512 --width 2048 --gradient-checkpointing
run script-h200-sequential --script $SCRIPTS/h200_sequential.py -- --batch 8 --context 2048 --width 4096 --dtype bfloat16
run script-train-loop --script $SCRIPTS/train_loop.py -- --batch 64 --width 2048
echo "$n cases"
grep -h -A40 "predicted vs observed" "$OUT"/*.txt | head -150
grep -h "no prediction" "$OUT"/*.txt | sort | uniq -c

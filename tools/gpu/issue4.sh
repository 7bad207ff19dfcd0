#!/usr/bin/env bash
# GPU checks for the real workloads (issue 4), in one call on the lent GPU machine:
#   run(command="bash tools/gpu/issue4.sh", carry=[".device-bin"])
# Writes results under $OUT; copy them to docs/measurements/ and commit, then run
# `cargo bench --bench accuracy` here to score the estimate against them.
set -u
BIN=${BIN:-.device-bin/iteragpu}
OUT=${OUT:-$(mktemp -d)}
MODEL=tests/fixtures/models/llama-style-8l
mkdir -p "$OUT"
for cache in dynamic static; do
  "$BIN" measure --workload causal-lm --model $MODEL --dtype bfloat16 --batch 4 --prompt-tokens 1024 \
    --new-tokens 128 --cache $cache --output "$OUT/llama8l-generate-$cache.json" > "$OUT/llama8l-generate-$cache.txt" 2>&1
  echo "generate $cache: exit $?"
done
"$BIN" measure --workload causal-lm --model $MODEL --task train --steps 2 --precision bf16-mixed --batch 4 \
  --context 512 --output "$OUT/llama8l-train.json" > "$OUT/llama8l-train.txt" 2>&1; echo "train: exit $?"
"$BIN" measure --workload causal-lm --model $MODEL --task train --steps 2 --precision bf16-mixed --batch 4 \
  --context 512 --lora-rank 16 --lora-targets q_proj,v_proj --output "$OUT/llama8l-lora.json" > "$OUT/llama8l-lora.txt" 2>&1; echo "lora: exit $?"
"$BIN" measure --task train --steps 3 --batch 8 --context 512 --width 2048 --output "$OUT/dense-train.json" > "$OUT/dense-train.txt" 2>&1; echo "dense train: exit $?"
"$BIN" measure --batch 8 --context 2048 --width 4096 --dtype bfloat16 --output "$OUT/dense-infer.json" > "$OUT/dense-infer.txt" 2>&1; echo "dense infer: exit $?"
"$BIN" measure --batch 8 --context 2048 --width 4096 --dtype bfloat16 --whole-loop --output "$OUT/dense-whole-loop.json" > /dev/null 2>&1; echo "whole loop: exit $?"
grep -h -A30 "estimated vs observed" "$OUT"/*.txt | head -120
grep -h "KV cache after" "$OUT"/*.txt

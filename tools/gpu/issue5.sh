#!/usr/bin/env bash
# GPU check for the sweep (issue 5), in one call on the lent GPU machine:
#   run(command="bash tools/gpu/issue5.sh", carry=[".device-bin"])
# A frontier search on the dense network with an emulated 8 GiB card; results under $OUT.
set -u
BIN=${BIN:-.device-bin/iteragpu}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
"$BIN" sweep --vary context=1024..262144 --search frontier --frontier-step 256 --batch 2 --width 1024 \
  --memory-limit 8GiB --output "$OUT/dense-frontier-8gib.json" | tee "$OUT/dense-frontier-8gib.txt"
echo "frontier: exit ${PIPESTATUS[0]}"
"$BIN" sweep --vary batch=1,2,4,8,16 --context 2048 --width 4096 --dtype bfloat16 \
  --output "$OUT/dense-batch-list.json" | tee "$OUT/dense-batch-list.txt" | head -12

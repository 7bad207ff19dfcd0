#!/usr/bin/env bash
# GPU checks for `environment` and `measure`, run on the lent GPU machine in one call:
#   run(command="bash tools/gpu/issue3.sh", carry=[".device-bin"])
# after `cargo build --release && mkdir -p .device-bin && cp target/release/iteragpu .device-bin/`.
# Writes every result under $OUT (copy them to docs/measurements/ and commit).
set -u
BIN=${BIN:-.device-bin/iteragpu}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
"$BIN" environment > "$OUT/environment.txt"
"$BIN" environment --json > "$OUT/environment.json"
# The guide's command, as written.
"$BIN" measure --device cuda:0 --batch 2 --context 128 --width 1024 --dtype float32 --warmup 3 --repeats 5 \
  --output "$OUT/guide-native.json" > "$OUT/guide-native.txt" 2>&1
echo "guide: exit $?"
# A larger case with each allocator backend.
for backend in native cudaMallocAsync expandable_segments; do
  case $backend in
    native) conf="" ;;
    cudaMallocAsync) conf="backend:cudaMallocAsync" ;;
    expandable_segments) conf="expandable_segments:True" ;;
  esac
  PYTORCH_CUDA_ALLOC_CONF=$conf "$BIN" measure --batch 8 --context 2048 --width 4096 --dtype bfloat16 \
    --output "$OUT/large-$backend.json" > "$OUT/large-$backend.txt" 2>&1
  echo "large $backend: exit $?"
done
# No PyTorch: exit 2, no file.
"$BIN" measure --python /usr/bin/false --output "$OUT/none.json"; echo "not a python: exit $? (want 2, no file)"
python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print(f"{'file':<28}{'phase':<14}{'peak alloc':>15}{'peak resv':>15}{'proc peak (NVML)':>18}{'outside alloc':>15}")
for f in sorted(out.glob("*.json")):
    if f.name.startswith("environment"):
        continue
    doc = json.loads(f.read_text())
    for p in doc["phases"]:
        if p["name"] not in ("model_load", "cold_forward"):
            continue
        d, drv = p["devices"][0], (p.get("driver") or [{}])[0]
        print(f"{f.name:<28}{p['name']:<14}{d['peak_allocated_bytes']:>15}{d['peak_reserved_bytes']:>15}"
              f"{str(drv.get('peak_process_used_bytes')):>18}{str(drv.get('outside_allocator_at_end_bytes')):>15}")
PY

#!/usr/bin/env bash
# Regenerates the example fiches under docs/examples/ so that readers see the output without
# running anything: a dense result, a 5-value batch sweep and an estimate, made with the test
# suite's FAKE torch (tests/fake_torch) — the fiches say so in their verdict and environment; no
# figure in them is a GPU measurement. Run from the repository root after `cargo build --release`.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/iteragpu}
OUT=docs/examples
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export PYTHONPATH="$PWD/tests/fake_torch"
unset ITERAGPU_PYTHON FAKE_TORCH_CAPACITY
"$BIN" measure --batch 2 --context 128 --width 512 --output "$WORK/result.json" > /dev/null
"$BIN" sweep --vary batch=1,2,4,8,16 --context 128 --width 512 --output "$WORK/series.json" > /dev/null
"$BIN" estimate --parameters 8402944 --bits 32 --reserve-gib 1 --json > "$WORK/estimate.json"
rm -f "$OUT"/fiche.*
BIN=$(realpath "$BIN")
DEST=$(realpath "$OUT")
for lang in en fr; do
  suffix=$([ "$lang" = en ] && echo "" || echo ".$lang")
  for ext in html md; do
    # From the work folder: the fiche names its attached files without a temporary path.
    (cd "$WORK" && "$BIN" report result.json series.json --estimate estimate.json \
      --lang "$lang" --output "$DEST/fiche$suffix.$ext" > /dev/null)
  done
done
ls -l "$OUT"

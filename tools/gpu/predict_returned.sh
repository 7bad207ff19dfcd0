#!/usr/bin/env bash
# Predicts here, on the CPU, every measurement that tools/gpu/all.sh brought back from the lent GPU,
# and sets each prediction beside its reading:
#   bash tools/gpu/predict_returned.sh docs/measurements/<date> [CARD]
# For each NAME.cmd.json (the command line of a measurement, written on the device by
# tools/gpu/device-iteragpu.sh) whose NAME.json came back, runs `iteragpu predict` with the same
# workload and arguments and the same environment variables that change the run, for CARD (default
# H200), into NAME.prediction.json (its table in NAME.prediction.txt). A script measured with its
# markers (ITERAGPU_MARK=1) is also predicted without them: NAME.prediction-unmarked.json (what a
# user who marks nothing gets). A prediction already there is kept (delete it to predict again).
# Last, the table measured vs predicted per phase: peak allocated / reserved and the error
# (observed − predicted) ÷ observed, plus a "(whole run)" row (the highest peak of all phases);
# written to predictions-vs-measured.txt and .json in the folder. Each prediction is made `--like`
# its measurement: the versions of torch, transformers, peft and CUDA there and here are compared
# (a warning per difference in NAME.prediction.txt; see the table's "versions differ" lines).
#
# Environment: ITERAGPU_PYTHON, an interpreter with torch, transformers and peft (the device had
#   torch 2.11 and transformers 5.17: predictions are only as exact as the versions they ran with;
#   each result's versions are compared with the prediction's); ITERAGPU_BIN (default
#   target/release/iteragpu, else target/debug/iteragpu, else iteragpu on PATH); PREDICT_TIMEOUT_S
#   (default 900 per prediction).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
  echo "usage: bash tools/gpu/predict_returned.sh RETURNED_DIR [CARD]  (the folder all.sh wrote under \$OUT)" >&2
  exit 1
fi
DIR=$(cd "$1" && pwd)
CARD=${2:-H200}
cd "$ROOT" || exit 1
if [ ! -w "$DIR" ]; then
  echo "$DIR is read-only: copy it first (cp -r $DIR docs/measurements/<date>) and predict there" >&2
  exit 1
fi
BIN=${ITERAGPU_BIN:-}
if [ -z "$BIN" ]; then
  for candidate in target/release/iteragpu target/debug/iteragpu "$(command -v iteragpu)"; do
    [ -n "$candidate" ] && [ -x "$candidate" ] && BIN=$candidate && break
  done
fi
[ -n "$BIN" ] || { echo "no iteragpu binary: cargo build --release (or set ITERAGPU_BIN)" >&2; exit 1; }
TIMEOUT_S=${PREDICT_TIMEOUT_S:-900}

# The JSON side, in one place: `args SIDECAR` (predict's arguments, NUL-separated), `env SIDECAR`
# (the variables to set, NUL-separated), `table DIR CARD` (the comparison).
read -r -d '' HELPER <<'PY'
import glob, json, os, sys

# measure's options that predict refuses or that mean something else there (value-taking ones: True)
DROP = {"--output": True, "--python": True, "--timeout": True, "--device": True, "--timeline-entries": True,
        "--nnodes": True, "--node-rank": True, "--rdzv-endpoint": True, "--rdzv-id": True,
        "--no-prediction": False, "--json": False, "--timeline": False, "--no-history": False}
# the variables of a sidecar that change what runs (never the dry run's interpreter or fake torch)
ENV = ("ITERAGPU_MARK", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def predict_args(side):
    argv = load(side)["argv"]
    args = argv[argv.index("measure") + 1:]
    tail = []
    if "--" in args:
        i = args.index("--")
        args, tail = args[:i], args[i:]
    out, shard, nproc, i = [], any(a == "--shard" or a.startswith("--shard=") for a in args), None, 0
    while i < len(args):
        a = args[i]
        name = a.split("=", 1)[0]
        takes = "=" not in a
        if name == "--nproc-per-node":
            nproc = args[i + 1] if takes else a.split("=", 1)[1]
            i += 2 if takes else 1
            continue
        if name in DROP:
            i += 2 if (DROP[name] and takes) else 1
            continue
        out.append(a)
        i += 1
    if nproc is not None and shard:
        out += ["--world-size", nproc]  # the torchrun job's size; a plain torchrun run is one process
    return out + tail


def env(side):
    e = load(side).get("env", {})
    return [f"{k}={e[k]}" for k in ENV if k in e]


def top(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def mib(n):
    return "—" if n is None else f"{n / 2**20:,.1f}"


def err(obs, pred):
    if obs in (None, 0) or pred is None:
        return None
    return (obs - pred) / obs * 100


def pct(e):
    return "—" if e is None else f"{e:+.2f}%"


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def last_line(path):
    try:
        with open(path, errors="replace") as f:
            lines = [l.strip() for l in f if l.strip()]
    except OSError:
        return "no output"
    return (lines[-1] if lines else "no output")[:140]


def versions(doc, pred):
    m = doc.get("environment", {}).get("python", {})
    a = pred.get("assumptions", {})
    measured = ((m.get("torch") or {}).get("version"), m.get("transformers_version"))
    predicted = (a.get("torch_version"), a.get("transformers_version"))
    if measured == predicted:
        return None
    return (f"versions differ: measured with torch {measured[0]} / transformers {measured[1]}, "
            f"predicted with torch {predicted[0]} / transformers {predicted[1]}")


def table(folder, card):
    lines, rows = [], []
    sides = sorted(glob.glob(os.path.join(folder, "**", "*.cmd.json"), recursive=True))
    dry = any((load(s) or {}).get("dry_run") for s in sides)
    if dry:
        lines.append("DRY RUN results: fake-torch readings, not GPU readings; the errors below mean nothing")
    lines.append(f"measured (lent GPU) vs predicted here for {card}; MiB; error = (observed − predicted) ÷ observed")
    head = (f"  {'variant':<9} {'phase':<26} {'meas alloc':>11} {'meas resv':>11} {'pred alloc':>11} "
            f"{'pred resv':>11} {'err alloc':>10} {'err resv':>10}")

    def row(rel, variant, label, ma, mr, pa, pr, extra=""):
        rows.append({"result": rel, "variant": variant, "phase": label,
                     "measured_peak_allocated": ma, "measured_peak_reserved": mr,
                     "predicted_peak_allocated": pa, "predicted_peak_reserved": pr,
                     "error_allocated_pct": err(ma, pa), "error_reserved_pct": err(mr, pr)})
        lines.append(f"  {variant:<9} {label[:26]:<26} {mib(ma):>11} {mib(mr):>11} {mib(pa):>11} {mib(pr):>11}"
                     f" {pct(err(ma, pa)):>10} {pct(err(mr, pr)):>10}{extra}")

    for side in sides:
        base = side[: -len(".cmd.json")]
        rel = os.path.relpath(base, folder)
        doc = load(base + ".json")
        if doc is None:
            lines.append(f"\n{rel}: no result came back (the measurement wrote none)")
            continue
        # (name, peak allocated, peak reserved, status) of each measured phase, on its first device
        measured = [(p["name"], ((p.get("devices") or [{}])[0]).get("peak_allocated_bytes"),
                     ((p.get("devices") or [{}])[0]).get("peak_reserved_bytes"), p.get("status"))
                    for p in doc.get("phases", [])]
        mark = (load(side) or {}).get("env", {}).get("ITERAGPU_MARK") == "1"
        lines.append(f"\n{rel}: measured {doc.get('status')}" + (" (markers: ITERAGPU_MARK=1)" if mark else ""))
        lines.append(head)
        variants = [("marked" if mark else "as run", base + ".prediction.json")]
        if mark:
            variants.append(("unmarked", base + ".prediction-unmarked.json"))
        said_versions = False
        for variant, path in variants:
            pred = load(path)
            if pred is None:
                lines.append(f"  {variant:<9} no prediction: {last_line(path[: -len('.json')] + '.txt')}")
                continue
            if not said_versions and versions(doc, pred):
                lines.append(f"  {versions(doc, pred)}")
                said_versions = True
            # the k-th measured phase of a name against the k-th predicted phase of that name
            # (the workload's own or the script's markers; automatic phases have other names)
            own = [p for p in pred.get("phases", []) if not p.get("automatic")]
            seen = {}
            for name, ma, mr, status in measured:
                k = seen.get(name, 0)
                seen[name] = k + 1
                same = [p for p in own if p["name"] == name]
                p = same[k] if k < len(same) else None
                if p is None and variant == "unmarked":
                    continue
                label = name + (f" [{k + 1}]" if k else "") + ("" if status in (None, "ok") else f" ({status})")
                row(rel, variant, label, ma, mr, p and p.get("peak_allocated_bytes"), p and p.get("peak_reserved_bytes"))
            if doc.get("status") != "ok":
                lines.append(f"  {variant:<9} (whole run): none, the measured run did not complete")
                continue
            predicted = pred.get("phases", [])
            row(rel, variant, "(whole run)", top(m[1] for m in measured), top(m[2] for m in measured),
                top(p.get("peak_allocated_bytes") for p in predicted), top(p.get("peak_reserved_bytes") for p in predicted),
                f"  prediction {pred.get('status')}")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(folder, "predictions-vs-measured.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(folder, "predictions-vs-measured.json"), "w", encoding="utf-8") as f:
        json.dump({"schema": "iteragpu-gpu.predicted-vs-measured/1", "card": card, "dry_run": dry, "rows": rows}, f, indent=1)
        f.write("\n")
    sys.stdout.write(text)


cmd = sys.argv[1]
if cmd == "args":
    sys.stdout.write("".join(a + "\0" for a in predict_args(sys.argv[2])))
elif cmd == "env":
    sys.stdout.write("".join(a + "\0" for a in env(sys.argv[2])))
elif cmd == "table":
    table(sys.argv[2], sys.argv[3])
PY

predict_one() {  # predict_one RESULT OUTPUT ENV… -- ARGS…
  local result=$1 output=$2 rc
  shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  if [ -f "$output" ]; then
    echo "  kept ${output#"$DIR"/}"
    return
  fi
  env -u ITERAGPU_MARK "${envs[@]}" timeout -k 10 "$TIMEOUT_S" "$BIN" predict --card "$CARD" --like "$result" --output "$output" "$@" \
    > "${output%.json}.txt" 2>&1
  rc=$?
  echo "  predicted ${output#"$DIR"/}: exit $rc"
}

echo "predicting with $BIN for $CARD (interpreter: ${ITERAGPU_PYTHON:-the one iteragpu picks})"
found=0
while IFS= read -r -d '' side; do
  found=$((found + 1))
  base=${side%.cmd.json}
  echo "${base#"$DIR"/}"
  if [ ! -f "$base.json" ]; then
    echo "  no result came back: nothing to predict"
    continue
  fi
  mapfile -d '' args < <(python3 -c "$HELPER" args "$side")
  mapfile -d '' envs < <(python3 -c "$HELPER" env "$side")
  predict_one "$base.json" "$base.prediction.json" "${envs[@]}" -- "${args[@]}"
  if printf '%s\n' "${envs[@]}" | grep -qx 'ITERAGPU_MARK=1'; then
    unmarked=()
    for e in "${envs[@]}"; do [ "$e" = ITERAGPU_MARK=1 ] || unmarked+=("$e"); done
    predict_one "$base.json" "$base.prediction-unmarked.json" "${unmarked[@]}" -- "${args[@]}"
  fi
done < <(find "$DIR" -name '*.cmd.json' -print0 | sort -z)
if [ "$found" = 0 ]; then
  echo "no NAME.cmd.json under $DIR: was it written by tools/gpu/all.sh?" >&2
  exit 1
fi
echo
python3 -c "$HELPER" table "$DIR" "$CARD"

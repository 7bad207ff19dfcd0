#!/usr/bin/env bash
# The `$BIN` that tools/gpu/all.sh gives every check on the lent GPU (the older issue scripts
# included): the carried binary ($ITERAGPU_REAL_BIN), with two rules of the device run kept in one
# place:
#   * no prediction is computed on the device: `measure` and `sweep` get --no-prediction, and a
#     `predict` is not run (its command line is appended to $ITERAGPU_LEFT_FOR_CPU, if set);
#   * every `measure` leaves, next to its result NAME.json, NAME.cmd.json: the exact command line,
#     the environment variables that change the run, the check that ran it, so that
#     tools/gpu/predict_returned.sh predicts the same workload here afterwards.
# Any other command (environment, explain, report, …) runs as it is.
set -u
real=${ITERAGPU_REAL_BIN:?ITERAGPU_REAL_BIN: the iteragpu binary to run}
sub=${1:-}
case $sub in
  measure | sweep)
    shift
    # --no-prediction: for every measure; for a sweep only where it would predict (a frontier
    # search's hint: elsewhere the option is refused)
    given=0
    frontier=0
    output=""
    prev=""
    for arg in "$@"; do
      [ "$arg" = "--" ] && break
      [ "$arg" = "--no-prediction" ] && given=1
      [ "$prev" = "--output" ] && output=$arg
      [ "$prev" = "--search" ] && [ "$arg" = frontier ] && frontier=1
      case $arg in --output=*) output=${arg#--output=} ;; --search=frontier) frontier=1 ;; esac
      prev=$arg
    done
    extra=()
    if [ "$given" = 0 ] && { [ "$sub" = measure ] || [ "$frontier" = 1 ]; }; then
      extra=(--no-prediction)
    fi
    if [ "$sub" = measure ] && [ -n "$output" ]; then
      python3 - "${output%.json}.cmd.json" "$output" "$real" "$sub" "${extra[@]}" "$@" <<'PY' ||
import json, os, sys, time
sidecar, output, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
keep = ("ITERAGPU_MARK", "ITERAGPU_PYTHON", "PYTHONPATH", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
        "CUDA_VISIBLE_DEVICES", "ITERAGPU_GPU_DRY")
doc = {
    "schema": "iteragpu-gpu.command/1",
    "check": os.environ.get("ITERAGPU_CHECK"),
    "result": os.path.basename(output),
    "argv": argv,
    "cwd": os.getcwd(),
    "env": {k: os.environ[k] for k in keep if k in os.environ},
    "dry_run": os.environ.get("ITERAGPU_GPU_DRY") == "1",
    "started_at_unix": time.time(),
}
with open(sidecar, "w", encoding="utf-8") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
PY
        echo "device-iteragpu: could not write ${output%.json}.cmd.json (the command is still run)" >&2
    fi
    exec "$real" "$sub" "${extra[@]}" "$@"
    ;;
  predict)
    echo "device-iteragpu: \`iteragpu $*\` is not run on the device; predictions are computed afterwards on a CPU (tools/gpu/predict_returned.sh)" >&2
    if [ -n "${ITERAGPU_LEFT_FOR_CPU:-}" ]; then
      printf '%s\t%s\n' "${ITERAGPU_CHECK:-?}" "$*" >> "$ITERAGPU_LEFT_FOR_CPU"
    fi
    exit 0
    ;;
  *)
    exec "$real" "$@"
    ;;
esac

#!/usr/bin/env bash
# Every GPU check in one call (device time is scarce: one start, one run). On this machine:
#   cargo build --release && mkdir -p .device-bin && cp target/release/iteragpu .device-bin/
# then with the device tool:
#   run(command="bash tools/gpu/all.sh", carry=[".device-bin"], timeout_s=540)
# Results come back under $OUT/issue12, issue13, issue11, issue3, issue4, issue5 (the newest first, in case
# the budget runs out): copy them into
# docs/measurements/<date>/, commit them, and run `cargo bench --bench accuracy` to score the
# predictions stored in them. The whole run must fit the device budget (15 minutes a session):
# issue11.sh alone runs 22 measurements, each followed by its prediction on the CPU.
set -u
export OUT=${OUT:-$(mktemp -d)}
root=$OUT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$root/nvidia-smi.csv" 2>&1
for issue in 12 13 11 3 4 5; do
  mkdir -p "$root/issue$issue"
  OUT="$root/issue$issue" timeout 300 bash "tools/gpu/issue$issue.sh" > "$root/issue$issue/log.txt" 2>&1
  echo "issue $issue checks: exit $? (log in issue$issue/log.txt)"
done
tail -n 25 "$root"/issue*/log.txt

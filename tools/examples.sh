#!/usr/bin/env bash
# The README's examples check: every ```sh block of README.md runs as written, in order, as a
# newcomer runs them, from a fresh temporary folder that holds the repository's files (git's
# tracked and untracked-but-not-ignored files of this working tree: what a fresh clone has, plus
# the edits not yet committed; no build output, no file a previous block of another run left).
#
# A block preceded by the line `<!-- examples: skip (REASON) -->` is not run (a GPU, an install,
# the test suite itself): the script prints it with its REASON, never silently. Every other block
# runs with `bash -e -o pipefail` (a failing command fails its block) and a time limit; the script
# exits 1 if any block failed, naming it with its README line and the end of its output, and prints
# the total time.
#
# Environment:
#   ITERAGPU_BIN     the iteragpu binary put first on the PATH as `iteragpu`
#                    (default: target/debug/iteragpu, which `cargo build` and `cargo test` build)
#   ITERAGPU_PYTHON  the Python with torch and transformers that the commands run their workers
#                    with (default: $ITERAGPU_TEST_PYTHON, which .ci/run exports: its cached venv
#                    ~/.cache/iteragpu-ci/venv); required
#   EXAMPLES_KEEP=1  keep the work folder and the blocks' logs (printed at the end)
#   EXAMPLES_BLOCK_TIMEOUT  seconds allowed to one block (default 900)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
start=$(date +%s)

bin=${ITERAGPU_BIN:-target/debug/iteragpu}
if [ ! -x "$bin" ]; then
  echo "error: $bin is not an executable: build it first (cargo build --bin iteragpu) or set ITERAGPU_BIN" >&2
  exit 1
fi
bin=$(realpath "$bin")
python=${ITERAGPU_PYTHON:-${ITERAGPU_TEST_PYTHON:-}}
if [ -z "$python" ]; then
  echo "error: set ITERAGPU_PYTHON (or ITERAGPU_TEST_PYTHON) to a Python with torch and transformers: the README's predict blocks need them" >&2
  exit 1
fi
if ! "$python" -c "import torch, transformers" >/dev/null 2>&1; then
  echo "error: $python cannot import torch and transformers, which the README's predict blocks need" >&2
  exit 1
fi
python=$(command -v "$python")

tmp=$(mktemp -d "${TMPDIR:-/tmp}/iteragpu-examples-XXXXXX")
work="$tmp/repo"
blocks="$tmp/blocks"
mkdir -p "$work" "$blocks" "$tmp/bin"
if [ "${EXAMPLES_KEEP:-}" != 1 ]; then trap 'rm -rf "$tmp"' EXIT; fi
ln -s "$bin" "$tmp/bin/iteragpu"

# The fresh folder: the working tree's files as git sees them (tracked, or untracked and not
# ignored), copied, nothing else.
git ls-files -z --cached --others --exclude-standard \
  | python3 -c '
import os, shutil, sys
dest = sys.argv[1]
for path in sys.stdin.buffer.read().split(b"\0"):
    path = path.decode()
    if not path or not os.path.lexists(path):
        continue  # deleted in the working tree, not yet committed
    target = os.path.join(dest, path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.islink(path):
        os.symlink(os.readlink(path), target)
    elif os.path.isfile(path):
        shutil.copy2(path, target)
' "$work"

# The blocks: one file each (NN.sh), with its README line and, for a skipped one, the reason.
python3 - README.md "$blocks" <<'PY'
import re, sys
readme, out = sys.argv[1], sys.argv[2]
lines = open(readme, encoding="utf-8").read().split("\n")
skip = re.compile(r"^<!-- examples: skip \((.+)\) -->$")
n, i, pending = 0, 0, None
while i < len(lines):
    line = lines[i]
    m = skip.match(line.strip())
    if m:
        pending = (m.group(1), i + 1)
    elif line.strip() == "```sh":
        body, j = [], i + 1
        while j < len(lines) and lines[j].strip() != "```":
            body.append(lines[j])
            j += 1
        if j == len(lines):
            sys.exit(f"README.md:{i + 1}: a ```sh block that never closes")
        n += 1
        reason = pending[0] if pending and pending[1] == i else ""
        with open(f"{out}/{n:02}.sh", "w", encoding="utf-8") as f:
            f.write("\n".join(body) + "\n")
        with open(f"{out}/{n:02}.meta", "w", encoding="utf-8") as f:
            f.write(f"{i + 1}\n{reason}\n")
        pending, i = None, j
    elif line.strip():
        pending = None  # the marker must be the line just above the block
    i += 1
if n == 0:
    sys.exit("README.md has no ```sh block: nothing to check")
PY

export PATH="$tmp/bin:$PATH"
export ITERAGPU_PYTHON="$python"
unset ITERAGPU_BIN PYTHONPATH
echo "README examples: $(ls "$blocks"/*.sh | wc -l) blocks, in $work"
echo "  iteragpu = $bin"
echo "  ITERAGPU_PYTHON = $python"
failed=()
ran=0
skipped=0
for block in "$blocks"/*.sh; do
  id=$(basename "$block" .sh)
  line=$(sed -n 1p "${block%.sh}.meta")
  reason=$(sed -n 2p "${block%.sh}.meta")
  first=$(grep -v '^\s*$' "$block" | head -1)
  if [ -n "$reason" ]; then
    echo "block $id (README.md:$line) SKIPPED: $reason — $first"
    skipped=$((skipped + 1))
    continue
  fi
  t0=$(date +%s)
  if (cd "$work" && timeout "${EXAMPLES_BLOCK_TIMEOUT:-900}" bash -e -o pipefail "$block") >"$tmp/$id.log" 2>&1; then
    echo "block $id (README.md:$line) ok in $(($(date +%s) - t0)) s — $first"
  else
    status=$?
    echo "block $id (README.md:$line) FAILED (exit $status) in $(($(date +%s) - t0)) s — $first"
    echo "  its last lines:"
    tail -n 25 "$tmp/$id.log" | sed 's/^/    /'
    failed+=("$id (README.md:$line)")
  fi
  ran=$((ran + 1))
done
echo "README examples: $ran run, $skipped skipped (reasons above), ${#failed[@]} failed, in $(($(date +%s) - start)) s"
if [ "${EXAMPLES_KEEP:-}" = 1 ]; then echo "kept: $tmp (the work folder and each block's log)"; fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "error: README blocks failed: ${failed[*]}" >&2
  exit 1
fi

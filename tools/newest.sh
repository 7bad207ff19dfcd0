#!/usr/bin/env bash
# Which pins of docs/tested-versions.md are behind the registry's newest release (PyPI, through
# pip's own index client), and with --write, moves each *newest tested* up to it. Run it before
# starting any piece of work; after --write, run the tests (.ci/run) and fix what breaks, or hold a
# pin back and say why in the table's last column (a held pin is listed again each time).
#   tools/newest.sh            list: library, pinned, newest on PyPI, behind or current
#   tools/newest.sh --write    also rewrite the table's newest column and its date line
# Exit 0 when every pin is current, 1 when some are behind (after --write too: test them), 2 when
# the registry could not be asked.
set -euo pipefail
cd "$(dirname "$0")/.."
write=0
case "${1:-}" in
  --write) write=1 ;;
  "") ;;
  *) echo "usage: tools/newest.sh [--write]" >&2; exit 2 ;;
esac
python=${PYTHON:-python3}
behind=0
declare -A latest
while IFS=$'\t' read -r lib oldest newest _; do
  line=$("$python" -m pip index versions "$lib" 2>/dev/null | head -1) || true
  # "torch (2.15.0)"
  registry=$(sed -n 's/^[^ ]* (\([^)]*\)).*/\1/p' <<<"$line")
  if [ -z "$registry" ]; then
    echo "error: PyPI did not answer for $lib (pip index versions $lib)" >&2
    exit 2
  fi
  latest[$lib]=$registry
  if [ "$registry" = "$newest" ]; then
    printf '%-14s %-10s %-10s current\n' "$lib" "$newest" "$registry"
  else
    printf '%-14s %-10s %-10s BEHIND\n' "$lib" "$newest" "$registry"
    behind=1
  fi
done < <(python3 tools/pins.py rows)
if [ "$write" = 1 ] && [ "$behind" = 1 ]; then
  args=()
  for lib in "${!latest[@]}"; do args+=("$lib=${latest[$lib]}"); done
  python3 - "${args[@]}" <<'PY'
import datetime, pathlib, re, sys
path = pathlib.Path("docs/tested-versions.md")
text = path.read_text(encoding="utf-8")
new = dict(a.split("=", 1) for a in sys.argv[1:])
begin, end = text.index("<!-- tested-versions:begin -->"), text.index("<!-- tested-versions:end -->")
lines = text[begin:end].split("\n")
for i, line in enumerate(lines):
    cells = line.split("|")
    if len(cells) > 4 and cells[1].strip() in new:
        cells[3] = f" {new[cells[1].strip()]} "
        lines[i] = "|".join(cells)
text = text[:begin] + "\n".join(lines) + text[end:]
today = datetime.date.today().isoformat()
text = re.sub(r"Pinned on \d{4}-\d{2}-\d{2}", f"Pinned on {today}", text)
path.write_text(text, encoding="utf-8")
print(f"docs/tested-versions.md: newest column moved up ({today}); run .ci/run and fix what breaks")
PY
fi
exit "$behind"

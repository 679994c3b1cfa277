#!/usr/bin/env bash
# Parse throughput: `aicli parse` (the Claude adapter, release build) on a large
# transcript, next to a Python `json.loads`-per-line loop over the same file, in one run.
#
#   bash benches/parse_throughput.sh [MB]      # default 200 MB
#
# The transcript is fixtures/claude/bash_allowed.ndjson (a real claude 2.1.332 run)
# with its middle lines repeated until the file has the asked size, so every line is a
# real Claude event (init, assistant text, tool_use, tool_result, result).
set -euo pipefail
cd "$(dirname "$0")/.."
mb=${1:-200}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo build --release -q --bin aicli
bin=${CARGO_TARGET_DIR:-target}/release/aicli
src=fixtures/claude/bash_allowed.ndjson
python3 - "$src" "$tmp/big.ndjson" "$mb" <<'PY'
import sys
src, dst, mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = open(src, 'rb').read().splitlines(keepends=True)
head, body, tail = lines[:1], lines[1:-1], lines[-1:]
target = mb * 1024 * 1024
with open(dst, 'wb') as f:
    n = f.write(b''.join(head))
    while n < target:
        n += f.write(b''.join(body))
    f.write(b''.join(tail))
PY
size=$(stat -c %s "$tmp/big.ndjson")
lines=$(wc -l < "$tmp/big.ndjson")
cat > "$tmp/loads.py" <<'PY'
import json, sys
n = 0
with open(sys.argv[1], 'rb') as f:
    for line in f:
        if line.strip():
            json.loads(line)
            n += 1
print(n)
PY
t() { local s e; s=$(date +%s.%N); "$@" > /dev/null || { echo "failed: $*" >&2; exit 1; }; e=$(date +%s.%N); echo "$e - $s" | bc -l; }
# Warm the page cache once.
cat "$tmp/big.ndjson" > /dev/null
aicli_s=$(t "$bin" parse --provider claude "$tmp/big.ndjson")
aicli_ev_s=$(t "$bin" parse --provider claude --events "$tmp/big.ndjson")
py_s=$(t python3 "$tmp/loads.py" "$tmp/big.ndjson")
mbs() { echo "scale=1; $size / 1048576 / $1" | bc -l; }
printf 'transcript: %d MB, %d lines (claude bash_allowed, repeated)\n' $((size / 1048576)) "$lines"
printf '%-44s %8.2f s %8s MB/s\n' "aicli parse (result)" "$aicli_s" "$(mbs "$aicli_s")"
printf '%-44s %8.2f s %8s MB/s\n' "aicli parse --events (NDJSON out)" "$aicli_ev_s" "$(mbs "$aicli_ev_s")"
printf '%-44s %8.2f s %8s MB/s\n' "python3 json.loads per line (parse only)" "$py_s" "$(mbs "$py_s")"
printf 'ratio aicli parse / python json.loads: %sx faster\n' "$(echo "scale=2; $py_s / $aicli_s" | bc -l)"

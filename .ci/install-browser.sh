#!/usr/bin/env bash
# Debian's Chromium and its WebDriver server, for the web view's browser tests
# (tests/suite/web_browser.rs, which fail rather than skip under CI's
# AICLI_REQUIRE_BROWSER=1) and `cargo bench --bench web_browser`. No browser download:
# both come from Debian's archive. Idempotent: nothing is installed when all of it is there.
#
#   chromium       /usr/bin/chromium (run headless, --no-sandbox as root)
#   chromedriver   /usr/bin/chromedriver (package chromium-driver, the same version)
#   fonts          Liberation and DejaVu, so pages and screenshots have real glyphs (the
#                  icons are the server's SVGs: no symbol or emoji font is needed)
#   fontconfig     fc-list, with which tests/suite/web_browser_phone.rs checks that every
#                  character the pages print is in DejaVu Sans
set -euo pipefail

packages=(chromium chromium-driver fonts-liberation fonts-dejavu-core fontconfig)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "chromium, chromium-driver and fonts: present"
else
  echo "installing from Debian: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
chromium --version 2>/dev/null || true
chromedriver --version

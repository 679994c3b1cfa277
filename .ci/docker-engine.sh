#!/usr/bin/env bash
# The Docker engine the container tests run on (idempotent): Debian's engine and the
# locally built base images, by .ci/setup-docker-engine.sh (a copy of the shared
# tools' script, so that a clone anywhere can run it; no registry needed), then aicli's images of the pinned CLIs (`aicli image build`, from the npm
# cache .ci/install-clis.sh fills; git comes from Debian packages downloaded once into
# ~/.cache/aicli/debs). Re-running reuses what is there.
#
#   AICLI_DOCKER_SETUP   the setup script (default: .ci/setup-docker-engine.sh)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
setup="${AICLI_DOCKER_SETUP:-$repo_root/.ci/setup-docker-engine.sh}"
[ -f "$setup" ] || { echo "docker-engine: $setup not found (set AICLI_DOCKER_SETUP)" >&2; exit 1; }
bash "$setup" >&2

# The second ("remote") engine of the tests takes only mutual TLS: its certificates are
# made with openssl at each start; it lives on a bridge made with ip (iproute2).
missing=()
command -v openssl >/dev/null || missing+=(openssl)
command -v ip >/dev/null || missing+=(iproute2)
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

cd "$repo_root"
cargo build -q --bin aicli
"${CARGO_TARGET_DIR:-target}/debug/aicli" image build >&2

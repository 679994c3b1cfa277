#!/usr/bin/env bash
# Debian's openssh-server, for the test of an ssh:// engine (tests/suite/docker/ssh.rs
# starts its own sshd on a loopback port with a config, keys and known-hosts file of its
# own). The package's service is never started: a policy-rc.d refuses it during the
# install, and the one sshd the tests run stops with them.
# Idempotent: nothing is installed when sshd is there.
set -euo pipefail

if [ -x /usr/sbin/sshd ]; then
  echo "openssh-server: present"
else
  echo "installing from Debian: openssh-server (its service not started)"
  export DEBIAN_FRONTEND=noninteractive
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    own_policy=1
  fi
  trap '[ "$own_policy" = 1 ] && rm -f "$policy"' EXIT
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends openssh-server >/dev/null
fi
# The privilege-separation directory sshd checks for at start.
mkdir -p /run/sshd
/usr/sbin/sshd -V 2>&1 | head -1 || true
if pgrep -x sshd >/dev/null; then
  echo "warning: an sshd is running on this machine (not started by this script)" >&2
fi

#!/usr/bin/env bash
# Installs Debian's redis-server for the replicated-gateway tests
# (internal/gateway/sharedstate): each test starts its own server on a
# loopback port in a temp dir. Idempotent: a no-op when present.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-cache show redis-server >/dev/null 2>&1; then
  apt-get update -qq -o DPkg::Lock::Timeout=600
fi
apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends redis-server || {
  apt-get update -qq -o DPkg::Lock::Timeout=600
  apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends redis-server
}
command -v redis-server

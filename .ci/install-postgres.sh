#!/usr/bin/env bash
# Installs PostgreSQL server binaries for the store's round-trip test
# (internal/store: TestPostgresRoundTrip), which starts its own private
# cluster in a temp dir on 127.0.0.1. Idempotent: a no-op when present.
set -euo pipefail
have_pg() {
  command -v initdb >/dev/null 2>&1 && return 0
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}
if have_pg; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-cache show postgresql >/dev/null 2>&1; then
  apt-get update -qq -o DPkg::Lock::Timeout=600
fi
apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends postgresql || {
  apt-get update -qq -o DPkg::Lock::Timeout=600
  apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends postgresql
}
# The package does not start a service here, and the test needs none.
have_pg

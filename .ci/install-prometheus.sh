#!/usr/bin/env bash
# Installs the Prometheus server (Debian package, 2.42) that internal/telemetry's
# integration tests start themselves in a temp dir. Idempotent: a fast no-op
# when the binary is present; `apt-get update` only when it is missing.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1; then
  echo "prometheus already installed: $(command -v prometheus)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends prometheus
# The Debian package may try to start a service; these tests run their own
# server on a private port, so a packaged one is neither needed nor harmful.
command -v prometheus

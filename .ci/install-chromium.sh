#!/usr/bin/env bash
# Installs headless Chromium for the HTML report's browser test
# (internal/report: TestReportInChromium). Idempotent: a no-op when present.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-cache show chromium >/dev/null 2>&1; then
  apt-get update -qq -o DPkg::Lock::Timeout=600
fi
apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends chromium || {
  apt-get update -qq -o DPkg::Lock::Timeout=600
  apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends chromium
}
command -v chromium

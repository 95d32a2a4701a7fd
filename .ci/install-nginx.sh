#!/usr/bin/env bash
# Installs nginx, the plain streaming-proxy baseline of the gateway overhead
# benchmark (internal/gateway: TestOverhead, TTFT_GATEWAY_OVERHEAD=1) and of
# TestNginxBaselineStreams. Idempotent: a no-op when present. nginx is only
# run by tests, in a temp dir with its own config; the Debian service is not
# started.
set -euo pipefail
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-cache show nginx >/dev/null 2>&1; then
  apt-get update -qq -o DPkg::Lock::Timeout=600
fi
apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends nginx || {
  apt-get update -qq -o DPkg::Lock::Timeout=600
  apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends nginx
}
# Debian's postinst may start the packaged service on port 80; tests never
# use it, so stop it when there is a service manager to ask.
command -v service >/dev/null 2>&1 && service nginx stop >/dev/null 2>&1 || true
command -v nginx || ls -l /usr/sbin/nginx

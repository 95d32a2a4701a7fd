#!/usr/bin/env bash
# Installs Ollama v0.6.5 (a real llama.cpp engine, CPU) from the Go module
# proxy for internal/enginetest. Idempotent: a no-op when the ollama on PATH
# was built from module version 0.6.5 (`go version -m`; a binary from
# `go install` reports "client version is 0.0.0" to `ollama --version`). Newer module versions do not build from the proxy
# (their zips lack llama.cpp's vendored headers). The build uses cgo and takes
# about 6 minutes on 2 cores.
set -euo pipefail
export PATH="$HOME/go/bin:/usr/local/go/bin:$PATH"
want=0.6.5
installed() {
  command -v ollama >/dev/null 2>&1 &&
    go version -m "$(command -v ollama)" 2>/dev/null | grep -Eq "^[[:space:]]+mod[[:space:]]+github.com/ollama/ollama[[:space:]]+v$want[[:space:]]"
}
if installed; then
  exit 0
fi
# A C/C++ toolchain for cgo; the two header packages are asked for by some
# builds of llama.cpp's sources.
need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v g++ >/dev/null 2>&1 || need+=(g++)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${need[@]}" || {
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}"
  }
fi
if ! go install "github.com/ollama/ollama@v$want"; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends nlohmann-json3-dev libstb-dev || {
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nlohmann-json3-dev libstb-dev
  }
  go install "github.com/ollama/ollama@v$want"
fi
installed || { echo "ollama v$want did not install" >&2; exit 1; }

#!/usr/bin/env bash
# Builds Jaeger v2 (all-in-one: OTLP receiver + query API) from the Go module
# proxy into $HOME/go/bin/jaeger, for internal/telemetry's integration tests.
# `go install .../cmd/jaeger@v1.76.0` is refused because jaeger's go.mod has a
# replace directive, so a throwaway wrapper module repeats that replace.
# Idempotent: a fast no-op when the binary is already there (~7 min otherwise);
# the built version is recorded beside it in jaeger.version.
set -euo pipefail
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"
JAEGER_VERSION="v1.76.0"
dest="$HOME/go/bin/jaeger"
if [ -x "$dest" ] && [ -f "$dest.version" ] && [ "$(cat "$dest.version")" = "$JAEGER_VERSION" ]; then
  echo "jaeger ${JAEGER_VERSION} already at $dest"
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
cat > go.mod <<MOD
module ttft.local/jaegerbuild

go 1.26

require github.com/jaegertracing/jaeger ${JAEGER_VERSION}

replace github.com/Shopify/sarama => github.com/Shopify/sarama v1.33.0
MOD
# Resolve the full dependency graph of cmd/jaeger from the proxy, then build it.
GOFLAGS=-mod=mod go get "github.com/jaegertracing/jaeger/cmd/jaeger@${JAEGER_VERSION}"
mkdir -p "$(dirname "$dest")"
GOFLAGS=-mod=mod nice -n 10 go build -o "$dest.tmp" github.com/jaegertracing/jaeger/cmd/jaeger
mv "$dest.tmp" "$dest"
echo "$JAEGER_VERSION" > "$dest.version"
echo "built jaeger ${JAEGER_VERSION} at $dest"

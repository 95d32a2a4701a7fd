#!/usr/bin/env bash
# Installs a real Kubernetes control plane without Docker or a kubelet, for
# the sharded-bench Indexed Job test (internal/cli: TestK8sIndexedJobEndToEnd,
# harness in internal/testutil/kube.go):
#   - etcd from Debian (etcd-server),
#   - kube-apiserver and kube-controller-manager v1.37.2 built from the Go
#     module proxy into $HOME/go/bin. `go install k8s.io/kubernetes/...@v1.37.2`
#     is refused because k8s.io/kubernetes' go.mod has replace directives
#     (its staging modules), so a throwaway wrapper module in a cache dir
#     repeats them as version replaces. Never in the project's go.mod.
#   - kwok v0.8.0 (fake nodes and pod status) via go install, plus its "fast"
#     stage configs copied beside it from its module ($HOME/go/bin/kwok-stages).
# Idempotent: a fast no-op when everything is there (~9 min on 2 cores else).
set -euo pipefail
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"
KUBE_VERSION="v1.37.2"
STAGING_VERSION="v0.37.2"
KWOK_VERSION="v0.8.0"
bin="$HOME/go/bin"
mkdir -p "$bin"

# --- etcd ---------------------------------------------------------------
if ! command -v etcd >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends etcd-server || {
    apt-get update -qq -o DPkg::Lock::Timeout=600
    apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends etcd-server
  }
  # The package may start a system service; the tests run their own etcd.
  (systemctl stop etcd >/dev/null 2>&1 || service etcd stop >/dev/null 2>&1 || true)
fi
command -v etcd >/dev/null

# --- kube-apiserver / kube-controller-manager -----------------------------
have_kube() {
  for b in kube-apiserver kube-controller-manager; do
    [ -x "$bin/$b" ] && [ -f "$bin/$b.version" ] && [ "$(cat "$bin/$b.version")" = "$KUBE_VERSION" ] || return 1
  done
}
if ! have_kube; then
  work="${XDG_CACHE_HOME:-$HOME/.cache}/ttft-kubebuild"
  mkdir -p "$work"
  cd "$work"
  # The staging modules are the ones k8s.io/kubernetes replaces with
  # ./staging/src/...; read them from its own go.mod so the list can't drift.
  kmod="$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  {
    echo "module ttft.local/kubebuild"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes ${KUBE_VERSION}"
    echo
    grep -oE 'k8s\.io/[a-z0-9./-]+ => \./staging/src/k8s\.io/[a-z0-9./-]+' "$kmod" |
      awk -v v="$STAGING_VERSION" '{print "replace " $1 " => " $1 " " v}' | sort -u
  } > go.mod
  cat > tools.go <<'GO'
//go:build tools

package kubebuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
GO
  GOFLAGS=-mod=mod go get "k8s.io/kubernetes/cmd/kube-apiserver@${KUBE_VERSION}" "k8s.io/kubernetes/cmd/kube-controller-manager@${KUBE_VERSION}"
  ld="-X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
  for b in kube-apiserver kube-controller-manager; do
    GOFLAGS=-mod=mod nice -n 10 go build -ldflags "$ld" -o "$bin/$b.tmp" "k8s.io/kubernetes/cmd/$b"
    mv "$bin/$b.tmp" "$bin/$b"
    echo "$KUBE_VERSION" > "$bin/$b.version"
    echo "built $b ${KUBE_VERSION} at $bin/$b"
  done
fi

# --- kwok -----------------------------------------------------------------
if ! { [ -x "$bin/kwok" ] && [ -f "$bin/kwok.version" ] && [ "$(cat "$bin/kwok.version")" = "$KWOK_VERSION" ] && [ -d "$bin/kwok-stages" ]; }; then
  nice -n 10 go install "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
  src="$(go env GOMODCACHE)/sigs.k8s.io/kwok@${KWOK_VERSION}/kustomize/stage"
  rm -rf "$bin/kwok-stages"
  mkdir -p "$bin/kwok-stages"
  for f in "$src"/node/fast/*.yaml "$src"/pod/fast/*.yaml; do
    case "$(basename "$f")" in kustomization.yaml) continue ;; esac
    cp "$f" "$bin/kwok-stages/$(basename "$(dirname "$(dirname "$f")")")-$(basename "$(dirname "$f")")-$(basename "$f")"
  done
  echo "$KWOK_VERSION" > "$bin/kwok.version"
  echo "installed kwok ${KWOK_VERSION} at $bin/kwok with stages in $bin/kwok-stages"
fi

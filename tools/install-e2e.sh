#!/usr/bin/env bash
# Builds the real Kubernetes control plane the end-to-end tests run against (spec/e2e/), from the
# Go module proxy only: kube-apiserver, kube-scheduler, kube-controller-manager and kubectl from the
# module k8s.io/kubernetes, and etcd from go.etcd.io/etcd/server/v3.
#
# usage: tools/install-e2e.sh [CACHE_DIR]      (default: $LUAPROV_E2E_CACHE or .cache/e2e)
#
# The binaries land in CACHE_DIR/bin. A stamp file records the pinned versions; when it matches and
# every binary is there the script does nothing, so a warm run costs a few milliseconds. A cold
# build takes about 12 minutes on 2 cores; with Go's build cache warm, seconds.
set -euo pipefail

KUBE_VERSION=v1.34.4
ETCD_VERSION=v3.6.16
# k8s.io/kubernetes names its staging modules (k8s.io/api, k8s.io/client-go, ...) at v0.0.0 and
# points them at its own tree with replace directives, which Go ignores in a dependency. Each is
# published at the matching v0.<minor>.<patch>, so our go.mod replaces them with that.
STAGING_VERSION="v0.${KUBE_VERSION#v1.}"
BINARIES=(kube-apiserver kube-scheduler kube-controller-manager kubectl etcd)

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${1:-${LUAPROV_E2E_CACHE:-$root/.cache/e2e}}"
stamp="$cache/bin/VERSIONS"
want="kubernetes=$KUBE_VERSION etcd=$ETCD_VERSION"

have_all() {
  [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] || return 1
  for b in "${BINARIES[@]}"; do [[ -x "$cache/bin/$b" ]] || return 1; done
}
if have_all; then exit 0; fi

command -v go >/dev/null || { echo "install-e2e: the e2e tests need Go (go.dev toolchain on PATH)" >&2; exit 1; }
mkdir -p "$cache/bin" "$cache/src/kube" "$cache/src/etcd"
rm -f "$stamp"
started=$SECONDS
export GOFLAGS="${GOFLAGS:-} -buildvcs=false" CGO_ENABLED=0 GOTOOLCHAIN=local
# Stripped, and reporting the version it was built from (kubectl version, /version, discovery).
kube_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION"
kube_ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
kube_ldflags+=" -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$KUBE_VERSION")"
kube_ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"

echo "install-e2e: building Kubernetes $KUBE_VERSION and etcd $ETCD_VERSION into $cache/bin" >&2

# ---- Kubernetes: a module that requires k8s.io/kubernetes and pins its staging modules. ----
cd "$cache/src/kube"
kube_gomod="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')"
[[ -f "$kube_gomod" ]] || { echo "install-e2e: could not download k8s.io/kubernetes@$KUBE_VERSION" >&2; exit 1; }
{
  echo "module luaprov.e2e/kube"
  echo
  echo "go 1.24.0"
  echo
  echo "require k8s.io/kubernetes $KUBE_VERSION"
  echo
  sed -n 's/^\s*\(k8s\.io\/[a-z0-9-]*\) v0\.0\.0$/replace \1 => \1 '"$STAGING_VERSION"'/p' "$kube_gomod" | sort -u
} >go.mod
rm -f go.sum
packages=()
for b in kube-apiserver kube-scheduler kube-controller-manager kubectl; do packages+=("k8s.io/kubernetes/cmd/$b"); done
# go get resolves the whole dependency graph of the four commands and writes go.sum.
go get "${packages[@]/%/@$KUBE_VERSION}"
go build -trimpath -ldflags "$kube_ldflags" -o "$cache/bin/" "${packages[@]}"

# ---- etcd: a ten-line main around the server's own entry point. ----
cd "$cache/src/etcd"
cat >main.go <<'EOF'
// etcd for luaprov's end-to-end tests: the upstream server's own entry point, unchanged.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
printf 'module luaprov.e2e/etcd\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >go.mod
rm -f go.sum
go mod tidy
go build -trimpath -ldflags "-s -w" -o "$cache/bin/etcd" .

echo "$want" >"$stamp"
echo "install-e2e: built ${BINARIES[*]} in $((SECONDS - started)) s" >&2

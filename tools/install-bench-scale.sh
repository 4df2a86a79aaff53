#!/usr/bin/env bash
# Builds what `make bench-scale` (spec/bench-scale/) runs next to luaprov, from the Go module proxy
# only: Karpenter's own controller with its kwok cloud provider (the main package under kwok/ of the
# module sigs.k8s.io/karpenter) and the kwok controller (sigs.k8s.io/kwok, cmd/kwok), which makes the
# Nodes Karpenter's kwok provider creates Ready and their pods Running. Karpenter's CRDs (NodePool,
# NodeClaim, KWOKNodeClass, and the NodeOverlay and CapacityBuffer it watches too) are copied out of
# that module's files, and kwok's stages (what it does to a Node and a pod, and when) out of kwok's:
# the ones Karpenter's own kwok setup uses (the fast node and pod stages, the heartbeat with a Lease).
# The control plane itself comes from tools/install-e2e.sh.
#
# usage: tools/install-bench-scale.sh [CACHE_DIR]
#        (default: $LUAPROV_BENCH_SCALE_CACHE, else <the e2e cache>/bench-scale, the e2e cache being
#        $LUAPROV_E2E_CACHE or .cache/e2e)
#
# The binaries land in CACHE_DIR/bin, the CRDs in CACHE_DIR/crds, kwok's stages in
# CACHE_DIR/kwok-stages. A stamp file records the pinned versions; when it matches and everything is
# there the script does nothing. A cold build takes about 13 minutes on 2 cores (Karpenter's Go
# toolchain has a build cache of its own); with Go's build cache warm, seconds.
set -euo pipefail

KARPENTER_VERSION=v1.15.0
KWOK_VERSION=v0.8.0
# Karpenter's go.mod asks for this Go. An older local toolchain has the go command fetch this one
# from the module proxy (golang.org/toolchain), the way GOTOOLCHAIN works.
KARPENTER_GO=1.26.9
BINARIES=(karpenter-kwok kwok)
# Every CRD the controllers watch: NodePool, NodeClaim and KWOKNodeClass, and NodeOverlay and
# CapacityBuffer, which Karpenter's controllers watch too.
CRDS=(karpenter.sh_nodepools.yaml karpenter.sh_nodeclaims.yaml karpenter.sh_nodeoverlays.yaml
  autoscaling.x-k8s.io_capacitybuffers.yaml karpenter.kwok.sh_kwoknodeclasses.yaml)
STAGES=(node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
  pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml)

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${1:-${LUAPROV_BENCH_SCALE_CACHE:-${LUAPROV_E2E_CACHE:-$root/.cache/e2e}/bench-scale}}"
stamp="$cache/bin/VERSIONS"
want="karpenter=$KARPENTER_VERSION kwok=$KWOK_VERSION"

have_all() {
  [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] || return 1
  local f
  for f in "${BINARIES[@]}"; do [[ -x "$cache/bin/$f" ]] || return 1; done
  for f in "${CRDS[@]}"; do [[ -f "$cache/crds/$f" ]] || return 1; done
  for f in "${STAGES[@]}"; do [[ -f "$cache/kwok-stages/$(basename "$f")" ]] || return 1; done
}
if have_all; then exit 0; fi

command -v go >/dev/null || { echo "install-bench-scale: needs Go (go.dev toolchain on PATH)" >&2; exit 1; }
mkdir -p "$cache/bin" "$cache/crds" "$cache/kwok-stages" "$cache/src/karpenter" "$cache/src/kwok"
rm -f "$stamp"
started=$SECONDS
export GOFLAGS="${GOFLAGS:-} -buildvcs=false" CGO_ENABLED=0
local_go="$(GOTOOLCHAIN=local go env GOVERSION)"
local_go="${local_go#go}"
if [[ "$(printf '%s\n%s\n' "$KARPENTER_GO" "$local_go" | sort -V | head -1)" == "$KARPENTER_GO" ]]; then
  karpenter_toolchain=local
else
  karpenter_toolchain="go$KARPENTER_GO"
fi

echo "install-bench-scale: building Karpenter $KARPENTER_VERSION (kwok provider, toolchain $karpenter_toolchain)" \
  "and kwok $KWOK_VERSION into $cache/bin" >&2

# ---- Karpenter: its kwok provider's main, unchanged, from a module that requires it. ----
cd "$cache/src/karpenter"
printf 'module luaprov.bench/karpenter\n\ngo %s\n\nrequire sigs.k8s.io/karpenter %s\n' \
  "$KARPENTER_GO" "$KARPENTER_VERSION" >go.mod
rm -f go.sum
GOTOOLCHAIN="$karpenter_toolchain" go get "sigs.k8s.io/karpenter/kwok@$KARPENTER_VERSION"
GOTOOLCHAIN="$karpenter_toolchain" go build -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/karpenter/pkg/operator.Version=$KARPENTER_VERSION" \
  -o "$cache/bin/karpenter-kwok" sigs.k8s.io/karpenter/kwok
module_dir="$(GOTOOLCHAIN="$karpenter_toolchain" go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)"
for f in "${CRDS[@]}"; do
  if [[ -f "$module_dir/pkg/apis/crds/$f" ]]; then cp "$module_dir/pkg/apis/crds/$f" "$cache/crds/"; else
    cp "$module_dir/kwok/apis/crds/$f" "$cache/crds/"; fi
done
chmod u+w "$cache/crds/"*

# ---- kwok: the controller of sigs.k8s.io/kwok, unchanged. ----
cd "$cache/src/kwok"
printf 'module luaprov.bench/kwok\n\ngo 1.26.0\n\nrequire sigs.k8s.io/kwok %s\n' "$KWOK_VERSION" >go.mod
rm -f go.sum
GOTOOLCHAIN=local go get "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
GOTOOLCHAIN=local go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
  -o "$cache/bin/kwok" sigs.k8s.io/kwok/cmd/kwok
module_dir="$(GOTOOLCHAIN=local go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
for f in "${STAGES[@]}"; do cp "$module_dir/kustomize/stage/$f" "$cache/kwok-stages/"; done
chmod u+w "$cache/kwok-stages/"*

echo "$want" >"$stamp"
echo "install-bench-scale: built ${BINARIES[*]} and copied ${#CRDS[@]} CRDs and ${#STAGES[@]} stages in $((SECONDS - started)) s" >&2

#!/usr/bin/env bash
# spec.vSwitchSelectionPolicy through the whole engine (docs/alibaba.md#launching-an-instance): the
# real binary, `luaprov run --sim`. A scale-up of three NodeClaims of one instance type (sold in every
# zone) lands in three zones with `balanced` (each launch takes the zone whose vSwitch has the most
# free addresses, and a launch takes one) and in one zone with `cheapest`. Which zone a single launch
# picks from given counts is the mapping's, proved in spec/lua/providers/alibaba/launch_spec.lua.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sim_lib.sh"

cat >"$WORK/config.yaml" <<'YAML'
controllers:
  nodeClassResync: 1s
YAML
start_sim_engine --config "$WORK/config.yaml"
NC=/apis/karpenter.sh/v1/nodeclaims
CLASSES=/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses

nodeclass() { # nodeclass NAME POLICY
  kpost $CLASSES "{\"apiVersion\":\"karpenter.alibabacloud.com/v1alpha1\",\"kind\":\"ECSNodeClass\",\"metadata\":{\"name\":\"$1\"},
  \"spec\":{\"vSwitchSelectorTerms\":[{\"tags\":{\"karpenter.sh/discovery\":\"luaprov-sim\"}}],
  \"securityGroupSelectorTerms\":[{\"tags\":{\"karpenter.sh/discovery\":\"luaprov-sim\"}}],
  \"imageSelectorTerms\":[{\"alias\":\"AlibabaCloudLinux3\"}],\"vSwitchSelectionPolicy\":\"$2\"}}"
  until_ok "ECSNodeClass $1 Ready" 10 condition "$CLASSES/$1" Ready True
}
claim() { # claim NAME CLASS
  kpost $NC "{\"apiVersion\":\"karpenter.sh/v1\",\"kind\":\"NodeClaim\",\"metadata\":{\"name\":\"$1\",\"labels\":{\"karpenter.sh/nodepool\":\"default\"}},
  \"spec\":{\"nodeClassRef\":{\"group\":\"karpenter.alibabacloud.com\",\"kind\":\"ECSNodeClass\",\"name\":\"$2\"},
  \"requirements\":[{\"key\":\"karpenter.sh/capacity-type\",\"operator\":\"In\",\"values\":[\"on-demand\"]},
  {\"key\":\"node.kubernetes.io/instance-type\",\"operator\":\"In\",\"values\":[\"ecs.g7.xlarge\"]}],
  \"resources\":{\"requests\":{\"cpu\":\"1\",\"memory\":\"1Gi\"}}}}"
}
zones_of() { # zones_of CLAIM...: the distinct zones of their instances, sorted
  for c in "$@"; do kget "$NC/$c" | jq -r '.metadata.labels["topology.kubernetes.io/zone"]'; done | sort -u | paste -sd ' '
}
scale_up() { # scale_up CLASS: three NodeClaims at once, all Launched
  for n in 1 2 3; do claim "$1-$n" "$1"; done
  for n in 1 2 3; do until_ok "NodeClaim $1-$n Launched" 15 condition "$NC/$1-$n" Launched True; done
}

nodeclass spread balanced
scale_up spread
ZONES="$(zones_of spread-1 spread-2 spread-3)"
[[ "$(wc -w <<<"$ZONES")" == 3 ]] || fail "balanced: three launches in three zones, got: $ZONES"

nodeclass cheap cheapest
scale_up cheap
ZONES="$(zones_of cheap-1 cheap-2 cheap-3)"
[[ "$(wc -w <<<"$ZONES")" == 1 ]] || fail "cheapest: three launches in one zone, got: $ZONES"
echo "ok: balanced spread a scale-up over three zones, cheapest kept it in $ZONES"

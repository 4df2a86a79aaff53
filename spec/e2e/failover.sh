#!/usr/bin/env bash
# Leader failover and an API server crash in the middle of bursts of NodeClaim creations, with pods
# that each fill a node of their own. First two leader changes while a Deployment grows: the leader
# is SIGKILLed in one burst, SIGTERMed (it hands the Lease over) in the next. Then, on an empty
# cluster, a burst of 100 NodeClaim creations during which the kube-apiserver is SIGKILLed and started
# again. Every time: exactly as many NodeClaims as pods, each with its instance and its Node; none lost,
# none made twice.
source "$(dirname "$0")/lib.sh"
read -r -a BURSTS <<<"${E2E_BURSTS:-30 60}"
CRASH_BURST="${E2E_CRASH_BURST:-100}"

holder() { kc -n luaprov get lease luaprov-leader-election -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
has_holder() { [[ -n "$(holder)" && -n "${ENGINE_PIDS[$(holder)]:-}" ]]; }
claims_at_least() { [[ "$(count nodeclaims)" -ge "$1" ]]; }
leader_rss() { awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/${ENGINE_PIDS[$(holder)]}/status"; }

# exactly_one_node_per_pod APP N: N pods of APP run, and N NodeClaims, Nodes and instances exist.
exactly_one_node_per_pod() {
  wait_until "NodeClaims, Nodes and instances agree" 120 settled
  local claims
  claims="$(count nodeclaims)"
  figure "$2 pods, $claims NodeClaims, $(count nodes) Nodes, $(live_instances) instances"
  [[ "$claims" == "$2" ]] || fail "$claims NodeClaims for $2 pods that each need a node"
  no_empty_nodes "$1"
}

# burst APP N DISRUPTION: scales APP to N and, once its creations are under way, runs DISRUPTION; then
# waits until the N pods run.
burst() {
  local app="$1" target="$2" disruption="$3" before
  before="$(count nodeclaims)"
  step "$app: burst to $target pods, then $disruption"
  kc scale deployment "$app" --replicas "$target" >/dev/null
  wait_until "NodeClaims being created" 120 claims_at_least $(((before + target) / 2))
  "$disruption"
  local t0=$SECONDS
  wait_until "$target pods Running" 600 running_is "$app" "$target"
  figure "burst to $target pods settled $((SECONDS - t0)) s after $disruption"
}

kill_leader() {
  local leader
  leader="$(holder)"
  stop_luaprov "$leader" KILL
  start_luaprov "$leader-2" --leader-elect # a new replica, as the Deployment would start
  wait_until "a new leader" 60 has_holder
  echo "leader $leader SIGKILLed; $(holder) leads" >&2
}

stop_leader() {
  local leader
  leader="$(holder)"
  stop_luaprov "$leader" TERM
  wait_until "the Lease handed over" 30 has_holder
  echo "leader $leader SIGTERMed; $(holder) leads" >&2
}

crash_apiserver() {
  not_ready_since
  kill -KILL "$PID_kube_apiserver"
  wait "$PID_kube_apiserver" 2>/dev/null || true
  echo "kube-apiserver SIGKILLed with $(count_nodeclaims_in_etcd) NodeClaims stored" >&2
  start_apiserver
  ready_again
  local refused
  refused="$(jq -s '[.[] | select(.responseStatus.code == 403)] | length' "$AUDIT_LOG")"
  figure "$refused requests refused while the restarted kube-apiserver loaded its RBAC objects"
}
count_nodeclaims_in_etcd() {
  curl -sf "http://127.0.0.1:$ETCD_PORT/v3/kv/range" -d "$(jq -nc --arg k /registry/karpenter.sh/nodeclaims/ \
    '{key: ($k | @base64), range_end: ($k | .[:-1] + "0" | @base64), count_only: true}')" | jq -r '.count // 0'
}

cluster_up
install_luaprov
start_sim
start_luaprov a --leader-elect
start_luaprov b --leader-elect
wait_until "a leader" 60 has_holder
small_nodepool

deployment spread 0 3
burst spread "${BURSTS[0]}" kill_leader
burst spread "${BURSTS[1]}" stop_leader
exactly_one_node_per_pod spread "${BURSTS[1]}"

step "an empty cluster again"
kc delete deployment spread >/dev/null
kc delete nodeclaims --all --wait=false >/dev/null
empty() { [[ "$(count nodeclaims)" == 0 && "$(count nodes)" == 0 && "$(live_instances)" == 0 ]]; }
wait_until "every NodeClaim, Node and instance gone" 300 empty

deployment burst 0 3
burst burst "$CRASH_BURST" crash_apiserver
exactly_one_node_per_pod burst "$CRASH_BURST"

step "150 more small pods on those nodes: luaprov's memory with them all cached"
deployment idle 150 10m
wait_until "150 small pods Running" 120 running_is idle 150
[[ "$(count nodeclaims)" == "$CRASH_BURST" ]] || fail "pods that fit the existing nodes made new NodeClaims"
figure "luaprov RSS (the leader) with $((CRASH_BURST + 150)) pods, $CRASH_BURST NodeClaims, $CRASH_BURST Nodes: $(leader_rss) MiB"
no_rbac_denials
echo "e2e failover: passed" >&2

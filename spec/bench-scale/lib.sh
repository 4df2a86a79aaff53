# Shared by the scale scenarios (sourced): spec/e2e/lib.sh's scratch folder, real control plane and
# cleanup, plus the controller under measurement (BENCH_CONTROLLER: luaprov, against `luaprov sim`
# and its kubelet, or karpenter, Karpenter's kwok provider with the kwok controller making its Nodes
# Ready), the Deployments of Karpenter's performance suite, the measurements of the controller
# process and the one result line each scenario appends to BENCH_RESULTS.
# shellcheck source=../e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../e2e/lib.sh"

CONTROLLER="${BENCH_CONTROLLER:?set BENCH_CONTROLLER to luaprov or karpenter}"
SCALE_CACHE="${LUAPROV_BENCH_SCALE_CACHE:?set LUAPROV_BENCH_SCALE_CACHE to the cache of tools/install-bench-scale.sh}"
RESULTS="${BENCH_RESULTS:-/dev/stderr}"
SCENARIO="$TEST_NAME"
# how long a consolidation or drift must show no NodeClaim created or deleted to count as finished
QUIET_SECONDS="${BENCH_QUIET_SECONDS:-60}"
CLK_TCK="$(getconf CLK_TCK)"
CONTROLLER_PID=""

# ---- the controller ------------------------------------------------------------------------------

# bench_up: the control plane, then the controller and its NodePool "default" (Karpenter's
# performance suite's: on-demand, linux, nodes of fewer than 32 vCPUs, no limits, consolidation of
# empty or underutilized nodes after 30 s, a budget of 100%), waiting until the controller is ready.
bench_up() {
  cluster_up
  case "$CONTROLLER" in
    luaprov) luaprov_up ;;
    karpenter) karpenter_up ;;
    *) fail "BENCH_CONTROLLER is $CONTROLLER: luaprov or karpenter" ;;
  esac
  kc apply -f - >/dev/null <<JSON || fail "the NodePool did not apply"
{"apiVersion":"karpenter.sh/v1","kind":"NodePool","metadata":{"name":"default"},
 "spec":{"disruption":{"consolidationPolicy":"WhenEmptyOrUnderutilized","consolidateAfter":"30s",
   "budgets":[{"nodes":"100%"}]},
 "template":{"spec":{"expireAfter":"Never","nodeClassRef":$NODECLASS_REF,"requirements":[
   {"key":"kubernetes.io/os","operator":"In","values":["linux"]},
   {"key":"karpenter.sh/capacity-type","operator":"In","values":["on-demand"]},
   {"key":"$CPU_LABEL","operator":"Lt","values":["32"]}]}}}}
JSON
}

luaprov_up() {
  install_luaprov
  start_sim
  start_luaprov a
  wait_until "luaprov ready" 60 luaprov_ready a
  getting_started_objects | awk 'BEGIN { RS = "---\n"; ORS = "---\n" } /kind: ECSNodeClass/' | kc apply -f - >/dev/null
  CONTROLLER_PID="${ENGINE_PIDS[a]}"
  NODECLASS_REF='{"group":"karpenter.alibabacloud.com","kind":"ECSNodeClass","name":"default"}'
  CPU_LABEL=karpenter.k8s.alibabacloud/instance-cpu
}

# karpenter_up: Karpenter's CRDs, the kwok controller (the stages Karpenter's kwok setup uses: Nodes
# Ready at once, pods Running once bound, a Lease as heartbeat), then Karpenter as kube-system's admin.
karpenter_up() {
  kc apply --server-side -f "$SCALE_CACHE/crds/" >/dev/null || fail "Karpenter's CRDs did not apply"
  kc wait --for condition=Established --timeout 60s crd/nodepools.karpenter.sh crd/nodeclaims.karpenter.sh \
    crd/kwoknodeclasses.karpenter.kwok.sh >/dev/null || fail "Karpenter's CRDs are not established"
  local stage configs=()
  for stage in "$SCALE_CACHE"/kwok-stages/*.yaml; do configs+=(--config "$stage"); done
  spawn kwok "$SCALE_CACHE/bin/kwok" --kubeconfig "$ADMIN_KUBECONFIG" "${configs[@]}" \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake --node-lease-duration-seconds 40 \
    --server-address "127.0.0.1:$(free_port)"
  local health_port
  health_port="$(free_port)"
  # env execs the controller: spawn's PID is Karpenter's own
  spawn karpenter env KUBECONFIG="$ADMIN_KUBECONFIG" SYSTEM_NAMESPACE=kube-system DISABLE_LEADER_ELECTION=true \
    METRICS_PORT="$(free_port)" HEALTH_PROBE_PORT="$health_port" LOG_LEVEL=info "$SCALE_CACHE/bin/karpenter-kwok"
  CONTROLLER_PID="$PID_karpenter"
  wait_until "Karpenter ready" 120 curl -sf -o /dev/null "http://127.0.0.1:$health_port/readyz"
  kc apply -f - >/dev/null <<<'{"apiVersion":"karpenter.kwok.sh/v1alpha1","kind":"KWOKNodeClass","metadata":{"name":"default"}}'
  NODECLASS_REF='{"group":"karpenter.kwok.sh","kind":"KWOKNodeClass","name":"default"}'
  CPU_LABEL=karpenter.kwok.sh/instance-cpu
}

# ---- the workload --------------------------------------------------------------------------------

# bench_deployment NAME REPLICAS CPU MEMORY [SHAPE...]: a Deployment of pause pods labelled app=NAME
# and bench=scale, as Karpenter's performance suite makes them. SHAPE adds: hostname-spread (maxSkew 1
# over kubernetes.io/hostname), zone-spread (maxSkew 1 over the zones), anti-affinity (required, over
# kubernetes.io/hostname), do-not-disrupt (the karpenter.sh/do-not-disrupt annotation).
bench_deployment() {
  local name="$1" replicas="$2" cpu="$3" memory="$4"
  shift 4
  local shapes
  shapes="$(printf '%s\n' "$@" | jq -R . | jq -s -c 'map(select(length > 0))')"
  jq -n -c --arg name "$name" --argjson replicas "$replicas" --arg cpu "$cpu" --arg memory "$memory" \
    --argjson shapes "$shapes" '
    {matchLabels: {app: $name}} as $selector
    | def spread(key): {maxSkew: 1, topologyKey: key, whenUnsatisfiable: "DoNotSchedule", labelSelector: $selector};
    {apiVersion: "apps/v1", kind: "Deployment", metadata: {name: $name, namespace: "default"},
     spec: {replicas: $replicas, selector: $selector,
       template: {
         metadata: ({labels: {app: $name, bench: "scale"}}
           + if $shapes | index("do-not-disrupt") then {annotations: {"karpenter.sh/do-not-disrupt": "true"}} else {} end),
         spec: ({terminationGracePeriodSeconds: 5,
           containers: [{name: "app", image: "registry.k8s.io/pause:3.10",
             resources: {requests: {cpu: $cpu, memory: $memory}}}]}
           + ([(if $shapes | index("zone-spread") then spread("topology.kubernetes.io/zone") else empty end),
               (if $shapes | index("hostname-spread") then spread("kubernetes.io/hostname") else empty end)]
              | if length > 0 then {topologySpreadConstraints: .} else {} end)
           + if $shapes | index("anti-affinity") then {affinity: {podAntiAffinity: {
               requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: "kubernetes.io/hostname",
                 labelSelector: $selector}]}}} else {} end)}}}' | kc apply -f - >/dev/null \
    || fail "Deployment $name did not apply"
}

# ---- measuring -----------------------------------------------------------------------------------

now() { date +%s.%N; }
# cpu_seconds: user + system CPU the controller process has used (/proc/<pid>/stat utime + stime).
cpu_seconds() { awk -v tck="$CLK_TCK" '{ printf "%.2f", ($14 + $15) / tck }' "/proc/$CONTROLLER_PID/stat"; }
# peak_rss_mib: the controller process's peak resident set since it started (VmHWM).
peak_rss_mib() { awk '/^VmHWM:/ { printf "%.1f", $2 / 1024 }' "/proc/$CONTROLLER_PID/status"; }

# pods_state: "<pods> <bound> <running>" over the pods labelled bench=scale, deleted ones left out.
pods_state() {
  kc get pods -l bench=scale -o json | jq -r '[.items[] | select(.metadata.deletionTimestamp == null)]
    | "\(length) \(map(select(.spec.nodeName != null)) | length) \(map(select(.status.phase == "Running")) | length)"'
}

# all_bound N: exactly N pods, every one bound to a node.
all_bound() {
  local pods bound running
  read -r pods bound running <<<"$(pods_state)"
  [[ "$pods" == "$1" && "$bound" == "$1" ]]
}

# last_bound_at: when the last of the current pods was bound (its PodScheduled condition turned True),
# in seconds since the epoch: the scale-out's end to the second, whatever the polling interval.
last_bound_at() {
  kc get pods -l bench=scale -o json | jq -r '[.items[].status.conditions[]? | select(.type == "PodScheduled"
    and .status == "True") | .lastTransitionTime | fromdateiso8601] | max'
}

# wait_bound N SECONDS: waits until N pods are bound; prints the seconds from T0 to the last binding.
wait_bound() {
  wait_until "$1 pods bound" "$2" all_bound "$1"
  awk -v a="$(last_bound_at)" -v b="$T0" 'BEGIN { d = a - b; printf "%.0f", d < 0 ? 0 : d }'
}

# nodeclaim_set: the names of the NodeClaims, sorted, one line (what a consolidation or drift changes).
nodeclaim_set() { kc get nodeclaims -o jsonpath='{.items[*].metadata.name}' | tr ' ' '\n' | sort | tr '\n' ' '; }

# wait_settled PODS SECONDS [CHECK]: waits until PODS pods are bound, no NodeClaim is being deleted,
# CHECK (a command) holds, and the NodeClaims have stayed the same for QUIET_SECONDS; prints the seconds
# from T0 to the last change of the NodeClaims. Gives up after SECONDS, printing the time so far and
# "(unsettled)".
wait_settled() {
  local pods="$1" deadline=$((SECONDS + $2)) check="${3:-true}"
  local set last_set="" last_change quiet_since=""
  last_change="$(now)"
  while ((SECONDS < deadline)); do
    set="$(nodeclaim_set)"
    if [[ "$set" != "$last_set" ]]; then
      last_set="$set" last_change="$(now)" quiet_since=""
    elif all_bound "$pods" && [[ "$(deleting_nodeclaims)" == 0 ]] && $check; then
      [[ -n "$quiet_since" ]] || quiet_since=$SECONDS
      if ((SECONDS - quiet_since >= QUIET_SECONDS)); then
        awk -v a="$last_change" -v b="$T0" 'BEGIN { printf "%.0f", a - b }'
        return 0
      fi
    else
      quiet_since=""
    fi
    sleep 2
  done
  awk -v a="$(now)" -v b="$T0" 'BEGIN { printf "%.0f (unsettled)", a - b }'
}

# quiet_nodeclaims: no NodeClaim created, deleted or being deleted over 10 s (before a second phase).
quiet_nodeclaims() {
  local before
  before="$(nodeclaim_set)"
  sleep 10
  [[ "$(nodeclaim_set)" == "$before" && "$(deleting_nodeclaims)" == 0 ]]
}

deleting_nodeclaims() { kc get nodeclaims -o json | jq '[.items[] | select(.metadata.deletionTimestamp != null)] | length'; }

# start_clock: T0 and the controller's CPU seconds at T0; the measured phase starts here.
start_clock() {
  T0="$(now)"
  CPU0="$(cpu_seconds)"
}

# result PHASE SECONDS: one line in BENCH_RESULTS: scenario, phase, controller, seconds, the controller's
# peak RSS (MiB) and the CPU seconds it used since start_clock, and the NodeClaims at the end.
result() {
  local cpu
  cpu="$(awk -v a="$(cpu_seconds)" -v b="$CPU0" 'BEGIN { printf "%.1f", a - b }')"
  local line="$SCENARIO $1 $CONTROLLER ${2// /_} $(peak_rss_mib) $cpu $(count nodeclaims)"
  echo "result: $line" >&2
  echo "$line" >>"$RESULTS"
}

# Shared by the end-to-end tests (sourced): a scratch folder, a real control plane (cluster.sh), the
# simulated clouds with their kubelet posting Nodes to it (`luaprov sim --kubelet-kubeconfig`), and
# luaprov itself (`luaprov run --kubeconfig`) running as the ServiceAccount of
# examples/deploy/rbac.yaml. On exit, pass or fail, every process started here is stopped by PID and
# the folder removed (kept when LUAPROV_E2E_KEEP=1, to read the logs).
set -euo pipefail

LUAPROV="${LUAPROV:?set LUAPROV to the luaprov binary}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORK="$(mktemp -d /tmp/luaprov-e2e-XXXXXX)"
# every audit log is copied here, so that e2e/rbac can check the whole suite's requests
AUDIT_DIR="${LUAPROV_E2E_AUDIT_DIR:-}"
TEST_NAME="$(basename "$0" .sh)"
SIM_PID=""
declare -A ENGINE_PIDS=() ENGINE_ADDRS=()

# shellcheck source=cluster.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"

# Every process a test starts is named in $WORK/pids. cleanup stops them when the test ends; should the
# test itself be killed outright (a ctest timeout), this watcher kills them within a second and
# removes the folder, so no control plane outlives its test.
E2E_PIDS="$WORK/pids"
: >"$E2E_PIDS"
(
  trap '' TERM INT
  while kill -0 $$ 2>/dev/null; do sleep 1; done
  xargs -r kill -KILL <"$E2E_PIDS" 2>/dev/null
  [[ "${LUAPROV_E2E_KEEP:-}" == 1 ]] || rm -rf "$WORK"
) >/dev/null 2>&1 &
watch_pid() { echo "$1" >>"$E2E_PIDS"; }

stop_pid() {
  local pid="$1" sig="${2:-TERM}"
  [[ -n "$pid" ]] || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local status=$?
  for name in "${!ENGINE_PIDS[@]}"; do stop_pid "${ENGINE_PIDS[$name]}"; done
  stop_pid "$SIM_PID"
  cluster_down
  if [[ -n "$AUDIT_DIR" && -f "${AUDIT_LOG:-}" ]]; then
    mkdir -p "$AUDIT_DIR" && rbac_audit_log >"$AUDIT_DIR/$TEST_NAME.log" || true
  fi
  : >"$E2E_PIDS"
  if [[ "${LUAPROV_E2E_KEEP:-}" == 1 ]]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

fail() {
  echo "FAIL: $*" >&2
  local f
  for f in "$WORK"/*.log "$WORK"/cluster/kube-apiserver.log; do
    [[ -f "$f" ]] || continue
    echo "--- last lines of $(basename "$f") ---" >&2
    tail -n 40 "$f" >&2
  done
  exit 1
}

step() { echo "== $*" >&2; }

# figure TEXT: a measurement, on stderr and appended to $LUAPROV_E2E_FIGURES (ctest sets it to
# <build>/e2e-figures.txt), since ctest shows a passing test's output to nobody.
figure() {
  echo "figure: $*" >&2
  [[ -z "${LUAPROV_E2E_FIGURES:-}" ]] || echo "$TEST_NAME: $*" >>"$LUAPROV_E2E_FIGURES"
}

# ---- luaprov's objects: CRDs, RBAC, namespace ----------------------------------------------------

# install_luaprov: the CRDs and the RBAC of examples/deploy, in the luaprov namespace, validated by the
# server; waits until the CRDs serve.
install_luaprov() {
  kc create namespace luaprov >/dev/null
  kc apply --server-side --field-manager e2e --validate=strict -f "$ROOT/examples/deploy/crds/" \
    -f "$ROOT/examples/deploy/rbac.yaml" >/dev/null || fail "examples/deploy did not apply"
  kc wait --for condition=Established --timeout 60s crd/nodepools.karpenter.sh crd/nodeclaims.karpenter.sh \
    crd/ecsnodeclasses.karpenter.alibabacloud.com crd/ecsnodeclasses.karpenter.k8s.alibabacloud >/dev/null \
    || fail "the CRDs are not established"
}

# getting_started_objects: the ECSNodeClass and NodePool of docs/getting-started.md, as written there.
getting_started_objects() {
  sed -n "/^kubectl --server \"\$K\" apply -f - <<'YAML'$/,/^YAML$/p" "$ROOT/docs/getting-started.md" \
    | sed '1d;$d' | awk 'BEGIN { RS = "---\n"; ORS = "---\n" } /kind: (ECSNodeClass|NodePool)/'
}

# ---- the simulated clouds and their kubelet ------------------------------------------------------

# start_sim: `luaprov sim` whose kubelet registers Nodes in the real API server. Sets ALI (the
# Alibaba simulator's URL) and K_SIM (the Kubernetes simulator's, for its /_sim/ admin paths).
start_sim() {
  "$LUAPROV" sim --kubelet-kubeconfig "$ADMIN_KUBECONFIG" --node-gone-after "${NODE_GONE_AFTER:-10}" \
    --log-format json >"$WORK/sim.out" 2>"$WORK/sim.log" &
  SIM_PID=$!
  watch_pid "$SIM_PID"
  wait_until "luaprov sim listening" 20 sim_listening
  ALI="$(jq -r .alibaba "$WORK/sim.out")"
  K_SIM="$(jq -r .kubernetes "$WORK/sim.out")"
}

sim_listening() { grep -qs alibaba "$WORK/sim.out"; }

# ---- luaprov run ---------------------------------------------------------------------------------

# start_luaprov NAME [ARGS...]: `luaprov run` against the real API server with a token of the
# luaprov ServiceAccount, the Alibaba mapping pointed at the simulator. Logs in $WORK/NAME.log; the
# metrics address in ENGINE_ADDRS[NAME].
start_luaprov() {
  local name="$1"
  shift
  [[ -f "$WORK/luaprov.kubeconfig" ]] || token_kubeconfig "$WORK/luaprov.kubeconfig" luaprov luaprov
  POD_NAME="$name" POD_NAMESPACE=luaprov LUAPROV_ALIBABA_ENDPOINT="$ALI" \
    ALIBABA_CLOUD_ACCESS_KEY_ID=LTAI5simulatoraccess ALIBABA_CLOUD_ACCESS_KEY_SECRET=simulator-secret-do-not-use \
    "$LUAPROV" run --kubeconfig "$WORK/luaprov.kubeconfig" --cluster-id luaprov-sim --region cn-hangzhou \
    --metrics-addr 127.0.0.1:0 --log-format json "$@" 2>"$WORK/$name.log" &
  ENGINE_PIDS[$name]=$!
  watch_pid "$!"
  local addr=""
  for _ in $(seq 1 100); do
    addr="$(sed -n 's/.*"msg":"engine started".*"metrics_addr":"\([^"]*\)".*/\1/p' "$WORK/$name.log" | head -1)"
    [[ -n "$addr" ]] && break
    kill -0 "${ENGINE_PIDS[$name]}" 2>/dev/null || fail "luaprov $name exited during start"
    sleep 0.1
  done
  [[ -n "$addr" ]] || fail "luaprov $name did not start within 10 s"
  ENGINE_ADDRS[$name]="$addr"
}

# stop_luaprov NAME [SIGNAL]
stop_luaprov() {
  stop_pid "${ENGINE_PIDS[$1]}" "${2:-TERM}"
  unset "ENGINE_PIDS[$1]"
}

luaprov_ready() { [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://${ENGINE_ADDRS[$1]}/readyz")" == 200 ]]; }

# metric NAME SAMPLE: the value of one sample of luaprov NAME's /metrics (empty when absent).
metric() { curl -sf "http://${ENGINE_ADDRS[$1]}/metrics" | awk -v m="$2" '$1 == m { print $2 }'; }

# ---- what the cluster holds ----------------------------------------------------------------------

count() { kc get "$@" -o name 2>/dev/null | wc -l; }
live_instances() { curl -sf "$ALI/_sim/state" | jq '[.instances[] | select(.status != "Stopped")] | length'; }
pending_pods() { kc get pods "$@" --field-selector status.phase=Pending -o name | wc -l; }
running_pods() { kc get pods "$@" --field-selector status.phase=Running -o name | wc -l; }
instance_alive() { # instance_alive ID: 1 while the instance is not released or Stopped, else 0
  curl -sf "$ALI/_sim/state" | jq -r --arg id "$1" '[.instances[] | select(.id == $id and .status != "Stopped")] | length'
}

# is VALUE COMMAND...: COMMAND prints VALUE (for wait_until).
is() {
  local want="$1"
  shift
  [[ "$("$@")" == "$want" ]]
}
gone() { ! kc get "$@" -o name >/dev/null 2>&1; } # gone KIND NAME
cordoned() {                                      # cordoned NODE: unschedulable or tainted disrupted
  local what
  what="$(kc get node "$1" -o jsonpath='{.spec.unschedulable} {.spec.taints[*].key}')"
  [[ "$what" == *true* || "$what" == *karpenter.sh/disrupted* ]]
}
ready_nodes() {
  kc get nodes -o json | jq '[.items[] | select(.status.conditions[]? | .type == "Ready" and .status == "True")] | length'
}

# While a kube-apiserver starts again its authorizer has not loaded the RBAC objects yet, and for a
# moment it refuses every request (403, no reason). Tests that restart it note the window with
# not_ready_since / ready_again; refusals inside a window are counted apart and not held against RBAC.
utc_now() { date -u +%Y-%m-%dT%H:%M:%S.%6NZ; }
not_ready_since() { NOT_READY_SINCE="$(utc_now)"; }
ready_again() {
  wait_until "kube-apiserver /readyz" 90 api_ready
  echo "$NOT_READY_SINCE $(utc_now)" >>"$CLUSTER/not-ready-windows"
}

# rbac_audit_log: the audit log without the refusals of the windows above (what e2e/rbac reads).
rbac_audit_log() {
  local windows="[]"
  [[ -f "$CLUSTER/not-ready-windows" ]] && windows="$(jq -R -s -c 'split("\n") | map(select(length > 0) | split(" "))' \
    "$CLUSTER/not-ready-windows")"
  jq -c --argjson w "$windows" 'select((.responseStatus.code == 401 or .responseStatus.code == 403)
    and (.requestReceivedTimestamp as $t | any($w[]; $t >= .[0] and $t <= .[1])) | not)' "$AUDIT_LOG"
}

# no_rbac_denials: fails when the API server refused any of luaprov's requests (401 or 403) outside
# the windows above.
no_rbac_denials() {
  local denied
  denied="$(rbac_audit_log | jq -c 'select(.responseStatus.code == 401 or .responseStatus.code == 403)
    | {verb, uri: .requestURI, code: .responseStatus.code, reason: .responseStatus.reason}' | head -5)"
  [[ -z "$denied" ]] || fail "the API server refused luaprov: $denied"
}

# small_nodepool [BUDGET]: the getting-started objects with the NodePool held to one 4-vCPU instance
# type (so that a handful of pods needs several nodes) and a disruption budget of BUDGET nodes.
small_nodepool() {
  getting_started_objects | kc apply -f - >/dev/null
  kc patch nodepool default --type merge -p "{\"spec\":{\"template\":{\"spec\":{\"requirements\":[
    {\"key\":\"karpenter.sh/capacity-type\",\"operator\":\"In\",\"values\":[\"on-demand\"]},
    {\"key\":\"node.kubernetes.io/instance-type\",\"operator\":\"In\",\"values\":[\"ecs.g7.xlarge\"]}]}},
    \"disruption\":{\"budgets\":[{\"nodes\":\"${1:-10%}\"}]}}}" >/dev/null
}

# deployment NAME REPLICAS [CPU]: pause pods asking CPU (default 1) and 1 GiB. With the small NodePool,
# CPU 3 fills a node: every pod needs a NodeClaim of its own.
deployment() {
  kc apply -f - >/dev/null <<JSON
{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"$1","namespace":"default"},
 "spec":{"replicas":$2,"selector":{"matchLabels":{"app":"$1"}},"template":{"metadata":{"labels":{"app":"$1"}},
 "spec":{"terminationGracePeriodSeconds":5,"containers":[{"name":"app","image":"registry.k8s.io/pause:3.10",
 "resources":{"requests":{"cpu":"${3:-1}","memory":"1Gi"}}}]}}}}
JSON
}

# running_is APP N: exactly N pods of the Deployment APP run.
running_is() { [[ "$(running_pods -l "app=$1")" == "$2" ]]; }

# settled: NodeClaims, Nodes and running instances agree, and every NodeClaim is Ready.
settled() {
  local claims nodes instances
  claims="$(count nodeclaims)" nodes="$(count nodes)" instances="$(live_instances)"
  [[ "$claims" == "$nodes" && "$nodes" == "$instances" ]] || return 1
  kc get nodeclaims -o json | jq -e 'all(.items[]; any(.status.conditions[]?; .type == "Ready" and .status == "True"))' \
    >/dev/null
}

# no_empty_nodes APP: every Node runs at least one pod of APP (nothing was launched for nothing).
no_empty_nodes() {
  local used nodes
  used="$(kc get pods -l "app=$1" -o json | jq -r '.items[].spec.nodeName // empty' | sort -u | wc -l)"
  nodes="$(count nodes)"
  [[ "$used" == "$nodes" ]] || fail "$((nodes - used)) of $nodes nodes run no pod of $1"
}

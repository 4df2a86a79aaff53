#!/usr/bin/env bash
# A stock kubectl against the Kubernetes simulator of `luaprov sim`: get nodes, apply a NodePool
# (--validate=false: the simulator has no /openapi/v3 yet), get it as JSON, delete it. Skipped (exit 0
# with a message) when kubectl is not installed.
source "$(dirname "$0")/lib.sh"

if ! command -v kubectl >/dev/null 2>&1; then
  echo "SKIP: kubectl is not installed"
  exit 0
fi

OUT="$WORK/sim.out"
"$LUAPROV" sim --log-format json >"$OUT" 2>"$ENGINE_LOG" &
ENGINE_PID=$!
for _ in $(seq 1 100); do
  [[ -s "$OUT" ]] && break
  kill -0 "$ENGINE_PID" 2>/dev/null || fail "luaprov sim exited during start"
  sleep 0.05
done
K="$(sed -n 's/.*"kubernetes":"\([^"]*\)".*/\1/p' "$OUT")"
[[ -n "$K" ]] || fail "no kubernetes endpoint: $(cat "$OUT")"
export KUBECONFIG="$WORK/kubeconfig" HOME="$WORK"
kc() { kubectl --server "$K" --insecure-skip-tls-verify --request-timeout=10s "$@"; }

curl -sf -X POST "$K/api/v1/nodes" -d '{"metadata":{"name":"node-a","labels":{"zone":"a"}}}' >/dev/null \
  || fail "create node"
kc get nodes >"$WORK/nodes.txt" 2>&1 || fail "kubectl get nodes: $(cat "$WORK/nodes.txt")"
grep -q '^node-a' "$WORK/nodes.txt" || fail "get nodes lists node-a: $(cat "$WORK/nodes.txt")"

cat >"$WORK/nodepool.yaml" <<'YAML'
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: general
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.alibabacloud, kind: ECSNodeClass, name: default}
YAML
kc apply --validate=false -f "$WORK/nodepool.yaml" >"$WORK/apply.txt" 2>&1 || fail "apply: $(cat "$WORK/apply.txt")"
kc get nodepools -o json >"$WORK/np.json" 2>&1 || fail "get nodepools: $(cat "$WORK/np.json")"
grep -q '"name": "general"' "$WORK/np.json" || fail "nodepool listed: $(cat "$WORK/np.json")"
kc delete nodepool general >"$WORK/delete.txt" 2>&1 || fail "delete: $(cat "$WORK/delete.txt")"
CODE="$(curl -s -o /dev/null -w '%{http_code}' "$K/apis/karpenter.sh/v1/nodepools/general")"
[[ "$CODE" == "404" ]] || fail "nodepool still there after delete: $CODE"

kill -TERM "$ENGINE_PID"
wait "$ENGINE_PID" || fail "luaprov sim exit status"
echo "kubectl against the simulator: ok"

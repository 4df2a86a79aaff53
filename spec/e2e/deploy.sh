#!/usr/bin/env bash
# examples/deploy against a real API server: everything it holds (CRDs, RBAC, namespace, ConfigMap,
# Deployment) applies with strict server-side validation; the CRDs are structural, so the server
# applies their defaults; the getting-started ECSNodeClass and NodePool are accepted; invalid objects
# are refused with the CRD's own message.
source "$(dirname "$0")/lib.sh"

step "control plane"
cluster_up

step "kubectl apply --server-side -k examples/deploy"
kc apply --server-side --field-manager e2e --validate=strict -k "$ROOT/examples/deploy" >"$WORK/apply.out" 2>&1 \
  || { cat "$WORK/apply.out" >&2; fail "examples/deploy did not apply"; }
for crd in nodepools.karpenter.sh nodeclaims.karpenter.sh ecsnodeclasses.karpenter.alibabacloud.com ecsnodeclasses.karpenter.k8s.alibabacloud; do
  kc wait --for condition=Established --timeout 60s "crd/$crd" >/dev/null || fail "$crd not established"
  kc get crd "$crd" -o json | jq -e '.status.conditions[] | select(.type == "NonStructuralSchema")' >/dev/null \
    && fail "$crd has a non-structural schema"
done
kc -n luaprov get deployment luaprov -o name >/dev/null || fail "the Deployment is missing"
kc -n luaprov get serviceaccount luaprov -o name >/dev/null || fail "the ServiceAccount is missing"
[[ "$(kc auth can-i create nodeclaims.karpenter.sh --as "$LUAPROV_USER" -A)" == yes ]] \
  || fail "the ClusterRoleBinding does not reach the ServiceAccount"
[[ "$(kc auth can-i get secrets --as "$LUAPROV_USER" -A)" == no ]] || fail "luaprov may read Secrets"

step "the getting-started ECSNodeClass and NodePool"
getting_started_objects >"$WORK/getting-started.yaml"
[[ "$(grep -c '^kind:' "$WORK/getting-started.yaml")" == 2 ]] || fail "docs/getting-started.md lost its objects"
kc apply --server-side --field-manager e2e --validate=strict -f "$WORK/getting-started.yaml" >/dev/null \
  || fail "the getting-started objects were refused"
# defaults from the schema, written by the server
kc get nodepool default -o json | jq -e '.spec.disruption.consolidateAfter != null
  and (.spec.disruption.budgets | length) > 0' >/dev/null || fail "NodePool defaults not applied"

step "invalid objects are refused with the CRD's message"
# refused NAME MESSAGE: the YAML on stdin is refused by the server and its answer quotes MESSAGE.
refused() {
  local out
  if out="$(kc apply --server-side --field-manager e2e -f - 2>&1)"; then fail "$1 was accepted"; fi
  grep -qF -- "$2" <<<"$out" || fail "$1: expected \"$2\" in the answer, got: $out"
}
# nodepool NAME CLASS_KIND REQUIREMENT: a NodePool with one requirement (a YAML flow mapping).
nodepool() {
  printf 'apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: %s}\nspec:\n  template:\n    spec:\n' "$1"
  printf '      nodeClassRef: {group: karpenter.alibabacloud.com, kind: %s, name: default}\n' "$2"
  printf '      requirements: [%s]\n' "$3"
}
nodepool restricted ECSNodeClass '{key: karpenter.sh/nodepool, operator: In, values: [x]}' \
  | refused "a NodePool with a restricted requirement key" 'requirement key "karpenter.sh/nodepool" is restricted'
nodepool bogus ECSNodeClass '{key: kubernetes.io/arch, operator: Bogus, values: [amd64]}' \
  | refused "a NodePool with an unknown operator" 'Unsupported value: "Bogus"'
refused "an ECSNodeClass with an empty vSwitch term" "expected at least one, got none, ['tags', 'id']" <<'YAML'
apiVersion: karpenter.alibabacloud.com/v1alpha1
kind: ECSNodeClass
metadata: {name: empty-term}
spec:
  vSwitchSelectorTerms: [{}]
  securityGroupSelectorTerms: [{tags: {a: b}}]
  imageSelectorTerms: [{alias: AlibabaCloudLinux3}]
YAML
refused "an ECSNodeClass with an unknown image family" 'the alias family must be AlibabaCloudLinux3 or ContainerOS' <<'YAML'
apiVersion: karpenter.alibabacloud.com/v1alpha1
kind: ECSNodeClass
metadata: {name: bad-alias}
spec:
  vSwitchSelectorTerms: [{tags: {a: b}}]
  securityGroupSelectorTerms: [{tags: {a: b}}]
  imageSelectorTerms: [{alias: Windows}]
YAML
nodepool default OtherClass '{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}' \
  | refused "an immutable nodeClassRef changed" 'nodeClassRef.kind is immutable'
refused "a NodeClaim without a nodeClassRef" 'spec.nodeClassRef: Required value' <<'YAML'
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: no-class}
spec:
  requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
YAML
echo "e2e deploy: passed" >&2

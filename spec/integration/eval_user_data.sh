#!/usr/bin/env bash
# luaprov eval user-data against `luaprov sim`: the user data a launch would send for an ACK managed
# cluster (the attach command from the simulated Container Service with its node pools' runtime,
# labels, node config, taints), the Custom passthrough, the kubeadm join of cluster type Kubeadm, and
# the errors an operator gets for an unknown cluster or a missing kubeadm token.
source "$(dirname "$0")/lib.sh"

start_alibaba_sim
export ALIBABA_CLOUD_ACCESS_KEY_ID=LTAI5simulatoraccess ALIBABA_CLOUD_ACCESS_KEY_SECRET=simulator-secret-do-not-use
unset LUAPROV_ALIBABA_CLUSTER_TYPE LUAPROV_ALIBABA_ENDPOINT LUAPROV_KUBEADM_CA_CERT_HASH

F="$LUAPROV_SOURCE_DIR/spec/fixtures/alibaba"
# The node class with user data around the separator line.
jq '.spec.userData = "echo before\n#===USERDATA_SEPARATOR===\necho after\n"' "$F/ecsnodeclass.json" \
  > "$WORK/nodeclass.json"

"$LUAPROV" eval user-data --nodeclaim "$F/nodeclaim.json" --nodeclass "$WORK/nodeclass.json" \
  --endpoint "$ENDPOINT" --cluster-id luaprov-sim --capacity-type spot > "$WORK/user-data" \
  || fail "eval user-data: $(cat "$WORK/user-data")"

[[ "$(sed -n 1p "$WORK/user-data")" == "#!/bin/bash" ]] || fail "first line: $(head -1 "$WORK/user-data")"
grep -qx 'echo "Executing preUserData..."' "$WORK/user-data" || fail "no pre part"
grep -qx 'echo before' "$WORK/user-data" || fail "no pre text"
grep -qx 'echo after' "$WORK/user-data" || fail "no post text"
attach="$(grep -- '--openapi-token' "$WORK/user-data")" || fail "no attach command in $(cat "$WORK/user-data")"
[[ "$attach" == "curl -fsSL "*"attach_node.sh | bash -s -- --openapi-token "* ]] || fail "attach line: $attach"
# The runtime of the cluster's default node pool, not the docker the simulated ACK names.
[[ "$attach" == *" --runtime containerd --runtime-version 1.6.38 "* && "$attach" != *docker* ]] \
  || fail "runtime not corrected: $attach"
labels="$(sed 's/.* --labels \([^ ]*\) .*/\1/' <<<"$attach")"
[[ "$labels" == k8s.aliyun.com=true,ack.aliyun.com=luaprov-sim,* ]] || fail "labels: $labels"
[[ ",$labels," == *,karpenter.sh/capacity-type=spot,* ]] || fail "capacity type label: $labels"
[[ ",$labels," == *,karpenter.sh/nodepool=default,* ]] || fail "NodeClaim label: $labels"
[[ "$attach" == *" --taints karpenter.sh/unregistered:NoExecute" ]] || fail "taints: $attach"
config="$(sed 's/.* --node-config \([^ ]*\) .*/\1/' <<<"$attach")"
# every kubelet setting of the class, under its KubeletConfiguration name, keys sorted
[[ "$(base64 -d <<<"$config")" == '{"kubelet_config":{"maxPods":110,"systemReserved":{"cpu":"100m","memory":"200Mi"}}}' ]] \
  || fail "node config: $config"
# The lines in order: shebang, pre, the command, post.
order="$(grep -n -e '^echo before$' -e 'openapi-token' -e '^echo after$' "$WORK/user-data" | cut -d: -f1 | tr '\n' ' ')"
read -r before cmd after <<<"$order"
(( before < cmd && cmd < after )) || fail "order of the parts: $order"
# The simulated Container Service was asked once for the script, once for the node pools.
calls="$(curl -s "$ENDPOINT/_sim/state" | jq -c '[.calls.DescribeClusterAttachScripts, .calls.DescribeClusterNodePools]')"
[[ "$calls" == "[1,1]" ]] || fail "DescribeClusterAttachScripts, DescribeClusterNodePools calls: $calls"

# Custom: spec.userData as it is, no call.
LUAPROV_ALIBABA_CLUSTER_TYPE=Custom "$LUAPROV" eval user-data --nodeclaim "$F/nodeclaim.json" \
  --nodeclass "$WORK/nodeclass.json" --endpoint "$ENDPOINT" > "$WORK/custom" || fail "Custom: $(cat "$WORK/custom")"
[[ "$(cat "$WORK/custom")" == "$(jq -j .spec.userData "$WORK/nodeclass.json")" ]] || fail "Custom: $(cat "$WORK/custom")"

# An unknown cluster: one JSON error naming the action, the API's code and the request ID; exit 1.
got="$("$LUAPROV" eval user-data --nodeclaim "$F/nodeclaim.json" --nodeclass "$WORK/nodeclass.json" \
  --endpoint "$ENDPOINT" --cluster-id c-unknown)" && fail "an unknown cluster should exit 1"
jq -e '.error | test("DescribeClusterAttachScripts: ErrorClusterNotFound: .*RequestId [0-9A-F-]+, HTTP 404")' \
  <<<"$got" >/dev/null || fail "unknown cluster message: $got"
# Kubeadm: the token from LUAPROV_KUBEADM_TOKEN (never a setting), the CA hash from --kubeadm-ca-cert-hash
# (else its variable, else the simulated cluster's), the API server from spec.clusterEndpoint; no call.
jq '.spec.clusterEndpoint = "https://10.0.0.10"' "$WORK/nodeclass.json" > "$WORK/kubeadm-class.json"
HASH="sha256:$(printf 'ab%.0s' $(seq 32))"
calls="$(curl -s "$ENDPOINT/_sim/state" | jq -c '[.calls.DescribeClusterAttachScripts, .calls.DescribeClusterNodePools]')"
LUAPROV_KUBEADM_TOKEN=abc123.0123456789abcdef "$LUAPROV" eval user-data --nodeclaim "$F/nodeclaim.json" \
  --nodeclass "$WORK/kubeadm-class.json" --endpoint "$ENDPOINT" --cluster-type Kubeadm \
  --kubeadm-ca-cert-hash "$HASH" > "$WORK/kubeadm" || fail "Kubeadm: $(cat "$WORK/kubeadm")"
grep -qx 'kubeadm join --config /etc/kubernetes/luaprov/kubeadm-join.json' "$WORK/kubeadm" || fail "Kubeadm: $(cat "$WORK/kubeadm")"
order="$(grep -n -e '^echo before$' -e '^kubeadm join' -e '^echo after$' "$WORK/kubeadm" | cut -d: -f1 | tr '\n' ' ')"
read -r before cmd after <<<"$order"
(( before < cmd && cmd < after )) || fail "Kubeadm: order of the parts: $order"
sed -n "/<<'LUAPROV_JOIN_CONFIGURATION'/,/^LUAPROV_JOIN_CONFIGURATION$/p" "$WORK/kubeadm" | sed '1d;$d' \
  | jq -e --arg h "$HASH" '.discovery.bootstrapToken == {"apiServerEndpoint": "10.0.0.10:6443",
    "token": "abc123.0123456789abcdef", "caCertHashes": [$h]}' >/dev/null || fail "Kubeadm discovery: $(cat "$WORK/kubeadm")"
grep -qx '{"maxPods":110,"systemReserved":{"cpu":"100m","memory":"200Mi"}}' "$WORK/kubeadm" \
  || fail "Kubeadm kubelet patch: $(cat "$WORK/kubeadm")"
calls2="$(curl -s "$ENDPOINT/_sim/state" | jq -c '[.calls.DescribeClusterAttachScripts, .calls.DescribeClusterNodePools]')"
[[ "$calls2" == "$calls" ]] || fail "Kubeadm calls the Container Service: $calls2"
# Without the token: one error naming the variable.
got="$(env -u LUAPROV_KUBEADM_TOKEN "$LUAPROV" eval user-data --nodeclaim "$F/nodeclaim.json" \
  --nodeclass "$WORK/kubeadm-class.json" --cluster-type Kubeadm)" && fail "Kubeadm without a token should exit 1"
jq -e '.error | test("the kubeadm bootstrap token is not set: set LUAPROV_KUBEADM_TOKEN")' <<<"$got" >/dev/null \
  || fail "Kubeadm without a token: $got"
echo "eval user-data: ok"

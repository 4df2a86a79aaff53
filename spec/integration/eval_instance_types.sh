#!/usr/bin/env bash
# luaprov eval instance-types against `luaprov sim`: the shape it prints, rule CP4 on every type, and the
# error an operator gets when the endpoint is wrong.
source "$(dirname "$0")/lib.sh"

start_alibaba_sim
export ALIBABA_CLOUD_ACCESS_KEY_ID=LTAI5simulatoraccess ALIBABA_CLOUD_ACCESS_KEY_SECRET=simulator-secret-do-not-use

"$LUAPROV" eval instance-types --nodeclass "$LUAPROV_SOURCE_DIR/spec/fixtures/alibaba/ecsnodeclass.json" \
  --endpoint "$ENDPOINT" > "$WORK/types.json" || fail "eval instance-types: $(cat "$WORK/types.json")"

# Check the document with jq, an independent JSON reader.
jq -e 'length >= 50' "$WORK/types.json" >/dev/null || fail "at least 50 types"
jq -e 'all(.[]; .capacity.pods and .capacity.cpu and .capacity.memory and .overhead.kube_reserved
  and .overhead.system_reserved and .overhead.eviction_threshold)' "$WORK/types.json" >/dev/null \
  || fail "capacity and overhead on every type"
jq -e 'all(.[]; all(.offerings[]; (.capacity_type == "on-demand" or .capacity_type == "spot")
  and (.available | type == "boolean")))' "$WORK/types.json" >/dev/null || fail "offering shape"
# rule 4: in every zone a type is known in, an offering for both capacity types
jq -e 'all(.[]; [.offerings[] | .zone] | unique as $zones | length >= 1) and
  all(.[]; (.offerings | map(.zone + "/" + .capacity_type) | unique | length)
           == ((.offerings | map(.zone) | unique | length) * 2))' "$WORK/types.json" >/dev/null \
  || fail "an offering per (zone, capacity type)"
jq -e '[.[].offerings[] | select(.available == false)] | length > 0' "$WORK/types.json" >/dev/null \
  || fail "sold-out or vSwitch-less offerings listed as unavailable"
jq -e 'any(.[]; any(.requirements[]; .key == "kubernetes.io/arch" and .values == ["arm64"]))' \
  "$WORK/types.json" >/dev/null || fail "ARM types present"
jq -e 'any(.[]; .capacity["nvidia.com/gpu"] != null)' "$WORK/types.json" >/dev/null || fail "GPU types present"

# A wrong endpoint: one JSON error line naming the action, exit 1.
got="$("$LUAPROV" eval instance-types --nodeclass "$LUAPROV_SOURCE_DIR/spec/fixtures/alibaba/ecsnodeclass.json" \
  --endpoint http://127.0.0.1:1)" && fail "a dead endpoint should exit 1"
[[ "$got" == '{"error":"'*Describe*'"}' ]] || fail "dead endpoint message: $got"
# A cloud error: the message on stdout, its fields on stderr (the cloud's code, the action, the
# request ID), as docs/writing-policies.md#when-eval-fails shows them.
curl -sf -X POST "$ENDPOINT/_sim/faults" -d '{"action":"DescribeInstanceTypes","code":"Forbidden.RAM"}' >/dev/null \
  || fail "fault rule"
got="$("$LUAPROV" eval instance-types --nodeclass "$LUAPROV_SOURCE_DIR/spec/fixtures/alibaba/ecsnodeclass.json" \
  --endpoint "$ENDPOINT" 2>"$WORK/fields.err")" && fail "a refused DescribeInstanceTypes should exit 1"
[[ "$got" == '{"error":"listing instance types: DescribeInstanceTypes: Auth (Forbidden.RAM): '* ]] \
  || fail "refused call message: $got"
rid="$(sed -n 's/.*RequestId \([^,)]*\).*/\1/p' <<<"$got")" # the simulator's answer
[[ -n "$rid" && "$rid" != none ]] || fail "no request ID in: $got"
[[ "$(cat "$WORK/fields.err")" == "  reason: Forbidden.RAM
  action: DescribeInstanceTypes
  request id: $rid" ]] || fail "refused call's fields: $(cat "$WORK/fields.err")"
echo "eval instance-types: ok"

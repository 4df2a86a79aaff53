#!/usr/bin/env bash
# The RBAC of examples/deploy/rbac.yaml against what luaprov did over the whole e2e suite (the audit
# logs the other e2e tests left in LUAPROV_E2E_AUDIT_DIR): the API server refused luaprov nothing,
# and every grant was used at least once (but those rbac_failure_paths.txt names: needed only when
# something fails), so the ClusterRole holds no permission luaprov does not need.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
AUDIT_DIR="${LUAPROV_E2E_AUDIT_DIR:?set LUAPROV_E2E_AUDIT_DIR to the folder of the e2e audit logs}"
logs=()
for t in provisioning termination drift failover spot nodeclass_shapes; do
  [[ -s "$AUDIT_DIR/$t.log" ]] || { echo "FAIL: no audit log of e2e/$t in $AUDIT_DIR (did it run?)" >&2; exit 1; }
  logs+=("$AUDIT_DIR/$t.log")
done
if ! problems="$(lua5.4 "$ROOT/spec/e2e/rbac_coverage.lua" "$ROOT/examples/deploy/rbac.yaml" \
  "$ROOT/spec/e2e/rbac_failure_paths.txt" "${logs[@]}")"; then
  echo "FAIL: examples/deploy/rbac.yaml and luaprov's requests disagree:" >&2
  echo "$problems" >&2
  exit 1
fi
echo "e2e rbac: passed" >&2

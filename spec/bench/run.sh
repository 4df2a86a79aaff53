#!/usr/bin/env bash
# `make bench`: runs every benchmark and prints its figures. Benchmarks never fail on time.
set -euo pipefail
BUILD="${1:-build-bench}"
echo "== machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r)"
echo
echo "== C -> Lua policy call"
"$BUILD/spec/bench_script_call" 200000
echo
echo "== HTTP client"
"$BUILD/spec/bench_http_client" 20000
echo
echo "== hot reload"
"$BUILD/spec/bench_reload" 100
echo
echo "== CloudProvider against the Alibaba simulator"
"$BUILD/spec/bench_cloudprovider"
echo
echo "== controllers: 5,000 NodeClaims and 5,000 Nodes in the informer caches"
"$BUILD/spec/bench_controllers" 5000
echo
echo "== provisioner: 1,000 pending pods against 500 instance types"
"$BUILD/spec/bench_provisioner" 1000 500
echo
echo "== consolidation simulation: 500 nodes, 5,000 pods, 500 instance types"
"$BUILD/spec/bench_consolidation" 500 10 500
echo
echo "== drift: passes over 5,000 NodeClaims (time, cloud API calls)"
"$BUILD/spec/bench_drift" 5000
echo
echo "== externalgrpc NodeGroup service (grpc-js client)"
if [[ -d spec/grpc/node_modules/@grpc/grpc-js ]]; then
  node spec/bench/bench_nodegroup.js "$BUILD/luaprov"
else
  echo "(skipped: the client needs npm ci --prefix spec/grpc)"
fi

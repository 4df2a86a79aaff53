#!/usr/bin/env bash
# Self anti-affinity (Karpenter's performance suite, "self anti-affinity"): 500 pods of 0.9 CPU /
# 3.1 GiB that may not share a node (required anti-affinity over kubernetes.io/hostname): 500 nodes.
source "$(dirname "$0")/lib.sh"
bench_up
start_clock
bench_deployment small-resource-app 500 900m 3100Mi anti-affinity
result scale-out "$(wait_bound 500 1800)"

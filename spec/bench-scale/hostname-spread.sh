#!/usr/bin/env bash
# Hostname spread (Karpenter's performance suite, "Host Name Spreading"): the basic scale-out with the
# small Deployment spread over nodes (maxSkew 1 over kubernetes.io/hostname); 1,000 pods bound.
source "$(dirname "$0")/lib.sh"
bench_up
start_clock
bench_deployment small-resource-app 500 900m 3100Mi hostname-spread
bench_deployment large-resource-app 500 3500m 28Gi
result scale-out "$(wait_bound 1000 1800)"

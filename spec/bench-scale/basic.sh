#!/usr/bin/env bash
# Basic scale-out (Karpenter's performance suite, "Basic Deployment"): two Deployments of 500 pods,
# 0.9 CPU / 3.1 GiB and 3.5 CPU / 28 GiB, applied at once; measured until all 1,000 pods are bound.
source "$(dirname "$0")/lib.sh"
bench_up
start_clock
bench_deployment small-resource-app 500 900m 3100Mi
bench_deployment large-resource-app 500 3500m 28Gi
result scale-out "$(wait_bound 1000 1800)"

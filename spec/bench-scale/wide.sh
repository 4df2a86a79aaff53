#!/usr/bin/env bash
# Wide deployments (Karpenter's performance suite, "Wide Deployments"): 30 Deployments, 1,000 pods of
# 30 sizes, every one spread over the zones (maxSkew 1), the first three also anti-affine over
# hostnames, the next three also spread over hostnames; measured until all 1,000 are bound.
source "$(dirname "$0")/lib.sh"
CPUS=(240m 450m 650m 900m 1400m 1900m 2400m 2800m 3300m 3700m
  2300m 900m 1300m 2800m 1800m 1850m 3300m 3800m 225m 450m
  700m 900m 1300m 1800m 2400m 2800m 3400m 3800m 3300m 2800m)
MEMORY=(300Mi 400Mi 700Mi 1Gi 2Gi 4Gi 8Gi 4Gi 16Gi 10Gi
  64Gi 30Gi 32Gi 32Gi 30Gi 20Gi 30Gi 300Mi 500Mi 750Mi
  1Gi 2Gi 4Gi 8Gi 16Gi 32Gi 28Gi 64Gi 13Gi 24Gi)
bench_up
start_clock
for i in $(seq 0 29); do
  replicas=35 shapes=(zone-spread)
  ((i >= 20)) && replicas=30
  ((i < 3)) && shapes+=(anti-affinity)
  ((i >= 3 && i < 6)) && shapes+=(hostname-spread)
  bench_deployment "wide-deployment-$((i + 1))" "$replicas" "${CPUS[$i]}" "${MEMORY[$i]}" "${shapes[@]}"
done
result scale-out "$(wait_bound 1000 1800)"

/* The consolidation simulation (disruption_simulate.c): would the pods of some NodeClaims schedule
 * elsewhere, on the nodes that remain plus at most one new, cheaper NodeClaim? The disruption
 * controller's consolidation methods ask it, many times a pass.
 *
 * A dz_sim is a snapshot of the controllers' caches (nodes, NodeClaims, pods, DaemonSets, NodePools,
 * and the volume claims, volumes and storage classes of the pods) and of the instance types of the node
 * classes they use, taken once; dz_simulate then answers from it alone, synchronously, without I/O, events or
 * logs. The snapshot holds references to what it read, so it stays valid while the caches move on; it does
 * not see their later changes. Loop thread only. */
#ifndef LUAPROV_CONTROLLER_DISRUPTION_SIMULATE_H
#define LUAPROV_CONTROLLER_DISRUPTION_SIMULATE_H

#include <jansson.h>
#include <stddef.h>

#include "controller/controller.h"
#include "core/error.h"

/* Karpenter's MinInstanceTypesForSpotToSpotConsolidation: a single spot node is replaced by a spot node
 * only when at least this many cheaper instance types could be launched, and the replacement keeps the
 * cheapest this many (so a launch that skips an unavailable one cannot land on a type the next pass
 * would consolidate again). */
#define DZ_SPOT_TO_SPOT_MIN_TYPES 15

typedef struct dz_sim dz_sim;

/* Takes a snapshot for consolidation decisions from the caches of c's environment (lp_controller_env):
 * nodes, NodeClaims, pods, DaemonSets, NodePools, and the instance types of the Ready node classes the
 * NodePools and NodeClaims use, fetched with lp_cp_get_instance_types (cached by the provider).
 * ready(ud, sim, err) runs exactly once, later, on the loop (never from inside dz_sim_new): sim (the
 * caller owns it: dz_sim_free) and err NULL, or sim NULL and err (owned by ready) when listing the
 * instance types of a node class failed ("instance types of <Kind> <name>: <why>"). */
void dz_sim_new(lp_controller *c, void (*ready)(void *ud, dz_sim *sim, lp_error *err), void *ud);
/* Frees the snapshot and the references it holds; NULL is ignored. */
void dz_sim_free(dz_sim *sim);

typedef struct dz_sim_result {
  int feasible;             /* the candidates can go: every reschedulable pod of theirs has a place on
                               the remaining nodes, or there and on one replacement cheaper than they
                               are (not cheaper, or a spot rule refusing it, is not feasible: why says
                               so) */
  json_t *replacement;      /* feasible and a new node is needed: {"nodepool": name, "requirements":
                               [... node.kubernetes.io/instance-type In [options cheaper than the
                               candidates, cheapest first], karpenter.sh/capacity-type In [...]],
                               "resources": {"requests": {...}}} (the pods it takes plus its NodePool's
                               DaemonSet overhead); own reference; NULL = delete only */
  double candidates_price;  /* sum of the candidates' current prices (their instance type's offering in
                               the node's zone and capacity type); 0 when one is unknown */
  double replacement_price; /* the worst (highest) launch price over the replacement's options' available
                               compatible offerings; 0 without a replacement */
  char *why;                /* not feasible: why, in words for an Unconsolidatable event ("pod
                               default/web-1 cannot schedule: ...", "replacement would not be cheaper
                               ($0.20 >= $0.18)", "can't replace spot with spot: ..."), malloc'd; else
                               NULL */
} dz_sim_result;

/* Would the reschedulable pods (pv_pod_reschedulable) of the n candidate NodeClaims (borrowed, as
 * cached; bound through status.nodeName) schedule on the capacity that remains — every Ready,
 * schedulable, not deleting node but the candidates', plus NodeClaims on their way — plus at most one new
 * NodeClaim, under every constraint the provisioner applies (provisioner_internal.h: node-affinity
 * terms and preferences, taints, host ports, pod affinity and anti-affinity, topology spread, volume
 * zones), topology counting the cluster's pods without those bound to the candidates? Pending pods
 * compete for that capacity first (sorted with the candidates' pods, as the provisioner sorts); a new
 * NodeClaim holding only pending pods is not the candidates' concern. allow_spot_to_spot: the operator's
 * spotToSpotConsolidation (lp_ctrl_settings). Fills out (the caller frees it with dz_sim_result_free);
 * no failure beyond out->why. */
void dz_simulate(dz_sim *sim, json_t *const *candidates, size_t n, int allow_spot_to_spot,
                 dz_sim_result *out);
/* Frees what out holds and zeroes it. */
void dz_sim_result_free(dz_sim_result *r);

#endif

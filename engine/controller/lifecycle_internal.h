/* Shared by the NodeClaim lifecycle controller's files: lifecycle.c (the reconcile's pipeline, writes
 * of the NodeClaim, liveness), lifecycle_launch.c (launch) and lifecycle_node.c (registration and
 * initialization). One reconcile is one lc_run, handed from step to step as the awaited calls return:
 *
 *   finalizer -> launch -> metadata -> registration -> initialization -> liveness -> status -> done
 *
 * Every step reads and edits r->claim (what this reconcile wants stored) and writes through the
 * lc_* helpers, which carry the resourceVersion of r->stored (the NodeClaim as last seen stored).
 * Loop thread only. */
#ifndef LUAPROV_CONTROLLER_LIFECYCLE_INTERNAL_H
#define LUAPROV_CONTROLLER_LIFECYCLE_INTERNAL_H

#include <jansson.h>

#include "controller/controller.h"
#include "core/cache.h"
#include "core/metrics.h"

#define LC_FINALIZER         "karpenter.sh/termination"
#define LC_LABEL_NODEPOOL    "karpenter.sh/nodepool"
#define LC_LABEL_REGISTERED  "karpenter.sh/registered"
#define LC_LABEL_INITIALIZED "karpenter.sh/initialized"
#define LC_LAUNCHED          "Launched"
#define LC_REGISTERED        "Registered"
#define LC_INITIALIZED       "Initialized"

/* The controller's state (state_new): the launch results not yet known to be stored, and metrics. */
typedef struct lc_state {
  lp_cache *launches;  /* NodeClaim uid -> the NodeClaim Create returned (JSON text), 1 h */
  json_t *nodeclasses; /* lp_cloudprovider_supported_nodeclasses: what "managed" means */
  lp_metric *launched, *registered, *initialized, *disrupted, *nodes_created, *startup;
} lc_state;

typedef struct lc_run lc_run;
typedef void (*lc_step)(lc_run *r);

struct lc_run {
  lp_controller *c;
  lp_ctrl_env *env;
  lc_state *st;
  const char *key;
  json_t *stored; /* the NodeClaim as last seen stored (cache, then each write's answer); never edited */
  json_t *claim;  /* what this reconcile wants stored */
  json_t *node;   /* the Node registration found or patched (as stored), or NULL */
  lc_step next;   /* where a write continues once it succeeded */
  const char *disruption; /* metric reason of a delete in flight */
  lp_error *err;          /* the first failure: the reconcile ends with it (and is retried) */
  double requeue_s;       /* > 0: reconcile again after this many seconds (liveness timers) */
  double now;             /* wall time the reconcile started: every condition it sets uses it */
};

/* ---- lifecycle.c ----------------------------------------------------------------------------- */

/* The NodeClaim's karpenter.sh/nodepool label, or "" (a metrics label value). */
const char *lc_nodepool(const json_t *claim);
/* Writes the NodeClaim's finalizers, labels and annotations when they differ from r->stored, then
 * continues with next (at once when nothing changed); a failed write ends the reconcile. */
void lc_persist_metadata(lc_run *r, lc_step next);
/* Deletes the NodeClaim (precondition: r->stored's resourceVersion), counts
 * luaprov_nodeclaims_disrupted_total{reason} and ends the reconcile. */
void lc_delete_claim(lc_run *r, const char *reason);
/* Launch is over (or needed nothing): store the metadata it produced, then register. */
void lc_launch_done(lc_run *r);
/* Registration and initialization are over: liveness, then the status, then the end. */
void lc_node_done(lc_run *r);

/* ---- lifecycle_launch.c ---------------------------------------------------------------------- */

/* Launches the NodeClaim's instance unless it has one; ends with lc_launch_done or a delete. */
void lc_launch(lc_run *r);

/* ---- lifecycle_node.c ------------------------------------------------------------------------ */

/* Registers the launched NodeClaim's Node, then initializes it; ends with lc_node_done. */
void lc_register(lc_run *r);

#endif

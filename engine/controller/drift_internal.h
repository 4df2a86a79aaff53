/* Shared by the drift controller's files: drift.c (the definition, the reconcile pipeline, the
 * Drifted condition and its metrics) and drift_checks.c (the four checks, in order). Not a
 * public interface.
 *
 * One reconcile of a launched NodeClaim is a drift_run, handed from check to check as awaited calls
 * (GetInstanceTypes, IsDrifted) return; the first check that finds drift ends the chain with
 * drift_verdict. Loop thread only. */
#ifndef LUAPROV_CONTROLLER_DRIFT_INTERNAL_H
#define LUAPROV_CONTROLLER_DRIFT_INTERNAL_H

#include <jansson.h>

#include "controller/controller.h"
#include "core/cache.h"
#include "core/metrics.h"

#define DRIFT_CONDITION           "Drifted"
#define DRIFT_LABEL_POOL          "karpenter.sh/nodepool"
#define DRIFT_ANNOTATION_REPLACES "luaprov.io/replaces" /* on a replacement: the NodeClaim it replaces */
/* Karpenter's drift timings are 5 min (re-evaluation, IsDrifted cache), 30 min (instance types) and
 * 1 h (minimum age for InstanceTypeNotFound); here they scale with settings.nodeclass_resync_s
 * (default 300 s = 5 min), the period at which a node class, the main cause of drift, is resolved
 * again: checking more often than the class can change gains nothing. */
#define DRIFT_TYPES_TTL_FACTOR 6.0
#define DRIFT_MIN_AGE_FACTOR   12.0

/* An instance-type fetch in flight for one node class, and the runs waiting for it. */
typedef struct drift_fetch drift_fetch;
/* An IsDrifted asked in a batch for a NodeClaim (drift_checks.c), kept until its reconcile takes it. */
typedef struct drift_ask drift_ask;

/* The controller's state (state_new). */
typedef struct drift_state {
  lp_cache *policy;     /* NodeClaim uid -> "<node class rv>\n<script generation>\n<reason>", TTL resync */
  json_t *types;        /* node class name -> {"at": monotonic, "types": {name: {"zone|ct": true}}} */
  drift_fetch *fetches; /* GetInstanceTypes calls in flight, one per node class */
  drift_ask *asks;      /* IsDrifted asked in batches: in flight, or answered and not taken yet */
  json_t *nodeclasses;  /* lp_cloudprovider_supported_nodeclasses: what "managed" means */
  json_t *drifted;      /* NodeClaim name -> NodePool, for every cached Drifted=True NodeClaim */
  json_t *drifted_per_pool; /* NodePool -> count of the above */
  lp_metric *evaluations;   /* luaprov_drift_evaluations_total{result} */
  lp_metric *marked;        /* luaprov_drift_marked_total{reason} */
  lp_metric *gauge;         /* luaprov_nodeclaims_drifted{nodepool} */
  lp_metric *unresolvable;  /* luaprov_drift_unresolvable_total{reason} */
  double resync_s;          /* settings.nodeclass_resync_s */
  lp_controller *c;
  uv_timer_t *reload_watch; /* notices a new script generation: every NodeClaim is evaluated again */
  uint64_t generation;      /* the generation last seen by reload_watch */
} drift_state;

typedef struct drift_run drift_run;
typedef void (*drift_step)(drift_run *r);

struct drift_run {
  lp_controller *c;
  lp_ctrl_env *env;
  drift_state *st;
  const char *key;
  json_t *claim;     /* the cached NodeClaim (own reference) */
  json_t *nodepool;  /* its NodePool (own reference) */
  json_t *nodeclass; /* its node class (own reference), or NULL when it is not cached */
  drift_step next;   /* where an instance-type fetch continues */
  char *record;      /* the NodePool annotation being written (malloc'd), or NULL */
  drift_run *next_waiter;
  double now; /* wall time the reconcile started */
};

/* What a reconcile concluded. */
typedef enum {
  DRIFT_CLEAN,   /* not drifted: the condition is removed */
  DRIFT_FOUND,   /* drifted for reason: the condition is set */
  DRIFT_UNKNOWN, /* not known yet (policy said so, instance gone): the condition is left as it is */
} drift_outcome;

/* ---- drift.c ------------------------------------------------------------------------------- */

/* The NodePool of claim (borrowed) when the controller evaluates claim: claim cached, not being deleted,
 * of a node class this provider serves, its NodePool cached; otherwise NULL. */
json_t *drift_nodepool_of(drift_state *st, lp_ctrl_env *env, const json_t *claim);

/* Ends the run: writes the Drifted condition when the outcome changes it (reason and message are
 * copied; NULL unless DRIFT_FOUND), counts and logs. err (owned) instead fails the reconcile. */
void drift_verdict(drift_run *r, drift_outcome outcome, const char *reason, const char *message,
                   lp_error *err);

/* ---- drift_checks.c ------------------------------------------------------------------------ */

/* Runs the checks in order on a launched NodeClaim: static (NodePool hash), requirements, instance
 * type not found, the provider's IsDrifted; ends with drift_verdict. */
void drift_check(drift_run *r);
/* Frees the answers asked in batches that no reconcile took (state_free: none is in flight then, every
 * batch's reconcile having ended). */
void drift_asks_free(drift_state *st);

#endif

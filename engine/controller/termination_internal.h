/* Shared by the termination controller's files: termination.c (the definition, the finalize sequence,
 * Nodes deleted by users) and termination_drain.c (cordon and drain). Not a public interface.
 *
 * One reconcile of a deleting NodeClaim is a term_op that walks steps; a step may send several
 * requests at once (one per Node or Pod) and the next step runs when the last of them answered
 * (term_batch_*). Every request's callback runs on the loop, never inside the call that sent it. */
#ifndef LUAPROV_CONTROLLER_TERMINATION_INTERNAL_H
#define LUAPROV_CONTROLLER_TERMINATION_INTERNAL_H

#include <jansson.h>

#include "controller/controller.h"
#include "core/error.h"
#include "core/metrics.h"

#define TERM_FINALIZER           "karpenter.sh/termination"
#define TERM_ANNOTATION_DEADLINE "karpenter.sh/nodeclaim-termination-timestamp"
#define TERM_LABEL_NODEPOOL      "karpenter.sh/nodepool"

/* The controller's state (lp_controller_state). */
typedef struct term_state {
  json_t *last_failed_draining; /* nodeclaim key -> lp_env_monotonic of its last FailedDraining report */
  /* nodeclaim key -> {pod key -> {uid, delay, at}}: pods whose eviction a PodDisruptionBudget refused,
   * the delay of their last retry and when (lp_env_monotonic) the next is due */
  json_t *evict_backoff;
  lp_metric *evictions;         /* luaprov_pods_evictions_total{result} */
  lp_metric *nodes_terminated;  /* luaprov_nodes_terminated_total{nodepool} */
  lp_metric *claims_terminated; /* luaprov_nodeclaims_terminated_total{nodepool} */
  lp_metric *claim_duration;    /* luaprov_nodeclaims_termination_duration_seconds{nodepool} */
} term_state;

typedef struct term_op term_op;
typedef void (*term_step_fn)(term_op *op);

/* One reconcile of a deleting NodeClaim. */
struct term_op {
  lp_controller *c;
  lp_ctrl_env *env;
  term_state *st;
  const char *key;   /* the framework's, valid until lp_controller_done */
  const char *log;   /* lp_controller_logger(c) */
  json_t *claim;     /* our copy of the NodeClaim, replaced by the answer of each write to it */
  json_t *nodes;     /* the cached Nodes carrying the claim's providerID (references) */
  double now;        /* wall time when the reconcile started */
  double deadline;   /* wall time after which pods are deleted whatever their PDBs; < 0: none */
  size_t pending;    /* answers the current step still waits for (+1 while it is sending) */
  term_step_fn next; /* runs when pending drops to 0, or after a status write */
  term_step_fn then; /* where term_drain goes once every pod has left */
  lp_error *err;     /* the first failure of the current step */
  size_t waiting;    /* pods still to leave the claim's Nodes */
  char *blocked;     /* "pod: server message" of the first eviction a PDB refused in this pass */
  json_t *backoff;   /* the drain pass's eviction backoffs (term_state.evict_backoff's next entry) */
  size_t backed_off; /* waiting pods only a backoff holds back (the others are looked at every pass) */
  double retry_in;   /* seconds until the earliest backed-off eviction is due; INFINITY when none */
};

/* ---- termination.c -------------------------------------------------------------------------- */

/* A step of several requests: term_batch_open counts as one request being sent, term_batch_add one
 * more per request; each answer (and the sender, once it has sent everything) calls term_batch_end,
 * and the last one runs next. */
void term_batch_open(term_op *op, term_step_fn next);
void term_batch_add(term_op *op);
void term_batch_end(term_op *op);
/* Ends the reconcile: lp_controller_done with op->err (or err) and requeue_s, then frees op. */
void term_finish(term_op *op, lp_error *err, double requeue_s);
/* Sets the condition on op->claim and, when that changed anything, merge-patches the status (with the
 * claim's resourceVersion); then runs next, or ends the reconcile with the write's error. */
void term_set_condition(term_op *op, const char *type, const char *status, const char *reason,
                        const char *message, term_step_fn next);
/* The NodePool label of obj ("" when none), for metric labels. */
const char *term_nodepool(const json_t *obj);

/* ---- termination_drain.c -------------------------------------------------------------------- */

/* Cordons every Node of op (unschedulable + karpenter.sh/disrupted:NoSchedule), then evicts (or, past
 * the deadline, deletes) the pods that must leave; sets Drained and either ends the reconcile with a
 * requeue (pods remain) or runs next. */
void term_drain(term_op *op, term_step_fn next);

#endif

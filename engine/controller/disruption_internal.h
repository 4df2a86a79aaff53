/* Shared by the disruption controller's files: disruption.c (the definition and the pass: what is in
 * progress, budgets, the methods in their order, the decision waiting for its validation),
 * disruption_candidates.c (what a NodeClaim is as a candidate: do-not-disrupt, reschedulable pods,
 * disruption cost, consolidation policy), disruption_consolidate.c (which candidates a method picks:
 * emptiness within budgets, the prefix search of multi-node and the first of single-node
 * consolidation), disruption_budget.c (NodePool disruption budgets) and disruption_replace.c (the
 * replacement NodeClaim and the writes of each action). disruption.c calls the others; of them only
 * disruption_replace.c calls back (dz_action_done). Not a public interface. Loop thread only. */
#ifndef LUAPROV_CONTROLLER_DISRUPTION_INTERNAL_H
#define LUAPROV_CONTROLLER_DISRUPTION_INTERNAL_H

#include <jansson.h>

#include "controller/controller.h"
#include "controller/drift_replacement.h"
#include "core/error.h"
#include "core/metrics.h"

#define DZ_ANNOTATION_REPLACES       "luaprov.io/replaces" /* on a replacement: the NodeClaim it replaces */
#define DZ_ANNOTATION_REPLACED_BY    "luaprov.io/replaced-by"       /* on a candidate: its replacement */
#define DZ_ANNOTATION_REASON         "luaprov.io/disruption-reason" /* on a consolidation's replacement */
#define DZ_ANNOTATION_DO_NOT_DISRUPT "karpenter.sh/do-not-disrupt"
#define DZ_LABEL_POOL                "karpenter.sh/nodepool"
#define DZ_REASON                    "Drifted" /* the budget reason and condition drift acts on */
#define DZ_METRIC_REASON             "drifted" /* luaprov_nodeclaims_disrupted_total{reason} */
#define DZ_REASON_EMPTY              "Empty"
#define DZ_REASON_UNDERUTILIZED      "Underutilized"
#define DZ_CONSOLIDATABLE            "Consolidatable" /* the NodeClaim condition consolidation needs */
#define DZ_TAINT_DISRUPTED           "karpenter.sh/disrupted"
/* A consolidation decision (emptiness, multi- or single-node) acts only this long after it was made, on
 * the controllers' clock (lp_env_monotonic), if it still holds then. */
#define DZ_VALIDATE_AFTER_S 15.0
/* A replacement on its way that the cache has not shown this long after its POST (or its last check) is
 * asked for by name (DZ_CHECK): the watch normally shows it within a second, and one reconnecting after
 * an API server restart within a minute. On the controllers' clock (lp_env_monotonic). */
#define DZ_CHECK_AFTER_S 60.0

/* What a NodePool's spec.disruption.consolidationPolicy and consolidateAfter let consolidation do. */
typedef enum {
  DZ_CONSOLIDATE_NEVER = 0,     /* consolidateAfter "Never", or a policy this engine does not know */
  DZ_CONSOLIDATE_EMPTY,         /* WhenEmpty: only nodes without reschedulable pods */
  DZ_CONSOLIDATE_UNDERUTILIZED, /* WhenEmptyOrUnderutilized (the default): empty and underutilized */
} dz_policy;

/* A NodeClaim the pass may disrupt: Initialized=True, not being deleted, of a cached NodePool, neither
 * marked nor being replaced, no failed replacement waiting (disruption_candidates.c fills it in). The
 * objects are borrowed from the caches: valid during the synchronous part of the pass only. */
typedef struct dz_candidate {
  json_t *claim, *nodepool, *node; /* node: its cached Node, or NULL */
  const char *name, *pool;
  size_t pods;        /* reschedulable pods on its node (dz_pod_reschedulable) */
  double cost;        /* disruption cost: cheapest to disrupt first */
  int drifted;        /* Drifted=True */
  int consolidatable; /* Consolidatable=True */
  dz_policy policy;   /* its NodePool's */
  char *blocked;      /* why it may not be disrupted (do-not-disrupt), malloc'd, or NULL */
} dz_candidate;

/* The controller's state (state_new). */
typedef struct dz_state {
  json_t *failed;          /* candidate name -> wall time its last replacement was abandoned */
  json_t *tainted;         /* candidate name -> lp_env_monotonic when its Node was tainted: a stale-taint
                              sweep leaves it alone DZ_CHECK_AFTER_S (the cache may lag its delete) */
  json_t *on_its_way;      /* candidate name -> {"replacement": name, "at": lp_env_monotonic of its POST or
                              last check, "unanswered": its creation was never confirmed, "for": the drift
                              reason of a drift replacement}: replacements POSTed that the cache has not
                              shown yet (disruption_replace.c) */
  lp_metric *disrupted;    /* luaprov_nodeclaims_disrupted_total{reason, nodepool} */
  lp_metric *allowed;      /* luaprov_disruption_budgets_allowed{nodepool} */
  lp_metric *replacements; /* luaprov_disruption_replacements_total{result} */
  lp_metric *lost_answers; /* luaprov_disruption_lost_answers_total{outcome} */
  lp_metric *decisions;    /* luaprov_voluntary_disruption_decisions_total{decision, reason,
                              consolidation_type} */
  lp_metric *eligible;     /* luaprov_voluntary_disruption_eligible_nodes{reason} */
  lp_metric *evaluation;   /* luaprov_voluntary_disruption_decision_evaluation_duration_seconds{method,
                              consolidation_type} */
  json_t *pending;         /* the decision waiting for its validation, or NULL: {"method", "reason",
                              "type" (consolidation_type), "claims": [names], "at": lp_env_monotonic
                              when it was made} */
} dz_state;

typedef enum {
  DZ_REPLACE,    /* launch a replacement for a candidate, then mark the candidate */
  DZ_ADOPT,      /* a replacement exists but the candidate was never marked (a restart in between) */
  DZ_DELETE_OLD, /* the replacement initialized: delete the candidate */
  DZ_ABANDON,    /* the replacement failed: delete it if it is still there, then drop the mark */
  DZ_CHECK,      /* a replacement on its way, not cached DZ_CHECK_AFTER_S after its POST: asked for by
                    name; found, the candidate is marked with it, else it is forgotten */
  DZ_DELETE,     /* a validated delete decision: taint the candidate's Node karpenter.sh/disrupted:
                    NoSchedule, then delete the candidate (termination drains it) */
  DZ_UNTAINT,    /* a Node tainted karpenter.sh/disrupted whose NodeClaim is neither deleting, marked,
                    replaced nor has a replacement on its way (a crash between taint and create, a refused
                    create): the taint removed */
} dz_kind;

typedef struct dz_pass dz_pass;

/* One write (or two) the pass decided on. */
typedef struct dz_action {
  dz_pass *p;
  dz_kind kind;
  json_t *claim;  /* the candidate NodeClaim, as cached (own reference) */
  json_t *claims; /* DZ_REPLACE: every candidate the one replacement replaces, claims[0] == claim (own);
                     NULL: claim alone */
  size_t step;    /* DZ_REPLACE, DZ_CHECK, DZ_ADOPT: the candidate of claims the chain is at */
  size_t marked;  /* DZ_REPLACE: candidates marked replaced-by */
  void (*then)(struct dz_action *a); /* what follows a taint's patch */
  const json_t *tainting; /* the candidate whose Node's taint is being patched (borrowed from claims) */
  int taint_on;           /* 1: adding the taint, 0: removing it */
  json_t *nodepool;       /* DZ_REPLACE: its NodePool (own reference) */
  json_t *replacement;    /* the replacement NodeClaim when there is one (own reference), else NULL */
  char *why;              /* DZ_ABANDON: what went wrong, for the event and the log */
  int retried;            /* DZ_REPLACE: POSTed a second time after an answer that said nothing */
  const char *reason; /* DZ_DELETE, DZ_REPLACE, DZ_DELETE_OLD: the decision's reason (DZ_REASON_EMPTY, ...),
                         static; NULL = DZ_REASON (drift) */
  const char *type;   /* DZ_DELETE, DZ_REPLACE: luaprov_voluntary_disruption_decisions_total's
                         consolidation_type ("" for drift) */
  json_t *shape;      /* DZ_REPLACE by consolidation: dz_sim_result.replacement (own), else NULL */
  const char *method; /* DZ_REPLACE, DZ_DELETE: the method that decided, as the disruption policy's
                         ctx.method names it ("emptiness", "drift", ...), static */
  int disrupted;      /* DZ_DELETE: the policy allowed it and its delete was accepted (the decision counts
                         and logs only those) */
} dz_action;

struct dz_pass {
  lp_controller *c;
  lp_ctrl_env *env;
  dz_state *st;
  const char *key;
  dz_action *actions;
  size_t nactions, cap, next, in_flight;
  lp_error *err;        /* the first failed action: the pass ends with it (retried with backoff) */
  double now;           /* wall time the pass started */
  double mono;          /* lp_env_monotonic when the pass started: the times of replacements on their way */
  double requeue_after; /* > 0: the pass runs again this soon (a decision waiting for its validation) */
  int waiting;          /* a consolidation snapshot is on its way: it starts the actions once done */
};

/* ---- disruption.c ---------------------------------------------------------------------------- */

/* An action ended (err owned; NULL on success): the next one starts, the last ends the pass. */
void dz_action_done(dz_action *a, lp_error *err);

/* ---- disruption_candidates.c ----------------------------------------------------------------- */

/* Non-zero for a pod that would have to find another node if its node went: bound, not finished, not
 * being deleted, not owned by a DaemonSet, not a mirror pod. */
int dz_pod_reschedulable(const json_t *pod);
/* The consolidation the NodePool allows. */
dz_policy dz_policy_of(const json_t *nodepool);
/* The cached PodDisruptionBudgets, indexed by namespace with their selectors parsed, once a pass (the
 * caller frees it with dz_pdbs_free; NULL is ignored there). Valid while the pass runs synchronously. */
typedef struct dz_pdbs dz_pdbs;
dz_pdbs *dz_pdbs_new(lp_ctrl_env *env);
void dz_pdbs_free(dz_pdbs *pdbs);
/* Fills in cd for claim of nodepool (borrowed) at wall time now: its Node, reschedulable pods, cost,
 * conditions, policy and whether karpenter.sh/do-not-disrupt or a PodDisruptionBudget of pdbs blocks
 * it. dz_candidate_clear frees. */
void dz_candidate_fill(lp_ctrl_env *env, const dz_pdbs *pdbs, dz_candidate *cd, json_t *claim,
                       json_t *nodepool, double now);
void dz_candidate_clear(dz_candidate *cd);
/* Why karpenter.sh/do-not-disrupt on obj (what: "NodeClaim x", "Node y", "Pod ns/z") blocks it at wall
 * time now, malloc'd, or NULL when it does not: "true" blocks always; a Go duration ("30m", "1h30m")
 * until start (the object's start, seconds since the epoch; < 0 unknown: blocks) plus the duration;
 * any other value blocks, the message saying it is not understood. */
char *dz_do_not_disrupt(const json_t *obj, const char *what, double start, double now);
/* Sorts candidates cheapest to disrupt first (cost, then name). */
void dz_sort_by_cost(dz_candidate **v, size_t n);

/* ---- disruption_consolidate.c ------------------------------------------------------------------ */

/* left is a budget per NodePool: name -> what it still allows (a JSON object of integers).
 * Emptiness: of candidates (any order), those that are empty (no reschedulable pods), Consolidatable,
 * of a pool whose policy consolidates, not blocked, within left (decremented for each one taken),
 * into out (room for n); returns how many. blocked_fn (may be NULL) is told of the empty, consolidatable
 * ones held back: by do-not-disrupt (why = cd->blocked) or the budget. */
size_t dz_pick_empty(dz_candidate *const *candidates, size_t n, json_t *left, dz_candidate **out,
                     void (*held_fn)(dz_candidate *cd, const char *why, void *ud), void *ud);
/* Non-zero when cd is one emptiness would take (ignoring budgets). */
int dz_is_empty_candidate(const dz_candidate *cd);
/* Non-zero when cd is one consolidation of underutilized nodes would consider (ignoring budgets). */
int dz_is_underutilized_candidate(const dz_candidate *cd);
/* Of candidates sorted cheapest first, those consolidation may consider, within left (decremented),
 * at most max, into out (room for n): how many. */
size_t dz_pick_consolidatable(dz_candidate *const *candidates, size_t n, json_t *left, size_t max,
                              dz_candidate **out);
/* Asks whether the first k of the candidates can be consolidated together (non-zero: yes). */
typedef int (*dz_try_fn)(void *ud, dz_candidate *const *candidates, size_t k);
/* Multi-node consolidation: the largest k >= 2 of n for which try accepts the first k, found by binary
 * search (as Karpenter's: the last accepted midpoint), or 0 when none is accepted. */
size_t dz_multi_prefix(dz_candidate *const *candidates, size_t n, dz_try_fn try_fn, void *ud);
/* Single-node consolidation: the index of the first candidate try accepts alone, or n. */
size_t dz_single_first(dz_candidate *const *candidates, size_t n, dz_try_fn try_fn, void *ud);

/* Drops from a consolidation's replacement shape (dz_sim_result.replacement) the instance-type options
 * that one of the k claims (borrowed) has: how many are left (SIZE_MAX when the shape names none: nothing
 * to compare). */
size_t dz_drop_candidate_types(json_t *shape, json_t *const *claims, size_t k);

/* ---- disruption_budget.c --------------------------------------------------------------------- */

/* How many of the nodepool's total nodes its disruption budgets (spec.disruption.budgets; absent =
 * [{nodes: "10%"}]) let be disrupted for reason at wall time now: the minimum over the budgets that
 * are active and apply to reason (no reasons, or reason among them), a percentage of total rounded
 * up, INT_MAX when none applies. A budget that cannot be read (a bad nodes value, a schedule this
 * engine does not understand, schedule without duration) counts as 0: *problem then gets a malloc'd
 * description of the first such budget (caller frees), else NULL. */
int dz_budget_allowed(const json_t *nodepool, const char *reason, int total, double now, char **problem);

/* ---- disruption_replace.c -------------------------------------------------------------------- */

/* The NodeClaim named name that replaces claim in nodepool (all borrowed); caller owns it. shape NULL:
 * drift's replacement (the template, narrowed as the candidate was). shape a consolidation's
 * ({"requirements", "resources"} of dz_sim_result.replacement): its requirements (the cheaper instance
 * types) and requests instead of the candidate's, and the annotation DZ_ANNOTATION_REASON = reason, so
 * the deletion that follows is counted under the reason that decided it, even after a restart. replaces:
 * the DZ_ANNOTATION_REPLACES value (the candidates' names, comma-separated), NULL: claim's name. */
json_t *dz_replacement_for(const json_t *claim, const json_t *nodepool, const char *name, const json_t *shape,
                           const char *reason, const char *replaces);
/* Non-zero when the Node (borrowed) carries karpenter.sh/disrupted:NoSchedule. */
int dz_node_disrupted(const json_t *node);
/* The lower-case reason of luaprov_nodeclaims_disrupted_total and the decisions ("empty",
 * "underutilized", "drifted") of a DZ_REASON* reason (NULL: drift). */
const char *dz_metric_reason(const char *reason);
/* The reason a replacement (borrowed) was made for: its DZ_ANNOTATION_REASON, else DZ_REASON (drift). */
const char *dz_replacement_reason(const json_t *replacement);
/* Forgets the replacements on their way that the cache shows now (the replacement itself, or the
 * candidate's mark) and those whose candidate is gone or being deleted: from then on the pass sees
 * them as it sees any other. */
void dz_forget_arrived(dz_pass *p);
/* Tells gate (drift_replacement.h) of the drift replacements POSTed that the cache does not show yet. */
void dz_gate_on_its_way(dz_pass *p, lp_drift_gate *gate);
/* Starts the action's writes; ends, now or later, with dz_action_done. A voluntary disruption (DZ_REPLACE,
 * DZ_DELETE) first asks the Lua disruption policy (lp_cp_can_disrupt): vetoed, a DisruptionBlocked event
 * with its why; the policy failing, a Warning DisruptionPolicyFailed (fail closed); either way the
 * candidate is left alone and the action ends without an error. */
void dz_act(dz_action *a);

#endif

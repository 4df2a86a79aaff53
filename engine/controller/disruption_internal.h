/* Shared by the disruption controller's files: disruption.c (the definition and the pass: candidates,
 * budgets, what to do), disruption_budget.c (NodePool disruption budgets) and disruption_replace.c
 * (the replacement NodeClaim and the writes of each action). Not a public interface. Loop thread only. */
#ifndef LUAPROV_CONTROLLER_DISRUPTION_INTERNAL_H
#define LUAPROV_CONTROLLER_DISRUPTION_INTERNAL_H

#include <jansson.h>

#include "controller/controller.h"
#include "core/error.h"
#include "core/metrics.h"

#define DZ_ANNOTATION_REPLACES       "luaprov.io/replaces" /* on a replacement: the NodeClaim it replaces */
#define DZ_ANNOTATION_REPLACED_BY    "luaprov.io/replaced-by" /* on a candidate: its replacement */
#define DZ_ANNOTATION_DO_NOT_DISRUPT "karpenter.sh/do-not-disrupt"
#define DZ_LABEL_POOL                "karpenter.sh/nodepool"
#define DZ_REASON                    "Drifted" /* the budget reason and condition this controller acts on */
#define DZ_METRIC_REASON             "drifted" /* luaprov_nodeclaims_disrupted_total{reason} */
/* A replacement on its way that the cache has not shown this long after its POST (or its last check) is
 * asked for by name (DZ_CHECK): the watch normally shows it within a second, and one reconnecting after
 * an API server restart within a minute. On the controllers' clock (lp_env_monotonic). */
#define DZ_CHECK_AFTER_S 60.0

/* The controller's state (state_new). */
typedef struct dz_state {
  json_t *failed;          /* candidate name -> wall time its last replacement was abandoned */
  json_t *on_its_way;      /* candidate name -> {"replacement": name, "at": lp_env_monotonic of its POST or
                              last check, "unanswered": its creation was never confirmed}: replacements
                              POSTed that the cache has not shown yet (disruption_replace.c) */
  lp_metric *disrupted;    /* luaprov_nodeclaims_disrupted_total{reason, nodepool} */
  lp_metric *allowed;      /* luaprov_disruption_budgets_allowed{nodepool} */
  lp_metric *replacements; /* luaprov_disruption_replacements_total{result} */
  lp_metric *lost_answers; /* luaprov_disruption_lost_answers_total{outcome} */
} dz_state;

typedef enum {
  DZ_REPLACE,    /* launch a replacement for a candidate, then mark the candidate */
  DZ_ADOPT,      /* a replacement exists but the candidate was never marked (a restart in between) */
  DZ_DELETE_OLD, /* the replacement initialized: delete the candidate */
  DZ_ABANDON,    /* the replacement failed: delete it if it is still there, then drop the mark */
  DZ_CHECK,      /* a replacement on its way, not cached DZ_CHECK_AFTER_S after its POST: asked for by
                    name; found, the candidate is marked with it, else it is forgotten */
} dz_kind;

typedef struct dz_pass dz_pass;

/* One write (or two) the pass decided on. */
typedef struct dz_action {
  dz_pass *p;
  dz_kind kind;
  json_t *claim;       /* the candidate NodeClaim, as cached (own reference) */
  json_t *nodepool;    /* DZ_REPLACE: its NodePool (own reference) */
  json_t *replacement; /* the replacement NodeClaim when there is one (own reference), else NULL */
  char *why;           /* DZ_ABANDON: what went wrong, for the event and the log */
  int retried;         /* DZ_REPLACE: POSTed a second time after an answer that said nothing */
} dz_action;

struct dz_pass {
  lp_controller *c;
  lp_ctrl_env *env;
  dz_state *st;
  const char *key;
  dz_action *actions;
  size_t nactions, cap, next, in_flight;
  lp_error *err; /* the first failed action: the pass ends with it (retried with backoff) */
  double now;    /* wall time the pass started */
  double mono;   /* lp_env_monotonic when the pass started: the times of replacements on their way */
};

/* ---- disruption.c ---------------------------------------------------------------------------- */

/* An action ended (err owned; NULL on success): the next one starts, the last ends the pass. */
void dz_action_done(dz_action *a, lp_error *err);

/* ---- disruption_budget.c --------------------------------------------------------------------- */

/* How many of the nodepool's total nodes its disruption budgets (spec.disruption.budgets; absent =
 * [{nodes: "10%"}]) let be disrupted for reason at wall time now: the minimum over the budgets that
 * are active and apply to reason (no reasons, or reason among them), a percentage of total rounded
 * up, INT_MAX when none applies. A budget that cannot be read (a bad nodes value, a schedule this
 * engine does not understand, schedule without duration) counts as 0: *problem then gets a malloc'd
 * description of the first such budget (caller frees), else NULL. */
int dz_budget_allowed(const json_t *nodepool, const char *reason, int total, double now, char **problem);

/* ---- disruption_replace.c -------------------------------------------------------------------- */

/* The NodeClaim named name that replaces claim in nodepool (all borrowed); caller owns it. */
json_t *dz_replacement_for(const json_t *claim, const json_t *nodepool, const char *name);
/* Forgets the replacements on their way that the cache shows now (the replacement itself, or the
 * candidate's mark) and those whose candidate is gone or being deleted: from then on the pass sees
 * them as it sees any other. */
void dz_forget_arrived(dz_pass *p);
/* Starts the action's writes; ends, now or later, with dz_action_done. */
void dz_act(dz_action *a);

#endif

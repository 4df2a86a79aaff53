/* The disruption controller ("disruption", singleton key "disruption", a pass every 10 s as Karpenter's
 * disruption controller polls, and at once when a NodeClaim becomes Drifted, Initialized or deleted,
 * or a NodePool changes): replaces drifted nodes within the NodePools' disruption budgets
 * (docs/controllers.md#drift-nodeclaimdrift-and-disruption-disruption).
 *
 * Candidates: NodeClaims Drifted=True and Initialized=True, not being deleted, of a cached NodePool,
 * whose NodeClaim, Node and pods carry no karpenter.sh/do-not-disrupt="true" annotation (a pod that
 * has not finished blocks its node). Oldest drift first (the condition's lastTransitionTime), at most
 * as many per NodePool as its budgets allow for reason Drifted (disruption_budget.c) minus its
 * NodeClaims already being disrupted (deleting, or marked luaprov.io/replaced-by). The budget's
 * percentages count the pool's initialized NodeClaims.
 *
 * A candidate is replaced (disruption_replace.c): a replacement NodeClaim is created under a name of
 * our own, which the lifecycle controller launches, then the candidate is marked
 * luaprov.io/replaced-by=<replacement>, so a restart resumes instead of launching again. Until the cache
 * shows the replacement, the candidate counts as being disrupted and is not chosen again, even when the
 * create's answer was lost (then it is POSTed once more under the same name, and checked by name after
 * DZ_CHECK_AFTER_S). Once the replacement is Initialized=True, the
 * candidate is deleted and the termination controller cordons, drains and deletes it: the pods move
 * to the new node before the old one goes. A replacement that is deleted, or not initialized within
 * settings.registration_timeout_s (15 min) of its creation, is abandoned: deleted, the mark dropped,
 * the candidate tried again on a later pass.
 *
 * Metrics (lp_env_metrics):
 *   luaprov_nodeclaims_disrupted_total{reason="drifted", nodepool}   counter, candidates deleted
 *   luaprov_disruption_budgets_allowed{nodepool}   gauge, disruptions the Drifted budget allows now
 *                                                  (its value minus those in progress, at most the
 *                                                  pool's initialized NodeClaims)
 *   luaprov_disruption_replacements_total{result}  counter, launched | failed
 *   luaprov_disruption_lost_answers_total{outcome} counter, replacement creations whose answer was lost,
 *                                                  settled: exists, created, absent
 * Events (Normal, on the candidate NodeClaim): DisruptionLaunching, DisruptionTerminating,
 * DisruptionBlocked (do-not-disrupt, budget exhausted, replacement failed); Warning
 * InvalidDisruptionBudget on a NodePool whose budget cannot be read (it then allows nothing).
 * Logs (logger controller.disruption, info): "disrupting nodeclaim(s) via replace" (reason, nodeclaim,
 * nodepool, replacement), "deleting replaced nodeclaim, its replacement is initialized",
 * "resuming the replacement of a nodeclaim", "replacement failed, will retry", "replacement creation
 * settled" (nodeclaim, replacement, outcome); warn "invalid disruption budget" (nodepool, error),
 * "replacement creation unanswered, trying again with the same name" and "replacement creation
 * unconfirmed again: ..." (nodeclaim, replacement, code, error). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"
#include "controller/defs.h"
#include "controller/disruption_internal.h"
#include "core/log.h"

#define PASS_INTERVAL_S 10.0
/* A candidate whose replacement failed waits this long before the next one: a launch that fails at once
 * (no capacity) would otherwise be retried on every event the failure itself causes. */
#define RETRY_AFTER_S PASS_INTERVAL_S
#define MAX_IN_FLIGHT 10

static void *state_new(lp_controller *c) {
  lp_metrics *m = lp_env_metrics(lp_controller_env(c));
  dz_state *st = lp_xcalloc(1, sizeof *st);
  st->failed = json_object();
  st->on_its_way = json_object();
  st->disrupted =
      lp_metrics_counter(m, "luaprov_nodeclaims_disrupted_total",
                         "NodeClaims deleted by a controller, by reason.", LP_LABELS("reason", "nodepool"));
  st->allowed =
      lp_metrics_gauge(m, "luaprov_disruption_budgets_allowed",
                       "Drift disruptions the NodePool's budgets allow now.", LP_LABELS("nodepool"));
  st->replacements = lp_metrics_counter(
      m, "luaprov_disruption_replacements_total",
      "Replacement NodeClaims of drifted nodes, by result (launched, failed).", LP_LABELS("result"));
  st->lost_answers = lp_metrics_counter(
      m, "luaprov_disruption_lost_answers_total",
      "Replacement NodeClaim creations whose answer was lost, by how they settled (exists, created, absent).",
      LP_LABELS("outcome"));
  return st;
}

static void state_free(void *state) {
  dz_state *st = state;
  json_decref(st->failed);
  json_decref(st->on_its_way);
  free(st);
}

/* ---- watches ------------------------------------------------------------------------------- */

static int differs(const json_t *a, const json_t *b, const char *type) {
  return lp_condition_is(a, type, "True") != lp_condition_is(b, type, "True");
}

static void on_change(lp_controller *c, lp_kind kind, const json_t *old_obj, const json_t *new_obj) {
  int wake = 0;
  if (kind == LP_KIND_NODECLAIM) {
    wake = !old_obj || !new_obj || differs(old_obj, new_obj, DZ_REASON) ||
           differs(old_obj, new_obj, "Initialized") || lp_obj_deleting(old_obj) != lp_obj_deleting(new_obj);
  } else if (kind == LP_KIND_NODEPOOL) {
    wake = !old_obj || !new_obj ||
           !json_equal(json_object_get(old_obj, "spec"), json_object_get(new_obj, "spec"));
    if (!new_obj && lp_obj_name(old_obj)) { /* a pass sets only the pools that exist */
      dz_state *st = lp_controller_state(c);
      lp_gauge_set(st->allowed, LP_LABELS(lp_obj_name(old_obj)), 0);
    }
  }
  if (wake) lp_controller_enqueue(c, "disruption");
}

/* ---- running the actions ---------------------------------------------------------------------- */

static void pass_end(dz_pass *p) {
  for (size_t i = 0; i < p->nactions; i++) {
    dz_action *a = &p->actions[i];
    json_decref(a->claim);
    json_decref(a->nodepool);
    json_decref(a->replacement);
    free(a->why);
  }
  lp_controller_done(p->c, p->key, p->err, 0);
  free(p->actions);
  free(p);
}

static void launch_more(dz_pass *p) {
  while (p->in_flight < MAX_IN_FLIGHT && p->next < p->nactions) {
    p->in_flight++;
    dz_act(&p->actions[p->next++]);
  }
  if (p->in_flight == 0 && p->next == p->nactions) pass_end(p);
}

void dz_action_done(dz_action *a, lp_error *err) {
  dz_pass *p = a->p;
  lp_error_keep_first(&p->err, err);
  p->in_flight--;
  launch_more(p);
}

/* Queues an action (references taken on the objects given). */
static dz_action *add_action(dz_pass *p, dz_kind kind, json_t *claim, json_t *replacement) {
  if (p->nactions == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 8;
    p->actions = lp_xrealloc(p->actions, p->cap * sizeof *p->actions);
  }
  dz_action *a = &p->actions[p->nactions++];
  *a =
      (dz_action){.p = p, .kind = kind, .claim = json_incref(claim), .replacement = json_incref(replacement)};
  return a;
}

/* ---- the pass: what is in progress --------------------------------------------------------------- */

typedef struct scan {
  dz_pass *p;
  json_t *replacing;  /* candidate name -> its replacement (borrowed), from luaprov.io/replaces */
  json_t *total;      /* NodePool -> initialized NodeClaims */
  json_t *disrupting; /* NodePool -> NodeClaims being disrupted */
  json_t *candidates; /* drifted NodeClaims not in progress (borrowed) */
  json_t *left;       /* NodePool -> disruptions its budget still allows in this pass */
} scan;

static void bump(json_t *counts, const char *pool) {
  json_object_set_new(counts, pool, json_integer(json_integer_value(json_object_get(counts, pool)) + 1));
}

static void note_replacement(const char *key, json_t *claim, void *ud) {
  (void)key;
  const char *replaces = lp_obj_annotation(claim, DZ_ANNOTATION_REPLACES);
  if (replaces && !lp_obj_deleting(claim)) json_object_set(ud, replaces, claim);
}

/* A marked candidate: delete it once its replacement initialized, give up on a failed replacement. */
static void follow_up(scan *s, json_t *claim, const char *replacement_name) {
  dz_pass *p = s->p;
  json_t *replacement = lp_env_get(p->env, LP_KIND_NODECLAIM, replacement_name);
  if (replacement && !lp_obj_deleting(replacement) && lp_condition_is(replacement, "Initialized", "True")) {
    add_action(p, DZ_DELETE_OLD, claim, replacement);
    return;
  }
  double timeout = lp_env_settings(p->env)->registration_timeout_s;
  double created = lp_rfc3339_parse(lp_obj_str(replacement, "metadata.creationTimestamp"));
  char *why = NULL;
  if (!replacement || lp_obj_deleting(replacement))
    why = lp_xasprintf("replacement %s was deleted before it initialized", replacement_name);
  else if (created >= 0 && p->now - created > timeout)
    why = lp_xasprintf("replacement %s did not initialize within %.0fs", replacement_name, timeout);
  if (why) add_action(p, DZ_ABANDON, claim, replacement)->why = why;
}

static void scan_claim(const char *key, json_t *claim, void *ud) {
  scan *s = ud;
  const char *pool = lp_obj_label(claim, DZ_LABEL_POOL);
  if (!pool) return;
  if (lp_condition_is(claim, "Initialized", "True")) bump(s->total, pool);
  const char *mark = lp_obj_annotation(claim, DZ_ANNOTATION_REPLACED_BY);
  json_t *replacement = json_object_get(s->replacing, key);
  /* a replacement POSTed that the cache does not show yet (dz_forget_arrived dropped those it shows) */
  json_t *on_its_way = json_object_get(s->p->st->on_its_way, key);
  if (lp_obj_deleting(claim) || mark || replacement || on_its_way) bump(s->disrupting, pool);
  if (lp_obj_deleting(claim)) return;
  if (mark)
    follow_up(s, claim, mark);
  else if (replacement)
    add_action(s->p, DZ_ADOPT, claim, replacement);
  else if (on_its_way) {
    /* its replacement may be stored already: it is not chosen again until that is settled */
    if (s->p->mono - json_real_value(json_object_get(on_its_way, "at")) >= DZ_CHECK_AFTER_S)
      add_action(s->p, DZ_CHECK, claim, NULL);
  } else if (lp_condition_is(claim, DZ_REASON, "True") && lp_condition_is(claim, "Initialized", "True"))
    json_array_append(s->candidates, claim);
}

/* ---- the pass: new candidates ---------------------------------------------------------------- */

typedef struct pod_scan {
  char *why;
  size_t n;
  int found;
} pod_scan;

static int do_not_disrupt(const json_t *obj) {
  const char *v = lp_obj_annotation(obj, DZ_ANNOTATION_DO_NOT_DISRUPT);
  return v && strcmp(v, "true") == 0;
}

static void check_pod(const char *key, json_t *pod, void *ud) {
  pod_scan *ps = ud;
  const char *phase = lp_obj_str(pod, "status.phase");
  if (ps->found || (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))) return;
  if (!do_not_disrupt(pod)) return;
  snprintf(ps->why, ps->n, "Pod \"%s\" has \"%s\" annotation", key, DZ_ANNOTATION_DO_NOT_DISRUPT);
  ps->found = 1;
}

/* Why the candidate may not be disrupted (written into why), or 0 when it may. */
static int blocked(dz_pass *p, const json_t *claim, char *why, size_t n) {
  if (do_not_disrupt(claim)) {
    snprintf(why, n, "Disruption is blocked through the \"%s\" annotation", DZ_ANNOTATION_DO_NOT_DISRUPT);
    return 1;
  }
  const char *node_name = lp_obj_str(claim, "status.nodeName");
  if (!node_name) return 0;
  if (do_not_disrupt(lp_env_get(p->env, LP_KIND_NODE, node_name))) {
    snprintf(why, n, "Node %s has \"%s\" annotation", node_name, DZ_ANNOTATION_DO_NOT_DISRUPT);
    return 1;
  }
  pod_scan ps = {why, n, 0};
  lp_env_index_each(p->env, LP_INDEX_POD_BY_NODE, node_name, check_pod, &ps);
  return ps.found;
}

static double drifted_since(const json_t *claim) {
  return lp_condition_since(claim, DZ_REASON);
}

static int oldest_first(const void *a, const void *b) {
  const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
  double dx = drifted_since(x), dy = drifted_since(y);
  if (dx != dy) return dx < dy ? -1 : 1;
  return strcmp(lp_obj_name(x), lp_obj_name(y));
}

/* The Drifted budget of every cached NodePool, minus what is in progress; sets the gauge. */
static void each_budget(const char *key, json_t *nodepool, void *ud) {
  scan *s = ud;
  dz_pass *p = s->p;
  int total = (int)json_integer_value(json_object_get(s->total, key));
  char *problem = NULL;
  long long allowed = dz_budget_allowed(nodepool, DZ_REASON, total, p->now, &problem);
  if (problem) {
    lp_warn(lp_controller_logger(p->c), "invalid disruption budget", LPF_STR("nodepool", key),
            LPF_STR("error", problem));
    lp_env_event(p->env, nodepool, "Warning", "InvalidDisruptionBudget",
                 "%s; no node of this NodePool is disrupted for drift until it is fixed", problem);
    free(problem);
  }
  if (allowed > total) allowed = total;
  allowed -= json_integer_value(json_object_get(s->disrupting, key));
  if (allowed < 0) allowed = 0;
  lp_gauge_set(p->st->allowed, LP_LABELS(key), (double)allowed);
  json_object_set_new(s->left, key, json_integer(allowed));
}

/* Forgets the failed replacements whose candidates may be tried again. */
static void forget_old_failures(dz_pass *p) {
  const char *key;
  json_t *at;
  void *tmp;
  json_object_foreach_safe(p->st->failed, tmp, key, at) {
    if (p->now - json_real_value(at) >= RETRY_AFTER_S) json_object_del(p->st->failed, key);
  }
}

static void choose(scan *s) {
  dz_pass *p = s->p;
  forget_old_failures(p);
  lp_env_each(p->env, LP_KIND_NODEPOOL, each_budget, s);
  size_t n = json_array_size(s->candidates);
  json_t **order = lp_xcalloc(n ? n : 1, sizeof *order);
  for (size_t i = 0; i < n; i++) order[i] = json_array_get(s->candidates, i);
  qsort(order, n, sizeof *order, oldest_first);
  char why[512];
  for (size_t i = 0; i < n; i++) {
    json_t *claim = order[i];
    const char *pool = lp_obj_label(claim, DZ_LABEL_POOL);
    json_t *nodepool = lp_env_get(p->env, LP_KIND_NODEPOOL, pool);
    json_t *left = json_object_get(s->left, pool);
    /* no NodePool: no template to build a replacement from */
    if (!nodepool || json_object_get(p->st->failed, lp_obj_name(claim))) continue;
    if (blocked(p, claim, why, sizeof why)) {
      lp_env_event(p->env, claim, "Normal", "DisruptionBlocked", "%s", why);
    } else if (json_integer_value(left) <= 0) {
      lp_env_event(p->env, claim, "Normal", "DisruptionBlocked",
                   "No allowed disruptions for disruption reason %s due to blocking budget", DZ_REASON);
    } else {
      json_object_set_new(s->left, pool, json_integer(json_integer_value(left) - 1));
      add_action(p, DZ_REPLACE, claim, NULL)->nodepool = json_incref(nodepool);
    }
  }
  free(order);
}

static void reconcile(lp_controller *c, const char *key) {
  dz_pass *p = lp_xcalloc(1, sizeof *p);
  p->c = c;
  p->env = lp_controller_env(c);
  p->st = lp_controller_state(c);
  p->key = key;
  p->now = lp_env_wall(p->env);
  p->mono = lp_env_monotonic(p->env);
  dz_forget_arrived(p);
  scan s = {p, json_object(), json_object(), json_object(), json_array(), json_object()};
  lp_env_each(p->env, LP_KIND_NODECLAIM, note_replacement, s.replacing);
  lp_env_each(p->env, LP_KIND_NODECLAIM, scan_claim, &s);
  choose(&s);
  json_decref(s.replacing);
  json_decref(s.total);
  json_decref(s.disrupting);
  json_decref(s.candidates);
  json_decref(s.left);
  launch_more(p);
}

const lp_controller_def lp_disruption_controller = {
    .name = "disruption",
    .primary = LP_KIND_NONE,
    .singleton_key = "disruption",
    .resync_s = PASS_INTERVAL_S,
    .on_change = on_change,
    .reconcile = reconcile,
    .state_new = state_new,
    .state_free = state_free,
};

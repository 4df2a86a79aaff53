/* The disruption controller ("disruption", singleton key "disruption", a pass every 10 s as Karpenter's
 * disruption controller polls, and at once when a NodeClaim becomes Drifted, Consolidatable,
 * Initialized or deleted, or a NodePool changes): Karpenter's voluntary disruption within the
 * NodePools' budgets (docs/controllers.md#drift-nodeclaimdrift-and-disruption-disruption).
 *
 * Candidates (disruption_candidates.c): NodeClaims Initialized=True, not being deleted, of a cached
 * NodePool, neither marked luaprov.io/replaced-by nor being replaced, no failed replacement waiting;
 * karpenter.sh/do-not-disrupt on the NodeClaim, its Node or an unfinished pod blocks one ("true", or a
 * duration from the object's start). Methods, in order, the first that decides acting alone:
 *   emptiness        Consolidatable, no reschedulable pods, policy WhenEmpty or WhenEmptyOrUnderutilized;
 *                    budget Empty; deleted (Node tainted karpenter.sh/disrupted:NoSchedule first)
 *   drift            Drifted, oldest first; budget Drifted; replaced 1:1 (below) as the drift gate lets
 *                    (drift_replacement.h: one at a time until one is judged, none once unresolvable)
 *   multi-node       Consolidatable of WhenEmptyOrUnderutilized pools, cheapest first, budget
 *                    Underutilized: the longest prefix (>= 2, <= 100) the simulation (disruption_simulate.c)
 *                    can delete, or replace by one cheaper node not of a candidate's instance type;
 *                    deleted, or all replaced by that one node
 *   single-node      the first of them the simulation can delete; the others get Unconsolidatable
 * An emptiness or consolidation decision waits DZ_VALIDATE_AFTER_S on lp_env_monotonic (the pass polls
 * at most every second meanwhile, no other method running) and is checked again (consolidation on a new
 * snapshot) before it acts. A consolidation may replace its candidates by one cheaper node (the drift
 * replacement's machinery, with the simulation's shape, in the NodePool the simulation chose): every
 * candidate's Node tainted, one replacement listing them all in luaprov.io/replaces, each marked
 * luaprov.io/replaced-by it and deleted once it is initialized; budgets count each candidate.
 * Every disruption first asks the Lua disruption policy (disruption_replace.c). Budgets: the reason's
 * budget (disruption_budget.c) minus the pool's NodeClaims being disrupted for any reason (deleting, or
 * marked); percentages count the pool's initialized NodeClaims.
 *
 * A drifted candidate is replaced (disruption_replace.c): its Node is tainted karpenter.sh/disrupted:
 * NoSchedule (nothing new lands on it meanwhile), a replacement NodeClaim is created under a
 * name of our own, which the lifecycle controller launches, then the candidate is marked
 * luaprov.io/replaced-by=<replacement>, so a restart resumes instead of launching again. Until the cache
 * shows the replacement, the candidate counts as being disrupted and is not chosen again, even when the
 * create's answer was lost (then it is POSTed once more under the same name, and checked by name after
 * DZ_CHECK_AFTER_S). Once the replacement is Initialized=True, the candidate is deleted and the
 * termination controller cordons, drains and deletes it. A replacement that is deleted, or not
 * initialized within settings.registration_timeout_s (15 min) of its creation, is abandoned: deleted,
 * the candidate's Node untainted, the mark dropped, the candidate tried again on a later pass. A Node
 * tainted karpenter.sh/disrupted whose NodeClaim is neither being deleted, marked, replaced nor has a
 * replacement on its way (a crash between the taint and the create, a refused create) is untainted by a
 * later pass (DZ_UNTAINT; not within DZ_CHECK_AFTER_S of the taint this process made, the cache may
 * not show the delete that followed yet).
 *
 * Metrics (lp_env_metrics):
 *   luaprov_nodeclaims_disrupted_total{reason="drifted|empty|underutilized", nodepool}  counter
 *   luaprov_disruption_budgets_allowed{nodepool}   gauge, disruptions the Drifted budget allows now
 *   luaprov_disruption_replacements_total{result}  counter, launched | failed
 *   luaprov_disruption_lost_answers_total{outcome} counter, exists | created | absent
 *   luaprov_voluntary_disruption_decisions_total{decision, reason, consolidation_type}  counter
 *   luaprov_voluntary_disruption_eligible_nodes{reason}  gauge, empty | underutilized | drifted
 *   luaprov_voluntary_disruption_decision_evaluation_duration_seconds{method, consolidation_type}
 * Events (on the candidate NodeClaim): Normal Disrupted, DisruptionLaunching, DisruptionTerminating,
 * DisruptionBlocked (do-not-disrupt, budget, replacement failed, policy veto, drift gate), Unconsolidatable;
 * Warning DisruptionPolicyFailed; Warning InvalidDisruptionBudget on a NodePool whose budget cannot be read.
 * Logs (logger controller.disruption, info): "disrupting nodeclaim(s) via delete" (reason, nodeclaims,
 * nodepool), "disrupting nodeclaim(s) via replace" (reason, nodeclaim, nodepool, replacement),
 * "disruption decision dropped ... after validation" (method, why), "deleting replaced nodeclaim, its
 * replacement is initialized", "resuming the replacement of a nodeclaim", "replacement failed, will
 * retry", "replacement creation settled", "stale disruption taint removed" (nodeclaim, node); warn "invalid
 * disruption budget", "disruption policy failed, nodeclaim not disrupted", "replacement creation unanswered,
 * ..." (nodeclaim, replacement, code, error). */
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"
#include "controller/defs.h"
#include "controller/disruption_internal.h"
#include "controller/disruption_simulate.h"
#include "controller/drift_replacement.h"
#include "core/clock.h"
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
  st->tainted = json_object();
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
  st->decisions = lp_metrics_counter(m, "luaprov_voluntary_disruption_decisions_total",
                                     "Voluntary disruption decisions acted on, by decision, reason and "
                                     "consolidation type.",
                                     LP_LABELS("decision", "reason", "consolidation_type"));
  st->eligible =
      lp_metrics_gauge(m, "luaprov_voluntary_disruption_eligible_nodes",
                       "Nodes each disruption method could take now, by reason.", LP_LABELS("reason"));
  st->evaluation = lp_metrics_histogram(
      m, "luaprov_voluntary_disruption_decision_evaluation_duration_seconds",
      "Seconds a disruption method spent deciding.", LP_LABELS("method", "consolidation_type"), NULL, 0);
  return st;
}

static void state_free(void *state) {
  dz_state *st = state;
  json_decref(st->failed);
  json_decref(st->on_its_way);
  json_decref(st->tainted);
  json_decref(st->pending);
  free(st);
}

/* ---- watches ------------------------------------------------------------------------------- */

static int differs(const json_t *a, const json_t *b, const char *type) {
  return lp_condition_is(a, type, "True") != lp_condition_is(b, type, "True");
}

/* DriftUnresolvable set, judged False or gone: the drift gate (drift_replacement.h) may open or close. */
static int judged_differs(const json_t *a, const json_t *b) {
  const char *x = lp_obj_str(lp_condition_get(a, LP_DRIFT_UNRESOLVABLE), "status");
  const char *y = lp_obj_str(lp_condition_get(b, LP_DRIFT_UNRESOLVABLE), "status");
  return strcmp(x ? x : "", y ? y : "") != 0;
}

static void on_change(lp_controller *c, lp_kind kind, const json_t *old_obj, const json_t *new_obj) {
  int wake = 0;
  if (kind == LP_KIND_NODECLAIM) {
    wake = !old_obj || !new_obj || differs(old_obj, new_obj, DZ_REASON) ||
           differs(old_obj, new_obj, DZ_CONSOLIDATABLE) || differs(old_obj, new_obj, "Initialized") ||
           judged_differs(old_obj, new_obj) || lp_obj_deleting(old_obj) != lp_obj_deleting(new_obj);
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

/* The pass's delete decision (one at most: the validated one), counted in
 * luaprov_voluntary_disruption_decisions_total and logged, one line per NodePool, with only the
 * candidates actually deleted: those the disruption policy allowed and whose delete was accepted. */
static void report_deletes(dz_pass *p) {
  json_t *pools = json_object();
  const dz_action *first = NULL;
  for (size_t i = 0; i < p->nactions; i++) {
    const dz_action *a = &p->actions[i];
    if (a->kind != DZ_DELETE || !a->disrupted) continue;
    if (!first) first = a;
    const char *pool = lp_obj_label(a->claim, DZ_LABEL_POOL);
    json_t *names = json_object_get(pools, pool ? pool : "");
    if (!names) json_object_set_new(pools, pool ? pool : "", names = json_array());
    json_array_append_new(names, json_string(lp_obj_name(a->claim)));
  }
  if (first) {
    const char *reason = dz_metric_reason(first->reason);
    lp_counter_inc(p->st->decisions, LP_LABELS("delete", reason, first->type));
    const char *pool;
    json_t *names;
    json_object_foreach(pools, pool, names) {
      char *list = json_dumps(names, JSON_COMPACT);
      lp_info(lp_controller_logger(p->c), "disrupting nodeclaim(s) via delete", LPF_STR("reason", reason),
              LPF_JSON("nodeclaims", list), LPF_STR("nodepool", pool));
      free(list);
    }
  }
  json_decref(pools);
}

static void pass_end(dz_pass *p) {
  report_deletes(p);
  for (size_t i = 0; i < p->nactions; i++) {
    dz_action *a = &p->actions[i];
    json_decref(a->claim);
    json_decref(a->claims);
    json_decref(a->nodepool);
    json_decref(a->replacement);
    json_decref(a->shape);
    free(a->why);
  }
  lp_controller_done(p->c, p->key, p->err, p->err ? 0 : p->requeue_after);
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
  json_t *candidates; /* initialized NodeClaims not in progress (borrowed) */
} scan;

static void bump(json_t *counts, const char *pool) {
  json_object_set_new(counts, pool, json_integer(json_integer_value(json_object_get(counts, pool)) + 1));
}

/* luaprov.io/replaces names one candidate, or several (comma-separated) for a multi-node consolidation. */
static void note_replacement(const char *key, json_t *claim, void *ud) {
  (void)key;
  const char *replaces = lp_obj_annotation(claim, DZ_ANNOTATION_REPLACES);
  if (!replaces || lp_obj_deleting(claim)) return;
  for (const char *at = replaces; *at;) {
    size_t len = strcspn(at, ",");
    char *name = lp_xasprintf("%.*s", (int)len, at);
    if (*name) json_object_set(ud, name, claim);
    free(name);
    at += len + (at[len] == ',');
  }
}

/* A Node tainted karpenter.sh/disrupted for a NodeClaim nothing disrupts (the caller checked): a crash
 * between the taint and the replacement's create, or a create refused. Not while the pass that tainted it
 * may still be ahead of the cache. */
static int stale_taint(dz_pass *p, const json_t *claim) {
  const char *node_name = lp_obj_str(claim, "status.nodeName");
  json_t *node = node_name ? lp_env_get(p->env, LP_KIND_NODE, node_name) : NULL;
  return node && dz_node_disrupted(node) && !json_object_get(p->st->tainted, lp_obj_name(claim));
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
  } else if (stale_taint(s->p, claim))
    add_action(s->p, DZ_UNTAINT, claim, NULL); /* not a candidate on this pass */
  else if (lp_condition_is(claim, "Initialized", "True"))
    json_array_append(s->candidates, claim);
}

/* ---- the pass: candidates and budgets ----------------------------------------------------------- */

/* The budget for reason of every cached NodePool, minus what is in progress, into left. */
typedef struct budget_walk {
  scan *s;
  const char *reason;
  json_t *left;
} budget_walk;

static void each_budget(const char *key, json_t *nodepool, void *ud) {
  budget_walk *w = ud;
  dz_pass *p = w->s->p;
  int total = (int)json_integer_value(json_object_get(w->s->total, key));
  char *problem = NULL;
  long long allowed = dz_budget_allowed(nodepool, w->reason, total, p->now, &problem);
  if (problem) {
    lp_warn(lp_controller_logger(p->c), "invalid disruption budget", LPF_STR("nodepool", key),
            LPF_STR("reason", w->reason), LPF_STR("error", problem));
    lp_env_event(p->env, nodepool, "Warning", "InvalidDisruptionBudget",
                 "%s; no node of this NodePool is disrupted for reason %s until it is fixed", problem,
                 w->reason);
    free(problem);
  }
  if (allowed > total) allowed = total;
  allowed -= json_integer_value(json_object_get(w->s->disrupting, key));
  if (allowed < 0) allowed = 0;
  if (strcmp(w->reason, DZ_REASON) == 0) lp_gauge_set(p->st->allowed, LP_LABELS(key), (double)allowed);
  json_object_set_new(w->left, key, json_integer(allowed));
}

/* What each reason's budgets still allow per NodePool in this pass: reason -> {pool -> count}. */
static json_t *budgets_left(scan *s, const char *reason) {
  budget_walk w = {s, reason, json_object()};
  lp_env_each(s->p->env, LP_KIND_NODEPOOL, each_budget, &w);
  return w.left;
}

/* Forgets the entries of times (name -> a time) at least age before now. */
static void forget_older(json_t *times, double now, double age) {
  const char *key;
  json_t *at;
  void *tmp;
  json_object_foreach_safe(times, tmp, key, at) if (now - json_real_value(at) >= age)
      json_object_del(times, key);
}

/* The pass's candidates: s->claims with a cached NodePool and no failed replacement waiting. */
typedef struct cands {
  dz_candidate *v;   /* filled in */
  dz_candidate **by; /* pointers into v, in the order a method wants */
  size_t n;
  lp_drift_gate *gate; /* which drift reasons may be replaced in which NodePool */
} cands;

/* The Drifted reason of a drifted candidate, else NULL. */
static const char *drifted_for(const dz_candidate *cd) {
  return cd->drifted ? lp_obj_str(lp_condition_get(cd->claim, DZ_REASON), "reason") : NULL;
}

static void cands_build(scan *s, cands *cs) {
  dz_pass *p = s->p;
  size_t n = json_array_size(s->candidates);
  cs->v = lp_xcalloc(n ? n : 1, sizeof *cs->v);
  cs->by = lp_xcalloc(n ? n : 1, sizeof *cs->by);
  cs->n = 0;
  dz_pdbs *pdbs = dz_pdbs_new(p->env);
  for (size_t i = 0; i < n; i++) {
    json_t *claim = json_array_get(s->candidates, i);
    /* no NodePool: no template to build a replacement from, no budget */
    json_t *nodepool = lp_env_get(p->env, LP_KIND_NODEPOOL, lp_obj_label(claim, DZ_LABEL_POOL));
    if (!nodepool || json_object_get(p->st->failed, lp_obj_name(claim))) continue;
    dz_candidate *cd = &cs->v[cs->n];
    dz_candidate_fill(p->env, pdbs, cd, claim, nodepool, p->now);
    cs->by[cs->n] = cd;
    cs->n++;
  }
  dz_pdbs_free(pdbs);
  cs->gate = lp_drift_gate_new(p->env);
  dz_gate_on_its_way(p, cs->gate); /* the replacements POSTed and not cached yet count too */
}

static void cands_free(cands *cs) {
  for (size_t i = 0; i < cs->n; i++) dz_candidate_clear(&cs->v[i]);
  free(cs->v);
  free(cs->by);
  lp_drift_gate_free(cs->gate);
}

static dz_candidate *cands_find(cands *cs, const char *name) {
  for (size_t i = 0; i < cs->n; i++)
    if (strcmp(cs->v[i].name, name) == 0) return &cs->v[i];
  return NULL;
}

/* luaprov_voluntary_disruption_eligible_nodes{reason}: the candidates each method could take now. */
static void count_eligible(dz_pass *p, const cands *cs) {
  double empty = 0, underutilized = 0, drifted = 0;
  for (size_t i = 0; i < cs->n; i++) {
    const dz_candidate *cd = &cs->v[i];
    if (cd->blocked) continue;
    empty += dz_is_empty_candidate(cd);
    underutilized += dz_is_underutilized_candidate(cd) && cd->pods > 0;
    drifted += cd->drifted && !lp_drift_gate_why(cs->gate, cd->pool, drifted_for(cd));
  }
  lp_gauge_set(p->st->eligible, LP_LABELS("empty"), empty);
  lp_gauge_set(p->st->eligible, LP_LABELS("underutilized"), underutilized);
  lp_gauge_set(p->st->eligible, LP_LABELS("drifted"), drifted);
}

static void observe(dz_pass *p, const char *method, const char *type, double started) {
  lp_histogram_observe(p->st->evaluation, LP_LABELS(method, type), lp_clock_monotonic() - started);
}

static void held_back(dz_candidate *cd, const char *why, void *ud) {
  dz_pass *p = ud;
  lp_env_event(p->env, cd->claim, "Normal", "DisruptionBlocked", "%s", why);
}

/* ---- emptiness ---------------------------------------------------------------------------------- */

/* Names of the candidates in v, a new JSON array. */
static json_t *names_of(dz_candidate *const *v, size_t n) {
  json_t *names = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(names, json_string(v[i]->name));
  return names;
}

/* Emptiness decides on the empty candidates within the Empty budget; the decision waits for its
 * validation. Returns non-zero when it decided. */
static int emptiness(dz_pass *p, cands *cs, json_t *left) {
  double started = lp_clock_monotonic();
  dz_candidate **picked = lp_xcalloc(cs->n ? cs->n : 1, sizeof *picked);
  size_t k = dz_pick_empty(cs->by, cs->n, left, picked, held_back, p);
  if (k > 0) {
    p->st->pending = json_pack("{s:s, s:s, s:s, s:o, s:f}", "method", "emptiness", "reason", DZ_REASON_EMPTY,
                               "type", "empty", "claims", names_of(picked, k), "at", p->mono);
    lp_debug(lp_controller_logger(p->c), "disruption decision waiting for its validation",
             LPF_STR("method", "emptiness"), LPF_INT("nodeclaims", k));
    p->requeue_after = DZ_VALIDATE_AFTER_S;
  }
  free(picked);
  observe(p, "emptiness", "empty", started);
  return k > 0;
}

/* ---- consolidation --------------------------------------------------------------------------- */

/* A consolidation pass or validation waiting for its snapshot (dz_sim_new). */
typedef struct consolidation {
  dz_pass *p;
  json_t *claims; /* the candidates' NodeClaims, cheapest first (own references) */
  int validating; /* 1: the pending decision's validation (claims = its candidates) */
  dz_sim *sim;
  size_t tried; /* candidates the search looked at */
} consolidation;

/* dz_try_fn over the first k (from offset) of the consolidation's claims: feasible by deletion alone,
 * or by one replacement cheaper than they are together (the simulation's price rules), whose shape is
 * then kept. For several candidates the replacement may not be of an instance type one of them has:
 * those options are dropped, none left refuses (deleting one of them would do better). */
typedef struct attempt {
  consolidation *co;
  size_t offset;
  json_t *shape; /* the last accepted answer's dz_sim_result.replacement (own), or NULL: delete only */
  char *why;     /* the last refusal's, malloc'd */
} attempt;

static int try_claims(void *ud, dz_candidate *const *unused, size_t k) {
  (void)unused;
  attempt *at = ud;
  consolidation *co = at->co;
  json_t **v = lp_xcalloc(k, sizeof *v);
  for (size_t i = 0; i < k; i++) v[i] = json_array_get(co->claims, at->offset + i);
  dz_sim_result r = {0};
  dz_simulate(co->sim, v, k, lp_env_settings(co->p->env)->spot_to_spot_consolidation, &r);
  int ok = r.feasible;
  free(at->why);
  at->why = ok ? NULL : lp_xstrdup(r.why ? r.why : "the simulation refused these nodes");
  if (ok && r.replacement && k > 1 && dz_drop_candidate_types(r.replacement, v, k) == 0) {
    ok = 0;
    at->why =
        lp_xstrdup("the only cheaper replacement is of an instance type one of these nodes has already");
  }
  free(v);
  if (ok) {
    json_decref(at->shape);
    at->shape = json_incref(r.replacement);
  }
  dz_sim_result_free(&r);
  return ok;
}

static void consolidation_end(consolidation *co) {
  dz_pass *p = co->p;
  json_decref(co->claims);
  dz_sim_free(co->sim);
  free(co);
  launch_more(p);
}

/* The actions of a validated consolidation: the candidates deleted, or all of them replaced by one node
 * of the cheaper shape (their Nodes tainted and the replacement made first; they are deleted once it is
 * initialized). */
static void add_consolidation(dz_pass *p, json_t *claims, size_t k, const char *type, const char *method,
                              json_t *shape) {
  if (shape && k > 0) {
    json_t *claim = json_array_get(claims, 0);
    dz_action *a = add_action(p, DZ_REPLACE, claim, NULL);
    a->claims = json_incref(claims);
    /* the NodePool the simulation packed the pods into (the first that takes them, as the provisioner
     * would pick); the first candidate's when that one is gone since */
    const json_t *pool = lp_env_get(p->env, LP_KIND_NODEPOOL, lp_obj_str(shape, "nodepool"));
    if (!pool) pool = lp_env_get(p->env, LP_KIND_NODEPOOL, lp_obj_label(claim, DZ_LABEL_POOL));
    a->nodepool = json_incref((json_t *)pool);
    a->shape = json_incref(shape);
    a->reason = DZ_REASON_UNDERUTILIZED;
    a->type = type;
    a->method = method;
    return; /* counted and logged once the replacement is made and the candidates marked */
  }
  for (size_t i = 0; i < k; i++) {
    dz_action *a = add_action(p, DZ_DELETE, json_array_get(claims, i), NULL);
    a->reason = DZ_REASON_UNDERUTILIZED;
    a->type = type;
    a->method = method;
  }
}

static void decided(dz_pass *p, const char *type, json_t *claims, size_t from, size_t k) {
  json_t *names = json_array();
  for (size_t i = from; i < from + k; i++)
    json_array_append_new(names, json_string(lp_obj_name(json_array_get(claims, i))));
  p->st->pending = json_pack("{s:s, s:s, s:s, s:o, s:f}", "method", type, "reason", DZ_REASON_UNDERUTILIZED,
                             "type", type, "claims", names, "at", p->mono);
  p->requeue_after = DZ_VALIDATE_AFTER_S;
}

static void sim_ready(void *ud, dz_sim *sim, lp_error *err) {
  consolidation *co = ud;
  dz_pass *p = co->p;
  co->sim = sim;
  if (err) {
    lp_warn(lp_controller_logger(p->c), "consolidation skipped: no snapshot", LPF_STR("error", err->message));
    lp_error_free(err);
    consolidation_end(co);
    return;
  }
  size_t n = json_array_size(co->claims);
  attempt at = {.co = co};
  if (co->validating) {
    /* static strings: the actions outlive the pending decision they came from */
    int single = strcmp(json_string_value(json_object_get(p->st->pending, "type")), "single") == 0;
    const char *type = single ? "single" : "multi";
    if (try_claims(&at, NULL, n))
      add_consolidation(p, co->claims, n, type,
                        single ? "single-node consolidation" : "multi-node consolidation", at.shape);
    else
      lp_info(lp_controller_logger(p->c), "disruption decision dropped after validation",
              LPF_STR("method", type), LPF_STR("why", at.why ? at.why : ""));
    json_decref(p->st->pending);
    p->st->pending = NULL;
    free(at.why);
    json_decref(at.shape);
    consolidation_end(co);
    return;
  }
  double started = lp_clock_monotonic();
  size_t k = dz_multi_prefix(NULL, n > 100 ? 100 : n, try_claims, &at);
  observe(p, "consolidation", "multi", started);
  if (k >= 2) {
    decided(p, "multi", co->claims, 0, k);
  } else {
    started = lp_clock_monotonic();
    size_t i = 0;
    for (; i < n; i++) {
      at.offset = i;
      if (try_claims(&at, NULL, 1)) break;
      lp_env_event(p->env, json_array_get(co->claims, i), "Normal", "Unconsolidatable", "%s", at.why);
    }
    observe(p, "consolidation", "single", started);
    if (i < n) decided(p, "single", co->claims, i, 1);
  }
  free(at.why);
  json_decref(at.shape);
  consolidation_end(co);
}

/* Consolidation of underutilized candidates: a snapshot, then multi-node, else single-node; the
 * decision waits for its validation. Returns non-zero when it started (the pass ends once it is done). */
static int consolidate(dz_pass *p, cands *cs, json_t *left) {
  dz_sort_by_cost(cs->by, cs->n);
  dz_candidate **picked = lp_xcalloc(cs->n ? cs->n : 1, sizeof *picked);
  size_t k = dz_pick_consolidatable(cs->by, cs->n, left, cs->n, picked);
  for (size_t i = 0; i < cs->n; i++)
    if (dz_is_underutilized_candidate(cs->by[i]) && cs->by[i]->blocked)
      held_back(cs->by[i], cs->by[i]->blocked, p);
  if (k == 0) {
    free(picked);
    return 0;
  }
  consolidation *co = lp_xcalloc(1, sizeof *co);
  co->p = p;
  co->claims = json_array();
  for (size_t i = 0; i < k; i++) json_array_append(co->claims, picked[i]->claim);
  free(picked);
  p->waiting = 1;
  dz_sim_new(p->c, sim_ready, co);
  return 1;
}

/* Validates a consolidation decision on a new snapshot: its candidates must all still be candidates,
 * not blocked, within the budget, and the simulation must accept them again. */
static void validate_consolidation(dz_pass *p, cands *cs, json_t *left) {
  json_t *claims = json_array();
  const char *why = NULL;
  size_t i;
  json_t *name;
  json_array_foreach(json_object_get(p->st->pending, "claims"), i, name) {
    dz_candidate *cd = cands_find(cs, json_string_value(name));
    if (!cd)
      why = "a candidate is no longer one";
    else if (cd->blocked)
      why = cd->blocked;
    else if (!dz_is_underutilized_candidate(cd))
      why = "a candidate is no longer consolidatable";
    else if (json_integer_value(json_object_get(left, cd->pool)) <= 0)
      why = "no disruption budget left";
    else {
      json_object_set_new(left, cd->pool,
                          json_integer(json_integer_value(json_object_get(left, cd->pool)) - 1));
      json_array_append(claims, cd->claim);
    }
    if (why) break;
  }
  if (why) {
    lp_info(lp_controller_logger(p->c), "disruption decision dropped after validation",
            LPF_STR("method", json_string_value(json_object_get(p->st->pending, "type"))),
            LPF_STR("why", why));
    json_decref(claims);
    json_decref(p->st->pending);
    p->st->pending = NULL;
    return;
  }
  consolidation *co = lp_xcalloc(1, sizeof *co);
  co->p = p;
  co->claims = claims;
  co->validating = 1;
  p->waiting = 1;
  dz_sim_new(p->c, sim_ready, co);
}

/* The decision waiting for its validation: not due yet, the pass waits (no other method runs); due, the
 * candidates that still qualify are disrupted, the others dropped. */
static void pending(dz_pass *p, cands *cs, json_t *left, json_t *underutilized) {
  json_t *d = p->st->pending;
  double due = json_real_value(json_object_get(d, "at")) + DZ_VALIDATE_AFTER_S;
  if (p->mono < due) {
    p->requeue_after = due - p->mono < 1.0 ? due - p->mono : 1.0;
    return;
  }
  if (strcmp(json_string_value(json_object_get(d, "reason")), DZ_REASON_UNDERUTILIZED) == 0) {
    validate_consolidation(p, cs, underutilized);
    return;
  }
  const char *log = lp_controller_logger(p->c);
  size_t i;
  json_t *name;
  json_array_foreach(json_object_get(d, "claims"), i, name) {
    dz_candidate *cd = cands_find(cs, json_string_value(name));
    const char *why = NULL;
    if (!cd)
      why = "no longer a candidate (deleted, being disrupted, or not initialized)";
    else if (cd->blocked)
      why = cd->blocked;
    else if (!cd->consolidatable)
      why = "no longer consolidatable";
    else if (cd->pods > 0)
      why = "no longer empty";
    else if (json_integer_value(json_object_get(left, cd->pool)) <= 0)
      why = "no disruption budget left";
    if (why) {
      lp_info(log, "disruption decision dropped for nodeclaim after validation",
              LPF_STR("method", "emptiness"), LPF_STR("nodeclaim", json_string_value(name)),
              LPF_STR("why", why));
      continue;
    }
    json_object_set_new(left, cd->pool,
                        json_integer(json_integer_value(json_object_get(left, cd->pool)) - 1));
    dz_action *a = add_action(p, DZ_DELETE, cd->claim, NULL);
    a->reason = DZ_REASON_EMPTY;
    a->type = "empty";
    a->method = "emptiness";
  }
  json_decref(p->st->pending);
  p->st->pending = NULL;
}

/* ---- drift ------------------------------------------------------------------------------------ */

static int oldest_first(const void *a, const void *b) {
  const dz_candidate *x = *(dz_candidate *const *)a, *y = *(dz_candidate *const *)b;
  double dx = lp_condition_since(x->claim, DZ_REASON), dy = lp_condition_since(y->claim, DZ_REASON);
  if (dx != dy) return dx < dy ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Drifted candidates, oldest drift first, within the Drifted budget: each replaced. Returns non-zero
 * when it acts. */
static int drift(dz_pass *p, cands *cs, json_t *left) {
  double started = lp_clock_monotonic();
  qsort(cs->by, cs->n, sizeof *cs->by, oldest_first);
  size_t first = p->nactions;
  for (size_t i = 0; i < cs->n; i++) {
    dz_candidate *cd = cs->by[i];
    json_t *n = json_object_get(left, cd->pool);
    const char *reason = drifted_for(cd),
               *gated = reason ? lp_drift_gate_why(cs->gate, cd->pool, reason) : NULL;
    if (!cd->drifted) continue;
    if (gated) {
      lp_env_event(p->env, cd->claim, "Normal", "DisruptionBlocked", "%s", gated);
    } else if (cd->blocked) {
      held_back(cd, cd->blocked, p);
    } else if (json_integer_value(n) <= 0) {
      lp_env_event(p->env, cd->claim, "Normal", "DisruptionBlocked",
                   "No allowed disruptions for disruption reason %s due to blocking budget", DZ_REASON);
    } else {
      json_object_set_new(left, cd->pool, json_integer(json_integer_value(n) - 1));
      dz_action *a = add_action(p, DZ_REPLACE, cd->claim, NULL);
      a->nodepool = json_incref(cd->nodepool);
      a->claims = json_pack("[O]", cd->claim);
      if (reason) lp_drift_gate_launched(cs->gate, cd->pool, reason, NULL, cd->name);
    }
  }
  observe(p, "drift", "", started);
  return p->nactions > first;
}

/* ---- the pass ---------------------------------------------------------------------------------- */

/* The methods in Karpenter's order, the first that decides acting alone: emptiness, drift. A decision
 * waiting for its validation holds the others back. */
static void choose(scan *s) {
  dz_pass *p = s->p;
  forget_older(p->st->failed, p->now, RETRY_AFTER_S); /* their candidates may be tried again */
  json_t *empty = budgets_left(s, DZ_REASON_EMPTY), *drifted = budgets_left(s, DZ_REASON),
         *underutilized = budgets_left(s, DZ_REASON_UNDERUTILIZED);
  cands cs;
  cands_build(s, &cs);
  count_eligible(p, &cs);
  if (p->st->pending)
    pending(p, &cs, empty, underutilized);
  else if (!emptiness(p, &cs, empty) && !drift(p, &cs, drifted))
    consolidate(p, &cs, underutilized);
  cands_free(&cs);
  json_decref(empty);
  json_decref(drifted);
  json_decref(underutilized);
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
  forget_older(p->st->tainted, p->mono, DZ_CHECK_AFTER_S);
  scan s = {p, json_object(), json_object(), json_object(), json_array()};
  lp_env_each(p->env, LP_KIND_NODECLAIM, note_replacement, s.replacing);
  lp_env_each(p->env, LP_KIND_NODECLAIM, scan_claim, &s);
  choose(&s);
  json_decref(s.replacing);
  json_decref(s.total);
  json_decref(s.disrupting);
  json_decref(s.candidates);
  if (!p->waiting) launch_more(p);
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

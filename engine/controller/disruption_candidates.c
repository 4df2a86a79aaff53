/* What a NodeClaim is as a disruption candidate (disruption_internal.h): its Node, the pods that would
 * have to move, what disrupting it costs, its NodePool's consolidation policy and whether
 * karpenter.sh/do-not-disrupt holds it.
 *
 * Reschedulable pods: bound to the candidate's Node, not Succeeded or Failed, not being deleted, not
 * owned by a DaemonSet (its controller puts them back), not mirror pods (kubernetes.io/config.mirror:
 * the kubelet owns them). A node without any is empty.
 *
 * karpenter.sh/do-not-disrupt on the NodeClaim, its Node or a pod on it that has not finished: "true"
 * blocks for good; a Go duration ("90s", "30m", "1h30m") blocks until the object's start plus the
 * duration (a pod's status.startTime, else its creationTimestamp; a Node's or NodeClaim's
 * creationTimestamp), measured on the controllers' wall clock; any other value blocks, and the message
 * says the value is not understood (fail closed).
 *
 * Disruption cost, lowest disrupted first: the sum over the reschedulable pods of 1 +
 * controller.kubernetes.io/pod-deletion-cost / 2^27 + spec.priority / 2^25, each pod's clamped to
 * [-10, 10], times the fraction of the NodeClaim's spec.expireAfter still ahead of it (in [0, 1]) when it
 * has one: a node about to expire costs little, an empty one nothing.
 *
 * PodDisruptionBudgets (indexed once a pass by namespace, their selectors parsed once: dz_pdbs_new): a
 * reschedulable pod that a budget of its namespace selects while the budget's
 * status.disruptionsAllowed is 0, or that two budgets select (the Eviction API refuses such a pod),
 * blocks its node for every voluntary method: draining it would stall on that pod.
 *
 * Consolidation policy: spec.disruption.consolidationPolicy WhenEmpty or WhenEmptyOrUnderutilized
 * (absent: the latter), none at all when consolidateAfter is "Never" or the policy is unknown. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"
#include "controller/disruption_internal.h"
#include "controller/provisioner_internal.h"
#include "core/clock.h"

#define ANNOTATION_MIRROR        "kubernetes.io/config.mirror"
#define ANNOTATION_DELETION_COST "controller.kubernetes.io/pod-deletion-cost"

static int owned_by(const json_t *obj, const char *kind) {
  size_t i;
  json_t *owner;
  json_array_foreach(lp_obj_get(obj, "metadata.ownerReferences"), i, owner) {
    const char *k = json_string_value(json_object_get(owner, "kind"));
    if (k && strcmp(k, kind) == 0) return 1;
  }
  return 0;
}

static int finished(const json_t *pod) {
  const char *phase = lp_obj_str(pod, "status.phase");
  return phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
}

int dz_pod_reschedulable(const json_t *pod) {
  return pod && !finished(pod) && !lp_obj_deleting(pod) && !owned_by(pod, "DaemonSet") &&
         !lp_obj_annotation(pod, ANNOTATION_MIRROR);
}

dz_policy dz_policy_of(const json_t *nodepool) {
  const char *after = lp_obj_str(nodepool, "spec.disruption.consolidateAfter");
  const char *policy = lp_obj_str(nodepool, "spec.disruption.consolidationPolicy");
  if (after && strcmp(after, "Never") == 0) return DZ_CONSOLIDATE_NEVER;
  if (!policy || strcmp(policy, "WhenEmptyOrUnderutilized") == 0) return DZ_CONSOLIDATE_UNDERUTILIZED;
  if (strcmp(policy, "WhenEmpty") == 0) return DZ_CONSOLIDATE_EMPTY;
  return DZ_CONSOLIDATE_NEVER;
}

/* ---- do-not-disrupt ---------------------------------------------------------------------------- */

char *dz_do_not_disrupt(const json_t *obj, const char *what, double start, double now) {
  const char *v = lp_obj_annotation(obj, DZ_ANNOTATION_DO_NOT_DISRUPT);
  if (!v) return NULL;
  if (strcmp(v, "true") == 0)
    return lp_xasprintf("%s has \"%s\" annotation", what, DZ_ANNOTATION_DO_NOT_DISRUPT);
  double d = lp_duration_parse(v);
  if (d < 0)
    return lp_xasprintf("%s has \"%s\" annotation with a value this engine does not understand (%s: "
                        "neither \"true\" nor a duration like 1h30m), so it is not disrupted",
                        what, DZ_ANNOTATION_DO_NOT_DISRUPT, v);
  if (start < 0)
    return lp_xasprintf("%s has \"%s\" annotation for %s and no start time to count it from", what,
                        DZ_ANNOTATION_DO_NOT_DISRUPT, v);
  if (now >= start + d) return NULL;
  char until[LP_RFC3339_SIZE];
  lp_clock_rfc3339(start + d, 0, until);
  return lp_xasprintf("%s has \"%s\" annotation for %s, until %s", what, DZ_ANNOTATION_DO_NOT_DISRUPT, v,
                      until);
}

static double created(const json_t *obj) {
  return lp_rfc3339_parse(lp_obj_str(obj, "metadata.creationTimestamp"));
}

static double pod_start(const json_t *pod) {
  const char *started = lp_obj_str(pod, "status.startTime");
  return started ? lp_rfc3339_parse(started) : created(pod);
}

/* ---- pods and cost ----------------------------------------------------------------------------- */

typedef struct pod_walk {
  const dz_pdbs *pdbs;
  dz_candidate *cd;
  double now;
  double cost;
} pod_walk;

/* ---- PodDisruptionBudgets, indexed once a pass ----------------------------------------------------- */

typedef struct pdb_entry {
  char *key;        /* "ns/name" */
  json_t *selector; /* pv_selector_requirements of spec.selector (own), NULL: selects nothing */
  int allows_none;  /* status.disruptionsAllowed <= 0 */
} pdb_entry;

struct dz_pdbs {
  pdb_entry *v;
  size_t n, cap;
  json_t *by_ns; /* namespace -> [indices into v], in the cache's order */
};

static void index_pdb(const char *key, json_t *pdb, void *ud) {
  dz_pdbs *x = ud;
  if (x->n == x->cap) {
    x->cap = x->cap ? 2 * x->cap : 8;
    x->v = lp_xrealloc(x->v, x->cap * sizeof *x->v);
  }
  x->v[x->n] = (pdb_entry){lp_xstrdup(key), pv_selector_requirements(lp_obj_get(pdb, "spec.selector")),
                           json_integer_value(lp_obj_get(pdb, "status.disruptionsAllowed")) <= 0};
  const char *ns = lp_obj_str(pdb, "metadata.namespace") ?: "";
  json_t *list = json_object_get(x->by_ns, ns);
  if (!list) json_object_set_new(x->by_ns, ns, list = json_array());
  json_array_append_new(list, json_integer((json_int_t)x->n++));
}

dz_pdbs *dz_pdbs_new(lp_ctrl_env *env) {
  dz_pdbs *x = lp_xcalloc(1, sizeof *x);
  x->by_ns = json_object();
  lp_env_each(env, LP_KIND_PDB, index_pdb, x);
  return x;
}

void dz_pdbs_free(dz_pdbs *x) {
  if (!x) return;
  for (size_t i = 0; i < x->n; i++) {
    free(x->v[i].key);
    json_decref(x->v[i].selector);
  }
  free(x->v);
  json_decref(x->by_ns);
  free(x);
}

/* Why PodDisruptionBudgets would refuse evicting pod now (malloc'd), or NULL: one of its namespace
 * selecting it allows no disruption, or two select it. */
static char *pdb_blocks(const dz_pdbs *pdbs, const json_t *pod) {
  const char *ns = lp_obj_str(pod, "metadata.namespace");
  if (!ns || !*ns) ns = "default";
  const json_t *labels = lp_obj_get(pod, "metadata.labels");
  const char *first = NULL;
  size_t i;
  json_t *at;
  json_array_foreach(json_object_get(pdbs->by_ns, ns), i, at) {
    const pdb_entry *e = &pdbs->v[json_integer_value(at)];
    if (!e->selector || !pv_labels_satisfy(labels, e->selector)) continue;
    if (first)
      return lp_xasprintf("pod %s/%s is selected by PodDisruptionBudgets %s and %s, so it cannot be evicted",
                          ns, lp_obj_name(pod), first, e->key);
    if (e->allows_none) return lp_xasprintf("pdb %s prevents pod evictions", e->key);
    first = e->key;
  }
  return NULL;
}

static double annotation_number(const json_t *obj, const char *key) {
  const char *v = lp_obj_annotation(obj, key);
  if (!v) return 0;
  char *end = NULL;
  double d = strtod(v, &end);
  return end && *end == '\0' && isfinite(d) ? d : 0;
}

static void walk_pod(const char *key, json_t *pod, void *ud) {
  pod_walk *w = ud;
  if (finished(pod)) return;
  if (!w->cd->blocked) {
    char *what = lp_xasprintf("Pod \"%s\"", key);
    w->cd->blocked = dz_do_not_disrupt(pod, what, pod_start(pod), w->now);
    free(what);
  }
  if (!dz_pod_reschedulable(pod)) return;
  if (!w->cd->blocked) w->cd->blocked = pdb_blocks(w->pdbs, pod);
  w->cd->pods++;
  double priority = json_number_value(lp_obj_get(pod, "spec.priority"));
  double c = 1.0 + annotation_number(pod, ANNOTATION_DELETION_COST) / 134217728.0 + priority / 33554432.0;
  w->cost += fmax(-10.0, fmin(10.0, c));
}

/* The fraction of the NodeClaim's expireAfter still ahead of it, 1 when it has none. */
static double lifetime_left(const json_t *claim, double now) {
  const char *expire = lp_obj_str(claim, "spec.expireAfter");
  double d = expire ? lp_duration_parse(expire) : -1, born = created(claim);
  if (d <= 0 || born < 0) return 1.0;
  return fmax(0.0, fmin(1.0, 1.0 - (now - born) / d));
}

void dz_candidate_fill(lp_ctrl_env *env, const dz_pdbs *pdbs, dz_candidate *cd, json_t *claim,
                       json_t *nodepool, double now) {
  *cd = (dz_candidate){
      .claim = claim, .nodepool = nodepool, .name = lp_obj_name(claim), .pool = lp_obj_name(nodepool)};
  cd->drifted = lp_condition_is(claim, DZ_REASON, "True");
  cd->consolidatable = lp_condition_is(claim, DZ_CONSOLIDATABLE, "True");
  cd->policy = dz_policy_of(nodepool);
  char *what = lp_xasprintf("NodeClaim %s", cd->name);
  cd->blocked = dz_do_not_disrupt(claim, what, created(claim), now);
  free(what);
  const char *node_name = lp_obj_str(claim, "status.nodeName");
  if (!node_name) return;
  cd->node = lp_env_get(env, LP_KIND_NODE, node_name);
  if (!cd->blocked && cd->node) {
    what = lp_xasprintf("Node %s", node_name);
    cd->blocked = dz_do_not_disrupt(cd->node, what, created(cd->node), now);
    free(what);
  }
  pod_walk w = {pdbs, cd, now, 0};
  lp_env_index_each(env, LP_INDEX_POD_BY_NODE, node_name, walk_pod, &w);
  cd->cost = w.cost * lifetime_left(claim, now);
}

void dz_candidate_clear(dz_candidate *cd) {
  free(cd->blocked);
  cd->blocked = NULL;
}

static int cheapest_first(const void *a, const void *b) {
  const dz_candidate *x = *(dz_candidate *const *)a, *y = *(dz_candidate *const *)b;
  if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
  return strcmp(x->name, y->name);
}

void dz_sort_by_cost(dz_candidate **v, size_t n) {
  if (n > 1) qsort(v, n, sizeof *v, cheapest_first);
}

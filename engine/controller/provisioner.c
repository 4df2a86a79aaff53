/* The provisioner ("provisioner", singleton "provision"; Karpenter's, docs/controllers.md): turns pods
 * the scheduler could not place into NodeClaims, which the lifecycle controller then launches.
 *
 * Triggers and batching: a pod becoming provisionable (provisioner_pods.c) opens a batch or extends
 * it; the pass runs once no new provisionable pod came for BATCH_IDLE_S, or BATCH_MAX_S after the
 * batch opened. The window is a uv timer in the state (restarted on each trigger), not
 * lp_controller_enqueue_after: the workqueue keeps the earliest of several delayed adds, and a batch
 * must be able to move its end later. While provisionable pods are pending, capacity going away or
 * arriving also triggers a batch: a NodeClaim or Node deleted (InsufficientCapacity deletes the
 * NodeClaim: its pods need a new plan) or starting to delete, a NodeClaim initialized, a Node's
 * Ready changed, a NodePool added or changed, a node class's Ready changed. A pass that leaves
 * pods unschedulable runs again after UNSCHEDULABLE_RETRY_S (offerings come back in stock). The
 * manager enqueues the key once at start, so pods pending across a restart are planned at once.
 *
 * A pass (one reconcile): the provisionable pods, minus those nominated for a NodeClaim that is
 * still on its way, biggest first; those that fit existing capacity (provisioner_capacity.c: Ready
 * nodes, and NodeClaims not initialized yet) are left to the scheduler, or nominated for the
 * in-flight NodeClaim (any required node-affinity term, host ports and hard pod topology count there:
 * provisioner_topology.c); the rest are packed into new NodeClaims (provisioner_schedule.c) over the
 * NodePools with a Ready node class and the instance types of that class (lp_cp_get_instance_types,
 * cached by the provider), and the NodeClaims created (provisioner_create.c) under names of our own.
 * Nominations live in memory: a pod stays nominated while its NodeClaim exists (in the cache, or on its
 * way: provisioner_inflight.c), is not deleting and is not initialized; after that the scheduler binds
 * it, or the next pass plans it again. A pass first asks by name about NodeClaims on their way that the
 * cache has not shown for a while.
 *
 * Events: Normal "Nominated" on a pod ("Pod should schedule on: nodeclaim/<name>"); Warning
 * "FailedScheduling" on a pod no NodePool can take ("Failed to schedule pod, <why per NodePool>", naming
 * the constraint: minValues, a DaemonSet's host port, pod (anti-)affinity, topology spread);
 * Warning "NoCompatibleInstanceTypes" on a NodePool whose requirements leave no instance type.
 * Metrics:
 *   luaprov_provisioner_scheduling_duration_seconds            histogram, packing time of a pass
 *   luaprov_nodeclaims_created_total{nodepool, reason}         counter, reason "provisioning"
 *   luaprov_provisioner_pods_pending                           gauge, provisionable pods
 *   luaprov_provisioner_unschedulable_pods                     gauge, pods the last pass could not place
 *   luaprov_provisioner_lost_answers_total{outcome}            counter, creations whose answer was lost,
 *                                                              settled: exists, created, absent
 * Logs (logger controller.provisioner): "found provisionable pod(s)" (pods, nominated),
 * "computed new nodeclaim(s) to fit pod(s)" (nodeclaims, pods), "created nodeclaim" (nodeclaim,
 * nodepool, requests, pods, instance_types, cheapest, cheapest_price), "could not schedule pod" (pod,
 * error; warn), "could not list instance types" (nodeclass, code, error; warn), "nodeclaim creation
 * unanswered, trying again with the same name" and "... unanswered again: ..." (nodeclaim, code, error;
 * warn), "nodeclaim creation settled" (nodeclaim, outcome). */
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"
#include "controller/defs.h"
#include "controller/provisioner_internal.h"
#include "controller/volume_topology.h"
#include "core/clock.h"
#include "core/log.h"

#define KEY                   "provision"
#define BATCH_IDLE_S          1.0
#define BATCH_MAX_S           10.0
#define UNSCHEDULABLE_RETRY_S 60.0

static const double duration_buckets[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                          0.5,   1,     2.5,  5,     10,   30,  60};

/* ---- state and batching ----------------------------------------------------------------------- */

static void *state_new(lp_controller *c) {
  lp_metrics *m = lp_env_metrics(lp_controller_env(c));
  pv_state *st = lp_xcalloc(1, sizeof *st);
  st->batch_timer = lp_xmalloc(sizeof *st->batch_timer);
  uv_timer_init(lp_env_loop(lp_controller_env(c)), st->batch_timer);
  st->batch_timer->data = c;
  st->pending = json_object();
  st->nominations = json_object();
  st->created = json_object();
  st->duration =
      lp_metrics_histogram(m, "luaprov_provisioner_scheduling_duration_seconds",
                           "Seconds a provisioning pass spent packing pods into NodeClaims.", LP_NO_LABELS,
                           duration_buckets, sizeof duration_buckets / sizeof duration_buckets[0]);
  st->created_total = lp_metrics_counter(m, "luaprov_nodeclaims_created_total",
                                         "NodeClaims created, by reason.", LP_LABELS("nodepool", "reason"));
  st->pods_pending = lp_metrics_gauge(m, "luaprov_provisioner_pods_pending",
                                      "Provisionable pods waiting for capacity.", LP_NO_LABELS);
  st->unschedulable =
      lp_metrics_gauge(m, "luaprov_provisioner_unschedulable_pods",
                       "Pods the last provisioning pass could not place on any NodePool.", LP_NO_LABELS);
  st->lost_answers = lp_metrics_counter(
      m, "luaprov_provisioner_lost_answers_total",
      "NodeClaim creations whose answer was lost, by how they settled (exists, created, absent).",
      LP_LABELS("outcome"));
  return st;
}

static void timer_closed(uv_handle_t *h) {
  free(h);
}

static void state_free(void *state) {
  pv_state *st = state;
  uv_close((uv_handle_t *)st->batch_timer, timer_closed);
  json_decref(st->pending);
  json_decref(st->nominations);
  json_decref(st->created);
  free(st);
}

static void batch_end(uv_timer_t *t) {
  lp_controller *c = t->data;
  pv_state *st = lp_controller_state(c);
  st->batch_start = 0;
  lp_controller_enqueue(c, KEY);
}

/* Opens a batch, or moves its end to BATCH_IDLE_S from now (never past BATCH_MAX_S from its start). */
static void trigger(lp_controller *c) {
  pv_state *st = lp_controller_state(c);
  double now = lp_clock_monotonic();
  if (st->batch_start == 0) st->batch_start = now;
  double end = now + BATCH_IDLE_S;
  if (end > st->batch_start + BATCH_MAX_S) end = st->batch_start + BATCH_MAX_S;
  double ms = (end - now) * 1000.0;
  uv_timer_start(st->batch_timer, batch_end, ms > 0 ? (uint64_t)ms : 0, 0);
}

static void trigger_if_pending(lp_controller *c) {
  pv_state *st = lp_controller_state(c);
  if (json_object_size(st->pending) > 0) trigger(c);
}

static int changed(const json_t *old_obj, const json_t *new_obj, int (*test)(const json_t *)) {
  return !old_obj || !new_obj || test(old_obj) != test(new_obj);
}

static int is_deleting(const json_t *o) {
  return lp_obj_deleting(o);
}
static int is_initialized(const json_t *o) {
  return lp_condition_is(o, "Initialized", "True");
}
static int is_ready(const json_t *o) {
  return lp_condition_is(o, "Ready", "True");
}

static void pod_changed(lp_controller *c, const json_t *old_obj, const json_t *new_obj) {
  pv_state *st = lp_controller_state(c);
  char *key = pv_pod_key(new_obj ? new_obj : old_obj);
  int was = json_object_get(st->pending, key) != NULL, is = pv_pod_provisionable(new_obj);
  if (is && !was) {
    json_object_set_new(st->pending, key, json_true());
    trigger(c);
  } else if (!is && was) {
    json_object_del(st->pending, key);
    json_object_del(st->nominations, key);
  }
  lp_gauge_set(st->pods_pending, NULL, (double)json_object_size(st->pending));
  free(key);
}

static void on_change(lp_controller *c, lp_kind kind, const json_t *old_obj, const json_t *new_obj) {
  pv_state *st = lp_controller_state(c);
  switch (kind) {
  case LP_KIND_POD:
    pod_changed(c, old_obj, new_obj);
    break;
  case LP_KIND_NODECLAIM:
    if (!old_obj || !new_obj) /* the cache has it now, or it is gone: our copy is not needed */
      json_object_del(st->created, lp_obj_name(new_obj ? new_obj : old_obj) ?: "");
    if (old_obj && (changed(old_obj, new_obj, is_deleting) || changed(old_obj, new_obj, is_initialized)))
      trigger_if_pending(c);
    break;
  case LP_KIND_NODE:
    if (changed(old_obj, new_obj, is_deleting) || changed(old_obj, new_obj, is_ready)) trigger_if_pending(c);
    break;
  case LP_KIND_NODEPOOL:
    if (new_obj &&
        (!old_obj || !json_equal(json_object_get(old_obj, "spec"), json_object_get(new_obj, "spec"))))
      trigger_if_pending(c);
    break;
  case LP_KIND_NODECLASS:
    if (new_obj && changed(old_obj, new_obj, is_ready)) trigger_if_pending(c);
    break;
  default:
    break;
  }
}

/* ---- nominations -------------------------------------------------------------------------------- */

void pv_nominate(pv_pass *p, const pv_pod *pod, const char *claim) {
  if (!p->st) return; /* a simulation nominates nothing */
  json_object_set_new(p->st->nominations, pod->key, json_string(claim));
  lp_env_event(p->env, pod->obj, "Normal", "Nominated", "Pod should schedule on: nodeclaim/%s", claim);
}

/* The NodeClaim name, from the cache or from what this controller created, or NULL. */
static const json_t *known_claim(pv_pass *p, const char *name) {
  const json_t *claim = lp_env_get(p->env, LP_KIND_NODECLAIM, name);
  return claim ? claim : json_object_get(json_object_get(p->st->created, name), "claim");
}

/* Forgets nominations that no longer hold: the pod is not pending any more, or its NodeClaim is gone,
 * deleting or initialized (the scheduler has a node). */
static void prune(pv_pass *p) {
  const char *key;
  json_t *v;
  void *tmp;
  json_object_foreach_safe(p->st->nominations, tmp, key, v) {
    const json_t *claim = known_claim(p, json_string_value(v));
    if (!pv_pod_provisionable(lp_env_get(p->env, LP_KIND_POD, key)) || !claim || lp_obj_deleting(claim) ||
        lp_condition_is(claim, "Initialized", "True"))
      json_object_del(p->st->nominations, key);
  }
}

/* ---- the pass ----------------------------------------------------------------------------------- */

static size_t unschedulable(const pv_pass *p) {
  size_t n = 0;
  for (size_t i = 0; i < p->npods; i++) n += p->pods[i].why != NULL;
  return n;
}

void pv_finish(pv_pass *p) {
  size_t left = unschedulable(p);
  lp_gauge_set(p->st->unschedulable, NULL, (double)left);
  lp_controller *c = p->c;
  const char *key = p->key;
  lp_error *err = p->err;
  /* a NodeClaim on its way the cache does not show yet is checked by name on a later pass */
  double on_its_way = pv_inflight_requeue_s(p);
  double requeue = left ? UNSCHEDULABLE_RETRY_S : on_its_way;
  if (on_its_way > 0 && on_its_way < requeue) requeue = on_its_way;
  pv_claims_free(p);
  pv_pools_free(p);
  pv_topology_free(p);
  for (size_t i = 0; i < p->npods; i++) pv_pod_free(&p->pods[i]);
  free(p->pods);
  json_decref(p->types);
  pv_dims_free(&p->dims);
  free(p);
  lp_controller_done(c, key, err, err ? 0 : requeue);
}

typedef struct pod_scan {
  pv_pass *p;
  json_t *pending;
  size_t nominated;
} pod_scan;

static void add_pod(const char *key, json_t *pod, void *ud) {
  pod_scan *s = ud;
  if (!pv_pod_provisionable(pod)) return;
  json_object_set_new(s->pending, key, json_true());
  if (json_object_get(s->p->st->nominations, key)) {
    s->nominated++;
    return;
  }
  pv_pass *p = s->p;
  char *why = NULL;
  json_t *volumes = lp_volume_requirements(p->env, pod, &why);
  if (why) { /* kube-scheduler binds it only once its volumes exist: a node now would stay empty */
    lp_debug(lp_controller_logger(p->c), "ignoring pod, its volumes are not ready", LPF_STR("pod", key),
             LPF_STR("error", why));
    lp_env_event(p->env, pod, "Warning", "FailedScheduling", "Failed to schedule pod, %s", why);
    free(why);
    return;
  }
  p->pods = lp_xrealloc(p->pods, (p->npods + 1) * sizeof *p->pods);
  pv_pod *pp = &p->pods[p->npods++];
  pv_pod_init(p, pp, key, pod);
  if (volumes) pv_pod_require(pp, volumes);
  json_decref(volumes);
}

static void report_unschedulable(pv_pass *p) {
  for (size_t i = 0; i < p->npods; i++) {
    const pv_pod *pod = &p->pods[i];
    if (!pod->why) continue;
    lp_warn(lp_controller_logger(p->c), "could not schedule pod", LPF_STR("pod", pod->key),
            LPF_STR("error", pod->why));
    lp_env_event(p->env, pod->obj, "Warning", "FailedScheduling", "Failed to schedule pod, %s", pod->why);
  }
}

static void solve(pv_pass *p) {
  double t0 = lp_clock_monotonic();
  for (size_t i = 0; i < p->npools; i++) {
    pv_pool *pool = &p->pools[i];
    if (!pool->skip_why) pv_pool_set_types(p, pool, json_object_get(p->types, pool->nodeclass));
  }
  pv_schedule(p);
  pv_finalize(p);
  lp_histogram_observe(p->st->duration, NULL, lp_clock_monotonic() - t0);
  report_unschedulable(p);
  if (p->nclaims > 0) {
    size_t pods = 0;
    for (size_t k = 0; k < p->nclaims; k++) pods += p->claims[k].npods;
    lp_info(lp_controller_logger(p->c), "computed new nodeclaim(s) to fit pod(s)",
            LPF_INT("nodeclaims", p->nclaims), LPF_INT("pods", pods));
  }
  pv_create_claims(p);
}

typedef struct fetch {
  pv_pass *p;
  char *nodeclass; /* its key */
} fetch;

static void types_fetched(json_t *value, lp_error *err, void *ud) {
  fetch *f = ud;
  pv_pass *p = f->p;
  if (err) {
    lp_warn(lp_controller_logger(p->c), "could not list instance types", LPF_STR("nodeclass", f->nodeclass),
            LPF_STR("code", err->code), LPF_STR("error", err->message));
    char *label = lp_env_nodeclass_label(p->env, f->nodeclass);
    for (size_t i = 0; i < p->npools; i++) {
      pv_pool *pool = &p->pools[i];
      if (!pool->skip_why && pool->nodeclass && strcmp(pool->nodeclass, f->nodeclass) == 0)
        pool->skip_why = lp_xasprintf("listing the instance types of %s failed: %s", label, err->message);
    }
    lp_error_keep_first(&p->err, lp_error_new(err->code, "instance types of %s: %s", label, err->message));
    free(label);
    lp_error_free(err);
  } else {
    json_object_set_new(p->types, f->nodeclass, value);
  }
  free(f->nodeclass);
  free(f);
  if (--p->fetching == 0) solve(p);
}

/* Asks for the instance types of every node class a usable pool references, then solves. */
static void fetch_types(pv_pass *p) {
  json_t *asked = json_object();
  for (size_t i = 0; i < p->npools; i++) {
    const char *key = p->pools[i].nodeclass; /* group and name: one fetch per class */
    if (p->pools[i].skip_why || !key || json_object_get(asked, key)) continue;
    json_object_set_new(asked, key, json_true());
    p->fetching++;
  }
  if (p->fetching == 0) {
    json_decref(asked);
    solve(p);
    return;
  }
  const char *key;
  json_t *v;
  json_object_foreach(asked, key, v) {
    fetch *f = lp_xmalloc(sizeof *f);
    f->p = p;
    f->nodeclass = lp_xstrdup(key);
    lp_cp_get_instance_types(lp_env_cloud(p->env), lp_env_get(p->env, LP_KIND_NODECLASS, key), types_fetched,
                             f);
  }
  json_decref(asked);
}

/* The pass proper, once what is on its way has been checked. */
static void plan(pv_pass *p) {
  lp_controller *c = p->c;
  prune(p);
  pod_scan scan = {p, json_object(), 0};
  lp_env_each(p->env, LP_KIND_POD, add_pod, &scan);
  json_decref(p->st->pending); /* the cache is the truth; on_change only keeps it current between passes */
  p->st->pending = scan.pending;
  lp_gauge_set(p->st->pods_pending, NULL, (double)json_object_size(scan.pending));
  if (p->npods == 0) {
    pv_finish(p);
    return;
  }
  lp_info(lp_controller_logger(c), "found provisionable pod(s)", LPF_INT("pods", p->npods),
          LPF_INT("nominated", scan.nominated));
  pv_sort_pods(p);
  pv_collect_bins(p, p->st->nominations);
  size_t left = pv_place_on_bins(p);
  pv_bins_free(p);
  if (left == 0) {
    pv_finish(p);
    return;
  }
  pv_collect_pools(p);
  fetch_types(p);
}

static void reconcile(lp_controller *c, const char *key) {
  pv_pass *p = lp_xcalloc(1, sizeof *p);
  p->c = c;
  p->env = lp_controller_env(c);
  p->st = lp_controller_state(c);
  p->key = key;
  p->started = lp_env_monotonic(p->env);
  p->types = json_object();
  pv_dims_init(&p->dims);
  pv_inflight_check(p, plan);
}

const lp_controller_def lp_provisioner_controller = {
    .name = "provisioner",
    .primary = LP_KIND_NONE,
    .singleton_key = KEY,
    .on_change = on_change,
    .reconcile = reconcile,
    .state_new = state_new,
    .state_free = state_free,
};

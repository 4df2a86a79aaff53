/* The NodePool status controller ("nodepool.status"): what Karpenter's nodepool counter, readiness and
 * validation controllers write on each NodePool of a node class this provider serves, through its
 * /status subresource:
 *
 *   status.resources      the capacity of the pool's nodes, summed per resource (cpu, memory, pods,
 *                         ephemeral-storage always, "0" when none; any other resource the nodes have)
 *                         plus "nodes", their count
 *   status.nodes          the same count, as an integer (the scale subresource and `kubectl get` read it)
 *   status.nodeClassObservedGeneration  the generation of the referenced node class last looked at
 *   conditions            ValidationSucceeded (lp_nodepool_validate; False NodePoolValidationFailed
 *                         with every problem), NodeClassReady (False NodeClassNotFound,
 *                         NodeClassTerminating, NodeClassReadinessUnknown, or the class's own Ready
 *                         reason and message) and the root Ready rolled up from the two
 *
 * A node of the pool is one instance as Karpenter's cluster state sees it: a launched NodeClaim
 * (status.providerID set) with the Node of the same providerID if there is one, or a Node no NodeClaim
 * claims. It belongs to the pool its karpenter.sh/nodepool label names (the NodeClaim's labels until the
 * Node is registered, then the Node's). Its capacity is the Node's once initialized, before that the
 * Node's with the NodeClaim's filling what the Node does not report yet (or the NodeClaim's alone). A
 * node being deleted (NodeClaim deleting or InstanceTerminating=True, or a Node with no NodeClaim
 * deleting) no longer counts. NodeClaims not launched yet count for nothing, as in Karpenter.
 *
 * The status is written only when it differs from the cached one, with a merge patch carrying the
 * cached resourceVersion (a 409 means the cache was behind: retried). Every NodePool change enqueues the
 * pool; so does a change of one of its NodeClaims or Nodes (by label, before and after) or of the
 * node class it references. The manager runs controllers only on synced caches, so a restart never
 * writes a count made from a half-listed cache.
 *
 * Logs (logger controller.nodepool.status): "nodepool ready" (info) and "nodepool not ready" (warn,
 * status, reason, message) when Ready changes. Loop thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/requirements.h"
#include "controller/conditions.h"
#include "controller/defs.h"
#include "controller/nodepool.h"
#include "core/log.h"

#define LABEL_REGISTERED  "karpenter.sh/registered"
#define LABEL_INITIALIZED "karpenter.sh/initialized"
#define LABEL_ITYPE       "node.kubernetes.io/instance-type"

typedef struct np_state {
  json_t *nodeclasses; /* lp_cloudprovider_supported_nodeclasses */
} np_state;

static void *state_new(lp_controller *c) {
  np_state *s = lp_xcalloc(1, sizeof *s);
  s->nodeclasses = lp_cloudprovider_supported_nodeclasses(lp_env_cloud(lp_controller_env(c)));
  return s;
}

static void state_free(void *state) {
  np_state *s = state;
  json_decref(s->nodeclasses);
  free(s);
}

/* ---- resources ------------------------------------------------------------------------------ */

typedef struct usage {
  lp_ctrl_env *env;
  const char *pool;
  json_t *sums;   /* resource -> real, in base units */
  json_t *binary; /* resource -> true when some quantity of it came in a binary unit ("Ki") */
  json_int_t nodes;
} usage;

static const char *label(const json_t *obj, const char *key) {
  return obj ? lp_obj_label(obj, key) : NULL;
}

static int label_true(const json_t *obj, const char *key) {
  const char *v = label(obj, key);
  return v && strcmp(v, "true") == 0;
}

static void add_quantity(usage *u, const char *resource, const json_t *value) {
  const char *text = json_string_value(value);
  double q = 0;
  if (text)
    lp_quantity_parse(text, &q);
  else if (json_is_number(value))
    q = json_number_value(value);
  else
    return;
  json_object_set_new(u->sums, resource, json_real(json_real_value(json_object_get(u->sums, resource)) + q));
  size_t n = text ? strlen(text) : 0;
  if (n > 1 && text[n - 1] == 'i') json_object_set_new(u->binary, resource, json_true());
}

static const json_t *capacity_of(const json_t *obj) {
  return json_object_get(json_object_get(obj, "status"), "capacity");
}

/* One instance: claim and node (either may be NULL), as the comment at the top says. */
static void add_instance(usage *u, const json_t *claim, const json_t *node) {
  if (claim ? lp_obj_deleting(claim) || lp_condition_is(claim, "InstanceTerminating", "True")
            : lp_obj_deleting(node))
    return;
  const json_t *owner = !node || (claim && !label_true(node, LABEL_REGISTERED)) ? claim : node;
  const char *pool = label(owner, LP_LABEL_NODEPOOL);
  if (!pool || strcmp(pool, u->pool) != 0) return;
  u->nodes++;
  const json_t *node_capacity = node ? capacity_of(node) : NULL;
  const char *resource;
  const json_t *value;
  json_object_foreach((json_t *)node_capacity, resource, value) add_quantity(u, resource, value);
  if (!claim || label_true(node, LABEL_INITIALIZED)) return;
  /* not initialized: what the Node does not report yet, the NodeClaim's launch result says */
  json_object_foreach((json_t *)capacity_of(claim), resource, value) {
    double q = 0;
    const json_t *reported = json_object_get(node_capacity, resource);
    if (reported && lp_quantity_parse(json_string_value(reported), &q) == 0 && q != 0) continue;
    add_quantity(u, resource, value);
  }
}

/* A Node Karpenter's cluster state leaves out: one of a pool without a providerID, or one whose
 * instance-type label has not arrived before initialization. */
static int node_untracked(const json_t *node) {
  const char *pid = lp_obj_str(node, "spec.providerID");
  return label(node, LP_LABEL_NODEPOOL) &&
         (!pid || !*pid || (!label(node, LABEL_ITYPE) && !label_true(node, LABEL_INITIALIZED)));
}

static void count_claim(const char *key, json_t *claim, void *ud) {
  (void)key;
  usage *u = ud;
  const char *pid = lp_obj_str(claim, "status.providerID");
  if (!pid || !*pid) return; /* not launched */
  json_t *node = lp_env_index_first(u->env, LP_INDEX_NODE_BY_PROVIDER_ID, pid, NULL);
  add_instance(u, claim, node && !node_untracked(node) ? node : NULL);
}

static void count_node(const char *key, json_t *node, void *ud) {
  (void)key;
  usage *u = ud;
  const char *pid = lp_obj_str(node, "spec.providerID");
  if (node_untracked(node) || lp_env_index_first(u->env, LP_INDEX_NODECLAIM_BY_PROVIDER_ID, pid, NULL))
    return; /* counted with its NodeClaim */
  add_instance(u, NULL, node);
}

/* {cpu, memory, pods, ephemeral-storage, nodes, and whatever else the pool's nodes have}; new. */
static json_t *pool_resources(lp_ctrl_env *env, const char *pool, json_int_t *nodes) {
  usage u = {env, pool, json_object(), json_object(), 0};
  lp_env_each(env, LP_KIND_NODECLAIM, count_claim, &u);
  lp_env_each(env, LP_KIND_NODE, count_node, &u);
  json_t *out =
      json_pack("{s:s, s:s, s:s, s:s}", "cpu", "0", "memory", "0", "pods", "0", "ephemeral-storage", "0");
  const char *resource;
  json_t *sum;
  json_object_foreach(u.sums, resource, sum) {
    char text[48];
    lp_quantity_format(json_real_value(sum), json_object_get(u.binary, resource) != NULL, text, sizeof text);
    json_object_set_new(out, resource, json_string(text));
  }
  char count[24];
  snprintf(count, sizeof count, "%lld", (long long)u.nodes);
  json_object_set_new(out, "nodes", json_string(count));
  json_decref(u.sums);
  json_decref(u.binary);
  *nodes = u.nodes;
  return out;
}

/* ---- conditions ----------------------------------------------------------------------------- */

static const char *const ready_parts[] = {"ValidationSucceeded", "NodeClassReady", NULL};

static void set_validation(json_t *desired, double now) {
  char *why = lp_nodepool_validate(desired);
  if (why)
    lp_condition_set(desired, "ValidationSucceeded", "False", "NodePoolValidationFailed", why, now);
  else
    lp_condition_set(desired, "ValidationSucceeded", "True", NULL, NULL, now);
  free(why);
}

static void set_nodeclass_ready(json_t *desired, const json_t *nc, double now) {
  const json_t *ready = lp_condition_get(nc, "Ready");
  const char *status = json_string_value(json_object_get(ready, "status"));
  if (!nc)
    lp_condition_set(desired, "NodeClassReady", "False", "NodeClassNotFound",
                     "NodeClass not found on cluster", now);
  else if (lp_obj_deleting(nc))
    lp_condition_set(desired, "NodeClassReady", "False", "NodeClassTerminating", "NodeClass is Terminating",
                     now);
  else if (status && strcmp(status, "True") == 0)
    lp_condition_set(desired, "NodeClassReady", "True", NULL, NULL, now);
  else if (status && strcmp(status, "False") == 0)
    lp_condition_set(desired, "NodeClassReady", "False", json_string_value(json_object_get(ready, "reason")),
                     json_string_value(json_object_get(ready, "message")), now);
  else
    lp_condition_set(desired, "NodeClassReady", "False", "NodeClassReadinessUnknown",
                     "Node Class Readiness Unknown", now);
}

/* ---- the reconcile -------------------------------------------------------------------------- */

typedef struct status_write {
  lp_controller *c;
  const char *key;
  char *before, *after; /* Ready's status, for the log */
  json_t *ready;        /* the new Ready condition (own) */
} status_write;

static void report(lp_controller *c, const char *key, const char *before, const char *after,
                   const json_t *ready) {
  if (strcmp(before, after) == 0) return;
  if (strcmp(after, "True") == 0)
    lp_info(lp_controller_logger(c), "nodepool ready", LPF_STR("nodepool", key));
  else
    lp_warn(lp_controller_logger(c), "nodepool not ready", LPF_STR("nodepool", key), LPF_STR("status", after),
            LPF_STR("reason", json_string_value(json_object_get(ready, "reason"))),
            LPF_STR("message", json_string_value(json_object_get(ready, "message"))));
}

static void written(const lp_kube_reply *reply, void *ud) {
  status_write *w = ud;
  lp_error *err = NULL;
  if (reply->error && strcmp(reply->error->code, "NotFound") != 0) /* a deleted pool needs no status */
    err = lp_error_new(reply->error->code, "%s", reply->error->message);
  else if (!reply->error)
    report(w->c, w->key, w->before, w->after, w->ready);
  lp_controller_done(w->c, w->key, err, 0);
  free(w->before);
  free(w->after);
  json_decref(w->ready);
  free(w);
}

static const char *ready_status(const json_t *obj) {
  return json_string_value(json_object_get(lp_condition_get(obj, "Ready"), "status")) ?: "";
}

/* The merge patch turning status into desired: desired itself, plus null for each resource that is
 * no longer there (a merge patch keeps the keys of an object it does not name). */
static json_t *status_patch(const json_t *status, const json_t *desired) {
  json_t *patch = json_deep_copy(desired);
  json_t *resources = json_object_get(patch, "resources");
  const char *resource;
  const json_t *v;
  json_object_foreach(json_object_get((json_t *)status, "resources"), resource, v) {
    if (!json_object_get(resources, resource)) json_object_set_new(resources, resource, json_null());
  }
  return json_pack("{s:o}", "status", patch);
}

static void reconcile(lp_controller *c, const char *key) {
  lp_ctrl_env *env = lp_controller_env(c);
  np_state *s = lp_controller_state(c);
  json_t *pool = lp_env_get(env, LP_KIND_NODEPOOL, key);
  const json_t *ref = lp_obj_get(pool, "spec.template.spec.nodeClassRef");
  if (!pool || !lp_nodeclass_ref_supported(s->nodeclasses, ref)) { /* gone, or another provider's */
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  double now = lp_env_wall(env);
  json_t *desired = json_deep_copy(pool);
  json_t *status = json_object_get(desired, "status");
  if (!json_is_object(status)) json_object_set_new(desired, "status", status = json_object());
  json_int_t nodes = 0;
  json_object_set_new(status, "resources", pool_resources(env, key, &nodes));
  json_object_set_new(status, "nodes", json_integer(nodes));
  const json_t *nc = lp_env_nodeclass_of(env, ref); /* by group and name */
  json_t *generation = json_object_get(json_object_get(nc, "metadata"), "generation");
  if (json_is_integer(generation)) json_object_set(status, "nodeClassObservedGeneration", generation);
  set_validation(desired, now);
  set_nodeclass_ready(desired, nc, now);
  lp_condition_rollup_ready(desired, ready_parts, now);
  const json_t *cached_status = json_object_get(pool, "status");
  if (json_equal(status, (json_t *)cached_status)) {
    json_decref(desired);
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  status_write *w = lp_xmalloc(sizeof *w);
  w->c = c;
  w->key = key;
  w->before = lp_xstrdup(ready_status(pool));
  w->after = lp_xstrdup(ready_status(desired));
  w->ready = json_incref(lp_condition_get(desired, "Ready"));
  lp_env_patch(env, LP_KIND_NODEPOOL, key, lp_obj_resource_version(pool), "status",
               status_patch(cached_status, status), written, w);
  json_decref(desired);
}

static void enqueue_pool_of(lp_controller *c, const json_t *obj) {
  lp_controller_enqueue(c, label(obj, LP_LABEL_NODEPOOL));
}

typedef struct class_change {
  lp_controller *c;
  const char *name;
} class_change;

/* By name alone: a class of that name in another group enqueues the pool too, for nothing (its ref's
 * group is compared in reconcile), so the changed object's group need not be known. */
static void enqueue_if_refers(const char *key, json_t *pool, void *ud) {
  class_change *cc = ud;
  const char *name = lp_obj_str(pool, "spec.template.spec.nodeClassRef.name");
  if (name && strcmp(name, cc->name) == 0) lp_controller_enqueue(cc->c, key);
}

static int same_at(const json_t *a, const json_t *b, const char *path) {
  return json_equal(lp_obj_get(a, path), lp_obj_get(b, path)) ||
         (!lp_obj_get(a, path) && !lp_obj_get(b, path));
}

/* Whether a NodeClaim's or Node's change can move a pool's count: what add_instance reads. A Node's
 * heartbeat status writes do not. */
static int counted_parts_changed(const json_t *old_obj, const json_t *new_obj) {
  static const char *const paths[] = {"metadata.labels", "metadata.deletionTimestamp",
                                      "spec.providerID", "status.providerID",
                                      "status.capacity", NULL};
  if (!old_obj || !new_obj) return 1;
  for (size_t i = 0; paths[i]; i++)
    if (!same_at(old_obj, new_obj, paths[i])) return 1;
  return lp_condition_is(old_obj, "InstanceTerminating", "True") !=
         lp_condition_is(new_obj, "InstanceTerminating", "True");
}

static void on_change(lp_controller *c, lp_kind kind, const json_t *old_obj, const json_t *new_obj) {
  switch (kind) {
  case LP_KIND_NODECLAIM:
  case LP_KIND_NODE:
    if (!counted_parts_changed(old_obj, new_obj)) break;
    enqueue_pool_of(c, old_obj);
    enqueue_pool_of(c, new_obj);
    break;
  case LP_KIND_NODECLASS: {
    class_change cc = {c, lp_obj_name(new_obj ? new_obj : old_obj)};
    if (cc.name) lp_env_each(lp_controller_env(c), LP_KIND_NODEPOOL, enqueue_if_refers, &cc);
    break;
  }
  default:
    break;
  }
}

const lp_controller_def lp_nodepool_status_controller = {
    .name = "nodepool.status",
    .primary = LP_KIND_NODEPOOL,
    .on_change = on_change,
    .reconcile = reconcile,
    .state_new = state_new,
    .state_free = state_free,
};

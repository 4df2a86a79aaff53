/* Registration and initialization, the lifecycle's Node steps (docs/controllers.md).
 *
 * Registration finds the one Node whose spec.providerID is the NodeClaim's and makes it the
 * NodeClaim's: termination finalizer, owner reference, the NodeClaim's labels and annotations, its
 * taints (and its startup taints the first time; neither with karpenter.sh/do-not-sync-taints=true),
 * the karpenter.sh/unregistered taint removed and karpenter.sh/registered=true. The kubelet must
 * register with that taint so nothing schedules before Karpenter's labels and taints are on the Node;
 * a Node without it registers anyway, with an UnregisteredTaintMissing event.
 *
 * Initialization waits for the Node to be Ready, rid of the NodeClaim's startup taints and of the
 * taints that mark a node not yet usable, and to expose every resource the NodeClaim asked for; then
 * it labels the Node karpenter.sh/initialized=true. Both write the Node with a merge patch carrying its
 * resourceVersion. */
#include <stdio.h>
#include <string.h>

#include "contract/requirements.h"
#include "controller/conditions.h"
#include "controller/lifecycle_internal.h"
#include "core/log.h"

#define UNREGISTERED_TAINT "karpenter.sh/unregistered"
#define DO_NOT_SYNC_TAINTS "karpenter.sh/do-not-sync-taints"
#define READINESS_PREFIX   "readiness.k8s.io/"

/* Taints that only say a node is not usable yet (Karpenter's KnownEphemeralTaints), plus any key
 * under readiness.k8s.io/. */
static const char *const ephemeral_taints[][2] = {
    {"node.kubernetes.io/not-ready", "NoSchedule"},
    {"node.kubernetes.io/not-ready", "NoExecute"},
    {"node.kubernetes.io/unreachable", "NoSchedule"},
    {"node.cloudprovider.kubernetes.io/uninitialized", "NoSchedule"},
    {UNREGISTERED_TAINT, "NoExecute"},
};

static const char *str(const json_t *obj, const char *key) {
  return json_string_value(json_object_get(obj, key));
}

static int same(const char *a, const char *b) {
  return a && b && strcmp(a, b) == 0;
}

/* Taints are identified by key and effect, as Kubernetes' MatchTaint does. */
static const json_t *find_taint(const json_t *taints, const char *key, const char *effect) {
  size_t i;
  const json_t *t;
  json_array_foreach(taints, i, t) {
    if (same(str(t, "key"), key) && same(str(t, "effect"), effect)) return t;
  }
  return NULL;
}

static const json_t *node_taints(const json_t *node) {
  return json_object_get(json_object_get(node, "spec"), "taints");
}

/* Appends each of add's taints that taints lacks. */
static void merge_taints(json_t *taints, const json_t *add) {
  size_t i;
  json_t *t;
  json_array_foreach(add, i, t) {
    if (!find_taint(taints, str(t, "key"), str(t, "effect"))) json_array_append(taints, t);
  }
}

static void taint_text(const json_t *t, char *out, size_t n) {
  const char *value = str(t, "value");
  snprintf(out, n, "%s%s%s:%s", str(t, "key") ?: "", value && *value ? "=" : "", value && *value ? value : "",
           str(t, "effect") ?: "");
}

static void merge_object(json_t *md, const char *field, const json_t *add) {
  json_t *map = json_object_get(md, field);
  if (!json_is_object(map)) {
    map = json_object();
    json_object_set_new(md, field, map);
  }
  if (json_is_object(add)) json_object_update(map, (json_t *)add);
}

/* ---- writes -------------------------------------------------------------------------------- */

static void initialize(lc_run *r);

static void node_written(const lp_kube_reply *reply, void *ud) {
  lc_run *r = ud;
  if (reply->error) { /* liveness still runs: a Node that cannot be written must not outlive its timeout */
    /* a Node deleted meanwhile is no failure: the NodeClaim is reconciled again on its deletion */
    if (!lp_controller_gone(r->c, r->key, reply, "writing the node"))
      lp_error_keep_first(&r->err, lp_error_new(reply->error->code, "%s", reply->error->message));
    lc_node_done(r);
    return;
  }
  json_decref(r->node);
  r->node = json_incref(reply->object);
  r->next(r);
}

/* Merge-patches r->node's metadata fields and spec.taints to those of want, then runs next. */
static void patch_node(lc_run *r, const json_t *want, lc_step next) {
  static const char *const fields[] = {"finalizers", "ownerReferences", "labels", "annotations", NULL};
  json_t *md = json_object();
  const json_t *want_md = json_object_get(want, "metadata");
  for (size_t i = 0; fields[i]; i++) {
    json_t *v = json_object_get(want_md, fields[i]);
    if (v) json_object_set(md, fields[i], v);
  }
  json_t *patch = json_pack("{s:o}", "metadata", md);
  json_t *taints = json_object_get(json_object_get(want, "spec"), "taints");
  if (taints && !json_equal(taints, node_taints(r->node)))
    json_object_set_new(patch, "spec", json_pack("{s:O}", "taints", taints));
  r->next = next;
  lp_env_patch(r->env, LP_KIND_NODE, lp_obj_name(r->node), lp_obj_resource_version(r->node), NULL, patch,
               node_written, r);
}

/* ---- registration -------------------------------------------------------------------------- */

/* The Node as registration leaves it. */
static json_t *registered_node(const json_t *node, const json_t *claim) {
  json_t *want = json_deep_copy(node);
  json_t *md = json_object_get(want, "metadata");
  const json_t *claim_md = json_object_get(claim, "metadata");
  int first = !same(lp_obj_label(node, LC_LABEL_REGISTERED), "true");
  if (!lp_obj_has_finalizer(node, LC_FINALIZER))
    json_object_set_new(md, "finalizers", lp_obj_finalizers_with(node, LC_FINALIZER, 1));

  json_t *owners = json_object_get(md, "ownerReferences");
  if (!json_is_array(owners)) {
    owners = json_array();
    json_object_set_new(md, "ownerReferences", owners);
  }
  int owned = 0;
  size_t i;
  json_t *o;
  json_array_foreach(owners, i, o) owned |= same(str(o, "uid"), lp_obj_uid(claim));
  if (!owned) json_array_append_new(owners, lp_obj_owner_ref(claim, "karpenter.sh/v1", "NodeClaim"));

  merge_object(md, "labels", json_object_get(claim_md, "labels"));
  merge_object(md, "annotations", json_object_get(claim_md, "annotations"));
  json_object_set_new(json_object_get(md, "labels"), LC_LABEL_REGISTERED, json_string("true"));

  json_t *spec = json_object_get(want, "spec");
  if (!json_is_object(spec)) {
    spec = json_object();
    json_object_set_new(want, "spec", spec);
  }
  json_t *taints = json_array();
  json_array_foreach(node_taints(node), i, o) {
    if (!(same(str(o, "key"), UNREGISTERED_TAINT) && same(str(o, "effect"), "NoExecute")))
      json_array_append(taints, o);
  }
  if (!same(lp_obj_label(node, DO_NOT_SYNC_TAINTS), "true")) {
    const json_t *claim_spec = json_object_get(claim, "spec");
    merge_taints(taints, json_object_get(claim_spec, "taints"));
    /* once removed by their daemon, startup taints must not come back */
    if (first) merge_taints(taints, json_object_get(claim_spec, "startupTaints"));
  }
  json_object_set_new(spec, "taints", taints);
  return want;
}

static void registered(lc_run *r) {
  lp_condition_set(r->claim, LC_REGISTERED, "True", NULL, NULL, r->now);
  json_object_set_new(json_object_get(r->claim, "status"), "nodeName", json_string(lp_obj_name(r->node)));
  initialize(r);
}

void lc_register(lc_run *r) {
  if (!lp_condition_is(r->claim, LC_LAUNCHED, "True")) {
    lc_node_done(r);
    return;
  }
  const char *pid = lp_obj_str(r->claim, "status.providerID");
  size_t count = 0;
  json_t *node = pid ? lp_env_index_first(r->env, LP_INDEX_NODE_BY_PROVIDER_ID, pid, &count) : NULL;
  r->node = count == 1 ? json_incref(node) : NULL;
  if (lp_condition_is(r->claim, LC_REGISTERED, "True")) {
    initialize(r);
    return;
  }
  if (count != 1) {
    if (count == 0)
      lp_condition_set(r->claim, LC_REGISTERED, "Unknown", "NodeNotFound", "Node not registered with cluster",
                       r->now);
    else
      lp_condition_set(r->claim, LC_REGISTERED, "False", "MultipleNodesFound",
                       "Invariant violated, matched multiple nodes", r->now);
    lc_node_done(r);
    return;
  }
  if (!same(lp_obj_label(node, LC_LABEL_REGISTERED), "true") &&
      !find_taint(node_taints(node), UNREGISTERED_TAINT, "NoExecute")) {
    lp_warn(lp_controller_logger(r->c), "node registered without the unregistered taint",
            LPF_STR("nodeclaim", lp_obj_name(r->claim)), LPF_STR("node", lp_obj_name(node)),
            LPF_STR("provider_id", pid));
    lp_env_event(r->env, r->stored, "Warning", "UnregisteredTaintMissing",
                 "Missing %s:NoExecute taint which prevents registration related race conditions on "
                 "Karpenter-managed nodes",
                 UNREGISTERED_TAINT);
  }
  json_t *want = registered_node(node, r->claim);
  if (json_equal(want, node))
    registered(r);
  else
    patch_node(r, want, registered);
  json_decref(want);
}

/* ---- initialization ------------------------------------------------------------------------ */

/* Why the Node is not initialized yet: a reason (NULL when it is) and its message in msg. */
static const char *not_initialized(const json_t *node, const json_t *claim, char *msg, size_t n) {
  if (!node) {
    snprintf(msg, n, "Node not registered with cluster");
    return "NodeNotFound";
  }
  if (!lp_condition_is(node, "Ready", "True")) {
    snprintf(msg, n, "Node status is NotReady");
    return "NodeNotReady";
  }
  const json_t *taints = node_taints(node), *t;
  char text[256];
  size_t i;
  json_array_foreach(json_object_get(json_object_get(claim, "spec"), "startupTaints"), i, t) {
    const json_t *left = find_taint(taints, str(t, "key"), str(t, "effect"));
    if (left) {
      taint_text(left, text, sizeof text);
      snprintf(msg, n, "StartupTaint \"%s\" still exists", text);
      return "StartupTaintsExist";
    }
  }
  json_array_foreach(taints, i, t) {
    const char *key = str(t, "key") ?: "";
    int ephemeral = strncmp(key, READINESS_PREFIX, strlen(READINESS_PREFIX)) == 0;
    for (size_t k = 0; !ephemeral && k < sizeof ephemeral_taints / sizeof ephemeral_taints[0]; k++)
      ephemeral = same(key, ephemeral_taints[k][0]) && same(str(t, "effect"), ephemeral_taints[k][1]);
    if (ephemeral) {
      taint_text(t, text, sizeof text);
      snprintf(msg, n, "KnownEphemeralTaint \"%s\" still exists", text);
      return "KnownEphemeralTaintsExist";
    }
  }
  /* extended resources appear only once their device plugin registered */
  const json_t *allocatable = json_object_get(json_object_get(node, "status"), "allocatable");
  const char *name;
  json_t *q;
  json_object_foreach(
      json_object_get(json_object_get(json_object_get(claim, "spec"), "resources"), "requests"), name, q) {
    double want = 0, have = 0;
    if (lp_quantity_parse(json_string_value(q) ?: "0", &want) != 0 || want == 0) continue;
    if (lp_quantity_parse(str(allocatable, name) ?: "0", &have) != 0 || have == 0) {
      snprintf(msg, n, "Resource \"%s\" was requested but not registered", name);
      return "ResourceNotRegistered";
    }
  }
  return NULL;
}

static void initialized(lc_run *r) {
  lp_condition_set(r->claim, LC_INITIALIZED, "True", NULL, NULL, r->now);
  lc_node_done(r);
}

static void initialize(lc_run *r) {
  if (!lp_condition_is(r->claim, LC_REGISTERED, "True") ||
      lp_condition_is(r->claim, LC_INITIALIZED, "True")) {
    lc_node_done(r);
    return;
  }
  char msg[320];
  const char *reason = not_initialized(r->node, r->claim, msg, sizeof msg);
  if (reason) {
    lp_condition_set(r->claim, LC_INITIALIZED, "Unknown", reason, msg, r->now);
    lc_node_done(r);
    return;
  }
  if (same(lp_obj_label(r->node, LC_LABEL_INITIALIZED), "true")) {
    initialized(r);
    return;
  }
  json_t *want = json_pack("{s:{s:{s:s}}}", "metadata", "labels", LC_LABEL_INITIALIZED, "true");
  patch_node(r, want, initialized);
  json_decref(want);
}

/* The story `luaprov demo` tells: the mapping's node class and a NodePool are applied, pending pods
 * get nodes that launch, register and take the pods; an edit of the node class drifts those nodes and
 * they are replaced; the repair policy is hot-reloaded and a node that goes NotReady is repaired; the
 * Cluster Autoscaler scales a Bizfly pool through the externalgrpc server. Each step checks its outcome
 * against the API, as an operator would with kubectl. The cloud's part (the class's spec, how its
 * status is summed up, the edit that drifts it) is the mapping's `demo` table, its resource the
 * mapping's node class descriptor (d->mapping). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/demo.h"
#include "controller/conditions.h"
#include "controller/controller.h"

#define NC    "/apis/karpenter.sh/v1/nodeclaims"
#define PODS  "/api/v1/namespaces/default/pods"
#define NPODS 6

/* ---- reading the cluster ------------------------------------------------------------------ */

static json_t *items(demo *d, const char *path) {
  json_t *list = demo_kube(d, "GET", path, NULL, NULL);
  json_t *out = json_incref(json_object_get(list, "items"));
  json_decref(list);
  return out ? out : json_array();
}

typedef struct claims_view {
  int total, launched, registered, initialized, deleting, drifted;
} claims_view;

static claims_view claims(demo *d) {
  claims_view v = {0};
  json_t *list = items(d, NC);
  size_t i;
  json_t *c;
  json_array_foreach(list, i, c) {
    v.total++;
    v.launched += lp_condition_is(c, "Launched", "True");
    v.registered += lp_condition_is(c, "Registered", "True");
    v.initialized += lp_condition_is(c, "Initialized", "True") && !lp_obj_deleting(c);
    v.deleting += lp_obj_deleting(c);
    v.drifted += lp_condition_is(c, "Drifted", "True");
  }
  json_decref(list);
  return v;
}

/* Pods of the demo that run on a node. */
static int pods_running(demo *d) {
  json_t *list = items(d, PODS "?labelSelector=app%3Ddemo");
  int n = 0;
  size_t i;
  json_t *p;
  json_array_foreach(list, i, p) {
    const char *phase = lp_obj_str(p, "status.phase"), *node = lp_obj_str(p, "spec.nodeName");
    n += phase && strcmp(phase, "Running") == 0 && node && *node && !lp_obj_deleting(p);
  }
  json_decref(list);
  return n;
}

static void names_of(demo *d, json_t *set) {
  json_t *list = items(d, NC);
  size_t i;
  json_t *c;
  json_array_foreach(list, i, c) json_object_set_new(set, lp_obj_name(c), json_true());
  json_decref(list);
}

/* ---- the mapping's part ------------------------------------------------------------------- */

static const char *descriptor(demo *d, const char *field) {
  const char *v = json_string_value(json_object_get(json_object_get(d->mapping, "nodeclass"), field));
  return v ? v : "";
}

static const json_t *demo_part(demo *d, const char *section) {
  return json_object_get(json_object_get(d->mapping, "demo"), section);
}

/* "/apis/<group>/<version>/<resource>[/default]" of the node class. */
static void class_path(demo *d, char *out, size_t cap, int named) {
  snprintf(out, cap, "/apis/%s/%s/%s%s", descriptor(d, "group"), descriptor(d, "version"),
           descriptor(d, "resource"), named ? "/default" : "");
}

/* "4 <things>, 2 <others>, <label> <id>": what the mapping's demo.resolved asks for of the status. */
static void resolved_summary(demo *d, const json_t *status, char *out, size_t cap) {
  size_t i, n = 0;
  const json_t *entry;
  out[0] = '\0';
  json_array_foreach(demo_part(d, "resolved"), i, entry) {
    const char *label = json_string_value(json_object_get(entry, "label"));
    const json_t *list = json_object_get(status, json_string_value(json_object_get(entry, "field")));
    const char *show = json_string_value(json_object_get(entry, "show"));
    if (show)
      n += snprintf(out + n, n < cap ? cap - n : 0, "%s%s %s", n ? ", " : "", label ? label : "",
                    json_string_value(json_object_get(json_array_get(list, 0), show)) ?: "(none)");
    else
      n += snprintf(out + n, n < cap ? cap - n : 0, "%s%zu %s", n ? ", " : "", json_array_size(list),
                    label ? label : "");
    if (n >= cap) break;
  }
}

/* ---- steps -------------------------------------------------------------------------------- */

static int post(demo *d, const char *path, const char *body, const char *what) {
  long status = 0;
  json_decref(demo_kube(d, "POST", path, body, &status));
  if (status != 201) return demo_fail(d, "creating %s: HTTP %ld", what, status);
  return 0;
}

static int class_ready(demo *d, void *ud, char *line, size_t cap) {
  (void)ud;
  char path[300];
  class_path(d, path, sizeof path, 1);
  json_t *c = demo_kube(d, "GET", path, NULL, NULL);
  json_t *ready = lp_condition_get(c, "Ready");
  snprintf(line, cap, "%s default: Ready=%s %s", descriptor(d, "kind"),
           json_string_value(json_object_get(ready, "status")) ?: "(none)",
           ready ? json_string_value(json_object_get(ready, "reason")) : "(not resolved yet)");
  int ok = lp_condition_is(c, "Ready", "True");
  json_decref(c);
  return ok;
}

/* The node class "default": the mapping's demo spec under the descriptor's apiVersion and kind. */
static char *class_manifest(demo *d) {
  char api_version[200];
  snprintf(api_version, sizeof api_version, "%s/%s", descriptor(d, "group"), descriptor(d, "version"));
  json_t *spec = json_object_get(demo_part(d, "nodeclass"), "spec");
  json_t *manifest =
      json_pack("{s:s, s:s, s:{s:s}, s:O}", "apiVersion", api_version, "kind", descriptor(d, "kind"),
                "metadata", "name", "default", "spec", spec ? spec : json_object());
  char *text = json_dumps(manifest, JSON_COMPACT);
  json_decref(manifest);
  return text;
}

static int apply_classes(demo *d) {
  const char *kind = descriptor(d, "kind");
  const char *describes = json_string_value(json_object_get(demo_part(d, "nodeclass"), "describes"));
  demo_step(d, "apply the node class (%s: %s) and a NodePool", kind, describes ? describes : "its spec");
  char path[300], what[160];
  class_path(d, path, sizeof path, 0);
  snprintf(what, sizeof what, "the %s", kind);
  char *manifest = class_manifest(d);
  int rc = post(d, path, manifest, what);
  free(manifest);
  if (rc != 0) return -1;
  json_t *pool = json_loads(
      "{\"apiVersion\":\"karpenter.sh/v1\",\"kind\":\"NodePool\",\"metadata\":{\"name\":\"default\"},"
      "\"spec\":{\"template\":{\"metadata\":{\"labels\":{\"team\":\"demo\"}},\"spec\":{"
      "\"requirements\":[{\"key\":\"karpenter.sh/"
      "capacity-type\",\"operator\":\"In\",\"values\":[\"on-demand\"]},"
      "{\"key\":\"kubernetes.io/arch\",\"operator\":\"In\",\"values\":[\"amd64\"]}]}},"
      "\"disruption\":{\"consolidateAfter\":\"Never\",\"budgets\":[{\"nodes\":\"1\"}]},"
      "\"limits\":{\"cpu\":\"64\"}}}",
      0, NULL);
  json_object_set_new(
      json_object_get(json_object_get(json_object_get(pool, "spec"), "template"), "spec"), "nodeClassRef",
      json_pack("{s:s, s:s, s:s}", "group", descriptor(d, "group"), "kind", kind, "name", "default"));
  char *pool_text = json_dumps(pool, JSON_COMPACT);
  json_decref(pool);
  rc = post(d, "/apis/karpenter.sh/v1/nodepools", pool_text, "the NodePool");
  free(pool_text);
  if (rc != 0) return -1;
  snprintf(what, sizeof what, "the %s to resolve", kind);
  if (demo_wait(d, what, 20, class_ready, NULL) != 0) return -1;
  class_path(d, path, sizeof path, 1);
  json_t *c = demo_kube(d, "GET", path, NULL, NULL);
  char summary[300];
  resolved_summary(d, json_object_get(c, "status"), summary, sizeof summary);
  demo_ok(d, "resolved: %s", summary);
  json_decref(c);
  return 0;
}

static int all_pods_running(demo *d, void *ud, char *line, size_t cap) {
  (void)ud;
  claims_view v = claims(d);
  int running = pods_running(d);
  snprintf(line, cap, "nodeclaims %d: launched %d, registered %d, initialized %d; pods running %d/%d",
           v.total, v.launched, v.registered, v.initialized, running, NPODS);
  /* the binder may place pods a moment before the lifecycle controller records Initialized */
  return running == NPODS && v.total > 0 && v.initialized == v.total;
}

/* cpu and memory requests of the demo's pods */
static const char *const shapes[NPODS][2] = {{"500m", "512Mi"}, {"500m", "512Mi"}, {"1", "1Gi"},
                                             {"1", "2Gi"},      {"250m", "256Mi"}, {"3", "4Gi"}};

static int create_pod(demo *d, int i) {
  char body[512], what[32];
  snprintf(body, sizeof body,
           "{\"metadata\":{\"name\":\"web-%d\",\"labels\":{\"app\":\"demo\"}},\"spec\":{\"containers\":[{"
           "\"name\":\"app\",\"image\":\"nginx\",\"resources\":{\"requests\":{\"cpu\":\"%s\",\"memory\":"
           "\"%s\"}}}]}}",
           i, shapes[i][0], shapes[i][1]);
  snprintf(what, sizeof what, "pod web-%d", i);
  return post(d, PODS, body, what);
}

/* The demo plays the pods' ReplicaSet: an evicted pod is created again (and so is pending until a
 * node has room), as a Deployment's controller would. Returns how many it recreated. */
static int recreate_evicted(demo *d) {
  int made = 0;
  for (int i = 0; i < d->pods_kept; i++) {
    char path[128];
    snprintf(path, sizeof path, PODS "/web-%d", i);
    long status = 0;
    json_decref(demo_kube(d, "GET", path, NULL, &status));
    if (status == 404 && create_pod(d, i) == 0) made++;
  }
  d->pods_recreated += made;
  return made;
}

static int provision(demo *d) {
  demo_step(d, "%d pending pods of mixed shapes: the provisioner packs them into NodeClaims", NPODS);
  for (int i = 0; i < NPODS; i++)
    if (create_pod(d, i) != 0) return -1;
  demo_note(d, "the simulated scheduler finds no node: the pods are Unschedulable");
  if (demo_wait(d, "every pod to run on a new node", 60, all_pods_running, NULL) != 0) return -1;
  claims_view v = claims(d);
  d->nodes_launched = v.initialized;
  d->pods_bound = pods_running(d);
  demo_ok(d, "%d nodes launched, registered and initialized; %d pods bound", v.initialized, d->pods_bound);
  return 0;
}

/* How many of the NodeClaims named in old (a set) still exist. */
static int claims_left(demo *d, const json_t *old) {
  json_t *now = json_object();
  names_of(d, now);
  int left = 0;
  const char *name;
  json_t *unused;
  json_object_foreach((json_t *)old, name, unused) left += json_object_get(now, name) != NULL;
  json_decref(now);
  return left;
}

typedef struct replacing {
  json_t *old; /* names of the NodeClaims before the change */
  int seen_drifted;
} replacing;

static int replaced(demo *d, void *ud, char *line, size_t cap) {
  replacing *r = ud;
  recreate_evicted(d);
  int old_left = claims_left(d, r->old);
  claims_view v = claims(d);
  if (v.drifted > r->seen_drifted) r->seen_drifted = v.drifted;
  int running = pods_running(d);
  snprintf(line, cap, "drifted %d, old nodeclaims left %d/%zu, new ones initialized %d, pods running %d/%d",
           v.drifted, old_left, json_object_size(r->old), v.initialized - (old_left - v.deleting), running,
           NPODS);
  return old_left == 0 && running == NPODS;
}

static int drift(demo *d) {
  const json_t *edit = demo_part(d, "drift");
  const char *describes = json_string_value(json_object_get(edit, "describes"));
  const char *reason = json_string_value(json_object_get(edit, "reason"));
  demo_step(d, "%s: the drift policy reports %s, nodes are replaced one at a time (budget: 1)",
            describes ? describes : "edit the node class", reason ? reason : "drift");
  demo_note(d, "the demo plays the pods' ReplicaSet: an evicted pod is created again");
  replacing r = {.old = json_object()};
  names_of(d, r.old);
  long status = 0;
  char path[300];
  class_path(d, path, sizeof path, 1);
  char *patch = json_dumps(json_object_get(edit, "patch"), JSON_COMPACT);
  json_decref(demo_kube(d, "PATCH", path, patch ? patch : "{}", &status));
  free(patch);
  if (status != 200) {
    json_decref(r.old);
    return demo_fail(d, "patching the %s: HTTP %ld", descriptor(d, "kind"), status);
  }
  int rc = demo_wait(d, "every drifted node to be replaced", 120, replaced, &r);
  if (rc == 0) {
    d->nodes_drifted = (int)demo_metric(d, "luaprov_nodeclaims_disrupted_total{reason=\"drifted\"");
    d->nodes_replaced = (int)json_object_size(r.old);
    demo_ok(d, "%d nodes drifted and replaced; every pod runs again (%d evicted and recreated)",
            d->nodes_replaced, d->pods_recreated);
  }
  json_decref(r.old);
  return rc;
}

static int generation_is(demo *d, void *ud, char *line, size_t cap) {
  long long want = *(long long *)ud;
  d->generation = (long long)demo_metric(d, "luaprov_script_generation");
  snprintf(line, cap, "script generation %lld", d->generation);
  return d->generation >= want;
}

static int reload_repair_policy(demo *d) {
  demo_step(d, "hot-reload the repair policy: tolerate NotReady for 10 s instead of 30 min");
  char path[400];
  snprintf(path, sizeof path, "%s/scripts/policies/repair.lua", d->workdir);
  FILE *f = fopen(path, "w");
  if (!f) return demo_fail(d, "cannot write %s", path);
  fputs("-- written by luaprov demo: the default policy with a 10 s toleration\n"
        "local M = {}\n\n"
        "function M.policies(_ctx)\n"
        "  return {\n"
        "    { condition_type = \"Ready\", condition_status = \"False\", toleration_seconds = 10 },\n"
        "    { condition_type = \"Ready\", condition_status = \"Unknown\", toleration_seconds = 10 },\n"
        "  }\n"
        "end\n\n"
        "return M\n",
        f);
  fclose(f);
  long long want = (long long)demo_metric(d, "luaprov_script_generation") + 1;
  if (demo_wait(d, "the reload", 10, generation_is, &want) != 0) return -1;
  demo_ok(d, "generation %lld in service; the engine kept running", d->generation);
  return 0;
}

typedef struct repairing {
  char node[128], claim[128];
} repairing;

static int repaired(demo *d, void *ud, char *line, size_t cap) {
  repairing *r = ud;
  recreate_evicted(d);
  char path[256];
  snprintf(path, sizeof path, NC "/%s", r->claim);
  long status = 0;
  json_decref(demo_kube(d, "GET", path, NULL, &status));
  int running = pods_running(d);
  snprintf(line, cap, "nodeclaim %s %s; pods running %d/%d", r->claim, status == 404 ? "gone" : "still there",
           running, NPODS);
  return status == 404 && running == NPODS;
}

static int repair(demo *d) {
  demo_step(d, "a node's kubelet stops reporting Ready: after the toleration the node is repaired");
  json_t *list = items(d, NC);
  repairing r;
  memset(&r, 0, sizeof r);
  size_t i;
  json_t *c;
  json_array_foreach(list, i, c) {
    const char *node = lp_obj_str(c, "status.nodeName");
    if (node && *node && !lp_obj_deleting(c)) {
      snprintf(r.node, sizeof r.node, "%s", node);
      snprintf(r.claim, sizeof r.claim, "%s", lp_obj_name(c));
      break;
    }
  }
  json_decref(list);
  if (!r.node[0]) return demo_fail(d, "no registered node to break");
  char body[256];
  snprintf(body, sizeof body, "{\"node\":\"%s\",\"ready\":false}", r.node);
  json_decref(demo_admin(d, d->kubernetes, "POST", "/_sim/kubelet", body));
  demo_note(d, "node %s (nodeclaim %s) reports Ready=False", r.node, r.claim);
  if (demo_wait(d, "the repair", 60, repaired, &r) != 0) return -1;
  d->nodes_repaired = (int)demo_metric(d, "luaprov_nodeclaims_disrupted_total{reason=\"unhealthy\"");
  demo_ok(d, "repaired: the NodeClaim was force-terminated, its pods run on a new node");
  return 0;
}

/* What the running instances of the simulated account cost per hour. */
static double cost(demo *d) {
  json_t *state = demo_admin(d, d->cloud, "GET", "/_sim/state", NULL);
  double total = 0;
  size_t i;
  json_t *inst;
  json_array_foreach(json_object_get(state, "instances"), i, inst) {
    if (strcmp(lp_obj_str(inst, "status") ?: "", "Running") == 0)
      total += json_number_value(json_object_get(inst, "hourly_price"));
  }
  json_decref(state);
  return total;
}

typedef struct shrinking {
  json_t *old; /* names of the NodeClaims before the workload shrank */
} shrinking;

static int consolidated(demo *d, void *ud, char *line, size_t cap) {
  shrinking *sh = ud;
  recreate_evicted(d);
  int old_left = claims_left(d, sh->old);
  claims_view v = claims(d);
  int running = pods_running(d);
  double c = cost(d);
  snprintf(line, cap,
           "old nodeclaims left %d/%zu, nodeclaims %d (initialized %d), pods running %d/%d, %.3f per hour",
           old_left, json_object_size(sh->old), v.total, v.initialized, running, d->pods_kept, c);
  if (old_left || running != d->pods_kept || v.initialized != v.total || c >= d->cost_before) return 0;
  d->cost_after = c;
  return 1;
}

static int consolidate(demo *d) {
  demo_step(d, "the workload shrinks to %d small pods: consolidation moves them to a cheaper node", 2);
  d->cost_before = cost(d);
  shrinking sh = {.old = json_object()};
  names_of(d, sh.old);
  d->pods_kept = 2;
  for (int i = d->pods_kept; i < NPODS; i++) {
    char path[128];
    snprintf(path, sizeof path, PODS "/web-%d", i);
    json_decref(demo_kube(d, "DELETE", path, NULL, NULL));
  }
  long status = 0;
  json_decref(demo_kube(d, "PATCH", "/apis/karpenter.sh/v1/nodepools/default",
                        "{\"spec\":{\"disruption\":{\"consolidateAfter\":\"0s\"}}}", &status));
  if (status != 200) {
    json_decref(sh.old);
    return demo_fail(d, "enabling consolidation on the NodePool: HTTP %ld", status);
  }
  demo_note(d, "%zu node(s) cost %.3f per hour; the NodePool now consolidates (consolidateAfter: 0s)",
            json_object_size(sh.old), d->cost_before);
  int rc = demo_wait(d, "a cheaper node to take the pods", 90, consolidated, &sh);
  if (rc == 0) {
    d->nodes_consolidated = (int)json_object_size(sh.old);
    demo_ok(d, "%d node(s) consolidated after the 15 s validation: %.3f -> %.3f per hour, every pod runs",
            d->nodes_consolidated, d->cost_before, d->cost_after);
  }
  json_decref(sh.old);
  return rc;
}

static int bizfly(demo *d) {
  demo_step(d, "the Cluster Autoscaler scales a Bizfly worker pool through the externalgrpc server");
  char ids[8][64];
  int n = 0, before = 0, after = 0;
  const char *error = NULL;
  if (demo_grpc_node_groups(d, ids, 8, &n, &error) != 0) return demo_fail(d, "%s", error);
  if (n == 0) return demo_fail(d, "NodeGroups returned no group");
  demo_note(d, "NodeGroups: %d groups, the first is %s", n, ids[0]);
  if (demo_grpc_target_size(d, ids[0], &before, &error) != 0) return demo_fail(d, "%s", error);
  if (demo_grpc_increase_size(d, ids[0], 1, &error) != 0) return demo_fail(d, "%s", error);
  if (demo_grpc_refresh(d, &error) != 0) return demo_fail(d, "%s", error);
  if (demo_grpc_target_size(d, ids[0], &after, &error) != 0) return demo_fail(d, "%s", error);
  if (after != before + 1) return demo_fail(d, "target size %d after IncreaseSize(1) from %d", after, before);
  d->scale_ups = 1;
  demo_ok(d, "IncreaseSize(%s, 1): target size %d -> %d", ids[0], before, after);
  return 0;
}

int demo_story(demo *d) {
  int (*const steps[])(demo *) = {apply_classes, provision,   drift, reload_repair_policy,
                                  repair,        consolidate, bizfly};
  d->pods_kept = NPODS;
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
    if (steps[i](d) != 0) return -1;
  return 0;
}

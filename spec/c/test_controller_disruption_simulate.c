/* The consolidation simulation (engine/controller/disruption_simulate.c; docs/controllers.md "How
 * consolidation decides") against Nodes, NodeClaims and pods in the simulated API and the simulated
 * Alibaba catalogue's instance types: a half-empty node whose pods fit elsewhere is deleted outright; a
 * big node for small pods is replaced by one cheaper node, every option below its price; pods needing
 * two new nodes, a pod that cannot schedule at all, or one that would move onto a NodeClaim still
 * launching, are not feasible; a replacement that is not
 * cheaper says so; spot to spot only when allowed and with 15 cheaper types (cut to 15), on-demand to
 * spot pinned to spot; DaemonSet, mirror and finished pods stay behind. A controller of the test's own
 * lends dz_sim_new its environment. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract/shapes.h"
#include "controller/disruption_simulate.h"
#include "controller_fixture.h"
#include "provisioner_test_support.h"
#include "simulate_test_support.h"

static ctrl_fixture f;
static json_t *types; /* the ECSNodeClass default's instance types */

/* A snapshot of what the caches show now (after a moment for them to catch up), through the test's
 * own controller (simulate_test_support.h). */
static dz_sim *snapshot(void) {
  ctrl_run_for(&f, 0.3);
  int early = 0;
  dz_sim *sim = sp_snapshot(&f.loop, &early);
  CHECK(!early); /* later, never from inside dz_sim_new */
  CHECK(sim != NULL);
  return sim;
}

/* ---- the catalogue ---------------------------------------------------------------------------- */

static const json_t *type_named(const char *name) {
  size_t i;
  const json_t *t;
  json_array_foreach(types, i,
                     t) if (strcmp(json_string_value(json_object_get(t, "name")) ?: "", name) == 0) return t;
  return NULL;
}

/* The nth zone where type name has an available offering of capacity type ct (static storage), or
 * NULL. */
static const char *nth_zone(const char *name, const char *ct, int nth) {
  size_t i;
  const json_t *o;
  json_array_foreach(json_object_get(type_named(name), "offerings"), i, o) {
    if (json_is_true(json_object_get(o, "available")) &&
        strcmp(json_string_value(json_object_get(o, "capacity_type")) ?: "", ct) == 0 && nth-- == 0)
      return json_string_value(json_object_get(o, "zone"));
  }
  return NULL;
}

static const char *zone_of(const char *name, const char *ct) {
  return nth_zone(name, ct, 0);
}

/* The price of type name's offering in zone for ct (available or not), or -1; with zone NULL, the
 * cheapest available one of ct. */
static double price_of(const char *name, const char *zone, const char *ct) {
  double best = -1;
  size_t i;
  const json_t *o;
  json_array_foreach(json_object_get(type_named(name), "offerings"), i, o) {
    if (strcmp(json_string_value(json_object_get(o, "capacity_type")) ?: "", ct) != 0) continue;
    double v = json_number_value(json_object_get(o, "price"));
    if (zone && strcmp(json_string_value(json_object_get(o, "zone")) ?: "", zone) == 0) return v;
    if (!zone && json_is_true(json_object_get(o, "available")) && (best < 0 || v < best)) best = v;
  }
  return best;
}

/* ---- the cluster ------------------------------------------------------------------------------ */

/* The labels of a node of nodepool, instance type type, capacity type ct, in zone (own). */
static json_t *node_labels(const char *name, const char *pool, const char *type, const char *ct,
                           const char *zone) {
  return json_pack("{s:s, s:s, s:s, s:s, s:s}", "karpenter.sh/nodepool", pool, LP_LABEL_INSTANCE_TYPE, type,
                   LP_LABEL_ZONE, zone, LP_LABEL_CAPACITY_TYPE, ct, "kubernetes.io/hostname", name);
}

/* NodeClaim name with labels (borrowed), asking for cpu and memory: launched (its allocatable known,
 * for 110 pods), not initialized. */
static void claim_launching(const char *name, json_t *labels, const char *cpu, const char *memory) {
  char path[256];
  CHECK_INT(pt_post(&f, PT_CLAIMS,
                    json_pack("{s:s, s:s, s:{s:s, s:O}, s:{s:{s:s, s:s, s:s}, s:[], s:{s:{s:s, s:s}}}}",
                              "apiVersion", "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name", name,
                              "labels", labels, "spec", "nodeClassRef", "group", "karpenter.alibabacloud.com",
                              "kind", "ECSNodeClass", "name", "default", "requirements", "resources",
                              "requests", "cpu", cpu, "memory", memory)),
            201);
  snprintf(path, sizeof path, PT_CLAIMS "/%s/status", name);
  CHECK_INT(ctrl_kube_pack(&f, "PATCH", path, "{s:{s:{s:s, s:s, s:s}}}", "status", "allocatable", "cpu", cpu,
                           "memory", memory, "pods", "110"),
            200);
}

/* NodeClaim name becomes Initialized on a Node of its own name (Ready, allocatable cpu/memory, labels
 * borrowed); tainted: dedicated=x:NoSchedule, which no pod of the test tolerates (its pods can go only
 * to a new node). */
static void claim_joined(const char *name, json_t *labels, const char *cpu, const char *memory, int tainted) {
  char pid[128], path[256];
  snprintf(pid, sizeof pid, "ecs://luaprov-sim/%s", name);
  snprintf(path, sizeof path, PT_CLAIMS "/%s/status", name);
  CHECK_INT(ctrl_kube_pack(&f, "PATCH", path, "{s:{s:s, s:s, s:{s:s, s:s}, s:[{s:s, s:s}]}}", "status",
                           "providerID", pid, "nodeName", name, "allocatable", "cpu", cpu, "memory", memory,
                           "conditions", "type", "Initialized", "status", "True"),
            200);
  CHECK_INT(pt_post(&f, "/api/v1/nodes",
                    json_pack("{s:s, s:s, s:{s:s, s:O}, s:{s:s}, s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s}]}}",
                              "apiVersion", "v1", "kind", "Node", "metadata", "name", name, "labels", labels,
                              "spec", "providerID", pid, "status", "allocatable", "cpu", cpu, "memory",
                              memory, "pods", "110", "conditions", "type", "Ready", "status", "True")),
            201);
  if (!tainted) return;
  snprintf(path, sizeof path, "/api/v1/nodes/%s", name);
  CHECK_INT(ctrl_kube_pack(&f, "PATCH", path, "{s:{s:[{s:s, s:s, s:s}]}}", "spec", "taints", "key",
                           "dedicated", "value", "x", "effect", "NoSchedule"),
            200);
}

/* NodeClaim name of nodepool, Initialized, on Node name of instance type type, capacity type ct, in
 * zone (NULL: the first that sells it), with extra labels (stolen; may be NULL); see claim_joined. */
static void node_full(const char *name, const char *pool, const char *type, const char *ct, const char *zone,
                      json_t *extra, const char *cpu, const char *memory, int tainted) {
  if (!zone) zone = zone_of(type, ct);
  CHECK(zone != NULL);
  json_t *labels = node_labels(name, pool, type, ct, zone ? zone : "?");
  if (extra) json_object_update(labels, extra);
  json_decref(extra);
  claim_launching(name, labels, cpu, memory);
  claim_joined(name, labels, cpu, memory, tainted);
  json_decref(labels);
}

static void node_tainted(const char *name, const char *pool, const char *type, const char *ct,
                         const char *cpu, const char *memory, int tainted) {
  node_full(name, pool, type, ct, NULL, NULL, cpu, memory, tainted);
}

static void node(const char *name, const char *pool, const char *type, const char *ct, const char *cpu,
                 const char *memory) {
  node_tainted(name, pool, type, ct, cpu, memory, 0);
}

/* A 4-core on-demand ecs.g7.xlarge node of the NodePool default in zone, with extra labels (stolen). */
static void node_at(const char *name, const char *zone, json_t *extra) {
  node_full(name, "default", "ecs.g7.xlarge", "on-demand", zone, extra, "4", "15Gi", 0);
}

/* A pod bound to node (a scheduler of its own: the simulator's binder leaves it alone), Running;
 * meta_extra and spec_extra (stolen, may be NULL) merged into its metadata and spec, phase NULL =
 * Running. */
static void pod_full(const char *name, const char *node_name, const char *cpu, json_t *meta_extra,
                     json_t *spec_extra, const char *phase) {
  json_t *pod = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:[{s:s, s:s, s:{s:{s:s, s:s}}}]}, s:{s:s}}",
                          "apiVersion", "v1", "kind", "Pod", "metadata", "name", name, "namespace", "default",
                          "spec", "schedulerName", "custom", "nodeName", node_name, "containers", "name",
                          "app", "image", "app", "resources", "requests", "cpu", cpu, "memory", "256Mi",
                          "status", "phase", phase ? phase : "Running");
  if (meta_extra) json_object_update(json_object_get(pod, "metadata"), meta_extra);
  json_decref(meta_extra);
  if (spec_extra) json_object_update(json_object_get(pod, "spec"), spec_extra);
  json_decref(spec_extra);
  CHECK_INT(pt_post(&f, PT_PODS, pod), 201);
}

static void pod_on(const char *name, const char *node_name, const char *cpu, json_t *meta_extra,
                   const char *phase) {
  pod_full(name, node_name, cpu, meta_extra, NULL, phase);
}

/* A pod of app (label app=<app>) with spec_extra (stolen), on node_name. */
static void app_pod(const char *name, const char *node_name, const char *cpu, const char *app,
                    json_t *spec_extra) {
  pod_full(name, node_name, cpu, json_pack("{s:{s:s}}", "labels", "app", app), spec_extra, NULL);
}

static json_t *claim(const char *name) {
  return lp_env_get(lp_controllers_env(f.manager), LP_KIND_NODECLAIM, name);
}

static void simulate(dz_sim *sim, const char *a, const char *b, int allow, dz_sim_result *out) {
  json_t *cands[2] = {claim(a), b ? claim(b) : NULL};
  CHECK(cands[0] != NULL && (!b || cands[1] != NULL));
  dz_simulate(sim, cands, b ? 2 : 1, allow, out);
}

/* The values of the replacement's requirement on key (borrowed), or NULL. */
static const json_t *values_of(const json_t *replacement, const char *key) {
  size_t i;
  const json_t *req;
  json_array_foreach(json_object_get(replacement, "requirements"), i, req) {
    if (strcmp(json_string_value(json_object_get(req, "key")) ?: "", key) == 0)
      return json_object_get(req, "values");
  }
  return NULL;
}

/* Non-zero when every option of the replacement has an available ct offering cheaper than price, and
 * they come cheapest first. */
static int options_cheaper(const json_t *replacement, const char *ct, double price) {
  const json_t *names = values_of(replacement, LP_LABEL_INSTANCE_TYPE);
  double last = 0;
  size_t i;
  const json_t *v;
  json_array_foreach(names, i, v) {
    double p = price_of(json_string_value(v), NULL, ct);
    if (p < 0 || p >= price || p < last) {
      fprintf(stderr, "option %s: %s price %g (candidates %g, previous %g)\n", json_string_value(v), ct, p,
              price, last);
      return 0;
    }
    last = p;
  }
  return json_array_size(names) > 0;
}

static int has_value(const json_t *values, const char *value) {
  size_t i;
  const json_t *v;
  json_array_foreach(values, i, v) if (strcmp(json_string_value(v) ?: "", value) == 0) return 1;
  return 0;
}

static int starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int near(double a, double b) {
  return fabs(a - b) < 1e-9;
}

/* ---- the cases -------------------------------------------------------------------------------- */

/* Two half-empty 4-core nodes: either one's pod fits on the other, so one can go without a
 * replacement; asked twice (a binary search asks many times), the answer is the same, and still after
 * n2 is deleted (a later snapshot needs a replacement). Both at once: their pods need one new node,
 * cheaper than the two. */
static void test_half_empty_nodes(void) {
  node("n1", "default", "ecs.g7.xlarge", "on-demand", "4", "15Gi");
  node("n2", "default", "ecs.g7.xlarge", "on-demand", "4", "15Gi");
  pod_on("web-1", "n1", "1500m", NULL, NULL);
  pod_on("web-2", "n2", "1500m", NULL, NULL);
  dz_sim *sim = snapshot();
  double price = price_of("ecs.g7.xlarge", lp_obj_label(claim("n1"), LP_LABEL_ZONE), "on-demand");
  CHECK(price > 0);
  for (int round = 0; round < 2; round++) {
    dz_sim_result r;
    simulate(sim, "n1", NULL, 0, &r);
    CHECK(r.feasible);
    CHECK(r.replacement == NULL);
    CHECK(r.why == NULL);
    CHECK(near(r.candidates_price, price));
    CHECK(r.replacement_price == 0);
    dz_sim_result_free(&r);
  }
  /* the snapshot holds what it read: n2 going away is not news to it, only to the next one */
  CHECK_INT(ctrl_kube_pack(&f, "DELETE", "/api/v1/nodes/n2", NULL), 200);
  dz_sim *later = snapshot();
  dz_sim_result r;
  simulate(sim, "n1", NULL, 0, &r);
  CHECK(r.feasible && r.replacement == NULL);
  dz_sim_result_free(&r);
  simulate(later, "n1", NULL, 0, &r);
  CHECK(r.feasible && r.replacement != NULL);
  dz_sim_result_free(&r);
  dz_sim_free(later);
  simulate(sim, "n1", "n2", 0, &r);
  CHECK(r.feasible);
  CHECK(r.replacement != NULL);
  CHECK(near(r.candidates_price, 2 * price));
  CHECK(r.replacement_price > 0 && r.replacement_price < 2 * price);
  CHECK(options_cheaper(r.replacement, "on-demand", 2 * price));
  CHECK_STR(json_string_value(json_object_get(r.replacement, "nodepool")), "default");
  CHECK_STR(json_string_value(json_object_get(
                json_object_get(json_object_get(r.replacement, "resources"), "requests"), "cpu")),
            "3");
  dz_sim_result_free(&r);
  dz_sim_free(sim);
  pt_cleanup(&f);
}

/* A half-empty node beside a NodeClaim still launching with room for its pod: the pod is not moved
 * onto a node that may never come, so the node stays, the reason naming that NodeClaim; once the
 * NodeClaim has initialized, a new snapshot deletes the node outright. */
static void test_not_onto_launching(void) {
  node("n1", "default", "ecs.g7.xlarge", "on-demand", "4", "15Gi");
  pod_on("web-1", "n1", "1500m", NULL, NULL);
  json_t *labels =
      node_labels("booting", "default", "ecs.g7.xlarge", "on-demand", zone_of("ecs.g7.xlarge", "on-demand"));
  claim_launching("booting", labels, "4", "15Gi");
  dz_sim *sim = snapshot();
  dz_sim_result r;
  simulate(sim, "n1", NULL, 0, &r);
  CHECK(!r.feasible);
  CHECK(r.replacement == NULL);
  CHECK_STR(r.why, "pod default/web-1 would move onto NodeClaim booting, which has not initialized");
  dz_sim_result_free(&r);
  dz_sim_free(sim);
  claim_joined("booting", labels, "4", "15Gi", 0);
  json_decref(labels);
  sim = snapshot();
  simulate(sim, "n1", NULL, 0, &r);
  CHECK(r.feasible);
  CHECK(r.replacement == NULL);
  CHECK(r.why == NULL);
  dz_sim_result_free(&r);
  dz_sim_free(sim);
  pt_cleanup(&f);
}

/* A 16-core node running a pod of 3 cores, and a full node beside it: the pod needs a new node, and
 * every smaller type that holds it is cheaper; the candidate's own type is not an option. */
static void test_replace_with_smaller(void) {
  node("big", "default", "ecs.g7.4xlarge", "on-demand", "16", "60Gi");
  node("full", "default", "ecs.g7.xlarge", "on-demand", "4", "15Gi");
  pod_on("web-1", "big", "3", NULL, NULL);
  pod_on("resident", "full", "3500m", NULL, NULL);
  dz_sim *sim = snapshot();
  dz_sim_result r;
  simulate(sim, "big", NULL, 0, &r);
  double price = price_of("ecs.g7.4xlarge", lp_obj_label(claim("big"), LP_LABEL_ZONE), "on-demand");
  CHECK(r.feasible);
  CHECK(r.why == NULL);
  CHECK(near(r.candidates_price, price));
  CHECK(r.replacement != NULL);
  CHECK(r.replacement_price > 0 && r.replacement_price < price);
  CHECK(options_cheaper(r.replacement, "on-demand", price));
  CHECK(!has_value(values_of(r.replacement, LP_LABEL_INSTANCE_TYPE), "ecs.g7.4xlarge"));
  json_t *od = json_pack("[s]", "on-demand");
  CHECK(json_equal(values_of(r.replacement, LP_LABEL_CAPACITY_TYPE), od));
  json_decref(od);
  dz_sim_result_free(&r);
  dz_sim_free(sim);
  pt_cleanup(&f);
}

/* A NodePool of the 2-core ecs.g7.large alone (weight 10, so it is tried first): a node of it with two
 * pods of 1.5 cores would need two new nodes, which is not feasible; a pod whose zone nothing sells
 * cannot schedule at all. */
static void test_not_feasible(void) {
  CHECK_INT(pt_nodepool(&f, "small", 10,
                        json_pack("{s:[{s:s, s:s, s:[s]}, {s:s, s:s, s:[s]}]}", "requirements", "key",
                                  "karpenter.sh/capacity-type", "operator", "In", "values", "on-demand",
                                  "key", LP_LABEL_INSTANCE_TYPE, "operator", "In", "values", "ecs.g7.large"),
                        NULL, NULL),
            201);
  CHECK_INT(ctrl_kube_pack(&f, "DELETE", PT_NODEPOOLS "/default", NULL), 200); /* "small" alone */
  node("pair", "small", "ecs.g7.xlarge", "on-demand", "4", "15Gi");
  pod_on("a", "pair", "1500m", NULL, NULL);
  pod_on("b", "pair", "1500m", NULL, NULL);
  node("lost", "small", "ecs.g7.xlarge", "on-demand", "4", "15Gi");
  pod_on("nowhere", "lost", "3500m", NULL, NULL);
  dz_sim *sim = snapshot();
  dz_sim_result r;
  simulate(sim, "pair", NULL, 0, &r);
  CHECK(!r.feasible);
  CHECK(r.replacement == NULL);
  CHECK_STR(r.why, "its pods would need 2 new nodes");
  dz_sim_result_free(&r);
  simulate(sim, "lost", NULL, 0, &r);
  CHECK(!r.feasible);
  CHECK(r.replacement == NULL);
  CHECK(r.why && starts_with(r.why, "pod default/nowhere cannot schedule: nodepool small: "));
  if (r.why) CHECK_CONTAINS(r.why, "too small");
  dz_sim_result_free(&r);
  dz_sim_free(sim);
  pt_cleanup(&f);
  CHECK_INT(pt_nodepool(&f, "default", 0, NULL, NULL, NULL), 201);
}

/* A NodePool of ecs.g7.large and ecs.g7.xlarge: a large node's pod of 1.5 cores needs a new node, and
 * no option is cheaper than the large itself. */
static void test_not_cheaper(void) {
  CHECK_INT(pt_nodepool(&f, "g7", 10,
                        json_pack("{s:[{s:s, s:s, s:[s]}, {s:s, s:s, s:[s, s]}]}", "requirements", "key",
                                  "karpenter.sh/capacity-type", "operator", "In", "values", "on-demand",
                                  "key", LP_LABEL_INSTANCE_TYPE, "operator", "In", "values", "ecs.g7.large",
                                  "ecs.g7.xlarge"),
                        NULL, NULL),
            201);
  node("large", "g7", "ecs.g7.large", "on-demand", "1900m", "7Gi");
  pod_on("web-1", "large", "1500m", NULL, NULL);
  dz_sim *sim = snapshot();
  dz_sim_result r;
  simulate(sim, "large", NULL, 0, &r);
  double price = price_of("ecs.g7.large", lp_obj_label(claim("large"), LP_LABEL_ZONE), "on-demand");
  CHECK(!r.feasible);
  CHECK(r.replacement == NULL);
  CHECK(near(r.candidates_price, price));
  char want[128];
  snprintf(want, sizeof want, "replacement would not be cheaper ($%.4g >= $%.4g)", price, price);
  CHECK_STR(r.why, want);
  dz_sim_result_free(&r);
  dz_sim_free(sim);
  pt_cleanup(&f);
}

/* A NodePool allowing spot and on-demand (weight 10), two tainted nodes of it. A spot 16-core node with a pod
 * of 1 core: refused unless spot to spot is allowed; allowed, its replacement is spot with exactly 15
 * options, all cheaper spot. An on-demand node of the same pool: the replacement is pinned to spot. With the
 * pool narrowed to four types, the spot node has fewer than 15 cheaper options: refused. */
static void test_spot(void) {
  json_t *both = json_pack("{s:[{s:s, s:s, s:[s, s]}]}", "requirements", "key", "karpenter.sh/capacity-type",
                           "operator", "In", "values", "spot", "on-demand");
  CHECK_INT(pt_nodepool(&f, "flex", 10, both, NULL, NULL), 201);
  node_tainted("sp", "flex", "ecs.g7.4xlarge", "spot", "16", "60Gi", 1);
  pod_on("web-1", "sp", "1", NULL, NULL);
  node_tainted("od", "flex", "ecs.g7.4xlarge", "on-demand", "16", "60Gi", 1);
  pod_on("web-2", "od", "1", NULL, NULL);
  dz_sim *sim = snapshot();
  double spot_price = price_of("ecs.g7.4xlarge", lp_obj_label(claim("sp"), LP_LABEL_ZONE), "spot");
  CHECK(spot_price > 0);

  dz_sim_result r;
  simulate(sim, "sp", NULL, 0, &r);
  CHECK(!r.feasible);
  CHECK(r.replacement == NULL);
  CHECK(r.why && starts_with(r.why, "can't replace spot with spot: spot-to-spot consolidation is disabled"));
  CHECK(near(r.candidates_price, spot_price));
  dz_sim_result_free(&r);

  simulate(sim, "sp", NULL, 1, &r);
  CHECK(r.feasible);
  CHECK(r.why == NULL);
  CHECK(r.replacement != NULL);
  CHECK_INT(json_array_size(values_of(r.replacement, LP_LABEL_INSTANCE_TYPE)), DZ_SPOT_TO_SPOT_MIN_TYPES);
  json_t *spot = json_pack("[s]", "spot");
  CHECK(json_equal(values_of(r.replacement, LP_LABEL_CAPACITY_TYPE), spot));
  CHECK(options_cheaper(r.replacement, "spot", spot_price));
  CHECK(r.replacement_price > 0 && r.replacement_price < spot_price);
  dz_sim_result_free(&r);

  simulate(sim, "od", NULL, 0, &r);
  CHECK(r.feasible);
  CHECK(r.replacement != NULL);
  CHECK(json_equal(values_of(r.replacement, LP_LABEL_CAPACITY_TYPE), spot));
  CHECK(options_cheaper(r.replacement, "spot", r.candidates_price));
  dz_sim_result_free(&r);
  dz_sim_free(sim);

  CHECK_INT(ctrl_kube_pack(&f, "PATCH", PT_NODEPOOLS "/flex",
                           "{s:{s:{s:{s:[{s:s, s:s, s:[s, s]}, {s:s, s:s, s:[s, s, s, s]}]}}}}", "spec",
                           "template", "spec", "requirements", "key", "karpenter.sh/capacity-type",
                           "operator", "In", "values", "spot", "on-demand", "key", LP_LABEL_INSTANCE_TYPE,
                           "operator", "In", "values", "ecs.g7.large", "ecs.g7.xlarge", "ecs.g7.2xlarge",
                           "ecs.g7.4xlarge"),
            200);
  sim = snapshot();
  simulate(sim, "sp", NULL, 1, &r);
  CHECK(!r.feasible);
  CHECK(r.replacement == NULL);
  CHECK(r.why &&
        starts_with(r.why, "can't replace spot with spot: spot-to-spot consolidation needs 15 cheaper"));
  dz_sim_result_free(&r);
  dz_sim_free(sim);
  json_decref(spot);
  pt_cleanup(&f);
}

/* A node whose 3.5-core DaemonSet pod, mirror pod and finished pod stay with it: only its small pod
 * moves, and fits on the other node. */
static void test_daemonset_pods_stay(void) {
  node("host", "default", "ecs.g7.xlarge", "on-demand", "4", "15Gi");
  node("other", "default", "ecs.g7.xlarge", "on-demand", "4", "15Gi");
  pod_on("agent", "host", "3500m",
         json_pack("{s:[{s:s, s:s, s:s, s:s}]}", "ownerReferences", "apiVersion", "apps/v1", "kind",
                   "DaemonSet", "name", "agent", "uid", "ds-uid"),
         NULL);
  pod_on("static", "host", "3500m", json_pack("{s:{s:s}}", "annotations", "kubernetes.io/config.mirror", "x"),
         NULL);
  pod_on("done", "host", "3500m", NULL, "Succeeded");
  pod_on("small", "host", "500m", NULL, NULL);
  pod_on("resident", "other", "3", NULL, NULL);
  dz_sim *sim = snapshot();
  dz_sim_result r;
  simulate(sim, "host", NULL, 0, &r);
  CHECK(r.feasible);
  CHECK(r.why == NULL);
  CHECK(r.replacement == NULL);
  dz_sim_result_free(&r);
  dz_sim_free(sim);
  pt_cleanup(&f);
}

/* ---- the provisioner's constraints ------------------------------------------------------------ */

static json_t *anti_affine(const char *app) {
  return json_pack("{s:{s:{s:[{s:s, s:{s:{s:s}}}]}}}", "affinity", "podAntiAffinity",
                   "requiredDuringSchedulingIgnoredDuringExecution", "topologyKey", "kubernetes.io/hostname",
                   "labelSelector", "matchLabels", "app", app);
}

static json_t *zone_spread(const char *when, const char *app) {
  return json_pack("{s:[{s:i, s:s, s:s, s:{s:{s:s}}}]}", "topologySpreadConstraints", "maxSkew", 1,
                   "topologyKey", LP_LABEL_ZONE, "whenUnsatisfiable", when, "labelSelector", "matchLabels",
                   "app", app);
}

static const char *requested_cpu(const json_t *replacement) {
  return json_string_value(
      json_object_get(json_object_get(json_object_get(replacement, "resources"), "requests"), "cpu"));
}

/* Non-zero when the replacement's zone requirement is In [zone] alone. */
static int pinned_to(const json_t *replacement, const char *zone) {
  json_t *want = json_pack("[s]", zone);
  int ok = json_equal(values_of(replacement, LP_LABEL_ZONE), want);
  json_decref(want);
  return ok;
}

/* Three replicas, one a node (required anti-affinity on the hostname), the first node holding only its
 * replica: the replica may not join another's node, so the node goes only for a replacement holding that
 * replica alone; two of the nodes at once would need two new nodes. With a fourth, empty node, the
 * replica moves there and the node is simply deleted. */
static void test_anti_affinity(void) {
  node("r1", "default", "ecs.g7.xlarge", "on-demand", "4", "15Gi");
  node("r2", "default", "ecs.g7.xlarge", "on-demand", "4", "15Gi");
  node("r3", "default", "ecs.g7.xlarge", "on-demand", "4", "15Gi");
  app_pod("rep-1", "r1", "500m", "rep", anti_affine("rep"));
  app_pod("rep-2", "r2", "500m", "rep", anti_affine("rep"));
  app_pod("rep-3", "r3", "500m", "rep", anti_affine("rep"));
  pod_on("fill-2", "r2", "1500m", NULL, NULL);
  pod_on("fill-3", "r3", "1500m", NULL, NULL);
  dz_sim *sim = snapshot();
  dz_sim_result r;
  simulate(sim, "r1", NULL, 0, &r);
  CHECK(r.feasible);
  CHECK(r.replacement != NULL);
  if (r.replacement) CHECK_STR(requested_cpu(r.replacement), "500m");
  dz_sim_result_free(&r);
  simulate(sim, "r1", "r2", 0, &r);
  CHECK(!r.feasible);
  CHECK_STR(r.why, "its pods would need 2 new nodes");
  dz_sim_result_free(&r);
  dz_sim_free(sim);
  node("r4", "default", "ecs.g7.xlarge", "on-demand", "4", "15Gi");
  sim = snapshot();
  simulate(sim, "r1", NULL, 0, &r);
  CHECK(r.feasible);
  CHECK(r.replacement == NULL);
  dz_sim_result_free(&r);
  dz_sim_free(sim);
  pt_cleanup(&f);
}

/* Zones A (nodes a1, a2) and B (b1, and b2 that no pod tolerates): app spread (maxSkew 1, DoNotSchedule)
 * has a pod on a1 and one on b1. Deleting b1 would put both in A: it goes only for a replacement in B.
 * App lax spreads the same way with ScheduleAnyway (a2, b2): b2 is simply deleted. With the only NodePool
 * limited to zone A, b1 cannot go at all, and why names the constraint. */
static void test_zone_spread(void) {
  const char *a = nth_zone("ecs.g7.xlarge", "on-demand", 0), *b = nth_zone("ecs.g7.xlarge", "on-demand", 1);
  CHECK(a && b);
  node_at("a1", a, NULL);
  node_at("a2", a, NULL);
  node_at("b1", b, NULL);
  node_full("b2", "default", "ecs.g7.xlarge", "on-demand", b, NULL, "4", "15Gi", 1);
  app_pod("spread-1", "a1", "500m", "spread", zone_spread("DoNotSchedule", "spread"));
  app_pod("spread-2", "b1", "500m", "spread", zone_spread("DoNotSchedule", "spread"));
  app_pod("lax-1", "a2", "500m", "lax", zone_spread("ScheduleAnyway", "lax"));
  app_pod("lax-2", "b2", "500m", "lax", zone_spread("ScheduleAnyway", "lax"));
  dz_sim *sim = snapshot();
  dz_sim_result r;
  simulate(sim, "b1", NULL, 0, &r);
  CHECK(r.feasible);
  CHECK(r.replacement != NULL);
  if (r.replacement) CHECK(pinned_to(r.replacement, b));
  dz_sim_result_free(&r);
  simulate(sim, "b2", NULL, 0, &r);
  CHECK(r.feasible);
  CHECK(r.replacement == NULL);
  dz_sim_result_free(&r);
  dz_sim_free(sim);

  CHECK_INT(pt_nodepool(&f, "zone-a", 10,
                        json_pack("{s:[{s:s, s:s, s:[s]}, {s:s, s:s, s:[s]}]}", "requirements", "key",
                                  "karpenter.sh/capacity-type", "operator", "In", "values", "on-demand",
                                  "key", LP_LABEL_ZONE, "operator", "In", "values", a),
                        NULL, NULL),
            201);
  CHECK_INT(ctrl_kube_pack(&f, "DELETE", PT_NODEPOOLS "/default", NULL), 200);
  sim = snapshot();
  simulate(sim, "b1", NULL, 0, &r);
  CHECK(!r.feasible);
  CHECK(r.replacement == NULL);
  CHECK(r.why && starts_with(r.why, "pod default/spread-2 cannot schedule: "));
  if (r.why) CHECK_CONTAINS(r.why, "topology spread constraint on topology.kubernetes.io/zone (maxSkew 1)");
  dz_sim_result_free(&r);
  dz_sim_free(sim);
  pt_cleanup(&f);
  CHECK_INT(pt_nodepool(&f, "default", 0, NULL, NULL, NULL), 201);
}

/* A container of cpu with host ports first..first+n-1. */
static json_t *host_ports(const char *cpu, int first, int n) {
  json_t *ports = json_array();
  for (int i = 0; i < n; i++)
    json_array_append_new(ports, json_pack("{s:i, s:i}", "containerPort", 80 + i, "hostPort", first + i));
  return json_pack("{s:[{s:s, s:s, s:o, s:{s:{s:s, s:s}}}]}", "containers", "name", "app", "image", "app",
                   "ports", ports, "resources", "requests", "cpu", cpu, "memory", "256Mi");
}

/* Two nodes whose pods both use host port 8080: the first node's pod cannot join the other, so the
 * node goes only for a replacement holding it alone; its neighbour, on five other host ports, joins
 * the other node (asked twice of one snapshot: each simulation adds those ports to its own copy). */
static void test_host_port(void) {
  node("h1", "default", "ecs.g7.xlarge", "on-demand", "4", "15Gi");
  node("h2", "default", "ecs.g7.xlarge", "on-demand", "4", "15Gi");
  pod_full("port-1", "h1", "500m", NULL, host_ports("500m", 8080, 1), NULL);
  pod_full("ports-9000", "h1", "300m", NULL, host_ports("300m", 9000, 5), NULL);
  pod_full("port-2", "h2", "500m", NULL, host_ports("500m", 8080, 1), NULL);
  dz_sim *sim = snapshot();
  for (int round = 0; round < 2; round++) {
    dz_sim_result r;
    simulate(sim, "h1", NULL, 0, &r);
    CHECK(r.feasible);
    CHECK(r.replacement != NULL);
    if (r.replacement) CHECK_STR(requested_cpu(r.replacement), "500m");
    dz_sim_result_free(&r);
  }
  dz_sim_free(sim);
  pt_cleanup(&f);
}

/* A pod whose required node affinity has two terms (ORed), tier one or tier two, on the tier one node:
 * it may move to the tier two node, which only its second term allows (no NodePool knows the label). */
static void test_second_affinity_term(void) {
  node_at("t1", NULL, json_pack("{s:s}", "tier", "one"));
  node_at("t2", NULL, json_pack("{s:s}", "tier", "two"));
  pod_full("either", "t1", "500m", NULL,
           json_pack("{s:{s:{s:{s:[{s:[{s:s, s:s, s:[s]}]}, {s:[{s:s, s:s, s:[s]}]}]}}}}", "affinity",
                     "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms",
                     "matchExpressions", "key", "tier", "operator", "In", "values", "one", "matchExpressions",
                     "key", "tier", "operator", "In", "values", "two"),
           NULL);
  dz_sim *sim = snapshot();
  dz_sim_result r;
  simulate(sim, "t1", NULL, 0, &r);
  CHECK(r.feasible);
  CHECK(r.why == NULL);
  CHECK(r.replacement == NULL);
  dz_sim_result_free(&r);
  dz_sim_free(sim);
  pt_cleanup(&f);
}

/* A pod on v1 (zone A) whose claim is bound to a volume made in A (and which prefers A) cannot move to
 * v2 (zone B): v1 goes only for a replacement in A, asked twice of one snapshot. Its neighbour, whose claim
 * is gone, still moves (to v2): it runs, and nothing pins it. */
static void test_volume_zone(void) {
  const char *a = nth_zone("ecs.g7.xlarge", "on-demand", 0), *b = nth_zone("ecs.g7.xlarge", "on-demand", 1);
  CHECK(a && b);
  pt_bound_volume(&f, "pv-a", "data", a);
  node_at("v1", a, NULL);
  node_at("v2", b, NULL);
  pod_full("vol", "v1", "500m", NULL,
           json_pack("{s:[{s:s, s:{s:s}}], s:{s:{s:[{s:i, s:{s:[{s:s, s:s, s:[s]}]}}]}}}", "volumes", "name",
                     "data", "persistentVolumeClaim", "claimName", "data", "affinity", "nodeAffinity",
                     "preferredDuringSchedulingIgnoredDuringExecution", "weight", 1, "preference",
                     "matchExpressions", "key", LP_LABEL_ZONE, "operator", "In", "values", a),
           NULL);
  pod_full("vol-gone", "v1", "3", NULL,
           json_pack("{s:[{s:s, s:{s:s}}]}", "volumes", "name", "data", "persistentVolumeClaim", "claimName",
                     "gone"),
           NULL);
  dz_sim *sim = snapshot();
  for (int round = 0; round < 2; round++) { /* each simulation tries the preference on its own copy */
    dz_sim_result r;
    simulate(sim, "v1", NULL, 0, &r);
    CHECK(r.feasible);
    CHECK(r.replacement != NULL);
    if (r.replacement) {
      CHECK(pinned_to(r.replacement, a));
      CHECK_STR(requested_cpu(r.replacement), "500m"); /* vol-gone went to v2 */
    }
    dz_sim_result_free(&r);
  }
  dz_sim_free(sim);
  pt_cleanup(&f);
}

static const lp_controller_def *const controllers[] = {&lp_nodeclass_controller, &sp_probe_def, NULL};

int main(void) {
  ctrl_fixture_start(&f, controllers, NULL);
  json_decref(
      ctrl_admin(&f, "alibaba", "POST", "/_sim/clock", "{\"speed\": 0}")); /* spot prices hold still */
  ctrl_fixture_apply_defaults(&f);
  CHECK(ctrl_wait_for(&f, 10, pt_class_ready, "default"));
  CHECK(sp_probe != NULL);
  types = pt_instance_types(&f);
  CHECK(json_array_size(types) > 0);
  RUN(test_half_empty_nodes);
  RUN(test_not_onto_launching);
  RUN(test_replace_with_smaller);
  RUN(test_not_feasible);
  RUN(test_not_cheaper);
  RUN(test_spot);
  RUN(test_daemonset_pods_stay);
  RUN(test_anti_affinity);
  RUN(test_zone_spread);
  RUN(test_host_port);
  RUN(test_second_affinity_term);
  RUN(test_volume_zone);
  json_decref(types);
  ctrl_fixture_stop(&f);
  return check_summary();
}

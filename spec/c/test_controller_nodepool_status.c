/* The NodePool status controller (engine/controller/nodepool_status.c) against the Kubernetes
 * simulator: status.resources and status.nodes follow the pool's launched NodeClaims and their Nodes
 * (a Node's capacity once initialized, the NodeClaim's before; deleting ones and unlaunched ones not
 * counted; a resource that goes away leaves the map), NodeClassReady follows the ECSNodeClass (missing,
 * then created and resolved), ValidationSucceeded reports Karpenter's run-time checks, Ready rolls them
 * up with the NodePool's generation, and nothing is written when nothing changed. The nodeclass
 * controller makes the classes Ready. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "controller/nodepool.h"
#include "controller_fixture.h"
#include "provisioner_test_support.h"

static ctrl_fixture f;

static json_t *nodepool(const char *name) {
  char path[256];
  snprintf(path, sizeof path, PT_NODEPOOLS "/%s", name);
  return ctrl_get(&f, path);
}

typedef struct want {
  const char *pool, *resource, *value;
} want;

/* The NodePool's status.resources[resource] is value (a want). */
static int resource_is(ctrl_fixture *fx, const void *ud) {
  (void)fx;
  const want *w = ud;
  json_t *np = nodepool(w->pool);
  const char *v = json_string_value(json_object_get(lp_obj_get(np, "status.resources"), w->resource));
  int ok = w->value ? v && strcmp(v, w->value) == 0 : v == NULL;
  json_decref(np);
  return ok;
}

typedef struct want_cond {
  const char *pool, *type, *status, *reason;
} want_cond;

static int condition_is(ctrl_fixture *fx, const void *ud) {
  (void)fx;
  const want_cond *w = ud;
  json_t *np = nodepool(w->pool);
  const json_t *c = lp_condition_get(np, w->type);
  int ok = c && lp_condition_is(np, w->type, w->status) &&
           (!w->reason || strcmp(json_string_value(json_object_get(c, "reason")) ?: "", w->reason) == 0);
  json_decref(np);
  return ok;
}

/* A NodeClaim of pool default, launched (status.providerID and capacity) unless provider_id is NULL. */
static void claim(const char *name, const char *provider_id, json_t *capacity) {
  CHECK_INT(pt_post(&f, PT_CLAIMS,
                    json_pack("{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:{s:s, s:s, s:s}, s:[]}}", "apiVersion",
                              "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name", name, "labels",
                              "karpenter.sh/nodepool", "default", "spec", "nodeClassRef", "group",
                              "karpenter.alibabacloud.com", "kind", "ECSNodeClass", "name", "default",
                              "requirements")),
            201);
  if (!provider_id) {
    json_decref(capacity);
    return;
  }
  char path[256];
  snprintf(path, sizeof path, PT_CLAIMS "/%s/status", name);
  json_t *patch = json_pack("{s:{s:s, s:o}}", "status", "providerID", provider_id, "capacity", capacity);
  char *body = json_dumps(patch, JSON_COMPACT);
  long status = 0;
  json_decref(ctrl_kube(&f, "PATCH", path, body, &status));
  CHECK_INT(status, 200);
  free(body);
  json_decref(patch);
}

/* A Node with providerID and capacity; labels (stolen) are its labels. */
static void node(const char *name, const char *provider_id, json_t *labels, json_t *capacity) {
  CHECK_INT(pt_post(&f, "/api/v1/nodes",
                    json_pack("{s:s, s:s, s:{s:s, s:o}, s:{s:s}, s:{s:o}}", "apiVersion", "v1", "kind",
                              "Node", "metadata", "name", name, "labels", labels, "spec", "providerID",
                              provider_id, "status", "capacity", capacity)),
            201);
}

static json_t *capacity(const char *cpu, const char *memory) {
  return json_pack("{s:s, s:s, s:s, s:s}", "cpu", cpu, "memory", memory, "pods", "110", "ephemeral-storage",
                   "40Gi");
}

/* ---- resources and nodes -------------------------------------------------------------------- */

static void test_empty_pool(void) {
  CHECK(ctrl_wait_for(&f, 10, condition_is, &(want_cond){"default", "Ready", "True", "Ready"}));
  json_t *np = nodepool("default");
  const json_t *st = json_object_get(np, "status");
  char *resources = json_dumps(json_object_get(st, "resources"), JSON_COMPACT | JSON_SORT_KEYS);
  CHECK_STR(resources,
            "{\"cpu\":\"0\",\"ephemeral-storage\":\"0\",\"memory\":\"0\",\"nodes\":\"0\",\"pods\":\"0\"}");
  free(resources);
  CHECK_INT(json_integer_value(json_object_get(st, "nodes")), 0);
  CHECK(lp_condition_is(np, "ValidationSucceeded", "True"));
  CHECK(lp_condition_is(np, "NodeClassReady", "True"));
  CHECK_INT(json_integer_value(json_object_get(lp_condition_get(np, "Ready"), "observedGeneration")), 1);
  json_t *nc = ctrl_get(&f, "/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses/default");
  CHECK(
      json_equal(json_object_get(st, "nodeClassObservedGeneration"), lp_obj_get(nc, "metadata.generation")));
  json_decref(nc);
  json_decref(np);
}

static void test_counts_launched_claims_and_nodes(void) {
  claim("pending", NULL, NULL); /* not launched: no capacity yet, not a node */
  claim("a", "cn-hangzhou.i-a", capacity("4", "16Gi"));
  CHECK(ctrl_wait_for(&f, 10, resource_is, &(want){"default", "cpu", "4"}));
  CHECK(resource_is(&f, &(want){"default", "memory", "16Gi"}));
  CHECK(resource_is(&f, &(want){"default", "nodes", "1"}));

  /* its Node registers but is not initialized: the Node's capacity, the claim's where the Node reports
   * nothing yet (ephemeral-storage) */
  node("node-a", "cn-hangzhou.i-a",
       json_pack("{s:s, s:s, s:s}", "karpenter.sh/nodepool", "default", "karpenter.sh/registered", "true",
                 "node.kubernetes.io/instance-type", "ecs.g7.xlarge"),
       json_pack("{s:s, s:s, s:s, s:s}", "cpu", "4", "memory", "16303508Ki", "pods", "110", "nvidia.com/gpu",
                 "1"));
  CHECK(ctrl_wait_for(&f, 10, resource_is, &(want){"default", "memory", "16303508Ki"}));
  CHECK(resource_is(&f, &(want){"default", "ephemeral-storage", "40Gi"}));
  CHECK(resource_is(&f, &(want){"default", "nvidia.com/gpu", "1"}));
  CHECK(resource_is(&f, &(want){"default", "nodes", "1"}));

  /* a second instance, and a Node of the pool no NodeClaim claims */
  claim("b", "cn-hangzhou.i-b", capacity("2", "8Gi"));
  node("node-x", "cn-hangzhou.i-x",
       json_pack("{s:s, s:s, s:s}", "karpenter.sh/nodepool", "default", "karpenter.sh/initialized", "true",
                 "node.kubernetes.io/instance-type", "ecs.g7.large"),
       capacity("2", "8Gi"));
  CHECK(ctrl_wait_for(&f, 10, resource_is, &(want){"default", "nodes", "3"}));
  CHECK(resource_is(&f, &(want){"default", "cpu", "8"}));
  CHECK(resource_is(&f, &(want){"default", "pods", "330"}));
  json_t *np = nodepool("default");
  CHECK_INT(json_integer_value(lp_obj_get(np, "status.nodes")), 3);
  json_decref(np);

  /* the GPU node goes: its resource leaves the map */
  CHECK_INT(ctrl_kube_pack(&f, "DELETE", "/api/v1/nodes/node-a", NULL), 200);
  CHECK_INT(ctrl_kube_pack(&f, "DELETE", PT_CLAIMS "/a", NULL), 200);
  CHECK(ctrl_wait_for(&f, 10, resource_is, &(want){"default", "nvidia.com/gpu", NULL}));
  CHECK(resource_is(&f, &(want){"default", "nodes", "2"}));
  CHECK(resource_is(&f, &(want){"default", "cpu", "4"}));
}

/* How often the simulator's first fault rule has fired. */
static long long fired(void) {
  json_t *faults = ctrl_admin(&f, "kubernetes", "GET", "/_sim/faults", NULL);
  long long n =
      json_integer_value(json_object_get(json_array_get(json_object_get(faults, "faults"), 0), "fired"));
  json_decref(faults);
  return n;
}

/* A pool whose status is current is not written again when it is reconciled. */
static void test_writes_only_changes(void) {
  CHECK(ctrl_wait_for(&f, 10, resource_is, &(want){"default", "nodes", "2"}));
  ctrl_run_for(&f, 0.5);
  /* a rule that only counts the PATCHes of NodePools (and their status) */
  json_decref(
      ctrl_admin(&f, "kubernetes", "POST", "/_sim/faults",
                 "{\"kind\":\"slow\",\"verb\":\"patch\",\"resource\":\"nodepools\",\"seconds\":0.001}"));
  double reconciles =
      ctrl_metric(&f, "luaprov_controller_reconciles_total", LP_LABELS("nodepool.status", "success"));
  /* a label on the NodePool: a reconcile, and no status write */
  CHECK_INT(ctrl_kube_pack(&f, "PATCH", PT_NODEPOOLS "/default", "{s:{s:{s:s}}}", "metadata", "labels",
                           "team", "a"),
            200);
  ctrl_run_for(&f, 1.0);
  CHECK(ctrl_metric(&f, "luaprov_controller_reconciles_total", LP_LABELS("nodepool.status", "success")) >
        reconciles);
  CHECK_INT(fired(), 1); /* the label's */
  json_decref(ctrl_admin(&f, "kubernetes", "DELETE", "/_sim/faults", NULL));
  pt_cleanup(&f);
}

/* ---- conditions ----------------------------------------------------------------------------- */

static void test_nodeclass_ready(void) {
  CHECK_INT(pt_post(&f, PT_NODEPOOLS,
                    json_pack("{s:s, s:s, s:{s:s}, s:{s:{s:{s:{s:s, s:s, s:s}, s:[]}}}}", "apiVersion",
                              "karpenter.sh/v1", "kind", "NodePool", "metadata", "name", "later", "spec",
                              "template", "spec", "nodeClassRef", "group", "karpenter.alibabacloud.com",
                              "kind", "ECSNodeClass", "name", "later", "requirements")),
            201);
  CHECK(ctrl_wait_for(&f, 10, condition_is,
                      &(want_cond){"later", "NodeClassReady", "False", "NodeClassNotFound"}));
  CHECK(condition_is(&f, &(want_cond){"later", "Ready", "False", "NodeClassNotFound"}));
  CHECK(condition_is(&f, &(want_cond){"later", "ValidationSucceeded", "True", NULL}));

  /* the class is created and resolves: the pool follows it */
  CHECK_INT(pt_post(&f, "/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses",
                    mapping_nodeclass("later", "luaprov-sim")),
            201);
  CHECK(ctrl_wait_for(&f, 10, condition_is, &(want_cond){"later", "Ready", "True", "Ready"}));
  CHECK(condition_is(&f, &(want_cond){"later", "NodeClassReady", "True", "NodeClassReady"}));
}

static void test_validation(void) {
  json_t *labels = json_pack("{s:{s:s}}", "labels", "karpenter.sh/team", "a");
  CHECK_INT(pt_nodepool(&f, "invalid", 0,
                        json_pack("{s:[{s:s, s:s}, {s:s, s:s, s:[s]}]}", "requirements", "key",
                                  "kubernetes.io/hostname", "operator", "Exists", "key",
                                  "karpenter.sh/capacity-type", "operator", "In", "values", "cheap"),
                        labels, NULL),
            201);
  want_cond failed = {"invalid", "ValidationSucceeded", "False", "NodePoolValidationFailed"};
  CHECK(ctrl_wait_for(&f, 10, condition_is, &failed));
  CHECK(condition_is(&f, &(want_cond){"invalid", "Ready", "False", "NodePoolValidationFailed"}));
  json_t *np = nodepool("invalid");
  const char *msg =
      json_string_value(json_object_get(lp_condition_get(np, "ValidationSucceeded"), "message"));
  CHECK(msg && strstr(msg, "label karpenter.sh/team is restricted"));
  CHECK(msg && strstr(msg, "requirement key kubernetes.io/hostname is restricted"));
  CHECK(msg &&
        strstr(msg, "requirement karpenter.sh/capacity-type: no value is one of on-demand, spot, reserved"));
  json_decref(np);

  /* fixed: a new generation, and the conditions say they saw it */
  CHECK_INT(ctrl_kube_pack(&f, "PATCH", PT_NODEPOOLS "/invalid", "{s:{s:{s:{s:n}, s:{s:[]}}}}", "spec",
                           "template", "metadata", "labels", "spec", "requirements"),
            200);
  CHECK(ctrl_wait_for(&f, 10, condition_is, &(want_cond){"invalid", "Ready", "True", "Ready"}));
  np = nodepool("invalid");
  CHECK_INT(json_integer_value(lp_obj_get(np, "metadata.generation")), 2);
  CHECK_INT(
      json_integer_value(json_object_get(lp_condition_get(np, "ValidationSucceeded"), "observedGeneration")),
      2);
  CHECK_INT(json_integer_value(json_object_get(lp_condition_get(np, "Ready"), "observedGeneration")), 2);
  json_decref(np);
}

/* Karpenter's checks one by one, without the fixture. */
static void test_validate_rules(void) {
  static const struct {
    const char *pool, *want; /* want NULL: valid */
  } cases[] = {
      {"{\"spec\":{\"template\":{\"metadata\":{\"labels\":{\"team\":\"a\",\"karpenter.sh/capacity-type\":"
       "\"spot\"}},\"spec\":{\"requirements\":[{\"key\":\"beta.kubernetes.io/arch\",\"operator\":\"In\","
       "\"values\":[\"amd64\"]},{\"key\":\"karpenter.sh/"
       "capacity-type\",\"operator\":\"In\",\"values\":[\"spot\","
       "\"bogus\"]},{\"key\":\"example.com/gen\",\"operator\":\"Gt\",\"values\":[\"3\"]}],"
       "\"taints\":[{\"key\":\"a\",\"effect\":\"NoSchedule\"}],\"startupTaints\":[{\"key\":\"a\","
       "\"effect\":\"NoExecute\"}]}}}}",
       NULL},
      {"{\"spec\":{\"template\":{\"metadata\":{\"labels\":{\"karpenter.sh/nodepool\":\"x\"}}}}}",
       "label karpenter.sh/nodepool is restricted: Karpenter sets it itself"},
      {"{\"spec\":{\"template\":{\"metadata\":{\"labels\":{\"x.karpenter.sh/a\":\"b\"}}}}}",
       "label x.karpenter.sh/a is restricted: Karpenter sets it itself"},
      {"{\"spec\":{\"template\":{\"metadata\":{\"labels\":{\"notkarpenter.sh/a\":\"b\"}}}}}", NULL},
      {"{\"spec\":{\"template\":{\"metadata\":{\"labels\":{\"Bad_Domain/a\":\"b\"}}}}}",
       "label key Bad_Domain/a is not a qualified name"},
      {"{\"spec\":{\"template\":{\"metadata\":{\"labels\":{\"a\":\"-b\"}}}}}",
       "label a has an invalid value"},
      {"{\"spec\":{\"template\":{\"spec\":{\"requirements\":[{\"key\":\"karpenter.sh/nodepool\",\"operator\":"
       "\"In\",\"values\":[\"x\"]}]}}}}",
       "requirement key karpenter.sh/nodepool is restricted: Karpenter sets it itself"},
      {"{\"spec\":{\"template\":{\"spec\":{\"requirements\":[{\"key\":\"a\",\"operator\":\"Near\"}]}}}}",
       "requirement a: unsupported operator Near"},
      {"{\"spec\":{\"template\":{\"spec\":{\"requirements\":[{\"key\":\"a\",\"operator\":\"In\",\"values\":[]"
       "}]}}}}",
       "requirement a: operator In needs a value"},
      {"{\"spec\":{\"template\":{\"spec\":{\"requirements\":[{\"key\":\"a\",\"operator\":\"In\",\"values\":"
       "[\"x\"],\"minValues\":2}]}}}}",
       "requirement a: minValues 2 but 1 value(s)"},
      {"{\"spec\":{\"template\":{\"spec\":{\"requirements\":[{\"key\":\"a\",\"operator\":\"Lt\",\"values\":"
       "[\"x\"]}]}}}}",
       "requirement a: operator Lt needs a single non-negative integer"},
      {"{\"spec\":{\"template\":{\"spec\":{\"requirements\":[{\"key\":\"karpenter.sh/capacity-type\","
       "\"operator\":\"In\",\"values\":[\"spot\",\"bogus\"],\"minValues\":2}]}}}}",
       "requirement karpenter.sh/capacity-type: minValues 2 but only 1 known value(s)"},
      {"{\"spec\":{\"template\":{\"spec\":{\"taints\":[{\"key\":\"a\",\"effect\":\"NoSchedule\"}],"
       "\"startupTaints\":[{\"key\":\"a\",\"effect\":\"NoSchedule\"}]}}}}",
       "startupTaints: taint a:NoSchedule appears twice"},
      {"{\"spec\":{\"template\":{\"spec\":{\"taints\":[{\"key\":\"a\",\"value\":\"b "
       "c\",\"effect\":\"Sometimes\"}]}}}}",
       "taints: the value b c of taint a is not a qualified name; taints: taint a has the unknown effect "
       "Sometimes"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    json_t *pool = json_loads(cases[i].pool, 0, NULL);
    CHECK(pool != NULL);
    char *why = lp_nodepool_validate(pool);
    if (cases[i].want)
      CHECK_STR(why, cases[i].want);
    else
      CHECK(why == NULL);
    free(why);
    json_decref(pool);
  }
}

static const lp_controller_def *const controllers[] = {&lp_nodeclass_controller,
                                                       &lp_nodepool_status_controller, NULL};

int main(void) {
  RUN(test_validate_rules);
  ctrl_fixture_start(&f, controllers, NULL);
  ctrl_fixture_apply_defaults(&f);
  RUN(test_empty_pool);
  RUN(test_counts_launched_claims_and_nodes);
  RUN(test_writes_only_changes);
  RUN(test_nodeclass_ready);
  RUN(test_validation);
  ctrl_fixture_stop(&f);
  return check_summary();
}

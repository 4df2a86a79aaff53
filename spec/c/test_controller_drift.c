/* The drift controller (engine/controller/drift*.c) with the lifecycle controller launching real
 * simulated instances, through the real manager, the Alibaba mapping and the Lua drift policy, against
 * both simulators over HTTP. Each case changes one thing (the NodePool's template, its requirements,
 * the ECSNodeClass's status or hash, the cloud's catalogue), waits for the Drifted condition with the
 * reason docs/controllers.md orders first, undoes the change and waits for the condition to go.
 *
 * No nodeclass controller runs: the test writes the ECSNodeClass status as that controller would, so
 * it can change the status alone (ImageDrift) without a resolution putting it back. Drift timings scale
 * with settings.nodeclass_resync_s, 1 s here: re-evaluation every 1 s, instance types kept 6 s,
 * InstanceTypeNotFound only for NodeClaims older than 12 s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "controller/nodepool.h"
#include "controller_fixture.h"

#define CLAIMS  "/apis/karpenter.sh/v1/nodeclaims"
#define POOLS   "/apis/karpenter.sh/v1/nodepools"
#define CLASSES "/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses"
#define POOL    "drift"
#define RESYNC  1.0

static ctrl_fixture f;
static json_t *images; /* the ECSNodeClass's resolved status.images, to put back */

/* ---- the cluster ------------------------------------------------------------------------------ */

static void patch(const char *path, json_t *body) {
  char *text = json_dumps(body, JSON_COMPACT);
  long status = 0;
  json_decref(ctrl_kube(&f, "PATCH", path, text, &status));
  if (status != 200) fprintf(stderr, "PATCH %s: %ld\n", path, status);
  CHECK_INT(status, 200);
  free(text);
  json_decref(body);
}

/* The NodePool: template label team, capacity type capacity. */
static void put_nodepool(const char *method, const char *team, const char *capacity) {
  json_t *pool =
      json_pack("{s:s, s:s, s:{s:s}, s:{s:{s:{s:{s:s}}, s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:[s]}]}}}}",
                "apiVersion", "karpenter.sh/v1", "kind", "NodePool", "metadata", "name", POOL, "spec",
                "template", "metadata", "labels", "team", team, "spec", "nodeClassRef", "group",
                "karpenter.alibabacloud.com", "kind", "ECSNodeClass", "name", "default", "requirements",
                "key", "karpenter.sh/capacity-type", "operator", "In", "values", capacity);
  if (strcmp(method, "POST") == 0)
    CHECK_INT(ctrl_kube_pack(&f, "POST", POOLS, "o", pool), 201);
  else
    patch(POOLS "/" POOL, pool);
}

/* A NodeClaim as the provisioner makes them: the template's labels, the pool's current hash, one CPU;
 * instance_type (may be NULL) pins the type. */
static void post_claim(const char *name, const char *instance_type) {
  json_t *pool = ctrl_get(&f, POOLS "/" POOL);
  char hash[17];
  lp_nodepool_hash(pool, hash);
  json_decref(pool);
  json_t *reqs = json_pack("[{s:s, s:s, s:[s]}]", "key", "karpenter.sh/capacity-type", "operator", "In",
                           "values", "on-demand");
  if (instance_type)
    json_array_append_new(reqs, json_pack("{s:s, s:s, s:[s]}", "key", "node.kubernetes.io/instance-type",
                                          "operator", "In", "values", instance_type));
  CHECK_INT(ctrl_kube_pack(&f, "POST", CLAIMS,
                           "{s:s, s:s, s:{s:s, s:{s:s, s:s}, s:{s:s, s:s}}, s:{s:{s:s, s:s, s:s}, s:o, "
                           "s:{s:{s:s}}}}",
                           "apiVersion", "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name", name,
                           "labels", "karpenter.sh/nodepool", POOL, "team", "a", "annotations",
                           LP_NODEPOOL_HASH_ANNOTATION, hash, LP_NODEPOOL_HASH_VERSION_ANNOTATION,
                           LP_NODEPOOL_HASH_VERSION, "spec", "nodeClassRef", "group",
                           "karpenter.alibabacloud.com", "kind", "ECSNodeClass", "name", "default",
                           "requirements", reqs, "resources", "requests", "cpu", "1"),
            201);
}

/* ---- conditions ------------------------------------------------------------------------------- */

typedef struct want {
  const char *claim, *reason; /* reason NULL: no Drifted condition at all */
} want;

static int drift_is(ctrl_fixture *fx, const void *ud) {
  const want *w = ud;
  if (w->reason) return ctrl_claim_condition(fx, w->claim, "Drifted", "True", w->reason);
  char path[256];
  snprintf(path, sizeof path, CLAIMS "/%s", w->claim);
  json_t *claim = ctrl_get(fx, path);
  int ok = claim && !lp_condition_get(claim, "Drifted");
  json_decref(claim);
  return ok;
}

#define WAIT_DRIFT(name, reason) CHECK(ctrl_wait_for(&f, 10, drift_is, &(want){name, reason}))

static int launched(ctrl_fixture *fx, const void *name) {
  return ctrl_claim_condition(fx, name, "Launched", "True", NULL);
}

static double evaluations(const char *result) {
  return ctrl_metric(&f, "luaprov_drift_evaluations_total", LP_LABELS(result));
}

static int evaluated_since(ctrl_fixture *fx, const void *ud) {
  (void)fx;
  const double *before = ud;
  return evaluations("not_drifted") + evaluations("unknown") + evaluations("drifted") > *before + 2;
}

/* Lets the claims be evaluated a few more times (with resync 1 s: about two evaluations each). */
static void let_evaluate(void) {
  double before = evaluations("not_drifted") + evaluations("unknown") + evaluations("drifted");
  CHECK(ctrl_wait_for(&f, 10, evaluated_since, &before));
}

static double drifted_gauge(void) {
  return ctrl_metric(&f, "luaprov_nodeclaims_drifted", LP_LABELS(POOL));
}

/* ---- cases ------------------------------------------------------------------------------------ */

static void test_current_nodeclaim_is_not_drifted(void) {
  post_claim("nc-1", NULL);
  CHECK(ctrl_wait_for(&f, 10, launched, "nc-1"));
  let_evaluate();
  WAIT_DRIFT("nc-1", NULL);
  CHECK(evaluations("not_drifted") >= 1);
  CHECK_INT(evaluations("drifted"), 0);
  CHECK_INT(drifted_gauge(), 0);
}

/* A hashed template field changes: static drift, the first check. */
static void test_nodepool_drifted(void) {
  put_nodepool("PATCH", "b", "on-demand");
  WAIT_DRIFT("nc-1", "NodePoolDrifted");
  CHECK_INT(ctrl_metric(&f, "luaprov_drift_marked_total", LP_LABELS("NodePoolDrifted")), 1);
  CHECK_INT(drifted_gauge(), 1);
  /* static drift wins even when the requirements drifted too */
  put_nodepool("PATCH", "b", "spot");
  let_evaluate();
  WAIT_DRIFT("nc-1", "NodePoolDrifted");
  put_nodepool("PATCH", "a", "on-demand");
  WAIT_DRIFT("nc-1", NULL);
  CHECK_INT(drifted_gauge(), 0);
  CHECK_INT(ctrl_metric(&f, "luaprov_drift_marked_total", LP_LABELS("NodePoolDrifted")), 1);
}

/* Requirements are not hashed: the NodeClaim's labels are checked against them. */
static void test_requirements_drifted(void) {
  put_nodepool("PATCH", "a", "spot");
  WAIT_DRIFT("nc-1", "RequirementsDrifted");
  json_t *claim = ctrl_get(&f, CLAIMS "/nc-1");
  CHECK_CONTAINS(json_string_value(json_object_get(lp_condition_get(claim, "Drifted"), "message")),
                 "karpenter.sh/capacity-type=on-demand");
  json_decref(claim);
  put_nodepool("PATCH", "a", "on-demand");
  WAIT_DRIFT("nc-1", NULL);

  /* a requirement on a label the NodeClaim lacks */
  patch(POOLS "/" POOL,
        json_pack("{s:{s:{s:{s:[{s:s, s:s, s:[s]}, {s:s, s:s, s:[s]}]}}}}", "spec", "template", "spec",
                  "requirements", "key", "karpenter.sh/capacity-type", "operator", "In", "values",
                  "on-demand", "key", "example.com/rack", "operator", "In", "values", "r1"));
  WAIT_DRIFT("nc-1", "RequirementsDrifted");
  put_nodepool("PATCH", "a", "on-demand");
  WAIT_DRIFT("nc-1", NULL);
}

/* The instance's image is no longer among the class's images: the Lua policy's ImageDrift. An empty
 * list is not drift but "not known yet": the condition stays as it was. */
static void test_image_drift(void) {
  patch(CLASSES "/default/status",
        json_pack("{s:{s:[{s:s}]}}", "status", "images", "id", "ubuntu_22_04_x64_20G_alibase_20240508.vhd"));
  WAIT_DRIFT("nc-1", "ImageDrift");
  CHECK_INT(ctrl_metric(&f, "luaprov_drift_marked_total", LP_LABELS("ImageDrift")), 1);

  double unknown = evaluations("unknown");
  patch(CLASSES "/default/status", json_pack("{s:{s:[]}}", "status", "images"));
  let_evaluate();
  CHECK(evaluations("unknown") > unknown);
  WAIT_DRIFT("nc-1", "ImageDrift");

  patch(CLASSES "/default/status", json_pack("{s:{s:O}}", "status", "images", images));
  WAIT_DRIFT("nc-1", NULL);
}

/* The nodeclass controller stamped a new hash (the class's spec changed): NodeClassDrift, found by the
 * policy without an instance lookup. */
static void test_nodeclass_drift(void) {
  json_t *class = ctrl_get(&f, CLASSES "/default");
  json_t *hash = json_incref(json_object_get(
      json_object_get(json_object_get(class, "metadata"), "annotations"), LP_ANNOTATION_HASH));
  json_decref(class);
  patch(CLASSES "/default",
        json_pack("{s:{s:{s:s}}}", "metadata", "annotations", LP_ANNOTATION_HASH, "changed"));
  WAIT_DRIFT("nc-1", "NodeClassDrift");
  patch(CLASSES "/default", json_pack("{s:{s:{s:o}}}", "metadata", "annotations", LP_ANNOTATION_HASH, hash));
  WAIT_DRIFT("nc-1", NULL);
}

/* A NodeClaim that is not launched loses its Drifted condition. */
static void test_not_launched_clears(void) {
  json_decref(ctrl_admin(&f, "alibaba", "POST", "/_sim/faults",
                         "{\"action\":\"RunInstances\",\"code\":\"QuotaExceed.ElasticQuota\"}"));
  post_claim("nc-q", NULL);
  CHECK(ctrl_wait_for(&f, 10, drift_is, &(want){"nc-q", NULL}));
  patch(CLAIMS "/nc-q/status", json_pack("{s:{s:[{s:s, s:s, s:s, s:s, s:s}]}}", "status", "conditions",
                                         "type", "Drifted", "status", "True", "reason", "NodePoolDrifted",
                                         "message", "", "lastTransitionTime", "2026-01-01T00:00:00Z"));
  WAIT_DRIFT("nc-q", NULL);
  CHECK(!launched(&f, "nc-q"));
  json_decref(ctrl_admin(&f, "alibaba", "DELETE", "/_sim/faults", NULL));
}

static double test_clock_offset;
static double test_clock(void *ud) {
  (void)ud;
  return lp_clock_monotonic() + test_clock_offset;
}

/* Two hours pass for the mapping's catalogue caches (they would refetch from the cloud) and for the
 * instance types the CloudProvider holds (stale: refreshed by the next call). */
static void expire_mapping_caches(void) {
  static const char *const names[] = {"alibaba-instance-types", "alibaba-stock", "alibaba-zones"};
  test_clock_offset += 7200;
  lp_cloudprovider_set_clock(f.cloud, test_clock, NULL);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    lp_cache_set_clock(lp_cache_registry_get(names[i], 1, 1), test_clock, NULL);
}

typedef struct age {
  const char *claim;
  double seconds;
} age;

static int older_than(ctrl_fixture *fx, const void *ud) {
  const age *a = ud;
  char path[256];
  snprintf(path, sizeof path, CLAIMS "/%s", a->claim);
  json_t *claim = ctrl_get(fx, path);
  double created = lp_rfc3339_parse(lp_obj_str(claim, "metadata.creationTimestamp"));
  json_decref(claim);
  return created > 0 && lp_clock_wall() - created > a->seconds;
}

/* The cloud stops selling the instance's type: InstanceTypeNotFound, but only for a NodeClaim older
 * than the minimum age (12 s here, 1 h by default). */
static void test_instance_type_not_found(void) {
  /* the first five types of the catalogue are ecs.c7.*: r7 is gone once it shrinks to them */
  post_claim("nc-r7", "ecs.r7.large");
  CHECK(ctrl_wait_for(&f, 10, launched, "nc-r7"));
  CHECK(ctrl_wait_for(&f, 20, older_than, &(age){"nc-r7", 13}));
  post_claim("nc-young", "ecs.r7.xlarge");
  CHECK(ctrl_wait_for(&f, 10, launched, "nc-young"));
  json_t *summary = ctrl_admin(&f, "alibaba", "POST", "/_sim/catalogue", "{\"instance_types\": 5}");
  CHECK_INT(json_integer_value(json_object_get(summary, "instance_types")), 5);
  json_decref(summary);
  expire_mapping_caches();
  CHECK(ctrl_wait_for(&f, 12, drift_is, &(want){"nc-r7", "InstanceTypeNotFound"}));
  json_t *young = ctrl_get(&f, CLAIMS "/nc-young");
  CHECK(!lp_condition_get(young, "Drifted")); /* its instance is gone too: the policy cannot tell */
  json_decref(young);
  CHECK(ctrl_wait_for(&f, 15, drift_is, &(want){"nc-young", "InstanceTypeNotFound"}));

  json_decref(ctrl_admin(&f, "alibaba", "POST", "/_sim/catalogue", "{}"));
  expire_mapping_caches();
  /* the instances went with the old catalogue: the policy cannot tell, so the condition stays */
  let_evaluate();
  WAIT_DRIFT("nc-r7", "InstanceTypeNotFound");
}

static const lp_controller_def *const controllers[] = {&lp_drift_controller,
                                                       &lp_nodeclaim_lifecycle_controller, NULL};

int main(void) {
  ctrl_fixture_start(&f, controllers, &(lp_ctrl_settings){.nodeclass_resync_s = RESYNC});
  json_t *class = mapping_resolved_nodeclass(f.scripts, f.sim);
  json_t *status = json_incref(json_object_get(class, "status"));
  images = json_incref(json_object_get(status, "images"));
  json_object_del(class, "status");
  CHECK_INT(ctrl_kube_pack(&f, "POST", CLASSES, "o", class), 201);
  patch(CLASSES "/default/status", json_pack("{s:o}", "status", status));
  CHECK(ctrl_wait_for(&f, 10, ctrl_nodeclass_has_ready, "default"));
  put_nodepool("POST", "a", "on-demand");

  RUN(test_current_nodeclaim_is_not_drifted);
  RUN(test_nodepool_drifted);
  RUN(test_requirements_drifted);
  RUN(test_image_drift);
  RUN(test_nodeclass_drift);
  RUN(test_not_launched_clears);
  RUN(test_instance_type_not_found); /* last: it changes the catalogue */

  json_decref(images);
  ctrl_fixture_stop(&f);
  return check_summary();
}

/* The provisioner's scheduling decisions (engine/controller/provisioner*.c; docs/controllers.md)
 * through the real manager, the Alibaba mapping's instance types and the Kubernetes simulator, whose
 * binder marks the pods Unschedulable (there are no nodes): node selectors and affinity narrowing the
 * NodeClaim's requirements and options, taints and weights choosing the NodePool, instance types big
 * enough for a request, pods no NodePool can take, packing and batching, DaemonSet overhead and
 * NodePool limits. The nodeclass controller makes the ECSNodeClass Ready; no lifecycle controller runs,
 * so the NodeClaims are only created (provisioner_capacity's test launches them). First, without the
 * fixture, the requirement intersection the packing narrows NodeClaims with (requirements_merge.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract/requirements.h"
#include "contract/shapes.h"
#include "controller_fixture.h"
#include "provisioner_test_support.h"

static ctrl_fixture f;

static const char *label(const json_t *obj, const char *key) {
  return json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"), key));
}

/* Non-zero when every value of the claim's instance-type requirement satisfies test(name, ud). */
static int every_type(const json_t *claim, int (*test)(const char *name, const void *ud), const void *ud) {
  const json_t *names = pt_values(claim, LP_LABEL_INSTANCE_TYPE);
  size_t i;
  const json_t *v;
  json_array_foreach(names, i, v) {
    if (!test(json_string_value(v), ud)) return 0;
  }
  return json_array_size(names) > 0;
}

static int has_prefix(const char *name, const void *prefix) {
  return strncmp(name, prefix, strlen(prefix)) == 0;
}
static int is_arm(const char *name, const void *ud) {
  (void)ud;
  return strstr(name, "8y.") != NULL; /* the Yitian families: g8y, c8y, r8y */
}
static int not_in_families(const char *name, const void *families) {
  for (const char *const *fam = families; *fam; fam++)
    if (has_prefix(name, *fam)) return 0;
  return 1;
}

/* ---- requirement intersection (engine/contract/requirements_merge.c) -------------------------- */

/* The intersection of two requirement lists given as JSON text, dumped compactly (or "NULL: why"). */
static char *intersect(const char *a, const char *b) {
  json_t *ja = json_loads(a, 0, NULL), *jb = b ? json_loads(b, 0, NULL) : NULL;
  char *why = NULL;
  json_t *both = lp_requirements_intersect(ja, jb, &why);
  char *text = both ? json_dumps(both, JSON_COMPACT) : NULL;
  if (!both) {
    text = malloc(strlen(why) + 7);
    sprintf(text, "NULL: %s", why);
  }
  free(why);
  json_decref(both);
  json_decref(ja);
  json_decref(jb);
  return text;
}

#define CHECK_INTERSECT(a, b, want)                                                                          \
  do {                                                                                                       \
    char *got_ = intersect(a, b);                                                                            \
    CHECK_STR(got_, want);                                                                                   \
    free(got_);                                                                                              \
  } while (0)

static void test_requirements_intersect(void) {
  CHECK_INTERSECT("[{\"key\":\"z\",\"operator\":\"In\",\"values\":[\"a\",\"b\",\"c\"]}]",
                  "[{\"key\":\"z\",\"operator\":\"In\",\"values\":[\"b\",\"c\",\"d\"]},"
                  "{\"key\":\"k\",\"operator\":\"Exists\"}]",
                  "[{\"key\":\"z\",\"operator\":\"In\",\"values\":[\"b\",\"c\"]},"
                  "{\"key\":\"k\",\"operator\":\"Exists\",\"values\":[]}]");
  CHECK_INTERSECT("[{\"key\":\"z\",\"operator\":\"In\",\"values\":[\"a\"]}]",
                  "[{\"key\":\"z\",\"operator\":\"In\",\"values\":[\"b\"]}]",
                  "NULL: z: no value satisfies In [a] and In [b]");
  CHECK_INTERSECT("[{\"key\":\"z\",\"operator\":\"In\",\"values\":[\"a\",\"b\"]}]",
                  "[{\"key\":\"z\",\"operator\":\"NotIn\",\"values\":[\"a\"]}]",
                  "[{\"key\":\"z\",\"operator\":\"In\",\"values\":[\"b\"]}]");
  CHECK_INTERSECT("[{\"key\":\"z\",\"operator\":\"NotIn\",\"values\":[\"a\"]}]",
                  "[{\"key\":\"z\",\"operator\":\"NotIn\",\"values\":[\"b\"]},"
                  "{\"key\":\"z\",\"operator\":\"Exists\"}]",
                  "[{\"key\":\"z\",\"operator\":\"NotIn\",\"values\":[\"a\",\"b\"]}]");
  CHECK_INTERSECT("[{\"key\":\"g\",\"operator\":\"Exists\"}]",
                  "[{\"key\":\"g\",\"operator\":\"DoesNotExist\"}]",
                  "NULL: g: no value satisfies Exists and DoesNotExist");
  CHECK_INTERSECT("[{\"key\":\"n\",\"operator\":\"Gt\",\"values\":[\"4\"]}]",
                  "[{\"key\":\"n\",\"operator\":\"Lte\",\"values\":[\"7\"]}]",
                  "[{\"key\":\"n\",\"operator\":\"Gt\",\"values\":[\"4\"]},"
                  "{\"key\":\"n\",\"operator\":\"Lt\",\"values\":[\"8\"]}]");
  CHECK_INTERSECT("[{\"key\":\"n\",\"operator\":\"In\",\"values\":[\"2\",\"6\"]}]",
                  "[{\"key\":\"n\",\"operator\":\"Gt\",\"values\":[\"4\"]}]",
                  "[{\"key\":\"n\",\"operator\":\"In\",\"values\":[\"6\"]}]");
  CHECK_INTERSECT("[{\"key\":\"n\",\"operator\":\"Gt\",\"values\":[\"8\"]}]",
                  "[{\"key\":\"n\",\"operator\":\"Lt\",\"values\":[\"4\"]}]",
                  "NULL: n: no value satisfies Gt [8] and Lt [4]");
  /* three lists on one key that agree pairwise but not all together */
  CHECK_INTERSECT("[{\"key\":\"z\",\"operator\":\"In\",\"values\":[\"h\",\"i\"]},"
                  "{\"key\":\"z\",\"operator\":\"In\",\"values\":[\"i\",\"j\"]}]",
                  "[{\"key\":\"z\",\"operator\":\"In\",\"values\":[\"h\",\"j\"]}]",
                  "NULL: z: no value satisfies In [h i] and In [i j] and In [h j]");
  CHECK_INTERSECT("[{\"key\":\"z\",\"operator\":\"In\",\"values\":[\"h\",\"i\"]},"
                  "{\"key\":\"z\",\"operator\":\"In\",\"values\":[\"i\",\"j\"]}]",
                  NULL, "[{\"key\":\"z\",\"operator\":\"In\",\"values\":[\"i\"]}]");
}

/* ---- the controller ----------------------------------------------------------------------- */

/* nodeSelector (zone, instance family, arch) and required node affinity (NotIn, In) narrow each
 * NodeClaim's requirements and options; the three pods need three NodeClaims. */
static void test_selectors_and_affinity(void) {
  CHECK_INT(pt_pod(&f, "zonal-c7", "500m", "512Mi",
                   json_pack("{s:{s:s, s:s}}", "nodeSelector", LP_LABEL_ZONE, "cn-hangzhou-i",
                             "karpenter.k8s.alibabacloud/instance-family", "ecs.c7")),
            201);
  CHECK_INT(
      pt_pod(&f, "arm", "500m", "512Mi", json_pack("{s:{s:s}}", "nodeSelector", LP_LABEL_ARCH, "arm64")),
      201);
  static const char *const excluded[] = {"ecs.g7.", "ecs.c7.", "ecs.r7.", "ecs.g8i.", "ecs.c8i.", NULL};
  CHECK_INT(
      pt_pod(&f, "affine", "500m", "512Mi",
             json_pack("{s:{s:{s:{s:[{s:[{s:s, s:s, s:[sssss]}, {s:s, s:s, s:[s]}, {s:s, s:s, s:[ss]}]}]}}}}",
                       "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                       "nodeSelectorTerms", "matchExpressions", "key",
                       "karpenter.k8s.alibabacloud/instance-family", "operator", "NotIn", "values", "ecs.g7",
                       "ecs.c7", "ecs.r7", "ecs.g8i", "ecs.c8i", "key", LP_LABEL_ARCH, "operator", "In",
                       "values", "amd64", "key", LP_LABEL_ZONE, "operator", "In", "values", "cn-hangzhou-h",
                       "cn-hangzhou-j")),
      201);

  json_t *zonal = pt_claim_of(&f, "zonal-c7"), *arm = pt_claim_of(&f, "arm"),
         *affine = pt_claim_of(&f, "affine");
  CHECK(zonal && arm && affine);
  CHECK(pt_values_are(pt_values(zonal, LP_LABEL_ZONE), "cn-hangzhou-i", NULL));
  CHECK(every_type(zonal, has_prefix, "ecs.c7."));
  CHECK(pt_values_are(pt_values(zonal, LP_LABEL_CAPACITY_TYPE), "on-demand", NULL));
  CHECK(pt_values_are(pt_values(zonal, "karpenter.sh/nodepool"), "default", NULL));
  CHECK_STR(label(zonal, "karpenter.sh/nodepool"), "default");
  CHECK_STR(lp_obj_str(zonal, "spec.nodeClassRef.name"), "default");
  CHECK_STR(pt_request(zonal, "cpu"), "500m");
  CHECK_STR(pt_request(zonal, "memory"), "512Mi");
  CHECK_STR(pt_request(zonal, "pods"), "1");
  const json_t *annotations = json_object_get(json_object_get(zonal, "metadata"), "annotations");
  CHECK(json_string_value(json_object_get(annotations, "karpenter.sh/nodepool-hash")) != NULL);
  CHECK_STR(json_string_value(json_object_get(annotations, "karpenter.sh/nodepool-hash-version")), "lp1");
  const json_t *owner =
      json_array_get(json_object_get(json_object_get(zonal, "metadata"), "ownerReferences"), 0);
  CHECK_STR(json_string_value(json_object_get(owner, "kind")), "NodePool");
  CHECK_STR(json_string_value(json_object_get(owner, "name")), "default");
  CHECK(strncmp(lp_obj_name(zonal) ?: "", "default-", 8) == 0);

  CHECK(pt_values_are(pt_values(arm, LP_LABEL_ARCH), "arm64", NULL));
  CHECK(every_type(arm, is_arm, NULL));

  CHECK(pt_values_are(pt_values(affine, LP_LABEL_ARCH), "amd64", NULL));
  CHECK(pt_values_are(pt_values(affine, LP_LABEL_ZONE), "cn-hangzhou-h", "cn-hangzhou-j"));
  CHECK(every_type(affine, not_in_families, excluded));
  CHECK(every_type(affine, not_in_families, (const char *const[]){"ecs.g8y.", "ecs.c8y.", "ecs.r8y.", NULL}));

  CHECK_INT(pt_claims(&f, NULL), 3);
  json_decref(zonal);
  json_decref(arm);
  json_decref(affine);
  pt_cleanup(&f);
}

/* The cheapest available on-demand price of the instance type name, or -1. */
static double on_demand_price(const json_t *types, const char *name) {
  size_t i, k;
  const json_t *t, *o;
  double best = -1;
  json_array_foreach(types, i, t) {
    if (strcmp(json_string_value(json_object_get(t, "name")) ?: "", name) != 0) continue;
    json_array_foreach(json_object_get(t, "offerings"), k, o) {
      double price = json_number_value(json_object_get(o, "price"));
      if (json_is_true(json_object_get(o, "available")) &&
          strcmp(json_string_value(json_object_get(o, "capacity_type")) ?: "", "on-demand") == 0 &&
          (best < 0 || price < best))
        best = price;
    }
  }
  return best;
}

/* Six small pods created together: one pass, one NodeClaim holding them all, options cheapest first. */
static void test_packing_in_one_batch(void) {
  double passes = pt_passes(&f);
  double created = ctrl_metric(&f, "luaprov_nodeclaims_created_total", LP_LABELS("default", "provisioning"));
  for (int i = 0; i < 6; i++) {
    char name[32];
    snprintf(name, sizeof name, "small-%d", i);
    CHECK_INT(pt_pod(&f, name, "250m", "256Mi", NULL), 201);
    ctrl_run_for(&f, 0.1); /* within the batch's idle second */
  }
  json_t *claim = pt_claim_of(&f, "small-0");
  CHECK(claim != NULL);
  for (int i = 1; i < 6; i++) {
    char name[32];
    snprintf(name, sizeof name, "small-%d", i);
    CHECK(ctrl_wait_for(&f, 5, pt_is_nominated, name));
    char *other = pt_nominated(&f, name);
    CHECK_STR(other, lp_obj_name(claim));
    free(other);
  }
  CHECK_STR(pt_request(claim, "cpu"), "1500m");
  CHECK_STR(pt_request(claim, "memory"), "1536Mi");
  CHECK_STR(pt_request(claim, "pods"), "6");
  CHECK_INT(pt_passes(&f) - passes, 1);
  CHECK_INT(
      ctrl_metric(&f, "luaprov_nodeclaims_created_total", LP_LABELS("default", "provisioning")) - created, 1);
  CHECK_INT(pt_claims(&f, NULL), 1);

  const json_t *names = pt_values(claim, LP_LABEL_INSTANCE_TYPE);
  json_t *types = pt_instance_types(&f);
  CHECK(json_array_size(names) > 1 && json_array_size(names) <= 60);
  double first = on_demand_price(types, json_string_value(json_array_get(names, 0)));
  size_t i;
  const json_t *v;
  json_array_foreach(names, i, v) {
    double price = on_demand_price(types, json_string_value(v));
    CHECK(first > 0 && price >= first);
    CHECK(pt_type_capacity(types, json_string_value(v), "cpu") >= 2); /* 1.5 cores do not fit 1 */
  }
  json_decref(types);
  json_decref(claim);
  pt_cleanup(&f);
}

/* The heaviest NodePool that takes a pod wins; a tainted NodePool takes only pods tolerating it, and a
 * pod that fits a NodeClaim opened in the same pass joins it before a new one is opened. */
static void test_taints_and_weights(void) {
  CHECK_INT(pt_nodepool(&f, "special", 50,
                        json_pack("{s:[{s:s, s:s, s:s}]}", "taints", "key", "dedicated", "value", "special",
                                  "effect", "NoSchedule"),
                        json_pack("{s:{s:s}}", "labels", "team", "special"), NULL),
            201);
  CHECK_INT(pt_nodepool(&f, "arm-first", 90,
                        json_pack("{s:[{s:s, s:s, s:[s]}, {s:s, s:s, s:[s]}]}", "requirements", "key",
                                  LP_LABEL_CAPACITY_TYPE, "operator", "In", "values", "on-demand", "key",
                                  LP_LABEL_ARCH, "operator", "In", "values", "arm64"),
                        NULL, NULL),
            201);
  ctrl_run_for(&f, 0.3); /* the pools reach the manager's cache */
  json_t *amd64 = json_pack("{s:s}", LP_LABEL_ARCH, "amd64");
  /* the biggest goes first: it opens the special NodeClaim, which the others do not tolerate */
  CHECK_INT(pt_pod(&f, "tolerant", "1", "512Mi",
                   json_pack("{s:O, s:[{s:s, s:s, s:s, s:s}]}", "nodeSelector", amd64, "tolerations", "key",
                             "dedicated", "operator", "Equal", "value", "special", "effect", "NoSchedule")),
            201);
  CHECK_INT(pt_pod(&f, "intolerant", "500m", "512Mi", json_pack("{s:O}", "nodeSelector", amd64)), 201);
  CHECK_INT(pt_pod(&f, "anywhere", "500m", "512Mi", NULL), 201);
  CHECK_INT(pt_pod(&f, "joiner", "250m", "256Mi",
                   json_pack("{s:[{s:s, s:s}]}", "tolerations", "key", "dedicated", "operator", "Exists")),
            201);
  json_decref(amd64);

  json_t *tolerant = pt_claim_of(&f, "tolerant"), *intolerant = pt_claim_of(&f, "intolerant"),
         *anywhere = pt_claim_of(&f, "anywhere");
  CHECK(tolerant && intolerant && anywhere);
  CHECK_STR(label(tolerant, "karpenter.sh/nodepool"), "special");
  CHECK_STR(label(tolerant, "team"), "special");
  CHECK_STR(
      lp_obj_str(json_array_get(json_object_get(json_object_get(tolerant, "spec"), "taints"), 0), "key"),
      "dedicated");
  CHECK(pt_values_are(pt_values(tolerant, "team"), "special", NULL));
  CHECK_STR(label(intolerant, "karpenter.sh/nodepool"), "default");
  CHECK_STR(label(anywhere, "karpenter.sh/nodepool"), "arm-first");
  CHECK(every_type(anywhere, is_arm, NULL));
  char *joined = pt_nominated(&f, "joiner");
  CHECK_STR(joined, lp_obj_name(tolerant));
  free(joined);
  CHECK_INT(pt_claims(&f, NULL), 3);
  json_decref(tolerant);
  json_decref(intolerant);
  json_decref(anywhere);
  pt_cleanup(&f);
}

static int has_failed_scheduling(ctrl_fixture *fx, const void *pod) {
  char *msg = pt_event(fx, pod, "FailedScheduling");
  free(msg);
  return msg != NULL;
}

static int type_has_cores(const char *name, const void *types) {
  return pt_type_capacity(types, name, "cpu") >= 32;
}

/* A big request gets only types that hold it; one nothing holds, or one selecting a label no NodePool
 * knows, gets a FailedScheduling event naming why. */
static void test_large_and_impossible(void) {
  CHECK_INT(pt_pod(&f, "big", "30", "8Gi", NULL), 201);
  CHECK_INT(pt_pod(&f, "huge", "1000", "1Gi", NULL), 201);
  CHECK_INT(pt_pod(&f, "stranger", "100m", "128Mi", json_pack("{s:{s:s}}", "nodeSelector", "team", "nobody")),
            201);
  json_t *big = pt_claim_of(&f, "big");
  json_t *types = pt_instance_types(&f);
  CHECK(big && every_type(big, type_has_cores, types));
  json_decref(types);
  json_decref(big);

  CHECK(ctrl_wait_for(&f, 5, has_failed_scheduling, "huge"));
  char *msg = pt_event(&f, "huge", "FailedScheduling");
  CHECK_CONTAINS(msg, "Failed to schedule pod, nodepool default");
  CHECK_CONTAINS(msg, "too small (cpu: requested 1000");
  free(msg);
  CHECK(ctrl_wait_for(&f, 5, has_failed_scheduling, "stranger"));
  msg = pt_event(&f, "stranger", "FailedScheduling");
  CHECK_CONTAINS(msg, "label team does not have known values");
  free(msg);
  CHECK(!pt_is_nominated(&f, "huge"));
  CHECK(!pt_is_nominated(&f, "stranger"));
  CHECK_INT(pt_claims(&f, NULL), 1);
  CHECK_INT(ctrl_metric(&f, "luaprov_provisioner_unschedulable_pods", NULL), 2);
  CHECK_INT(ctrl_metric(&f, "luaprov_provisioner_pods_pending", NULL), 3);
  pt_cleanup(&f);
}

static long daemonset(const char *name, const char *cpu, json_t *spec_extra) {
  json_t *ds = json_pack(
      "{s:s, s:s, s:{s:s}, s:{s:{s:{s:s}}, s:{s:{s:{s:s}}, s:{s:[{s:s, s:s, s:{s:{s:s, s:s}}}]}}}}",
      "apiVersion", "apps/v1", "kind", "DaemonSet", "metadata", "name", name, "spec", "selector",
      "matchLabels", "app", name, "template", "metadata", "labels", "app", name, "spec", "containers", "name",
      "agent", "image", "agent", "resources", "requests", "cpu", cpu, "memory", "128Mi");
  if (spec_extra)
    json_object_update(json_object_get(json_object_get(json_object_get(ds, "spec"), "template"), "spec"),
                       spec_extra);
  json_decref(spec_extra);
  return pt_post(&f, PT_DAEMONSETS, ds);
}

/* A NodeClaim asks for its pods plus the DaemonSet pods that would land on it. */
static void test_daemonset_overhead(void) {
  CHECK_INT(daemonset("logs", "500m", NULL), 201);
  CHECK_INT(daemonset("team-agent", "2", json_pack("{s:{s:s}}", "nodeSelector", "team", "other")), 201);
  CHECK_INT(
      daemonset("spot-agent", "2", json_pack("{s:{s:s}}", "nodeSelector", LP_LABEL_CAPACITY_TYPE, "spot")),
      201);
  ctrl_run_for(&f, 0.3);
  CHECK_INT(pt_pod(&f, "with-daemons", "1", "1Gi", NULL), 201);
  json_t *claim = pt_claim_of(&f, "with-daemons");
  CHECK(claim != NULL);
  CHECK_STR(pt_request(claim, "cpu"), "1500m");
  CHECK_STR(pt_request(claim, "memory"), "1152Mi");
  CHECK_STR(pt_request(claim, "pods"), "2");
  json_decref(claim);
  pt_cleanup(&f);
}

static int type_within_two_cores(const char *name, const void *types) {
  double cpu = pt_type_capacity(types, name, "cpu");
  return cpu > 0 && cpu <= 2;
}

/* A NodePool's cpu limit: options past what remains are dropped, and once it is used up the other pods
 * get no NodeClaim (the default NodePool does not know their label). */
static void test_limits(void) {
  CHECK_INT(pt_nodepool(&f, "limited", 10, NULL, json_pack("{s:{s:s}}", "labels", "team", "limited"),
                        json_pack("{s:s}", "cpu", "2")),
            201);
  ctrl_run_for(&f, 0.3);
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "lim-%d", i);
    CHECK_INT(pt_pod(&f, name, "1", "1Gi", json_pack("{s:{s:s}}", "nodeSelector", "team", "limited")), 201);
  }
  json_t *claim = pt_claim_of(&f, "lim-0");
  json_t *types = pt_instance_types(&f);
  CHECK(claim && every_type(claim, type_within_two_cores, types));
  CHECK_STR(label(claim, "team"), "limited");
  json_decref(types);
  json_decref(claim);
  CHECK(ctrl_wait_for(&f, 5, has_failed_scheduling, "lim-2"));
  char *msg = pt_event(&f, "lim-2", "FailedScheduling");
  CHECK_CONTAINS(msg, "nodepool limited: of ");
  CHECK_CONTAINS(msg, "over the nodepool's remaining limits");
  CHECK_CONTAINS(msg, "nodepool default: label team does not have known values");
  free(msg);
  CHECK_INT(pt_claims(&f, "limited"), 1);
  CHECK_INT(pt_claims(&f, NULL), 1);
  pt_cleanup(&f);
}

/* The manager keeps this list for as long as it runs. */
static const lp_controller_def *const controllers[] = {&lp_nodeclass_controller, &lp_provisioner_controller,
                                                       NULL};

int main(void) {
  RUN(test_requirements_intersect);
  ctrl_fixture_start(&f, controllers, NULL);
  ctrl_fixture_apply_defaults(&f);
  CHECK(ctrl_wait_for(&f, 10, pt_class_ready, "default"));
  RUN(test_selectors_and_affinity);
  RUN(test_packing_in_one_batch);
  RUN(test_taints_and_weights);
  RUN(test_large_and_impossible);
  RUN(test_daemonset_overhead);
  RUN(test_limits);
  ctrl_fixture_stop(&f);
  return check_summary();
}

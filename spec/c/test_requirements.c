/* Karpenter requirement compatibility, quantities and resource fit; the shape checks of the instance
 * shape and rule CP4 (docs/contracts.md); YAML loading. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract/requirements.h"
#include "contract/contracts.h"
#include "contract/shapes.h"
#include "core/yaml.h"

static json_t *reqs(const char *text) {
  return json_loads(text, 0, NULL);
}

static int compatible(const char *a, const char *b) {
  json_t *ja = reqs(a), *jb = reqs(b);
  int ok = lp_requirements_compatible(ja, jb, NULL);
  json_decref(ja);
  json_decref(jb);
  return ok;
}

#define ZONE_IN(v) "[{\"key\":\"topology.kubernetes.io/zone\",\"operator\":\"In\",\"values\":[" v "]}]"
#define ZONE_OP(op, v)                                                                                       \
  "[{\"key\":\"topology.kubernetes.io/zone\",\"operator\":\"" op "\",\"values\":[" v "]}]"
#define CPU_OP(op, v)                                                                                        \
  "[{\"key\":\"karpenter.k8s.alibabacloud/instance-cpu\",\"operator\":\"" op "\",\"values\":[" v "]}]"

static void test_compatibility(void) {
  CHECK(compatible(ZONE_IN("\"a\",\"b\""), ZONE_IN("\"b\",\"c\"")));
  CHECK(!compatible(ZONE_IN("\"a\""), ZONE_IN("\"b\",\"c\"")));
  CHECK(compatible(ZONE_OP("NotIn", "\"a\""), ZONE_IN("\"a\",\"b\"")));
  CHECK(!compatible(ZONE_OP("NotIn", "\"a\",\"b\""), ZONE_IN("\"a\",\"b\"")));
  CHECK(compatible(ZONE_OP("Exists", ""), ZONE_IN("\"a\"")));
  CHECK(!compatible(ZONE_OP("DoesNotExist", ""), ZONE_IN("\"a\"")));
  CHECK(compatible(ZONE_OP("DoesNotExist", ""), ZONE_OP("NotIn", "\"a\""))); /* two negatives agree */
  CHECK(compatible(ZONE_OP("DoesNotExist", ""), ZONE_OP("DoesNotExist", "")));
  CHECK(compatible(ZONE_IN("\"a\""), "[]")); /* keys on one side do not constrain */
  CHECK(compatible(CPU_OP("Gt", "\"4\""), CPU_OP("In", "\"8\"")));
  CHECK(!compatible(CPU_OP("Gt", "\"8\""), CPU_OP("In", "\"8\"")));
  CHECK(compatible(CPU_OP("Gte", "\"8\""), CPU_OP("In", "\"8\"")));
  CHECK(!compatible(CPU_OP("Lt", "\"4\""), CPU_OP("In", "\"4\",\"x\"")));
  CHECK(!compatible(CPU_OP("Gt", "\"8\""), CPU_OP("Lt", "\"9\""))); /* no integer in (8, 9) */
  CHECK(compatible(CPU_OP("Gt", "\"8\""), CPU_OP("Lt", "\"10\"")));

  json_t *a = reqs(ZONE_IN("\"z\"")), *b = reqs(ZONE_IN("\"h\",\"i\""));
  char *why = NULL;
  CHECK(!lp_requirements_compatible(a, b, &why));
  CHECK_STR(why, "topology.kubernetes.io/zone: In [z] has nothing in common with In [h i]");
  free(why);
  json_decref(a);
  json_decref(b);
}

/* The compiled lists answer as the JSON ones do: every pair of lists of up to two requirements drawn
 * from entries on two keys, with every operator, missing and odd fields, integers and not, and keys
 * one side lacks (an absent label). */
static void test_compiled_agrees(void) {
  static const char *const entries[] = {
      "{\"key\":\"k\",\"operator\":\"In\",\"values\":[\"a\",\"b\"]}",
      "{\"key\":\"k\",\"operator\":\"In\",\"values\":[\"b\",\"4\"]}",
      "{\"key\":\"k\",\"operator\":\"In\",\"values\":[\"8\",\"+9\",\" 10\"]}",
      "{\"key\":\"k\",\"operator\":\"In\",\"values\":[\"8\"]}",
      "{\"key\":\"k\",\"operator\":\"In\",\"values\":[]}",
      "{\"key\":\"k\",\"operator\":\"In\",\"values\":[3, null, \"c\"]}",
      "{\"key\":\"k\",\"values\":[\"a\"]}",
      "{\"key\":\"k\",\"operator\":\"In\"}",
      "{\"key\":\"k\",\"operator\":\"NotIn\",\"values\":[\"a\"]}",
      "{\"key\":\"k\",\"operator\":\"NotIn\",\"values\":[\"a\",\"b\",\"4\"]}",
      "{\"key\":\"k\",\"operator\":\"NotIn\",\"values\":[]}",
      "{\"key\":\"k\",\"operator\":\"NotIn\"}",
      "{\"key\":\"k\",\"operator\":\"Exists\"}",
      "{\"key\":\"k\",\"operator\":\"DoesNotExist\"}",
      "{\"key\":\"k\",\"operator\":\"Gt\",\"values\":[\"4\"]}",
      "{\"key\":\"k\",\"operator\":\"Gt\",\"values\":[\"8\"]}",
      "{\"key\":\"k\",\"operator\":\"Gte\",\"values\":[\"8\"]}",
      "{\"key\":\"k\",\"operator\":\"Lt\",\"values\":[\"9\"]}",
      "{\"key\":\"k\",\"operator\":\"Lte\",\"values\":[\"4\"]}",
      "{\"key\":\"k\",\"operator\":\"Lt\",\"values\":[\"x\"]}",
      "{\"key\":\"k\",\"operator\":\"Gt\"}",
      "{\"key\":\"k\",\"operator\":\"Sometimes\",\"values\":[\"a\"]}",
      "{\"key\":\"z\",\"operator\":\"In\",\"values\":[\"a\"]}",
      "{\"key\":\"z\",\"operator\":\"DoesNotExist\"}",
      "{\"key\":\"z\",\"operator\":\"NotIn\",\"values\":[\"a\"]}",
      "{\"operator\":\"In\",\"values\":[\"a\"]}",
  };
  enum { N = sizeof entries / sizeof entries[0], L = 1 + N + N * N };
  json_t *lists[L];
  lp_reqs *compiled[L];
  size_t n = 0;
  lists[n++] = json_array();
  for (size_t i = 0; i < N; i++) lists[n++] = json_pack("[o]", json_loads(entries[i], 0, NULL));
  for (size_t i = 0; i < N; i++)
    for (size_t k = 0; k < N; k++)
      lists[n++] = json_pack("[oo]", json_loads(entries[i], 0, NULL), json_loads(entries[k], 0, NULL));
  for (size_t i = 0; i < L; i++) compiled[i] = lp_reqs_compile(lists[i]);
  size_t disagree = 0, incompatible = 0;
  for (size_t i = 0; i < L; i++)
    for (size_t k = 0; k < L; k++) {
      int want = lp_requirements_compatible(lists[i], lists[k], NULL);
      incompatible += !want;
      if (lp_reqs_compatible(compiled[i], compiled[k]) != want && disagree++ < 5)
        fprintf(stderr, "compiled disagrees (JSON says %d): %s vs %s\n", want,
                json_dumps(lists[i], JSON_COMPACT), json_dumps(lists[k], JSON_COMPACT));
    }
  CHECK_INT(disagree, 0);
  CHECK(incompatible > 0 && incompatible < (size_t)L * L); /* both answers were exercised */
  CHECK(lp_reqs_compatible(NULL, compiled[1]) && lp_reqs_json(compiled[1]) == lists[1]);
  for (size_t i = 0; i < L; i++) {
    lp_reqs_free(compiled[i]);
    json_decref(lists[i]);
  }
}

static void test_quantities_and_fit(void) {
  double q = 0;
  CHECK(lp_quantity_parse("1500m", &q) == 0 && q == 1.5);
  CHECK(lp_quantity_parse("3Gi", &q) == 0 && q == 3221225472.0);
  CHECK(lp_quantity_parse("100M", &q) == 0 && q == 1e8);
  CHECK(lp_quantity_parse("4", &q) == 0 && q == 4);
  CHECK(lp_quantity_parse("0.5", &q) == 0 && q == 0.5);
  CHECK(lp_quantity_parse("1e3", &q) == 0 && q == 1000);
  CHECK(lp_quantity_parse("12Q", &q) == -1);
  CHECK(lp_quantity_parse("", &q) == -1);

  json_t *capacity = json_pack("{s:s, s:s, s:s}", "cpu", "4", "memory", "15Gi", "pods", "110");
  json_t *overhead =
      json_pack("{s:{s:s, s:s}, s:{s:s}, s:{s:s}}", "kube_reserved", "cpu", "100m", "memory", "1Gi",
                "system_reserved", "cpu", "100m", "eviction_threshold", "memory", "100Mi");
  json_t *fits = json_pack("{s:s, s:s}", "cpu", "3800m", "memory", "13Gi");
  json_t *too_much = json_pack("{s:s}", "cpu", "3900m");
  json_t *gpu = json_pack("{s:s}", "nvidia.com/gpu", "1");
  char *why = NULL;
  CHECK(lp_resources_fit(fits, capacity, overhead, NULL));
  CHECK(!lp_resources_fit(too_much, capacity, overhead, &why));
  CHECK_STR(why, "cpu: requested 3.9, allocatable 3.8");
  free(why);
  CHECK(!lp_resources_fit(gpu, capacity, overhead, NULL));
  CHECK(lp_resources_fit(NULL, capacity, overhead, NULL));
  json_decref(capacity);
  json_decref(overhead);
  json_decref(fits);
  json_decref(too_much);
  json_decref(gpu);
}

static const char good_type[] =
    "{\"name\":\"ecs.g7.large\",\"capacity\":{\"cpu\":\"2\"},\"requirements\":["
    "{\"key\":\"topology.kubernetes.io/zone\",\"operator\":\"In\",\"values\":[\"h\",\"i\"]},"
    "{\"key\":\"karpenter.sh/capacity-type\",\"operator\":\"In\",\"values\":[\"on-demand\",\"spot\"]}],"
    "\"offerings\":["
    "{\"zone\":\"h\",\"capacity_type\":\"on-demand\",\"price\":0.1,\"available\":true},"
    "{\"zone\":\"h\",\"capacity_type\":\"spot\",\"price\":0.03,\"available\":true},"
    "{\"zone\":\"i\",\"capacity_type\":\"on-demand\",\"price\":null,\"available\":false},"
    "{\"zone\":\"i\",\"capacity_type\":\"spot\",\"available\":false}]}";

static char *check_type_variant(const char *from, const char *to) {
  char *text = strdup(good_type);
  char *at = strstr(text, from);
  char buf[4096];
  snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
  json_t *type = json_loads(buf, 0, NULL);
  char *problem = type ? lp_check_instance_type(type) : strdup("bad test JSON");
  json_decref(type);
  free(text);
  return problem;
}

static void test_rule_4(void) {
  json_t *type = json_loads(good_type, 0, NULL);
  CHECK(lp_check_instance_type(type) == NULL);
  json_decref(type);
  /* an offering missing for a (zone, capacity type) the requirements name */
  char *p = check_type_variant(",{\"zone\":\"i\",\"capacity_type\":\"spot\",\"available\":false}", "");
  CHECK_STR(p, "ecs.g7.large: no offering for i/spot although its requirements name both");
  free(p);
  /* requirements that leave out the zone of an (unavailable) offering */
  p = check_type_variant("\"values\":[\"h\",\"i\"]", "\"values\":[\"h\"]");
  CHECK_STR(
      p, "ecs.g7.large: requirement topology.kubernetes.io/zone does not include i, the zone of an offering");
  free(p);
  p = check_type_variant("\"values\":[\"h\",\"i\"]", "\"values\":[\"h\",5]");
  CHECK_STR(p, "ecs.g7.large: requirement topology.kubernetes.io/zone: value 2 is not a string");
  free(p);
  p = check_type_variant("\"available\":false}]", "\"available\":\"no\"}]");
  CHECK_STR(p, "ecs.g7.large: offering i/spot: available is not a boolean");
  free(p);
  p = check_type_variant("\"capacity_type\":\"spot\",\"price\":0.03",
                         "\"capacity_type\":\"reserved\",\"price\":0.03");
  CHECK_STR(p, "ecs.g7.large: offering 2: capacity_type 'reserved' is not on-demand or spot");
  free(p);
}

static void test_instance_shape(void) {
  json_t *inst = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:[s]}", "id", "i-1", "region", "cn-hangzhou",
                           "zone", "h", "instance_type", "ecs.g7.large", "image_id", "m-1", "state",
                           "running", "capacity_type", "spot", "security_group_ids", "sg-1");
  CHECK(lp_check_instance(inst) == NULL);
  json_object_set_new(inst, "state", json_string("booting"));
  char *p = lp_check_instance(inst);
  CHECK_STR(p, "instance i-1: state 'booting' is not pending, running, stopping, stopped or terminated");
  free(p);
  json_object_set_new(inst, "state", json_string("running"));
  json_object_del(inst, "image_id");
  p = lp_check_instance(inst);
  CHECK_STR(p, "the instance has no string 'image_id'");
  free(p);
  json_decref(inst);
  /* drift reasons: "" or CamelCase (a condition reason), and not one typo from a known one: the
   * engine's NodeClassDrift or one the mapping declares */
  json_t *declared = json_pack("[s]", "ImageDrift");
  CHECK(lp_drift_reason_problem("", declared) == NULL);
  CHECK(lp_drift_reason_problem("ImageDrift", declared) == NULL);
  CHECK(lp_drift_reason_problem("RetiredTeamDrift", declared) == NULL);
  p = lp_drift_reason_problem("stale image", declared);
  CHECK_CONTAINS(p, "a CamelCase word");
  free(p);
  p = lp_drift_reason_problem("ImagDrift", declared);
  CHECK_CONTAINS(p, "did you mean \"ImageDrift\"?");
  CHECK_CONTAINS(p, "the known reasons are NodeClassDrift, ImageDrift");
  free(p);
  p = lp_drift_reason_problem("NodeClasDrift", NULL);
  CHECK_CONTAINS(p, "did you mean \"NodeClassDrift\"?");
  free(p);
  CHECK(lp_drift_reason_problem("ImagDrift", NULL) == NULL); /* not declared: a reason of its own */
  /* a reason names the NodePool annotation drift-unresolvable.luaprov.io/<reason>: 63 characters at most */
  char reason[80] = "Drift";
  memset(reason + 5, 'x', 58);
  CHECK(lp_drift_reason_problem(reason, declared) == NULL);
  strcat(reason, "x");
  p = lp_drift_reason_problem(reason, declared);
  CHECK_CONTAINS(p, "; a reason is at most 63 characters (it names a NodePool annotation, "
                    "drift-unresolvable.luaprov.io/<reason>)");
  free(p);
  json_decref(declared);
}

static void test_yaml(void) {
  static const char doc[] = "apiVersion: v1\n"
                            "metadata:\n"
                            "  name: n1\n"
                            "  resourceVersion: \"123\"\n"
                            "  generation: 4\n"
                            "spec:\n"
                            "  ratio: 0.5\n"
                            "  on: true\n"
                            "  none: ~\n"
                            "  octal: 0123\n"
                            "  list: [a, 'b', 3]\n"
                            "  anchor: &x {k: v}\n"
                            "  alias: *x\n";
  lp_error *err = NULL;
  json_t *v = lp_yaml_parse(doc, sizeof doc - 1, &err);
  CHECK(v != NULL);
  char *text = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
  CHECK_STR(
      text,
      "{\"apiVersion\":\"v1\",\"metadata\":{\"generation\":4,\"name\":\"n1\",\"resourceVersion\":\"123\"},"
      "\"spec\":{\"alias\":{\"k\":\"v\"},\"anchor\":{\"k\":\"v\"},\"list\":[\"a\",\"b\",3],\"none\":null,"
      "\"octal\":\"0123\",\"on\":true,\"ratio\":0.5}}");
  free(text);
  json_decref(v);
  v = lp_yaml_parse("a: [b\n", 6, &err);
  CHECK(v == NULL && err && strcmp(err->code, "InvalidYAML") == 0);
  if (err) CHECK_CONTAINS(err->message, "line 2");
  lp_error_free(err);
}

int main(void) {
  RUN(test_compatibility);
  RUN(test_compiled_agrees);
  RUN(test_quantities_and_fit);
  RUN(test_rule_4);
  RUN(test_instance_shape);
  RUN(test_yaml);
  return check_summary();
}

/* Instance tagging after registration (engine/controller/tagging.c, docs/controllers.md) through the
 * real manager, the Alibaba mapping's registered hook and the simulators over HTTP: a registered
 * NodeClaim's instance gets Name=<node name> with one TagResources and the NodeClaim the annotation
 * luaprov.io/instance-tagged=true, after which updates of the NodeClaim call nothing; a NodeClaim not
 * registered yet is not tagged; a failing call is not repeated on every update of the NodeClaim. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "controller_fixture.h"

#define NODECLAIMS "/apis/karpenter.sh/v1/nodeclaims"
#define TAGGED     "luaprov.io/instance-tagged"

static ctrl_fixture fx;
static const lp_controller_def *const tagging_only[] = {&lp_tagging_controller, NULL};

/* An instance launched through the CloudProvider for a NodeClaim that is not persisted; its provider
 * ID (malloc'd). */
static char *launch(const json_t *nodeclass) {
  json_t *claim = json_pack(
      "{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:[s]}], s:{s:{s:s, s:s}}}}",
      "apiVersion", "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name", "tag-me", "uid", "uid-tag-me",
      "labels", "karpenter.sh/nodepool", "default", "spec", "nodeClassRef", "group",
      "karpenter.k8s.alibabacloud", "kind", "ECSNodeClass", "name", "default", "requirements", "key",
      "karpenter.sh/capacity-type", "operator", "In", "values", "on-demand", "resources", "requests", "cpu",
      "1", "memory", "2Gi");
  lp_cp_outcome o = {0};
  lp_cp_create(fx.cloud, claim, nodeclass, lp_cp_outcome_store, &o);
  lp_cp_outcome_wait(&fx.loop, &o);
  json_decref(claim);
  CHECK(o.error == NULL);
  lp_error_free(o.error);
  const char *pid = lp_obj_str(o.value, "status.providerID");
  char *out = pid ? strdup(pid) : NULL;
  json_decref(o.value);
  return out;
}

/* A NodeClaim for provider_id whose Node node_name registered (Registered=True) or not. */
static void nodeclaim(const char *name, const char *provider_id, const char *node_name, int registered) {
  CHECK_INT(ctrl_kube_pack(&fx, "POST", NODECLAIMS, "{s:s, s:s, s:{s:s}, s:{s:{s:s, s:s, s:s}, s:[]}}",
                           "apiVersion", "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name", name,
                           "spec", "nodeClassRef", "group", "karpenter.k8s.alibabacloud", "kind",
                           "ECSNodeClass", "name", "default", "requirements"),
            201);
  char path[256];
  snprintf(path, sizeof path, NODECLAIMS "/%s/status", name);
  CHECK_INT(ctrl_kube_pack(&fx, "PATCH", path, "{s:{s:s, s:s, s:[{s:s, s:s, s:s, s:s}]}}", "status",
                           "providerID", provider_id, "nodeName", node_name, "conditions", "type",
                           "Registered", "status", registered ? "True" : "Unknown", "reason",
                           registered ? "Registered" : "NodeNotFound", "lastTransitionTime",
                           "2026-12-02T04:00:00Z"),
            200);
}

static int annotated(ctrl_fixture *f, const void *name) {
  char path[256];
  snprintf(path, sizeof path, NODECLAIMS "/%s", (const char *)name);
  json_t *claim = ctrl_get(f, path);
  const char *v = lp_obj_annotation(claim, TAGGED);
  int ok = v && strcmp(v, "true") == 0;
  json_decref(claim);
  return ok;
}

static double results(const char *result) {
  return ctrl_metric(&fx, "luaprov_instance_tagging_total", LP_LABELS(result));
}

static int failed_once(ctrl_fixture *f, const void *ud) {
  (void)f;
  (void)ud;
  return results("failed") >= 1;
}

/* Changes the NodeClaim's labels: an update the controller is told about. */
static void touch(const char *name, const char *value) {
  char path[256];
  snprintf(path, sizeof path, NODECLAIMS "/%s", name);
  CHECK_INT(ctrl_kube_pack(&fx, "PATCH", path, "{s:{s:{s:s}}}", "metadata", "labels", "touched", value), 200);
}

static const char *instance_tag(const char *provider_id, const char *key, json_t **state) {
  *state = ctrl_alibaba_state(&fx);
  return json_string_value(
      json_object_get(json_object_get(mapping_sim_instance(*state, provider_id), "tags"), key));
}

static void test_tagged_once_after_registration(void) {
  json_t *nodeclass = mapping_resolved_nodeclass(fx.scripts, fx.sim);
  char *pid = launch(nodeclass);
  CHECK(pid != NULL);
  json_decref(nodeclass);

  nodeclaim("not-yet", pid, "cn-hangzhou.172.16.0.7", 0);
  ctrl_run_for(&fx, 1.0);
  CHECK(!annotated(&fx, "not-yet"));
  CHECK_INT(ctrl_alibaba_calls(&fx, "TagResources"), 0);

  nodeclaim("registered", pid, "cn-hangzhou.172.16.0.7", 1);
  CHECK(ctrl_wait_for(&fx, 10, annotated, "registered"));
  json_t *state;
  CHECK_STR(instance_tag(pid, "Name", &state), "cn-hangzhou.172.16.0.7");
  json_decref(state);
  CHECK_INT(ctrl_alibaba_calls(&fx, "TagResources"), 1);
  CHECK(results("tagged") == 1);

  /* later updates (and a restart: the annotation is stored) call nothing */
  touch("registered", "1");
  touch("registered", "2");
  ctrl_run_for(&fx, 1.0);
  CHECK_INT(ctrl_alibaba_calls(&fx, "TagResources"), 1);
  free(pid);
}

static void test_failure_not_repeated_on_every_update(void) {
  nodeclaim("lost-instance", "cn-hangzhou.i-bp1nosuchinstance00", "cn-hangzhou.172.16.0.8", 1);
  CHECK(ctrl_wait_for(&fx, 10, failed_once, NULL));
  long long calls = ctrl_alibaba_calls(&fx, "TagResources");
  touch("lost-instance", "1");
  touch("lost-instance", "2");
  ctrl_run_for(&fx, 1.0);
  CHECK_INT(ctrl_alibaba_calls(&fx, "TagResources"), calls); /* retried later, not per update */
  CHECK(results("failed") == 1);
  CHECK(!annotated(&fx, "lost-instance"));
}

int main(void) {
  ctrl_fixture_start(&fx, tagging_only, NULL);
  RUN(test_tagged_once_after_registration);
  RUN(test_failure_not_repeated_on_every_update);
  ctrl_fixture_stop(&fx);
  return check_summary();
}

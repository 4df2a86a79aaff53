/* Instance tagging after registration (engine/controller/tagging.c, docs/controllers.md) through the
 * real manager, the Alibaba mapping's registered hook and the simulators over HTTP: a registered
 * NodeClaim's instance gets Name=<node name> with one TagResources and the NodeClaim the annotation
 * luaprov.io/instance-tagged=true, after which updates of the NodeClaim call nothing; a NodeClaim not
 * registered yet is not tagged; a conflicting annotation patch is patched again without tagging again; an
 * update of the NodeClaim during the call causes no conflict (the patch has no precondition); a
 * failing call is not repeated on updates of the NodeClaim within 30 s of the controllers' clock
 * (moved by the test), and is after them. */
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
      "karpenter.alibabacloud.com", "kind", "ECSNodeClass", "name", "default", "requirements", "key",
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
                           "spec", "nodeClassRef", "group", "karpenter.alibabacloud.com", "kind",
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

/* (i) The first patch of the annotation answers 409 Conflict: it is patched again, the hook (a cloud
 * call) is not. */
static void test_conflict_patches_again_without_tagging_again(void) {
  json_t *nodeclass = mapping_resolved_nodeclass(fx.scripts, fx.sim);
  char *pid = launch(nodeclass);
  json_decref(nodeclass);
  long long calls = ctrl_alibaba_calls(&fx, "TagResources");
  /* skip 1: the test's own status patch in nodeclaim() */
  ctrl_kube_faults(
      &fx, "{\"verb\":\"patch\",\"resource\":\"nodeclaims\",\"status\":409,\"skip\":1,\"count\":1}", 0);
  nodeclaim("conflicted", pid, "cn-hangzhou.172.16.0.9", 1);
  CHECK(ctrl_wait_for(&fx, 10, annotated, "conflicted"));
  CHECK(ctrl_kube_faults_used(&fx, NULL)); /* the conflict happened */
  CHECK_INT(ctrl_alibaba_calls(&fx, "TagResources"), calls + 1);
  CHECK(results("tagged") == 2); /* this one and test_tagged_once_after_registration's */
  json_decref(ctrl_admin(&fx, "kubernetes", "DELETE", "/_sim/faults", NULL));
  free(pid);
}

typedef struct calls_want {
  const char *action;
  long long at;
} calls_want;

static int alibaba_called(ctrl_fixture *f, const void *ud) {
  const calls_want *w = ud;
  return ctrl_alibaba_calls(f, w->action) >= w->at;
}

static double successes(void) {
  return ctrl_metric(&fx, "luaprov_controller_reconciles_total", LP_LABELS("nodeclaim.tagging", "success"));
}

static int succeeded_since(ctrl_fixture *f, const void *ud) {
  (void)f;
  return successes() > *(const double *)ud;
}

/* (ii) The NodeClaim changes while TagResources is on its way (as the lifecycle controller writes it
 * right after registration): the annotation is patched once, with no conflict, since it carries no
 * resourceVersion precondition; the update that came meanwhile tags nothing again. */
static void test_update_during_the_call_does_not_conflict(void) {
  json_t *nodeclass = mapping_resolved_nodeclass(fx.scripts, fx.sim);
  char *pid = launch(nodeclass);
  json_decref(nodeclass);
  long long calls = ctrl_alibaba_calls(&fx, "TagResources");
  json_decref(ctrl_admin(&fx, "alibaba", "POST", "/_sim/faults",
                         "{\"kind\":\"timeout\",\"action\":\"TagResources\",\"seconds\":1,\"count\":1}"));
  nodeclaim("raced", pid, "cn-hangzhou.172.16.0.10", 1);
  calls_want tagging = {"TagResources", calls + 1};
  CHECK(ctrl_wait_for(&fx, 10, alibaba_called, &tagging)); /* carried out, answered a second later */
  touch("raced", "meanwhile");
  /* counts the patches of NodeClaims from here on (a 1 ms pause each) */
  ctrl_kube_faults(&fx,
                   "{\"kind\":\"slow\",\"verb\":\"patch\",\"resource\":\"nodeclaims\",\"seconds\":0.001}", 0);
  CHECK(ctrl_wait_for(&fx, 10, annotated, "raced"));
  double before = successes();
  touch("raced", "after");
  CHECK(ctrl_wait_for(&fx, 10, succeeded_since, &before)); /* its reconcile ran */
  CHECK_INT(ctrl_kube_fault_fired(&fx), 2); /* the annotation's patch (no conflict, no repeat) and "after" */
  CHECK_INT(ctrl_alibaba_calls(&fx, "TagResources"), calls + 1);
  json_decref(ctrl_admin(&fx, "kubernetes", "DELETE", "/_sim/faults", NULL));
  json_decref(ctrl_admin(&fx, "alibaba", "DELETE", "/_sim/faults", NULL));
  free(pid);
}

static double fake_now = 1000; /* the controllers' clock from test_failure_retried_after_30s on */

static double requeues(void) {
  return ctrl_metric(&fx, "luaprov_controller_reconciles_total", LP_LABELS("nodeclaim.tagging", "requeue"));
}

static int requeued_since(ctrl_fixture *f, const void *ud) {
  (void)f;
  return requeues() > *(const double *)ud;
}

/* Updates the NodeClaim at second t after its failure (on the controllers' clock) and waits for the
 * reconcile it causes, which waits out the failure: a requeue. */
static void touch_at(const char *name, double t) {
  fake_now = 1000 + t;
  double before = requeues();
  char value[32];
  snprintf(value, sizeof value, "t%g", t);
  touch(name, value);
  CHECK(ctrl_wait_for(&fx, 10, requeued_since, &before));
}

static int failed_twice(ctrl_fixture *f, const void *ud) {
  (void)f;
  (void)ud;
  return results("failed") >= 2;
}

/* (iii) A failing call is not repeated on the NodeClaim's updates within 30 s of the controllers' clock,
 * and is after them. */
static void test_failure_retried_after_30s(void) {
  lp_env_set_clock(lp_controllers_env(fx.manager), ctrl_clock_at, &fake_now);
  nodeclaim("lost-instance", "cn-hangzhou.i-bp1nosuchinstance00", "cn-hangzhou.172.16.0.8", 1);
  CHECK(ctrl_wait_for(&fx, 10, failed_once, NULL));
  long long calls = ctrl_alibaba_calls(&fx, "TagResources");
  touch_at("lost-instance", 1);
  touch_at("lost-instance", 29.5);
  CHECK_INT(ctrl_alibaba_calls(&fx, "TagResources"), calls); /* not per update */
  CHECK(results("failed") == 1);
  fake_now = 1000 + 30.5;
  touch("lost-instance", "t30.5");
  CHECK(ctrl_wait_for(&fx, 10, failed_twice, NULL)); /* tried again */
  CHECK_INT(ctrl_alibaba_calls(&fx, "TagResources"), calls + 1);
  CHECK(!annotated(&fx, "lost-instance"));
}

int main(void) {
  ctrl_fixture_start(&fx, tagging_only, NULL);
  RUN(test_tagged_once_after_registration);
  RUN(test_conflict_patches_again_without_tagging_again);
  RUN(test_update_during_the_call_does_not_conflict);
  RUN(test_failure_retried_after_30s);
  ctrl_fixture_stop(&fx);
  return check_summary();
}

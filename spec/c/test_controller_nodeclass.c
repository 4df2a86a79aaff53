/* The ECSNodeClass status controller (engine/controller/nodeclass.c) and the contract calls behind it
 * (lp_cp_resolve_nodeclass, lp_cp_nodeclass_hash), through the real manager, the Alibaba mapping and
 * the simulators over HTTP: a class gets its finalizer, resolved lists, Ready and hash annotations; a
 * selector matching nothing is Ready=False with the reason; a throttled API keeps it from Ready until
 * the throttling stops; a deleted class waits for its last NodeClaim; a mapping answering garbage is a
 * Contract error that makes the class not Ready, and one reporting no conditions gets Ready from the
 * lists. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "contract/shapes.h"
#include "controller_fixture.h"

#define CLASSES "/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses"

static ctrl_fixture fx;
static const lp_controller_def *const nodeclass_only[] = {&lp_nodeclass_controller, NULL};
static const lp_controller_def *const none[] = {NULL};

/* ---- helpers ------------------------------------------------------------------------------ */

static json_t *cached_class(ctrl_fixture *f, const char *name) {
  return lp_env_get(lp_controllers_env(f->manager), LP_KIND_NODECLASS, name);
}

/* {name, status}: the cached class has Ready at that status. */
static int class_ready_is(ctrl_fixture *f, const void *ud) {
  const char *const *want = ud;
  return lp_condition_is(cached_class(f, want[0]), "Ready", want[1]);
}

static int class_gone(ctrl_fixture *f, const void *ud) {
  char path[256];
  snprintf(path, sizeof path, CLASSES "/%s", (const char *)ud);
  return ctrl_gone(f, path);
}

static void create_class(ctrl_fixture *f, const char *name, const char *vswitch_tag_value) {
  json_t *nc = mapping_nodeclass(name, vswitch_tag_value);
  char *body = json_dumps(nc, JSON_COMPACT);
  long status = 0;
  json_decref(ctrl_kube(f, "POST", CLASSES, body, &status));
  free(body);
  json_decref(nc);
  CHECK_INT(status, 201);
}

static const char *condition_field(const json_t *obj, const char *type, const char *field) {
  return json_string_value(json_object_get(lp_condition_get(obj, type), field));
}

/* ---- the contract calls ------------------------------------------------------------------- */

static void test_contract_calls(void) {
  ctrl_fixture *f = &fx;
  json_t *nc = mapping_nodeclass("default", "luaprov-sim");
  lp_cp_outcome o = {0};
  lp_cp_resolve_nodeclass(f->cloud, nc, lp_cp_outcome_store, &o);
  lp_cp_outcome_wait(&f->loop, &o);
  CHECK(o.error == NULL);
  CHECK_INT(json_array_size(json_object_get(o.value, "vSwitches")), 4); /* one tagged vSwitch per zone */
  CHECK_INT(json_array_size(json_object_get(o.value, "securityGroups")), 2);
  CHECK_INT(json_array_size(json_object_get(o.value, "images")), 2); /* x86_64 and arm64 */
  json_t *as_class = json_pack("{s:o}", "status", o.value);
  CHECK_STR(condition_field(as_class, "VSwitchResolved", "status"), "True");
  json_decref(as_class);

  lp_cp_outcome h = {0};
  lp_cp_nodeclass_hash(f->cloud, nc, lp_cp_outcome_store, &h);
  lp_cp_outcome_wait(&f->loop, &h);
  CHECK(h.error == NULL);
  CHECK_INT(strlen(json_string_value(json_object_get(h.value, "hash"))), 16);
  CHECK_STR(json_string_value(json_object_get(h.value, "version")), "lp2");
  /* the hash follows the spec, but not the selector terms (drift follows from status for those) */
  json_t *before = json_incref(json_object_get(h.value, "hash"));
  json_decref(h.value);
  json_object_set_new(json_object_get(nc, "spec"), "userData", json_string("#!/bin/sh\n"));
  lp_cp_outcome h2 = {0};
  lp_cp_nodeclass_hash(f->cloud, nc, lp_cp_outcome_store, &h2);
  lp_cp_outcome_wait(&f->loop, &h2);
  CHECK(!json_equal(before, json_object_get(h2.value, "hash")));
  json_decref(h2.value);
  json_decref(before);
  json_decref(nc);
}

/* ---- a class that resolves ---------------------------------------------------------------- */

static void test_ready(void) {
  ctrl_fixture *f = &fx;
  ctrl_fixture_apply_defaults(f);
  CHECK(ctrl_wait_for(f, 10, class_ready_is, (const char *const[]){"default", "True"}));
  long status = 0;
  json_t *nc = ctrl_kube(f, "GET", CLASSES "/default", NULL, &status);
  CHECK_INT(status, 200);
  CHECK(lp_obj_has_finalizer(nc, "karpenter.k8s.alibabacloud/termination"));
  const json_t *st = json_object_get(nc, "status");
  CHECK_INT(json_array_size(json_object_get(st, "vSwitches")), 4);
  CHECK_INT(json_array_size(json_object_get(st, "securityGroups")), 2);
  CHECK_INT(json_array_size(json_object_get(st, "images")), 2);
  CHECK_STR(condition_field(nc, "VSwitchResolved", "status"), "True");
  CHECK_STR(condition_field(nc, "SecurityGroupResolved", "status"), "True");
  CHECK_STR(condition_field(nc, "ImageResolved", "status"), "True");
  CHECK(condition_field(nc, "Ready", "lastTransitionTime") != NULL);
  CHECK(json_equal(json_object_get(lp_condition_get(nc, "Ready"), "observedGeneration"),
                   json_object_get(json_object_get(nc, "metadata"), "generation")));
  /* the annotations carry what the mapping's hash says */
  lp_cp_outcome h = {0};
  lp_cp_nodeclass_hash(f->cloud, nc, lp_cp_outcome_store, &h);
  lp_cp_outcome_wait(&f->loop, &h);
  const json_t *annotations = json_object_get(json_object_get(nc, "metadata"), "annotations");
  CHECK_STR(json_string_value(json_object_get(annotations, LP_ANNOTATION_HASH)),
            json_string_value(json_object_get(h.value, "hash")));
  CHECK_STR(json_string_value(json_object_get(annotations, LP_ANNOTATION_HASH_VERSION)), "lp2");
  json_decref(h.value);
  CHECK_INT(ctrl_metric(f, "luaprov_nodeclass_ready", LP_LABELS("default")), 1);
  CHECK(ctrl_metric(f, "luaprov_nodeclass_resolutions_total", LP_LABELS("success")) >= 1);

  /* settled: no more writes, and our own status write did not cost another round of cloud calls */
  ctrl_run_for(f, 0.3);
  json_t *settled = ctrl_kube(f, "GET", CLASSES "/default", NULL, &status);
  long long calls = ctrl_alibaba_calls(f, "DescribeVSwitches");
  ctrl_run_for(f, 1.0);
  json_t *later = ctrl_kube(f, "GET", CLASSES "/default", NULL, &status);
  CHECK_STR(lp_obj_resource_version(later), lp_obj_resource_version(settled));
  CHECK_INT(ctrl_alibaba_calls(f, "DescribeVSwitches"), calls);
  json_decref(settled);
  json_decref(later);

  /* a spec change is resolved again at its generation and re-stamps the hash */
  json_decref(
      ctrl_kube(f, "PATCH", CLASSES "/default", "{\"spec\":{\"userData\":\"#!/bin/sh\\n\"}}", &status));
  CHECK_INT(status, 200);
  const char *old_hash = json_string_value(json_object_get(annotations, LP_ANNOTATION_HASH));
  json_t *updated = NULL;
  for (int i = 0; i < 100; i++) {
    ctrl_run_for(f, 0.05);
    json_decref(updated);
    updated = ctrl_kube(f, "GET", CLASSES "/default", NULL, &status);
    const json_t *a = json_object_get(json_object_get(updated, "metadata"), "annotations");
    const char *now = json_string_value(json_object_get(a, LP_ANNOTATION_HASH));
    if (now && strcmp(now, old_hash) != 0 &&
        json_equal(json_object_get(lp_condition_get(updated, "Ready"), "observedGeneration"),
                   json_object_get(json_object_get(updated, "metadata"), "generation")))
      break;
  }
  const json_t *a = json_object_get(json_object_get(updated, "metadata"), "annotations");
  CHECK(strcmp(json_string_value(json_object_get(a, LP_ANNOTATION_HASH)), old_hash) != 0);
  CHECK_INT(json_integer_value(json_object_get(lp_condition_get(updated, "Ready"), "observedGeneration")), 2);
  CHECK(calls < ctrl_alibaba_calls(f, "DescribeVSwitches"));
  json_decref(updated);
  json_decref(nc);
}

/* ---- a selector that matches nothing ------------------------------------------------------ */

static void test_selector_matches_nothing(void) {
  ctrl_fixture *f = &fx;
  create_class(f, "nomatch", "no-such-cluster");
  CHECK(ctrl_wait_for(f, 10, class_ready_is, (const char *const[]){"nomatch", "False"}));
  json_t *nc = cached_class(f, "nomatch");
  CHECK_STR(condition_field(nc, "Ready", "reason"), "VSwitchResolutionFailed");
  CHECK_CONTAINS(condition_field(nc, "Ready", "message"), "VSwitchSelector did not match any VSwitches");
  CHECK_STR(condition_field(nc, "VSwitchResolved", "status"), "False");
  CHECK_STR(condition_field(nc, "SecurityGroupResolved", "status"), "True");
  CHECK_INT(json_array_size(json_object_get(json_object_get(nc, "status"), "vSwitches")), 0);
  CHECK_INT(ctrl_metric(f, "luaprov_nodeclass_ready", LP_LABELS("nomatch")), 0);

  /* fixed by the operator: Ready */
  long status = 0;
  json_decref(ctrl_kube(
      f, "PATCH", CLASSES "/nomatch",
      "{\"spec\":{\"vSwitchSelectorTerms\":[{\"tags\":{\"karpenter.sh/discovery\":\"luaprov-sim\"}}]}}",
      &status));
  CHECK_INT(status, 200);
  CHECK(ctrl_wait_for(f, 10, class_ready_is, (const char *const[]){"nomatch", "True"}));
  CHECK_INT(ctrl_metric(f, "luaprov_nodeclass_ready", LP_LABELS("nomatch")), 1);
}

/* ---- a throttled API ---------------------------------------------------------------------- */

static void test_throttled(void) {
  ctrl_fixture *f = &fx;
  json_decref(ctrl_admin(f, "alibaba", "POST", "/_sim/faults",
                         "{\"action\":\"DescribeVSwitches\",\"kind\":\"throttle\"}"));
  double errors = ctrl_metric(f, "luaprov_nodeclass_resolutions_total", LP_LABELS("error"));
  create_class(f, "throttled", "luaprov-sim");
  CHECK(ctrl_wait_for(f, 10, ctrl_nodeclass_has_ready, "throttled"));
  json_t *nc = cached_class(f, "throttled");
  CHECK_STR(condition_field(nc, "Ready", "status"), "Unknown");
  CHECK_STR(condition_field(nc, "VSwitchResolved", "reason"), "DescribeVSwitchesFailed");
  CHECK_CONTAINS(condition_field(nc, "VSwitchResolved", "message"), "DescribeVSwitches");
  CHECK_CONTAINS(condition_field(nc, "VSwitchResolved", "message"), "RequestId");
  CHECK_STR(condition_field(nc, "SecurityGroupResolved", "status"), "True");
  /* retried with backoff, never Ready while the API throttles, and no status write per retry (the
   * message keeps the first failure's request ID) */
  long status = 0;
  json_t *first = ctrl_kube(f, "GET", CLASSES "/throttled", NULL, &status);
  ctrl_run_for(f, 2.0);
  json_t *last = ctrl_kube(f, "GET", CLASSES "/throttled", NULL, &status);
  CHECK_STR(lp_obj_resource_version(last), lp_obj_resource_version(first));
  json_decref(first);
  json_decref(last);
  CHECK(!lp_condition_is(cached_class(f, "throttled"), "Ready", "True"));
  CHECK(ctrl_metric(f, "luaprov_nodeclass_resolutions_total", LP_LABELS("error")) >= errors + 2);
  CHECK(ctrl_metric(f, "luaprov_controller_reconciles_total", LP_LABELS("nodeclass", "error")) >= 2);
  CHECK_INT(ctrl_metric(f, "luaprov_nodeclass_ready", LP_LABELS("throttled")), 0);

  json_decref(ctrl_admin(f, "alibaba", "DELETE", "/_sim/faults", NULL));
  CHECK(ctrl_wait_for(f, 15, class_ready_is, (const char *const[]){"throttled", "True"}));
  CHECK_INT(
      json_array_size(json_object_get(json_object_get(cached_class(f, "throttled"), "status"), "vSwitches")),
      4);
}

/* ---- deletion waits for the NodeClaims -------------------------------------------------- */

static int nodeclaim_indexed(ctrl_fixture *f, const void *ud) {
  return lp_env_index_first(lp_controllers_env(f->manager), LP_INDEX_NODECLAIM_BY_NODECLASS, ud, NULL) !=
         NULL;
}

static int deleting_class_cached(ctrl_fixture *f, const void *ud) {
  return lp_obj_deleting(cached_class(f, ud));
}

static int waiting_event_recorded(ctrl_fixture *f, const void *ud) {
  (void)ud;
  json_t *events = ctrl_kube(f, "GET", "/api/v1/namespaces/default/events", NULL, NULL);
  int found = 0;
  size_t i;
  json_t *ev;
  json_array_foreach(json_object_get(events, "items"), i, ev) {
    const char *reason = json_string_value(json_object_get(ev, "reason"));
    const char *message = json_string_value(json_object_get(ev, "message"));
    const char *kind = lp_obj_str(ev, "involvedObject.kind"), *type = lp_obj_str(ev, "type");
    if (reason && strcmp(reason, "WaitingOnNodeClaimTermination") == 0 && message &&
        strstr(message, "nc-ref") && kind && strcmp(kind, "ECSNodeClass") == 0 && type &&
        strcmp(type, "Normal") == 0)
      found++;
  }
  json_decref(events);
  return found;
}

static void test_delete_waits_for_nodeclaims(void) {
  ctrl_fixture *f = &fx;
  long status = 0;
  json_decref(ctrl_kube(
      f, "POST", "/apis/karpenter.sh/v1/nodeclaims",
      "{\"apiVersion\":\"karpenter.sh/v1\",\"kind\":\"NodeClaim\",\"metadata\":{\"name\":\"nc-ref\"},"
      "\"spec\":{\"nodeClassRef\":{\"group\":\"karpenter.alibabacloud.com\",\"kind\":"
      "\"ECSNodeClass\",\"name\":\"default\"},\"requirements\":[]}}",
      &status));
  CHECK_INT(status, 201);
  CHECK(ctrl_wait_for(f, 5, nodeclaim_indexed, "default"));
  json_decref(ctrl_kube(f, "DELETE", CLASSES "/default", NULL, &status));
  CHECK_INT(status, 200);
  CHECK(ctrl_wait_for(f, 5, deleting_class_cached, "default"));
  CHECK(ctrl_wait_for(f, 5, waiting_event_recorded, NULL));
  ctrl_run_for(f, 1.0);
  json_t *nc = ctrl_kube(f, "GET", CLASSES "/default", NULL, &status);
  CHECK_INT(status, 200);
  CHECK(lp_obj_deleting(nc));
  CHECK(lp_obj_has_finalizer(nc, "karpenter.k8s.alibabacloud/termination"));
  json_decref(nc);
  CHECK_INT(waiting_event_recorded(f, NULL), 1); /* once, not per reconcile */

  /* the last NodeClaim goes: so does the class */
  json_decref(ctrl_kube(f, "DELETE", "/apis/karpenter.sh/v1/nodeclaims/nc-ref", NULL, &status));
  CHECK_INT(status, 200);
  CHECK(ctrl_wait_for(f, 10, class_gone, "default"));
}

/* ---- other mappings: one that breaks the contract, one that reports no conditions
 * --------------------------------------------------- */

static lp_script_host *operator_scripts(ctrl_fixture *f, char *dir) {
  if (!mkdtemp(dir)) return NULL;
  char path[256];
  snprintf(path, sizeof path, "%s/providers", dir);
  mkdir(path, 0700);
  snprintf(path, sizeof path, "%s/providers/alibaba", dir);
  mkdir(path, 0700);
  snprintf(path, sizeof path, "%s/providers/alibaba/init.lua", dir);
  FILE *out = fopen(path, "w");
  if (!out) return NULL;
  /* classes named bare* get the lists without conditions (bare-noimages without images too),
   * ready-only the root Ready alone; every other class a status that breaks the contract (a status
   * without conditions: the one thing the engine checks) */
  fputs(
      "local default = require 'defaults.providers.alibaba'\n"
      "local M = {}\n"
      "for k, v in pairs(default) do M[k] = v end\n"
      "function M.resolve_nodeclass(ctx, nodeclass)\n"
      "  local name = nodeclass.metadata.name\n"
      "  if not (name:find('^bare') or name == 'ready-only') then return { vSwitches = 'all of them' } end\n"
      "  local status = default.resolve_nodeclass(ctx, nodeclass)\n"
      "  local ready = {}\n"
      "  for _, c in ipairs(status.conditions) do if c.type == 'Ready' then ready[1] = c end end\n"
      "  status.conditions = name == 'ready-only' and ready or {}\n"
      "  if name == 'bare-noimages' then status.images = {} end\n"
      "  return status\n"
      "end\n"
      "return M\n",
      out);
  fclose(out);
  lp_script_host_config cfg = {.loop = &f->loop,
                               .scripts_dir = dir,
                               .defaults_dir = LUAPROV_SOURCE_DIR,
                               .modules = lp_contract_modules,
                               .http = f->http};
  lp_problems problems = {0};
  lp_script_host *host = lp_script_host_new(&cfg, &problems);
  lp_problems_free(&problems);
  return host;
}

static void test_other_mappings(void) {
  ctrl_fixture *f = &fx;
  char dir[] = "/tmp/luaprov-nodeclass-XXXXXX";
  lp_script_host *scripts = operator_scripts(f, dir);
  CHECK(scripts != NULL);
  if (!scripts) return;
  lp_cloudprovider *custom =
      lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = &f->loop,
                                                      .scripts = scripts,
                                                      .cluster_id = "luaprov-sim",
                                                      .endpoint = lp_sim_url(f->sim, "alibaba"),
                                                      .refresh_interval_s = -1});

  /* the call names the script and the rule */
  lp_cp_outcome o = {0};
  json_t *nc = mapping_nodeclass("default", "luaprov-sim");
  lp_cp_resolve_nodeclass(custom, nc, lp_cp_outcome_store, &o);
  lp_cp_outcome_wait(&f->loop, &o);
  json_decref(nc);
  CHECK(o.value == NULL);
  CHECK_STR(o.error ? o.error->code : NULL, "Contract");
  CHECK_CONTAINS(o.error ? o.error->message : NULL,
                 "providers/alibaba/init.lua: resolve_nodeclass: status.conditions is not a list");
  lp_error_free(o.error);

  /* through the controller: the class is not Ready, and says why */
  ctrl_stop_manager(f, f->manager);
  lp_error *err = NULL;
  lp_controllers_config cfg = ctrl_manager_config(f, nodeclass_only);
  cfg.cloud = custom;
  f->manager = lp_controllers_start(&cfg, &err);
  CHECK(f->manager != NULL);
  if (!f->manager) return;
  CHECK(ctrl_wait_for(f, 10, class_ready_is, (const char *const[]){"throttled", "False"}));
  json_t *cls = cached_class(f, "throttled");
  CHECK_STR(condition_field(cls, "Ready", "reason"), "Contract");
  CHECK_CONTAINS(condition_field(cls, "Ready", "message"), "resolving ECSNodeClass throttled: ");
  CHECK_CONTAINS(condition_field(cls, "Ready", "message"), "providers/alibaba/init.lua");
  CHECK_INT(json_array_size(json_object_get(json_object_get(cls, "status"), "vSwitches")), 4); /* kept */

  /* a mapping that reports no conditions: readiness is its to say, so Ready stays Unknown whatever
   * lists it resolved (the engine knows no cloud's lists); only Ready: that one */
  create_class(f, "bare", "luaprov-sim");
  create_class(f, "bare-noimages", "luaprov-sim");
  create_class(f, "ready-only", "luaprov-sim");
  CHECK(ctrl_wait_for(f, 10, class_ready_is, (const char *const[]){"bare", "Unknown"}));
  CHECK(ctrl_wait_for(f, 10, class_ready_is, (const char *const[]){"bare-noimages", "Unknown"}));
  CHECK(ctrl_wait_for(f, 10, class_ready_is, (const char *const[]){"ready-only", "True"}));
  CHECK_STR(condition_field(cached_class(f, "bare"), "Ready", "reason"), "ReadyNotReported");
  CHECK_CONTAINS(condition_field(cached_class(f, "bare-noimages"), "Ready", "message"),
                 "reported no conditions");
  CHECK_INT(json_array_size(json_object_get(json_object_get(cached_class(f, "bare"), "status"), "vSwitches")),
            4); /* what the mapping resolved is written as it is */
  CHECK(lp_condition_get(cached_class(f, "bare"), "VSwitchResolved") == NULL);
  CHECK_INT(json_array_size(
                json_object_get(json_object_get(cached_class(f, "ready-only"), "status"), "conditions")),
            1);

  ctrl_stop_manager(f, f->manager);
  cfg = ctrl_manager_config(f, none);
  f->manager = lp_controllers_start(&cfg, &err);
  lp_cloudprovider_free(custom);
  lp_script_host_close(scripts, NULL, NULL);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
}

int main(void) {
  ctrl_fixture_start(&fx, nodeclass_only, NULL);
  RUN(test_contract_calls);
  RUN(test_ready);
  RUN(test_selector_matches_nothing);
  RUN(test_throttled);
  RUN(test_delete_waits_for_nodeclaims);
  RUN(test_other_mappings);
  ctrl_fixture_stop(&fx);
  return check_summary();
}

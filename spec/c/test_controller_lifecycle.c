/* The NodeClaim lifecycle controller alone (docs/controllers.md) through the real manager, the
 * Alibaba mapping and both simulators over HTTP: launch, registration, initialization, the launch
 * errors that delete a NodeClaim or retry it, a lost status write after Create, and the timeouts.
 * Nodes are created by the test, as a kubelet would. No termination controller runs, so a deleted
 * NodeClaim (it has the finalizer) only gets its deletionTimestamp. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract/shapes.h"
#include "controller_fixture.h"

#define CLAIMS      "/apis/karpenter.sh/v1/nodeclaims"
#define NODECLASSES "/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses"

static ctrl_fixture f;

/* ---- helpers ------------------------------------------------------------------------------ */

static json_t *api_get(const char *fmt, const char *name) {
  char path[256];
  snprintf(path, sizeof path, fmt, name);
  return ctrl_get(&f, path);
}

static json_t *claim(const char *name) {
  return api_get(CLAIMS "/%s", name);
}
static json_t *node(const char *name) {
  return api_get("/api/v1/nodes/%s", name);
}

static long api_send(const char *method, const char *path, json_t *body) {
  char *text = json_dumps(body, JSON_COMPACT);
  long status = 0;
  json_decref(ctrl_kube(&f, method, path, text, &status));
  free(text);
  json_decref(body);
  return status;
}

/* Writes the status the nodeclass controller would: the mapping's resolution, Ready (or not), and the
 * hash annotations; waits until the manager's cache has it. */
static void set_nodeclass_status(const char *name, int ready) {
  json_t *nc = api_get(NODECLASSES "/%s", name);
  json_t *status = ready ? mapping_resolved_status(f.scripts, f.sim, nc) : json_object();
  char now[LP_RFC3339_SIZE];
  lp_clock_rfc3339(lp_clock_wall(), 0, now);
  json_object_set_new(
      status, "conditions",
      json_pack("[{s:s, s:s, s:s, s:s, s:s}]", "type", "Ready", "status", ready ? "True" : "False", "reason",
                ready ? "Ready" : "SecurityGroupResolutionFailed", "message", "", "lastTransitionTime", now));
  json_object_set(nc, "status", status);
  json_t *annotations = mapping_hash_annotations(f.scripts, nc);
  char path[256];
  snprintf(path, sizeof path, NODECLASSES "/%s/status", name);
  CHECK_INT(api_send("PATCH", path, json_pack("{s:o}", "status", status)), 200);
  snprintf(path, sizeof path, NODECLASSES "/%s", name);
  CHECK_INT(api_send("PATCH", path, json_pack("{s:{s:o}}", "metadata", "annotations", annotations)), 200);
  json_decref(nc);
  CHECK(ctrl_wait_for(&f, 5, ctrl_nodeclass_has_ready, name));
}

/* A NodeClaim of NodePool "default" for on-demand capacity and one CPU, referencing class_name. */
static json_t *new_claim(const char *name, const char *class_name) {
  return json_pack("{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:[s]}], s:{s:{s:s}}}}",
                   "apiVersion", "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name", name, "labels",
                   "karpenter.sh/nodepool", "default", "spec", "nodeClassRef", "group",
                   "karpenter.alibabacloud.com", "kind", "ECSNodeClass", "name", class_name, "requirements",
                   "key", "karpenter.sh/capacity-type", "operator", "In", "values", "on-demand", "resources",
                   "requests", "cpu", "1");
}

static void post_claim(json_t *c) {
  CHECK_INT(api_send("POST", CLAIMS, c), 201);
}

typedef struct expect {
  const char *claim, *type, *status, *reason; /* reason NULL: any */
} expect;

static int condition_is(ctrl_fixture *fx, const void *ud) {
  const expect *e = ud;
  return ctrl_claim_condition(fx, e->claim, e->type, e->status, e->reason);
}

#define WAIT_CONDITION(name, type, status, reason)                                                           \
  CHECK(ctrl_wait_for(&f, 10, condition_is, &(expect){name, type, status, reason}))

static int deleting(ctrl_fixture *fx, const void *name) {
  (void)fx;
  json_t *c = claim(name);
  int gone = !c || lp_obj_deleting(c);
  json_decref(c);
  return gone;
}

static size_t instances(void) {
  json_t *s = ctrl_alibaba_state(&f);
  size_t n = json_array_size(json_object_get(s, "instances"));
  json_decref(s);
  return n;
}

static const json_t *find_taint(const json_t *n, const char *key) {
  size_t i;
  const json_t *t;
  json_array_foreach(json_object_get(json_object_get(n, "spec"), "taints"), i, t) {
    if (strcmp(json_string_value(json_object_get(t, "key")) ?: "", key) == 0) return t;
  }
  return NULL;
}

static const char *label(const json_t *obj, const char *key) {
  return json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"), key));
}

/* A Node for the NodeClaim's instance, as the kubelet registers it (tainted unless told not to). */
static void create_node(const char *name, const char *provider_id, int unregistered_taint) {
  json_t *n = json_pack("{s:s, s:s, s:{s:s}, s:{s:s, s:[]}}", "apiVersion", "v1", "kind", "Node", "metadata",
                        "name", name, "spec", "providerID", provider_id, "taints");
  if (unregistered_taint)
    json_array_append_new(json_object_get(json_object_get(n, "spec"), "taints"),
                          json_pack("{s:s, s:s}", "key", "karpenter.sh/unregistered", "effect", "NoExecute"));
  CHECK_INT(api_send("POST", "/api/v1/nodes", n), 201);
}

static void patch_node(const char *name, const char *sub, json_t *patch) {
  char path[256];
  snprintf(path, sizeof path, "/api/v1/nodes/%s%s", name, sub);
  CHECK_INT(api_send("PATCH", path, patch), 200);
}

static char *provider_id_of(const char *claim_name) {
  json_t *c = claim(claim_name);
  const char *pid = lp_obj_str(c, "status.providerID");
  char *out = strdup(pid ? pid : "");
  json_decref(c);
  return out;
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_launch_register_initialize(void) {
  size_t before = instances();
  json_t *c = new_claim("nc-a", "default");
  json_t *md = json_object_get(c, "metadata");
  json_object_set_new(json_object_get(md, "labels"), "team", json_string("a"));
  json_object_set_new(md, "annotations", json_pack("{s:s}", "example.com/owner", "team-a"));
  json_object_set_new(
      json_object_get(c, "spec"), "taints",
      json_pack("[{s:s, s:s, s:s}]", "key", "dedicated", "value", "a", "effect", "NoSchedule"));
  json_object_set_new(json_object_get(c, "spec"), "startupTaints",
                      json_pack("[{s:s, s:s}]", "key", "example.com/agent", "effect", "NoSchedule"));
  post_claim(c);

  WAIT_CONDITION("nc-a", "Launched", "True", NULL);
  WAIT_CONDITION("nc-a", "Registered", "Unknown", "NodeNotFound");
  json_t *got = claim("nc-a");
  CHECK(lp_obj_has_finalizer(got, "karpenter.sh/termination"));
  char *pid = provider_id_of("nc-a");
  CHECK(strncmp(pid, "cn-hangzhou.i-", 14) == 0);
  CHECK_STR(label(got, "team"), "a");
  CHECK(label(got, LP_LABEL_INSTANCE_TYPE) != NULL); /* the provider's labels merged in */
  CHECK(json_object_get(json_object_get(got, "status"), "allocatable") != NULL);
  CHECK_INT(instances(), before + 1);
  CHECK_INT(ctrl_metric(&f, "luaprov_nodeclaims_launched_total", LP_LABELS("default")), 1);
  json_decref(got);

  /* the kubelet registers: not Ready yet, tainted unregistered */
  create_node("node-a", pid, 1);
  WAIT_CONDITION("nc-a", "Registered", "True", NULL);
  WAIT_CONDITION("nc-a", "Initialized", "Unknown", "NodeNotReady");
  json_t *n = node("node-a");
  json_t *owner = json_array_get(json_object_get(json_object_get(n, "metadata"), "ownerReferences"), 0);
  got = claim("nc-a");
  CHECK_STR(json_string_value(json_object_get(owner, "kind")), "NodeClaim");
  CHECK_STR(json_string_value(json_object_get(owner, "uid")), lp_obj_uid(got));
  CHECK(json_is_true(json_object_get(owner, "blockOwnerDeletion")));
  CHECK(lp_obj_has_finalizer(n, "karpenter.sh/termination"));
  CHECK_STR(label(n, "karpenter.sh/registered"), "true");
  CHECK_STR(label(n, "team"), "a");
  CHECK_STR(label(n, LP_LABEL_INSTANCE_TYPE), label(got, LP_LABEL_INSTANCE_TYPE));
  CHECK_STR(json_string_value(json_object_get(json_object_get(json_object_get(n, "metadata"), "annotations"),
                                              "example.com/owner")),
            "team-a");
  CHECK(find_taint(n, "karpenter.sh/unregistered") == NULL);
  CHECK(find_taint(n, "dedicated") != NULL);
  CHECK(find_taint(n, "example.com/agent") != NULL);
  CHECK_STR(lp_obj_str(got, "status.nodeName"), "node-a");
  CHECK_INT(ctrl_metric(&f, "luaprov_nodes_created_total", LP_LABELS("default")), 1);
  json_decref(got);
  json_decref(n);

  /* Ready, but the startup taint is still there */
  patch_node("node-a", "/status",
             json_pack("{s:{s:[{s:s, s:s}], s:{s:s, s:s}}}", "status", "conditions", "type", "Ready",
                       "status", "True", "allocatable", "memory", "8Gi", "pods", "110"));
  WAIT_CONDITION("nc-a", "Initialized", "Unknown", "StartupTaintsExist");
  /* its daemon removed it; a readiness gate taint is left */
  patch_node("node-a", "",
             json_pack("{s:{s:[{s:s, s:s, s:s}, {s:s, s:s}]}}", "spec", "taints", "key", "dedicated", "value",
                       "a", "effect", "NoSchedule", "key", "readiness.k8s.io/network", "effect",
                       "NoSchedule"));
  WAIT_CONDITION("nc-a", "Initialized", "Unknown", "KnownEphemeralTaintsExist");
  n = node("node-a");
  CHECK(find_taint(n, "example.com/agent") == NULL); /* startup taints are not put back */
  json_decref(n);
  patch_node("node-a", "",
             json_pack("{s:{s:[{s:s, s:s, s:s}]}}", "spec", "taints", "key", "dedicated", "value", "a",
                       "effect", "NoSchedule"));
  WAIT_CONDITION("nc-a", "Initialized", "Unknown",
                 "ResourceNotRegistered"); /* cpu requested, none allocatable */
  patch_node("node-a", "/status", json_pack("{s:{s:{s:s}}}", "status", "allocatable", "cpu", "2"));
  WAIT_CONDITION("nc-a", "Initialized", "True", NULL);
  WAIT_CONDITION("nc-a", "Ready", "True", NULL);
  n = node("node-a");
  CHECK_STR(label(n, "karpenter.sh/initialized"), "true");
  json_decref(n);
  CHECK_INT(ctrl_metric(&f, "luaprov_nodeclaims_registered_total", LP_LABELS("default")), 1);
  CHECK_INT(ctrl_metric(&f, "luaprov_nodeclaims_initialized_total", LP_LABELS("default")), 1);
  CHECK_INT(ctrl_metric(&f, "luaprov_nodeclaims_startup_duration_seconds", LP_LABELS("default")), 1);
  CHECK_INT(ctrl_metric(&f, "luaprov_nodeclaims_launched_total", LP_LABELS("default")), 1);
  free(pid);
}

/* The status write after Create fails twice (409, then 500): the launch is reused, not repeated. */
static void test_lost_status_write(void) {
  size_t before = instances();
  long long calls = ctrl_alibaba_calls(&f, "RunInstances");
  const char *const *errors = LP_LABELS("nodeclaim.lifecycle", "error");
  double failed = ctrl_metric(&f, "luaprov_controller_reconciles_total", errors);
  /* patches 1 and 2 (finalizer, then the launch's labels) pass; 3 and 4 (the status) fail */
  json_decref(
      ctrl_admin(&f, "kubernetes", "POST", "/_sim/faults",
                 "[{\"verb\":\"patch\",\"resource\":\"nodeclaims\",\"status\":409,\"skip\":2,\"count\":1},"
                 "{\"verb\":\"patch\",\"resource\":\"nodeclaims\",\"status\":500,\"skip\":2,\"count\":1}]"));
  post_claim(new_claim("nc-e", "default"));
  WAIT_CONDITION("nc-e", "Launched", "True", NULL);
  json_t *faults = ctrl_admin(&f, "kubernetes", "GET", "/_sim/faults", NULL);
  CHECK_INT(json_array_size(json_object_get(faults, "faults")), 0); /* both failures happened */
  json_decref(faults);
  CHECK_INT(ctrl_alibaba_calls(&f, "RunInstances"), calls + 1);
  CHECK_INT(instances(), before + 1);
  CHECK(ctrl_metric(&f, "luaprov_controller_reconciles_total", errors) >= failed + 2);

  /* a Node that registers without the unregistered taint is taken anyway, with an event */
  char *pid = provider_id_of("nc-e");
  create_node("node-e", pid, 0);
  WAIT_CONDITION("nc-e", "Registered", "True", NULL);
  CHECK(ctrl_has_event(&f, "nc-e", "UnregisteredTaintMissing"));
  CHECK(!ctrl_has_event(&f, "nc-a", "UnregisteredTaintMissing"));
  free(pid);
}

/* How often needle occurs in haystack (NULL: none). */
static int occurrences(const char *haystack, const char *needle) {
  int n = 0;
  for (const char *at = haystack; at && *needle && (at = strstr(at, needle)); at += strlen(needle)) n++;
  return n;
}

/* A structured launch failure: Launched=Unknown with the API's code, retried until it works. */
static void test_create_error(void) {
  size_t before = instances();
  json_decref(ctrl_admin(&f, "alibaba", "POST", "/_sim/faults",
                         "{\"action\":\"RunInstances\",\"code\":\"QuotaExceed.ElasticQuota\"}"));
  long long calls = ctrl_alibaba_calls(&f, "RunInstances");
  post_claim(new_claim("nc-d", "default"));
  WAIT_CONDITION("nc-d", "Launched", "Unknown", "QuotaExceedElasticQuota");
  json_t *c = claim("nc-d");
  CHECK_CONTAINS(json_string_value(json_object_get(lp_condition_get(c, "Launched"), "message")),
                 "QuotaExceed.ElasticQuota");
  /* the mapping's message names the action and the request ID already: each is said once */
  const char *said = json_string_value(json_object_get(lp_condition_get(c, "Launched"), "message"));
  const char *id = said ? strstr(said, "RequestId ") : NULL;
  CHECK(id != NULL);
  char request_id[64] = "";
  if (id) sscanf(id + strlen("RequestId "), "%63[^,)]", request_id);
  CHECK(strlen(request_id) >= 8);
  CHECK_INT(occurrences(said, request_id), 1);
  CHECK_INT(occurrences(said, "RunInstances"), 1);
  CHECK(!strstr(said, "request ID"));
  CHECK_STR(json_string_value(json_object_get(lp_condition_get(c, "Ready"), "reason")),
            "QuotaExceedElasticQuota");
  CHECK(!lp_obj_deleting(c));
  json_decref(c);
  ctrl_run_for(&f, 2);
  CHECK(ctrl_alibaba_calls(&f, "RunInstances") >= calls + 3); /* retried with backoff */
  CHECK_INT(instances(), before);
  json_decref(ctrl_admin(&f, "alibaba", "DELETE", "/_sim/faults", NULL));
  WAIT_CONDITION("nc-d", "Launched", "True", NULL);
  CHECK_INT(instances(), before + 1);
}

/* The condition reason is the cloud's own code from the error's reason field, not the word after
 * "failed: " in its message: Forbidden.RAM is the mapping's class "Auth" there. */
static void test_create_error_reason_field(void) {
  json_decref(ctrl_admin(&f, "alibaba", "POST", "/_sim/faults",
                         "{\"action\":\"RunInstances\",\"code\":\"Forbidden.RAM\"}"));
  post_claim(new_claim("nc-r", "default"));
  WAIT_CONDITION("nc-r", "Launched", "Unknown", "ForbiddenRAM");
  json_t *c = claim("nc-r");
  CHECK_CONTAINS(json_string_value(json_object_get(lp_condition_get(c, "Launched"), "message")),
                 "failed: Auth: ");
  json_decref(c);
  json_decref(ctrl_admin(&f, "alibaba", "DELETE", "/_sim/faults", NULL));
  WAIT_CONDITION("nc-r", "Launched", "True", NULL);
}

/* A NodeClass that is not Ready, or missing: the NodeClaim is deleted. Unmanaged ones are ignored. */
static void test_nodeclass_not_ready(void) {
  CHECK_INT(
      api_send("POST", NODECLASSES,
               json_pack("{s:s, s:s, s:{s:s}, s:{}}", "apiVersion", "karpenter.alibabacloud.com/v1alpha1",
                         "kind", "ECSNodeClass", "metadata", "name", "notready", "spec")),
      201);
  set_nodeclass_status("notready", 0);
  size_t before = instances();
  post_claim(new_claim("nc-c", "notready"));
  post_claim(new_claim("nc-c2", "missing"));
  json_t *foreign = new_claim("nc-u", "default");
  json_object_set_new(json_object_get(json_object_get(foreign, "spec"), "nodeClassRef"), "group",
                      json_string("karpenter.k8s.aws"));
  post_claim(foreign);
  CHECK(ctrl_wait_for(&f, 10, deleting, "nc-c"));
  CHECK(ctrl_wait_for(&f, 10, deleting, "nc-c2"));
  CHECK(ctrl_has_event(&f, "nc-c", "NodeClassNotReady"));
  CHECK_INT(
      ctrl_metric(&f, "luaprov_nodeclaims_disrupted_total", LP_LABELS("nodeclass_not_ready", "default")), 2);
  CHECK_INT(instances(), before);
  json_t *u = claim("nc-u");
  CHECK(u && !lp_obj_has_finalizer(u, "karpenter.sh/termination") && !json_object_get(u, "status"));
  json_decref(u);
}

/* The simulated kubelet registers the Node of a Running instance by itself (tainted, Ready, with its
 * allocatable): registration and initialization follow without the test touching the Node. */
static void test_simulated_kubelet(void) {
  post_claim(new_claim("nc-k", "default"));
  WAIT_CONDITION("nc-k", "Launched", "True", NULL);
  WAIT_CONDITION("nc-k", "Registered", "Unknown", "NodeNotFound");
  ctrl_advance(&f, 30); /* Pending -> Starting -> Running */
  WAIT_CONDITION("nc-k", "Registered", "True", NULL);
  WAIT_CONDITION("nc-k", "Initialized", "True", NULL);
  WAIT_CONDITION("nc-k", "Ready", "True", NULL);
  json_t *c = claim("nc-k");
  json_t *n = node(lp_obj_str(c, "status.nodeName") ?: "?");
  CHECK_STR(lp_obj_str(n, "spec.providerID"), lp_obj_str(c, "status.providerID"));
  CHECK(find_taint(n, "karpenter.sh/unregistered") == NULL);
  CHECK_STR(label(n, "karpenter.sh/initialized"), "true");
  CHECK(!ctrl_has_event(&f, "nc-k", "UnregisteredTaintMissing"));
  json_decref(n);
  json_decref(c);
}

/* Every offering out of stock: InsufficientCapacity deletes the NodeClaim, with an event. */
static void test_insufficient_capacity(void) {
  size_t before = instances();
  json_decref(ctrl_admin(&f, "alibaba", "POST", "/_sim/faults", "{\"kind\":\"nostock\"}"));
  post_claim(new_claim("nc-b", "default"));
  CHECK(ctrl_wait_for(&f, 15, deleting, "nc-b"));
  CHECK(ctrl_has_event(&f, "nc-b", "InsufficientCapacityError"));
  CHECK_INT(
      ctrl_metric(&f, "luaprov_nodeclaims_disrupted_total", LP_LABELS("insufficient_capacity", "default")),
      1);
  CHECK_INT(instances(), before);
  json_decref(ctrl_admin(&f, "alibaba", "DELETE", "/_sim/faults", NULL));
}

/* Launch that keeps failing, and a Node that never registers, both time out (2 s here). */
static void test_timeouts(void) {
  json_decref(ctrl_admin(&f, "alibaba", "POST", "/_sim/faults",
                         "{\"action\":\"RunInstances\",\"code\":\"QuotaExceed.ElasticQuota\"}"));
  double t0 = lp_clock_monotonic();
  post_claim(new_claim("nc-f1", "default"));
  WAIT_CONDITION("nc-f1", "Launched", "Unknown", NULL);
  CHECK(!deleting(&f, "nc-f1"));
  CHECK(ctrl_wait_for(&f, 10, deleting, "nc-f1"));
  CHECK(lp_clock_monotonic() - t0 >= 1.0); /* not before the timeout (conditions keep whole seconds) */
  CHECK_INT(ctrl_metric(&f, "luaprov_nodeclaims_disrupted_total", LP_LABELS("launch_timeout", "default")), 1);
  json_decref(ctrl_admin(&f, "alibaba", "DELETE", "/_sim/faults", NULL));

  post_claim(new_claim("nc-f2", "default"));
  WAIT_CONDITION("nc-f2", "Registered", "Unknown", "NodeNotFound");
  CHECK(!deleting(&f, "nc-f2"));
  CHECK(ctrl_wait_for(&f, 10, deleting, "nc-f2"));
  CHECK_INT(
      ctrl_metric(&f, "luaprov_nodeclaims_disrupted_total", LP_LABELS("registration_timeout", "default")), 1);
  CHECK_INT(ctrl_metric(&f, "luaprov_nodeclaims_disrupted_total", LP_LABELS("launch_timeout", "default")), 1);
}

/* The manager keeps this list for as long as it runs. */
static const lp_controller_def *const only_lifecycle[] = {&lp_nodeclaim_lifecycle_controller, NULL};

static void start(const lp_ctrl_settings *settings) {
  ctrl_fixture_start(&f, only_lifecycle, settings);
  /* frozen: no instance runs, so no simulated kubelet registers a Node unless a test advances time */
  json_decref(ctrl_admin(&f, "alibaba", "POST", "/_sim/clock", "{\"speed\": 0}"));
  ctrl_fixture_apply_defaults(&f);
  set_nodeclass_status("default", 1);
}

int main(void) {
  start(NULL);
  RUN(test_launch_register_initialize);
  RUN(test_lost_status_write);
  RUN(test_create_error);
  RUN(test_create_error_reason_field);
  RUN(test_nodeclass_not_ready);
  RUN(test_simulated_kubelet);
  RUN(test_insufficient_capacity); /* last: the provider remembers the sold-out offerings */
  ctrl_fixture_stop(&f);

  start(&(lp_ctrl_settings){.launch_timeout_s = 2, .registration_timeout_s = 2});
  RUN(test_timeouts);
  ctrl_fixture_stop(&f);
  return check_summary();
}

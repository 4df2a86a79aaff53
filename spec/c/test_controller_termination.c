/* The termination controller (engine/controller/termination.c) alone in the manager, against the
 * Kubernetes and Alibaba simulators over real HTTP. Each case launches a real simulated instance
 * through the CloudProvider, persists its NodeClaim (with the termination finalizer and its status) and
 * a Node with its providerID, as the lifecycle controller would have, puts pods on the Node, deletes
 * something and watches the finalization: cordon, drain (evictions, PodDisruptionBudgets, the grace
 * period), instance deletion, Node and NodeClaim gone.
 *
 * Simulated time is never advanced here: the Kubernetes simulator stamps deletionTimestamp with it and
 * the controller compares the deadline with the wall clock, so the two must agree. Instances are made
 * Running through the simulator's admin path instead of waiting for them to boot. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract/shapes.h"
#include "controller_fixture.h"

#define FINALIZER "karpenter.sh/termination"

static ctrl_fixture fx;
static json_t *nodeclass; /* the ECSNodeClass "default", resolved against the simulated account */

/* ---- the cluster a case starts from -------------------------------------------------------- */

static int synced(ctrl_fixture *f, const void *ud) {
  (void)ud;
  return lp_controllers_active(f->manager);
}

static void start_with(double drain_requeue_s) {
  static const lp_controller_def *const only[] = {&lp_termination_controller, NULL};
  lp_ctrl_settings settings = {.drain_requeue_s = drain_requeue_s, .terminate_requeue_s = 0.3};
  ctrl_fixture_start(&fx, only, &settings);
  nodeclass = mapping_resolved_nodeclass(fx.scripts, fx.sim);
  CHECK(ctrl_wait_for(&fx, 10, synced, NULL));
}

static void start(void) {
  start_with(0.3);
}

static void stop(void) {
  json_decref(nodeclass);
  ctrl_fixture_stop(&fx);
}

/* A NodeClaim named name persisted with the finalizer; with launch, its instance is launched first
 * (Running) and its status carries the providerID, which is returned (caller frees), else NULL. */
static char *nodeclaim(const char *name, const char *grace, int launch) {
  json_t *claim =
      json_pack("{s:s, s:s, s:{s:s, s:{s:s}, s:[s]}, s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:[s]}]}}",
                "apiVersion", "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name", name, "labels",
                "karpenter.sh/nodepool", "default", "finalizers", FINALIZER, "spec", "nodeClassRef", "group",
                "karpenter.alibabacloud.com", "kind", "ECSNodeClass", "name", "default", "requirements",
                "key", LP_LABEL_CAPACITY_TYPE, "operator", "In", "values", "on-demand");
  if (grace)
    json_object_set_new(json_object_get(claim, "spec"), "terminationGracePeriod", json_string(grace));
  json_t *launched = NULL;
  if (launch) {
    json_object_set_new(json_object_get(claim, "metadata"), "uid", json_string(name));
    lp_cp_outcome o = {0};
    lp_cp_create(fx.cloud, claim, nodeclass, lp_cp_outcome_store, &o);
    lp_cp_outcome_wait(&fx.loop, &o);
    if (o.error) {
      fprintf(stderr, "launch %s: %s\n", name, o.error->message);
      abort(); /* nothing below means anything without an instance */
    }
    launched = o.value;
    json_object_del(json_object_get(claim, "metadata"), "uid");
    json_object_set(json_object_get(claim, "metadata"), "labels",
                    json_object_get(json_object_get(launched, "metadata"), "labels"));
  }
  CHECK_INT(ctrl_kube_pack(&fx, "POST", "/apis/karpenter.sh/v1/nodeclaims", "O", claim), 201);
  json_decref(claim);
  if (!launched) return NULL;

  char path[256];
  json_t *status = json_object_get(launched, "status");
  const char *launched_pid = json_string_value(json_object_get(status, "providerID"));
  if (!launched_pid) abort();
  char *pid = strdup(launched_pid);
  json_object_set_new(status, "conditions",
                      json_pack("[{s:s, s:s, s:s, s:s}]", "type", "Launched", "status", "True", "reason",
                                "Launched", "lastTransitionTime", "2026-01-01T00:00:00Z"));
  snprintf(path, sizeof path, "/apis/karpenter.sh/v1/nodeclaims/%s/status", name);
  CHECK_INT(ctrl_kube_pack(&fx, "PATCH", path, "{s:O}", "status", status), 200);
  json_decref(launched);
  /* ECS releases only booted instances: skip the boot instead of moving simulated time */
  snprintf(path, sizeof path, "/_sim/instances/%s", strchr(pid, '.') + 1);
  json_decref(ctrl_admin(&fx, "alibaba", "POST", path, "{\"status\":\"Running\"}"));
  return pid;
}

/* A Node named name with provider_id and the finalizer: one the simulated kubelet does not know. */
static void node(const char *name, const char *provider_id) {
  CHECK_INT(ctrl_kube_pack(&fx, "POST", "/api/v1/nodes", "{s:{s:s, s:{s:s}, s:[s]}, s:{s:s}}", "metadata",
                           "name", name, "labels", "karpenter.sh/nodepool", "default", "finalizers",
                           FINALIZER, "spec", "providerID", provider_id),
            201);
}

/* The Node the simulated kubelet registered for provider_id, made registered as the lifecycle
 * controller would (finalizer, registered label, no unregistered taint). Returns its name (static). */
static const char *registered_node(const char *provider_id) {
  static char name[128];
  name[0] = '\0';
  json_t *list = ctrl_get(&fx, "/api/v1/nodes");
  size_t i;
  json_t *n;
  json_array_foreach(json_object_get(list, "items"), i, n) {
    const char *pid = lp_obj_str(n, "spec.providerID");
    if (pid && strcmp(pid, provider_id) == 0) snprintf(name, sizeof name, "%s", lp_obj_name(n));
  }
  json_decref(list);
  if (!name[0]) {
    fprintf(stderr, "no node registered for %s\n", provider_id);
    abort();
  }
  char path[256];
  snprintf(path, sizeof path, "/api/v1/nodes/%s", name);
  CHECK_INT(ctrl_kube_pack(&fx, "PATCH", path, "{s:{s:[s], s:{s:s}}, s:{s:n}}", "metadata", "finalizers",
                           FINALIZER, "labels", "karpenter.sh/registered", "true", "spec", "taints"),
            200);
  return name;
}

/* A pod bound to node_name, with metadata extra merged in (may be NULL), in phase (Running, Ready). */
static void pod(const char *name, const char *node_name, const char *extra_metadata, const char *phase) {
  json_t *meta = extra_metadata ? json_loads(extra_metadata, 0, NULL) : json_object();
  json_object_set_new(meta, "name", json_string(name));
  json_object_set_new(meta, "namespace", json_string("default"));
  CHECK_INT(ctrl_kube_pack(&fx, "POST", "/api/v1/namespaces/default/pods",
                           "{s:s, s:s, s:o, s:{s:s, s:[{s:s, s:s}]}}", "apiVersion", "v1", "kind", "Pod",
                           "metadata", meta, "spec", "nodeName", node_name, "containers", "name", "app",
                           "image", "registry.example/app:1"),
            201);
  char path[256];
  snprintf(path, sizeof path, "/api/v1/namespaces/default/pods/%s/status", name);
  CHECK_INT(ctrl_kube_pack(&fx, "PATCH", path, "{s:{s:s, s:[{s:s, s:s}]}}", "status", "phase", phase,
                           "conditions", "type", "Ready", "status", "True"),
            200);
}

static void delete_claim(const char *name) {
  char path[256];
  snprintf(path, sizeof path, "/apis/karpenter.sh/v1/nodeclaims/%s", name);
  CHECK_INT(ctrl_kube_pack(&fx, "DELETE", path, NULL), 200);
}

static void pdb(const char *name, const char *app, int min_available) {
  CHECK_INT(ctrl_kube_pack(&fx, "POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
                           "{s:s, s:s, s:{s:s}, s:{s:i, s:{s:{s:s}}}}", "apiVersion", "policy/v1", "kind",
                           "PodDisruptionBudget", "metadata", "name", name, "spec", "minAvailable",
                           min_available, "selector", "matchLabels", "app", app),
            201);
}

/* ---- conditions to wait for ---------------------------------------------------------------- */

#define CLAIM_PATH "/apis/karpenter.sh/v1/nodeclaims/"
#define NODE_PATH  "/api/v1/nodes/"
#define POD_PATH   "/api/v1/namespaces/default/pods/"

static int draining(ctrl_fixture *f, const void *name) {
  return ctrl_claim_condition(f, name, "Drained", "Unknown", "Draining");
}

static int evictions_at_least(ctrl_fixture *f, const void *ud) {
  const char *const *result_and_count = ud;
  return ctrl_metric(f, "luaprov_pods_evictions_total", LP_LABELS(result_and_count[0])) >=
         atof(result_and_count[1]);
}

/* The Node is unschedulable and carries karpenter.sh/disrupted:NoSchedule. */
static int cordoned(const char *name) {
  char path[256];
  snprintf(path, sizeof path, NODE_PATH "%s", name);
  json_t *n = ctrl_get(&fx, path);
  int tainted = 0;
  size_t i;
  json_t *t;
  json_array_foreach(json_object_get(json_object_get(n, "spec"), "taints"), i, t) {
    const char *key = json_string_value(json_object_get(t, "key"));
    const char *effect = json_string_value(json_object_get(t, "effect"));
    tainted |=
        key && effect && strcmp(key, "karpenter.sh/disrupted") == 0 && strcmp(effect, "NoSchedule") == 0;
  }
  int ok = tainted && json_is_true(json_object_get(json_object_get(n, "spec"), "unschedulable"));
  json_decref(n);
  return ok;
}

static int exists(const char *path) {
  return ctrl_kube_pack(&fx, "GET", path, NULL) == 200;
}

static int node_gone(ctrl_fixture *f, const void *name) {
  char path[256];
  snprintf(path, sizeof path, NODE_PATH "%s", (const char *)name);
  return ctrl_gone(f, path);
}

/* ---- cases --------------------------------------------------------------------------------- */

/* (a) Deleting a NodeClaim cordons its Node, evicts its pods (a do-not-disrupt one waits), then
 * deletes the instance, the Node and the NodeClaim. */
static void test_plain_termination(void) {
  start();
  char *pid = nodeclaim("nc-a", NULL, 1);
  char node_name[128];
  snprintf(node_name, sizeof node_name, "%s", registered_node(pid));
  pod("a-1", node_name, NULL, "Running");
  pod("a-2", node_name, NULL, "Running");
  pod("a-keep", node_name, "{\"annotations\":{\"karpenter.sh/do-not-disrupt\":\"true\"}}", "Running");
  long long deletes = ctrl_alibaba_calls(&fx, "DeleteInstance");
  delete_claim("nc-a");

  CHECK(ctrl_wait_for(&fx, 10, ctrl_gone, POD_PATH "a-1"));
  CHECK(ctrl_wait_for(&fx, 10, ctrl_gone, POD_PATH "a-2"));
  CHECK(ctrl_wait_for(&fx, 10, draining, "nc-a"));
  ctrl_run_for(&fx, 1); /* several drain passes: the do-not-disrupt pod is never evicted */
  CHECK(cordoned(node_name));
  CHECK(exists(POD_PATH "a-keep"));
  CHECK(exists(CLAIM_PATH "nc-a"));
  CHECK(ctrl_instance_exists(&fx, pid));
  CHECK_INT(ctrl_alibaba_calls(&fx, "DeleteInstance"), deletes);
  CHECK_INT(ctrl_metric(&fx, "luaprov_pods_evictions_total", LP_LABELS("evicted")), 2);

  /* its owner moves it: the drain is done, the rest follows */
  CHECK_INT(ctrl_kube_pack(&fx, "DELETE", POD_PATH "a-keep", NULL), 200);
  CHECK(ctrl_wait_for(&fx, 10, ctrl_gone, CLAIM_PATH "nc-a"));
  CHECK(node_gone(&fx, node_name));
  CHECK(!ctrl_instance_exists(&fx, pid));
  CHECK(ctrl_alibaba_calls(&fx, "DeleteInstance") > deletes);
  CHECK_INT(ctrl_metric(&fx, "luaprov_nodes_terminated_total", LP_LABELS("default")), 1);
  CHECK_INT(ctrl_metric(&fx, "luaprov_nodeclaims_terminated_total", LP_LABELS("default")), 1);
  CHECK_INT(ctrl_metric(&fx, "luaprov_nodeclaims_termination_duration_seconds", LP_LABELS("default")), 1);
  CHECK(ctrl_metric(&fx, "luaprov_pods_evictions_total", LP_LABELS("error")) == 0);
  free(pid);
  stop();
}

/* (b) A PodDisruptionBudget that allows no disruption holds the drain (429, the pod stays, the
 * NodeClaim keeps its finalizer, FailedDraining is reported) until it is relaxed. */
static void test_pdb_blocks_until_relaxed(void) {
  start();
  char *pid = nodeclaim("nc-b", NULL, 1);
  char node_name[128];
  snprintf(node_name, sizeof node_name, "%s", registered_node(pid));
  pod("b-1", node_name, "{\"labels\":{\"app\":\"b\"}}", "Running");
  pdb("pdb-b", "b", 1);
  delete_claim("nc-b");

  CHECK(ctrl_wait_for(&fx, 10, evictions_at_least, (const char *const[]){"blocked", "2"}));
  CHECK(exists(POD_PATH "b-1"));
  CHECK(exists(CLAIM_PATH "nc-b"));
  CHECK(ctrl_claim_condition(&fx, "nc-b", "Drained", "Unknown", "Draining"));
  CHECK(cordoned(node_name));
  CHECK(ctrl_has_event(&fx, "nc-b", "FailedDraining"));
  CHECK(ctrl_instance_exists(&fx, pid));
  CHECK_INT(ctrl_metric(&fx, "luaprov_pods_evictions_total", LP_LABELS("evicted")), 0);

  CHECK_INT(ctrl_kube_pack(&fx, "PATCH", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/pdb-b",
                           "{s:{s:i}}", "spec", "minAvailable", 0),
            200);
  CHECK(ctrl_wait_for(&fx, 10, ctrl_gone, CLAIM_PATH "nc-b"));
  CHECK(ctrl_gone(&fx, POD_PATH "b-1"));
  CHECK(node_gone(&fx, node_name));
  CHECK(!ctrl_instance_exists(&fx, pid));
  CHECK_INT(ctrl_metric(&fx, "luaprov_pods_evictions_total", LP_LABELS("evicted")), 1);
  free(pid);
  stop();
}

/* (c) With terminationGracePeriod, the deadline is stamped once; past it the pod a PDB protects is
 * deleted anyway and termination completes. */
static void test_grace_period_forces_drain(void) {
  start();
  char *pid = nodeclaim("nc-c", "3s", 1);
  pod("c-1", registered_node(pid), "{\"labels\":{\"app\":\"c\"}}", "Running");
  pdb("pdb-c", "c", 1);
  delete_claim("nc-c");

  CHECK(ctrl_wait_for(&fx, 10, evictions_at_least, (const char *const[]){"blocked", "1"}));
  json_t *claim = ctrl_get(&fx, CLAIM_PATH "nc-c");
  double deleted = lp_rfc3339_parse(lp_obj_str(claim, "metadata.deletionTimestamp"));
  const char *stamp =
      json_string_value(json_object_get(json_object_get(json_object_get(claim, "metadata"), "annotations"),
                                        "karpenter.sh/nodeclaim-termination-timestamp"));
  CHECK(stamp != NULL);
  CHECK(stamp && lp_rfc3339_parse(stamp) == deleted + 3);
  json_decref(claim);
  CHECK(exists(POD_PATH "c-1")); /* the deadline is at least 2 s away still */
  CHECK(ctrl_has_event(&fx, "nc-c", "TerminationGracePeriodExpiring"));

  CHECK(ctrl_wait_for(&fx, 10, ctrl_gone, CLAIM_PATH "nc-c"));
  CHECK(ctrl_gone(&fx, POD_PATH "c-1"));
  CHECK(!ctrl_instance_exists(&fx, pid));
  CHECK_INT(ctrl_metric(&fx, "luaprov_pods_evictions_total", LP_LABELS("deleted")), 1);
  CHECK_INT(ctrl_metric(&fx, "luaprov_pods_evictions_total", LP_LABELS("evicted")), 0);
  free(pid);
  stop();
}

/* (d) A NodeClaim that never launched is finalized without a call to the cloud. */
static void test_never_launched(void) {
  start();
  nodeclaim("nc-d", NULL, 0);
  json_t *state = ctrl_alibaba_state(&fx);
  long long calls = json_integer_value(json_object_get(state, "total_calls"));
  json_decref(state);
  delete_claim("nc-d");
  CHECK(ctrl_wait_for(&fx, 10, ctrl_gone, CLAIM_PATH "nc-d"));
  state = ctrl_alibaba_state(&fx);
  CHECK_INT(json_integer_value(json_object_get(state, "total_calls")), calls);
  CHECK(json_object_get(json_object_get(state, "calls"), "DeleteInstance") == NULL);
  json_decref(state);
  CHECK_INT(ctrl_metric(&fx, "luaprov_nodeclaims_terminated_total", LP_LABELS("default")), 1);
  CHECK_INT(ctrl_metric(&fx, "luaprov_nodes_terminated_total", LP_LABELS("default")), 0);
  stop();
}

/* (e) DaemonSet pods, mirror pods and finished pods are not evicted, and do not hold the drain. */
static void test_pods_left_alone(void) {
  start();
  char *pid = nodeclaim("nc-e", NULL, 1);
  char node_name[128];
  snprintf(node_name, sizeof node_name, "%s", registered_node(pid));
  pod("e-app", node_name, NULL, "Running");
  pod("e-ds", node_name,
      "{\"ownerReferences\":[{\"apiVersion\":\"apps/v1\",\"kind\":\"DaemonSet\",\"name\":\"agent\","
      "\"uid\":\"ds-1\",\"controller\":true}]}",
      "Running");
  pod("e-mirror", node_name, "{\"annotations\":{\"kubernetes.io/config.mirror\":\"abc\"}}", "Running");
  pod("e-done", node_name, NULL, "Succeeded");
  delete_claim("nc-e");
  CHECK(ctrl_wait_for(&fx, 10, ctrl_gone, CLAIM_PATH "nc-e"));
  CHECK(ctrl_gone(&fx, POD_PATH "e-app"));
  CHECK(exists(POD_PATH "e-ds"));
  CHECK(exists(POD_PATH "e-mirror"));
  CHECK(exists(POD_PATH "e-done"));
  CHECK_INT(ctrl_metric(&fx, "luaprov_pods_evictions_total", LP_LABELS("evicted")), 1);
  CHECK(node_gone(&fx, node_name));
  CHECK(!ctrl_instance_exists(&fx, pid));
  free(pid);
  stop();
}

static int reconciled_at_least(ctrl_fixture *f, const void *ud) {
  return ctrl_metric(f, "luaprov_controller_reconciles_total", LP_LABELS("termination", "success")) >=
         *(const double *)ud;
}

static int reconcile_failed(ctrl_fixture *f, const void *ud) {
  (void)ud;
  return ctrl_metric(f, "luaprov_controller_reconciles_total", LP_LABELS("termination", "error")) >= 1;
}

/* (f) DeleteInstance failing: the mapping retries within a call, the controller across reconciles; the
 * NodeClaim stays (drained, Node cordoned) until the instance is released. */
static void test_delete_instance_retried(void) {
  start();
  char *pid = nodeclaim("nc-f", NULL, 1);
  char node_name[128];
  snprintf(node_name, sizeof node_name, "%s", registered_node(pid));
  pod("f-1", node_name, NULL, "Running");
  /* five 5xx: more than the mapping's four attempts, so one reconcile fails as a whole */
  json_decref(ctrl_admin(&fx, "alibaba", "POST", "/_sim/faults",
                         "{\"action\":\"DeleteInstance\",\"kind\":\"5xx\",\"count\":5}"));
  delete_claim("nc-f");
  CHECK(ctrl_wait_for(&fx, 15, reconcile_failed, NULL));
  CHECK(ctrl_claim_condition(&fx, "nc-f", "Drained", "True", NULL));
  CHECK(cordoned(node_name));
  CHECK(ctrl_gone(&fx, POD_PATH "f-1"));
  CHECK(ctrl_wait_for(&fx, 15, ctrl_gone, CLAIM_PATH "nc-f"));
  CHECK(node_gone(&fx, node_name));
  CHECK(!ctrl_instance_exists(&fx, pid));
  CHECK(ctrl_alibaba_calls(&fx, "DeleteInstance") >= 6);
  json_decref(ctrl_admin(&fx, "alibaba", "DELETE", "/_sim/faults", NULL));

  /* throttling is retried the same way */
  char *pid2 = nodeclaim("nc-f2", NULL, 1);
  registered_node(pid2);
  json_decref(ctrl_admin(&fx, "alibaba", "POST", "/_sim/faults",
                         "{\"action\":\"DeleteInstance\",\"kind\":\"throttle\",\"count\":2}"));
  delete_claim("nc-f2");
  CHECK(ctrl_wait_for(&fx, 15, ctrl_gone, CLAIM_PATH "nc-f2"));
  CHECK(!ctrl_instance_exists(&fx, pid2));
  json_decref(ctrl_admin(&fx, "alibaba", "DELETE", "/_sim/faults", NULL));
  free(pid);
  free(pid2);
  stop();
}

/* (g) A user deletes the Node: its NodeClaim is deleted and finalized, and the Node goes with it. */
static void test_user_deletes_node(void) {
  start();
  char *pid = nodeclaim("nc-g", NULL, 1);
  char node_name[128], path[256];
  snprintf(node_name, sizeof node_name, "%s", registered_node(pid));
  pod("g-1", node_name, NULL, "Running");
  snprintf(path, sizeof path, NODE_PATH "%s", node_name);
  CHECK_INT(ctrl_kube_pack(&fx, "DELETE", path, NULL), 200);
  CHECK(ctrl_wait_for(&fx, 10, ctrl_gone, CLAIM_PATH "nc-g"));
  CHECK(node_gone(&fx, node_name));
  CHECK(ctrl_gone(&fx, POD_PATH "g-1"));
  CHECK(!ctrl_instance_exists(&fx, pid));
  CHECK_INT(ctrl_metric(&fx, "luaprov_nodeclaims_terminated_total", LP_LABELS("default")), 1);
  CHECK_INT(ctrl_metric(&fx, "luaprov_nodes_terminated_total", LP_LABELS("default")), 1);
  free(pid);

  /* a deleting Node with the finalizer and no NodeClaim at all: only the finalizer is removed */
  node("node-orphan", "cn-hangzhou.i-nobody");
  CHECK_INT(ctrl_kube_pack(&fx, "DELETE", NODE_PATH "node-orphan", NULL), 200);
  CHECK(ctrl_wait_for(&fx, 10, node_gone, "node-orphan"));
  CHECK_INT(ctrl_metric(&fx, "luaprov_nodes_terminated_total", LP_LABELS("default")), 2);
  stop();
}

/* (h) The NodeClaim is finalized by someone else while the controller's own finalizer removal is on
 * its way: that write meets a real 404, which means the work is done, not that the reconcile failed. */
static void test_claim_gone_meanwhile(void) {
  start();
  nodeclaim("nc-h", NULL, 0);
  /* the controller's first write of a never-launched claim is its finalizer removal: held back 1 s */
  json_decref(ctrl_admin(&fx, "kubernetes", "POST", "/_sim/faults",
                         "{\"verb\":\"patch\",\"resource\":\"nodeclaims\",\"kind\":\"slow\","
                         "\"seconds\":1,\"count\":1}"));
  delete_claim("nc-h");
  CHECK(ctrl_wait_for(&fx, 10, ctrl_kube_faults_used, NULL));
  CHECK_INT(ctrl_kube_pack(&fx, "PATCH", CLAIM_PATH "nc-h", "{s:{s:[]}}", "metadata", "finalizers"), 200);
  CHECK(ctrl_gone(&fx, CLAIM_PATH "nc-h"));
  const char *const *done = LP_LABELS("termination", "success");
  double before = ctrl_metric(&fx, "luaprov_controller_reconciles_total", done);
  /* the held-back patch answers 404, then the deletion's watch event reconciles the key once more */
  CHECK(ctrl_wait_for(&fx, 10, reconciled_at_least, (const double[]){before + 2}));
  CHECK_INT(ctrl_metric(&fx, "luaprov_controller_reconciles_total", LP_LABELS("termination", "error")), 0);
  CHECK_INT(ctrl_metric(&fx, "luaprov_nodeclaims_terminated_total", LP_LABELS("default")), 0);
  stop();
}

/* ---- eviction backoff, on the controllers' clock ------------------------------------------------ */

static double fake_now = 1000; /* the controllers' monotonic clock in test_eviction_backoff */

static double fake_clock(void *ud) {
  (void)ud;
  return fake_now;
}

/* How many evictions the Kubernetes simulator has received: its only fault rule, a 1 ms pause on
 * every create of pods (an eviction is a create of pods/<name>/eviction), counts them as it fires. */
static long long evictions_received(void) {
  return ctrl_kube_fault_fired(&fx);
}

typedef struct pass_wait {
  const char *label; /* the pod's touch label the cache must show */
  double passes;     /* drain passes ended before the touch */
} pass_wait;

static int pod_cached(ctrl_fixture *f, const void *key) {
  return lp_env_get(lp_controllers_env(f->manager), LP_KIND_POD, key) != NULL;
}

static int pod_not_cached(ctrl_fixture *f, const void *key) {
  return !pod_cached(f, key);
}

/* A drain pass ended since the touch, and the cache shows the touched pod (or none: evicted). */
static int drain_passed(ctrl_fixture *f, const void *ud) {
  const pass_wait *w = ud;
  const json_t *pod = lp_env_get(lp_controllers_env(f->manager), LP_KIND_POD, "default/i-1");
  const char *seen = lp_obj_label(pod, "touch");
  return (!pod || (seen && strcmp(seen, w->label) == 0)) &&
         ctrl_metric(f, "luaprov_controller_reconciles_total", LP_LABELS("termination", "requeue")) >
             w->passes;
}

/* Moves the controllers' clock to second t of the drain and has one pass run at that time: a change of
 * the pod wakes the NodeClaim (as the kubelet's pod updates do), whatever its backoff. */
static void drain_at(int t) {
  fake_now = 1000 + t;
  char label[16];
  snprintf(label, sizeof label, "%d", t);
  pass_wait w = {
      label, ctrl_metric(&fx, "luaprov_controller_reconciles_total", LP_LABELS("termination", "requeue"))};
  CHECK_INT(
      ctrl_kube_pack(&fx, "PATCH", POD_PATH "i-1", "{s:{s:{s:s}}}", "metadata", "labels", "touch", label),
      200);
  CHECK(ctrl_wait_for(&fx, 10, drain_passed, &w));
}

/* (i) A PodDisruptionBudget that keeps refusing: with a drain pass every second, the pod's evictions
 * come 1, 2, 4, 8, 16 and then 30 s apart, 7 in 64 s instead of 65; a new pod of that name starts over;
 * once the budget allows it the pod is evicted at its next try. */
static void test_eviction_backoff(void) {
  start_with(1);
  lp_env_set_clock(lp_controllers_env(fx.manager), fake_clock, NULL);
  char *pid = nodeclaim("nc-i", NULL, 1);
  char node_name[128];
  snprintf(node_name, sizeof node_name, "%s", registered_node(pid));
  pod("i-1", node_name, "{\"labels\":{\"app\":\"i\"}}", "Running");
  pdb("pdb-i", "i", 1);
  json_decref(ctrl_admin(&fx, "kubernetes", "POST", "/_sim/faults",
                         "{\"verb\":\"create\",\"resource\":\"pods\",\"kind\":\"slow\",\"seconds\":0.001}"));
  delete_claim("nc-i");
  CHECK(ctrl_wait_for(&fx, 10, evictions_at_least, (const char *const[]){"blocked", "1"}));
  CHECK_INT(evictions_received(), 1);

  char tries[128] = "";
  long long last = 1;
  for (int t = 1; t <= 64; t++) {
    drain_at(t);
    long long n = evictions_received();
    if (n != last)
      snprintf(tries + strlen(tries), sizeof tries - strlen(tries), "%s%d", *tries ? " " : "", t);
    last = n;
  }
  CHECK_STR(tries, "1 3 7 15 31 61");
  CHECK_INT(last, 7);
  CHECK(exists(POD_PATH "i-1"));

  /* another pod of the same name replaces it (the old one's next try would be at 91), running at once
   * so the budget protects it: it starts over, tried on its creation, then 1 s and 2 s later. A pod the
   * drain must wait for holds the node while i-1 is swapped: a pass between the delete and the create
   * would otherwise find the node empty and finish the termination. */
  pod("i-hold", node_name, "{\"annotations\":{\"karpenter.sh/do-not-disrupt\":\"true\"}}", "Running");
  CHECK(ctrl_wait_for(&fx, 10, pod_cached, "default/i-hold"));
  CHECK_INT(ctrl_kube_pack(&fx, "DELETE", POD_PATH "i-1", NULL), 200);
  double blocked = ctrl_metric(&fx, "luaprov_pods_evictions_total", LP_LABELS("blocked"));
  CHECK_INT(ctrl_kube_pack(&fx, "POST", "/api/v1/namespaces/default/pods",
                           "{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:s, s:[{s:s, s:s}]}, s:{s:s, s:[{s:s, s:s}]}}",
                           "apiVersion", "v1", "kind", "Pod", "metadata", "name", "i-1", "labels", "app", "i",
                           "spec", "nodeName", node_name, "containers", "name", "app", "image",
                           "registry.example/app:1", "status", "phase", "Running", "conditions", "type",
                           "Ready", "status", "True"),
            201);
  char count[32];
  snprintf(count, sizeof count, "%g", blocked + 1);
  CHECK(ctrl_wait_for(&fx, 10, evictions_at_least, (const char *const[]){"blocked", count}));
  CHECK_INT(ctrl_kube_pack(&fx, "DELETE", POD_PATH "i-hold", NULL), 200);
  CHECK(ctrl_wait_for(&fx, 10, pod_not_cached, "default/i-hold"));
  long long before = evictions_received();
  for (int t = 65; t <= 68; t++) drain_at(t);
  CHECK_INT(evictions_received() - before, 2); /* at 65 and 67; the next is due at 71 */

  /* the budget allows it now; the pod goes at its next try, and termination goes on */
  CHECK_INT(ctrl_kube_pack(&fx, "PATCH", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/pdb-i",
                           "{s:{s:i}}", "spec", "minAvailable", 0),
            200);
  for (int t = 69; t <= 70; t++) drain_at(t);
  CHECK(exists(POD_PATH "i-1"));
  drain_at(71);
  CHECK(ctrl_wait_for(&fx, 10, ctrl_gone, CLAIM_PATH "nc-i"));
  CHECK_INT(ctrl_metric(&fx, "luaprov_pods_evictions_total", LP_LABELS("evicted")), 1);
  CHECK_INT(evictions_received() - before, 3);
  free(pid);
  stop();
}

int main(void) {
  RUN(test_plain_termination);
  RUN(test_pdb_blocks_until_relaxed);
  RUN(test_grace_period_forces_drain);
  RUN(test_never_launched);
  RUN(test_pods_left_alone);
  RUN(test_delete_instance_retried);
  RUN(test_user_deletes_node);
  RUN(test_claim_gone_meanwhile);
  RUN(test_eviction_backoff);
  return check_summary();
}

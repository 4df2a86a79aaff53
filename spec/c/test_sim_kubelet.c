/* The simulated kubelet (engine/sim/kubelet.h) posting to another API server. Two in-process
 * simulators on one loop: A runs the clouds (an instance is launched there through the Alibaba
 * mapping, whose user data runs the attach command, or not: then it never joins), B's Kubernetes API
 * stands for the real API server the kubelet registers Nodes in. The kubelet's clock is the test's,
 * so Lease renewals and the wait before a vanished instance's Node is deleted are stepped, not slept. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "log_capture.h"
#include "contract/cloudprovider.h"
#include "controller/controller.h"
#include "core/cache.h"
#include "core/clock.h"
#include "core/log.h"
#include "kube/client.h"
#include "kube/config.h"
#include "mapping_fixture.h"
#include "sim/kubelet.h"
#include "sim_admin.h"

static uv_loop_t loop;
static lp_sim *clouds, *api;
static lp_http_client *http;
static lp_script_host *scripts;
static lp_kube_config *api_config;
static lp_kube_client *kube;
static double now = 1.8e9; /* the kubelet's wall clock */

static double test_clock(void *ud) {
  (void)ud;
  return now;
}

static void run_for(double seconds) {
  uv_timer_t t;
  uv_timer_init(&loop, &t);
  double deadline = lp_clock_monotonic() + seconds;
  while (lp_clock_monotonic() < deadline) {
    uv_timer_start(&t, (uv_timer_cb)(void (*)(void))uv_timer_stop, 10, 0);
    uv_run(&loop, UV_RUN_ONCE);
  }
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);
}

/* A request to B, the API server the kubelet posts to. */
static json_t *api_request(const char *method, const char *path, const char *body, long *status) {
  const char *ct = strcmp(method, "PATCH") == 0 ? "application/merge-patch+json" : "application/json";
  return sim_request(&loop, http, api, "kubernetes", method, path, ct, body, status, NULL);
}

static json_t *api_get(const char *path) {
  long status = 0;
  json_t *v = api_request("GET", path, NULL, &status);
  if (status == 200) return v;
  json_decref(v);
  return NULL;
}

/* Runs the loop until GET path on B answers with want (200 or 404), for up to 10 s. */
static int wait_status(const char *path, long want) {
  for (int i = 0; i < 500; i++) {
    long status = 0;
    json_decref(api_request("GET", path, NULL, &status));
    if (status == want) return 1;
    run_for(0.02);
  }
  return 0;
}

/* The status of node's Ready condition, or NULL. */
static const char *ready_status(const json_t *node) {
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(json_object_get(node, "status"), "conditions"), i, c) {
    if (strcmp(json_string_value(json_object_get(c, "type")) ?: "", "Ready") == 0)
      return json_string_value(json_object_get(c, "status"));
  }
  return NULL;
}

/* Runs the loop until the Node at path on B has the Ready status want, for up to 10 s. */
static int wait_ready(const char *path, const char *want) {
  for (int i = 0; i < 500; i++) {
    json_t *node = api_get(path);
    int ok = strcmp(ready_status(node) ?: "", want) == 0;
    json_decref(node);
    if (ok) return 1;
    run_for(0.02);
  }
  return 0;
}

/* An instance launched in A through the mapping, Running once A's clock has moved on. */
static char *launch_instance_as(const char *claim_name, const char *capacity_type) {
  json_t *nodeclass = mapping_resolved_nodeclass(scripts, clouds);
  lp_cloudprovider *cp =
      lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = &loop,
                                                      .scripts = scripts,
                                                      .cluster_id = "luaprov-sim",
                                                      .endpoint = lp_sim_url(clouds, "alibaba"),
                                                      .refresh_interval_s = -1});
  json_t *claim = json_loads(
      "{\"apiVersion\":\"karpenter.sh/v1\",\"kind\":\"NodeClaim\",\"metadata\":{\"name\":\"\","
      "\"uid\":\"\",\"labels\":{\"karpenter.sh/nodepool\":\"default\"}},\"spec\":{\"nodeClassRef\":"
      "{\"group\":\"karpenter.alibabacloud.com\",\"kind\":\"ECSNodeClass\",\"name\":\"default\"},"
      "\"requirements\":[{\"key\":\"karpenter.sh/"
      "capacity-type\",\"operator\":\"In\",\"values\":[\"on-demand\"]}],"
      "\"resources\":{\"requests\":{\"cpu\":\"1\",\"memory\":\"1Gi\"}}}}",
      0, NULL);
  json_array_set_new(json_object_get(json_array_get(lp_obj_get(claim, "spec.requirements"), 0), "values"), 0,
                     json_string(capacity_type));
  json_t *md = json_object_get(claim, "metadata");
  json_object_set_new(md, "name", json_string(claim_name));
  json_object_set_new(md, "uid", json_sprintf("uid-%s", claim_name));
  lp_cp_outcome o = {0};
  lp_cp_create(cp, claim, nodeclass, lp_cp_outcome_store, &o);
  lp_cp_outcome_wait(&loop, &o);
  const char *provider_id = lp_obj_str(o.value, "status.providerID");
  char *id = provider_id && strchr(provider_id, '.') ? strdup(strchr(provider_id, '.') + 1) : NULL;
  if (o.error) fprintf(stderr, "launch: %s\n", o.error->message);
  json_decref(o.value);
  lp_error_free(o.error);
  json_decref(claim);
  json_decref(nodeclass);
  lp_cloudprovider_free(cp);
  json_decref(sim_admin(&loop, http, clouds, "alibaba", "POST", "/_sim/advance", "{\"seconds\": 30}"));
  return id;
}

static char *launch_instance(const char *claim_name) {
  return launch_instance_as(claim_name, "on-demand");
}

static lp_sim_kubelet *start_kubelet_at(const char *simulator_url) {
  lp_error *err = NULL;
  lp_sim_kubelet *k = lp_sim_kubelet_start(&loop,
                                           &(lp_sim_kubelet_options){.simulator_url = simulator_url,
                                                                     .kube = kube,
                                                                     .tick_seconds = 0.02,
                                                                     .gone_after_seconds = 30,
                                                                     .clock = test_clock},
                                           &err);
  if (!k) fprintf(stderr, "kubelet: %s\n", err->message);
  return k;
}

static lp_sim_kubelet *start_kubelet(void) {
  return start_kubelet_at(lp_sim_url(clouds, "kubernetes"));
}

static int stopped;
static void on_stopped(void *ud) {
  (void)ud;
  stopped = 1;
}
static void stop_kubelet(lp_sim_kubelet *k) {
  stopped = 0;
  lp_sim_kubelet_stop(k, on_stopped, NULL);
  while (!stopped) uv_run(&loop, UV_RUN_ONCE);
}

int main(void) {
  lp_log_configure(getenv("LUAPROV_TEST_LOG") ? LP_LOG_DEBUG : LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "LTAI5simulatoraccess", 1);
  setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "simulator-secret-do-not-use", 1);
  if (sim_fixture_start(&loop, "alibaba", &clouds, &http, &scripts) != 0) return 1;
  lp_error *err = NULL;
  api = lp_sim_start(&loop, &(lp_sim_options){.scripts_dir = LUAPROV_SOURCE_DIR}, &err);
  if (!api) return 1;
  api_config = lp_kube_config_for_server(lp_sim_url(api, "kubernetes"), "default");
  kube = lp_kube_client_new(&loop, api_config, NULL, &err);
  /* B is a bare API server: its own kubelet and binder would run the pods this test leaves to ours */
  json_decref(sim_admin(&loop, http, api, "kubernetes", "POST", "/_sim/config", "{\"actors\": false}"));

  char *instance = launch_instance("default-k1");
  CHECK(instance != NULL);
  if (!instance) return check_summary();
  char provider_id[128], node_path[160], lease_path[200];
  snprintf(provider_id, sizeof provider_id, "cn-hangzhou.%s", instance);

  /* ---- registration: the Node the launch asked for, Ready, with a Lease it owns ---- */
  lp_sim_kubelet *k = start_kubelet();
  json_t *nodes = NULL;
  for (int i = 0; i < 500 && json_array_size(json_object_get(nodes, "items")) == 0; i++) {
    json_decref(nodes);
    run_for(0.02);
    nodes = api_get("/api/v1/nodes");
  }
  json_t *node = json_array_get(json_object_get(nodes, "items"), 0);
  CHECK_STR(lp_obj_str(node, "spec.providerID"), provider_id);
  CHECK_STR(ready_status(node), "True");
  CHECK_STR(json_string_value(json_object_get(lp_obj_get(node, "metadata.labels"), "karpenter.sh/nodepool")),
            "default");
  CHECK(json_object_get(json_object_get(json_object_get(node, "status"), "allocatable"), "cpu") != NULL);
  CHECK_STR(json_string_value(json_object_get(json_array_get(lp_obj_get(node, "spec.taints"), 0), "key")),
            "karpenter.sh/unregistered");
  const char *name = lp_obj_str(node, "metadata.name");
  char *node_name = strdup(name ? name : "");
  char *node_uid = strdup(lp_obj_str(node, "metadata.uid") ?: "");
  json_decref(nodes);
  snprintf(node_path, sizeof node_path, "/api/v1/nodes/%s", node_name);
  snprintf(lease_path, sizeof lease_path, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/%s",
           node_name);
  CHECK(wait_status(lease_path, 200));
  json_t *lease = api_get(lease_path);
  CHECK_STR(lp_obj_str(lease, "spec.holderIdentity"), node_name);
  CHECK_STR(json_string_value(
                json_object_get(json_array_get(lp_obj_get(lease, "metadata.ownerReferences"), 0), "uid")),
            node_uid);
  char *renewed = strdup(lp_obj_str(lease, "spec.renewTime") ?: "");
  json_decref(lease);
  CHECK_INT(lp_sim_kubelet_stats_get(k).registered, 1);
  CHECK_INT(lp_sim_kubelet_stats_get(k).live_nodes, 1);

  /* ---- heartbeats: nothing before a quarter of the lease duration, a renewal after ---- */
  size_t renewals = lp_sim_kubelet_stats_get(k).lease_renewals;
  run_for(0.2);
  CHECK_INT(lp_sim_kubelet_stats_get(k).lease_renewals, renewals);
  now += 11;
  for (int i = 0; i < 200 && lp_sim_kubelet_stats_get(k).lease_renewals == renewals; i++) run_for(0.02);
  CHECK_INT(lp_sim_kubelet_stats_get(k).lease_renewals, renewals + 1);
  lease = api_get(lease_path);
  CHECK(strcmp(lp_obj_str(lease, "spec.renewTime") ?: "", renewed) != 0);
  json_decref(lease);

  /* ---- pods: a bound pod runs; a terminating one is removed ---- */
  char pod[512];
  snprintf(pod, sizeof pod,
           "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"web\",\"namespace\":\"default\","
           "\"finalizers\":[\"test/hold\"]},\"spec\":{\"nodeName\":\"%s\",\"containers\":[{\"name\":\"app\","
           "\"image\":\"nginx\"}]}}",
           node_name);
  long status = 0;
  json_decref(api_request("POST", "/api/v1/namespaces/default/pods", pod, &status));
  CHECK_INT(status, 201);
  json_t *running = NULL;
  for (int i = 0; i < 500; i++) {
    running = api_get("/api/v1/namespaces/default/pods/web");
    if (strcmp(lp_obj_str(running, "status.phase") ?: "", "Running") == 0) break;
    json_decref(running);
    running = NULL;
    run_for(0.02);
  }
  CHECK(running != NULL);
  CHECK(lp_obj_str(running, "status.podIP") != NULL);
  CHECK(lp_obj_str(running, "status.hostIP") != NULL);
  CHECK_STR(json_string_value(
                json_object_get(json_array_get(lp_obj_get(running, "status.containerStatuses"), 0), "name")),
            "app");
  json_decref(running);
  CHECK_INT(lp_sim_kubelet_stats_get(k).pods_started, 1);
  json_decref(
      api_request("DELETE", "/api/v1/namespaces/default/pods/web", NULL, &status)); /* finalizer holds it */
  for (int i = 0; i < 200 && lp_sim_kubelet_stats_get(k).pods_removed == 0; i++) run_for(0.02);
  CHECK_INT(lp_sim_kubelet_stats_get(k).pods_removed, 1);
  CHECK_INT(lp_sim_kubelet_stats_get(k).pods_started, 1); /* a terminating pod is not started again */

  /* ---- a restarted kubelet adopts the Node instead of registering it twice ---- */
  stop_kubelet(k);
  k = start_kubelet();
  for (int i = 0; i < 200 && lp_sim_kubelet_stats_get(k).live_nodes == 0; i++) run_for(0.02);
  CHECK_INT(lp_sim_kubelet_stats_get(k).live_nodes, 1);
  CHECK_INT(lp_sim_kubelet_stats_get(k).registered, 0);

  /* ---- the instance stops: NotReady (Unknown); it starts again before the wait is over: Ready ---- */
  char path[160];
  snprintf(path, sizeof path, "/_sim/instances/%s", instance);
  json_decref(sim_admin(&loop, http, clouds, "alibaba", "POST", path, "{\"status\": \"Stopped\"}"));
  CHECK(wait_ready(node_path, "Unknown"));
  json_decref(sim_admin(&loop, http, clouds, "alibaba", "POST", path, "{\"status\": null}"));
  CHECK(wait_ready(node_path, "True"));

  /* ---- the instance goes: NotReady (Unknown) at once, deleted gone_after_seconds later ---- */
  json_decref(sim_admin(&loop, http, clouds, "alibaba", "DELETE", path, NULL));
  CHECK(wait_ready(node_path, "Unknown"));
  run_for(0.2);
  CHECK(wait_status(node_path, 200)); /* not before the wait */
  now += 31;
  CHECK(wait_status(node_path, 404));
  CHECK_INT(lp_sim_kubelet_stats_get(k).nodes_removed, 1);
  CHECK_INT(lp_sim_kubelet_stats_get(k).live_nodes, 0);
  stop_kubelet(k);

  /* ---- a Node deleted while its instance runs stays deleted ---- */
  free(instance);
  instance = launch_instance("default-k2");
  k = start_kubelet();
  for (int i = 0; i < 500 && lp_sim_kubelet_stats_get(k).live_nodes == 0; i++) run_for(0.02);
  CHECK_INT(lp_sim_kubelet_stats_get(k).registered, 1);
  json_t *list = api_get("/api/v1/nodes");
  const char *second = lp_obj_str(json_array_get(json_object_get(list, "items"), 0), "metadata.name");
  snprintf(node_path, sizeof node_path, "/api/v1/nodes/%s", second ? second : "?");
  json_decref(list);
  json_decref(api_request("DELETE", node_path, NULL, &status));
  CHECK_INT(status, 200);
  for (int i = 0; i < 200 && lp_sim_kubelet_stats_get(k).live_nodes == 1; i++) run_for(0.02);
  run_for(0.2);
  CHECK(wait_status(node_path, 404));
  CHECK_INT(lp_sim_kubelet_stats_get(k).registered, 1);
  stop_kubelet(k);

  /* ---- a spot reclaim with notice: InstanceExpired=True is posted on the Node ---- */
  free(instance);
  instance = launch_instance_as("default-k3", "spot");
  CHECK(instance != NULL);
  k = start_kubelet();
  for (int i = 0; i < 500 && lp_sim_kubelet_stats_get(k).live_nodes == 0; i++) run_for(0.02);
  list = api_get("/api/v1/nodes");
  const char *spot = NULL;
  json_t *item;
  size_t idx;
  json_array_foreach(json_object_get(list, "items"), idx, item) {
    if (strstr(lp_obj_str(item, "spec.providerID") ?: "", instance)) spot = lp_obj_name(item);
  }
  snprintf(node_path, sizeof node_path, "/api/v1/nodes/%s", spot ? spot : "?");
  json_decref(list);
  char reclaim[160];
  snprintf(reclaim, sizeof reclaim, "{\"instance_id\": \"%s\", \"notice_seconds\": 300}", instance);
  json_decref(sim_admin(&loop, http, clouds, "alibaba", "POST", "/_sim/reclaim", reclaim));
  int expired = 0;
  for (int i = 0; i < 500 && !expired; i++) {
    json_t *n = api_get(node_path);
    json_t *c;
    json_array_foreach(lp_obj_get(n, "status.conditions"), idx, c) {
      expired |= strcmp(json_string_value(json_object_get(c, "type")) ?: "", "InstanceExpired") == 0 &&
                 strcmp(json_string_value(json_object_get(c, "status")) ?: "", "True") == 0;
    }
    json_decref(n);
    if (!expired) run_for(0.02);
  }
  CHECK(expired);
  CHECK(wait_ready(node_path, "True")); /* still running until the reclaim */
  stop_kubelet(k);

  /* ---- user data without the attach command (a Custom cluster's launch): the instance never joins;
   * A's /_sim/state says why. The Node of an instance launched after it shows the kubelet had both. ---- */
  setenv("LUAPROV_ALIBABA_CLUSTER_TYPE", "Custom", 1);
  char *stray = launch_instance("default-k4");
  unsetenv("LUAPROV_ALIBABA_CLUSTER_TYPE");
  free(instance);
  instance = launch_instance("default-k5");
  CHECK(stray != NULL && instance != NULL);
  k = start_kubelet();
  for (int i = 0; i < 500 && lp_sim_kubelet_stats_get(k).registered == 0; i++) run_for(0.02);
  CHECK_INT(lp_sim_kubelet_stats_get(k).registered, 1);
  list = api_get("/api/v1/nodes");
  int joined = 0, strays = 0;
  json_array_foreach(json_object_get(list, "items"), idx, item) {
    const char *node_provider = lp_obj_str(item, "spec.providerID") ?: "";
    joined += instance && strstr(node_provider, instance) != NULL;
    strays += stray && strstr(node_provider, stray) != NULL;
  }
  json_decref(list);
  CHECK_INT(joined, 1);
  CHECK_INT(strays, 0);
  json_t *state = sim_admin(&loop, http, clouds, "kubernetes", "GET", "/_sim/state", NULL);
  const char *why = NULL;
  json_array_foreach(lp_obj_get(state, "kubelet.nodes"), idx, item) {
    if (stray && strcmp(lp_obj_str(item, "instance_id") ?: "", stray) == 0)
      why = lp_obj_str(item, "not_registered");
  }
  CHECK_STR(why, "the instance has no user data");
  json_decref(state);
  free(stray);
  stop_kubelet(k);

  /* ---- a simulator that cannot answer: said once, not at every tick ---- */
  log_capture_start(LP_LOG_WARN);
  k = start_kubelet_at(lp_sim_url(clouds, "bizfly")); /* no /_sim/kubelet/nodes there */
  run_for(0.3);                                       /* about 15 ticks */
  stop_kubelet(k);
  json_t *lines = log_capture_stop(NULL);
  CHECK(log_capture_line(lines, "the simulator did not describe its nodes", 0) != NULL);
  CHECK(log_capture_line(lines, "the simulator did not describe its nodes", 1) == NULL);
  json_decref(lines);

  free(instance);
  free(node_name);
  free(node_uid);
  free(renewed);
  lp_kube_client_close(kube, NULL, NULL);
  lp_kube_config_free(api_config);
  lp_sim_close(api, NULL, NULL);
  sim_fixture_stop(&loop, clouds, http, scripts);
  lp_cache_registry_clear();
  return check_summary();
}

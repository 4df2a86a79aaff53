/* A fixture for controller tests: the in-process simulators (Kubernetes API, Alibaba), an engine script
 * host with the contract modules, the CloudProvider over the Alibaba mapping, a Kubernetes client to
 * the simulated API, and the controller manager running the controllers a test names — all on one
 * loop, over real HTTP. Helpers run the loop until a condition holds, so tests read like a story:
 *
 *   ctrl_fixture f;
 *   ctrl_fixture_start(&f, (const lp_controller_def *const[]){&lp_nodeclaim_lifecycle_controller, NULL},
 * NULL); ctrl_fixture_apply_defaults(&f);                      // ECSNodeClass "default" (Ready), NodePool
 * "default" json_decref(ctrl_kube(&f, "POST", "/apis/karpenter.sh/v1/nodeclaims", claim_json, NULL));
 *   CHECK(ctrl_wait_for(&f, 10, launched, "nc-1"));
 *   ctrl_fixture_stop(&f);
 *
 * Header-only: each test is its own executable. */
#ifndef LUAPROV_SPEC_CONTROLLER_FIXTURE_H
#define LUAPROV_SPEC_CONTROLLER_FIXTURE_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "contract/cloudprovider.h"
#include "controller/conditions.h"
#include "controller/controller.h"
#include "controller/defs.h"
#include "controller/manager.h"
#include "core/cache.h"
#include "core/clock.h"
#include "core/log.h"
#include "kube/client.h"
#include "kube/config.h"
#include "sim_admin.h"

typedef struct ctrl_fixture {
  uv_loop_t loop;
  lp_sim *sim;
  lp_http_client *http;
  lp_script_host *scripts;
  lp_cloudprovider *cloud;
  lp_kube_config *kube_config;
  lp_kube_client *kube;
  lp_controllers *manager;
  lp_metrics *metrics; /* the manager's own registry, so tests read exact counts */
  char kubeconfig_path[256];
} ctrl_fixture;

/* Starts everything; controllers NULL-terminated (lp_controllers_default for all of them; a test naming
 * only some links only those), settings may be
 * NULL (defaults, but fast GC and timeouts are up to the test). Aborts when something cannot start. */
static inline void ctrl_fixture_start(ctrl_fixture *f, const lp_controller_def *const *controllers,
                                      const lp_ctrl_settings *settings) {
  memset(f, 0, sizeof *f);
  lp_log_configure(getenv("LUAPROV_TEST_LOG") ? LP_LOG_DEBUG : LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "LTAI5simulatoraccess", 1);
  setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "simulator-secret-do-not-use", 1);
  if (sim_fixture_start(&f->loop, "kubernetes", &f->sim, &f->http, &f->scripts) != 0) abort();
  f->cloud = lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = &f->loop,
                                                             .scripts = f->scripts,
                                                             .region = "cn-hangzhou",
                                                             .cluster_id = "luaprov-sim",
                                                             .endpoint = lp_sim_url(f->sim, "alibaba"),
                                                             .refresh_interval_s = -1});
  snprintf(f->kubeconfig_path, sizeof f->kubeconfig_path, "/tmp/luaprov-ctrl-%d.kubeconfig", (int)getpid());
  FILE *out = fopen(f->kubeconfig_path, "w");
  if (!out) abort();
  fprintf(out,
          "current-context: sim\ncontexts:\n- name: sim\n  context: {cluster: sim, user: sim}\n"
          "clusters:\n- name: sim\n  cluster: {server: '%s'}\nusers:\n- name: sim\n  user: {}\n",
          lp_sim_url(f->sim, "kubernetes"));
  fclose(out);
  lp_error *err = NULL;
  f->kube_config = lp_kube_config_load_file(f->kubeconfig_path, &err);
  lp_http_client_options http_opts = {.default_timeout_ms = 5000};
  f->kube = f->kube_config ? lp_kube_client_new(&f->loop, f->kube_config, &http_opts, &err) : NULL;
  if (!f->kube) {
    fprintf(stderr, "kube client: %s\n", err ? err->message : "?");
    abort();
  }
  f->metrics = lp_metrics_new();
  lp_controllers_config cfg = {.loop = &f->loop,
                               .kube = f->kube,
                               .cloud = f->cloud,
                               .metrics = f->metrics,
                               .controllers = controllers};
  if (settings) cfg.settings = *settings;
  f->manager = lp_controllers_start(&cfg, &err);
  if (!f->manager) {
    fprintf(stderr, "manager: %s\n", err ? err->message : "?");
    abort();
  }
}

/* Runs the loop until cond(f, ud) is non-zero or timeout_s passes; returns cond's last value. */
static inline int ctrl_wait_for(ctrl_fixture *f, double timeout_s,
                                int (*cond)(ctrl_fixture *f, const void *ud), const void *ud) {
  double deadline = lp_clock_monotonic() + timeout_s;
  uv_timer_t tick;
  uv_timer_init(&f->loop, &tick);
  int ok = 0;
  while (!(ok = cond(f, ud)) && lp_clock_monotonic() < deadline) {
    uv_timer_start(&tick, (uv_timer_cb)(void (*)(void))uv_timer_stop, 20, 0);
    uv_run(&f->loop, UV_RUN_ONCE);
  }
  uv_close((uv_handle_t *)&tick, NULL);
  uv_run(&f->loop, UV_RUN_NOWAIT);
  return ok;
}

/* Runs the loop for seconds (lets controllers act, or shows they do not). */
static inline int ctrl_never(ctrl_fixture *f, const void *ud) {
  (void)f;
  (void)ud;
  return 0;
}
static inline void ctrl_run_for(ctrl_fixture *f, double seconds) {
  ctrl_wait_for(f, seconds, ctrl_never, NULL);
}

/* A request to the simulated Kubernetes API (path from /api or /apis), body JSON or NULL; content type
 * merge-patch for PATCH. Returns the decoded answer (caller decrefs) and the status in *status. */
static inline json_t *ctrl_kube(ctrl_fixture *f, const char *method, const char *path, const char *body,
                                long *status) {
  char url[512];
  snprintf(url, sizeof url, "%s%s", lp_sim_url(f->sim, "kubernetes"), path);
  lp_http_header ct = {"Content-Type",
                       strcmp(method, "PATCH") == 0 ? "application/merge-patch+json" : "application/json"};
  lp_http_request_opts req = {.method = method,
                              .url = url,
                              .headers = &ct,
                              .nheaders = 1,
                              .body = body,
                              .body_len = body ? strlen(body) : 0};
  sim_admin_reply r = {0};
  lp_http_client_request(f->http, &req, sim_admin_got_reply, &r);
  while (!r.done) uv_run(&f->loop, UV_RUN_ONCE);
  if (status) *status = r.status;
  json_t *v = json_loads(r.body, JSON_DECODE_ANY, NULL);
  free(r.body);
  return v;
}

/* The simulators' admin API: service "alibaba" or "kubernetes". */
static inline json_t *ctrl_admin(ctrl_fixture *f, const char *service, const char *method, const char *path,
                                 const char *body) {
  return sim_admin(&f->loop, f->http, f->sim, service, method, path, body);
}

/* Moves simulated time forward (instances boot, the kubelet registers). */
static inline void ctrl_advance(ctrl_fixture *f, double seconds) {
  char body[64];
  snprintf(body, sizeof body, "{\"seconds\": %g}", seconds);
  json_decref(ctrl_admin(f, "alibaba", "POST", "/_sim/advance", body));
}

/* The ECSNodeClass "default" selecting the simulated account's vSwitches, security groups and image,
 * and the NodePool "default" using it. */
static inline void ctrl_fixture_apply_defaults(ctrl_fixture *f) {
  long status = 0;
  json_decref(
      ctrl_kube(f, "POST", "/apis/karpenter.k8s.alibabacloud/v1alpha1/ecsnodeclasses",
                "{\"apiVersion\":\"karpenter.k8s.alibabacloud/v1alpha1\",\"kind\":\"ECSNodeClass\","
                "\"metadata\":{\"name\":\"default\"},\"spec\":{"
                "\"vSwitchSelectorTerms\":[{\"tags\":{\"karpenter.sh/discovery\":\"luaprov-sim\"}}],"
                "\"securityGroupSelectorTerms\":[{\"tags\":{\"karpenter.sh/discovery\":\"luaprov-sim\"}}],"
                "\"imageSelectorTerms\":[{\"alias\":\"AlibabaCloudLinux3\"}]}}",
                &status));
  if (status != 201) fprintf(stderr, "create ECSNodeClass default: %ld\n", status);
  json_decref(ctrl_kube(f, "POST", "/apis/karpenter.sh/v1/nodepools",
                        "{\"apiVersion\":\"karpenter.sh/v1\",\"kind\":\"NodePool\",\"metadata\":{\"name\":"
                        "\"default\"},\"spec\":{\"template\":{\"spec\":{\"nodeClassRef\":{\"group\":"
                        "\"karpenter.k8s.alibabacloud\",\"kind\":\"ECSNodeClass\",\"name\":\"default\"},"
                        "\"requirements\":[{\"key\":\"karpenter.sh/capacity-type\",\"operator\":\"In\","
                        "\"values\":[\"on-demand\"]}]}}}}",
                        &status));
  if (status != 201) fprintf(stderr, "create NodePool default: %ld\n", status);
}

/* The value of a metric in the manager's registry (0 when never set). */
static inline double ctrl_metric(ctrl_fixture *f, const char *name, const char *const *labels) {
  lp_metric *m = lp_metrics_find(f->metrics, name);
  return m ? lp_metric_value(m, labels) : 0;
}

static inline void ctrl_fixture_stop_done(void *ud) {
  *(int *)ud = 1;
}

/* Stops the manager and everything else, runs the loop dry. */
static inline void ctrl_fixture_stop(ctrl_fixture *f) {
  int stopped = 0;
  lp_controllers_stop(f->manager, ctrl_fixture_stop_done, &stopped);
  while (!stopped) uv_run(&f->loop, UV_RUN_ONCE);
  lp_kube_client_close(f->kube, NULL, NULL);
  lp_cloudprovider_free(f->cloud);
  lp_script_host_close(f->scripts, NULL, NULL);
  lp_http_client_close(f->http, NULL, NULL);
  lp_sim_close(f->sim, NULL, NULL);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  uv_loop_close(&f->loop);
  lp_kube_config_free(f->kube_config);
  lp_metrics_free(f->metrics);
  unlink(f->kubeconfig_path);
  lp_cache_registry_clear();
}

#endif

/* A fixture for controller tests: the in-process simulators (Kubernetes API, Alibaba), an engine script
 * host with the contract modules, the CloudProvider over the Alibaba mapping, a Kubernetes client to
 * the simulated API, and the controller manager running the controllers a test names — all on one
 * loop, over real HTTP. Helpers run the loop until a condition holds, so tests read like a story:
 *
 *   static const lp_controller_def *const only[] = {&lp_nodeclaim_lifecycle_controller, NULL};
 *   ctrl_fixture f;
 *   ctrl_fixture_start(&f, only, NULL);
 *   ctrl_fixture_apply_defaults(&f); // ECSNodeClass "default", NodePool "default"
 *   json_decref(ctrl_kube(&f, "POST", "/apis/karpenter.sh/v1/nodeclaims", claim_json, NULL));
 *   CHECK(ctrl_wait_for(&f, 10, launched, "nc-1"));
 *   ctrl_fixture_stop(&f);
 *
 * The Alibaba mapping's helpers (spec/c/mapping_fixture.h) come with it, e.g.
 * mapping_resolved_nodeclass(f.scripts, f.sim) for the CloudProvider's calls.
 *
 * Header-only: each test is its own executable. */
#ifndef LUAPROV_SPEC_CONTROLLER_FIXTURE_H
#define LUAPROV_SPEC_CONTROLLER_FIXTURE_H

#include <jansson.h>
#include <stdarg.h>
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
#include "mapping_fixture.h"
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
  lp_kube_client *impatient; /* the manager's client after ctrl_restart_impatient, else NULL */
  lp_metrics *metrics;       /* the manager's own registry, so tests read exact counts */
  char kubeconfig_path[256];
} ctrl_fixture;

/* The manager's configuration over the fixture's loop, Kubernetes client, CloudProvider and metrics
 * registry, running controllers (NULL-terminated); the rest (settings, leader election) is the
 * caller's to fill in. */
static inline lp_controllers_config ctrl_manager_config(ctrl_fixture *f,
                                                        const lp_controller_def *const *controllers) {
  return (lp_controllers_config){.loop = &f->loop,
                                 .kube = f->kube,
                                 .cloud = f->cloud,
                                 .metrics = f->metrics,
                                 .controllers = controllers};
}

/* Starts everything; controllers NULL-terminated (lp_controllers_default for all of them; a test naming
 * only some links only those), settings may be NULL (defaults, but fast GC and timeouts are up to the
 * test), scripts_dir the operator's script tree over the source tree's (NULL: none; e.g.
 * LUAPROV_SOURCE_DIR "/spec/fixtures/nodeclass_aliases", a mapping of another descriptor). Aborts when
 * something cannot start. */
static inline void ctrl_fixture_start_tree(ctrl_fixture *f, const lp_controller_def *const *controllers,
                                           const lp_ctrl_settings *settings, const char *scripts_dir) {
  memset(f, 0, sizeof *f);
  lp_log_configure(getenv("LUAPROV_TEST_LOG") ? LP_LOG_DEBUG : LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "LTAI5simulatoraccess", 1);
  setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "simulator-secret-do-not-use", 1);
  if (sim_fixture_start_tree(&f->loop, "kubernetes", &f->sim, &f->http, &f->scripts, scripts_dir) != 0)
    abort();
  f->cloud = lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = &f->loop,
                                                             .scripts = f->scripts,
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
  lp_controllers_config cfg = ctrl_manager_config(f, controllers);
  if (settings) cfg.settings = *settings;
  f->manager = lp_controllers_start(&cfg, &err);
  if (!f->manager) {
    fprintf(stderr, "manager: %s\n", err ? err->message : "?");
    abort();
  }
}

/* ctrl_fixture_start_tree over the source tree's scripts alone (the Alibaba mapping as it ships). */
static inline void ctrl_fixture_start(ctrl_fixture *f, const lp_controller_def *const *controllers,
                                      const lp_ctrl_settings *settings) {
  ctrl_fixture_start_tree(f, controllers, settings, NULL);
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
  const char *content_type =
      strcmp(method, "PATCH") == 0 ? "application/merge-patch+json" : "application/json";
  return sim_request(&f->loop, f->http, f->sim, "kubernetes", method, path, content_type, body, status, NULL);
}

/* ctrl_kube with the body built like json_pack from fmt and what follows (fmt NULL: no body); the
 * answer is dropped. Returns the status. */
static inline long ctrl_kube_pack(ctrl_fixture *f, const char *method, const char *path, const char *fmt,
                                  ...) {
  char *body = NULL;
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    json_t *v = json_vpack_ex(NULL, 0, fmt, ap);
    va_end(ap);
    body = json_dumps(v, JSON_COMPACT);
    json_decref(v);
  }
  long status = 0;
  json_decref(ctrl_kube(f, method, path, body, &status));
  free(body);
  return status;
}

/* GET path from the simulated Kubernetes API: the object (caller decrefs), or NULL unless 200. */
static inline json_t *ctrl_get(ctrl_fixture *f, const char *path) {
  long status = 0;
  json_t *v = ctrl_kube(f, "GET", path, NULL, &status);
  if (status == 200) return v;
  json_decref(v);
  return NULL;
}

/* A ctrl_wait_for condition: GET path (a const char *) answers 404. */
static inline int ctrl_gone(ctrl_fixture *f, const void *path) {
  return ctrl_kube_pack(f, "GET", path, NULL) == 404;
}

/* Non-zero when the NodeClaim named name has the condition type at status ("True", "False",
 * "Unknown") and, unless reason is NULL, with that reason. */
static inline int ctrl_claim_condition(ctrl_fixture *f, const char *name, const char *type,
                                       const char *status, const char *reason) {
  char path[256];
  snprintf(path, sizeof path, "/apis/karpenter.sh/v1/nodeclaims/%s", name);
  json_t *claim = ctrl_get(f, path);
  json_t *cond = lp_condition_get(claim, type);
  int ok = cond && lp_condition_is(claim, type, status) &&
           (!reason || strcmp(json_string_value(json_object_get(cond, "reason")) ?: "", reason) == 0);
  json_decref(claim);
  return ok;
}

/* How many Events in namespace default with reason are about the object named name and, unless part
 * is NULL, have a message that contains part. */
static inline int ctrl_count_events(ctrl_fixture *f, const char *name, const char *reason, const char *part) {
  json_t *list = ctrl_get(f, "/api/v1/namespaces/default/events");
  int found = 0;
  size_t i;
  json_t *ev;
  json_array_foreach(json_object_get(list, "items"), i, ev) {
    const char *who = lp_obj_str(ev, "involvedObject.name");
    const char *why = json_string_value(json_object_get(ev, "reason"));
    const char *msg = json_string_value(json_object_get(ev, "message"));
    found += who && why && strcmp(who, name) == 0 && strcmp(why, reason) == 0 &&
             (!part || (msg && strstr(msg, part)));
  }
  json_decref(list);
  return found;
}

/* Non-zero when an Event in namespace default with reason is about the object named name and, unless
 * part is NULL, its message contains part. */
static inline int ctrl_has_event_message(ctrl_fixture *f, const char *name, const char *reason,
                                         const char *part) {
  return ctrl_count_events(f, name, reason, part) > 0;
}

/* Non-zero when an Event in namespace default with reason is about the object named name. */
static inline int ctrl_has_event(ctrl_fixture *f, const char *name, const char *reason) {
  return ctrl_has_event_message(f, name, reason, NULL);
}

/* The simulators' admin API: service "alibaba" or "kubernetes". */
static inline json_t *ctrl_admin(ctrl_fixture *f, const char *service, const char *method, const char *path,
                                 const char *body) {
  return sim_admin(&f->loop, f->http, f->sim, service, method, path, body);
}

/* How often the Kubernetes simulator's first fault rule has fired: a "slow" rule of a millisecond
 * counts the calls it matches without failing them. */
static inline long long ctrl_kube_fault_fired(ctrl_fixture *f) {
  json_t *faults = ctrl_admin(f, "kubernetes", "GET", "/_sim/faults", NULL);
  long long n =
      json_integer_value(json_object_get(json_array_get(json_object_get(faults, "faults"), 0), "fired"));
  json_decref(faults);
  return n;
}

/* Adds the Kubernetes simulator's fault rule (JSON text, e.g. a "timeout" of creates of nodeclaims);
 * with watch_s, also ends every watch and answers the NodeClaim rewatch that many seconds late, so the
 * manager's cache does not show what the rule's calls stored meanwhile (as while an API server restarts
 * and its watches reconnect). */
static inline void ctrl_kube_faults(ctrl_fixture *f, const char *rule, int watch_s) {
  char body[512];
  if (watch_s)
    snprintf(body, sizeof body,
             "[%s,{\"kind\":\"slow\",\"verb\":\"watch\",\"resource\":\"nodeclaims\",\"seconds\":%d,"
             "\"count\":1},{\"kind\":\"drop_watches\"}]",
             rule, watch_s);
  else
    snprintf(body, sizeof body, "%s", rule);
  json_decref(ctrl_admin(f, "kubernetes", "POST", "/_sim/faults", body));
}

/* A ctrl_wait_for condition: the Kubernetes simulator has no fault rule left (each fired its count). */
static inline int ctrl_kube_faults_used(ctrl_fixture *f, const void *ud) {
  (void)ud;
  json_t *faults = ctrl_admin(f, "kubernetes", "GET", "/_sim/faults", NULL);
  int none_left = json_array_size(json_object_get(faults, "faults")) == 0;
  json_decref(faults);
  return none_left;
}

/* The Alibaba simulator's state (GET /_sim/state: instances, calls); caller decrefs. */
static inline json_t *ctrl_alibaba_state(ctrl_fixture *f) {
  return ctrl_admin(f, "alibaba", "GET", "/_sim/state", NULL);
}

/* How many calls of action (e.g. "RunInstances") the Alibaba simulator has answered. */
static inline long long ctrl_alibaba_calls(ctrl_fixture *f, const char *action) {
  json_t *state = ctrl_alibaba_state(f);
  long long n = mapping_sim_calls(state, action);
  json_decref(state);
  return n;
}

/* Non-zero while the simulated account still has the instance behind provider_id. */
static inline int ctrl_instance_exists(ctrl_fixture *f, const char *provider_id) {
  json_t *state = ctrl_alibaba_state(f);
  int found = mapping_sim_instance(state, provider_id) != NULL;
  json_decref(state);
  return found;
}

/* Moves simulated time forward (instances boot, the kubelet registers). */
static inline void ctrl_advance(ctrl_fixture *f, double seconds) {
  char body[64];
  snprintf(body, sizeof body, "{\"seconds\": %g}", seconds);
  json_decref(ctrl_admin(f, "alibaba", "POST", "/_sim/advance", body));
}

/* The ECSNodeClass "default" selecting the simulated account's vSwitches, security groups and image
 * (mapping_nodeclass), and the NodePool "default" using it. */
static inline void ctrl_fixture_apply_defaults(ctrl_fixture *f) {
  long status = 0;
  json_t *nodeclass = mapping_nodeclass("default", "luaprov-sim");
  char *body = json_dumps(nodeclass, JSON_COMPACT);
  json_decref(
      ctrl_kube(f, "POST", "/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses", body, &status));
  free(body);
  json_decref(nodeclass);
  if (status != 201) fprintf(stderr, "create ECSNodeClass default: %ld\n", status);
  json_decref(ctrl_kube(f, "POST", "/apis/karpenter.sh/v1/nodepools",
                        "{\"apiVersion\":\"karpenter.sh/v1\",\"kind\":\"NodePool\",\"metadata\":{\"name\":"
                        "\"default\"},\"spec\":{\"template\":{\"spec\":{\"nodeClassRef\":{\"group\":"
                        "\"karpenter.alibabacloud.com\",\"kind\":\"ECSNodeClass\",\"name\":\"default\"},"
                        "\"requirements\":[{\"key\":\"karpenter.sh/capacity-type\",\"operator\":\"In\","
                        "\"values\":[\"on-demand\"]}]}}}}",
                        &status));
  if (status != 201) fprintf(stderr, "create NodePool default: %ld\n", status);
}

/* A ctrl_wait_for condition: the manager's cache has the ECSNodeClass named name (a const char *)
 * with a Ready condition, whatever its status. */
static inline int ctrl_nodeclass_has_ready(ctrl_fixture *f, const void *name) {
  return lp_condition_get(lp_env_get(lp_controllers_env(f->manager), LP_KIND_NODECLASS, name), "Ready") !=
         NULL;
}

/* The value of a metric in the manager's registry (0 when never set). */
static inline double ctrl_metric(ctrl_fixture *f, const char *name, const char *const *labels) {
  lp_metric *m = lp_metrics_find(f->metrics, name);
  return m ? lp_metric_value(m, labels) : 0;
}

/* What ctrl_metric_reaches waits for: the metric name with labels at least at. */
typedef struct ctrl_metric_want {
  const char *name;
  const char *const *labels;
  double at;
} ctrl_metric_want;

/* A ctrl_wait_for condition: the metric ud (a ctrl_metric_want) reached its value. */
static inline int ctrl_metric_reaches(ctrl_fixture *f, const void *ud) {
  const ctrl_metric_want *w = ud;
  return ctrl_metric(f, w->name, w->labels) >= w->at;
}

/* lp_env_set_clock's now for a test's clock: the seconds ud (a double *) points to. */
static inline double ctrl_clock_at(void *ud) {
  return *(const double *)ud;
}

/* Makes the manager's wall clock (lp_env_wall: what the controllers compare with Kubernetes timestamps)
 * read *now, which the test then moves: an expireAfter or a consolidateAfter passes without waiting. */
static inline void ctrl_use_wall_clock(ctrl_fixture *f, double *now) {
  lp_env_set_wall_clock(lp_controllers_env(f->manager), ctrl_clock_at, now);
}

/* A done callback (lp_controllers_stop's) that sets the int ud points to. */
static inline void ctrl_set_flag(void *ud) {
  *(int *)ud = 1;
}

/* Stops manager m (the fixture's or another one on its loop) and runs the loop until it has. */
static inline void ctrl_stop_manager(ctrl_fixture *f, lp_controllers *m) {
  int stopped = 0;
  lp_controllers_stop(m, ctrl_set_flag, &stopped);
  while (!stopped) uv_run(&f->loop, UV_RUN_ONCE);
}

/* Replaces the fixture's manager with one running controllers (settings may be NULL) over a Kubernetes
 * client whose calls give up after timeout_ms (f->impatient, closed by ctrl_fixture_stop), so that an
 * answer the simulator sends late (a "timeout" fault, see ctrl_kube_faults) is lost to the controllers,
 * whose clock (lp_env_monotonic) then reads *now: the test moves it. */
static inline void ctrl_restart_impatient(ctrl_fixture *f, const lp_controller_def *const *controllers,
                                          const lp_ctrl_settings *settings, unsigned timeout_ms,
                                          double *now) {
  ctrl_stop_manager(f, f->manager);
  lp_error *err = NULL;
  f->impatient = lp_kube_client_new(&f->loop, f->kube_config,
                                    &(lp_http_client_options){.default_timeout_ms = timeout_ms}, &err);
  lp_controllers_config cfg = ctrl_manager_config(f, controllers);
  cfg.kube = f->impatient;
  if (settings) cfg.settings = *settings;
  f->manager = f->impatient ? lp_controllers_start(&cfg, &err) : NULL;
  if (!f->manager) {
    fprintf(stderr, "impatient manager: %s\n", err ? err->message : "?");
    abort();
  }
  lp_env_set_clock(lp_controllers_env(f->manager), ctrl_clock_at, now);
}

/* Stops the manager (unless the test stopped it and set it to NULL) and everything else, runs the loop
 * dry. */
static inline void ctrl_fixture_stop(ctrl_fixture *f) {
  if (f->manager) ctrl_stop_manager(f, f->manager);
  if (f->impatient) lp_kube_client_close(f->impatient, NULL, NULL);
  lp_kube_client_close(f->kube, NULL, NULL);
  lp_cloudprovider_free(f->cloud);
  sim_fixture_stop(&f->loop, f->sim, f->http, f->scripts);
  lp_kube_config_free(f->kube_config);
  lp_metrics_free(f->metrics);
  unlink(f->kubeconfig_path);
  lp_cache_registry_clear();
}

#endif

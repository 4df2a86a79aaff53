/* The provisioner at scale: N pending pods (default 1,000) of mixed shapes — some pinned to a zone, some
 * to arm64 — against a synthetic Alibaba catalogue of T instance types (default 500, the simulator's
 * /_sim/catalogue), one NodePool. The simulators run in a child process, so this process holds only
 * the engine: informer caches, the CloudProvider's Lua mapping and the provisioner.
 *
 * Figures: the first pass, from the controllers starting (the manager enqueues the provisioner at
 * start) to every NodeClaim created — cold, so it includes listing the instance types through the
 * mapping — with the packing time alone, CPU seconds and the peak heap (mallinfo2, sampled every 25 ms)
 * above the synced caches; the NodeClaims created and pods left unschedulable. Then a warm pass: the
 * NodeClaims are deleted, which sends every pod back to planning after the 1 s batch window.
 *
 * usage: bench_provisioner [PODS] [INSTANCE_TYPES] */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "contract/contracts.h"
#include "controller/conditions.h"
#include "controller/defs.h"
#include "controller/manager.h"
#include "core/clock.h"
#include "core/log.h"
#include "http/client.h"
#include "kube/config.h"
#include "sim/sim.h"

static uv_loop_t loop;
static lp_http_client *http;
static char kube_url[128], alibaba_url[128];

/* ---- the simulators in a child process ------------------------------------------------------ */

static pid_t start_simulator(void) {
  int fds[2];
  if (pipe(fds) != 0) abort();
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    uv_loop_t child;
    uv_loop_init(&child);
    lp_error *err = NULL;
    lp_sim *sim = lp_sim_start(&child, &(lp_sim_options){.scripts_dir = LUAPROV_SOURCE_DIR}, &err);
    if (!sim) _exit(1);
    char urls[300];
    snprintf(urls, sizeof urls, "%s %s", lp_sim_url(sim, "kubernetes"), lp_sim_url(sim, "alibaba"));
    if (write(fds[1], urls, strlen(urls)) < 0) _exit(1);
    close(fds[1]);
    uv_run(&child, UV_RUN_DEFAULT);
    _exit(0);
  }
  close(fds[1]);
  char urls[300];
  ssize_t n = read(fds[0], urls, sizeof urls - 1);
  close(fds[0]);
  if (n <= 0 || sscanf((urls[n] = '\0', urls), "%127s %127s", kube_url, alibaba_url) != 2) {
    fprintf(stderr, "the simulator did not start\n");
    exit(1);
  }
  return pid;
}

/* ---- requests ------------------------------------------------------------------------------- */

typedef struct reply {
  int done;
  long status;
  json_t *body;
} reply;

static void got_reply(lp_http_result *r, void *ud) {
  reply *out = ud;
  out->status = r->status;
  out->body = r->body ? json_loads(r->body, JSON_DECODE_ANY, NULL) : NULL;
  out->done = 1;
  lp_http_result_free(r);
}

/* METHOD base+path with a JSON body (stolen, may be NULL); waits; returns the decoded answer. */
static json_t *request(const char *base, const char *method, const char *path, json_t *body, long *status) {
  char url[512];
  snprintf(url, sizeof url, "%s%s", base, path);
  char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  lp_http_header ct = {"Content-Type", "application/json"};
  lp_http_request_opts req = {.method = method,
                              .url = url,
                              .headers = &ct,
                              .nheaders = 1,
                              .body = text,
                              .body_len = text ? strlen(text) : 0};
  reply r = {0};
  lp_http_client_request(http, &req, got_reply, &r);
  while (!r.done) uv_run(&loop, UV_RUN_ONCE);
  free(text);
  if (status) *status = r.status;
  return r.body;
}

typedef struct seeding {
  size_t next, total, in_flight, failed;
} seeding;

static void seed_next(seeding *s);

static void seeded(lp_http_result *r, void *ud) {
  seeding *s = ud;
  if (r->status >= 300) s->failed++;
  lp_http_result_free(r);
  s->in_flight--;
  seed_next(s);
}

/* Pod i: cpu and memory drawn from Karpenter's benchmark-like sets, every 10th pinned to a zone, every
 * 10th (offset 5) to arm64. Deterministic. Created Unschedulable by a scheduler of its own, which the
 * simulator's binder leaves alone: it would otherwise look at every pending pod on every write. */
static json_t *pod(size_t i) {
  static const char *const cpus[] = {"100m", "250m", "500m", "1", "1500m", "2", "3", "4"};
  static const char *const mems[] = {"128Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi", "8Gi"};
  static const char *const zones[] = {"cn-hangzhou-h", "cn-hangzhou-i", "cn-hangzhou-j", "cn-hangzhou-k"};
  unsigned long x = (unsigned long)i * 2654435761ul + 42;
  char name[32];
  snprintf(name, sizeof name, "pod-%05zu", i);
  json_t *p = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:[{s:s, s:s, s:{s:{s:s, s:s}}}]}}", "apiVersion", "v1",
                        "kind", "Pod", "metadata", "name", name, "namespace", "default", "spec", "containers",
                        "name", "app", "image", "app", "resources", "requests", "cpu", cpus[(x >> 3) % 8],
                        "memory", mems[(x >> 7) % 7]);
  json_t *spec = json_object_get(p, "spec");
  if (i % 10 == 0)
    json_object_set_new(spec, "nodeSelector",
                        json_pack("{s:s}", "topology.kubernetes.io/zone", zones[(x >> 11) % 4]));
  else if (i % 10 == 5)
    json_object_set_new(spec, "nodeSelector", json_pack("{s:s}", "kubernetes.io/arch", "arm64"));
  return p;
}

static void seed_next(seeding *s) {
  while (s->in_flight < 16 && s->next < s->total) {
    json_t *p = pod(s->next++);
    char *body = json_dumps(p, JSON_COMPACT);
    json_decref(p);
    char url[512];
    snprintf(url, sizeof url, "%s/api/v1/namespaces/default/pods", kube_url);
    lp_http_header ct = {"Content-Type", "application/json"};
    lp_http_request_opts req = {
        .method = "POST", .url = url, .headers = &ct, .nheaders = 1, .body = body, .body_len = strlen(body)};
    s->in_flight++;
    lp_http_client_request(http, &req, seeded, s);
    free(body);
  }
}

/* ---- measuring ------------------------------------------------------------------------------ */

static double heap_mib(void) {
  struct mallinfo2 mi = mallinfo2();
  return (mi.uordblks + mi.hblkhd) / 1048576.0;
}

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static double peak_heap;

static void sample_heap(uv_timer_t *t) {
  (void)t;
  double h = heap_mib();
  if (h > peak_heap) peak_heap = h;
}

static double passes(lp_metrics *m) {
  lp_metric *r = lp_metrics_find(m, "luaprov_controller_reconciles_total");
  return r ? lp_metric_value(r, LP_LABELS("provisioner", "success")) +
                 lp_metric_value(r, LP_LABELS("provisioner", "requeue")) +
                 lp_metric_value(r, LP_LABELS("provisioner", "error"))
           : 0;
}

static double metric(lp_metrics *m, const char *name, const char *const *labels) {
  lp_metric *f = lp_metrics_find(m, name);
  return f ? lp_metric_value(f, labels) : 0;
}

/* The _sum of the packing-time histogram, read from the rendered registry. */
static double packing_seconds(lp_metrics *m) {
  char *text = lp_metrics_render(m, NULL);
  const char *at = strstr(text, "luaprov_provisioner_scheduling_duration_seconds_sum");
  double v = at ? strtod(at + strlen("luaprov_provisioner_scheduling_duration_seconds_sum"), NULL) : 0;
  free(text);
  return v;
}

static double created_total(lp_metrics *m) {
  return metric(m, "luaprov_nodeclaims_created_total", LP_LABELS("default", "provisioning"));
}

/* Runs the loop until a pass has created NodeClaims beyond before and ended (or 300 s): the pass that
 * started the creations ends once they all answered. */
static void wait_creating_pass(lp_metrics *m, double before) {
  double deadline = lp_clock_monotonic() + 300;
  while (created_total(m) <= before && lp_clock_monotonic() < deadline) uv_run(&loop, UV_RUN_ONCE);
  double ended = passes(m);
  while (passes(m) <= ended && lp_clock_monotonic() < deadline) uv_run(&loop, UV_RUN_ONCE);
}

static void stopped(void *ud) {
  *(int *)ud = 1;
}

static lp_controllers *start_manager(lp_kube_client *kc, lp_cloudprovider *cp,
                                     const lp_controller_def *const *defs, lp_metrics *metrics) {
  lp_error *err = NULL;
  lp_controllers *m = lp_controllers_start(
      &(lp_controllers_config){
          .loop = &loop, .kube = kc, .cloud = cp, .metrics = metrics, .controllers = defs},
      &err);
  if (!m) {
    fprintf(stderr, "manager: %s\n", err ? err->message : "?");
    exit(1);
  }
  return m;
}

static void stop_manager(lp_controllers *m) {
  int done = 0;
  lp_controllers_stop(m, stopped, &done);
  while (!done) uv_run(&loop, UV_RUN_ONCE);
}

static void make_nodeclass_ready(lp_kube_client *kc, lp_cloudprovider *cp) {
  static const lp_controller_def *const only[] = {&lp_nodeclass_controller, NULL};
  lp_metrics *metrics = lp_metrics_new();
  lp_controllers *m = start_manager(kc, cp, only, metrics);
  double deadline = lp_clock_monotonic() + 60;
  while (lp_clock_monotonic() < deadline &&
         !lp_condition_is(lp_env_get(lp_controllers_env(m), LP_KIND_NODECLASS, "default"), "Ready", "True"))
    uv_run(&loop, UV_RUN_ONCE);
  stop_manager(m);
  lp_metrics_free(metrics);
}

static size_t delete_claims(void) {
  json_t *list = request(kube_url, "GET", "/apis/karpenter.sh/v1/nodeclaims", NULL, NULL);
  size_t i, n = 0;
  json_t *claim;
  json_array_foreach(json_object_get(list, "items"), i, claim) {
    char path[256];
    snprintf(path, sizeof path, "/apis/karpenter.sh/v1/nodeclaims/%s",
             json_string_value(json_object_get(json_object_get(claim, "metadata"), "name")));
    json_decref(request(kube_url, "DELETE", path, NULL, NULL));
    n++;
  }
  json_decref(list);
  return n;
}

int main(int argc, char **argv) {
  size_t n_pods = argc > 1 ? (size_t)atol(argv[1]) : 1000;
  int n_types = argc > 2 ? atoi(argv[2]) : 500;
  lp_log_configure(LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "LTAI5simulatoraccess", 1);
  setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "simulator-secret-do-not-use", 1);
  pid_t sim_pid = start_simulator();
  uv_loop_init(&loop);
  lp_error *err = NULL;
  http = lp_http_client_new(&loop, NULL, &err);

  long status = 0;
  json_t *summary = request(alibaba_url, "POST", "/_sim/catalogue",
                            json_pack("{s:i, s:i}", "instance_types", n_types, "zones", 4), &status);
  printf("catalogue: %lld instance types in 4 zones (HTTP %ld)\n",
         json_integer_value(json_object_get(summary, "instance_types")), status);
  json_decref(summary);
  json_decref(
      request(kube_url, "POST", "/apis/karpenter.k8s.alibabacloud/v1alpha1/ecsnodeclasses",
              json_pack("{s:s, s:s, s:{s:s}, s:{s:[{s:{s:s}}], s:[{s:{s:s}}], s:[{s:s}]}}", "apiVersion",
                        "karpenter.k8s.alibabacloud/v1alpha1", "kind", "ECSNodeClass", "metadata", "name",
                        "default", "spec", "vSwitchSelectorTerms", "tags", "karpenter.sh/discovery",
                        "luaprov-sim", "securityGroupSelectorTerms", "tags", "karpenter.sh/discovery",
                        "luaprov-sim", "imageSelectorTerms", "alias", "AlibabaCloudLinux3"),
              NULL));
  json_decref(
      request(kube_url, "POST", "/apis/karpenter.sh/v1/nodepools",
              json_pack("{s:s, s:s, s:{s:s}, s:{s:{s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:[s]}]}}}}",
                        "apiVersion", "karpenter.sh/v1", "kind", "NodePool", "metadata", "name", "default",
                        "spec", "template", "spec", "nodeClassRef", "group", "karpenter.k8s.alibabacloud",
                        "kind", "ECSNodeClass", "name", "default", "requirements", "key",
                        "karpenter.sh/capacity-type", "operator", "In", "values", "on-demand"),
              NULL));

  lp_script_host_config scfg = {
      .loop = &loop, .defaults_dir = LUAPROV_SOURCE_DIR, .modules = lp_contract_modules, .http = http};
  lp_problems problems = {0};
  lp_script_host *scripts = lp_script_host_new(&scfg, &problems);
  lp_cloudprovider *cp = lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = &loop,
                                                                         .scripts = scripts,
                                                                         .region = "cn-hangzhou",
                                                                         .cluster_id = "luaprov-sim",
                                                                         .endpoint = alibaba_url,
                                                                         .refresh_interval_s = -1});
  lp_kube_config *kcfg = lp_kube_config_for_server(kube_url, NULL);
  lp_kube_client *kc =
      lp_kube_client_new(&loop, kcfg, &(lp_http_client_options){.default_timeout_ms = 60000}, &err);
  make_nodeclass_ready(kc, cp);

  double t0 = lp_clock_monotonic();
  seeding s = {.total = n_pods};
  seed_next(&s);
  while (s.in_flight > 0 || s.next < s.total) uv_run(&loop, UV_RUN_ONCE);
  json_decref(
      request(kube_url, "GET", "/api/v1/namespaces/default/pods?limit=1", NULL, NULL)); /* binder turn */
  printf("seeded %zu pending pods in %.1f s (%zu failed)\n", n_pods, lp_clock_monotonic() - t0, s.failed);

  static const lp_controller_def *const defs[] = {&lp_nodeclass_controller, &lp_provisioner_controller, NULL};
  lp_metrics *metrics = lp_metrics_new();
  lp_controllers *m = start_manager(kc, cp, defs, metrics);
  while (!lp_controllers_active(m)) uv_run(&loop, UV_RUN_ONCE);
  uv_timer_t sampler;
  uv_timer_init(&loop, &sampler);
  uv_timer_start(&sampler, sample_heap, 25, 25); /* mallinfo2 walks the heap: not too often */
  double heap0 = heap_mib(), cpu0 = cpu_seconds();
  peak_heap = heap0;
  t0 = lp_clock_monotonic();
  wait_creating_pass(metrics, 0);
  double dt = lp_clock_monotonic() - t0, cpu = cpu_seconds() - cpu0, packing = packing_seconds(metrics);
  double created = created_total(metrics);
  printf("first pass (cold: instance types listed through the mapping): %.3f s to %.0f NodeClaims created\n",
         dt, created);
  printf("  packing %zu pods: %.3f s; CPU %.2f s; heap %.1f MiB synced, peak %.1f MiB (+%.1f MiB)\n", n_pods,
         packing, cpu, heap0, peak_heap, peak_heap - heap0);
  printf("  pods left unschedulable: %.0f; pods per NodeClaim: %.1f\n",
         metric(metrics, "luaprov_provisioner_unschedulable_pods", NULL),
         created > 0 ? (n_pods - metric(metrics, "luaprov_provisioner_unschedulable_pods", NULL)) / created
                     : 0);

  cpu0 = cpu_seconds();
  peak_heap = heap0 = heap_mib();
  t0 = lp_clock_monotonic();
  size_t deleted = delete_claims();
  wait_creating_pass(metrics, created);
  dt = lp_clock_monotonic() - t0;
  double created2 = created_total(metrics) - created;
  printf("warm pass (%zu NodeClaims deleted, every pod planned again): %.3f s from the first deletion to "
         "%.0f NodeClaims created, 1 s of it the batch window\n",
         deleted, dt, created2);
  printf("  packing: %.3f s; CPU %.2f s; heap peak +%.1f MiB\n", packing_seconds(metrics) - packing,
         cpu_seconds() - cpu0, peak_heap - heap0);

  uv_close((uv_handle_t *)&sampler, NULL);
  stop_manager(m);
  lp_cloudprovider_free(cp);
  lp_script_host_close(scripts, NULL, NULL);
  lp_kube_client_close(kc, NULL, NULL);
  lp_http_client_close(http, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  lp_kube_config_free(kcfg);
  lp_metrics_free(metrics);
  kill(sim_pid, SIGTERM);
  waitpid(sim_pid, NULL, 0);
  return 0;
}

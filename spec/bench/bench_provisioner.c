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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_support.h"
#include "controller/conditions.h"
#include "controller/defs.h"
#include "controller/manager.h"
#include "core/clock.h"
#include "http/client.h"
#include "kube/config.h"

static uv_loop_t loop;
static lp_http_client *http;
static char kube_url[BENCH_URL_MAX], alibaba_url[BENCH_URL_MAX];

/* ---- seeding ------------------------------------------------------------------------------- */

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

static int pod_request(bench_seeding *s, size_t i, unsigned step, bench_seed_request *req) {
  (void)s;
  if (step > 0) return 0;
  json_t *p = pod(i);
  req->method = "POST";
  snprintf(req->path, sizeof req->path, "/api/v1/namespaces/default/pods");
  req->body = json_dumps(p, JSON_COMPACT);
  json_decref(p);
  return 1;
}

/* ---- measuring ------------------------------------------------------------------------------ */

static double peak_heap;

static void sample_heap(uv_timer_t *t) {
  (void)t;
  double h = bench_heap_mib(1);
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

static void make_nodeclass_ready(lp_kube_client *kc, lp_cloudprovider *cp) {
  static const lp_controller_def *const only[] = {&lp_nodeclass_controller, NULL};
  lp_metrics *metrics = lp_metrics_new();
  lp_controllers *m = bench_start_manager(&loop, kc, cp, only, metrics);
  double deadline = lp_clock_monotonic() + 60;
  while (lp_clock_monotonic() < deadline &&
         !lp_condition_is(lp_env_get(lp_controllers_env(m), LP_KIND_NODECLASS, "default"), "Ready", "True"))
    uv_run(&loop, UV_RUN_ONCE);
  bench_stop_manager(&loop, m);
  lp_metrics_free(metrics);
}

static size_t delete_claims(void) {
  json_t *list = bench_request(&loop, http, kube_url, "GET", "/apis/karpenter.sh/v1/nodeclaims", NULL, NULL);
  size_t i, n = 0;
  json_t *claim;
  json_array_foreach(json_object_get(list, "items"), i, claim) {
    char path[256];
    snprintf(path, sizeof path, "/apis/karpenter.sh/v1/nodeclaims/%s",
             json_string_value(json_object_get(json_object_get(claim, "metadata"), "name")));
    json_decref(bench_request(&loop, http, kube_url, "DELETE", path, NULL, NULL));
    n++;
  }
  json_decref(list);
  return n;
}

int main(int argc, char **argv) {
  size_t n_pods = argc > 1 ? (size_t)atol(argv[1]) : 1000;
  int n_types = argc > 2 ? atoi(argv[2]) : 500;
  pid_t sim_pid = bench_start(&loop, &http, kube_url, alibaba_url);

  bench_catalogue_and_pool(&loop, http, kube_url, alibaba_url, n_types);

  lp_script_host *scripts = NULL;
  lp_cloudprovider *cp = bench_cloudprovider(&loop, http, "luaprov-sim", alibaba_url, &scripts);
  lp_kube_config *kcfg = NULL;
  lp_kube_client *kc = bench_kube_client(&loop, kube_url, &kcfg);
  make_nodeclass_ready(kc, cp);

  double t0 = lp_clock_monotonic();
  bench_seeding s = {.http = http, .base_url = kube_url, .request = pod_request, .total = n_pods};
  bench_seed(&loop, &s);
  json_decref(bench_request(&loop, http, kube_url, "GET", "/api/v1/namespaces/default/pods?limit=1", NULL,
                            NULL)); /* binder turn */
  printf("seeded %zu pending pods in %.1f s (%zu failed)\n", n_pods, lp_clock_monotonic() - t0, s.failed);

  static const lp_controller_def *const defs[] = {&lp_nodeclass_controller, &lp_provisioner_controller, NULL};
  lp_metrics *metrics = lp_metrics_new();
  lp_controllers *m = bench_start_manager(&loop, kc, cp, defs, metrics);
  while (!lp_controllers_active(m)) uv_run(&loop, UV_RUN_ONCE);
  uv_timer_t sampler;
  uv_timer_init(&loop, &sampler);
  uv_timer_start(&sampler, sample_heap, 25, 25); /* mallinfo2 walks the heap: not too often */
  double heap0 = bench_heap_mib(1), cpu0 = bench_cpu_seconds();
  peak_heap = heap0;
  t0 = lp_clock_monotonic();
  wait_creating_pass(metrics, 0);
  double dt = lp_clock_monotonic() - t0, cpu = bench_cpu_seconds() - cpu0, packing = packing_seconds(metrics);
  double created = created_total(metrics);
  printf("first pass (cold: instance types listed through the mapping): %.3f s to %.0f NodeClaims created\n",
         dt, created);
  printf("  packing %zu pods: %.3f s; CPU %.2f s; heap %.1f MiB synced, peak %.1f MiB (+%.1f MiB)\n", n_pods,
         packing, cpu, heap0, peak_heap, peak_heap - heap0);
  printf("  pods left unschedulable: %.0f; pods per NodeClaim: %.1f\n",
         metric(metrics, "luaprov_provisioner_unschedulable_pods", NULL),
         created > 0 ? (n_pods - metric(metrics, "luaprov_provisioner_unschedulable_pods", NULL)) / created
                     : 0);

  cpu0 = bench_cpu_seconds();
  peak_heap = heap0 = bench_heap_mib(1);
  t0 = lp_clock_monotonic();
  size_t deleted = delete_claims();
  wait_creating_pass(metrics, created);
  dt = lp_clock_monotonic() - t0;
  double created2 = created_total(metrics) - created;
  printf("warm pass (%zu NodeClaims deleted, every pod planned again): %.3f s from the first deletion to "
         "%.0f NodeClaims created, 1 s of it the batch window\n",
         deleted, dt, created2);
  printf("  packing: %.3f s; CPU %.2f s; heap peak +%.1f MiB\n", packing_seconds(metrics) - packing,
         bench_cpu_seconds() - cpu0, peak_heap - heap0);

  uv_close((uv_handle_t *)&sampler, NULL);
  bench_stop_manager(&loop, m);
  bench_close(&loop, cp, scripts, kc, kcfg, http);
  lp_metrics_free(metrics);
  bench_stop_simulators(sim_pid);
  return 0;
}

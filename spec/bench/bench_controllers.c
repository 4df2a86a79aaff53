/* The controller manager at scale: N NodeClaims and N Nodes (default 5,000 each) in the simulated
 * Kubernetes API, then the manager's informers list and watch them.
 *
 * Figures: time from start to caches synced; resident memory and CPU the caches cost (the simulator
 * runs in a child process, so this process holds only the engine side); reconciles per second of the
 * framework (a controller that reads its object from the cache and ends), for every NodeClaim at
 * once and again after a resync; and the same with the real lifecycle controller on NodeClaims that
 * are launched, registered and initialized (the steady state: read, compare, no write).
 *
 * usage: bench_controllers [N] */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "contract/contracts.h"
#include "controller/defs.h"
#include "controller/manager.h"
#include "core/clock.h"
#include "core/log.h"
#include "http/client.h"
#include "kube/config.h"
#include "sim/sim.h"

static uv_loop_t loop;
static lp_http_client *http;
static char kube_url[128];
static size_t reconciled;

/* ---- the simulator in a child process ------------------------------------------------------ */

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
    const char *url = lp_sim_url(sim, "kubernetes");
    if (write(fds[1], url, strlen(url)) < 0) _exit(1);
    close(fds[1]);
    uv_run(&child, UV_RUN_DEFAULT);
    _exit(0);
  }
  close(fds[1]);
  ssize_t n = read(fds[0], kube_url, sizeof kube_url - 1);
  close(fds[0]);
  if (n <= 0) {
    fprintf(stderr, "the simulator did not start\n");
    exit(1);
  }
  kube_url[n] = '\0';
  return pid;
}

/* ---- seeding ------------------------------------------------------------------------------- */

typedef struct seeding {
  size_t next, total, in_flight, failed;
  const char *(*body)(size_t i, char *buf, size_t cap, const char **path, const char **method,
                      const char **ctype);
} seeding;

static void seed_next(seeding *s);

static void seeded(lp_http_result *r, void *ud) {
  seeding *s = ud;
  if (r->status >= 300) s->failed++;
  lp_http_result_free(r);
  s->in_flight--;
  seed_next(s);
}

static void seed_next(seeding *s) {
  while (s->in_flight < 16 && s->next < s->total) {
    char buf[1536], url[512];
    const char *path, *method, *ctype;
    const char *body = s->body(s->next++, buf, sizeof buf, &path, &method, &ctype);
    snprintf(url, sizeof url, "%s%s", kube_url, path);
    lp_http_header ct = {"Content-Type", (char *)ctype};
    lp_http_request_opts req = {
        .method = method, .url = url, .headers = &ct, .nheaders = 1, .body = body, .body_len = strlen(body)};
    s->in_flight++;
    lp_http_client_request(http, &req, seeded, s);
  }
}

static size_t n_objects;
static char path_buf[256];

/* NodeClaims launched, registered and initialized, their Nodes Ready: the steady state. */
static const char *claim_body(size_t i, char *buf, size_t cap, const char **path, const char **method,
                              const char **ctype) {
  *path = "/apis/karpenter.sh/v1/nodeclaims";
  *method = "POST";
  *ctype = "application/json";
  snprintf(
      buf, cap,
      "{\"apiVersion\":\"karpenter.sh/v1\",\"kind\":\"NodeClaim\",\"metadata\":{\"name\":\"claim-%05zu\","
      "\"finalizers\":[\"karpenter.sh/termination\"],\"labels\":{\"karpenter.sh/nodepool\":\"default\","
      "\"node.kubernetes.io/instance-type\":\"ecs.g7.large\",\"topology.kubernetes.io/zone\":"
      "\"cn-hangzhou-h\",\"karpenter.sh/capacity-type\":\"on-demand\"}},\"spec\":{\"nodeClassRef\":{"
      "\"group\":\"karpenter.k8s.alibabacloud\",\"kind\":\"ECSNodeClass\",\"name\":\"default\"},"
      "\"requirements\":[{\"key\":\"karpenter.sh/capacity-type\",\"operator\":\"In\",\"values\":"
      "[\"on-demand\"]}],\"resources\":{\"requests\":{\"cpu\":\"1\"}}}}",
      i);
  return buf;
}

static const char *claim_status_body(size_t i, char *buf, size_t cap, const char **path, const char **method,
                                     const char **ctype) {
  snprintf(path_buf, sizeof path_buf, "/apis/karpenter.sh/v1/nodeclaims/claim-%05zu/status", i);
  *path = path_buf;
  *method = "PATCH";
  *ctype = "application/merge-patch+json";
  char ts[21];
  lp_rfc3339(lp_clock_wall(), ts);
  snprintf(
      buf, cap,
      "{\"status\":{\"providerID\":\"cn-hangzhou.i-bench%05zu\",\"nodeName\":\"node-%05zu\",\"imageID\":"
      "\"aliyun_3_x64\",\"capacity\":{\"cpu\":\"2\",\"memory\":\"8Gi\",\"pods\":\"110\"},\"allocatable\":{"
      "\"cpu\":\"1930m\",\"memory\":\"7Gi\",\"pods\":\"110\"},\"conditions\":["
      "{\"type\":\"Launched\",\"status\":\"True\",\"reason\":\"Launched\",\"message\":\"\","
      "\"lastTransitionTime\":\"%s\"},"
      "{\"type\":\"Registered\",\"status\":\"True\",\"reason\":\"Registered\",\"message\":\"\","
      "\"lastTransitionTime\":\"%s\"},"
      "{\"type\":\"Initialized\",\"status\":\"True\",\"reason\":\"Initialized\",\"message\":\"\","
      "\"lastTransitionTime\":\"%s\"},"
      "{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"Ready\",\"message\":\"\",\"lastTransitionTime\":"
      "\"%s\"}]}}",
      i, i, ts, ts, ts, ts);
  return buf;
}

static const char *node_body(size_t i, char *buf, size_t cap, const char **path, const char **method,
                             const char **ctype) {
  *path = "/api/v1/nodes";
  *method = "POST";
  *ctype = "application/json";
  snprintf(buf, cap,
           "{\"metadata\":{\"name\":\"node-%05zu\",\"finalizers\":[\"karpenter.sh/termination\"],\"labels\":{"
           "\"karpenter.sh/nodepool\":\"default\",\"karpenter.sh/registered\":\"true\","
           "\"karpenter.sh/initialized\":\"true\",\"kubernetes.io/arch\":\"amd64\",\"kubernetes.io/os\":"
           "\"linux\",\"node.kubernetes.io/instance-type\":\"ecs.g7.large\",\"topology.kubernetes.io/zone\":"
           "\"cn-hangzhou-h\",\"karpenter.sh/capacity-type\":\"on-demand\"}},"
           "\"spec\":{\"providerID\":\"cn-hangzhou.i-bench%05zu\"}}",
           i, i);
  return buf;
}

static const char *node_status_body(size_t i, char *buf, size_t cap, const char **path, const char **method,
                                    const char **ctype) {
  snprintf(path_buf, sizeof path_buf, "/api/v1/nodes/node-%05zu/status", i);
  *path = path_buf;
  *method = "PATCH";
  *ctype = "application/merge-patch+json";
  snprintf(buf, cap,
           "{\"status\":{\"capacity\":{\"cpu\":\"2\",\"memory\":\"8Gi\",\"pods\":\"110\"},\"allocatable\":{"
           "\"cpu\":\"1930m\",\"memory\":\"7Gi\",\"pods\":\"110\"},\"conditions\":[{\"type\":\"Ready\","
           "\"status\":\"True\",\"reason\":\"KubeletReady\"}]}}");
  return buf;
}

static double seed(const char *what,
                   const char *(*body)(size_t, char *, size_t, const char **, const char **, const char **)) {
  seeding s = {.total = n_objects, .body = body};
  double t0 = lp_clock_monotonic();
  seed_next(&s);
  while (s.in_flight > 0 || s.next < s.total) uv_run(&loop, UV_RUN_ONCE);
  double dt = lp_clock_monotonic() - t0;
  if (s.failed) fprintf(stderr, "%s: %zu requests failed\n", what, s.failed);
  return dt;
}

/* ---- measuring ----------------------------------------------------------------------------- */

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld", &kib) == 1) break;
  if (f) fclose(f);
  return kib;
}

/* Bytes malloc has handed out and not had back: the caches' live size, without freed pages RSS keeps. */
static double heap_mib(void) {
  return mallinfo2().uordblks / 1048576.0;
}

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void count_reconcile(lp_controller *c, const char *key) {
  json_t *claim = lp_env_get(lp_controller_env(c), LP_KIND_NODECLAIM, key);
  if (claim && lp_obj_name(claim)) reconciled++;
  lp_controller_done(c, key, NULL, 0);
}

static const lp_controller_def counter = {
    .name = "bench", .primary = LP_KIND_NODECLAIM, .reconcile = count_reconcile};

static void stopped(void *ud) {
  *(int *)ud = 1;
}

/* Starts a manager with controllers, waits for synced, returns it; prints sync figures when asked. */
static lp_controllers *start_manager(lp_kube_client *kc, lp_cloudprovider *cp,
                                     const lp_controller_def *const *defs, lp_metrics *metrics, int report) {
  long rss0 = rss_kib();
  double heap0 = heap_mib(), cpu0 = cpu_seconds(), t0 = lp_clock_monotonic();
  lp_error *err = NULL;
  lp_controllers *m = lp_controllers_start(
      &(lp_controllers_config){
          .loop = &loop, .kube = kc, .cloud = cp, .metrics = metrics, .controllers = defs},
      &err);
  while (!lp_controllers_synced(m)) uv_run(&loop, UV_RUN_ONCE);
  double sync_s = lp_clock_monotonic() - t0;
  if (report) {
    long rss1 = rss_kib();
    printf("start to caches synced:    %.2f s (%zu objects listed, 500 per page)\n", sync_s, 2 * n_objects);
    printf("CPU during the sync:       %.2f s\n", cpu_seconds() - cpu0);
    printf("resident memory:           %.1f MiB before, %.1f MiB synced: %.1f MiB for the caches "
           "(%.1f KiB per object)\n",
           rss0 / 1024.0, rss1 / 1024.0, (rss1 - rss0) / 1024.0, (double)(rss1 - rss0) / (2.0 * n_objects));
    double heap1 = heap_mib();
    printf("heap in use:               %.1f MiB before, %.1f MiB synced: %.1f MiB (%.1f KiB per object)\n",
           heap0, heap1, heap1 - heap0, (heap1 - heap0) * 1024 / (2.0 * n_objects));
  }
  return m;
}

static void wait_reconciled(size_t want, double timeout_s) {
  double deadline = lp_clock_monotonic() + timeout_s;
  while (reconciled < want && lp_clock_monotonic() < deadline) uv_run(&loop, UV_RUN_ONCE);
}

int main(int argc, char **argv) {
  n_objects = argc > 1 ? (size_t)atol(argv[1]) : 5000;
  lp_log_configure(LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  pid_t sim_pid = start_simulator();
  uv_loop_init(&loop);
  lp_error *err = NULL;
  http = lp_http_client_new(&loop, NULL, &err);

  printf("seeding %zu NodeClaims and %zu Nodes (launched, registered, initialized) into the simulator...\n",
         n_objects, n_objects);
  double seeded_s = seed("nodeclaims", claim_body) + seed("nodeclaim status", claim_status_body) +
                    seed("nodes", node_body) + seed("node status", node_status_body);
  printf("seeding took %.1f s (%.0f writes/s to the Lua simulator)\n", seeded_s, 4 * n_objects / seeded_s);

  lp_kube_config *kcfg = lp_kube_config_for_server(kube_url, NULL);
  lp_kube_client *kc =
      lp_kube_client_new(&loop, kcfg, &(lp_http_client_options){.default_timeout_ms = 60000}, &err);
  lp_metrics *metrics = lp_metrics_new();

  /* 1: the framework alone */
  const lp_controller_def *const only_counter[] = {&counter, NULL};
  lp_controllers *m = start_manager(kc, NULL, only_counter, metrics, 1);
  double t0 = lp_clock_monotonic();
  wait_reconciled(n_objects, 120);
  double dt = lp_clock_monotonic() - t0;
  printf("framework reconciles:      %zu in %.3f s = %.0f reconciles/s (every NodeClaim queued at start)\n",
         reconciled, dt, reconciled / dt);
  int done = 0;
  lp_controllers_stop(m, stopped, &done);
  while (!done) uv_run(&loop, UV_RUN_ONCE);

  /* 2: the lifecycle controller in the steady state: every NodeClaim read, compared, nothing written */
  lp_script_host_config scfg = {
      .loop = &loop, .defaults_dir = LUAPROV_SOURCE_DIR, .modules = lp_contract_modules, .http = http};
  lp_problems problems = {0};
  lp_script_host *scripts = lp_script_host_new(&scfg, &problems);
  lp_cloudprovider *cp = lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = &loop,
                                                                         .scripts = scripts,
                                                                         .region = "cn-hangzhou",
                                                                         .cluster_id = "bench",
                                                                         .refresh_interval_s = -1});
  const lp_controller_def *const only_lifecycle[] = {&lp_nodeclaim_lifecycle_controller, NULL};
  /* pass 1 brings the seeded objects in line (owner references, labels: writes); pass 2, after a
   * restart of the manager, is the steady state: every NodeClaim read and compared, nothing written */
  uv_timer_t tick; /* wakes the loop so the quiet second is noticed */
  uv_timer_init(&loop, &tick);
  uv_timer_start(&tick, (uv_timer_cb)(void (*)(void))uv_update_time, 50, 50);
  for (int pass = 1; pass <= 2; pass++) {
    lp_metrics *pm = lp_metrics_new();
    m = start_manager(kc, cp, only_lifecycle, pm, 0);
    lp_metric *reconciles = lp_metrics_find(pm, "luaprov_controller_reconciles_total");
    t0 = lp_clock_monotonic();
    double total = 0, last_change = t0;
    while (lp_clock_monotonic() - last_change < 1.0 && lp_clock_monotonic() - t0 < 300) {
      double now_total = lp_metric_value(reconciles, LP_LABELS("nodeclaim.lifecycle", "success")) +
                         lp_metric_value(reconciles, LP_LABELS("nodeclaim.lifecycle", "requeue")) +
                         lp_metric_value(reconciles, LP_LABELS("nodeclaim.lifecycle", "error"));
      if (now_total != total) {
        total = now_total;
        last_change = lp_clock_monotonic();
      }
      uv_run(&loop, UV_RUN_ONCE);
    }
    dt = last_change - t0;
    printf("lifecycle reconciles, %s: %.0f in %.3f s = %.0f reconciles/s (%.0f ended in error)\n",
           pass == 1 ? "first pass (writes owner refs, labels)" : "steady state (reads only)   ", total, dt,
           total / dt, lp_metric_value(reconciles, LP_LABELS("nodeclaim.lifecycle", "error")));
    done = 0;
    lp_controllers_stop(m, stopped, &done);
    while (!done) uv_run(&loop, UV_RUN_ONCE);
    lp_metrics_free(pm);
  }
  uv_close((uv_handle_t *)&tick, NULL);

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

/* Shared by the benchmarks that run the simulators in a child process and drive the engine against
 * them over HTTP (bench_controllers.c, bench_drift.c, bench_provisioner.c, bench_consolidation.c):
 * starting and stopping that child; requests to it, one at a time and waited for (bench_request) or many
 * at once (bench_seed, to store thousands of objects before a measurement); the catalogue, ECSNodeClass
 * and NodePool of the provisioning benchmarks; the engine side (script host and CloudProvider,
 * Kubernetes client, a controller manager) and its teardown; and the readers of resident memory, heap
 * and CPU time behind the figures. Header-only, every function static
 * inline: each benchmark is its own executable. Loop thread only. */
#ifndef LUAPROV_SPEC_BENCH_SUPPORT_H
#define LUAPROV_SPEC_BENCH_SUPPORT_H

#include <jansson.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "contract/cloudprovider.h"
#include "contract/contracts.h"
#include "controller/manager.h"
#include "core/clock.h"
#include "core/log.h"
#include "http/client.h"
#include "kube/client.h"
#include "kube/config.h"
#include "script/host.h"
#include "sim/sim.h"
#include "sim_admin.h" /* sim_admin_reply, sim_admin_got_reply */

#define BENCH_URL_MAX     256 /* bytes of a simulator's base URL, NUL included */
#define BENCH_SEED_WINDOW 16  /* objects being seeded at once: the HTTP client's connections per host */

/* ---- the simulators in a child process ------------------------------------------------------ */

/* Forks a child that starts the simulators of the source tree on a loop of its own and serves them
 * until killed, so this process holds only the engine side and its memory and CPU figures are the
 * engine's. Fills kube_url and alibaba_url (BENCH_URL_MAX bytes each; alibaba_url may be NULL) with
 * the base URLs of the Kubernetes and Alibaba simulators; exits the process when the child could not
 * start them. Returns the child's pid, for bench_stop_simulators. */
static inline pid_t bench_start_simulators(char *kube_url, char *alibaba_url) {
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
    char line[2 * BENCH_URL_MAX + 2];
    int n = snprintf(line, sizeof line, "%s %s", lp_sim_url(sim, "kubernetes"), lp_sim_url(sim, "alibaba"));
    if (write(fds[1], line, (size_t)n) < 0) _exit(1);
    close(fds[1]);
    uv_run(&child, UV_RUN_DEFAULT);
    _exit(0);
  }
  close(fds[1]);
  char line[2 * BENCH_URL_MAX + 2], unused[BENCH_URL_MAX];
  ssize_t n = read(fds[0], line, sizeof line - 1);
  close(fds[0]);
  line[n > 0 ? n : 0] = '\0';
  if (sscanf(line, "%255s %255s", kube_url, alibaba_url ? alibaba_url : unused) != 2) {
    fprintf(stderr, "the simulators did not start\n");
    exit(1);
  }
  return pid;
}

/* Ends the child bench_start_simulators started and waits for it. */
static inline void bench_stop_simulators(pid_t pid) {
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
}

/* The start every benchmark shares: only errors logged (JSON, to stderr), the simulators started in a
 * child (bench_start_simulators), loop initialized with an HTTP client on it in *http. With
 * alibaba_url, the access key the Alibaba simulator accepts is put in the environment first, where the
 * Alibaba mapping reads its credentials. Returns the child's pid. */
static inline pid_t bench_start(uv_loop_t *loop, lp_http_client **http, char *kube_url, char *alibaba_url) {
  lp_log_configure(LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  if (alibaba_url) {
    setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "LTAI5simulatoraccess", 1);
    setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "simulator-secret-do-not-use", 1);
  }
  pid_t pid = bench_start_simulators(kube_url, alibaba_url);
  uv_loop_init(loop);
  lp_error *err = NULL;
  *http = lp_http_client_new(loop, NULL, &err);
  return pid;
}

/* ---- requests ------------------------------------------------------------------------------- */

/* The Content-Type the simulated Kubernetes API takes for method: a merge patch for PATCH, JSON else. */
static inline const char *bench_content_type(const char *method) {
  return strcmp(method, "PATCH") == 0 ? "application/merge-patch+json" : "application/json";
}

/* Sends METHOD base+path with body (JSON text, copied; NULL for none) as bench_content_type(method)
 * and returns at once; done gets the result. */
static inline void bench_send(lp_http_client *http, const char *base, const char *method, const char *path,
                              const char *body, lp_http_done_fn done, void *ud) {
  char url[512];
  snprintf(url, sizeof url, "%s%s", base, path);
  lp_http_header ct = {"Content-Type", (char *)bench_content_type(method)}; /* the client copies it */
  lp_http_client_request(http,
                         &(lp_http_request_opts){.method = method,
                                                 .url = url,
                                                 .headers = &ct,
                                                 .nheaders = 1,
                                                 .body = body,
                                                 .body_len = body ? strlen(body) : 0},
                         done, ud);
}

/* METHOD base+path with body (stolen; NULL for none); runs loop until the answer is in and returns
 * it decoded (NULL when not JSON; the caller decrefs), its status in *status when status is not NULL. */
static inline json_t *bench_request(uv_loop_t *loop, lp_http_client *http, const char *base,
                                    const char *method, const char *path, json_t *body, long *status) {
  char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  sim_admin_reply r = {0};
  bench_send(http, base, method, path, text, sim_admin_got_reply, &r);
  while (!r.done) uv_run(loop, UV_RUN_ONCE);
  free(text);
  if (status) *status = r.status;
  json_t *v = json_loads(r.body, JSON_DECODE_ANY, NULL);
  free(r.body);
  return v;
}

/* ---- seeding -------------------------------------------------------------------------------- */

/* One request of an object being seeded. */
typedef struct bench_seed_request {
  const char *method;
  char path[256]; /* under the seeding's base_url */
  char *body;     /* JSON text, malloc'd (the seeding frees it), or NULL */
} bench_seed_request;

typedef struct bench_seeding bench_seeding;

/* Fills *req with request step (0 first; 1 once step 0 succeeded, ...) of object i; returns 0 when
 * object i has no such step, that is when it is stored. */
typedef int (*bench_seed_fn)(bench_seeding *s, size_t i, unsigned step, bench_seed_request *req);

/* Stores objects 0..total-1, BENCH_SEED_WINDOW at a time, each with the requests request gives for it
 * in turn. An answer >= 300 counts the object in failed and ends it. Set the fields up to ud; the
 * rest start at zero. */
struct bench_seeding {
  lp_http_client *http;
  const char *base_url;
  bench_seed_fn request;
  void *ud; /* the benchmark's, for request */
  size_t total;
  size_t next, in_flight, failed; /* objects started, being seeded, failed */
};

typedef struct bench_seed_object {
  bench_seeding *s;
  size_t i;
  unsigned step;
} bench_seed_object;

static inline void bench_seed_more(bench_seeding *s);
static inline void bench_seed_answered(lp_http_result *r, void *ud);

/* Sends o's current step; 0 when it has none. */
static inline int bench_seed_send(bench_seed_object *o) {
  bench_seeding *s = o->s;
  bench_seed_request req = {0};
  if (!s->request(s, o->i, o->step, &req)) return 0;
  bench_send(s->http, s->base_url, req.method, req.path, req.body, bench_seed_answered, o);
  free(req.body);
  return 1;
}

static inline void bench_seed_answered(lp_http_result *r, void *ud) {
  bench_seed_object *o = ud;
  bench_seeding *s = o->s;
  int ok = r->status < 300;
  lp_http_result_free(r);
  o->step++;
  if (ok && bench_seed_send(o)) return;
  if (!ok) s->failed++;
  free(o);
  s->in_flight--;
  bench_seed_more(s);
}

static inline void bench_seed_more(bench_seeding *s) {
  while (s->in_flight < BENCH_SEED_WINDOW && s->next < s->total) {
    bench_seed_object *o = lp_xcalloc(1, sizeof *o);
    o->s = s;
    o->i = s->next++;
    s->in_flight++;
    if (!bench_seed_send(o)) {
      s->in_flight--;
      free(o);
    }
  }
}

/* Runs the seeding s on loop until every object is stored or failed. Returns the seconds it took. */
static inline double bench_seed(uv_loop_t *loop, bench_seeding *s) {
  double t0 = lp_clock_monotonic();
  bench_seed_more(s);
  while (s->in_flight > 0 || s->next < s->total) uv_run(loop, UV_RUN_ONCE);
  return lp_clock_monotonic() - t0;
}

/* ---- the engine side ------------------------------------------------------------------------ */

/* ---- the cluster the benchmarks share -------------------------------------------------------- */

/* A synthetic catalogue of n_types instance types in 4 zones (printed), the ECSNodeClass "default"
 * selecting the simulated account's vSwitches, security groups and image, and the on-demand NodePool
 * "default" on it. */
static inline void bench_catalogue_and_pool(uv_loop_t *loop, lp_http_client *http, const char *kube_url,
                                            const char *alibaba_url, int n_types) {
  long status = 0;
  json_t *summary = bench_request(loop, http, alibaba_url, "POST", "/_sim/catalogue",
                                  json_pack("{s:i, s:i}", "instance_types", n_types, "zones", 4), &status);
  printf("catalogue: %lld instance types in 4 zones (HTTP %ld)\n",
         json_integer_value(json_object_get(summary, "instance_types")), status);
  json_decref(summary);
  json_decref(bench_request(
      loop, http, kube_url, "POST", "/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses",
      json_pack("{s:s, s:s, s:{s:s}, s:{s:[{s:{s:s}}], s:[{s:{s:s}}], s:[{s:s}]}}", "apiVersion",
                "karpenter.alibabacloud.com/v1alpha1", "kind", "ECSNodeClass", "metadata", "name", "default",
                "spec", "vSwitchSelectorTerms", "tags", "karpenter.sh/discovery", "luaprov-sim",
                "securityGroupSelectorTerms", "tags", "karpenter.sh/discovery", "luaprov-sim",
                "imageSelectorTerms", "alias", "AlibabaCloudLinux3"),
      NULL));
  json_decref(bench_request(
      loop, http, kube_url, "POST", "/apis/karpenter.sh/v1/nodepools",
      json_pack("{s:s, s:s, s:{s:s}, s:{s:{s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:[s]}]}}}}", "apiVersion",
                "karpenter.sh/v1", "kind", "NodePool", "metadata", "name", "default", "spec", "template",
                "spec", "nodeClassRef", "group", "karpenter.alibabacloud.com", "kind", "ECSNodeClass", "name",
                "default", "requirements", "key", "karpenter.sh/capacity-type", "operator", "In", "values",
                "on-demand"),
      NULL));
}

/* A script host on loop over the source tree's scripts with the contract modules (their HTTP calls on
 * http), and a CloudProvider over it for cluster_id in cn-hangzhou, its mapping pointed at endpoint
 * (NULL: the mapping's own), without the background refresh. *scripts gets the host; bench_close
 * closes both. */
static inline lp_cloudprovider *bench_cloudprovider(uv_loop_t *loop, lp_http_client *http,
                                                    const char *cluster_id, const char *endpoint,
                                                    lp_script_host **scripts) {
  lp_problems problems = {0};
  *scripts = lp_script_host_new(
      &(lp_script_host_config){
          .loop = loop, .defaults_dir = LUAPROV_SOURCE_DIR, .modules = lp_contract_modules, .http = http},
      &problems);
  return lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = loop,
                                                         .scripts = *scripts,
                                                         .cluster_id = cluster_id,
                                                         .endpoint = endpoint,
                                                         .refresh_interval_s = -1});
}

/* A Kubernetes client on loop for the simulated API at kube_url, requests timing out after 60 s (a
 * list of thousands of objects takes seconds). *config gets its configuration; bench_close frees both. */
static inline lp_kube_client *bench_kube_client(uv_loop_t *loop, const char *kube_url,
                                                lp_kube_config **config) {
  lp_error *err = NULL;
  *config = lp_kube_config_for_server(kube_url, NULL);
  return lp_kube_client_new(loop, *config, &(lp_http_client_options){.default_timeout_ms = 60000}, &err);
}

/* Closes the CloudProvider, script host, Kubernetes client and HTTP client, runs loop until they are
 * closed, and frees the Kubernetes configuration: the end of a benchmark, its managers stopped. */
static inline void bench_close(uv_loop_t *loop, lp_cloudprovider *cloud, lp_script_host *scripts,
                               lp_kube_client *kube, lp_kube_config *kube_config, lp_http_client *http) {
  lp_cloudprovider_free(cloud);
  lp_script_host_close(scripts, NULL, NULL);
  lp_kube_client_close(kube, NULL, NULL);
  lp_http_client_close(http, NULL, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
  lp_kube_config_free(kube_config);
}

/* Starts a manager running defs (NULL-terminated) on loop; exits the process when it cannot start. */
static inline lp_controllers *bench_start_manager(uv_loop_t *loop, lp_kube_client *kube,
                                                  lp_cloudprovider *cloud,
                                                  const lp_controller_def *const *defs, lp_metrics *metrics) {
  lp_error *err = NULL;
  lp_controllers *m = lp_controllers_start(
      &(lp_controllers_config){
          .loop = loop, .kube = kube, .cloud = cloud, .metrics = metrics, .controllers = defs},
      &err);
  if (!m) {
    fprintf(stderr, "manager: %s\n", err ? err->message : "?");
    exit(1);
  }
  return m;
}

static inline void bench_manager_stopped(void *ud) {
  *(int *)ud = 1;
}

/* Stops m and runs loop until it has. */
static inline void bench_stop_manager(uv_loop_t *loop, lp_controllers *m) {
  int done = 0;
  lp_controllers_stop(m, bench_manager_stopped, &done);
  while (!done) uv_run(loop, UV_RUN_ONCE);
}

static inline void bench_tick(uv_timer_t *t) {
  (void)t; /* firing is the point: uv_run(UV_RUN_ONCE) returns and its caller looks at the clock */
}

/* Starts tick (the caller's, closed by the caller) firing every 50 ms on loop, so a loop run with
 * UV_RUN_ONCE until nothing happened for a while notices the quiet time pass. */
static inline void bench_ticker_start(uv_loop_t *loop, uv_timer_t *tick) {
  uv_timer_init(loop, tick);
  uv_timer_start(tick, bench_tick, 50, 50);
}

/* ---- measuring ------------------------------------------------------------------------------ */

/* This process's resident memory (VmRSS) in KiB, or -1. */
static inline long bench_rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld", &kib) == 1) break;
  if (f) fclose(f);
  return kib;
}

/* MiB that malloc has handed out and not had back (mallinfo2: walks the heap, so not too often): the
 * blocks in its arenas, without the freed pages RSS keeps, and with with_mmapped also the blocks too
 * large for them, each mmapped on its own. */
static inline double bench_heap_mib(int with_mmapped) {
  struct mallinfo2 mi = mallinfo2();
  return (mi.uordblks + (with_mmapped ? mi.hblkhd : 0)) / 1048576.0;
}

/* User plus system CPU seconds this process has used. */
static inline double bench_cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

#endif

/* HTTP client throughput and latency against the engine's own HTTP server on loopback, with 1, 16 and
 * 64 requests in flight, each beside wrk (one thread, as many connections) against the same server as
 * the reference, and the client's rate as a fraction of wrk's.
 * The server runs in a child process on a loop of its own because it is another process for wrk too:
 * the client and wrk then each have one thread against the same one-thread server. With the server in
 * this process the client's figure would also pay for the server's work and wrk's would not, which
 * measures the server twice rather than the client against wrk.
 * Prints figures; never fails on time. Without wrk on PATH it says so and prints no reference. */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/cache.h"
#include "core/clock.h"
#include "core/log.h"
#include "http/client.h"
#include "http/server.h"

#define WRK_SECONDS "3"

extern char **environ;

static uv_loop_t loop;
static lp_http_client *client;
static char url[128];

static void serve_bench(const lp_http_request *req, lp_http_response *res, void *ud) {
  static const char body[] =
      "{\"kind\":\"Status\",\"status\":\"Success\",\"code\":200,\"padding\":\"xxxxxxxx\"}";
  lp_http_respond(res, 200, "application/json", body, sizeof body - 1);
}

/* Forks the server; returns its pid and fills url. The child serves until killed. */
static pid_t start_server(void) {
  int fds[2];
  if (pipe(fds) != 0) abort();
  pid_t pid = fork();
  if (pid < 0) abort();
  if (pid == 0) {
    close(fds[0]);
    uv_loop_t child;
    uv_loop_init(&child);
    lp_http_server *server = lp_http_server_new(&child, NULL);
    lp_http_server_route(server, "GET", "/bench", serve_bench, NULL);
    lp_error *err = NULL;
    if (lp_http_server_listen(server, "127.0.0.1", 0, &err) != 0) _exit(1);
    int port = lp_http_server_port(server);
    if (write(fds[1], &port, sizeof port) != (ssize_t)sizeof port) _exit(1);
    close(fds[1]);
    uv_run(&child, UV_RUN_DEFAULT);
    _exit(0);
  }
  close(fds[1]);
  int port = 0;
  if (read(fds[0], &port, sizeof port) != (ssize_t)sizeof port) {
    fprintf(stderr, "bench_http_client: the server did not start\n");
    exit(1);
  }
  close(fds[0]);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/bench", port);
  return pid;
}

typedef struct figures {
  double rate, p50_ms, p99_ms;
} figures;

typedef struct run run;
typedef struct slot {
  run *r;
  double started;
} slot;

struct run {
  int total, started, finished, failed;
  double *latency;
  slot *slots; /* one per request in flight, reused */
};

static void issue(run *r, slot *s);

static void on_done(lp_http_result *res, void *ud) {
  slot *s = ud;
  run *r = s->r;
  r->latency[r->finished++] = lp_clock_monotonic() - s->started;
  if (res->error || res->status != 200) r->failed++;
  lp_http_result_free(res);
  if (r->started < r->total) issue(r, s);
}

static void issue(run *r, slot *s) {
  lp_http_request_opts req = {.method = "GET", .url = url, .idempotent = -1, .max_retries = -1};
  r->started++;
  s->r = r;
  s->started = lp_clock_monotonic();
  lp_http_client_request(client, &req, on_done, s);
}

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Keeps in_flight requests outstanding until total have completed. */
static figures measure(int in_flight, int total, int *failed) {
  run r = {.total = total};
  r.latency = calloc((size_t)total, sizeof *r.latency);
  r.slots = calloc((size_t)in_flight, sizeof *r.slots);
  double t0 = lp_clock_monotonic();
  for (int i = 0; i < in_flight && r.started < total; i++) issue(&r, &r.slots[i]);
  while (r.finished < total) uv_run(&loop, UV_RUN_ONCE);
  double elapsed = lp_clock_monotonic() - t0;
  qsort(r.latency, (size_t)total, sizeof *r.latency, compare);
  figures f = {total / elapsed, r.latency[total / 2] * 1000, r.latency[(int)(total * 0.99)] * 1000};
  *failed = r.failed;
  free(r.latency);
  free(r.slots);
  return f;
}

/* The pct line of wrk's "Latency Distribution" ("     50%  318.00us") in milliseconds; -1 when absent.
 * Only that section: other lines carry percentages too ("+/- Stdev 85.50%"). */
static double wrk_percentile(const char *out, double pct) {
  const char *p = strstr(out, "Latency Distribution");
  while (p && (p = strchr(p, '\n'))) {
    double at, v;
    char unit[4] = "";
    if (sscanf(++p, " %lf%% %lf%3s", &at, &v, unit) != 3) break; /* past the section */
    if (at == pct) return strcmp(unit, "us") == 0 ? v / 1000 : strcmp(unit, "s") == 0 ? v * 1000 : v;
  }
  return -1;
}

/* Runs wrk with one thread and `connections` connections against url and reads its figures.
 * Returns 0 when they were read; otherwise -1 with why there are none in note. Errors wrk counted
 * (non-2xx answers, socket errors) are also put in note. */
static int run_wrk(int connections, figures *f, char *note, size_t note_size) {
  char conns[16];
  snprintf(conns, sizeof conns, "%d", connections);
  char *args[] = {"wrk", "-t1", "-c", conns, "-d" WRK_SECONDS "s", "--latency", url, NULL};
  int fds[2];
  if (pipe(fds) != 0) abort();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  pid_t pid;
  int rc = posix_spawnp(&pid, "wrk", &actions, NULL, args, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    snprintf(note, note_size, "wrk could not run (%s): tools/install-deps.sh bench installs it",
             strerror(rc));
    return -1;
  }
  char out[8192], rest[512]; /* past 8 KiB (never seen) the output is drained so wrk can exit */
  size_t len = 0;
  for (;;) {
    int full = len == sizeof out - 1;
    ssize_t n = read(fds[0], full ? rest : out + len, full ? sizeof rest : sizeof out - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (!full) len += (size_t)n;
  }
  out[len] = '\0';
  close(fds[0]);
  int status;
  waitpid(pid, &status, 0);
  const char *rate = strstr(out, "Requests/sec:");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !rate) {
    snprintf(note, note_size, "wrk failed; its output:\n%s", out);
    return -1;
  }
  f->rate = strtod(rate + strlen("Requests/sec:"), NULL);
  f->p50_ms = wrk_percentile(out, 50);
  f->p99_ms = wrk_percentile(out, 99);
  const char *errors = strstr(out, "Non-2xx");
  if (!errors) errors = strstr(out, "Socket errors");
  if (errors) snprintf(note, note_size, "wrk reported %.*s", (int)strcspn(errors, "\n"), errors);
  return 0;
}

int main(int argc, char **argv) {
  int total = argc > 1 ? atoi(argv[1]) : 20000;
  lp_log_configure(LP_LOG_WARN, LP_LOG_FORMAT_JSON, 2);
  pid_t server = start_server();
  uv_loop_init(&loop);
  lp_error *err = NULL;
  lp_http_client_options opts = {.max_per_host = 64, .max_total = 128};
  client = lp_http_client_new(&loop, &opts, &err);

  printf("HTTP client and wrk -t1 -d%ss -> luaprov HTTP server in a child process, loopback, keep-alive\n"
         "(client: %d requests per row, a quarter of them at 1 in flight)\n",
         WRK_SECONDS, total);
  printf("  in flight   client req/s  p50 ms  p99 ms   wrk req/s  p50 ms  p99 ms   client/wrk\n");
  int in_flight[] = {1, 16, 64};
  for (int i = 0; i < 3; i++) {
    int failed = 0;
    figures c = measure(in_flight[i], in_flight[i] == 1 ? total / 4 : total, &failed), w;
    char note[8300] = "";
    printf("  %9d   %12.0f  %6.3f  %6.2f", in_flight[i], c.rate, c.p50_ms, c.p99_ms);
    if (run_wrk(in_flight[i], &w, note, sizeof note) == 0)
      printf("   %9.0f  %6.3f  %6.2f   %9.2fx\n", w.rate, w.p50_ms, w.p99_ms, c.rate / w.rate);
    else
      printf("   (no wrk figure, no ratio)\n");
    if (failed) printf("      %d client requests failed\n", failed);
    if (note[0]) printf("      %s\n", note);
  }

  lp_http_client_close(client, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  lp_cache_registry_clear();
  kill(server, SIGTERM);
  waitpid(server, NULL, 0);
  return 0;
}

/* HTTP client throughput and latency against the engine's own HTTP server on loopback, with 1, 16 and
 * 64 requests in flight, then wrk against the same server as the reference for what the server can
 * take. Both run in this process's loop (wrk as a child), so the figures share one machine's two
 * cores: compare them with each other, not with other machines. Prints figures; never fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cache.h"
#include "core/clock.h"
#include "core/log.h"
#include "http/client.h"
#include "http/server.h"

static uv_loop_t loop;
static lp_http_client *client;
static char url[128];

static void serve_bench(const lp_http_request *req, lp_http_response *res, void *ud) {
  static const char body[] =
      "{\"kind\":\"Status\",\"status\":\"Success\",\"code\":200,\"padding\":\"xxxxxxxx\"}";
  lp_http_respond(res, 200, "application/json", body, sizeof body - 1);
}

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
static void measure(int in_flight, int total) {
  run r = {.total = total};
  r.latency = calloc((size_t)total, sizeof *r.latency);
  r.slots = calloc((size_t)in_flight, sizeof *r.slots);
  double t0 = lp_clock_monotonic();
  for (int i = 0; i < in_flight && r.started < total; i++) issue(&r, &r.slots[i]);
  while (r.finished < total) uv_run(&loop, UV_RUN_ONCE);
  double elapsed = lp_clock_monotonic() - t0;
  qsort(r.latency, (size_t)total, sizeof *r.latency, compare);
  printf("  %2d in flight: %8.0f req/s   p50 %6.3f ms   p99 %6.3f ms   (%d requests, %d failed)\n", in_flight,
         total / elapsed, r.latency[total / 2] * 1000, r.latency[(int)(total * 0.99)] * 1000, total,
         r.failed);
  free(r.latency);
  free(r.slots);
}

static int wrk_done;
static void wrk_exited(uv_process_t *p, int64_t status, int signal) {
  wrk_done = 1;
  uv_close((uv_handle_t *)p, NULL);
}

static void run_wrk(int connections) {
  char conns[16];
  snprintf(conns, sizeof conns, "%d", connections);
  char *args[] = {"wrk", "-t1", "-c", conns, "-d3s", "--latency", url, NULL};
  uv_stdio_container_t stdio[3] = {
      {.flags = UV_IGNORE}, {.flags = UV_INHERIT_FD, .data.fd = 1}, {.flags = UV_INHERIT_FD, .data.fd = 2}};
  uv_process_options_t opts = {
      .file = "wrk", .args = args, .exit_cb = wrk_exited, .stdio_count = 3, .stdio = stdio};
  static uv_process_t proc;
  wrk_done = 0;
  fflush(stdout);
  int rc = uv_spawn(&loop, &proc, &opts);
  if (rc != 0) {
    printf("  wrk not available (%s): install it with tools/install-deps.sh bench\n", uv_strerror(rc));
    return;
  }
  while (!wrk_done) uv_run(&loop, UV_RUN_ONCE);
}

int main(int argc, char **argv) {
  int total = argc > 1 ? atoi(argv[1]) : 20000;
  lp_log_configure(LP_LOG_WARN, LP_LOG_FORMAT_JSON, 2);
  uv_loop_init(&loop);
  lp_http_server *server = lp_http_server_new(&loop, NULL);
  lp_http_server_route(server, "GET", "/bench", serve_bench, NULL);
  lp_error *err = NULL;
  if (lp_http_server_listen(server, "127.0.0.1", 0, &err) != 0) return 1;
  snprintf(url, sizeof url, "http://127.0.0.1:%d/bench", lp_http_server_port(server));
  lp_http_client_options opts = {.max_per_host = 64, .max_total = 128};
  client = lp_http_client_new(&loop, &opts, &err);

  printf("HTTP client -> luaprov HTTP server, loopback, keep-alive (%d requests per row)\n", total);
  measure(1, total / 4);
  measure(16, total);
  measure(64, total);
  int wrk_conns[] = {1, 16, 64};
  for (int i = 0; i < 3; i++) {
    printf("wrk -t1 -c%d -d3s against the same server:\n", wrk_conns[i]);
    run_wrk(wrk_conns[i]);
  }

  lp_http_client_close(client, NULL, NULL);
  lp_http_server_close(server, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  lp_cache_registry_clear();
  return 0;
}

/* The HTTP client against the engine's own HTTP server on a loopback port: every test starts a loop,
 * a server with the routes below and a client, runs until its requests are done, then closes both
 * and checks that the loop has no handle left (uv_loop_close succeeds). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "check.h"
#include "core/buf.h"
#include "core/metrics.h"
#include "http/client.h"
#include "http/server.h"

#define UPLOAD_BYTES   ((size_t)4 << 20)
#define DOWNLOAD_BYTES ((size_t)8 << 20)
#define MAX_REMOTES    256

/* ---- the server side: routes and what they observed ---- */

static struct {
  int flaky_calls, flaky_failures;
  int throttle_calls;
  const char *retry_after;
  int upload_ok, upload_typed;
  char user_agent[64], accept[64];
  int chunks_written;
  int slow_current, slow_max;
  char remotes[MAX_REMOTES][64];
  int nremotes;
} srv;

static unsigned char *upload_data, *download_data;

static void fill_pattern(unsigned char *p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    p[i] = (unsigned char)(seed >> 24);
  }
}

static void remember_remote(const char *addr) {
  for (int i = 0; i < srv.nremotes; i++)
    if (strcmp(srv.remotes[i], addr) == 0) return;
  if (srv.nremotes < MAX_REMOTES) snprintf(srv.remotes[srv.nremotes++], sizeof srv.remotes[0], "%s", addr);
}

static void h_hello(const lp_http_request *req, lp_http_response *res, void *ud) {
  remember_remote(req->remote_addr);
  const char *ua = lp_http_request_header(req, "user-agent"), *accept = lp_http_request_header(req, "accept");
  snprintf(srv.user_agent, sizeof srv.user_agent, "%s", ua ? ua : "");
  snprintf(srv.accept, sizeof srv.accept, "%s", accept ? accept : "");
  lp_http_response_header(res, "X-Test", "yes");
  lp_http_respond(res, 200, "text/plain", "hello world", 11);
}

/* Never answers; the client's timeout, cancel or close ends the connection, and with it res. */
static void h_hang(const lp_http_request *req, lp_http_response *res, void *ud) {}

static void h_flaky(const lp_http_request *req, lp_http_response *res, void *ud) {
  if (++srv.flaky_calls <= srv.flaky_failures)
    lp_http_respond(res, 503, "text/plain", "busy", 4);
  else
    lp_http_respond(res, 200, "text/plain", "recovered", 9);
}

static void h_throttle(const lp_http_request *req, lp_http_response *res, void *ud) {
  if (++srv.throttle_calls == 1) {
    lp_http_response_header(res, "Retry-After", srv.retry_after);
    lp_http_respond(res, 429, "text/plain", "slow down", 9);
  } else {
    lp_http_respond(res, 200, "text/plain", "ok", 2);
  }
}

static void h_echo(const lp_http_request *req, lp_http_response *res, void *ud) {
  srv.upload_ok = req->body_len == UPLOAD_BYTES && memcmp(req->body, upload_data, UPLOAD_BYTES) == 0;
  srv.upload_typed = lp_http_request_header(req, "content-type") != NULL;
  lp_http_respond(res, 200, "application/octet-stream", download_data, DOWNLOAD_BYTES);
}

static void h_big(const lp_http_request *req, lp_http_response *res, void *ud) {
  if (strcmp(req->query, "chunked") != 0) {
    lp_http_respond(res, 200, "application/octet-stream", download_data, (size_t)1 << 20);
    return;
  }
  lp_http_stream_begin(res, 200, "application/octet-stream");
  for (size_t off = 0; off < ((size_t)1 << 20); off += 65536)
    lp_http_stream_write(res, download_data + off, 65536);
  lp_http_stream_end(res);
}

/* A response finished later from a timer: streams chunks (/stream) or answers after a delay. */
typedef struct later {
  uv_timer_t timer;
  lp_http_response *res; /* NULL once the connection has gone */
  int left;
} later;

static void later_free(uv_handle_t *h) {
  free(h->data);
}

static void later_gone(lp_http_response *res, void *ud) {
  ((later *)ud)->res = NULL;
}

static void stream_tick(uv_timer_t *t) {
  later *l = t->data;
  if (l->res) {
    char chunk[16];
    int n = snprintf(chunk, sizeof chunk, "chunk%d", srv.chunks_written);
    int gone = lp_http_stream_write(l->res, chunk, (size_t)n) != 0;
    srv.chunks_written += !gone;
    if (gone || --l->left == 0) {
      lp_http_stream_end(l->res);
      l->res = NULL;
    }
  }
  if (!l->res) uv_close((uv_handle_t *)t, later_free);
}

static uv_loop_t *server_loop;

static void start_later(lp_http_response *res, int left, uv_timer_cb cb, uint64_t every_ms) {
  later *l = calloc(1, sizeof *l);
  l->res = res;
  l->left = left;
  uv_timer_init(server_loop, &l->timer);
  l->timer.data = l;
  lp_http_response_on_close(res, later_gone, l);
  uv_timer_start(&l->timer, cb, every_ms, every_ms);
}

static void h_stream(const lp_http_request *req, lp_http_response *res, void *ud) {
  lp_http_stream_begin(res, 200, "text/plain");
  start_later(res, 5, stream_tick, 20);
}

static void slow_tick(uv_timer_t *t) {
  later *l = t->data;
  srv.slow_current--;
  if (l->res) lp_http_respond(l->res, 200, "text/plain", "slow", 4);
  uv_close((uv_handle_t *)t, later_free);
}

static void h_slow(const lp_http_request *req, lp_http_response *res, void *ud) {
  remember_remote(req->remote_addr);
  if (++srv.slow_current > srv.slow_max) srv.slow_max = srv.slow_current;
  start_later(res, 1, slow_tick, 3);
}

static void add_routes(lp_http_server *s) {
  lp_http_server_route(s, "GET", "/hello", h_hello, NULL);
  lp_http_server_route(s, NULL, "/hang", h_hang, NULL);
  lp_http_server_route(s, NULL, "/flaky", h_flaky, NULL);
  lp_http_server_route(s, "GET", "/throttle", h_throttle, NULL);
  lp_http_server_route(s, "POST", "/echo", h_echo, NULL);
  lp_http_server_route(s, "GET", "/big", h_big, NULL);
  lp_http_server_route(s, "GET", "/stream", h_stream, NULL);
  lp_http_server_route(s, "GET", "/slow", h_slow, NULL);
}

/* ---- the client side ---- */

typedef struct env {
  uv_loop_t loop;
  uv_timer_t watchdog;
  int expired;
  lp_http_server *server;
  lp_http_client *client; /* NULL once a test has closed it */
  int port;
  int done; /* done callbacks seen */
  int client_closed, server_closed;
} env;

typedef struct slot {
  env *e;
  lp_http_result *r;
  int calls;
} slot;

/* Results live until the end of the test; env_finish frees them. */
static lp_http_result *results[512];
static int nresults;

static void on_done(lp_http_result *r, void *ud) {
  slot *s = ud;
  results[nresults++] = r;
  s->r = r;
  s->calls++;
  s->e->done++;
}

static void env_start(env *e, const lp_http_client_options *copts) {
  memset(e, 0, sizeof *e);
  memset(&srv, 0, sizeof srv);
  uv_loop_init(&e->loop);
  server_loop = &e->loop;
  lp_http_server_options so = {.max_body_bytes = (size_t)16 << 20};
  e->server = lp_http_server_new(&e->loop, &so);
  add_routes(e->server);
  lp_error *err = NULL;
  CHECK_INT(lp_http_server_listen(e->server, "127.0.0.1", 0, &err), 0);
  e->port = lp_http_server_port(e->server);
  lp_http_client_options o = copts ? *copts : (lp_http_client_options){0};
  if (!o.retry_base_ms) o.retry_base_ms = 10; /* keep retry tests fast */
  if (!o.retry_max_ms) o.retry_max_ms = 2000;
  e->client = lp_http_client_new(&e->loop, &o, &err);
  CHECK(e->client != NULL);
  uv_timer_init(&e->loop, &e->watchdog);
  e->watchdog.data = e;
}

static void on_watchdog(uv_timer_t *t) {
  ((env *)t->data)->expired = 1;
}

/* Runs the loop until *counter reaches target; a test that takes longer than max_ms fails. */
static void run_until(env *e, const int *counter, int target, uint64_t max_ms) {
  e->expired = 0;
  uv_timer_start(&e->watchdog, on_watchdog, max_ms, 0);
  while (*counter < target && !e->expired) uv_run(&e->loop, UV_RUN_ONCE);
  uv_timer_stop(&e->watchdog);
  CHECK(!e->expired);
}

static void count_up(void *ud) {
  (*(int *)ud)++;
}

static void env_finish(env *e) {
  if (e->client)
    lp_http_client_close(e->client, count_up, &e->client_closed);
  else
    e->client_closed = 1;
  lp_http_server_close(e->server, count_up, &e->server_closed);
  uv_close((uv_handle_t *)&e->watchdog, NULL);
  uv_run(&e->loop, UV_RUN_DEFAULT);
  CHECK_INT(e->client_closed, 1);
  CHECK_INT(e->server_closed, 1);
  CHECK_INT(uv_loop_close(&e->loop), 0); /* every handle of client and server was closed */
  while (nresults > 0) lp_http_result_free(results[--nresults]);
}

static lp_http_call *get(env *e, slot *s, const char *path, lp_http_request_opts *req) {
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", e->port, path);
  lp_http_request_opts copy = LP_HTTP_REQUEST_OPTS_INIT;
  if (req) copy = *req;
  copy.url = url;
  s->e = e;
  return lp_http_client_request(e->client, &copy, on_done, s);
}

/* One request, run to completion; req NULL for the defaults. */
static lp_http_result *fetch(env *e, const char *path, lp_http_request_opts *req) {
  slot s = {0};
  get(e, &s, path, req);
  run_until(e, &s.calls, 1, 20000);
  return s.r;
}

static int error_is(const lp_http_result *r, const char *code) {
  return r && r->error && strcmp(r->error->code, code) == 0;
}

static void after_ms(env *e, uv_timer_t *t, uint64_t ms, uv_timer_cb cb, void *data) {
  uv_timer_init(&e->loop, t);
  t->data = data;
  uv_timer_start(t, cb, ms, 0);
}

static double counter_value(const char *name, const char *const *labels, const char *const *values) {
  return lp_metric_value(lp_metrics_counter(lp_metrics_default(), name, NULL, labels), values);
}

/* ---- tests ---- */

static void test_success(void) {
  env e;
  env_start(&e, NULL);
  slot s = {0}, no_url = {.e = &e}, ftp = {.e = &e};
  lp_http_header accept = {"Accept", "text/plain"};
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  req.headers = &accept;
  req.nheaders = 1;
  get(&e, &s, "/hello?x=1", &req);
  lp_http_request_opts bad = LP_HTTP_REQUEST_OPTS_INIT;
  lp_http_client_request(e.client, &bad, on_done, &no_url);
  bad.url = "ftp://127.0.0.1/file";
  lp_http_client_request(e.client, &bad, on_done, &ftp);
  CHECK_INT(s.calls + no_url.calls + ftp.calls, 0); /* never from inside lp_http_client_request */
  CHECK_INT(lp_http_client_in_flight(e.client), 3);
  run_until(&e, &e.done, 3, 5000);
  CHECK_INT(s.calls, 1);
  CHECK(s.r->error == NULL);
  CHECK_INT(s.r->status, 200);
  CHECK_STR(s.r->body, "hello world");
  CHECK_INT(s.r->body_len, 11);
  CHECK_STR(lp_http_result_header(s.r, "X-Test"), "yes");
  CHECK_CONTAINS(lp_http_result_header(s.r, "content-type"), "text/plain");
  int lower = 1;
  for (size_t i = 0; i < s.r->nheaders; i++)
    for (const char *c = s.r->headers[i].name; *c; c++) lower &= !(*c >= 'A' && *c <= 'Z');
  CHECK(lower && s.r->nheaders >= 2);
  CHECK_INT(s.r->attempts, 1);
  CHECK_INT(s.r->http_version, 1);
  CHECK_STR(srv.accept, "text/plain");
  CHECK_CONTAINS(srv.user_agent, "luaprov/");
  CHECK(error_is(no_url.r, "Transport"));
  CHECK(error_is(ftp.r, "Transport")); /* only http and https are allowed */
  CHECK_INT(lp_http_client_in_flight(e.client), 0);
  env_finish(&e);
}

static int unused_port(uv_loop_t *loop) {
  uv_tcp_t tcp;
  struct sockaddr_in addr;
  struct sockaddr_storage bound;
  int len = sizeof bound;
  uv_ip4_addr("127.0.0.1", 0, &addr);
  uv_tcp_init(loop, &tcp);
  uv_tcp_bind(&tcp, (const struct sockaddr *)&addr, 0);
  uv_tcp_getsockname(&tcp, (struct sockaddr *)&bound, &len);
  uv_close((uv_handle_t *)&tcp, NULL);
  uv_run(loop, UV_RUN_NOWAIT);
  return ntohs(((struct sockaddr_in *)&bound)->sin_port);
}

static void test_transport_errors(void) {
  env e;
  env_start(&e, NULL);
  slot once = {.e = &e}, twice = {.e = &e}, refused = {.e = &e};
  char url[256];
  snprintf(url, sizeof url, "http://user:s3cret@127.0.0.1:%d/hang?Signature=abc123", e.port);
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  req.url = url;
  req.timeout_ms = 200;
  req.max_retries = 0;
  lp_http_client_request(e.client, &req, on_done, &once);
  req.max_retries = 1; /* a timeout is transient: an idempotent request tries again */
  lp_http_client_request(e.client, &req, on_done, &twice);
  char refused_url[128];
  snprintf(refused_url, sizeof refused_url, "http://127.0.0.1:%d/", unused_port(&e.loop));
  req.url = refused_url;
  req.max_retries = 2;
  lp_http_client_request(e.client, &req, on_done, &refused);
  run_until(&e, &e.done, 3, 5000);
  CHECK(error_is(once.r, "Timeout"));
  CHECK_INT(once.r->status, 0);
  CHECK_INT(once.r->attempts, 1);
  CHECK(once.r->elapsed_s >= 0.19 && once.r->elapsed_s < 2);
  char expect[128];
  snprintf(expect, sizeof expect, "GET http://127.0.0.1:%d/hang: ", e.port);
  CHECK_CONTAINS(once.r->error->message, expect);
  CHECK_CONTAINS(once.r->error->message, "imed out"); /* curl's own words follow */
  CHECK(!strstr(once.r->error->message, "abc123") && !strstr(once.r->error->message, "s3cret"));
  CHECK(error_is(twice.r, "Timeout"));
  CHECK_INT(twice.r->attempts, 2);
  CHECK(twice.r->elapsed_s >= 0.39);
  CHECK(error_is(refused.r, "ConnectFailed"));
  CHECK_INT(refused.r->attempts, 3);
  CHECK_CONTAINS(refused.r->error->message, "(after 3 attempts)");
  env_finish(&e);
}

static void test_retries(void) {
  const char *const by_code[] = {"method", "code", NULL};
  double retries0 = counter_value("luaprov_http_client_retries_total", LP_NO_LABELS, LP_NO_LABELS);
  double get5xx0 = counter_value("luaprov_http_client_requests_total", by_code, LP_LABELS("GET", "5xx"));
  env e;
  env_start(&e, NULL);
  srv.flaky_failures = 2;
  lp_http_result *r = fetch(&e, "/flaky", NULL);
  CHECK(r->error == NULL);
  CHECK_INT(r->status, 200);
  CHECK_STR(r->body, "recovered");
  CHECK_INT(r->attempts, 3);
  CHECK_INT(srv.flaky_calls, 3);
  CHECK(counter_value("luaprov_http_client_retries_total", LP_NO_LABELS, LP_NO_LABELS) - retries0 == 2);
  CHECK(counter_value("luaprov_http_client_requests_total", by_code, LP_LABELS("GET", "5xx")) - get5xx0 == 2);

  srv.flaky_calls = 0;
  srv.flaky_failures = 100;
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  req.method = "post";
  req.body = "{}";
  req.body_len = 2;
  r = fetch(&e, "/flaky", &req);
  CHECK_INT(r->status, 503); /* an HTTP error status is a result, not an error */
  CHECK(r->error == NULL);
  CHECK_STR(r->body, "busy");
  CHECK_INT(r->attempts, 1); /* POST is not idempotent */
  CHECK_INT(srv.flaky_calls, 1);
  req.idempotent = 1; /* the caller vouches for it (a client token makes it safe) */
  req.max_retries = 2;
  r = fetch(&e, "/flaky", &req);
  CHECK_INT(r->status, 503);
  CHECK_INT(r->attempts, 3);
  CHECK_INT(srv.flaky_calls, 4);
  env_finish(&e);
}

static void test_retry_after(void) {
  env e;
  env_start(&e, NULL);
  srv.retry_after = "1";
  lp_http_result *r = fetch(&e, "/throttle", NULL);
  CHECK_INT(r->status, 200);
  CHECK_INT(r->attempts, 2);
  CHECK(r->elapsed_s >= 0.99); /* waited as asked, not the 10 ms jitter base */
  env_finish(&e);

  lp_http_client_options capped = {.retry_max_ms = 300};
  env_start(&e, &capped);
  srv.retry_after = "30";
  r = fetch(&e, "/throttle", NULL);
  CHECK_INT(r->status, 200);
  CHECK_INT(r->attempts, 2);
  CHECK(r->elapsed_s >= 0.29 && r->elapsed_s < 2); /* capped at retry_max_ms */
  env_finish(&e);
}

static void test_large_bodies(void) {
  env e;
  env_start(&e, NULL);
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  req.method = "POST";
  req.body = upload_data;
  req.body_len = UPLOAD_BYTES;
  lp_http_result *r = fetch(&e, "/echo", &req);
  CHECK(r->error == NULL);
  CHECK_INT(srv.upload_ok, 1);
  CHECK_INT(srv.upload_typed, 0); /* curl's form content type is not invented for an untyped body */
  CHECK_INT(r->status, 200);
  CHECK_INT(r->body_len, DOWNLOAD_BYTES);
  CHECK(r->body_len == DOWNLOAD_BYTES && memcmp(r->body, download_data, DOWNLOAD_BYTES) == 0);
  env_finish(&e);
}

typedef struct stream_state {
  lp_buf got;
  int calls;
  int written_at_first; /* chunks the server had written when the first bytes arrived */
  int stop;
} stream_state;

static int on_data(const char *data, size_t len, void *ud) {
  stream_state *st = ud;
  if (st->calls++ == 0) st->written_at_first = srv.chunks_written;
  lp_buf_append(&st->got, data, len);
  return st->stop;
}

static void test_streaming(void) {
  env e;
  env_start(&e, NULL);
  stream_state st = {.got = LP_BUF_INIT}, st2 = {.got = LP_BUF_INIT, .stop = 1};
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  req.on_data = on_data;
  req.on_data_ud = &st;
  lp_http_result *r = fetch(&e, "/stream", &req);
  CHECK(r->error == NULL);
  CHECK_INT(r->status, 200);
  CHECK_INT(r->body_len, 0);
  CHECK_STR(lp_buf_cstr(&st.got), "chunk0chunk1chunk2chunk3chunk4");
  CHECK(st.calls >= 2);
  CHECK(st.written_at_first < 5); /* bytes arrived while the server was still writing */
  req.on_data_ud = &st2;
  r = fetch(&e, "/stream", &req);
  CHECK(error_is(r, "Cancelled")); /* on_data returned non-zero */
  CHECK_INT(st2.calls, 1);
  lp_buf_free(&st.got);
  lp_buf_free(&st2.got);
  env_finish(&e);
}

static void test_too_large(void) {
  env e;
  env_start(&e, NULL);
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  req.max_body_bytes = 1000;
  lp_http_result *r = fetch(&e, "/big", &req);
  CHECK(error_is(r, "TooLarge"));
  CHECK_INT(r->attempts, 1);
  CHECK_CONTAINS(r->error->message, "exceeds 1000 bytes");
  req.max_body_bytes = 100000; /* no Content-Length: the limit is met while reading */
  r = fetch(&e, "/big?chunked", &req);
  CHECK(error_is(r, "TooLarge"));
  CHECK_INT(r->body_len, 0);
  stream_state st = {.got = LP_BUF_INIT};
  req.on_data = on_data; /* the limit is for collected bodies; a stream may run for hours */
  req.on_data_ud = &st;
  r = fetch(&e, "/big", &req);
  CHECK(r->error == NULL);
  CHECK_INT(st.got.len, (size_t)1 << 20);
  lp_buf_free(&st.got);
  env_finish(&e);
}

typedef struct canceller {
  uv_timer_t timer;
  lp_http_call *call;
  slot s;
  int calls_right_after;
} canceller;

static void do_cancel(uv_timer_t *t) {
  canceller *k = t->data;
  lp_http_call_cancel(k->call);
  lp_http_call_cancel(k->call); /* twice is harmless */
  k->calls_right_after = k->s.calls;
  uv_close((uv_handle_t *)t, NULL);
}

static void test_cancel(void) {
  env e;
  env_start(&e, NULL);
  srv.retry_after = "2";
  canceller ks[2];
  memset(ks, 0, sizeof ks);
  ks[0].call = get(&e, &ks[0].s, "/hang", NULL);
  /* cancelled while waiting 2 s to retry; also shows a held request does not hold up the host */
  ks[1].call = get(&e, &ks[1].s, "/throttle", NULL);
  for (int i = 0; i < 2; i++) after_ms(&e, &ks[i].timer, 200, do_cancel, &ks[i]);
  run_until(&e, &e.done, 2, 5000);
  for (int i = 0; i < 2; i++) {
    CHECK_INT(ks[i].calls_right_after, 0); /* done runs later, never inside cancel */
    CHECK_INT(ks[i].s.calls, 1);
    CHECK(error_is(ks[i].s.r, "Cancelled"));
    CHECK(ks[i].s.r->elapsed_s < 1);
  }
  CHECK_INT(srv.throttle_calls, 1);
  env_finish(&e);
}

static void test_connection_reuse(void) {
  env e;
  env_start(&e, NULL);
  for (int i = 0; i < 3; i++) { /* one after the other: each finds the previous connection idle */
    lp_http_result *r = fetch(&e, "/hello", NULL);
    CHECK_INT(r->status, 200);
  }
  CHECK_INT(srv.nremotes, 1); /* the server saw one client port: one connection */
  env_finish(&e);
}

static void test_many_concurrent(void) {
  enum { N = 200 };
  lp_http_client_options o = {.max_per_host = 4};
  env e;
  env_start(&e, &o);
  slot *slots = calloc(N, sizeof *slots);
  for (int i = 0; i < N; i++) get(&e, &slots[i], "/slow", NULL);
  CHECK_INT(lp_http_client_in_flight(e.client), N);
  run_until(&e, &e.done, N, 30000);
  int ok = 0;
  for (int i = 0; i < N; i++) ok += slots[i].r && slots[i].r->status == 200;
  CHECK_INT(ok, N);
  CHECK(srv.slow_max <= 4); /* never more requests in progress than connections allowed */
  CHECK(srv.slow_max >= 2); /* but they did run in parallel */
  CHECK(srv.nremotes <= 4); /* and the connections were reused, not reopened */
  free(slots);
  env_finish(&e);
}

/* Closes the client from inside a done callback, as the engine's shutdown path might. */
typedef struct closer {
  env *e;
  lp_http_client *client;
  slot hello, hangs[5], late;
  int calls_right_after, closed;
  size_t in_flight_before;
} closer;

static void close_from_done(lp_http_result *r, void *ud) {
  closer *k = ud;
  on_done(r, &k->hello);
  k->in_flight_before = lp_http_client_in_flight(k->client);
  lp_http_client_close(k->client, count_up, &k->closed);
  for (int i = 0; i < 5; i++) k->calls_right_after += k->hangs[i].calls;
}

static void request_from_done(lp_http_result *r, void *ud) { /* runs during the close */
  closer *k = ud;
  on_done(r, &k->hangs[0]);
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  req.url = "http://127.0.0.1:1/";
  lp_http_client_request(k->client, &req, on_done, &k->late);
}

static void test_close_in_flight(void) {
  env e;
  env_start(&e, NULL);
  closer k = {.e = &e, .client = e.client, .hello.e = &e, .late.e = &e};
  e.client = NULL; /* env_finish must not close it again */
  char url[128];
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  req.url = url;
  snprintf(url, sizeof url, "http://127.0.0.1:%d/hang", e.port);
  for (int i = 0; i < 5; i++) {
    k.hangs[i].e = &e;
    lp_http_client_request(k.client, &req, i ? on_done : request_from_done, i ? (void *)&k.hangs[i] : &k);
  }
  snprintf(url, sizeof url, "http://127.0.0.1:%d/hello", e.port);
  lp_http_client_request(k.client, &req, close_from_done, &k);
  run_until(&e, &k.closed, 1, 5000);
  CHECK_INT(k.hello.r->status, 200);
  CHECK_INT(k.in_flight_before, 5);
  CHECK_INT(k.calls_right_after, 0); /* cancelled calls complete later, never inside close */
  for (int i = 0; i < 5; i++) {
    CHECK_INT(k.hangs[i].calls, 1);
    CHECK(error_is(k.hangs[i].r, "Cancelled"));
  }
  CHECK_INT(k.late.calls, 1); /* started during the close: done still ran, before on_closed */
  CHECK(error_is(k.late.r, "Cancelled"));
  env_finish(&e);
}

/* lp_http_request_sync blocks, so the server's loop runs in a thread of its own here. */
static uv_async_t stop_server;
static lp_http_server *sync_server;

static void on_stop(uv_async_t *a) {
  lp_http_server_close(sync_server, NULL, NULL);
  uv_close((uv_handle_t *)a, NULL);
}

static void *server_thread(void *loop) {
  uv_run(loop, UV_RUN_DEFAULT);
  return NULL;
}

static void test_sync(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  memset(&srv, 0, sizeof srv);
  srv.flaky_failures = 2;
  server_loop = &loop;
  sync_server = lp_http_server_new(&loop, NULL);
  add_routes(sync_server);
  lp_error *err = NULL;
  CHECK_INT(lp_http_server_listen(sync_server, "127.0.0.1", 0, &err), 0);
  int port = lp_http_server_port(sync_server), refused_port = unused_port(&loop);
  uv_async_init(&loop, &stop_server, on_stop);
  pthread_t thread;
  pthread_create(&thread, NULL, server_thread, &loop);

  lp_http_client_options o = {.retry_base_ms = 10};
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  char url[128];
  req.url = url;
  snprintf(url, sizeof url, "http://127.0.0.1:%d/hello", port);
  lp_http_result *hello = lp_http_request_sync(&o, &req);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/flaky", port);
  lp_http_result *flaky = lp_http_request_sync(&o, &req);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", refused_port);
  req.max_retries = 0;
  lp_http_result *refused = lp_http_request_sync(&o, &req);
  lp_http_client_options bad_ca = {.ca_file = "/nonexistent/ca.pem"};
  snprintf(url, sizeof url, "https://127.0.0.1:%d/hello", port);
  req.max_retries = 2;
  lp_http_result *tls = lp_http_request_sync(&bad_ca, &req);

  uv_async_send(&stop_server);
  pthread_join(thread, NULL);
  CHECK_INT(uv_loop_close(&loop), 0);
  CHECK_INT(hello->status, 200);
  CHECK_STR(hello->body, "hello world");
  CHECK_STR(lp_http_result_header(hello, "x-test"), "yes");
  CHECK_INT(flaky->status, 200);
  CHECK_INT(flaky->attempts, 3); /* the loop client's retry policy */
  CHECK_INT(srv.flaky_calls, 3);
  CHECK(error_is(refused, "ConnectFailed"));
  CHECK_INT(refused->attempts, 1);
  CHECK(error_is(tls, "TLS")); /* ca_file is used, and a TLS failure is not retried */
  CHECK_INT(tls->attempts, 1);
  lp_http_result_free(hello);
  lp_http_result_free(flaky);
  lp_http_result_free(refused);
  lp_http_result_free(tls);
}

int main(void) {
  upload_data = malloc(UPLOAD_BYTES);
  download_data = malloc(DOWNLOAD_BYTES);
  fill_pattern(upload_data, UPLOAD_BYTES, 7);
  fill_pattern(download_data, DOWNLOAD_BYTES, 11);
  RUN(test_success);
  RUN(test_transport_errors);
  RUN(test_retries);
  RUN(test_retry_after);
  RUN(test_large_bodies);
  RUN(test_streaming);
  RUN(test_too_large);
  RUN(test_cancel);
  RUN(test_connection_reuse);
  RUN(test_many_concurrent);
  RUN(test_close_in_flight);
  RUN(test_sync);
  free(upload_data);
  free(download_data);
  return check_summary();
}

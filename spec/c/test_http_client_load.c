/* The HTTP client under load, against the engine's own HTTP server on a loopback port: large bodies
 * both ways, streaming and body limits, connection reuse (the idle connection's watch, easy handles
 * that start clean), many concurrent requests, closing the client with requests in flight, and the
 * synchronous API. The loop, server and client every test
 * starts and finishes (env_start / env_finish) are in http_test_support.h. */
#include <pthread.h>

#define HTTP_TEST_CLIENT
#include "http_test_support.h"

#include "core/buf.h"

#define UPLOAD_BYTES   ((size_t)4 << 20)
#define DOWNLOAD_BYTES ((size_t)8 << 20)

static unsigned char *upload_data, *download_data;

static void fill_pattern(unsigned char *p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    p[i] = (unsigned char)(seed >> 24);
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

/* Records what the request carried, for the handle reuse test; answers "seen". */
static struct {
  char method[16];
  size_t body_len;
  int probed;
} seen;

static void h_seen(const lp_http_request *req, lp_http_response *res, void *ud) {
  snprintf(seen.method, sizeof seen.method, "%s", req->method);
  seen.body_len = req->body_len;
  seen.probed = lp_http_request_header(req, "x-probe") != NULL;
  lp_http_respond(res, 200, "text/plain", "seen", 4);
}

static void add_routes(lp_http_server *s) {
  lp_http_server_route(s, NULL, "/seen", h_seen, NULL);
  lp_http_server_route(s, "GET", "/hello", h_hello, NULL);
  lp_http_server_route(s, NULL, "/hang", h_hang, NULL);
  lp_http_server_route(s, NULL, "/flaky", h_flaky, NULL);
  lp_http_server_route(s, "POST", "/echo", h_echo, NULL);
  lp_http_server_route(s, "GET", "/big", h_big, NULL);
  lp_http_server_route(s, "GET", "/stream", h_stream, NULL);
  lp_http_server_route(s, "GET", "/slow", h_slow, NULL);
}

/* ---- tests ---- */

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

/* The client's socket watches (uv_poll handles; the server's are uv_tcp). */
typedef struct polls {
  int n, referenced, active;
  uv_handle_t *last;
} polls;

static void count_poll(uv_handle_t *h, void *arg) {
  polls *p = arg;
  if (h->type != UV_POLL || uv_is_closing(h)) return;
  p->n++;
  p->referenced += uv_has_ref(h);
  p->active += uv_is_active(h);
  p->last = h;
}

static polls client_polls(env *e) {
  polls p = {0};
  uv_walk(&e->loop, count_poll, &p);
  return p;
}

/* curl drops a kept-alive socket at the end of every transfer; the client keeps its watch for the
 * next one rather than making a new one per request, and unreferenced, so an idle connection never
 * keeps the loop running. */
static void test_idle_connection_watch(void) {
  env e;
  env_start(&e, NULL);
  CHECK_INT(fetch(&e, "/hello", NULL)->status, 200);
  polls first = client_polls(&e);
  CHECK_INT(first.n, 1);
  CHECK_INT(first.referenced, 0);
  CHECK_INT(fetch(&e, "/hello", NULL)->status, 200);
  polls second = client_polls(&e);
  CHECK_INT(second.n, 1);
  CHECK(second.last == first.last); /* the same watch */
  CHECK_INT(second.referenced, 0);
  CHECK_INT(srv.nremotes, 1);
  env_finish(&e);
}

typedef struct watch_probe {
  env *e;
  uv_timer_t timer;
  int stopped;
} watch_probe;

static void probe_watch(uv_timer_t *t) {
  watch_probe *w = t->data;
  polls p = client_polls(w->e);
  w->stopped = p.n == 1 && p.active == 0;
}

/* The server closes the idle connection: its watch stops (a level-triggered watch left on would fire on
 * every loop iteration until the next request), the next request opens a new connection, and the old
 * socket's watch is closed with it. */
static void test_idle_connection_closed_by_server(void) {
  lp_http_server_options so = {.idle_timeout_ms = 30};
  env e;
  env_start_server(&e, NULL, &so);
  CHECK_INT(fetch(&e, "/hello", NULL)->status, 200);
  watch_probe w = {.e = &e};
  uv_timer_init(&e.loop, &w.timer);
  w.timer.data = &w;
  uv_timer_start(&w.timer, probe_watch, 10, 10);
  run_until(&e, &w.stopped, 1, 5000);
  uv_close((uv_handle_t *)&w.timer, NULL);
  lp_http_result *r = fetch(&e, "/hello", NULL);
  CHECK_INT(r->status, 200);
  CHECK_STR(r->body, "hello world");
  CHECK_INT(srv.nremotes, 2);
  CHECK_INT(client_polls(&e).n, 1);
  env_finish(&e);
}

/* Sequential requests run on the previous request's easy handle: nothing of one (method, body, headers,
 * HEAD's no-body) may carry into the next. */
static void test_reused_handles_start_clean(void) {
  env e;
  env_start(&e, NULL);
  lp_http_header probe = {"X-Probe", "1"};
  lp_http_request_opts post = LP_HTTP_REQUEST_OPTS_INIT, head = LP_HTTP_REQUEST_OPTS_INIT,
                       del = LP_HTTP_REQUEST_OPTS_INIT;
  post.method = "POST";
  post.body = "abc";
  post.body_len = 3;
  post.headers = &probe;
  post.nheaders = 1;
  head.method = "HEAD";
  del.method = "DELETE";
  CHECK_INT(fetch(&e, "/seen", &post)->status, 200);
  CHECK_STR(seen.method, "POST");
  CHECK_INT(seen.body_len, 3);
  CHECK_INT(seen.probed, 1);
  lp_http_result *get = fetch(&e, "/seen", NULL);
  CHECK_STR(get->body, "seen");
  CHECK_STR(seen.method, "GET");
  CHECK_INT(seen.body_len, 0);
  CHECK_INT(seen.probed, 0);
  lp_http_result *h = fetch(&e, "/seen", &head);
  CHECK_INT(h->status, 200);
  CHECK_INT(h->body_len, 0);
  CHECK_INT(fetch(&e, "/seen", &del)->status, 200);
  CHECK_STR(seen.method, "DELETE");
  get = fetch(&e, "/seen", NULL);
  CHECK_STR(get->body, "seen");
  CHECK_STR(seen.method, "GET");
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
  RUN(test_large_bodies);
  RUN(test_streaming);
  RUN(test_too_large);
  RUN(test_connection_reuse);
  RUN(test_idle_connection_watch);
  RUN(test_idle_connection_closed_by_server);
  RUN(test_reused_handles_start_clean);
  RUN(test_many_concurrent);
  RUN(test_close_in_flight);
  RUN(test_sync);
  free(upload_data);
  free(download_data);
  return check_summary();
}

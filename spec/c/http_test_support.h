/* Shared helpers for the HTTP unit tests, header-only. Every spec/c/test_*.c is an executable of its own,
 * so everything here is static and each test binary gets its own copy. The file has two sections; a test
 * defines exactly one of these macros before including it:
 *
 *   HTTP_TEST_SERVER (test_http_server*.c): a server on an ephemeral loopback port, running in a loop
 *     thread of its own, and raw TCP clients on blocking sockets that read the responses with
 *     http-parser in response mode (so framing the server gets wrong fails to parse). Handlers only
 *     record what they saw, in the fixture under its mutex; every CHECK runs on the test thread.
 *     The test file defines _GNU_SOURCE first, and `static void add_routes(fixture *fx)`, which
 *     registers the routes its tests use (with fx as their ud).
 *   HTTP_TEST_CLIENT (test_http_client*.c): one loop running the engine's server (routes on the
 *     file-scope `srv`) and the engine's client; env_start / env_finish bracket every test. The test
 *     file defines `static void add_routes(lp_http_server *s)`.
 *
 * Only what both files of a pair use lives here; handlers and helpers for one file stay in it. */
#ifndef LUAPROV_SPEC_HTTP_TEST_SUPPORT_H
#define LUAPROV_SPEC_HTTP_TEST_SUPPORT_H

#if defined(HTTP_TEST_SERVER) == defined(HTTP_TEST_CLIENT)
#error "define exactly one of HTTP_TEST_SERVER and HTTP_TEST_CLIENT before including http_test_support.h"
#endif

#ifdef HTTP_TEST_SERVER

#include <arpa/inet.h>
#include <errno.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "core/buf.h"
#include "http/server.h"

#define BARRIER    50
#define BIG_BYTES  (256 * 1024) /* a /big answer; /big?huge sends HUGE_BYTES */
#define HUGE_BYTES (8 * 1024 * 1024)

/* ---- the server side ---- */

typedef struct fixture {
  uv_loop_t loop;
  uv_thread_t thread;
  uv_async_t wake;
  uv_mutex_t mu;
  lp_http_server *server;
  int port;
  /* written on the loop thread under mu */
  char seen[512], remote[64];
  int closes, closed, write_failed, slow_started, big_served;
  size_t flood_bytes;
  lp_http_response *held[BARRIER];
  int nheld;
} fixture;

#define LOCKED(fx, stmt)                                                                                     \
  do {                                                                                                       \
    uv_mutex_lock(&(fx)->mu);                                                                                \
    stmt;                                                                                                    \
    uv_mutex_unlock(&(fx)->mu);                                                                              \
  } while (0)

static void h_hello(const lp_http_request *req, lp_http_response *res, void *ud) {
  fixture *fx = ud;
  const char *probe = lp_http_request_header(req, "x-probe");
  LOCKED(fx, snprintf(fx->seen, sizeof fx->seen, "%s %s [%s] %s %s", req->method, req->path, req->query,
                      req->target, probe ? probe : "-");
         snprintf(fx->remote, sizeof fx->remote, "%s", req->remote_addr));
  lp_http_response_header(res, "X-Test", "yes");
  lp_http_respond(res, 200, "text/plain", "hello\n", 6);
}

static void h_echo(const lp_http_request *req, lp_http_response *res, void *ud) {
  lp_http_respond(res, 200, "application/octet-stream", req->body, req->body_len);
}

static char big_body[HUGE_BYTES]; /* main fills it with a pattern */

static void h_big(const lp_http_request *req, lp_http_response *res, void *ud) {
  fixture *fx = ud;
  LOCKED(fx, fx->big_served++);
  size_t n = strcmp(req->query, "huge") == 0 ? HUGE_BYTES : BIG_BYTES;
  lp_http_respond(res, 200, "application/octet-stream", big_body, n);
}

/* A response finished later from a timer on the loop: /slow answers once; the test files add others
 * (streams) with job_start. */
typedef struct job {
  fixture *fx;
  uv_timer_t timer;
  lp_http_response *res;
  int n, limit; /* lines written; limit < 0 streams until the client goes */
} job;

static void job_free(uv_handle_t *h) {
  free(h->data);
}
static void job_stop(job *j) {
  uv_close((uv_handle_t *)&j->timer, job_free);
}

static void job_gone(lp_http_response *res, void *ud) {
  job *j = ud;
  LOCKED(j->fx, j->fx->closes++);
  job_stop(j);
}

static void job_start(fixture *fx, lp_http_response *res, uv_timer_cb cb, uint64_t every_ms, int limit) {
  job *j = malloc(sizeof *j);
  *j = (job){.fx = fx, .res = res, .limit = limit};
  uv_timer_init(&fx->loop, &j->timer);
  j->timer.data = j;
  lp_http_response_on_close(res, job_gone, j);
  uv_timer_start(&j->timer, cb, every_ms, every_ms);
}

static void slow_tick(uv_timer_t *t) {
  job *j = t->data;
  lp_http_respond(j->res, 200, "text/plain", "slow\n", 5);
  job_stop(j);
}

static void h_slow(const lp_http_request *req, lp_http_response *res, void *ud) {
  fixture *fx = ud;
  LOCKED(fx, fx->slow_started++);
  job_start(fx, res, slow_tick, 40, 0);
}

static void on_server_closed(void *ud) {
  fixture *fx = ud;
  LOCKED(fx, fx->closed++);
}

static void on_wake(uv_async_t *a) {
  fixture *fx = a->data;
  uv_close((uv_handle_t *)a, NULL);
  lp_http_server_close(fx->server, on_server_closed, fx);
}

static void loop_thread(void *arg) {
  fixture *fx = arg;
  uv_run(&fx->loop, UV_RUN_DEFAULT);
}

static const lp_http_server_options default_opts = {.max_header_bytes = 4096,
                                                    .max_body_bytes = 65536,
                                                    .idle_timeout_ms = 10000,
                                                    .server_header = "luaprov-test"};

static void add_routes(fixture *fx); /* defined by the test file */

/* Starts a server listening on host; returns the listen result. The loop thread runs either way, so
 * fixture_stop works the same after a failed listen. */
static int fixture_start_at(fixture *fx, const lp_http_server_options *opts, const char *host) {
  memset(fx, 0, sizeof *fx);
  uv_loop_init(&fx->loop);
  uv_mutex_init(&fx->mu);
  uv_async_init(&fx->loop, &fx->wake, on_wake);
  fx->wake.data = fx;
  fx->server = lp_http_server_new(&fx->loop, opts ? opts : &default_opts);
  add_routes(fx);
  lp_error *err = NULL;
  int rc = lp_http_server_listen(fx->server, host, 0, &err);
  if (rc == 0)
    fx->port = lp_http_server_port(fx->server);
  else
    fprintf(stderr, "     listen on %s: %s\n", host, err->message);
  lp_error_free(err);
  uv_thread_create(&fx->thread, loop_thread, fx);
  return rc;
}

static void fixture_start(fixture *fx, const lp_http_server_options *opts) {
  CHECK_INT(fixture_start_at(fx, opts, "127.0.0.1"), 0);
  CHECK(fx->port > 0);
}

/* Waits for the loop thread to end, then asserts that on_closed ran and that no handle is left. */
static void fixture_join(fixture *fx) {
  uv_thread_join(&fx->thread);
  CHECK_INT(fx->closed, 1);
  CHECK_INT(uv_loop_close(&fx->loop), 0);
  uv_mutex_destroy(&fx->mu);
}

static void fixture_stop(fixture *fx) {
  uv_async_send(&fx->wake);
  fixture_join(fx);
}

/* ---- the client side ---- */

typedef struct client {
  int fd;
  http_parser p;
  char buf[16384];
  size_t off, len;
  int head; /* the next response answers HEAD: no body follows its headers */
  int last_was_value;
  int status, chunks;
  lp_buf headers; /* "Name: value\r\n" lines as received */
  lp_buf body;
} client;

static int cl_begin(http_parser *p) {
  client *cl = p->data;
  lp_buf_reset(&cl->headers);
  lp_buf_reset(&cl->body);
  cl->chunks = cl->last_was_value = 0;
  return 0;
}

static int cl_field(http_parser *p, const char *at, size_t n) {
  client *cl = p->data;
  if (cl->last_was_value) lp_buf_puts(&cl->headers, "\r\n");
  cl->last_was_value = 0;
  lp_buf_append(&cl->headers, at, n);
  return 0;
}

static int cl_value(http_parser *p, const char *at, size_t n) {
  client *cl = p->data;
  if (!cl->last_was_value) lp_buf_puts(&cl->headers, ": ");
  cl->last_was_value = 1;
  lp_buf_append(&cl->headers, at, n);
  return 0;
}

static int cl_headers_done(http_parser *p) {
  client *cl = p->data;
  lp_buf_puts(&cl->headers, "\r\n");
  cl->status = (int)p->status_code;
  return cl->head && p->status_code >= 200;
}

static int cl_body(http_parser *p, const char *at, size_t n) {
  lp_buf_append(&((client *)p->data)->body, at, n);
  return 0;
}

static int cl_chunk(http_parser *p) {
  if (p->content_length > 0) ((client *)p->data)->chunks++;
  return 0;
}

static int cl_done(http_parser *p) {
  http_parser_pause(p, 1);
  return 0;
}

static const http_parser_settings client_settings = {.on_message_begin = cl_begin,
                                                     .on_header_field = cl_field,
                                                     .on_header_value = cl_value,
                                                     .on_headers_complete = cl_headers_done,
                                                     .on_body = cl_body,
                                                     .on_chunk_header = cl_chunk,
                                                     .on_message_complete = cl_done};

/* Connects to the loopback address of family; rcvbuf (when not 0) shrinks the receive buffer. */
static int client_open_family(client *cl, int family, int port, int rcvbuf) {
  memset(cl, 0, sizeof *cl);
  http_parser_init(&cl->p, HTTP_RESPONSE);
  cl->p.data = cl;
  cl->fd = socket(family, SOCK_STREAM, 0);
  struct timeval tv = {5, 0};
  setsockopt(cl->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (rcvbuf) setsockopt(cl->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  struct sockaddr_storage ss;
  if (family == AF_INET6)
    uv_ip6_addr("::1", port, (struct sockaddr_in6 *)&ss);
  else
    uv_ip4_addr("127.0.0.1", port, (struct sockaddr_in *)&ss);
  return connect(cl->fd, (struct sockaddr *)&ss,
                 family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
}

static int client_open(client *cl, int port) {
  return client_open_family(cl, AF_INET, port, 0);
}

static void client_close(client *cl) {
  close(cl->fd);
  lp_buf_free(&cl->headers);
  lp_buf_free(&cl->body);
}

static void client_send_n(client *cl, const char *data, size_t n) {
  while (n) {
    ssize_t w = send(cl->fd, data, n, MSG_NOSIGNAL);
    if (w <= 0) return;
    data += w;
    n -= (size_t)w;
  }
}

static void client_send(client *cl, const char *s) {
  client_send_n(cl, s, strlen(s));
}

/* Reads until a whole response has been parsed, or (needle given) until its body holds needle.
 * Returns 0, or -1 on a parse error, a timeout or the connection closing first. */
static int client_read(client *cl, const char *needle) {
  for (;;) {
    if (needle && cl->body.len && strstr(cl->body.data, needle)) return 0;
    size_t n = 0;
    if (cl->off < cl->len) {
      n = http_parser_execute(&cl->p, &client_settings, cl->buf + cl->off, cl->len - cl->off);
      cl->off += n;
    } else {
      ssize_t got = recv(cl->fd, cl->buf, sizeof cl->buf, 0);
      if (got > 0) {
        cl->off = 0;
        cl->len = (size_t)got;
        continue;
      }
      http_parser_execute(&cl->p, &client_settings, NULL, 0); /* a body that runs to the close */
      if (HTTP_PARSER_ERRNO(&cl->p) == HPE_OK) return -1;
    }
    if (HTTP_PARSER_ERRNO(&cl->p) == HPE_PAUSED) {
      http_parser_pause(&cl->p, 0);
      return 0;
    }
    if (HTTP_PARSER_ERRNO(&cl->p) != HPE_OK) return -1;
  }
}

/* Sends one request and reads its response; returns the status or -1. */
static int client_call(client *cl, const char *request) {
  client_send(cl, request);
  cl->head = strncmp(request, "HEAD ", 5) == 0;
  return client_read(cl, NULL) == 0 ? cl->status : -1;
}

/* 1 when the server has closed the connection (EOF or reset) with nothing more to read. */
static int client_closed(client *cl) {
  if (cl->off < cl->len) return 0;
  char c;
  ssize_t got = recv(cl->fd, &c, 1, 0);
  return got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

static const char *body(client *cl) {
  return lp_buf_cstr(&cl->body);
}
static const char *headers(client *cl) {
  return lp_buf_cstr(&cl->headers);
}

#define GET(path) "GET " path " HTTP/1.1\r\nHost: t\r\n\r\n"

#endif /* HTTP_TEST_SERVER */

#ifdef HTTP_TEST_CLIENT

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "check.h"
#include "http/client.h"
#include "http/server.h"

#define MAX_REMOTES 256

/* ---- the server side: what the routes observed ---- */

static struct {
  int flaky_calls, flaky_failures;
  int throttle_calls;
  const char *retry_after;
  int upload_ok, upload_typed;
  char user_agent[64], accept[64];
  int chunks_written;
  int slow_current, slow_max;
  char remotes[MAX_REMOTES][64]; /* distinct client addresses: one per connection */
  int nremotes;
} srv;

static uv_loop_t *server_loop; /* the server's loop, for handlers that answer from a timer */

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

/* 503 for the first srv.flaky_failures calls, then 200. */
static void h_flaky(const lp_http_request *req, lp_http_response *res, void *ud) {
  if (++srv.flaky_calls <= srv.flaky_failures)
    lp_http_respond(res, 503, "text/plain", "busy", 4);
  else
    lp_http_respond(res, 200, "text/plain", "recovered", 9);
}

static void add_routes(lp_http_server *s); /* defined by the test file */

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

/* sopts NULL for a 16 MiB body limit and the server's other defaults. */
static void env_start_server(env *e, const lp_http_client_options *copts,
                             const lp_http_server_options *sopts) {
  memset(e, 0, sizeof *e);
  memset(&srv, 0, sizeof srv);
  uv_loop_init(&e->loop);
  server_loop = &e->loop;
  lp_http_server_options so = {.max_body_bytes = (size_t)16 << 20};
  e->server = lp_http_server_new(&e->loop, sopts ? sopts : &so);
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

static void env_start(env *e, const lp_http_client_options *copts) {
  env_start_server(e, copts, NULL);
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

/* Closes client and server and checks that the loop has no handle left (uv_loop_close succeeds). */
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

/* Starts a request for path on the test server; its result lands in *s. req NULL for the defaults. */
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

/* A loopback port nothing listens on (bound, read back, closed). */
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

#endif /* HTTP_TEST_CLIENT */

#endif

/* The HTTP server against raw TCP clients. Each test runs a server on an ephemeral loopback port in a
 * loop thread of its own; the test body talks to it over blocking sockets and reads the responses
 * with http-parser in response mode (so framing the server gets wrong fails to parse). Handlers only
 * record what they saw, under a mutex; every CHECK runs on the test thread. Stopping a fixture
 * closes the server and asserts that on_closed ran and that the loop has no handle left. */
#define _GNU_SOURCE
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

#define BARRIER     50
#define FLOOD_BLOCK (256 * 1024)
#define BIG_BYTES   (256 * 1024) /* a /big answer; /big?huge sends HUGE_BYTES */
#define HUGE_BYTES  (8 * 1024 * 1024)

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

static char big_body[HUGE_BYTES];

static void h_big(const lp_http_request *req, lp_http_response *res, void *ud) {
  fixture *fx = ud;
  LOCKED(fx, fx->big_served++);
  size_t n = strcmp(req->query, "huge") == 0 ? HUGE_BYTES : BIG_BYTES;
  lp_http_respond(res, 200, "application/octet-stream", big_body, n);
}

static void h_path(const lp_http_request *req, lp_http_response *res, void *ud) {
  lp_http_respond(res, 200, NULL, req->path, strlen(req->path));
}

/* A response finished later from a timer on the loop: /slow answers once, /stream writes lines,
 * /flood writes blocks as fast as the server takes them. */
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

static void stream_tick(uv_timer_t *t) {
  job *j = t->data;
  char line[32];
  int n = snprintf(line, sizeof line, "{\"n\":%d}\n", j->n);
  if (j->n == j->limit || lp_http_stream_write(j->res, line, (size_t)n) < 0) {
    if (j->n != j->limit) LOCKED(j->fx, j->fx->write_failed = 1);
    lp_http_stream_end(j->res);
    job_stop(j);
    return;
  }
  j->n++;
}

static void h_stream(const lp_http_request *req, lp_http_response *res, void *ud) {
  lp_http_stream_begin(res, 200, "application/json");
  job_start(ud, res, stream_tick, 5, strcmp(req->query, "forever") == 0 ? -1 : atoi(req->query));
}

static void flood_tick(uv_timer_t *t) {
  static char block[FLOOD_BLOCK];
  job *j = t->data;
  for (int i = 0; i < 4; i++) {
    if (lp_http_stream_write(j->res, block, sizeof block) < 0) {
      LOCKED(j->fx, j->fx->write_failed = 1);
      lp_http_stream_end(j->res);
      job_stop(j);
      return;
    }
    LOCKED(j->fx, j->fx->flood_bytes += sizeof block);
  }
}

static void h_flood(const lp_http_request *req, lp_http_response *res, void *ud) {
  lp_http_stream_begin(res, 200, "application/octet-stream");
  job_start(ud, res, flood_tick, 1, -1);
}

static void barrier_gone(lp_http_response *res, void *ud) {
  fixture *fx = ud;
  for (int i = 0; i < BARRIER; i++)
    if (fx->held[i] == res) fx->held[i] = NULL;
}

/* Holds every request until BARRIER of them are in flight at once, then answers them all. */
static void h_barrier(const lp_http_request *req, lp_http_response *res, void *ud) {
  fixture *fx = ud;
  lp_http_response_on_close(res, barrier_gone, fx);
  int n;
  LOCKED(fx, fx->held[fx->nheld] = res; n = ++fx->nheld);
  if (n < BARRIER) return;
  for (int i = 0; i < BARRIER; i++)
    if (fx->held[i]) lp_http_respond(fx->held[i], 200, "text/plain", "released\n", 9);
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

/* Starts a server listening on host; returns the listen result. The loop thread runs either way, so
 * fixture_stop works the same after a failed listen. */
static int fixture_start_at(fixture *fx, const lp_http_server_options *opts, const char *host) {
  memset(fx, 0, sizeof *fx);
  uv_loop_init(&fx->loop);
  uv_mutex_init(&fx->mu);
  uv_async_init(&fx->loop, &fx->wake, on_wake);
  fx->wake.data = fx;
  fx->server = lp_http_server_new(&fx->loop, opts ? opts : &default_opts);
  lp_http_server_route(fx->server, "GET", "/hello", h_hello, fx);
  lp_http_server_route(fx->server, "POST", "/echo", h_echo, fx);
  lp_http_server_route(fx->server, "GET", "/slow", h_slow, fx);
  lp_http_server_route(fx->server, "GET", "/stream", h_stream, fx);
  lp_http_server_route(fx->server, "GET", "/flood", h_flood, fx);
  lp_http_server_route(fx->server, "GET", "/barrier", h_barrier, fx);
  lp_http_server_route(fx->server, "GET", "/big", h_big, fx);
  lp_http_server_route(fx->server, NULL, "/api/*", h_path, fx);
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

/* Polls an int the loop thread writes until it equals want (5 s at most). */
static int wait_for(fixture *fx, const int *field, int want) {
  for (int i = 0; i < 500; i++) {
    int v;
    LOCKED(fx, v = *field);
    if (v == want) return 1;
    usleep(10000);
  }
  return 0;
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

/* Reads and drops everything until the server closes, counting the bytes in *total when given;
 * returns 0 when the server has not closed within the receive timeout. */
static int client_drain_to_close(client *cl, size_t *total) {
  char buf[4096];
  for (;;) {
    ssize_t got = recv(cl->fd, buf, sizeof buf, 0);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return 1;
    if (got < 0) return 0;
    if (total) *total += (size_t)got;
  }
}

static const char *body(client *cl) {
  return lp_buf_cstr(&cl->body);
}
static const char *headers(client *cl) {
  return lp_buf_cstr(&cl->headers);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define GET(path) "GET " path " HTTP/1.1\r\nHost: t\r\n\r\n"

/* ---- tests ---- */

static void test_get_returns_body_and_headers(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, "GET /hello?x=1&y=2 HTTP/1.1\r\nHost: t\r\nX-Probe: abc\r\n\r\n"), 200);
  CHECK_STR(body(&cl), "hello\n");
  CHECK_CONTAINS(headers(&cl), "Content-Length: 6\r\n");
  CHECK_CONTAINS(headers(&cl), "Content-Type: text/plain\r\n");
  CHECK_CONTAINS(headers(&cl), "Server: luaprov-test\r\n");
  CHECK_CONTAINS(headers(&cl), "X-Test: yes\r\n");
  CHECK(strstr(headers(&cl), "Connection:") == NULL); /* keep-alive is HTTP/1.1's default */
  const char *date = strstr(headers(&cl), "Date: ");
  struct tm tm = {0};
  CHECK(date && strptime(date + 6, "%a, %d %b %Y %H:%M:%S GMT", &tm) != NULL);
  CHECK(labs((long)(timegm(&tm) - time(NULL))) <= 2);
  LOCKED(&fx, CHECK_STR(fx.seen, "GET /hello [x=1&y=2] /hello?x=1&y=2 abc");
         CHECK(strncmp(fx.remote, "127.0.0.1:", 10) == 0));
  client_close(&cl);
  fixture_stop(&fx);
}

static void test_routing_404_405_and_prefix(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, GET("/nope")), 404);
  CHECK_STR(body(&cl), "Not Found\n");
  CHECK_INT(client_call(&cl, "DELETE /hello HTTP/1.1\r\nHost: t\r\n\r\n"), 405);
  CHECK_CONTAINS(headers(&cl), "Allow: GET\r\n");
  CHECK_INT(client_call(&cl, "PUT /api/v1/x?q HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), 200);
  CHECK_STR(body(&cl), "/api/v1/x");
  CHECK_INT(client_call(&cl, GET("/api")), 200);
  CHECK_STR(body(&cl), "/api");
  CHECK_INT(client_call(&cl, GET("/apix")), 404);
  /* HEAD answers through the GET route with its length and no body: the next response parses. */
  CHECK_INT(client_call(&cl, "HEAD /hello HTTP/1.1\r\nHost: t\r\n\r\n"), 200);
  CHECK_CONTAINS(headers(&cl), "Content-Length: 6\r\n");
  CHECK_INT(cl.body.len, 0);
  CHECK_INT(client_call(&cl, GET("/hello")), 200);
  CHECK_STR(body(&cl), "hello\n");
  client_close(&cl);
  fixture_stop(&fx);
}

static void test_keep_alive_pipelining_and_close(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  char first[64];
  CHECK_INT(client_call(&cl, GET("/hello")), 200);
  LOCKED(&fx, snprintf(first, sizeof first, "%s", fx.remote));
  CHECK_INT(client_call(&cl, GET("/hello")), 200);
  LOCKED(&fx, CHECK_STR(fx.remote, first)); /* same client port: the same connection */
  /* Three requests in one write, the first answered late: answers come back in request order. */
  client_send(&cl, GET("/slow") GET("/hello") "POST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_STR(body(&cl), "slow\n");
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_STR(body(&cl), "hello\n");
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_STR(body(&cl), "abc");
  /* More pipelined input than the server buffers behind a pending response (it stops reading, then
   * resumes): three 60 000-byte bodies queued behind /slow all come back intact. */
  static char big[60001];
  memset(big, 'p', sizeof big - 1);
  client_send(&cl, GET("/slow"));
  for (int i = 0; i < 3; i++) {
    client_send(&cl, "POST /echo HTTP/1.1\r\nContent-Length: 60000\r\n\r\n");
    client_send(&cl, big);
  }
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_STR(body(&cl), "slow\n");
  for (int i = 0; i < 3; i++) {
    CHECK_INT(client_read(&cl, NULL), 0);
    CHECK_STR(body(&cl), big);
  }
  CHECK_INT(client_call(&cl, "GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n"), 200);
  CHECK_CONTAINS(headers(&cl), "Connection: close\r\n");
  CHECK(client_closed(&cl));
  client_close(&cl);

  /* HTTP/1.0 closes after one response unless it asks to keep the connection. */
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, "GET /hello HTTP/1.0\r\n\r\n"), 200);
  CHECK_CONTAINS(headers(&cl), "Connection: close\r\n");
  CHECK(client_closed(&cl));
  client_close(&cl);
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"), 200);
  CHECK_CONTAINS(headers(&cl), "Connection: keep-alive\r\n");
  CHECK_INT(client_call(&cl, "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"), 200);
  client_close(&cl);
  fixture_stop(&fx);
}

/* A client that pipelines requests without reading the answers stalls the connection: the server
 * stops parsing once about a megabyte waits to be written, and resumes as the client reads. */
static void test_pipelining_without_reading_is_bounded(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  CHECK_INT(client_open_family(&cl, AF_INET, fx.port, 4096), 0);
  for (int i = 0; i < 40; i++) client_send(&cl, GET("/big"));
  usleep(200000);
  LOCKED(&fx, CHECK(fx.big_served >= 1 && fx.big_served <= 20));
  int ok = 0;
  for (int i = 0; i < 40; i++)
    if (client_read(&cl, NULL) == 0 && cl.status == 200 && cl.body.len == BIG_BYTES &&
        memcmp(cl.body.data, big_body, BIG_BYTES) == 0)
      ok++;
  CHECK_INT(ok, 40);
  LOCKED(&fx, CHECK_INT(fx.big_served, 40));
  client_close(&cl);
  fixture_stop(&fx);
}

static void test_request_bodies(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, "POST /echo HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello world"), 200);
  CHECK_STR(body(&cl), "hello world");
  CHECK_INT(client_call(&cl, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "6\r\nchunk \r\n7\r\nencoded\r\n0\r\n\r\n"),
            200);
  CHECK_STR(body(&cl), "chunk encoded");
  /* Expect: 100-continue is answered before the body is sent. */
  client_send(&cl, "POST /echo HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_INT(cl.status, 100);
  CHECK_INT(client_call(&cl, "ping"), 200);
  CHECK_STR(body(&cl), "ping");
  client_close(&cl);
  fixture_stop(&fx);
}

static void test_size_limits(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  /* Content-Length over max_body_bytes is refused before any body byte is read. */
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, "POST /echo HTTP/1.1\r\nContent-Length: 100000\r\n\r\n"), 413);
  CHECK_CONTAINS(headers(&cl), "Connection: close\r\n");
  CHECK(client_closed(&cl));
  client_close(&cl);
  /* A client that sends the refused body anyway still reads its 413, then sees the connection end. */
  static char chunk[100000];
  memset(chunk, 'x', sizeof chunk);
  CHECK_INT(client_open(&cl, fx.port), 0);
  client_send(&cl, "POST /echo HTTP/1.1\r\nContent-Length: 100000\r\n\r\n");
  client_send_n(&cl, chunk, sizeof chunk);
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_INT(cl.status, 413);
  CHECK(client_closed(&cl));
  client_close(&cl);
  /* A chunked body is counted as it arrives. */
  CHECK_INT(client_open(&cl, fx.port), 0);
  client_send(&cl, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  for (int i = 0; i < 2; i++) {
    client_send(&cl, "9c40\r\n");
    client_send_n(&cl, chunk, 40000);
    client_send(&cl, "\r\n");
  }
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_INT(cl.status, 413);
  CHECK(client_closed(&cl));
  client_close(&cl);
  /* Headers: 3000 bytes pass, 8000 bytes are 431. */
  char req[9000];
  memset(chunk, 'h', 8000);
  CHECK_INT(client_open(&cl, fx.port), 0);
  snprintf(req, sizeof req, "GET /hello HTTP/1.1\r\nX-Big: %.3000s\r\n\r\n", chunk);
  CHECK_INT(client_call(&cl, req), 200);
  snprintf(req, sizeof req, "GET /hello HTTP/1.1\r\nX-Big: %.8000s\r\n\r\n", chunk);
  CHECK_INT(client_call(&cl, req), 431);
  CHECK(client_closed(&cl));
  client_close(&cl);
  fixture_stop(&fx);
}

static void test_malformed_requests_get_400(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  static const char *const garbage[] = {
      "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http\r\n\r\n", /* a TLS ClientHello */
      "GET /hello HTTP/9.9.9\r\n\r\n",
      "GET /hello HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "GET /hello HTTP/1.1\r\nBad Header\r\n\r\n",
  };
  for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
    client cl;
    CHECK_INT(client_open(&cl, fx.port), 0);
    CHECK_INT(client_call(&cl, garbage[i]), 400);
    CHECK_CONTAINS(headers(&cl), "Connection: close\r\n");
    CHECK(client_closed(&cl));
    client_close(&cl);
  }
  /* A good request followed by garbage on one connection: the first is answered, then 400. */
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  client_send(&cl, GET("/hello") "\x01\x02\x03\r\n\r\n");
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_INT(cl.status, 200);
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_INT(cl.status, 400);
  CHECK(client_closed(&cl));
  client_close(&cl);
  /* and the server goes on serving */
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, GET("/hello")), 200);
  client_close(&cl);
  fixture_stop(&fx);
}

/* Mutated requests (bytes flipped, inserted, cut short), each on its own connection that the client
 * then half-closes: the server must answer or close every one, and still serve afterwards. Run under
 * the sanitizers this is the "nothing a client sends can crash the server" check. */
static void test_mutated_requests_never_crash(void) {
  static const char *const seeds[] = {
      "GET /hello?x=1 HTTP/1.1\r\nHost: t\r\nX-Probe: a\r\n\r\n",
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      "POST /echo HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello" GET("/stream?2"),
  };
  fixture fx;
  fixture_start(&fx, NULL);
  unsigned seed = 12345;
  int closed = 0, runs = 300;
  for (int i = 0; i < runs; i++) {
    char req[256];
    size_t n = strlen(seeds[i % 3]);
    memcpy(req, seeds[i % 3], n);
    for (int edits = 1 + i % 4; edits > 0; edits--) {
      seed = seed * 1103515245u + 12345u;
      size_t at = (seed >> 8) % n;
      char byte = (char)(seed >> 20);
      if (seed % 3 == 0) {
        req[at] = byte;
      } else if (seed % 3 == 1 && n < sizeof req) {
        memmove(req + at + 1, req + at, n - at);
        req[at] = byte;
        n++;
      } else {
        n = at + 1;
      }
    }
    client cl;
    CHECK_INT(client_open(&cl, fx.port), 0);
    client_send_n(&cl, req, n);
    shutdown(cl.fd, SHUT_WR);
    closed += client_drain_to_close(&cl, NULL);
    client_close(&cl);
  }
  CHECK_INT(closed, runs);
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, GET("/hello")), 200);
  client_close(&cl);
  fixture_stop(&fx);
}

static void test_async_response_from_timer(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  double t0 = now_s();
  CHECK_INT(client_call(&cl, GET("/slow")), 200);
  CHECK(now_s() - t0 >= 0.035);
  CHECK_STR(body(&cl), "slow\n");
  CHECK_CONTAINS(headers(&cl), "Content-Length: 5\r\n");
  client_close(&cl);
  fixture_stop(&fx);
}

static void test_chunked_streams(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, GET("/stream?5")), 200);
  CHECK_CONTAINS(headers(&cl), "Transfer-Encoding: chunked\r\n");
  CHECK_CONTAINS(headers(&cl), "Content-Type: application/json\r\n");
  CHECK(strstr(headers(&cl), "Content-Length") == NULL);
  CHECK_INT(cl.chunks, 5);
  CHECK_STR(body(&cl), "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n{\"n\":4}\n");
  CHECK_INT(client_call(&cl, GET("/hello")), 200); /* the stream ended cleanly: keep-alive */
  client_close(&cl);
  /* HTTP/1.0 has no chunks: the body runs to the close. */
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, "GET /stream?2 HTTP/1.0\r\n\r\n"), 200);
  CHECK(strstr(headers(&cl), "Transfer-Encoding") == NULL);
  CHECK_STR(body(&cl), "{\"n\":0}\n{\"n\":1}\n");
  client_close(&cl);
  /* A client that leaves mid-stream: on_close fires and the handler stops. */
  CHECK_INT(client_open(&cl, fx.port), 0);
  client_send(&cl, GET("/stream?forever"));
  CHECK_INT(client_read(&cl, "{\"n\":3}\n"), 0);
  client_close(&cl);
  CHECK(wait_for(&fx, &fx.closes, 1));
  LOCKED(&fx, CHECK_INT(fx.write_failed, 0));
  fixture_stop(&fx);
}

static void test_slow_reader_is_dropped(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  CHECK_INT(client_open_family(&cl, AF_INET, fx.port, 4096), 0);
  client_send(&cl, GET("/flood"));
  CHECK(wait_for(&fx, &fx.write_failed, 1));
  /* more than the queue cap was accepted before the drop, so the cap, not the client, ended it */
  LOCKED(&fx, CHECK(fx.flood_bytes >= ((size_t)8 << 20) - FLOOD_BLOCK); CHECK_INT(fx.closes, 0));
  client_close(&cl);
  fixture_stop(&fx);
}

static void test_many_connections(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  int ok = 0;
  for (int i = 0; i < 200; i++) {
    client cl;
    if (client_open(&cl, fx.port) == 0 && client_call(&cl, GET("/hello")) == 200) ok++;
    client_close(&cl);
  }
  CHECK_INT(ok, 200);
  static client cls[BARRIER];
  for (int i = 0; i < BARRIER; i++) CHECK_INT(client_open(&cls[i], fx.port), 0);
  for (int i = 0; i < BARRIER; i++) client_send(&cls[i], GET("/barrier"));
  ok = 0;
  for (int i = 0; i < BARRIER; i++) {
    if (client_read(&cls[i], NULL) == 0 && cls[i].status == 200 && !strcmp(body(&cls[i]), "released\n")) ok++;
    client_close(&cls[i]);
  }
  CHECK_INT(ok, BARRIER); /* every answer needed all BARRIER requests in flight at once */
  fixture_stop(&fx);
}

static void test_idle_timeout_and_max_connections(void) {
  fixture fx;
  lp_http_server_options opts = default_opts;
  opts.idle_timeout_ms = 100;
  fixture_start(&fx, &opts);
  client a, b, c;
  CHECK_INT(client_open(&a, fx.port), 0);
  CHECK_INT(client_call(&a, GET("/hello")), 200);
  double t0 = now_s();
  CHECK(client_closed(&a));
  double idle = now_s() - t0;
  CHECK(idle >= 0.08 && idle < 2.0);
  client_close(&a);
  /* A client that never reads its last response is dropped all the same, before it is delivered. */
  CHECK_INT(client_open_family(&a, AF_INET, fx.port, 4096), 0);
  client_send(&a, "GET /big?huge HTTP/1.1\r\nConnection: close\r\n\r\n");
  usleep(500000);
  size_t got = 0;
  CHECK(client_drain_to_close(&a, &got));
  CHECK(got > 0 && got < HUGE_BYTES);
  client_close(&a);
  fixture_stop(&fx);

  opts = default_opts;
  opts.max_connections = 2;
  fixture_start(&fx, &opts);
  CHECK_INT(client_open(&a, fx.port), 0);
  CHECK_INT(client_open(&b, fx.port), 0);
  CHECK_INT(client_call(&a, GET("/hello")), 200);
  CHECK_INT(client_call(&b, GET("/hello")), 200);
  CHECK_INT(client_open(&c, fx.port), 0); /* accepted by the kernel, closed by the server */
  CHECK(client_closed(&c));
  client_close(&c);
  CHECK_INT(client_call(&a, GET("/hello")), 200); /* the two admitted ones are unaffected */
  client_close(&a);
  client_close(&b);
  fixture_stop(&fx);
}

static void test_server_close_ends_streams_and_waits(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client stream, slow, idle;
  CHECK_INT(client_open(&stream, fx.port), 0);
  CHECK_INT(client_open(&slow, fx.port), 0);
  CHECK_INT(client_open(&idle, fx.port), 0);
  CHECK_INT(client_call(&idle, GET("/hello")), 200);
  client_send(&stream, GET("/stream?forever"));
  CHECK_INT(client_read(&stream, "{\"n\":1}\n"), 0);
  client_send(&slow, GET("/slow"));
  CHECK(wait_for(&fx, &fx.slow_started, 1));
  uv_async_send(&fx.wake);
  /* the stream gets its last chunk and a clean end; its handler heard of it through on_close */
  CHECK_INT(client_read(&stream, NULL), 0);
  CHECK(client_closed(&stream));
  /* the pending response is still answered, then its connection closes */
  CHECK_INT(client_read(&slow, NULL), 0);
  CHECK_STR(body(&slow), "slow\n");
  CHECK_CONTAINS(headers(&slow), "Connection: close\r\n");
  CHECK(client_closed(&slow));
  CHECK(client_closed(&idle));
  client_close(&stream);
  client_close(&slow);
  client_close(&idle);
  fixture_join(&fx);
  CHECK_INT(fx.closes, 1);
}

static void test_listen_addresses(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  lp_error *err = NULL;
  lp_http_server *s = lp_http_server_new(&loop, NULL);
  CHECK_INT(lp_http_server_listen(s, "not-an-address", 0, &err), -1);
  CHECK(err && strcmp(err->code, "Listen") == 0);
  lp_error_free(err);
  err = NULL;
  CHECK_INT(lp_http_server_listen(s, "localhost", 0, &err), 0);
  int port = lp_http_server_port(s);
  CHECK(port > 0);
  lp_http_server *taken = lp_http_server_new(&loop, NULL);
  CHECK_INT(lp_http_server_listen(taken, "127.0.0.1", port, &err), -1);
  CHECK(err && strcmp(err->code, "Listen") == 0 && strstr(err->message, "address already in use"));
  lp_error_free(err);
  err = NULL;
  lp_http_server *v6 = lp_http_server_new(&loop, NULL);
  if (lp_http_server_listen(v6, "[::1]", 0, &err) == 0) {
    CHECK(lp_http_server_port(v6) > 0);
  } else {
    fprintf(stderr, "     (no IPv6 loopback here: %s)\n", err->message);
    lp_error_free(err);
  }
  lp_http_server_close(s, NULL, NULL);
  lp_http_server_close(taken, NULL, NULL);
  lp_http_server_close(v6, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_INT(uv_loop_close(&loop), 0);
}

static void test_ipv6_request(void) {
  fixture fx;
  if (fixture_start_at(&fx, NULL, "::1") == 0) {
    client cl;
    CHECK_INT(client_open_family(&cl, AF_INET6, fx.port, 0), 0);
    CHECK_INT(client_call(&cl, GET("/hello")), 200);
    LOCKED(&fx, CHECK(strncmp(fx.remote, "[::1]:", 6) == 0));
    client_close(&cl);
  } else {
    fprintf(stderr, "     (no IPv6 loopback here: skipped)\n");
  }
  fixture_stop(&fx);
}

static void test_status_text(void) {
  CHECK_STR(lp_http_status_text(200), "OK");
  CHECK_STR(lp_http_status_text(404), "Not Found");
  CHECK_STR(lp_http_status_text(431), "Request Header Fields Too Large");
  CHECK_STR(lp_http_status_text(599), "Unknown");
}

int main(void) {
  for (size_t i = 0; i < sizeof big_body; i++) big_body[i] = (char)('a' + i % 26);
  RUN(test_get_returns_body_and_headers);
  RUN(test_routing_404_405_and_prefix);
  RUN(test_keep_alive_pipelining_and_close);
  RUN(test_pipelining_without_reading_is_bounded);
  RUN(test_request_bodies);
  RUN(test_size_limits);
  RUN(test_malformed_requests_get_400);
  RUN(test_mutated_requests_never_crash);
  RUN(test_async_response_from_timer);
  RUN(test_chunked_streams);
  RUN(test_slow_reader_is_dropped);
  RUN(test_many_connections);
  RUN(test_idle_timeout_and_max_connections);
  RUN(test_server_close_ends_streams_and_waits);
  RUN(test_listen_addresses);
  RUN(test_ipv6_request);
  RUN(test_status_text);
  return check_summary();
}

/* Shared helpers for the gRPC server unit tests (test_grpc_server*.c), header-only. Every
 * spec/c/test_*.c is an executable of its own, so everything here is static and each test binary
 * gets its own copy. The test file defines _GNU_SOURCE first, then includes this file.
 *
 * The server side: the engine's gRPC server (engine/grpc) on an ephemeral loopback port, running in
 * a loop thread of its own (fixture_start .. fixture_stop). Its handlers only touch the fixture under
 * its mutex, and every CHECK runs on the test thread. Handlers: SVC "Echo" answers at once, "Delay"
 * after the milliseconds its message starts with, "Hold" never (the test finishes held calls later
 * with fixture_request(fx, 0), or they are finished after the server closes).
 *
 * The client side: a raw HTTP/2 client, nghttp2 on a non-blocking socket, optionally through OpenSSL,
 * so a test controls every frame (resets, bad prefixes, garbage instead of a preface). cl_open
 * connects, cl_call / cl_call_raw start calls, cl_pump / cl_wait drive the session, reply unframes
 * an answer.
 *
 * TLS material lives under `certs`: a test file that runs TLS fills it (a temporary directory made
 * by spec/grpc/make_certs.sh) before its first fixture_start(fx, 1, ...) or cl_open with tls_opts;
 * otherwise it stays empty and unused.
 *
 * Only what both files use lives here; helpers for one file stay in it. */
#ifndef LUAPROV_SPEC_GRPC_TEST_SUPPORT_H
#define LUAPROV_SPEC_GRPC_TEST_SUPPORT_H

#ifndef _GNU_SOURCE
#error "define _GNU_SOURCE before including grpc_test_support.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/metrics.h"
#include "grpc/server.h"

#define MAX_HELD 16  /* calls the Hold handler keeps */
#define MAX_RPCS 128 /* calls per client */
#define SVC      "/test.Svc/"

/* The directory with ca.pem, server.pem/.key, client.pem/.key, other-ca.pem, other-client.pem/.key;
 * empty in a test file that runs no TLS. */
static char certs[256];

/* Monotonic milliseconds, for the tests' own deadlines. */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- the server side ---- */

/* One server on its own loop and thread; fields after mu are shared with the test thread. */
typedef struct fixture {
  uv_loop_t loop;
  uv_thread_t thread;
  uv_async_t wake;
  uv_mutex_t mu;
  lp_grpc_server *server;
  int port;
  /* under mu */
  int close_requested, finish_requested, closed;
  lp_grpc_call *held[MAX_HELD];
  int nheld;
  double deadline_left; /* seconds to the deadline as the last Delay handler saw it */
} fixture;

#define LOCKED(fx, stmt)                                                                                     \
  do {                                                                                                       \
    uv_mutex_lock(&(fx)->mu);                                                                                \
    stmt;                                                                                                    \
    uv_mutex_unlock(&(fx)->mu);                                                                              \
  } while (0)

/* The handlers, registered by fixture_start with the fixture as their ud. */
static void h_echo(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_grpc_respond(call, msg, len);
}

typedef struct delay_job {
  uv_timer_t timer;
  lp_grpc_call *call;
  lp_buf msg;
} delay_job;

static void delay_free(uv_handle_t *h) {
  delay_job *j = h->data;
  lp_buf_free(&j->msg);
  free(j);
}

static void delay_tick(uv_timer_t *t) {
  delay_job *j = t->data;
  lp_grpc_respond(j->call, (const uint8_t *)j->msg.data, j->msg.len); /* dropped after a deadline */
  uv_close((uv_handle_t *)t, delay_free);
}

static void h_delay(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  fixture *fx = ud;
  delay_job *j = calloc(1, sizeof *j);
  j->call = call;
  lp_buf_append(&j->msg, msg, len);
  double deadline = lp_grpc_call_deadline(call);
  LOCKED(fx, fx->deadline_left = deadline ? deadline - lp_clock_monotonic() : 0);
  uv_timer_init(&fx->loop, &j->timer);
  j->timer.data = j;
  uv_timer_start(&j->timer, delay_tick, (uint64_t)atoi(lp_buf_cstr(&j->msg)), 0);
}

static void h_hold(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  fixture *fx = ud;
  LOCKED(fx, fx->held[fx->nheld++] = call);
}

/* Finishes every held call; each was answered already (cancelled, deadline, server closing), so the
 * late answers are dropped and the calls freed. */
static void finish_held(fixture *fx) {
  for (int i = 0; i < fx->nheld; i++) lp_grpc_respond(fx->held[i], (const uint8_t *)"late", 4);
  fx->nheld = 0;
}

/* Loop-thread callbacks: the server closed; the test thread asked (fixture_request) for something. */
static void on_server_closed(void *ud) {
  fixture *fx = ud;
  LOCKED(fx, fx->closed++);
}

static void on_wake(uv_async_t *a) {
  fixture *fx = a->data;
  uv_mutex_lock(&fx->mu);
  int close = fx->close_requested, finish = fx->finish_requested;
  fx->finish_requested = 0;
  if (finish) finish_held(fx);
  uv_mutex_unlock(&fx->mu);
  if (!close) return;
  uv_close((uv_handle_t *)a, NULL);
  lp_grpc_server_close(fx->server, on_server_closed, fx);
}

static void loop_thread(void *arg) {
  uv_run(&((fixture *)arg)->loop, UV_RUN_DEFAULT);
}

/* Starts a server on 127.0.0.1 and an ephemeral port (fx->port) in a loop thread; tls: with mTLS
 * from certs; max_message: the server's max_message_bytes (0 for its default). */
static void fixture_start(fixture *fx, int tls, size_t max_message) {
  memset(fx, 0, sizeof *fx);
  uv_loop_init(&fx->loop);
  uv_mutex_init(&fx->mu);
  uv_async_init(&fx->loop, &fx->wake, on_wake);
  fx->wake.data = fx;
  char cert[300], key[300], ca[300];
  snprintf(cert, sizeof cert, "%s/server.pem", certs);
  snprintf(key, sizeof key, "%s/server.key", certs);
  snprintf(ca, sizeof ca, "%s/ca.pem", certs);
  lp_grpc_server_options o = {.max_message_bytes = max_message};
  if (tls) o.cert_file = cert, o.key_file = key, o.ca_file = ca;
  lp_error *err = NULL;
  fx->server = lp_grpc_server_new(&fx->loop, &o, &err);
  CHECK(fx->server != NULL);
  lp_grpc_server_handle(fx->server, SVC "Echo", h_echo, fx);
  lp_grpc_server_handle(fx->server, SVC "Delay", h_delay, fx);
  lp_grpc_server_handle(fx->server, SVC "Hold", h_hold, fx);
  CHECK_INT(lp_grpc_server_listen(fx->server, &err), 0);
  if (err) fprintf(stderr, "     %s: %s\n", err->code, err->message);
  lp_error_free(err);
  fx->port = lp_grpc_server_port(fx->server);
  CHECK(fx->port > 0);
  uv_thread_create(&fx->thread, loop_thread, fx);
}

/* Asks the loop thread to close the server (close) or to finish every held call (!close). */
static void fixture_request(fixture *fx, int close) {
  LOCKED(fx, if (close) fx->close_requested = 1; else fx->finish_requested = 1);
  uv_async_send(&fx->wake);
}

/* Waits for the loop to end after a close; asserts on_closed ran and no handle is left; then finishes
 * the calls still held (detached from their closed connections) on this thread. */
static void fixture_join(fixture *fx) {
  uv_thread_join(&fx->thread);
  CHECK_INT(fx->closed, 1);
  CHECK_INT(uv_loop_close(&fx->loop), 0);
  finish_held(fx);
  uv_mutex_destroy(&fx->mu);
}

/* Closes the server and waits for it: fixture_request(fx, 1) then fixture_join. */
static void fixture_stop(fixture *fx) {
  fixture_request(fx, 1);
  fixture_join(fx);
}

/* ---- the client side ---- */

/* One call as the client saw it; filled by the nghttp2 callbacks below. */
typedef struct rpc {
  int32_t id;
  int http_status, grpc_status; /* -1 while absent */
  char message[256];
  lp_buf body;
  int closed;
  uint32_t error_code;
  lp_buf send;
  size_t send_off;
} rpc;

/* One HTTP/2 connection (fd, with ssl when TLS) and the calls made on it. */
typedef struct client {
  int fd;
  SSL_CTX *ctx;
  SSL *ssl;
  nghttp2_session *s;
  int dead, goaway, ping_acks, nrpcs;
  rpc rpcs[MAX_RPCS];
} client;

/* TLS for cl_open: the CA the client trusts and its certificate (NULL: none). */
typedef struct tls_opts {
  const char *ca, *cert; /* file names under certs: "ca", "client" -> ca.pem, client.pem/.key */
} tls_opts;

/* nghttp2 callbacks: each call's status, trailers, body and close; the connection's GOAWAY and
 * PING acks; the request body from rpc.send. */
static int c_on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                       const uint8_t *value, size_t vlen, uint8_t flags, void *ud) {
  rpc *r = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
  char v[256];
  snprintf(v, sizeof v, "%.*s", (int)vlen, (const char *)value);
  if (!r) return 0;
  if (nlen == 7 && !memcmp(name, ":status", 7)) r->http_status = atoi(v);
  if (nlen == 11 && !memcmp(name, "grpc-status", 11)) r->grpc_status = atoi(v);
  if (nlen == 12 && !memcmp(name, "grpc-message", 12)) snprintf(r->message, sizeof r->message, "%s", v);
  return 0;
}

static int c_on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                     void *ud) {
  rpc *r = nghttp2_session_get_stream_user_data(s, id);
  if (r) lp_buf_append(&r->body, data, len);
  return 0;
}

static int c_on_close(nghttp2_session *s, int32_t id, uint32_t error_code, void *ud) {
  rpc *r = nghttp2_session_get_stream_user_data(s, id);
  if (r) r->closed = 1, r->error_code = error_code;
  return 0;
}

static int c_on_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
  client *cl = ud;
  if (f->hd.type == NGHTTP2_GOAWAY) cl->goaway = 1;
  if (f->hd.type == NGHTTP2_PING && (f->hd.flags & NGHTTP2_FLAG_ACK)) cl->ping_acks++;
  return 0;
}

static ssize_t c_read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                           nghttp2_data_source *src, void *ud) {
  rpc *r = src->ptr;
  size_t n = r->send.len - r->send_off;
  if (n > length) n = length;
  if (n) memcpy(buf, r->send.data + r->send_off, n);
  r->send_off += n;
  if (r->send_off == r->send.len) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)n;
}

/* Waits up to ms for events on fd. */
static void wait_fd(int fd, short events, int ms) {
  struct pollfd p = {fd, events, 0};
  poll(&p, 1, ms);
}

/* A blocking TCP connection to 127.0.0.1:port, or -1. */
static int tcp_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* small WINDOW_UPDATEs must not wait */
  struct sockaddr_in a;
  uv_ip4_addr("127.0.0.1", port, &a);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Connects (TLS when t is not NULL) and starts an HTTP/2 session. -1 when TCP or TLS fails; with
 * TLS 1.3 a refused client certificate only shows on the first read. */
static int cl_open(client *cl, int port, const tls_opts *t) {
  memset(cl, 0, sizeof *cl);
  if ((cl->fd = tcp_connect(port)) < 0) return -1;
  fcntl(cl->fd, F_SETFL, fcntl(cl->fd, F_GETFL) | O_NONBLOCK);
  if (t) {
    char ca[300], cert[300], key[300];
    snprintf(ca, sizeof ca, "%s/%s.pem", certs, t->ca);
    cl->ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_load_verify_locations(cl->ctx, ca, NULL);
    SSL_CTX_set_verify(cl->ctx, SSL_VERIFY_PEER, NULL);
    if (t->cert) {
      snprintf(cert, sizeof cert, "%s/%s.pem", certs, t->cert);
      snprintf(key, sizeof key, "%s/%s.key", certs, t->cert);
      SSL_CTX_use_certificate_file(cl->ctx, cert, SSL_FILETYPE_PEM);
      SSL_CTX_use_PrivateKey_file(cl->ctx, key, SSL_FILETYPE_PEM);
    }
    cl->ssl = SSL_new(cl->ctx);
    SSL_set_fd(cl->ssl, cl->fd);
    SSL_set_alpn_protos(cl->ssl, (const unsigned char *)"\x02h2", 3);
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(cl->ssl), "127.0.0.1"); /* as the CA's Go client */
    double end = now_ms() + 5000;
    for (;;) {
      ERR_clear_error();
      int rc = SSL_connect(cl->ssl);
      if (rc == 1) break;
      int e = SSL_get_error(cl->ssl, rc);
      if ((e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) || now_ms() > end) return -1;
      wait_fd(cl->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, 50);
    }
  }
  nghttp2_session_callbacks *cbs;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_header_callback(cbs, c_on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, c_on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, c_on_close);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, c_on_frame);
  nghttp2_session_client_new(&cl->s, cbs, cl);
  nghttp2_session_callbacks_del(cbs);
  nghttp2_submit_settings(cl->s, NGHTTP2_FLAG_NONE, NULL, 0);
  return 0;
}

/* Frees the session, TLS, socket and every call's buffers. */
static void cl_close(client *cl) {
  if (cl->s) nghttp2_session_del(cl->s);
  if (cl->ssl) SSL_free(cl->ssl);
  if (cl->ctx) SSL_CTX_free(cl->ctx);
  if (cl->fd >= 0) close(cl->fd);
  for (int i = 0; i < cl->nrpcs; i++) {
    lp_buf_free(&cl->rpcs[i].body);
    lp_buf_free(&cl->rpcs[i].send);
  }
}

/* The connection is gone: every open stream ends without an answer. */
static void cl_fail(client *cl) {
  cl->dead = 1;
  for (int i = 0; i < cl->nrpcs; i++) cl->rpcs[i].closed = 1;
}

/* Writes all n bytes through TLS or the socket, waiting as needed; -1 when the connection fails. */
static int io_write_all(client *cl, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t w;
    if (cl->ssl) {
      ERR_clear_error();
      int rc = SSL_write(cl->ssl, p, (int)n);
      int e = rc > 0 ? SSL_ERROR_NONE : SSL_get_error(cl->ssl, rc);
      if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) wait_fd(cl->fd, POLLOUT, 50);
      if (e != SSL_ERROR_NONE && e != SSL_ERROR_WANT_WRITE && e != SSL_ERROR_WANT_READ) return -1;
      w = rc > 0 ? rc : 0;
    } else {
      w = send(cl->fd, p, n, MSG_NOSIGNAL);
      if (w < 0 && errno != EAGAIN) return -1;
      if (w < 0) wait_fd(cl->fd, POLLOUT, 50), w = 0;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* > 0 bytes read, 0 nothing to read now, -1 closed or failed */
static ssize_t io_read(client *cl, uint8_t *buf, size_t n) {
  if (cl->ssl) {
    ERR_clear_error();
    int rc = SSL_read(cl->ssl, buf, (int)n);
    return rc > 0 ? rc : SSL_get_error(cl->ssl, rc) == SSL_ERROR_WANT_READ ? 0 : -1;
  }
  ssize_t rc = recv(cl->fd, buf, n, 0);
  return rc > 0 ? rc : rc < 0 && errno == EAGAIN ? 0 : -1;
}

/* Sends what nghttp2 has, then reads what arrives within ms. */
static void cl_pump(client *cl, int ms) {
  if (cl->dead) return;
  const uint8_t *d;
  ssize_t n;
  while ((n = nghttp2_session_mem_send(cl->s, &d)) > 0)
    if (io_write_all(cl, d, (size_t)n) < 0) return cl_fail(cl);
  if (!(cl->ssl && SSL_pending(cl->ssl))) wait_fd(cl->fd, POLLIN, ms);
  uint8_t buf[16384];
  while ((n = io_read(cl, buf, sizeof buf)) != 0)
    if (n < 0 || nghttp2_session_mem_recv(cl->s, buf, (size_t)n) < 0) return cl_fail(cl);
}

/* 1 when every call on cl has closed. */
static int cl_all_closed(client *cl) {
  for (int i = 0; i < cl->nrpcs; i++)
    if (!cl->rpcs[i].closed) return 0;
  return 1;
}

/* Pumps until every call is closed; -1 after ms. */
static int cl_wait(client *cl, int ms) {
  double end = now_ms() + ms;
  while (!cl_all_closed(cl) && now_ms() < end) cl_pump(cl, 10);
  return cl_all_closed(cl) ? 0 : -1;
}

/* A request with body as its DATA (framed by the caller); timeout and content_type may be NULL. */
static rpc *cl_call_raw(client *cl, const char *path, const lp_buf *body, const char *timeout,
                        const char *content_type) {
  rpc *r = &cl->rpcs[cl->nrpcs++];
  memset(r, 0, sizeof *r);
  r->http_status = r->grpc_status = -1;
  lp_buf_append(&r->send, body->data, body->len);
#define H(n, v) {(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE}
  nghttp2_nv nva[] = {H(":method", "POST"),
                      H(":scheme", cl->ssl ? "https" : "http"),
                      H(":path", path),
                      H(":authority", "127.0.0.1"),
                      H("content-type", content_type ? content_type : "application/grpc"),
                      H("te", "trailers"),
                      H("grpc-timeout", timeout ? timeout : "")};
#undef H
  nghttp2_data_provider prd = {.source.ptr = r, .read_callback = c_read_body};
  r->id = nghttp2_submit_request(cl->s, NULL, nva, sizeof nva / sizeof nva[0] - (timeout ? 0 : 1), &prd, r);
  return r;
}

/* The gRPC frame: flag, big-endian length as declared, then n bytes of msg. */
static lp_buf framed(uint8_t flag, uint32_t declared, const void *msg, size_t n) {
  lp_buf b = LP_BUF_INIT;
  uint8_t prefix[5] = {flag, (uint8_t)(declared >> 24), (uint8_t)(declared >> 16), (uint8_t)(declared >> 8),
                       (uint8_t)declared};
  lp_buf_append(&b, prefix, 5);
  lp_buf_append(&b, msg, n);
  return b;
}

/* A well-framed call with msg as its message; timeout (grpc-timeout) may be NULL. */
static rpc *cl_call(client *cl, const char *path, const char *msg, const char *timeout) {
  lp_buf b = framed(0, (uint32_t)strlen(msg), msg, strlen(msg));
  rpc *r = cl_call_raw(cl, path, &b, timeout, NULL);
  lp_buf_free(&b);
  return r;
}

/* The response message with its prefix removed, or NULL when the framing is wrong. */
static const char *reply(rpc *r) {
  const uint8_t *p = (const uint8_t *)r->body.data;
  if (r->body.len < 5 || p[0] != 0) return NULL;
  uint32_t n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
  return n == r->body.len - 5 ? r->body.data + 5 : NULL;
}

/* luaprov_grpc_requests_total{method, code} in this process; tests compare it before and after. */
static double requests_total(const char *method, const char *code) {
  lp_metric *m = lp_metrics_counter(lp_metrics_default(), "luaprov_grpc_requests_total", NULL,
                                    LP_LABELS("method", "code"));
  return lp_metric_value(m, LP_LABELS(method, code));
}

#endif

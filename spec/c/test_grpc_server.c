/* The gRPC server (engine/grpc) against a raw HTTP/2 client: nghttp2 on a non-blocking socket,
 * optionally through OpenSSL, so a test controls every frame (resets, bad prefixes, garbage instead
 * of a preface). The server runs on a loop thread of its own; its handlers only touch the fixture
 * under its mutex, and every CHECK runs on the test thread. Handlers: Echo answers at once, Delay
 * after the milliseconds its message starts with, Hold never (the test finishes held calls later).
 * Certificates come from spec/grpc/make_certs.sh into a temporary directory. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/metrics.h"
#include "grpc/server.h"

#define MAX_HELD 16
#define MAX_RPCS 128
#define SVC      "/test.Svc/"

static char certs[256];

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- the server side ---- */

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

static void fixture_stop(fixture *fx) {
  fixture_request(fx, 1);
  fixture_join(fx);
}

static int held(fixture *fx) {
  int n;
  LOCKED(fx, n = fx->nheld);
  return n;
}

/* ---- the client side ---- */

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

typedef struct client {
  int fd;
  SSL_CTX *ctx;
  SSL *ssl;
  nghttp2_session *s;
  int dead, goaway, ping_acks, nrpcs;
  rpc rpcs[MAX_RPCS];
} client;

typedef struct tls_opts {
  const char *ca, *cert; /* file names under certs: "ca", "client" -> ca.pem, client.pem/.key */
} tls_opts;

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

static void wait_fd(int fd, short events, int ms) {
  struct pollfd p = {fd, events, 0};
  poll(&p, 1, ms);
}

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

/* Pumps until the server holds n calls. */
static void cl_wait_held(client *cl, fixture *fx, int n) {
  double end = now_ms() + 5000;
  while (held(fx) < n && now_ms() < end) cl_pump(cl, 10);
  CHECK_INT(held(fx), n);
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

static double requests_total(const char *method, const char *code) {
  lp_metric *m = lp_metrics_counter(lp_metrics_default(), "luaprov_grpc_requests_total", NULL,
                                    LP_LABELS("method", "code"));
  return lp_metric_value(m, LP_LABELS(method, code));
}

/* ---- tests ---- */

static void test_unary_echo_ping_and_large_messages(void) {
  fixture fx;
  fixture_start(&fx, 0, 0);
  client cl;
  CHECK_INT(cl_open(&cl, fx.port, NULL), 0);
  rpc *hello = cl_call(&cl, SVC "Echo", "hello", NULL);
  rpc *empty = cl_call(&cl, SVC "Echo", "", NULL);
  /* 3 MiB each way: more than the client's 64 KiB windows and the server's 1 MiB stream window. */
  size_t big_len = 3u << 20;
  char *big = malloc(big_len + 1);
  for (size_t i = 0; i < big_len; i++) big[i] = (char)('a' + i % 26);
  big[big_len] = '\0';
  rpc *large = cl_call(&cl, SVC "Echo", big, "10S");
  nghttp2_submit_ping(cl.s, NGHTTP2_FLAG_NONE, NULL);
  CHECK_INT(cl_wait(&cl, 10000), 0);
  CHECK_INT(hello->http_status, 200);
  CHECK_INT(hello->grpc_status, 0);
  CHECK_STR(reply(hello), "hello");
  CHECK_INT(hello->error_code, NGHTTP2_NO_ERROR);
  CHECK_INT(empty->grpc_status, 0);
  CHECK_STR(reply(empty), "");
  CHECK_INT(large->grpc_status, 0);
  CHECK(reply(large) && strcmp(reply(large), big) == 0);
  CHECK_INT(cl.ping_acks, 1);
  free(big);
  cl_close(&cl);
  fixture_stop(&fx);
}

static void test_request_errors(void) {
  fixture fx;
  fixture_start(&fx, 0, 0);
  client cl;
  CHECK_INT(cl_open(&cl, fx.port, NULL), 0);
  lp_buf compressed = framed(1, 5, "hello", 5), shorter = framed(0, 100, "0123456789", 10),
         longer = framed(0, 2, "0123456789", 10), none = LP_BUF_INIT, half = framed(0, 1, "", 0);
  half.len = 3; /* ends inside the prefix */
  lp_buf oversized = framed(0, (5u << 20), "", 0);
  lp_buf_reserve(&oversized, 5u << 20);
  memset(oversized.data + 5, 'x', 5u << 20);
  oversized.len += 5u << 20;
  rpc *unknown = cl_call(&cl, SVC "Nope", "x", NULL);
  rpc *ctype = cl_call_raw(&cl, SVC "Echo", &longer, NULL, "application/json");
  rpc *comp = cl_call_raw(&cl, SVC "Echo", &compressed, NULL, NULL);
  rpc *short_msg = cl_call_raw(&cl, SVC "Echo", &shorter, NULL, NULL);
  rpc *long_msg = cl_call_raw(&cl, SVC "Echo", &longer, NULL, NULL);
  rpc *no_msg = cl_call_raw(&cl, SVC "Echo", &none, NULL, NULL);
  rpc *half_prefix = cl_call_raw(&cl, SVC "Echo", &half, NULL, NULL);
  rpc *bad_timeout = cl_call(&cl, SVC "Echo", "x", "12x");
  rpc *big = cl_call_raw(&cl, SVC "Echo", &oversized, NULL, NULL);
  CHECK_INT(cl_wait(&cl, 10000), 0);
  CHECK_INT(unknown->http_status, 200);
  CHECK_INT(unknown->grpc_status, LP_GRPC_UNIMPLEMENTED);
  CHECK_STR(unknown->message, "unknown method /test.Svc/Nope");
  CHECK_INT(ctype->http_status, 415);
  CHECK_INT(ctype->grpc_status, LP_GRPC_INVALID_ARGUMENT);
  CHECK_INT(comp->grpc_status, LP_GRPC_UNIMPLEMENTED);
  CHECK_INT(short_msg->grpc_status, LP_GRPC_INTERNAL);
  CHECK_STR(short_msg->message, "request message truncated: 10 of 100 bytes");
  CHECK_INT(long_msg->grpc_status, LP_GRPC_INTERNAL);
  CHECK_INT(no_msg->grpc_status, LP_GRPC_INTERNAL);
  CHECK_INT(half_prefix->grpc_status, LP_GRPC_INTERNAL);
  CHECK_INT(bad_timeout->grpc_status, LP_GRPC_INTERNAL);
  CHECK_INT(big->grpc_status, LP_GRPC_RESOURCE_EXHAUSTED);
  /* answered before the request ended: the rest was refused with RST_STREAM(NO_ERROR) */
  CHECK_INT(big->error_code, NGHTTP2_NO_ERROR);
  CHECK_CONTAINS(big->message, "larger than max (5242880 vs. 4194304)");
  rpc *after = cl_call(&cl, SVC "Echo", "still here", NULL);
  CHECK_INT(cl_wait(&cl, 5000), 0);
  CHECK_STR(reply(after), "still here");
  CHECK(!cl.dead);
  lp_buf_free(&compressed), lp_buf_free(&shorter), lp_buf_free(&longer), lp_buf_free(&half);
  lp_buf_free(&oversized);
  cl_close(&cl);
  fixture_stop(&fx);
}

static void test_deadline(void) {
  double before = requests_total("Hold", "DEADLINE_EXCEEDED");
  fixture fx;
  fixture_start(&fx, 0, 0);
  client cl;
  CHECK_INT(cl_open(&cl, fx.port, NULL), 0);
  double t0 = now_ms();
  rpc *late = cl_call(&cl, SVC "Delay", "300", "50m"); /* the handler answers at 300 ms: dropped */
  rpc *never = cl_call(&cl, SVC "Hold", "x", "30000u");
  CHECK_INT(cl_wait(&cl, 5000), 0);
  double took = now_ms() - t0;
  CHECK_INT(late->grpc_status, LP_GRPC_DEADLINE_EXCEEDED);
  CHECK_INT(never->grpc_status, LP_GRPC_DEADLINE_EXCEEDED);
  CHECK_STR(late->message, "deadline exceeded");
  CHECK(took >= 45 && took < 2000); /* generous: sanitizers and a loaded CI machine */
  double left;
  LOCKED(&fx, left = fx.deadline_left);
  CHECK(left > 0 && left <= 0.05);
  usleep(400 * 1000); /* past the Delay handler's late answer */
  rpc *after = cl_call(&cl, SVC "Delay", "1", "1S");
  CHECK_INT(cl_wait(&cl, 5000), 0);
  CHECK_STR(reply(after), "1");
  cl_close(&cl);
  fixture_stop(&fx);
  CHECK_INT(requests_total("Hold", "DEADLINE_EXCEEDED") - before, 1);
}

static void test_concurrent_calls_and_connections(void) {
  fixture fx;
  fixture_start(&fx, 0, 0);
  client cl;
  CHECK_INT(cl_open(&cl, fx.port, NULL), 0);
  char msgs[100][16];
  rpc *r[100];
  for (int i = 0; i < 100; i++) { /* the server's MAX_CONCURRENT_STREAMS, all at once */
    snprintf(msgs[i], sizeof msgs[i], "20:%d", i);
    r[i] = cl_call(&cl, SVC "Delay", msgs[i], "10S");
  }
  CHECK_INT(cl_wait(&cl, 10000), 0);
  int ok = 0;
  for (int i = 0; i < 100; i++) ok += r[i]->grpc_status == 0 && reply(r[i]) && !strcmp(reply(r[i]), msgs[i]);
  CHECK_INT(ok, 100);
  cl_close(&cl);
  /* 8 connections with 10 calls each, pumped in turn */
  static client many[8];
  for (int c = 0; c < 8; c++) {
    CHECK_INT(cl_open(&many[c], fx.port, NULL), 0);
    for (int i = 0; i < 10; i++) cl_call(&many[c], SVC "Delay", "10", "10S");
  }
  int done = 0;
  for (double end = now_ms() + 10000; done < 8 && now_ms() < end;) {
    done = 0;
    for (int c = 0; c < 8; c++) cl_pump(&many[c], 1), done += cl_all_closed(&many[c]);
  }
  ok = 0;
  for (int c = 0; c < 8; c++) {
    for (int i = 0; i < 10; i++) ok += many[c].rpcs[i].grpc_status == 0;
    cl_close(&many[c]);
  }
  CHECK_INT(ok, 80);
  fixture_stop(&fx);
}

static void test_client_cancel(void) {
  double before = requests_total("Hold", "CANCELLED");
  fixture fx;
  fixture_start(&fx, 0, 0);
  client cl;
  CHECK_INT(cl_open(&cl, fx.port, NULL), 0);
  rpc *r = cl_call(&cl, SVC "Hold", "x", NULL);
  cl_wait_held(&cl, &fx, 1);
  nghttp2_submit_rst_stream(cl.s, NGHTTP2_FLAG_NONE, r->id, NGHTTP2_CANCEL);
  CHECK_INT(cl_wait(&cl, 2000), 0);
  CHECK_INT(r->grpc_status, -1);
  CHECK_INT(r->error_code, NGHTTP2_CANCEL);
  cl_pump(&cl, 50);
  fixture_request(&fx, 0); /* the handler finishes now: ignored */
  rpc *after = cl_call(&cl, SVC "Echo", "alive", NULL);
  CHECK_INT(cl_wait(&cl, 5000), 0);
  CHECK_STR(reply(after), "alive");
  CHECK_INT(held(&fx), 0);
  cl_close(&cl);
  fixture_stop(&fx);
  CHECK_INT(requests_total("Hold", "CANCELLED") - before, 1);
}

static void test_garbage_instead_of_a_preface(void) {
  fixture fx;
  fixture_start(&fx, 0, 0);
  int fd = tcp_connect(fx.port);
  const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n\x01\x02\xff garbage";
  CHECK(send(fd, junk, sizeof junk, MSG_NOSIGNAL) > 0);
  struct timeval tv = {3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[256];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
  }
  CHECK(n == 0 || errno == ECONNRESET); /* closed by the server, not timed out */
  close(fd);
  client cl;
  CHECK_INT(cl_open(&cl, fx.port, NULL), 0);
  rpc *r = cl_call(&cl, SVC "Echo", "fine", NULL);
  CHECK_INT(cl_wait(&cl, 5000), 0);
  CHECK_STR(reply(r), "fine");
  cl_close(&cl);
  fixture_stop(&fx);
}

static void test_server_close_with_calls_in_flight(void) {
  fixture fx;
  fixture_start(&fx, 0, 0);
  client cl;
  CHECK_INT(cl_open(&cl, fx.port, NULL), 0);
  rpc *r[3];
  for (int i = 0; i < 3; i++) r[i] = cl_call(&cl, SVC "Hold", "x", "10S");
  cl_wait_held(&cl, &fx, 3);
  fixture_request(&fx, 1);
  CHECK_INT(cl_wait(&cl, 5000), 0);
  for (int i = 0; i < 3; i++) CHECK_INT(r[i]->grpc_status, LP_GRPC_UNAVAILABLE);
  CHECK(cl.goaway);
  cl_close(&cl);     /* else the server lingers for the client's EOF */
  fixture_join(&fx); /* the held calls outlive the server and are finished after it */
}

static int tls_call(int port, const tls_opts *t, rpc *out) {
  client cl;
  int rc = cl_open(&cl, port, t);
  if (rc == 0) {
    rpc *r = cl_call(&cl, SVC "Echo", "secret", NULL);
    cl_wait(&cl, 5000);
    out->grpc_status = r->grpc_status;
    snprintf(out->message, sizeof out->message, "%s", reply(r) ? reply(r) : "");
    rc = cl.dead ? -1 : 0;
  }
  cl_close(&cl);
  return rc;
}

static void test_mtls(void) {
  fixture fx;
  fixture_start(&fx, 1, 0);
  rpc r = {.grpc_status = -1};
  CHECK_INT(tls_call(fx.port, &(tls_opts){"ca", "client"}, &r), 0);
  CHECK_INT(r.grpc_status, 0);
  CHECK_STR(r.message, "secret");
  r.grpc_status = -1;
  CHECK_INT(tls_call(fx.port, &(tls_opts){"ca", NULL}, &r), -1); /* no client certificate */
  CHECK_INT(r.grpc_status, -1);
  CHECK_INT(tls_call(fx.port, &(tls_opts){"ca", "other-client"}, &r), -1); /* signed by another CA */
  CHECK_INT(r.grpc_status, -1);
  CHECK_INT(tls_call(fx.port, &(tls_opts){"other-ca", "client"}, &r), -1); /* client distrusts server */
  CHECK_INT(r.grpc_status, -1);
  client cl; /* plaintext HTTP/2 to a TLS port */
  CHECK_INT(cl_open(&cl, fx.port, NULL), 0);
  cl_call(&cl, SVC "Echo", "x", NULL);
  cl_wait(&cl, 5000);
  CHECK(cl.dead);
  cl_close(&cl);
  CHECK_INT(tls_call(fx.port, &(tls_opts){"ca", "client"}, &r), 0); /* still serving */
  CHECK_INT(r.grpc_status, 0);
  fixture_stop(&fx);
}

static void test_configuration_errors(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  lp_error *err = NULL;
  CHECK(lp_grpc_server_new(&loop, &(lp_grpc_server_options){.cert_file = "x.pem"}, &err) == NULL);
  CHECK_STR(err ? err->code : NULL, "Config");
  lp_error_free(err), err = NULL;
  char ca[300];
  snprintf(ca, sizeof ca, "%s/ca.pem", certs);
  lp_grpc_server_options o = {.cert_file = "/nonexistent/server.pem", .key_file = "k", .ca_file = ca};
  CHECK(lp_grpc_server_new(&loop, &o, &err) == NULL);
  CHECK_STR(err ? err->code : NULL, "TLS");
  CHECK_CONTAINS(err ? err->message : NULL, "/nonexistent/server.pem");
  lp_error_free(err), err = NULL;
  lp_grpc_server *s = lp_grpc_server_new(&loop, &(lp_grpc_server_options){.host = "not-an-ip"}, &err);
  CHECK_INT(lp_grpc_server_listen(s, &err), -1);
  CHECK_STR(err ? err->code : NULL, "Listen");
  lp_error_free(err);
  lp_grpc_server_close(s, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_INT(uv_loop_close(&loop), 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  snprintf(certs, sizeof certs, "%s/luaprov-grpc-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  CHECK(mkdtemp(certs) != NULL);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "sh '%s/spec/grpc/make_certs.sh' '%s'", LUAPROV_SOURCE_DIR, certs);
  CHECK_INT(system(cmd), 0);
  RUN(test_unary_echo_ping_and_large_messages);
  RUN(test_request_errors);
  RUN(test_deadline);
  RUN(test_concurrent_calls_and_connections);
  RUN(test_client_cancel);
  RUN(test_garbage_instead_of_a_preface);
  RUN(test_server_close_with_calls_in_flight);
  RUN(test_mtls);
  RUN(test_configuration_errors);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", certs);
  CHECK_INT(system(cmd), 0);
  return check_summary();
}

/* fuzz_http_server: the HTTP/1 server's request path (engine/http/server.c; README.md).
 *
 * One libuv loop holds the server on a loopback port for the whole run. Each input is one TCP
 * connection from a client on the same loop: it writes the bytes, shuts down its sending side and
 * reads until the server closes, then resets the connection (SO_LINGER 0, so no TIME_WAIT piles up
 * over millions of inputs). Inputs are usually several pipelined requests. The routes cover the ways
 * a handler answers: at once, echoing the body, streaming chunks, and later from a timer (a response
 * still pending when the client goes).
 *
 * A crash, a sanitizer report or a connection the server never closes (libFuzzer's -timeout) is a
 * finding. The header and idle deadlines are short so a request the server waits on ends quickly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <uv.h>

#include "http/server.h"

static uv_loop_t *loop;
static int port;

static void h_hello(const lp_http_request *req, lp_http_response *res, void *ud) {
  const char *probe = lp_http_request_header(req, "x-probe");
  lp_http_response_header(res, "X-Probe", probe ? probe : "-");
  lp_http_respond(res, 200, "text/plain", "hello\n", 6);
}

static void h_echo(const lp_http_request *req, lp_http_response *res, void *ud) {
  lp_http_respond(res, 200, "application/octet-stream", req->body, req->body_len);
}

static void h_stream(const lp_http_request *req, lp_http_response *res, void *ud) {
  lp_http_stream_begin(res, 200, "application/json");
  (void)lp_http_stream_write(res, req->path, strlen(req->path));
  (void)lp_http_stream_write(res, req->query, strlen(req->query));
  lp_http_stream_end(res);
}

/* Answered from a zero timer: the client may have gone by then. */
typedef struct later {
  uv_timer_t timer;
  lp_http_response *res;
} later;

static void later_free(uv_handle_t *h) {
  free(h->data);
}

static void later_gone(lp_http_response *res, void *ud) {
  later *l = ud;
  l->res = NULL;
  uv_close((uv_handle_t *)&l->timer, later_free);
}

static void later_tick(uv_timer_t *t) {
  later *l = t->data;
  lp_http_response *res = l->res;
  lp_http_response_on_close(res, NULL, NULL);
  uv_close((uv_handle_t *)&l->timer, later_free);
  lp_http_respond(res, 204, NULL, NULL, 0);
}

static void h_later(const lp_http_request *req, lp_http_response *res, void *ud) {
  later *l = calloc(1, sizeof *l);
  if (!l) abort();
  l->res = res;
  uv_timer_init(loop, &l->timer);
  l->timer.data = l;
  lp_http_response_on_close(res, later_gone, l);
  uv_timer_start(&l->timer, later_tick, 0, 0);
}

/* ---- the client of one input ---- */

typedef struct client {
  uv_tcp_t tcp;
  uv_connect_t connect;
  uv_write_t write;
  uv_shutdown_t shutdown;
  uv_buf_t out;
  char in[64 * 1024];
  int done;
} client;

static void on_client_closed(uv_handle_t *h) {
  client *c = h->data;
  c->done = 1;
}

static void client_close(client *c) {
  if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0) {
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  uv_close((uv_handle_t *)&c->tcp, on_client_closed);
}

static void on_client_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  client *c = h->data;
  *buf = uv_buf_init(c->in, sizeof c->in);
}

static void on_client_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  if (nread < 0) client_close(s->data);
}

static void on_shutdown(uv_shutdown_t *req, int status) {}

static void on_written(uv_write_t *req, int status) {
  client *c = req->data;
  if (status < 0) {
    client_close(c);
    return;
  }
  if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) < 0) client_close(c);
}

static void on_connected(uv_connect_t *req, int status) {
  client *c = req->data;
  if (status < 0) {
    fprintf(stderr, "fuzz_http_server: connect: %s\n", uv_strerror(status));
    abort();
  }
  uv_read_start((uv_stream_t *)&c->tcp, on_client_alloc, on_client_read);
  c->write.data = c;
  if (uv_write(&c->write, (uv_stream_t *)&c->tcp, &c->out, 1, on_written) < 0) client_close(c);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  loop = uv_default_loop();
  lp_http_server_options opts = {.max_header_bytes = 4096,
                                 .max_body_bytes = 65536,
                                 .idle_timeout_ms = 500,
                                 .header_timeout_ms = 500,
                                 .max_connections = 8};
  lp_http_server *s = lp_http_server_new(loop, &opts);
  lp_http_server_route(s, "GET", "/", h_hello, NULL);
  lp_http_server_route(s, "POST", "/echo", h_echo, NULL);
  lp_http_server_route(s, NULL, "/later", h_later, NULL);
  lp_http_server_route(s, "GET", "/api/*", h_stream, NULL);
  lp_error *err = NULL;
  if (lp_http_server_listen(s, "127.0.0.1", 0, &err)) {
    fprintf(stderr, "fuzz_http_server: %s\n", err->message);
    abort();
  }
  port = lp_http_server_port(s);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static client c;
  memset(&c, 0, sizeof c);
  struct sockaddr_in addr;
  uv_ip4_addr("127.0.0.1", port, &addr);
  uv_tcp_init(loop, &c.tcp);
  c.tcp.data = c.connect.data = c.shutdown.data = &c;
  c.out = uv_buf_init((char *)data, (unsigned)size);
  if (uv_tcp_connect(&c.connect, &c.tcp, (const struct sockaddr *)&addr, on_connected) < 0) abort();
  while (!c.done) uv_run(loop, UV_RUN_ONCE);
  return 0;
}

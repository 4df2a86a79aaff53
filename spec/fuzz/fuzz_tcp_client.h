/* Shared by the fuzz targets that drive a server over loopback TCP (fuzz_http_server, fuzz_grpc_h2c):
 * one client connection per input on the server's own loop. It writes the input, shuts down its
 * sending side and reads (and drops) until the server closes, then resets the connection (SO_LINGER
 * 0), so no TIME_WAIT piles up over millions of inputs. Header-only: each target is an executable
 * of its own. */
#ifndef LUAPROV_SPEC_FUZZ_TCP_CLIENT_H
#define LUAPROV_SPEC_FUZZ_TCP_CLIENT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <uv.h>

typedef struct fuzz_client {
  uv_tcp_t tcp;
  uv_connect_t connect;
  uv_write_t write;
  uv_shutdown_t shutdown;
  uv_buf_t out;
  char in[64 * 1024];
  int done;
} fuzz_client;

static void fuzz_client_closed(uv_handle_t *h) {
  fuzz_client *c = h->data;
  c->done = 1;
}

static void fuzz_client_close(fuzz_client *c) {
  if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0) {
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  uv_close((uv_handle_t *)&c->tcp, fuzz_client_closed);
}

static void fuzz_client_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  fuzz_client *c = h->data;
  *buf = uv_buf_init(c->in, sizeof c->in);
}

static void fuzz_client_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  if (nread < 0) fuzz_client_close(s->data);
}

static void fuzz_client_shut(uv_shutdown_t *req, int status) {}

static void fuzz_client_written(uv_write_t *req, int status) {
  fuzz_client *c = req->data;
  if (status < 0 || uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, fuzz_client_shut) < 0)
    fuzz_client_close(c);
}

static void fuzz_client_connected(uv_connect_t *req, int status) {
  fuzz_client *c = req->data;
  if (status < 0) {
    fprintf(stderr, "fuzz: connect: %s\n", uv_strerror(status));
    abort();
  }
  uv_read_start((uv_stream_t *)&c->tcp, fuzz_client_alloc, fuzz_client_read);
  if (uv_write(&c->write, (uv_stream_t *)&c->tcp, &c->out, 1, fuzz_client_written) < 0) fuzz_client_close(c);
}

/* Sends data to 127.0.0.1:port and runs loop until the server has closed the connection. */
static void fuzz_client_run(uv_loop_t *loop, int port, const uint8_t *data, size_t size) {
  static fuzz_client c;
  memset(&c, 0, sizeof c);
  struct sockaddr_in addr;
  uv_ip4_addr("127.0.0.1", port, &addr);
  uv_tcp_init(loop, &c.tcp);
  c.tcp.data = c.connect.data = c.write.data = c.shutdown.data = &c;
  c.out = uv_buf_init((char *)data, (unsigned)size);
  if (uv_tcp_connect(&c.connect, &c.tcp, (const struct sockaddr *)&addr, fuzz_client_connected) < 0) abort();
  while (!c.done) uv_run(loop, UV_RUN_ONCE);
}

#endif

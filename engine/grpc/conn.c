/* One client connection of the gRPC server: accept, reads fed to TLS or straight to nghttp2, the
 * bounded write queue, and the close sequence (flush, shut the write side, linger, close).
 *
 * Output is pulled, never pushed: whoever changed something (a read, an answer, a completed write)
 * kicks the connection, which asks nghttp2 for frames until the write queue reaches the high-water
 * mark. Reading stops above that mark too, so a client that never reads cannot make the server buffer
 * its PING acknowledgements or our answers without bound. */
#include "grpc/grpc_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"

/* A connection must complete TLS and send its HTTP/2 preface and SETTINGS within this time. */
#define HANDSHAKE_MS 10000
/* After our last bytes, how long to drain what the client still sends: closing with unread input
 * makes the kernel send a reset, which can destroy the GOAWAY and the answers in flight. */
#define LINGER_MS 2000
/* A client that does not read what we send while we close is dropped after this. */
#define END_MS 5000

typedef struct write_req {
  uv_write_t req; /* first: the callback casts back */
  lp_grpc_conn *conn;
  size_t len;
  char *data;
} write_req;

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  lp_grpc_conn *c = h->data;
  *buf = uv_buf_init(c->server->read_buf, sizeof c->server->read_buf);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

static void read_start(lp_grpc_conn *c) {
  if (c->reading) return;
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) {
    lp_grpc__conn_close(c);
    return;
  }
  c->reading = 1;
}

static void read_stop(lp_grpc_conn *c) {
  if (!c->reading) return;
  uv_read_stop((uv_stream_t *)&c->tcp);
  c->reading = 0;
}

static void on_write(uv_write_t *req, int status) {
  write_req *w = (write_req *)req;
  lp_grpc_conn *c = w->conn;
  c->queued -= w->len;
  free(w->data);
  free(w);
  if (status < 0) {
    if (status != UV_ECANCELED)
      lp_debug("engine.grpc", "write failed", LPF_STR("remote", c->remote),
               LPF_STR("error", uv_strerror(status)));
    lp_grpc__conn_close(c);
    return;
  }
  if (c->state == LP_GRPC_CONN_OPEN && c->queued < LP_GRPC_WRITE_HIGH_WATER) lp_grpc__conn_kick(c);
}

void lp_grpc__conn_output(lp_grpc_conn *c, const void *data, size_t len) {
  lp_buf_append(&c->out, data, len);
}

/* Hands the gathered output to libuv as one write. */
static void write_out(lp_grpc_conn *c) {
  if (!c->out.len) return;
  if (c->state == LP_GRPC_CONN_CLOSING) {
    lp_buf_reset(&c->out);
    return;
  }
  write_req *w = lp_xmalloc(sizeof *w);
  w->conn = c;
  w->data = lp_buf_take(&c->out, &w->len);
  uv_buf_t buf = uv_buf_init(w->data, (unsigned)w->len);
  int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_write);
  if (rc < 0) {
    lp_debug("engine.grpc", "write failed", LPF_STR("remote", c->remote), LPF_STR("error", uv_strerror(rc)));
    free(w->data);
    free(w);
    lp_grpc__conn_close(c);
    return;
  }
  c->queued += w->len;
}

/* Pulls frames from nghttp2 (all of them, or up to the high-water mark) and writes them out.
 * Returns -1 when nghttp2 failed and the connection must close. */
static int flush(lp_grpc_conn *c, int all) {
  if (c->flushing) return 0;
  c->flushing = 1;
  int rc = 0;
  if (!c->h2_dead && (!c->ssl || c->tls_ready)) {
    while (all || c->queued + c->out.len < LP_GRPC_WRITE_HIGH_WATER) {
      const uint8_t *data;
      ssize_t n = nghttp2_session_mem_send(c->h2, &data);
      if (n < 0) {
        lp_debug("engine.grpc", "HTTP/2 send failed", LPF_STR("remote", c->remote),
                 LPF_STR("error", nghttp2_strerror((int)n)));
        c->h2_dead = 1;
        rc = -1;
        break;
      }
      if (n == 0) break;
      if (c->ssl)
        lp_grpc__tls_write(c, data, (size_t)n);
      else
        lp_grpc__conn_output(c, data, (size_t)n);
    }
  }
  if (c->ssl) lp_grpc__tls_write(c, NULL, 0); /* handshake messages and alerts too */
  c->flushing = 0;
  write_out(c);
  return c->tls_failed ? -1 : rc;
}

void lp_grpc__conn_kick(lp_grpc_conn *c) {
  if (!c || c->state != LP_GRPC_CONN_OPEN || c->in_recv || c->batch || c->flushing) return;
  if (flush(c, 0) < 0) {
    lp_grpc__conn_close(c);
    return;
  }
  if (c->state != LP_GRPC_CONN_OPEN) return;
  /* Both sides said GOAWAY (or nghttp2 ended the session after a protocol error) and every stream
   * is done: nothing more will be read or written. */
  if (!c->h2_dead && (!c->ssl || c->tls_ready) && !nghttp2_session_want_read(c->h2) &&
      !nghttp2_session_want_write(c->h2)) {
    lp_grpc__conn_end(c);
    return;
  }
  if (c->queued >= LP_GRPC_WRITE_HIGH_WATER)
    read_stop(c);
  else
    read_start(c);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  lp_grpc_conn *c = stream->data;
  if (nread == 0) return;
  if (nread < 0) {
    if (c->state == LP_GRPC_CONN_OPEN && c->ssl && !c->tls_ready && c->received)
      lp_warn("engine.grpc", "TLS handshake failed", LPF_STR("remote", c->remote),
              LPF_STR("reason", "connection closed by the client during the handshake"));
    else if (c->state == LP_GRPC_CONN_OPEN)
      lp_debug("engine.grpc", "connection closed by the client", LPF_STR("remote", c->remote),
               LPF_STR("error", nread == UV_EOF ? "EOF" : uv_strerror((int)nread)));
    lp_grpc__conn_close(c);
    return;
  }
  if (c->state != LP_GRPC_CONN_OPEN) return; /* lingering: discard */
  c->received += (size_t)nread;
  c->batch++;
  if (c->ssl) {
    lp_grpc__tls_feed(c, buf->base, (size_t)nread);
  } else if (lp_grpc__h2_feed(c, (const uint8_t *)buf->base, (size_t)nread) < 0) {
    c->h2_dead = 1;
    c->batch--;
    lp_grpc__conn_end(c);
    return;
  }
  lp_grpc__call_dispatch_ready(c);
  c->batch--;
  lp_grpc__conn_kick(c);
}

static void on_handle_closed(uv_handle_t *h) {
  lp_grpc_conn *c = h->data;
  if (--c->handles_open) return;
  lp_grpc_server *s = c->server;
  if (c->h2) nghttp2_session_del(c->h2);
  if (c->ssl) SSL_free(c->ssl); /* frees both BIOs */
  lp_buf_free(&c->out);
  lp_grpc__server_conn_gone(s, c);
  free(c);
  lp_grpc__server_maybe_free(s);
}

void lp_grpc__conn_close(lp_grpc_conn *c) {
  if (c->state == LP_GRPC_CONN_CLOSING) return;
  c->state = LP_GRPC_CONN_CLOSING;
  lp_grpc__call_detach_all(c);
  uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
  uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

static void on_timer(uv_timer_t *t) {
  lp_grpc_conn *c = t->data;
  if (c->state == LP_GRPC_CONN_OPEN)
    lp_warn("engine.grpc", "connection closed: no TLS handshake or HTTP/2 preface in time",
            LPF_STR("remote", c->remote), LPF_INT("timeout_ms", HANDSHAKE_MS));
  lp_grpc__conn_close(c);
}

void lp_grpc__conn_established(lp_grpc_conn *c) {
  if (c->established) return;
  c->established = 1;
  uv_timer_stop(&c->timer);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  lp_grpc_conn *c = req->data;
  if (c->state != LP_GRPC_CONN_LINGER) return; /* cancelled by uv_close */
  if (status < 0) {
    lp_grpc__conn_close(c);
    return;
  }
  uv_timer_start(&c->timer, on_timer, LINGER_MS, 0);
  read_start(c);
}

void lp_grpc__conn_end(lp_grpc_conn *c) {
  if (c->state != LP_GRPC_CONN_OPEN) return;
  flush(c, 1);
  if (c->ssl) {
    lp_grpc__tls_shutdown(c);
    write_out(c);
  }
  if (c->state != LP_GRPC_CONN_OPEN) return;
  c->state = LP_GRPC_CONN_LINGER;
  uv_timer_start(&c->timer, on_timer, END_MS, 0);
  c->shutdown.data = c;
  /* uv_shutdown waits for the queued writes, then sends FIN. */
  if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) < 0) lp_grpc__conn_close(c);
}

static void set_remote(lp_grpc_conn *c) {
  struct sockaddr_storage ss;
  int len = sizeof ss;
  char ip[64] = "unknown";
  int port = 0;
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0) {
    if (ss.ss_family == AF_INET6) {
      const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
      uv_ip6_name(a, ip, sizeof ip);
      port = ntohs(a->sin6_port);
    } else {
      const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
      uv_ip4_name(a, ip, sizeof ip);
      port = ntohs(a->sin_port);
    }
  }
  snprintf(c->remote, sizeof c->remote, strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, port);
}

static void on_free_handle(uv_handle_t *h) {
  free(h);
}

void lp_grpc__conn_accept(lp_grpc_server *s) {
  if (s->nconns >= LP_GRPC_MAX_CONNECTIONS) {
    /* Accepted only to take it off the backlog: libuv stops polling a listener left unaccepted. */
    uv_tcp_t *extra = lp_xmalloc(sizeof *extra);
    uv_tcp_init(s->loop, extra);
    uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)extra);
    uv_close((uv_handle_t *)extra, on_free_handle);
    lp_warn("engine.grpc", "connection refused: too many connections",
            LPF_INT("limit", LP_GRPC_MAX_CONNECTIONS));
    return;
  }
  lp_grpc_conn *c = lp_xcalloc(1, sizeof *c);
  c->server = s;
  uv_tcp_init(s->loop, &c->tcp);
  uv_timer_init(s->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->handles_open = 2;
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
  s->nconns++;
  if (uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)&c->tcp) < 0 || lp_grpc__h2_start(c) < 0) {
    lp_grpc__conn_close(c);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);       /* answers are small and should not wait for Nagle */
  uv_tcp_keepalive(&c->tcp, 1, 60); /* the CA keeps its connection idle between loops */
  set_remote(c);
  if (s->tls) lp_grpc__tls_attach(c);
  lp_debug("engine.grpc", "connection accepted", LPF_STR("remote", c->remote),
           LPF_BOOL("tls", c->ssl != NULL));
  uv_timer_start(&c->timer, on_timer, HANDSHAKE_MS, 0);
  read_start(c);
}

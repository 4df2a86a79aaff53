/* The HTTP server: listener, connection lifecycle, request parsing with http-parser, routing.
 * Responses are framed and written in server_response.c.
 *
 * A connection parses one request, hands it to its handler and parses nothing more until that
 * response is finished: the parser pauses in on_message_complete and later input waits in the
 * connection's buffer, which is what answers pipelined requests in order. */
#include "http/server.h"
#include "http/server_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "core/log.h"

/* Input buffered while a response is pending before the connection stops reading. */
#define READ_AHEAD_BYTES (64u * 1024)
#define READ_CHUNK_BYTES (16u * 1024)
/* After the last response of a connection, how long to drain what the client still sends: closing
 * with unread input makes the kernel send a reset, which can destroy the response in flight. */
#define LINGER_MS 2000

enum { CB_NONE, CB_URL, CB_FIELD, CB_VALUE };

/* Counts request line and header bytes (with their ": " and CRLF) against max_header_bytes. The
 * parser's own limit (80 KiB, answered 431 as well) caps larger settings. */
static int count_header(lp_http_conn *c, size_t n) {
  c->header_bytes += n;
  if (c->header_bytes <= c->server->opts.max_header_bytes) return 0;
  c->reject_status = 431;
  return -1;
}

static void arm_idle(lp_http_conn *c);

static int on_message_begin(http_parser *p) {
  lp_http_conn *c = p->data;
  /* The first request's deadline runs from the accept (a client that connects and says nothing holds a
   * slot as surely as one that trickles); a later one's from its first byte. */
  if (!c->header_deadline) c->header_deadline = uv_now(c->server->loop) + c->server->opts.header_timeout_ms;
  c->in_trailers = 0;
  arm_idle(c);
  lp_buf_reset(&c->head);
  lp_buf_reset(&c->body);
  c->nhoff = 0;
  c->last_cb = CB_NONE;
  c->header_bytes = 0;
  c->reject_status = 0;
  return 0;
}

static int on_url(http_parser *p, const char *at, size_t n) {
  lp_http_conn *c = p->data;
  size_t line = c->last_cb == CB_NONE ? strlen(http_method_str(p->method)) + sizeof " HTTP/1.1\r\n" : 0;
  if (count_header(c, n + line)) return -1;
  lp_buf_append(&c->head, at, n);
  c->last_cb = CB_URL;
  return 0;
}

/* Trailer fields are counted against the header limit and dropped: the request already points into
 * c->head, which appending could move, and no handler reads trailers. */
static int on_header_field(http_parser *p, const char *at, size_t n) {
  lp_http_conn *c = p->data;
  if (count_header(c, n + (c->last_cb != CB_FIELD ? 4 : 0))) return -1;
  if (c->in_trailers) return 0;
  if (c->last_cb != CB_FIELD) {
    lp_buf_putc(&c->head, '\0'); /* ends the target or the previous value */
    if (c->nhoff == c->hoff_cap) {
      c->hoff_cap = c->hoff_cap ? c->hoff_cap * 2 : 16;
      c->hoff = lp_xrealloc(c->hoff, c->hoff_cap * sizeof *c->hoff);
      c->views = lp_xrealloc(c->views, c->hoff_cap * sizeof *c->views);
    }
    c->hoff[c->nhoff++] = (lp_http_header_offsets){c->head.len, 0};
    c->last_cb = CB_FIELD;
  }
  lp_buf_append(&c->head, at, n);
  return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t n) {
  lp_http_conn *c = p->data;
  if (count_header(c, n)) return -1;
  if (c->in_trailers) return 0;
  if (c->last_cb != CB_VALUE) {
    lp_buf_putc(&c->head, '\0');
    c->hoff[c->nhoff - 1].value = c->head.len;
    c->last_cb = CB_VALUE;
  }
  lp_buf_append(&c->head, at, n);
  return 0;
}

/* Lays out path and query after the headers in c->head, then points the request at it all: only
 * now, because appending may move the buffer. */
static void build_request(lp_http_conn *c) {
  lp_buf *h = &c->head;
  lp_buf_putc(h, '\0'); /* ends the target or the last value */
  size_t tlen = strlen(h->data);
  lp_buf_reserve(h, tlen + 2); /* the appends below read from h itself */
  const char *q = memchr(h->data, '?', tlen);
  size_t plen = q ? (size_t)(q - h->data) : tlen;
  size_t path_off = h->len;
  lp_buf_append(h, h->data, plen);
  lp_buf_putc(h, '\0');
  size_t query_off = h->len;
  if (q) lp_buf_append(h, h->data + plen + 1, tlen - plen - 1);
  lp_buf_putc(h, '\0');
  for (size_t i = 0; i < c->nhoff; i++) {
    c->views[i].name = h->data + c->hoff[i].name;
    c->views[i].value = c->hoff[i].value ? h->data + c->hoff[i].value : "";
  }
  c->req = (lp_http_request){.method = http_method_str(c->parser.method),
                             .target = h->data,
                             .path = h->data + path_off,
                             .query = h->data + query_off,
                             .headers = c->views,
                             .nheaders = c->nhoff,
                             .body = "",
                             .remote_addr = c->remote};
}

static int on_headers_complete(http_parser *p) {
  lp_http_conn *c = p->data;
  if (count_header(c, 2)) return -1;
  build_request(c);
  c->in_trailers = 1;
  c->header_deadline = 0;
  arm_idle(c);
  int has_length = (p->flags & F_CONTENTLENGTH) != 0;
  if (has_length && p->content_length > c->server->opts.max_body_bytes) {
    c->reject_status = 413;
    return -1;
  }
  /* curl and others wait for this before sending a large body; nothing else asks for it. */
  int expects_body = (p->flags & F_CHUNKED) || (has_length && p->content_length > 0);
  const char *expect = lp_http_request_header(&c->req, "Expect");
  if (expects_body && p->http_major == 1 && p->http_minor >= 1 && expect &&
      !strcasecmp(expect, "100-continue")) {
    uv_buf_t buf = uv_buf_init("HTTP/1.1 100 Continue\r\n\r\n", 25);
    lp_http__conn_write(c, &buf, 1);
  }
  return 0;
}

static int on_body(http_parser *p, const char *at, size_t n) {
  lp_http_conn *c = p->data;
  if (n > c->server->opts.max_body_bytes - c->body.len) {
    c->reject_status = 413;
    return -1;
  }
  lp_buf_append(&c->body, at, n);
  return 0;
}

static int on_message_complete(http_parser *p) {
  http_parser_pause(p, 1);
  return 0;
}

static const http_parser_settings parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);
static void server_maybe_free(lp_http_server *s);

static void conn_read_start(lp_http_conn *c) {
  if (c->reading) return;
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) {
    lp_http__conn_close(c);
    return;
  }
  c->reading = 1;
}

static void conn_read_stop(lp_http_conn *c) {
  uv_read_stop((uv_stream_t *)&c->tcp);
  c->reading = 0;
}

static void on_timer(uv_timer_t *t) {
  lp_http_conn *c = t->data;
  if (c->header_deadline && uv_now(c->server->loop) >= c->header_deadline) {
    lp_debug("engine.http", "request headers not complete in time", LPF_STR("remote", c->remote),
             LPF_INT("header_timeout_ms", c->server->opts.header_timeout_ms));
    lp_http__conn_close(c);
    return;
  }
  /* A client still reading what was sent is busy, not idle (the timer repeats); one that has read
   * nothing for a whole period is dropped, even while its last response waits to be flushed. */
  int busy = c->queued && c->wrote;
  c->wrote = 0;
  if (!busy) lp_http__conn_close(c);
}

/* Every byte received restarts the idle period, but not the header deadline: while a request's
 * headers are arriving the timer fires at whichever comes first. */
static void arm_idle(lp_http_conn *c) {
  uint64_t ms = c->server->opts.idle_timeout_ms;
  if (c->header_deadline) {
    uint64_t now = uv_now(c->server->loop);
    uint64_t left = c->header_deadline > now ? c->header_deadline - now : 0;
    if (left < ms) ms = left;
  }
  uv_timer_start(&c->timer, on_timer, ms, c->server->opts.idle_timeout_ms);
}

static int route_matches_path(const lp_http_route *r, const char *path) {
  if (!r->prefix) return strcmp(path, r->path) == 0;
  return strncmp(path, r->path, r->path_len) == 0 && (path[r->path_len] == '\0' || path[r->path_len] == '/');
}

static void route_request(lp_http_conn *c) {
  lp_http_server *s = c->server;
  const lp_http_request *req = &c->req;
  lp_http_response *res = lp_http__response_new(c);
  lp_buf allow = LP_BUF_INIT;
  for (size_t i = 0; i < s->nroutes; i++) {
    const lp_http_route *r = &s->routes[i];
    if (!route_matches_path(r, req->path)) continue;
    if (!r->method || !strcmp(r->method, req->method) ||
        (!strcmp(req->method, "HEAD") && !strcmp(r->method, "GET"))) {
      lp_buf_free(&allow);
      r->handler(req, res, r->ud);
      return;
    }
    lp_buf_printf(&allow, "%s%s", allow.len ? ", " : "", r->method);
  }
  int status = allow.len ? 405 : 404;
  if (allow.len) lp_http_response_header(res, "Allow", allow.data);
  lp_buf_free(&allow);
  char text[64];
  int n = snprintf(text, sizeof text, "%s\n", lp_http_status_text(status));
  lp_http_respond(res, status, "text/plain; charset=utf-8", text, (size_t)n);
}

static void dispatch(lp_http_conn *c) {
  uv_timer_stop(&c->timer);
  c->req.body = c->body.len ? c->body.data : "";
  c->req.body_len = c->body.len;
  route_request(c);
}

static void reject(lp_http_conn *c, enum http_errno e) {
  int status = c->reject_status ? c->reject_status : e == HPE_HEADER_OVERFLOW ? 431 : 400;
  lp_debug("engine.http", "request rejected", LPF_STR("remote", c->remote), LPF_INT("status", status),
           LPF_STR("error", http_errno_name(e)));
  uv_timer_stop(&c->timer);
  lp_http_response *res = lp_http__response_new(c);
  res->keep_alive = 0;
  res->head_only = 0;
  char text[64];
  int n = snprintf(text, sizeof text, "%s\n", lp_http_status_text(status));
  lp_http_respond(res, status, "text/plain; charset=utf-8", text, (size_t)n);
}

static void conn_process(lp_http_conn *c) {
  c->processing = 1;
  while (c->state == LP_CONN_OPEN && !c->res && c->queued < LP_HTTP_WRITE_HIGH_WATER &&
         c->in_off < c->in.len) {
    size_t n =
        http_parser_execute(&c->parser, &parser_settings, c->in.data + c->in_off, c->in.len - c->in_off);
    c->in_off += n;
    enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
    if (e == HPE_PAUSED) {
      http_parser_pause(&c->parser, 0);
      dispatch(c);
      continue;
    }
    if (e != HPE_OK) reject(c, e);
    break; /* everything buffered was consumed */
  }
  c->processing = 0;
  if (c->in_off == c->in.len) {
    c->in_off = 0;
    /* Keep a small buffer for the next request; give back what a burst grew. */
    if (c->in.cap > 4 * READ_AHEAD_BYTES)
      lp_buf_free(&c->in);
    else
      lp_buf_reset(&c->in);
  } else if (c->in_off) {
    memmove(c->in.data, c->in.data + c->in_off, c->in.len - c->in_off);
    c->in.len -= c->in_off;
    c->in.data[c->in.len] = '\0';
    c->in_off = 0;
  }
  if (c->state != LP_CONN_OPEN) return;
  if (c->in.len < READ_AHEAD_BYTES)
    conn_read_start(c);
  else
    conn_read_stop(c);
}

void lp_http__conn_drained(lp_http_conn *c) {
  if (c->state == LP_CONN_OPEN && !c->res && !c->processing) conn_process(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  lp_http_conn *c = h->data;
  lp_buf_reserve(&c->in, READ_CHUNK_BYTES);
  *buf = uv_buf_init(c->in.data + c->in.len, (unsigned)(c->in.cap - c->in.len - 1));
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  lp_http_conn *c = stream->data;
  if (nread == 0) return;
  if (nread < 0) {
    /* A client that closes its side while its response is pending has gone away (as Go's server
     * takes it); otherwise whatever is already queued still goes out. */
    if (nread == UV_EOF && c->state == LP_CONN_OPEN && !c->res) {
      c->peer_eof = 1;
      lp_http__conn_end(c);
    } else {
      lp_http__conn_close(c);
    }
    return;
  }
  if (c->state != LP_CONN_OPEN) {
    lp_buf_reset(&c->in); /* lingering: discard */
    return;
  }
  c->in.len += (size_t)nread;
  c->in.data[c->in.len] = '\0';
  if (!c->res) arm_idle(c);
  conn_process(c);
}

static void on_conn_handle_closed(uv_handle_t *h) {
  lp_http_conn *c = h->data;
  if (--c->handles_open) return;
  if (c->res) {
    lp_http_response *res = c->res;
    c->res = NULL;
    lp_http__response_abandon(res);
  }
  lp_http_server *s = c->server;
  if (c->prev)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  s->nconns--;
  lp_buf_free(&c->in);
  lp_buf_free(&c->head);
  lp_buf_free(&c->body);
  free(c->hoff);
  free(c->views);
  free(c);
  server_maybe_free(s);
}

void lp_http__conn_close(lp_http_conn *c) {
  if (c->state == LP_CONN_CLOSING) return;
  c->state = LP_CONN_CLOSING;
  uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
  uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  lp_http_conn *c = req->data;
  if (c->state != LP_CONN_LINGER) return; /* cancelled by uv_close */
  if (status < 0 || c->peer_eof) {
    lp_http__conn_close(c);
    return;
  }
  uv_timer_start(&c->timer, on_timer, LINGER_MS, 0);
  conn_read_start(c);
}

/* Closes after everything queued has been written (uv_shutdown waits for pending writes); the idle
 * timer keeps running meanwhile, so a client that never reads cannot hold the connection. */
void lp_http__conn_end(lp_http_conn *c) {
  if (c->state != LP_CONN_OPEN) return;
  c->state = LP_CONN_LINGER;
  c->header_deadline = 0; /* a request cut short by the close is not waited for */
  arm_idle(c);
  c->shutdown.data = c;
  if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) < 0) lp_http__conn_close(c);
}

void lp_http__conn_response_done(lp_http_conn *c, int keep_alive) {
  if (c->state != LP_CONN_OPEN) return;
  if (!keep_alive || c->server->closing) {
    lp_http__conn_end(c);
    return;
  }
  arm_idle(c);
  if (!c->processing) conn_process(c);
}

static void set_remote(lp_http_conn *c) {
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

static void on_connection(uv_stream_t *listener, int status) {
  lp_http_server *s = listener->data;
  if (status < 0) return;
  if (s->nconns >= s->opts.max_connections) {
    /* Accepted only to take it off the backlog: libuv stops polling a listener left unaccepted. */
    uv_tcp_t *extra = lp_xmalloc(sizeof *extra);
    uv_tcp_init(s->loop, extra);
    uv_accept(listener, (uv_stream_t *)extra);
    uv_close((uv_handle_t *)extra, on_free_handle);
    return;
  }
  lp_http_conn *c = lp_xcalloc(1, sizeof *c);
  c->server = s;
  uv_tcp_init(s->loop, &c->tcp);
  uv_timer_init(s->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->handles_open = 2;
  http_parser_init(&c->parser, HTTP_REQUEST);
  c->parser.data = c;
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
  s->nconns++;
  if (uv_accept(listener, (uv_stream_t *)&c->tcp) < 0) {
    lp_http__conn_close(c);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);       /* streamed chunks are small and should not wait for Nagle */
  uv_tcp_keepalive(&c->tcp, 1, 60); /* a watch can stay silent for minutes; notice a peer that died */
  set_remote(c);
  c->header_deadline = uv_now(s->loop) + s->opts.header_timeout_ms;
  arm_idle(c);
  conn_read_start(c);
}

lp_http_server *lp_http_server_new(uv_loop_t *loop, const lp_http_server_options *opts) {
  lp_http_server *s = lp_xcalloc(1, sizeof *s);
  s->loop = loop;
  if (opts) s->opts = *opts;
  if (!s->opts.max_header_bytes) s->opts.max_header_bytes = 64 * 1024;
  if (!s->opts.max_body_bytes) s->opts.max_body_bytes = 8 * 1024 * 1024;
  if (!s->opts.idle_timeout_ms) s->opts.idle_timeout_ms = 60 * 1000;
  if (!s->opts.header_timeout_ms) s->opts.header_timeout_ms = 10 * 1000;
  if (!s->opts.max_connections) s->opts.max_connections = 1024;
  s->server_header = lp_xstrdup(s->opts.server_header ? s->opts.server_header : "luaprov");
  s->opts.server_header = s->server_header;
  uv_tcp_init(loop, &s->listener);
  s->listener.data = s;
  return s;
}

void lp_http_server_route(lp_http_server *s, const char *method, const char *path, lp_http_handler handler,
                          void *ud) {
  s->routes = lp_xrealloc(s->routes, (s->nroutes + 1) * sizeof *s->routes);
  lp_http_route *r = &s->routes[s->nroutes++];
  size_t n = strlen(path);
  r->prefix = n >= 2 && path[n - 2] == '/' && path[n - 1] == '*';
  r->path_len = r->prefix ? n - 2 : n;
  r->path = lp_xstrndup(path, r->path_len);
  r->method = method ? lp_xstrdup(method) : NULL;
  r->handler = handler;
  r->ud = ud;
}

int lp_http_server_listen(lp_http_server *s, const char *host, int port, lp_error **err) {
  struct sockaddr_storage addr;
  char literal[64];
  size_t n = host ? strlen(host) : 0;
  if (host && !strcmp(host, "localhost"))
    host = "127.0.0.1";
  else if (n > 2 && n - 2 < sizeof literal && host[0] == '[' && host[n - 1] == ']') {
    memcpy(literal, host + 1, n - 2);
    literal[n - 2] = '\0';
    host = literal;
  }
  int rc = !host || port < 0 || port > 65535 ? UV_EINVAL
           : strchr(host, ':')               ? uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr)
                                             : uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
  if (rc < 0) {
    lp_error_set(err, "Listen", "invalid listen address %s port %d: give an IP literal or localhost",
                 host ? host : "(null)", port);
    return -1;
  }
  if ((rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0)) < 0 ||
      (rc = uv_listen((uv_stream_t *)&s->listener, 511, on_connection)) < 0) {
    lp_error_set(err, "Listen", "cannot listen on %s port %d: %s", host, port, uv_strerror(rc));
    return -1;
  }
  int len = sizeof addr;
  uv_tcp_getsockname(&s->listener, (struct sockaddr *)&addr, &len);
  s->port = ntohs(addr.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&addr)->sin6_port
                                             : ((struct sockaddr_in *)&addr)->sin_port);
  return 0;
}

int lp_http_server_port(const lp_http_server *s) {
  return s->port;
}

static void server_maybe_free(lp_http_server *s) {
  if (!s->closing || !s->listener_closed || s->nconns) return;
  void (*cb)(void *) = s->on_closed;
  void *ud = s->on_closed_ud;
  for (size_t i = 0; i < s->nroutes; i++) {
    free(s->routes[i].method);
    free(s->routes[i].path);
  }
  free(s->routes);
  free(s->server_header);
  free(s);
  if (cb) cb(ud);
}

static void on_listener_closed(uv_handle_t *h) {
  lp_http_server *s = h->data;
  s->listener_closed = 1;
  server_maybe_free(s);
}

void lp_http_server_close(lp_http_server *s, void (*on_closed)(void *ud), void *ud) {
  if (s->closing) return;
  s->closing = 1;
  s->on_closed = on_closed;
  s->on_closed_ud = ud;
  uv_close((uv_handle_t *)&s->listener, on_listener_closed);
  for (lp_http_conn *c = s->conns; c; c = c->next) {
    if (c->state != LP_CONN_OPEN) continue;
    lp_http_response *res = c->res;
    if (!res) {
      if (c->queued)
        lp_http__conn_end(c);
      else
        lp_http__conn_close(c);
    } else if (res->streamed) {
      /* The client sees a complete stream (a watch ends this way too); the handler is told now. */
      lp_http__stream_terminate(res);
      c->res = NULL;
      lp_http__conn_end(c);
      lp_http__response_abandon(res);
    }
  }
}

/* The gRPC server object: options, routes, the listener, metrics and the close sequence.
 * Connections are in conn.c, calls in call.c. */
#include "grpc/server.h"
#include "grpc/grpc_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"

#define DEFAULT_MAX_MESSAGE (4u * 1024 * 1024) /* grpc-go's default receive limit */
#define DEFAULT_MAX_STREAMS 100u

lp_grpc_server *lp_grpc_server_new(uv_loop_t *loop, const lp_grpc_server_options *opts, lp_error **err) {
  lp_grpc_server_options o = {0};
  if (opts) o = *opts;
  int ntls = !!o.cert_file + !!o.key_file + !!o.ca_file;
  if (ntls != 0 && ntls != 3) {
    lp_error_set(err, "Config",
                 "gRPC server: TLS needs cert_file, key_file and ca_file together (%d of 3 set)", ntls);
    return NULL;
  }
  if (o.port < 0 || o.port > 65535) {
    lp_error_set(err, "Config", "gRPC server: port %d out of range", o.port);
    return NULL;
  }
  SSL_CTX *tls = NULL;
  if (ntls == 3 && !(tls = lp_grpc__tls_context(&o, err))) return NULL;
  lp_grpc_server *s = lp_xcalloc(1, sizeof *s);
  s->loop = loop;
  s->tls = tls;
  s->host = lp_xstrdup(o.host ? o.host : "127.0.0.1");
  s->port = o.port;
  s->max_message_bytes = o.max_message_bytes ? o.max_message_bytes : DEFAULT_MAX_MESSAGE;
  s->max_concurrent_streams = o.max_concurrent_streams ? o.max_concurrent_streams : DEFAULT_MAX_STREAMS;
  uv_tcp_init(loop, &s->listener);
  s->listener.data = s;
  /* Labelled by method name only: unknown paths share "unknown", so a scanner cannot grow the series. */
  lp_metrics *m = lp_metrics_default();
  s->requests = lp_metrics_counter(m, "luaprov_grpc_requests_total",
                                   "gRPC calls answered by the engine, by method and status code.",
                                   LP_LABELS("method", "code"));
  s->duration = lp_metrics_histogram(m, "luaprov_grpc_request_duration_seconds",
                                     "Duration of a gRPC call from its request headers to its answer.",
                                     LP_LABELS("method"), NULL, 0);
  return s;
}

void lp_grpc_server_handle(lp_grpc_server *s, const char *path, lp_grpc_handler handler, void *ud) {
  s->routes = lp_xrealloc(s->routes, (s->nroutes + 1) * sizeof *s->routes);
  lp_grpc_route *r = &s->routes[s->nroutes++];
  const char *slash = strrchr(path, '/');
  r->path = lp_xstrdup(path);
  r->label = lp_xstrdup(slash && slash[1] ? slash + 1 : path);
  r->handler = handler;
  r->ud = ud;
}

const lp_grpc_route *lp_grpc__route_find(const lp_grpc_server *s, const char *path) {
  for (size_t i = 0; i < s->nroutes; i++)
    if (!strcmp(s->routes[i].path, path)) return &s->routes[i];
  return NULL;
}

static void on_connection(uv_stream_t *listener, int status) {
  lp_grpc_server *s = listener->data;
  if (status < 0 || s->closing) return;
  lp_grpc__conn_accept(s);
}

int lp_grpc_server_listen(lp_grpc_server *s, lp_error **err) {
  struct sockaddr_storage addr;
  char literal[64];
  const char *host = s->host;
  size_t n = strlen(host);
  if (!strcmp(host, "localhost"))
    host = "127.0.0.1";
  else if (n > 2 && n - 2 < sizeof literal && host[0] == '[' && host[n - 1] == ']') {
    memcpy(literal, host + 1, n - 2);
    literal[n - 2] = '\0';
    host = literal;
  }
  int rc = strchr(host, ':') ? uv_ip6_addr(host, s->port, (struct sockaddr_in6 *)&addr)
                             : uv_ip4_addr(host, s->port, (struct sockaddr_in *)&addr);
  if (rc < 0) {
    lp_error_set(err, "Listen", "gRPC server: invalid listen address %s: give an IP literal or localhost",
                 s->host);
    return -1;
  }
  if ((rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0)) < 0 ||
      (rc = uv_listen((uv_stream_t *)&s->listener, 511, on_connection)) < 0) {
    lp_error_set(err, "Listen", "gRPC server: cannot listen on %s port %d: %s", s->host, s->port,
                 uv_strerror(rc));
    return -1;
  }
  int len = sizeof addr;
  uv_tcp_getsockname(&s->listener, (struct sockaddr *)&addr, &len);
  s->port = ntohs(addr.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&addr)->sin6_port
                                             : ((struct sockaddr_in *)&addr)->sin_port);
  lp_info("engine.grpc", "listening", LPF_STR("host", s->host), LPF_INT("port", s->port),
          LPF_BOOL("mtls", s->tls != NULL));
  return 0;
}

int lp_grpc_server_port(const lp_grpc_server *s) {
  return s->port;
}

void lp_grpc__server_maybe_free(lp_grpc_server *s) {
  if (!s->closing || !s->listener_closed || s->nconns) return;
  void (*cb)(void *) = s->on_closed;
  void *ud = s->on_closed_ud;
  for (size_t i = 0; i < s->nroutes; i++) {
    free(s->routes[i].path);
    free(s->routes[i].label);
  }
  free(s->routes);
  free(s->host);
  if (s->tls) SSL_CTX_free(s->tls);
  free(s);
  if (cb) cb(ud);
}

void lp_grpc__server_conn_gone(lp_grpc_server *s, lp_grpc_conn *c) {
  if (c->prev)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  s->nconns--;
}

static void on_listener_closed(uv_handle_t *h) {
  lp_grpc_server *s = h->data;
  s->listener_closed = 1;
  lp_grpc__server_maybe_free(s);
}

void lp_grpc_server_close(lp_grpc_server *s, void (*on_closed)(void *ud), void *ud) {
  if (s->closing) return;
  s->closing = 1;
  s->on_closed = on_closed;
  s->on_closed_ud = ud;
  uv_close((uv_handle_t *)&s->listener, on_listener_closed);
  /* conn_end may close a connection at once, but its memory stays until its close callback runs. */
  for (lp_grpc_conn *c = s->conns; c; c = c->next) {
    if (c->state != LP_GRPC_CONN_OPEN) continue;
    if (c->ssl && !c->tls_ready) {
      lp_grpc__conn_close(c);
      continue;
    }
    lp_grpc__h2_goaway(c);
    lp_grpc__call_fail_all(c, LP_GRPC_UNAVAILABLE, "server shutting down");
    lp_grpc__conn_end(c);
  }
}

/* An HTTP/1.1 server on the libuv loop, parsing with the http-parser library (libhttp-parser).
 *
 * Routes map a method and a path to a handler. A handler receives the request and a response
 * handle; it may answer at once or keep the handle and answer later from another loop callback
 * (the Kubernetes watch simulator streams for minutes). Keep-alive is the HTTP/1.1 default;
 * pipelined requests on one connection are answered in order, one at a time. Requests larger than
 * the configured limits are answered 413 (body) or 431 (headers) and the connection is closed;
 * malformed requests get 400 and the connection is closed; nothing a client sends can crash the
 * server. Idle keep-alive connections are closed after idle_timeout_ms, and a connection whose
 * request headers are not complete header_timeout_ms after their first byte (for the first request,
 * after the accept) is closed, however steadily they trickle in. Trailer fields of chunked requests are read
 * and dropped. Loop thread only. */
#ifndef LUAPROV_HTTP_SERVER_H
#define LUAPROV_HTTP_SERVER_H

#include <stddef.h>
#include <uv.h>

#include "core/error.h"

typedef struct lp_http_server lp_http_server;
typedef struct lp_http_response lp_http_response;

typedef struct lp_http_server_options {
  size_t max_header_bytes;    /* total request line + headers; 0 = 64 KiB */
  size_t max_body_bytes;      /* 0 = 8 MiB */
  unsigned idle_timeout_ms;   /* keep-alive idle close; 0 = 60 s */
  unsigned header_timeout_ms; /* to a request's last header; 0 = 10 s */
  unsigned max_connections;   /* further connections are accepted and closed at once; 0 = 1024 */
  const char *server_header;  /* "Server:" value; NULL = "luaprov" */
} lp_http_server_options;

typedef struct lp_http_header_view {
  const char *name; /* as received; compare case-insensitively */
  const char *value;
} lp_http_header_view;

/* Valid until the handler's response is finished (lp_http_respond / lp_http_stream_end) or the
 * connection closes, whichever comes first. */
typedef struct lp_http_request {
  const char *method; /* "GET", ... */
  const char *target; /* raw request target: "/api/v1/pods?watch=1" */
  const char *path;   /* target up to '?', percent-decoding NOT applied */
  const char *query;  /* after '?', "" when absent */
  const lp_http_header_view *headers;
  size_t nheaders;
  const char *body; /* NUL-terminated for convenience; body_len excludes the NUL */
  size_t body_len;
  const char *remote_addr; /* "127.0.0.1:54321" */
} lp_http_request;

/* Called on the loop thread. The handler must eventually finish res exactly once, unless the
 * connection closes first (see lp_http_response_on_close). */
typedef void (*lp_http_handler)(const lp_http_request *req, lp_http_response *res, void *ud);

lp_http_server *lp_http_server_new(uv_loop_t *loop, const lp_http_server_options *opts);

/* Adds a route (method and path are copied). method NULL matches every method, and a "GET" route
 * also answers HEAD (the body is dropped). A path ending in slash-asterisk is a prefix route: "/api/"
 * followed by '*' matches "/api" and "/api/v1/x", not "/apix" (spelled out: written together the two
 * characters would open a comment here); otherwise the match is exact. Routes are tried in the order they
 * were added; no match answers 404, a path match with another method 405 with an Allow header. */
void lp_http_server_route(lp_http_server *s, const char *method, const char *path, lp_http_handler handler,
                          void *ud);

/* Binds and listens. host is an IPv4 or IPv6 literal (brackets allowed: "[::1]") or "localhost"
 * (127.0.0.1; no name lookup); port 0 picks a free port (read it back with lp_http_server_port).
 * Returns 0, or -1 with *err set (code "Listen"). */
int lp_http_server_listen(lp_http_server *s, const char *host, int port, lp_error **err);
int lp_http_server_port(const lp_http_server *s);

/* Stops accepting, closes idle connections, lets responses in progress finish (each then closes its
 * connection) until they end or their connection closes, then frees the server and calls on_closed
 * (may be NULL) from a later loop callback. Streaming responses are ended by the server: the last
 * chunk is sent, and their on_close callbacks run before this function returns, so a caller must
 * not touch a stream's response after calling it. */
void lp_http_server_close(lp_http_server *s, void (*on_closed)(void *ud), void *ud);

/* Adds a response header (copied). Only before the status is sent. Date, Server, Connection,
 * Content-Length and Transfer-Encoding are the server's; a name or value holding CR or LF is dropped.
 * Misuse of a response (headers after the status, answering twice) aborts: it is a programming error. */
void lp_http_response_header(lp_http_response *res, const char *name, const char *value);

/* Sends a complete response with Content-Length (none for 1xx, 204, 304) and finishes res; body is
 * copied. content_type may be NULL. */
void lp_http_respond(lp_http_response *res, int status, const char *content_type, const void *body,
                     size_t len);

/* Starts a chunked (Transfer-Encoding: chunked) response. Then any number of writes, then end.
 * An HTTP/1.0 client gets the bytes unframed and the connection closes at the end. */
void lp_http_stream_begin(lp_http_response *res, int status, const char *content_type);
/* Returns 0, or -1 when the client has gone (the caller should stop and call lp_http_stream_end,
 * or wait for on_close). Bytes are copied and queued; a client that stops reading until 8 MiB are
 * queued is dropped, so a stalled watcher cannot grow memory without bound. */
int lp_http_stream_write(lp_http_response *res, const void *data, size_t len);
/* Sends the last chunk and finishes res. */
void lp_http_stream_end(lp_http_response *res);

/* cb runs once, from a loop callback (or from lp_http_server_close), if the connection closes before
 * res is finished; after it returns res is freed and must not be used (finishing it inside cb is a
 * harmless no-op). Set it when keeping res across callbacks: without it res is freed all the same.
 * A client that closes its sending side while its response is pending counts as gone. */
void lp_http_response_on_close(lp_http_response *res, void (*cb)(lp_http_response *res, void *ud), void *ud);

/* Case-insensitive header lookup; NULL when absent. */
const char *lp_http_request_header(const lp_http_request *req, const char *name);

/* Standard reason phrase for a status code ("OK", "Not Found", ...). */
const char *lp_http_status_text(int status);

#endif

/* A gRPC server: HTTP/2 (nghttp2) on the libuv loop, plaintext h2c or TLS with client certificates
 * required and verified (mTLS, OpenSSL), carrying serialized protobuf messages. It knows nothing of
 * any particular service: callers register a handler per method path and get the request message's
 * bytes; they answer with the response message's bytes or a gRPC status.
 *
 * Framing per the gRPC HTTP/2 protocol: length-prefixed messages (compressed ones refused with
 * UNIMPLEMENTED), `grpc-status` and `grpc-message` (percent-encoded) trailers, `grpc-timeout`
 * deadlines (a call past its deadline is answered DEADLINE_EXCEEDED and its handler's late answer is
 * dropped), many concurrent streams, a message size limit (RESOURCE_EXHAUSTED), unknown methods
 * answered UNIMPLEMENTED, malformed frames and messages answered or reset without crashing.
 * Requests must be POST (else HTTP 405) with content-type application/grpc[+codec] (else HTTP 415,
 * grpc-status INVALID_ARGUMENT); the message bytes are handed over whatever the codec. Unary only:
 * exactly one request message (none, a truncated one or a second one is INTERNAL). h2c clients use
 * HTTP/2 prior knowledge (no HTTP/1.1 Upgrade); TLS clients must negotiate "h2" with ALPN.
 * Calls are counted in luaprov_grpc_requests_total{method,code} and timed in
 * luaprov_grpc_request_duration_seconds{method} (method = the path's last segment, "unknown" for
 * unregistered paths; code = the status name, "OK", "DEADLINE_EXCEEDED", ...).
 * Loop thread only. */
#ifndef LUAPROV_GRPC_SERVER_H
#define LUAPROV_GRPC_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core/error.h"

typedef struct lp_grpc_server lp_grpc_server;
typedef struct lp_grpc_call lp_grpc_call;

/* gRPC status codes used by the engine (the full set is 0..16). */
enum {
  LP_GRPC_OK = 0,
  LP_GRPC_CANCELLED = 1,
  LP_GRPC_UNKNOWN = 2,
  LP_GRPC_INVALID_ARGUMENT = 3,
  LP_GRPC_DEADLINE_EXCEEDED = 4,
  LP_GRPC_NOT_FOUND = 5,
  LP_GRPC_FAILED_PRECONDITION = 9,
  LP_GRPC_RESOURCE_EXHAUSTED = 8,
  LP_GRPC_OUT_OF_RANGE = 11,
  LP_GRPC_UNIMPLEMENTED = 12,
  LP_GRPC_INTERNAL = 13,
  LP_GRPC_UNAVAILABLE = 14,
};

typedef struct lp_grpc_server_options {
  const char *host; /* NULL = 127.0.0.1 */
  int port;         /* 0 = a free port (lp_grpc_server_port) */
  /* TLS: all three set = mTLS (server certificate, client certificates required and verified
   * against ca_file); none set = plaintext h2c. Anything in between is an error. */
  const char *cert_file;
  const char *key_file;
  const char *ca_file;
  size_t max_message_bytes;        /* request messages; 0 = 4 MiB */
  unsigned max_concurrent_streams; /* per connection; 0 = 100 */
} lp_grpc_server_options;

/* Called on the loop thread with the request message (valid during the call only). The handler must
 * finish the call exactly once with lp_grpc_respond or lp_grpc_fail, now or later; if the client
 * cancels or the deadline passes first, the server answers for it and a later finish is ignored
 * (the call object stays valid until the handler finishes it). */
typedef void (*lp_grpc_handler)(lp_grpc_call *call, const uint8_t *message, size_t len, void *ud);

/* Creates the server; loads certificates when TLS is configured. NULL with *err (code "TLS" naming
 * the file, or "Config"). Strings are copied. */
lp_grpc_server *lp_grpc_server_new(uv_loop_t *loop, const lp_grpc_server_options *opts, lp_error **err);

/* Registers a handler for a method path such as
 * "/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/NodeGroups". */
void lp_grpc_server_handle(lp_grpc_server *s, const char *path, lp_grpc_handler handler, void *ud);

/* Binds and listens. 0, or -1 with *err (code "Listen"). */
int lp_grpc_server_listen(lp_grpc_server *s, lp_error **err);
int lp_grpc_server_port(const lp_grpc_server *s);

/* Stops accepting, sends GOAWAY, fails calls still waiting with UNAVAILABLE, closes connections,
 * frees the server, then calls on_closed (may be NULL) from a later loop callback. Calls a handler
 * still holds stay valid until it finishes them (their answers are dropped). */
void lp_grpc_server_close(lp_grpc_server *s, void (*on_closed)(void *ud), void *ud);

/* Finishes the call with status OK and one response message (copied). Finishing a call twice is a
 * programming error and aborts. */
void lp_grpc_respond(lp_grpc_call *call, const uint8_t *message, size_t len);
/* Finishes the call with a non-OK status and a message for the client (copied, percent-encoded on
 * the wire); a status outside 1..16 is sent as UNKNOWN. */
void lp_grpc_fail(lp_grpc_call *call, int status, const char *message);

/* Monotonic seconds (lp_clock_monotonic) when the call's deadline passes, or 0 for none. */
double lp_grpc_call_deadline(const lp_grpc_call *call);
/* The method path of the call. */
const char *lp_grpc_call_path(const lp_grpc_call *call);

#endif

/* An asynchronous HTTP client: one libcurl multi handle driven by the libuv loop (curl's multi-uv
 * pattern: CURLMOPT_SOCKETFUNCTION + CURLMOPT_TIMERFUNCTION, one uv_poll per socket, poll errors
 * passed to curl as CURL_CSELECT_ERR). Nothing blocks the loop.
 *
 * Connections are reused through the multi handle's cache; HTTP/2 is negotiated where the server
 * offers it (ALPN over TLS; CURLOPT_PIPEWAIT so bursts multiplex); concurrency per host is bounded
 * (CURLMOPT_MAX_HOST_CONNECTIONS, extra requests queue). Idempotent requests (GET, HEAD, PUT,
 * DELETE, OPTIONS, or any request marked idempotent) are retried on transport errors, 429 and 5xx
 * with exponential backoff and full jitter, honouring Retry-After up to the maximum delay. TLS
 * peers are verified by default; ca_file replaces the system bundle.
 * Every attempt is counted in the default metrics registry: luaprov_http_client_requests_total{method,
 * code="2xx".."5xx"|"error"}, luaprov_http_client_request_duration_seconds{method} and
 * luaprov_http_client_retries_total. Messages name the method and the URL without its userinfo and
 * query (signed cloud requests carry credentials there).
 * Loop thread only. */
#ifndef LUAPROV_HTTP_CLIENT_H
#define LUAPROV_HTTP_CLIENT_H

#include <stddef.h>
#include <uv.h>

#include "core/error.h"

typedef struct lp_http_client lp_http_client;
typedef struct lp_http_call lp_http_call;

typedef struct lp_http_client_options {
  const char *ca_file;          /* PEM bundle; NULL = system default */
  const char *client_cert_file; /* optional mTLS client certificate (PEM) */
  const char *client_key_file;
  int insecure_skip_verify; /* 0 by default; only for the local simulators' self-signed certs */
  unsigned max_per_host;    /* concurrent connections per host; 0 = 16 */
  unsigned max_total;       /* concurrent connections overall; 0 = 256 */
  long connect_timeout_ms;  /* 0 = 10 000 */
  long default_timeout_ms;  /* whole request, per attempt; 0 = 30 000 */
  int max_retries;          /* further attempts for idempotent requests; <0 = 0, default 3 when 0 */
  unsigned retry_base_ms;   /* first backoff ceiling; 0 = 200 */
  unsigned retry_max_ms;    /* 0 = 10 000 */
  const char *user_agent;   /* NULL = "luaprov/<version>" */
} lp_http_client_options;

typedef struct lp_http_header {
  char *name;
  char *value;
} lp_http_header;

/* Start from LP_HTTP_REQUEST_OPTS_INIT: a zeroed struct means "never retry", not "the defaults". */
typedef struct lp_http_request_opts {
  const char *method; /* NULL = "GET"; upper-cased */
  const char *url;
  const lp_http_header *headers; /* copied */
  size_t nheaders;
  const void *body; /* copied */
  size_t body_len;
  long timeout_ms;       /* 0 = client default; per attempt */
  int idempotent;        /* -1 = by method, 0 = never retry, 1 = retry */
  int max_retries;       /* -1 = client default */
  size_t max_body_bytes; /* collected response limit; 0 = 64 MiB; larger answers fail with "TooLarge" */
  /* Streaming: when set, the body of a 2xx answer is delivered here as it arrives and not collected
   * (watch streams; max_body_bytes does not apply). Other statuses' bodies are still collected so the
   * caller can read the server's error. Once bytes have been delivered the request is not retried.
   * Runs inside curl: it may call lp_http_call_cancel and lp_http_client_close, nothing else of this
   * client. Return non-zero to abort the transfer ("Cancelled"). */
  int (*on_data)(const char *data, size_t len, void *ud);
  void *on_data_ud; /* on_data's ud; NULL = the ud given to lp_http_client_request */
} lp_http_request_opts;

/* clang-format off */
#define LP_HTTP_REQUEST_OPTS_INIT {.idempotent = -1, .max_retries = -1}
/* clang-format on */

/* Owned by the done callback, which frees it with lp_http_result_free. On a transport failure
 * status is 0 and error is set; an HTTP error status (4xx/5xx) is NOT an error here. */
typedef struct lp_http_result {
  long status;
  lp_http_header *headers; /* response headers of the final attempt, names lower-cased */
  size_t nheaders;
  char *body; /* NUL-terminated, never NULL; empty when streamed or when error is set */
  size_t body_len;
  int attempts;
  int http_version; /* 1 (HTTP/1.x) or 2; 0 when no answer arrived */
  double elapsed_s; /* all attempts and backoff */
  /* codes: "Timeout", "ConnectFailed", "TLS", "TooLarge", "Cancelled", and "Transport" for the rest
   * (connection reset, malformed URL or header, unsupported scheme) */
  lp_error *error;
} lp_http_result;

typedef void (*lp_http_done_fn)(lp_http_result *result, void *ud);

/* Creates a client on loop. opts may be NULL for the defaults; strings are copied. */
lp_http_client *lp_http_client_new(uv_loop_t *loop, const lp_http_client_options *opts, lp_error **err);

/* Starts a request; everything in req is copied. done runs exactly once on the loop thread, never
 * from inside this call, even when the request fails at once. Returns a handle usable with
 * lp_http_call_cancel until done returns; it is freed after that. */
lp_http_call *lp_http_client_request(lp_http_client *c, const lp_http_request_opts *req, lp_http_done_fn done,
                                     void *ud);

/* Cancels a call in flight or waiting for a retry: done runs (asynchronously) with error code
 * "Cancelled". No-op when called again or from inside the call's own done. */
void lp_http_call_cancel(lp_http_call *call);

/* Number of calls whose done has not run yet. */
size_t lp_http_client_in_flight(const lp_http_client *c);

/* Cancels every call (their done callbacks run with "Cancelled", on a later loop iteration, never
 * inside this call), closes connections and frees the client once libuv has released its handles;
 * on_closed (may be NULL) runs after that. Requests started meanwhile complete as "Cancelled". */
void lp_http_client_close(lp_http_client *c, void (*on_closed)(void *ud), void *ud);

/* Synchronous request with curl's easy interface, for luaprov.so under plain lua5.4 where no loop
 * runs. Same options and retry policy (backoff sleeps); no metrics, since the registry belongs to
 * the loop thread. Never NULL; the caller frees the result. Never use on the loop thread. Any thread;
 * concurrent calls share nothing. */
lp_http_result *lp_http_request_sync(const lp_http_client_options *copts, const lp_http_request_opts *req);

void lp_http_result_free(lp_http_result *r);

/* Case-insensitive response header lookup; NULL when absent. */
const char *lp_http_result_header(const lp_http_result *r, const char *name);

#endif

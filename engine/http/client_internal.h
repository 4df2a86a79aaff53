/* What the asynchronous client (client.c) and lp_http_request_sync (client_sync.c) share: the
 * resolved options, the per-request state that lives across attempts, the easy-handle setup and the
 * retry policy. Keeping one copy of these is what makes "same options and retry policy" true.
 * Private to engine/http; not thread-aware itself: each exchange belongs to one thread. */
#ifndef LUAPROV_HTTP_CLIENT_INTERNAL_H
#define LUAPROV_HTTP_CLIENT_INTERNAL_H

#include <curl/curl.h>
#include <stdint.h>

#include "core/buf.h"
#include "http/client.h"

/* lp_http_client_options with the defaults applied and the strings copied. */
typedef struct lp_http_settings {
  char *ca_file;
  char *client_cert_file;
  char *client_key_file;
  int insecure_skip_verify;
  unsigned max_per_host;
  unsigned max_total;
  long connect_timeout_ms;
  long default_timeout_ms;
  int max_retries;
  unsigned retry_base_ms;
  unsigned retry_max_ms;
  char *user_agent;
} lp_http_settings;

/* One request across all its attempts. The callbacks installed on the easy handle write into the
 * "current attempt" fields; lp_http_exchange_end turns them into the outcome. */
typedef struct lp_http_exchange {
  const lp_http_settings *settings;

  /* the request, copied */
  char *method; /* upper-cased */
  char *url;
  char *safe_url; /* url without userinfo, query or fragment: the only form put in messages */
  struct curl_slist *headers;
  char *body;
  size_t body_len;
  long timeout_ms;
  int retryable; /* resolved from idempotent and the method */
  int max_retries;
  size_t max_body_bytes;
  int (*on_data)(const char *data, size_t len, void *ud);
  void *ud;

  /* the attempt in progress */
  long status; /* from the last status line seen; interim 1xx answers are replaced */
  lp_buf body_buf;
  lp_http_header *resp_headers;
  size_t nresp_headers, resp_headers_cap;
  const char *abort_code; /* set by a callback that stopped the transfer: "TooLarge", "Cancelled" */
  int cancelled;          /* set by the owner; the write callback then stops the transfer */
  char errbuf[CURL_ERROR_SIZE];

  /* across attempts */
  size_t streamed; /* bytes handed to on_data: once non-zero a retry would repeat them */
  int attempts;
  int http_version;
  lp_error *error;
  uint64_t start_ns;
  uint64_t rng;
} lp_http_exchange;

/* curl_global_init once per process; safe from any thread. */
void lp_http_global_init(void);

void lp_http_settings_init(lp_http_settings *s, const lp_http_client_options *opts);
void lp_http_settings_free(lp_http_settings *s);

/* Copies req. An unusable request (no URL) leaves ex->error set; the caller then skips the
 * attempts and goes straight to lp_http_exchange_result. */
void lp_http_exchange_init(lp_http_exchange *ex, const lp_http_settings *s, const lp_http_request_opts *req);

/* An easy handle configured for ex (callbacks write into ex, so ex must not move): reuse when given,
 * which must carry no options (new, or after curl_easy_reset), else a new one. Returns NULL with
 * ex->error set when curl refuses the handle, which is then cleaned up (reuse included). */
CURL *lp_http_exchange_easy(lp_http_exchange *ex, CURL *reuse);

/* Clears the previous attempt's response; call before each transfer. */
void lp_http_exchange_begin(lp_http_exchange *ex);

/* Records the finished attempt (rc from the transfer) and applies the retry policy. Returns the
 * delay in milliseconds before the next attempt, or -1 when this attempt's outcome is final. */
long lp_http_exchange_end(lp_http_exchange *ex, CURL *easy, CURLcode rc);

/* Marks the request cancelled: the final outcome becomes "Cancelled" whatever happened. */
void lp_http_exchange_cancel(lp_http_exchange *ex);

/* Moves the outcome into a new result and releases everything ex holds. */
lp_http_result *lp_http_exchange_result(lp_http_exchange *ex);

/* Bounded label values for metrics: a known method or "OTHER"; "2xx".."5xx" or "error". */
const char *lp_http_method_label(const char *method);
const char *lp_http_code_label(long status, const lp_error *error);

#endif

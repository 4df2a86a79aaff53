/* One request on one curl easy handle: options, response callbacks, error classification and the
 * retry policy (client_internal.h). client.c drives these exchanges from its multi handle on the
 * loop; lp_http_request_sync below drives one with curl_easy_perform and a sleeping backoff, for
 * luaprov.so under plain lua5.4 where no loop runs. */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <uv.h>

#include "core/error.h"
#include "http/client_internal.h"
#include "luaprov_version.h"

#define DEFAULT_MAX_BODY ((size_t)64 << 20)

static pthread_once_t global_once = PTHREAD_ONCE_INIT;

static void global_init_once(void) {
  /* curl_global_init is not thread-safe in every supported curl; once per process, never undone,
   * because other threads may still hold easy handles at exit. */
  curl_global_init(CURL_GLOBAL_DEFAULT);
}

void lp_http_global_init(void) {
  pthread_once(&global_once, global_init_once);
}

static char *dup_or_null(const char *s) {
  return s ? lp_xstrdup(s) : NULL;
}

void lp_http_settings_init(lp_http_settings *s, const lp_http_client_options *o) {
  static const lp_http_client_options defaults;
  if (!o) o = &defaults;
  s->ca_file = dup_or_null(o->ca_file);
  s->client_cert_file = dup_or_null(o->client_cert_file);
  s->client_key_file = dup_or_null(o->client_key_file);
  s->insecure_skip_verify = o->insecure_skip_verify;
  s->max_per_host = o->max_per_host ? o->max_per_host : 16;
  s->max_total = o->max_total ? o->max_total : 256;
  s->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000;
  s->default_timeout_ms = o->default_timeout_ms > 0 ? o->default_timeout_ms : 30000;
  s->max_retries = o->max_retries < 0 ? 0 : o->max_retries == 0 ? 3 : o->max_retries;
  s->retry_base_ms = o->retry_base_ms ? o->retry_base_ms : 200;
  s->retry_max_ms = o->retry_max_ms ? o->retry_max_ms : 10000;
  s->user_agent = o->user_agent ? lp_xstrdup(o->user_agent) : lp_xstrdup("luaprov/" LUAPROV_VERSION);
}

void lp_http_settings_free(lp_http_settings *s) {
  free(s->ca_file);
  free(s->client_cert_file);
  free(s->client_key_file);
  free(s->user_agent);
}

/* Signed cloud requests carry signatures and tokens in the query and credentials may sit in the
 * userinfo, so messages only ever show scheme://host[:port]/path. */
static char *safe_url(const char *url) {
  lp_buf b = LP_BUF_INIT;
  const char *p = url;
  const char *scheme_end = strstr(url, "://");
  if (scheme_end) {
    lp_buf_append(&b, url, (size_t)(scheme_end + 3 - url));
    p = scheme_end + 3;
  }
  size_t auth_len = strcspn(p, "/?#");
  const char *at = NULL;
  for (const char *q = p; q < p + auth_len; q++)
    if (*q == '@') at = q;
  const char *host = at ? at + 1 : p;
  lp_buf_append(&b, host, (size_t)(p + auth_len - host));
  p += auth_len;
  lp_buf_append(&b, p, strcspn(p, "?#"));
  return lp_buf_take(&b, NULL);
}

static int is_token(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr("!#$%&'*+-.^_`|~", *s)) return 0;
  return 1;
}

static int has_crlf(const char *s) {
  return strpbrk(s, "\r\n") != NULL;
}

/* Defaults a method decides when the request does not say: RFC 9110 idempotent methods. */
static int method_is_idempotent(const char *m) {
  static const char *const idempotent[] = {"GET", "HEAD", "PUT", "DELETE", "OPTIONS", NULL};
  for (int i = 0; idempotent[i]; i++)
    if (strcmp(m, idempotent[i]) == 0) return 1;
  return 0;
}

static void fail_early(lp_http_exchange *ex, const char *why) {
  ex->error = lp_error_new("Transport", "%s %s: %s", ex->method, ex->safe_url, why);
}

static void append_header(lp_http_exchange *ex, const char *line) {
  struct curl_slist *l = curl_slist_append(ex->headers, line);
  if (!l) abort(); /* out of memory: fatal for bookkeeping, as lp_xmalloc */
  ex->headers = l;
}

static void copy_headers(lp_http_exchange *ex, const lp_http_request_opts *req) {
  int has_expect = 0, has_type = 0;
  for (size_t i = 0; i < req->nheaders; i++) {
    const char *name = req->headers[i].name, *value = req->headers[i].value ? req->headers[i].value : "";
    if (!name || !is_token(name) || has_crlf(value)) {
      fail_early(ex, "invalid request header");
      return;
    }
    has_expect |= strcasecmp(name, "expect") == 0;
    has_type |= strcasecmp(name, "content-type") == 0;
    /* curl drops "Name:" as a removal request; "Name;" is its spelling for an empty value */
    char *line = *value ? lp_xasprintf("%s: %s", name, value) : lp_xasprintf("%s;", name);
    append_header(ex, line);
    free(line);
  }
  /* Bodies over 1 MiB would otherwise wait a second for a 100 Continue many servers never send. */
  if (!has_expect) append_header(ex, "Expect:");
  /* Without this curl labels every body a form; a body the caller did not type stays untyped. */
  if (!has_type) append_header(ex, "Content-Type:");
}

static uint64_t next_random(lp_http_exchange *ex) {
  /* splitmix64: per exchange, so the sync path needs no shared state between threads */
  uint64_t z = (ex->rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void lp_http_exchange_init(lp_http_exchange *ex, const lp_http_settings *s, const lp_http_request_opts *req) {
  memset(ex, 0, sizeof *ex);
  ex->settings = s;
  ex->start_ns = uv_hrtime();
  ex->rng = ex->start_ns ^ (uint64_t)(uintptr_t)ex;
  ex->method = lp_xstrdup(req->method ? req->method : "GET");
  for (char *m = ex->method; *m; m++) *m = (char)toupper((unsigned char)*m);
  ex->url = lp_xstrdup(req->url ? req->url : "");
  ex->safe_url = safe_url(ex->url);
  ex->timeout_ms = req->timeout_ms > 0 ? req->timeout_ms : s->default_timeout_ms;
  ex->retryable = req->idempotent < 0 ? method_is_idempotent(ex->method) : req->idempotent != 0;
  ex->max_retries = req->max_retries < 0 ? s->max_retries : req->max_retries;
  ex->max_body_bytes = req->max_body_bytes ? req->max_body_bytes : DEFAULT_MAX_BODY;
  ex->on_data = req->on_data;
  ex->ud = req->on_data_ud;
  if (req->body) {
    ex->body = lp_xmalloc(req->body_len + 1);
    memcpy(ex->body, req->body, req->body_len);
    ex->body_len = req->body_len;
  }
  if (!req->url || !*req->url)
    fail_early(ex, "no URL");
  else if (!is_token(ex->method))
    fail_early(ex, "invalid method");
  else
    copy_headers(ex, req);
}

static void clear_response_headers(lp_http_exchange *ex) {
  for (size_t i = 0; i < ex->nresp_headers; i++) {
    free(ex->resp_headers[i].name);
    free(ex->resp_headers[i].value);
  }
  ex->nresp_headers = 0;
}

static const char *find_header(lp_http_header *h, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcasecmp(h[i].name, name) == 0) return h[i].value;
  return NULL;
}

/* Streaming hands only a successful answer to on_data; an error answer's body is collected so the
 * caller can read what the server said. */
static int streaming(const lp_http_exchange *ex) {
  return ex->on_data && ex->status >= 200 && ex->status < 300;
}

static size_t header_cb(char *p, size_t size, size_t n, void *ud) {
  lp_http_exchange *ex = ud;
  size_t len = size * n, end = len;
  while (end > 0 && (p[end - 1] == '\r' || p[end - 1] == '\n')) end--;
  if (end >= 5 && memcmp(p, "HTTP/", 5) == 0) {
    /* a new status line: interim (1xx) answers and their headers are replaced by the final one */
    clear_response_headers(ex);
    const char *sp = memchr(p, ' ', end);
    ex->status = sp ? strtol(sp + 1, NULL, 10) : 0;
    return len;
  }
  if (end == 0) return len;
  if ((p[0] == ' ' || p[0] == '\t') && ex->nresp_headers > 0) { /* obsolete line folding */
    lp_http_header *h = &ex->resp_headers[ex->nresp_headers - 1];
    char *joined = lp_xasprintf("%s %.*s", h->value, (int)(end - 1), p + 1);
    free(h->value);
    h->value = joined;
    return len;
  }
  const char *colon = memchr(p, ':', end);
  if (!colon) return len;
  const char *v = colon + 1, *vend = p + end;
  while (v < vend && (*v == ' ' || *v == '\t')) v++;
  while (vend > v && (vend[-1] == ' ' || vend[-1] == '\t')) vend--;
  if (ex->nresp_headers == ex->resp_headers_cap) {
    ex->resp_headers_cap = ex->resp_headers_cap ? ex->resp_headers_cap * 2 : 16;
    ex->resp_headers = lp_xrealloc(ex->resp_headers, ex->resp_headers_cap * sizeof *ex->resp_headers);
  }
  lp_http_header *h = &ex->resp_headers[ex->nresp_headers++];
  h->name = lp_xstrndup(p, (size_t)(colon - p));
  for (char *c = h->name; *c; c++) *c = (char)tolower((unsigned char)*c);
  h->value = lp_xstrndup(v, (size_t)(vend - v));
  /* refuse an announced oversized body before reading any of it (HEAD announces without sending) */
  if (strcmp(h->name, "content-length") == 0 && !streaming(ex) && strcmp(ex->method, "HEAD") != 0 &&
      strtoull(h->value, NULL, 10) > ex->max_body_bytes) {
    ex->abort_code = "TooLarge";
    return 0;
  }
  return len;
}

static size_t write_cb(char *p, size_t size, size_t n, void *ud) {
  lp_http_exchange *ex = ud;
  size_t len = size * n;
  if (ex->cancelled) {
    ex->abort_code = "Cancelled";
    return 0;
  }
  if (streaming(ex)) {
    ex->streamed += len;
    if (ex->on_data(p, len, ex->ud) != 0) {
      ex->abort_code = "Cancelled";
      return 0;
    }
    return len;
  }
  if (len > ex->max_body_bytes - ex->body_buf.len) {
    ex->abort_code = "TooLarge";
    return 0;
  }
  lp_buf_append(&ex->body_buf, p, len);
  return len;
}

CURL *lp_http_exchange_easy(lp_http_exchange *ex, CURL *reuse) {
  const lp_http_settings *s = ex->settings;
  CURL *e = reuse ? reuse : curl_easy_init();
  if (!e) {
    fail_early(ex, "curl_easy_init failed");
    return NULL;
  }
  CURLcode rc = CURLE_OK;
#define SET(opt, val)                                                                                        \
  do {                                                                                                       \
    if (rc == CURLE_OK) rc = curl_easy_setopt(e, opt, val);                                                  \
  } while (0)
  SET(CURLOPT_URL, ex->url);
  SET(CURLOPT_NOSIGNAL, 1L); /* no SIGALRM-based DNS timeouts: the engine has threads and a loop */
  SET(CURLOPT_ERRORBUFFER, ex->errbuf);
#if LIBCURL_VERSION_NUM >= 0x075500
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
#else
  SET(CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
  /* explicit, as curl's default changed across releases. PIPEWAIT lets a burst share one h2
   * connection; only over TLS, where ALPN settles "can it multiplex?" at the handshake. Over plain
   * http curl only learns it from the first response's headers, so one slow answer (a held watch, a
   * hung server) would stall every other request to that host. */
  SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
  if (strncasecmp(ex->url, "https://", 8) == 0) SET(CURLOPT_PIPEWAIT, 1L);
  SET(CURLOPT_TCP_KEEPALIVE, 1L);
  SET(CURLOPT_CONNECTTIMEOUT_MS, s->connect_timeout_ms);
  SET(CURLOPT_TIMEOUT_MS, ex->timeout_ms);
  SET(CURLOPT_USERAGENT, s->user_agent);
  SET(CURLOPT_HTTPHEADER, ex->headers);
  SET(CURLOPT_HEADERFUNCTION, header_cb);
  SET(CURLOPT_HEADERDATA, ex);
  SET(CURLOPT_WRITEFUNCTION, write_cb);
  SET(CURLOPT_WRITEDATA, ex);
  SET(CURLOPT_SSL_VERIFYPEER, s->insecure_skip_verify ? 0L : 1L);
  SET(CURLOPT_SSL_VERIFYHOST, s->insecure_skip_verify ? 0L : 2L);
  if (s->ca_file) SET(CURLOPT_CAINFO, s->ca_file);
  if (s->client_cert_file) SET(CURLOPT_SSLCERT, s->client_cert_file);
  if (s->client_key_file) SET(CURLOPT_SSLKEY, s->client_key_file);

  int sends_body = ex->body || strcmp(ex->method, "POST") == 0 || strcmp(ex->method, "PUT") == 0 ||
                   strcmp(ex->method, "PATCH") == 0;
  if (strcmp(ex->method, "HEAD") == 0) {
    SET(CURLOPT_NOBODY, 1L); /* a custom "HEAD" would wait for a body that never comes */
  } else if (sends_body) {
    /* an empty body still sends Content-Length: 0, which some servers require on PUT */
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)ex->body_len);
    SET(CURLOPT_POSTFIELDS, ex->body ? ex->body : "");
    if (strcmp(ex->method, "POST") != 0) SET(CURLOPT_CUSTOMREQUEST, ex->method);
  } else if (strcmp(ex->method, "GET") != 0) {
    SET(CURLOPT_CUSTOMREQUEST, ex->method);
  }
#undef SET
  if (rc != CURLE_OK) {
    fail_early(ex, curl_easy_strerror(rc));
    curl_easy_cleanup(e);
    return NULL;
  }
  return e;
}

void lp_http_exchange_begin(lp_http_exchange *ex) {
  ex->status = 0;
  lp_buf_reset(&ex->body_buf);
  clear_response_headers(ex);
  ex->abort_code = NULL;
  ex->errbuf[0] = '\0';
  ex->attempts++;
}

static const char *classify(CURLcode rc) {
  switch (rc) {
  case CURLE_OPERATION_TIMEDOUT:
    return "Timeout";
  case CURLE_COULDNT_CONNECT:
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY:
    return "ConnectFailed";
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_CIPHER:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_CRL_BADFILE:
  case CURLE_SSL_ISSUER_ERROR:
  case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
  case CURLE_SSL_INVALIDCERTSTATUS:
  case CURLE_SSL_ENGINE_NOTFOUND:
  case CURLE_SSL_ENGINE_SETFAILED:
  case CURLE_SSL_ENGINE_INITFAILED:
  case CURLE_SSL_CLIENTCERT:
  case CURLE_USE_SSL_FAILED:
    return "TLS";
  case CURLE_FILESIZE_EXCEEDED:
    return "TooLarge";
  case CURLE_ABORTED_BY_CALLBACK:
    return "Cancelled";
  default:
    return "Transport";
  }
}

/* Failures a second attempt may not meet: the network or the peer, never the request itself.
 * TLS failures are left out: a certificate that fails verification fails again. */
static int transient(CURLcode rc) {
  switch (rc) {
  case CURLE_OPERATION_TIMEDOUT:
  case CURLE_COULDNT_CONNECT:
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_SEND_ERROR:
  case CURLE_RECV_ERROR:
  case CURLE_GOT_NOTHING:
  case CURLE_PARTIAL_FILE:
  case CURLE_HTTP2:
  case CURLE_HTTP2_STREAM:
    return 1;
  default:
    return 0;
  }
}

/* 501 and 505 describe the request, not the server's state; every other 5xx may pass. */
static int retry_status(long status) {
  return status == 429 || (status >= 500 && status != 501 && status != 505);
}

static long backoff_ms(lp_http_exchange *ex) {
  const lp_http_settings *s = ex->settings;
  /* Retry-After in seconds (the HTTP-date form is rare from APIs and falls back to jitter) */
  const char *ra = ex->status ? find_header(ex->resp_headers, ex->nresp_headers, "retry-after") : NULL;
  if (ra && *ra && strspn(ra, "0123456789") == strlen(ra)) {
    unsigned long long secs = strtoull(ra, NULL, 10);
    return secs > s->retry_max_ms / 1000 ? (long)s->retry_max_ms : (long)(secs * 1000);
  }
  /* full jitter (uniform in [0, min(max, base * 2^n)]) spreads a fleet's retries apart */
  int shift = ex->attempts - 1 < 31 ? ex->attempts - 1 : 31;
  uint64_t ceiling = (uint64_t)s->retry_base_ms << shift;
  if (ceiling > s->retry_max_ms) ceiling = s->retry_max_ms;
  return (long)(next_random(ex) % (ceiling + 1));
}

/* Non-zero when text quotes a part of the URL that safe_url leaves out (query, userinfo). */
static int quotes_secret(const char *text, const char *url) {
  const char *q = strpbrk(url, "?#");
  if (q && q[1] && strstr(text, q + 1)) return 1;
  const char *auth = strstr(url, "://");
  auth = auth ? auth + 3 : url;
  size_t auth_len = strcspn(auth, "/?#");
  for (size_t i = auth_len; i > 0; i--) {
    if (auth[i - 1] != '@') continue;
    char *userinfo = lp_xstrndup(auth, i - 1);
    int found = *userinfo && strstr(text, userinfo) != NULL;
    free(userinfo);
    return found;
  }
  return 0;
}

/* curl's own text is the most precise, but it may quote what it was given. */
static const char *curl_detail(const lp_http_exchange *ex, CURLcode rc) {
  return ex->errbuf[0] && !quotes_secret(ex->errbuf, ex->url) ? ex->errbuf : curl_easy_strerror(rc);
}

long lp_http_exchange_end(lp_http_exchange *ex, CURL *easy, CURLcode rc) {
  long status = 0, version = 0;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_getinfo(easy, CURLINFO_HTTP_VERSION, &version);
  if (status > 0)
    ex->http_version = version >= CURL_HTTP_VERSION_3 ? 3 : version >= CURL_HTTP_VERSION_2_0 ? 2 : 1;
  lp_error_free(ex->error);
  ex->error = NULL;
  if (rc == CURLE_OK && !ex->cancelled) {
    ex->status = status;
  } else {
    ex->status = 0;
    const char *code = ex->cancelled ? "Cancelled" : ex->abort_code ? ex->abort_code : classify(rc);
    char detail[64];
    const char *text = detail;
    if (strcmp(code, "Cancelled") == 0)
      text = "cancelled";
    else if (strcmp(code, "TooLarge") == 0)
      snprintf(detail, sizeof detail, "response body exceeds %zu bytes", ex->max_body_bytes);
    else
      text = curl_detail(ex, rc);
    ex->error = lp_error_new(code, "%s %s: %s", ex->method, ex->safe_url, text);
  }
  int again = ex->retryable && !ex->cancelled && ex->streamed == 0 && ex->attempts <= ex->max_retries &&
              (ex->error ? !ex->abort_code && transient(rc) : retry_status(ex->status));
  if (!again) {
    if (ex->error && ex->attempts > 1) {
      char *m = lp_xasprintf("%s (after %d attempts)", ex->error->message, ex->attempts);
      free(ex->error->message);
      ex->error->message = m;
    }
    return -1;
  }
  return backoff_ms(ex);
}

void lp_http_exchange_cancel(lp_http_exchange *ex) {
  ex->cancelled = 1;
}

lp_http_result *lp_http_exchange_result(lp_http_exchange *ex) {
  lp_http_result *r = lp_xcalloc(1, sizeof *r);
  if (ex->cancelled && (!ex->error || strcmp(ex->error->code, "Cancelled") != 0)) {
    lp_error_free(ex->error);
    ex->error = lp_error_new("Cancelled", "%s %s: cancelled", ex->method, ex->safe_url);
  }
  r->error = ex->error;
  r->status = ex->error ? 0 : ex->status;
  r->headers = ex->resp_headers;
  r->nheaders = ex->nresp_headers;
  if (ex->error) lp_buf_reset(&ex->body_buf); /* a partial body would only mislead */
  lp_buf_cstr(&ex->body_buf);                 /* an empty buffer is not NUL-terminated until asked */
  r->body = lp_buf_take(&ex->body_buf, &r->body_len);
  r->attempts = ex->attempts;
  r->http_version = ex->http_version;
  r->elapsed_s = (double)(uv_hrtime() - ex->start_ns) / 1e9;
  free(ex->method);
  free(ex->url);
  free(ex->safe_url);
  curl_slist_free_all(ex->headers);
  free(ex->body);
  memset(ex, 0, sizeof *ex);
  return r;
}

const char *lp_http_method_label(const char *method) {
  static const char *const known[] = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", NULL};
  for (int i = 0; known[i]; i++)
    if (strcmp(method, known[i]) == 0) return known[i];
  return "OTHER";
}

const char *lp_http_code_label(long status, const lp_error *error) {
  static const char *const classes[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
  if (error || status < 100 || status > 599) return "error";
  return classes[status / 100 - 1];
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

lp_http_result *lp_http_request_sync(const lp_http_client_options *copts, const lp_http_request_opts *req) {
  lp_http_global_init();
  lp_http_settings settings;
  lp_http_settings_init(&settings, copts);
  lp_http_exchange ex;
  lp_http_exchange_init(&ex, &settings, req);
  CURL *easy = ex.error ? NULL : lp_http_exchange_easy(&ex, NULL);
  /* one easy handle for every attempt keeps its connection, so retries reuse it */
  for (long delay = 0; easy && delay >= 0;) {
    lp_http_exchange_begin(&ex);
    delay = lp_http_exchange_end(&ex, easy, curl_easy_perform(easy));
    if (delay > 0) sleep_ms(delay);
  }
  if (easy) curl_easy_cleanup(easy);
  lp_http_result *r = lp_http_exchange_result(&ex);
  lp_http_settings_free(&settings);
  return r;
}

void lp_http_result_free(lp_http_result *r) {
  if (!r) return;
  for (size_t i = 0; i < r->nheaders; i++) {
    free(r->headers[i].name);
    free(r->headers[i].value);
  }
  free(r->headers);
  free(r->body);
  lp_error_free(r->error);
  free(r);
}

const char *lp_http_result_header(const lp_http_result *r, const char *name) {
  return r ? find_header(r->headers, r->nheaders, name) : NULL;
}

/* The watch state machine (see watch.h for the states and transitions). */
#include "kube/watch.h"

#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/log.h"
#include "kube/kube_internal.h"

#define DEFAULT_TIMEOUT_S      290
#define DEFAULT_BACKOFF_MS     800
#define DEFAULT_BACKOFF_MAX_MS 30000
#define DEFAULT_MAX_LINE       (16u * 1024 * 1024)
#define IDLE_GUARD_S           30 /* the client gives up this long after timeoutSeconds */

struct lp_kube_watch {
  lp_kube_client *c;
  lp_kube_watch_state state;
  char *path;
  char *query;
  char *rv;
  lp_kube_watch_opts opts;
  lp_kube_watch_handlers h;
  lp_http_call *call;
  uv_timer_t timer;
  int timer_closed;
  unsigned failures; /* consecutive, for the backoff */
  /* the stream in flight */
  lp_buf line; /* the incomplete tail */
  size_t lines;
  int gone;       /* an ERROR 410 event arrived */
  lp_error *fail; /* why on_data aborted the stream */
};

static void watch_request(lp_kube_watch *w);

static void maybe_free(lp_kube_watch *w) {
  if (w->state != LP_KUBE_STOPPING || w->call || !w->timer_closed) return;
  lp_buf_free(&w->line);
  lp_error_free(w->fail);
  free(w->path);
  free(w->query);
  free(w->rv);
  free(w);
}

static void set_rv(lp_kube_watch *w, const char *rv) {
  char *copy = lp_xstrdup(rv ? rv : "");
  free(w->rv);
  w->rv = copy;
}

/* Decodes one line; returns 0 to go on, -1 to abort the stream (w->gone or w->fail set). */
static int handle_line(lp_kube_watch *w, const char *text, size_t len) {
  while (len && (text[len - 1] == '\r' || text[len - 1] == ' ')) len--;
  if (!len) return 0;
  json_error_t jerr;
  json_t *ev = json_loadb(text, len, 0, &jerr);
  const char *type = json_string_value(json_object_get(ev, "type"));
  json_t *obj = json_object_get(ev, "object");
  if (!type || !json_is_object(obj)) {
    lp_error_set(&w->fail, "InvalidResponse", "watch %s: undecodable event: %s", w->path,
                 ev ? "no type or object" : jerr.text);
    json_decref(ev);
    return -1;
  }
  w->lines++;
  w->failures = 0;
  int rc = 0;
  if (strcmp(type, "ERROR") == 0) {
    json_int_t code = json_integer_value(json_object_get(obj, "code"));
    const char *msg = json_string_value(json_object_get(obj, "message"));
    if (code == 410)
      w->gone = 1;
    else
      lp_error_set(&w->fail, "WatchError", "watch %s: ERROR event %lld: %s", w->path, (long long)code,
                   msg ? msg : "");
    rc = -1;
  } else {
    const char *rv = json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
    if (rv) set_rv(w, rv);
    if (strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0 || strcmp(type, "DELETED") == 0)
      w->h.on_event(w, type, obj, w->h.ud);
    /* BOOKMARK: the RV above is all; unknown types are skipped like client-go does */
  }
  json_decref(ev);
  return rc;
}

static int on_data(const char *data, size_t len, void *ud) {
  lp_kube_watch *w = ud;
  if (w->state != LP_KUBE_WATCHING) return 1;
  lp_buf_append(&w->line, data, len);
  size_t start = 0;
  for (size_t i = w->line.len - len; i < w->line.len; i++) {
    if (w->line.data[i] != '\n') continue;
    if (handle_line(w, w->line.data + start, i - start) || w->state != LP_KUBE_WATCHING) return 1;
    start = i + 1;
  }
  if (start) {
    memmove(w->line.data, w->line.data + start, w->line.len - start);
    w->line.len -= start;
  }
  if (w->line.len > w->opts.max_line_bytes) {
    lp_error_set(&w->fail, "TooLarge", "watch %s: an event line exceeds %zu bytes", w->path,
                 w->opts.max_line_bytes);
    return 1;
  }
  return 0;
}

static void on_timer(uv_timer_t *t) {
  lp_kube_watch *w = t->data;
  if (w->state == LP_KUBE_BACKOFF) watch_request(w);
}

/* status: of the answer that failed, 0 when none did (a transport error, a broken stream). */
static void backoff(lp_kube_watch *w, lp_error *err, long status) {
  /* a denial was logged once already (lp_kube__note_answer); every retry would repeat it */
  lp_log(LP_KUBE_DENIED(status) ? LP_LOG_DEBUG : LP_LOG_WARN, "engine.kube.watch", "watch failed",
         LPF_STR("path", w->path), LPF_STR("code", err->code), LPF_STR("error", err->message));
  if (w->h.on_error) w->h.on_error(w, err, w->h.ud);
  lp_error_free(err);
  if (w->state != LP_KUBE_WATCHING) return; /* stopped from on_error */
  double d = w->opts.backoff_initial_ms;
  for (unsigned i = 0; i < w->failures && d < w->opts.backoff_max_ms; i++) d *= 2;
  if (d > w->opts.backoff_max_ms) d = w->opts.backoff_max_ms;
  w->failures++;
  d = d / 2 + d / 2 * ((double)rand() / RAND_MAX); /* jitter: spread reconnecting watchers */
  w->state = LP_KUBE_BACKOFF;
  uv_timer_start(&w->timer, on_timer, (uint64_t)d, 0);
}

static void on_done(lp_http_result *r, void *ud) {
  lp_kube_watch *w = ud;
  w->call = NULL;
  lp_error *fail = w->fail;
  w->fail = NULL;
  int gone = w->gone || r->status == 410;
  size_t lines = w->lines;
  if (w->state != LP_KUBE_WATCHING) {
    lp_error_free(fail);
  } else if (gone) {
    lp_error_free(fail);
    set_rv(w, NULL);
    w->state = LP_KUBE_RELIST;
    w->h.on_relist(w, w->h.ud);
  } else if (fail) {
    backoff(w, fail, 0);
  } else if (r->error || r->status / 100 != 2) {
    json_t *body = r->body_len ? json_loadb(r->body, r->body_len, 0, NULL) : NULL;
    lp_kube__note_answer(w->c, "watch", w->path, r, body);
    backoff(w, lp_kube__error("GET", w->path, NULL, r, body), r->status);
    json_decref(body);
  } else if (lines == 0) {
    backoff(w, lp_error_new("EmptyWatch", "watch %s: the stream ended without an event", w->path), 0);
  } else {
    lp_kube__note_answer(w->c, "watch", w->path, r, NULL);
    watch_request(w); /* timeoutSeconds elapsed: carry on from the last RV */
  }
  lp_http_result_free(r);
  maybe_free(w);
}

static void watch_request(lp_kube_watch *w) {
  w->state = LP_KUBE_WATCHING;
  w->line.len = 0;
  w->lines = 0;
  w->gone = 0;
  lp_buf url = LP_BUF_INIT;
  lp_buf_printf(&url, "%s%s?watch=1&allowWatchBookmarks=true&timeoutSeconds=%d",
                lp_kube_client_config(w->c)->server, w->path, w->opts.timeout_seconds);
  if (*w->rv) {
    lp_buf_puts(&url, "&resourceVersion=");
    lp_kube__query_escape(&url, w->rv);
  }
  if (w->query) lp_buf_printf(&url, "&%s", w->query);
  lp_http_header headers[3];
  char *auth;
  size_t n = lp_kube__headers(w->c, headers, &auth);
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  req.url = lp_buf_cstr(&url);
  req.headers = headers;
  req.nheaders = n;
  req.idempotent = 0; /* retries are ours: they must resume from the last RV */
  req.max_retries = 0;
  req.timeout_ms = (long)(w->opts.timeout_seconds + IDLE_GUARD_S) * 1000;
  req.on_data = on_data;
  req.on_data_ud = w;
  w->call = lp_http_client_request(lp_kube_client_http(w->c), &req, on_done, w);
  free(auth);
  lp_buf_free(&url);
}

lp_kube_watch *lp_kube_watch_start(lp_kube_client *c, const lp_kube_ref *ref, const char *resource_version,
                                   const lp_kube_watch_opts *opts, const lp_kube_watch_handlers *h) {
  lp_kube_watch *w = lp_xcalloc(1, sizeof *w);
  w->c = c;
  w->h = *h;
  if (opts) w->opts = *opts;
  if (w->opts.timeout_seconds <= 0) w->opts.timeout_seconds = DEFAULT_TIMEOUT_S;
  if (!w->opts.backoff_initial_ms) w->opts.backoff_initial_ms = DEFAULT_BACKOFF_MS;
  if (!w->opts.backoff_max_ms) w->opts.backoff_max_ms = DEFAULT_BACKOFF_MAX_MS;
  if (!w->opts.max_line_bytes) w->opts.max_line_bytes = DEFAULT_MAX_LINE;
  w->query = w->opts.query ? lp_xstrdup(w->opts.query) : NULL;
  w->opts.query = NULL;
  w->path = lp_kube_path(ref->group, ref->version, ref->resource, ref->namespace, NULL, NULL);
  set_rv(w, resource_version);
  uv_timer_init(lp_kube_client_loop(c), &w->timer);
  w->timer.data = w;
  watch_request(w);
  return w;
}

void lp_kube_watch_resume(lp_kube_watch *w, const char *resource_version) {
  if (w->state != LP_KUBE_RELIST) return;
  set_rv(w, resource_version);
  w->failures = 0;
  watch_request(w);
}

const char *lp_kube_watch_resource_version(const lp_kube_watch *w) {
  return w->rv;
}

lp_kube_watch_state lp_kube_watch_get_state(const lp_kube_watch *w) {
  return w->state;
}

static void on_timer_closed(uv_handle_t *t) {
  lp_kube_watch *w = t->data;
  w->timer_closed = 1;
  maybe_free(w);
}

void lp_kube_watch_stop(lp_kube_watch *w) {
  if (w->state == LP_KUBE_STOPPING) return;
  w->state = LP_KUBE_STOPPING;
  if (w->call) lp_http_call_cancel(w->call);
  uv_close((uv_handle_t *)&w->timer, on_timer_closed);
}

/* A resilient watch on one resource collection: GET ...?watch=1&allowWatchBookmarks=true&resourceVersion=RV
 * &timeoutSeconds=N streamed through the HTTP client's on_data callback, one JSON event per line.
 *
 * States (lp_kube_watch_state):
 *   WATCHING  a watch request is in flight; events are delivered as lines complete, each ADDED,
 *             MODIFIED, DELETED or BOOKMARK remembers its object's resourceVersion (a BOOKMARK
 *             delivers nothing else).
 *             - the stream ends cleanly (timeoutSeconds)  -> WATCHING again from the last RV
 *               (BACKOFF instead when the stream carried no line at all, so a server that ends
 *               every watch at once is not hammered)
 *             - transport error, non-2xx answer, ERROR event other than 410, undecodable or
 *               over-long line                            -> BACKOFF
 *             - HTTP 410 or an ERROR event with code 410 -> RELIST
 *   BACKOFF   waiting 800 ms doubling to 30 s (random in [d/2, d]), reset by the next line received;
 *             then WATCHING from the last RV.
 *   RELIST    the RV is too old: on_relist ran and the owner lists again (lp_kube_list) and calls
 *             lp_kube_watch_resume with the list's resourceVersion -> WATCHING.
 *   STOPPING  lp_kube_watch_stop was called; the watch frees itself once its request and timer are gone.
 * Loop thread only. */
#ifndef LUAPROV_KUBE_WATCH_H
#define LUAPROV_KUBE_WATCH_H

#include <jansson.h>
#include <stddef.h>

#include "kube/client.h"

typedef struct lp_kube_watch lp_kube_watch;

typedef enum { LP_KUBE_WATCHING, LP_KUBE_BACKOFF, LP_KUBE_RELIST, LP_KUBE_STOPPING } lp_kube_watch_state;

typedef struct lp_kube_watch_opts {
  int timeout_seconds;         /* server-side timeoutSeconds; 0 = 290 (kube-rs; the API wants < 295) */
  unsigned backoff_initial_ms; /* 0 = 800 */
  unsigned backoff_max_ms;     /* 0 = 30 000 */
  size_t max_line_bytes;       /* one event; 0 = 16 MiB; longer -> error and BACKOFF */
  const char *query;           /* extra query, appended as is ("labelSelector=a%3Db"); may be NULL */
} lp_kube_watch_opts;

typedef struct lp_kube_watch_handlers {
  /* type is "ADDED", "MODIFIED" or "DELETED"; object is borrowed (json_incref to keep). May call
   * lp_kube_watch_stop. Required. */
  void (*on_event)(lp_kube_watch *w, const char *type, json_t *object, void *ud);
  /* The RV expired: list again and call lp_kube_watch_resume (now or later). Required. */
  void (*on_relist)(lp_kube_watch *w, void *ud);
  /* Each failure that leads to BACKOFF, for logs and tests; err is borrowed. May be NULL. */
  void (*on_error)(lp_kube_watch *w, const lp_error *err, void *ud);
  void *ud;
} lp_kube_watch_handlers;

/* Starts watching ref's collection (ref->name ignored; strings copied) from resource_version (NULL or
 * "" = the server's choice, which sends the current objects as ADDED first). c must outlive the watch;
 * opts may be NULL. Never fails; problems arrive through on_error. Release with lp_kube_watch_stop. */
lp_kube_watch *lp_kube_watch_start(lp_kube_client *c, const lp_kube_ref *ref, const char *resource_version,
                                   const lp_kube_watch_opts *opts, const lp_kube_watch_handlers *h);

/* In RELIST: watch again from resource_version (copied). Ignored in any other state. */
void lp_kube_watch_resume(lp_kube_watch *w, const char *resource_version);

/* The last resourceVersion seen ("" before any, and after a 410). Owned by w. */
const char *lp_kube_watch_resource_version(const lp_kube_watch *w);
lp_kube_watch_state lp_kube_watch_get_state(const lp_kube_watch *w);

/* Stops the watch: no callback runs after this returns. w is freed asynchronously; do not use it
 * again. Safe from inside the watch's own callbacks. */
void lp_kube_watch_stop(lp_kube_watch *w);

#endif

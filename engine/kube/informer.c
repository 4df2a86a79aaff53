/* The informer (see informer.h): a list, a watch, a store and the relist that replaces the store.
 * The store is a jansson object used as a hash map (key -> object, one reference each). */
#include "kube/informer.h"

#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/log.h"
#include "kube/kube_internal.h"

#define DEFAULT_BACKOFF_MS     800
#define DEFAULT_BACKOFF_MAX_MS 30000

typedef enum { INF_LISTING, INF_WATCHING, INF_RELISTING } inf_state;

struct lp_informer {
  lp_kube_client *c;
  char *group, *version, *resource, *namespace;
  char *query;  /* labelSelector=..., or NULL */
  char *metric; /* the resource label */
  lp_informer_handlers h;
  lp_kube_watch_opts wopts;
  inf_state state;
  json_t *store;
  int synced;
  lp_kube_watch *watch;
  uv_timer_t timer; /* list retries */
  unsigned failures;
  int listing;       /* a list call is in flight */
  int relist_wanted; /* lp_informer_relist ran while a list was in flight: list once more after it */
  int busy;          /* depth of handler dispatch: the informer must outlive it */
  int stopping;      /* lp_informer_stop ran */
  int timer_closed;
  lp_metric *m_objects, *m_relists, *m_events;
};

static void start_list(lp_informer *inf);

static lp_kube_ref ref_of(const lp_informer *inf) {
  return (lp_kube_ref){
      .group = inf->group, .version = inf->version, .resource = inf->resource, .namespace = inf->namespace};
}

static void maybe_free(lp_informer *inf) {
  if (!inf->stopping || inf->listing || inf->busy || !inf->timer_closed) return;
  json_decref(inf->store);
  free(inf->group);
  free(inf->version);
  free(inf->resource);
  free(inf->namespace);
  free(inf->query);
  free(inf->metric);
  free(inf);
}

char *lp_informer_key(const json_t *obj) {
  json_t *meta = json_object_get(obj, "metadata");
  const char *name = json_string_value(json_object_get(meta, "name"));
  const char *ns = json_string_value(json_object_get(meta, "namespace"));
  if (!name || !*name) return NULL;
  return ns && *ns ? lp_xasprintf("%s/%s", ns, name) : lp_xstrdup(name);
}

static const char *rv_of(const json_t *obj) {
  return json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
}

/* Whether new_obj is a change from old_obj: resourceVersions differ, or without them the content. */
static int changed(const json_t *old_obj, const json_t *new_obj) {
  const char *a = rv_of(old_obj), *b = rv_of(new_obj);
  if (a && b) return strcmp(a, b) != 0;
  return !json_equal((json_t *)old_obj, (json_t *)new_obj);
}

/* ---- delivering changes ---- */

static void count(lp_informer *inf, const char *type) {
  lp_counter_inc(inf->m_events, LP_LABELS(inf->metric, type));
}

static void deliver_add(lp_informer *inf, json_t *obj) {
  count(inf, "add");
  if (inf->h.on_add && !inf->stopping) inf->h.on_add(inf, obj, inf->h.ud);
}

static void deliver_update(lp_informer *inf, json_t *old_obj, json_t *new_obj) {
  count(inf, "update");
  if (inf->h.on_update && !inf->stopping) inf->h.on_update(inf, old_obj, new_obj, inf->h.ud);
}

static void deliver_delete(lp_informer *inf, json_t *obj) {
  count(inf, "delete");
  if (inf->h.on_delete && !inf->stopping) inf->h.on_delete(inf, obj, inf->h.ud);
}

static int is_current(const lp_informer *inf) {
  return inf->synced && inf->state == INF_WATCHING;
}

/* Moves to state; on_current hears when that changes whether the informer is current. */
static void set_state(lp_informer *inf, inf_state state) {
  int before = is_current(inf);
  inf->state = state;
  int after = is_current(inf);
  if (before == after || !inf->h.on_current || inf->stopping) return;
  inf->busy++;
  inf->h.on_current(inf, after, inf->h.ud);
  inf->busy--;
}

static void set_size_gauge(lp_informer *inf, size_t before) {
  lp_gauge_add(inf->m_objects, LP_LABELS(inf->metric), (double)json_object_size(inf->store) - (double)before);
}

/* What no controller reads but every object may carry, often larger than the rest of it: the
 * server-side apply bookkeeping and kubectl's copy of the whole applied object. Dropped before an
 * object is stored (controller-runtime's cache transform does the same). */
static void trim(json_t *obj) {
  json_t *md = json_object_get(obj, "metadata");
  json_object_del(md, "managedFields");
  json_object_del(json_object_get(md, "annotations"), "kubectl.kubernetes.io/last-applied-configuration");
}

/* ---- the watch ---- */

static void on_event(lp_kube_watch *w, const char *type, json_t *obj, void *ud) {
  lp_informer *inf = ud;
  char *key = lp_informer_key(obj);
  if (!key) return;
  size_t before = json_object_size(inf->store);
  json_t *old_obj = json_incref(json_object_get(inf->store, key)); /* survives the store's change */
  inf->busy++;
  if (strcmp(type, "DELETED") == 0) {
    json_object_del(inf->store, key);
    set_size_gauge(inf, before);
    deliver_delete(inf, obj);
  } else {
    trim(obj);
    json_object_set_nocheck(inf->store, key, obj);
    set_size_gauge(inf, before);
    if (old_obj)
      deliver_update(inf, old_obj, obj);
    else
      deliver_add(inf, obj);
  }
  inf->busy--;
  json_decref(old_obj);
  free(key);
  (void)w; /* lp_informer_stop from a handler already stopped the watch; the watch calls no more */
  maybe_free(inf);
}

static void on_relist(lp_kube_watch *w, void *ud) {
  lp_informer *inf = ud;
  (void)w;
  lp_counter_inc(inf->m_relists, LP_LABELS(inf->metric));
  lp_log(LP_LOG_INFO, "engine.kube.informer", "resourceVersion expired, relisting",
         LPF_STR("resource", inf->metric));
  set_state(inf, INF_RELISTING);
  if (!inf->stopping) start_list(inf);
  maybe_free(inf);
}

/* ---- lists ---- */

/* Adopts a full list: on the first, fills the store and reports every object as added; on a relist,
 * swaps in the shadow store and reports the difference. */
static void adopt(lp_informer *inf, json_t *items) {
  json_t *shadow = json_object();
  size_t n = json_array_size(items);
  char **keys = lp_xcalloc(n ? n : 1, sizeof *keys);
  for (size_t i = 0; i < n; i++) {
    json_t *obj = json_array_get(items, i);
    keys[i] = lp_informer_key(obj);
    trim(obj);
    if (keys[i]) json_object_set_nocheck(shadow, keys[i], obj);
  }
  json_t *old_store = inf->store;
  size_t before = json_object_size(old_store);
  inf->store = shadow;
  set_size_gauge(inf, before);
  inf->busy++;
  for (size_t i = 0; i < n && !inf->stopping; i++) {
    if (!keys[i]) continue;
    json_t *now = json_object_get(shadow, keys[i]);
    json_t *was = json_object_get(old_store, keys[i]);
    if (now != json_array_get(items, i)) continue; /* a duplicate key: the last one is stored */
    if (!was)
      deliver_add(inf, now);
    else if (changed(was, now))
      deliver_update(inf, was, now);
  }
  const char *key;
  json_t *was;
  json_object_foreach(old_store, key, was) {
    if (inf->stopping) break;
    if (!json_object_get(shadow, key)) deliver_delete(inf, was);
  }
  inf->busy--;
  for (size_t i = 0; i < n; i++) free(keys[i]);
  free(keys);
  json_decref(old_store);
}

static void on_retry(uv_timer_t *t) {
  lp_informer *inf = t->data;
  if (!inf->stopping) start_list(inf);
}

static void on_listed(const lp_kube_reply *r, void *ud) {
  lp_informer *inf = ud;
  inf->listing = 0;
  if (inf->stopping) {
    maybe_free(inf);
    return;
  }
  if (r->error) {
    unsigned d = inf->wopts.backoff_initial_ms;
    for (unsigned i = 0; i < inf->failures && d < inf->wopts.backoff_max_ms; i++) d *= 2;
    if (d > inf->wopts.backoff_max_ms) d = inf->wopts.backoff_max_ms;
    inf->failures++;
    /* a denial was logged once already (lp_kube__note_answer); every retry would repeat it */
    lp_log(LP_KUBE_DENIED(r->status) ? LP_LOG_DEBUG : LP_LOG_WARN, "engine.kube.informer", "list failed",
           LPF_STR("resource", inf->metric), LPF_STR("code", r->error->code),
           LPF_STR("error", r->error->message), LPF_INT("retry_ms", d));
    uv_timer_start(&inf->timer, on_retry, d, 0);
    return;
  }
  inf->failures = 0;
  json_t *list = json_incref(r->object); /* a handler may stop us; the reply stays ours meanwhile */
  const char *rv = rv_of(list);
  char *rv_copy = lp_xstrdup(rv ? rv : "");
  adopt(inf, json_object_get(list, "items"));
  json_decref(list);
  if (!inf->stopping && !inf->synced) {
    inf->synced = 1;
    lp_log(LP_LOG_INFO, "engine.kube.informer", "synced", LPF_STR("resource", inf->metric),
           LPF_INT("objects", json_object_size(inf->store)));
    if (inf->h.on_synced) {
      inf->busy++;
      inf->h.on_synced(inf, inf->h.ud);
      inf->busy--;
    }
  }
  if (!inf->stopping && inf->relist_wanted) { /* the list just adopted began before the request */
    inf->relist_wanted = 0;
    inf->state = INF_RELISTING;
    start_list(inf);
  } else if (!inf->stopping) {
    if (inf->watch) {
      lp_kube_watch_resume(inf->watch, rv_copy);
    } else {
      lp_kube_ref ref = ref_of(inf);
      lp_kube_watch_opts o = inf->wopts;
      o.query = inf->query;
      lp_kube_watch_handlers wh = {.on_event = on_event, .on_relist = on_relist, .ud = inf};
      inf->watch = lp_kube_watch_start(inf->c, &ref, rv_copy, &o, &wh);
    }
    set_state(inf, INF_WATCHING);
  }
  free(rv_copy);
  maybe_free(inf);
}

static void start_list(lp_informer *inf) {
  lp_kube_ref ref = ref_of(inf);
  inf->listing = 1;
  lp_kube_list(inf->c, &ref, inf->query, on_listed, inf);
}

/* ---- public ---- */

lp_informer *lp_informer_start(lp_kube_client *c, const lp_kube_ref *ref, const lp_informer_opts *opts,
                               const lp_informer_handlers *h) {
  lp_informer *inf = lp_xcalloc(1, sizeof *inf);
  inf->c = c;
  inf->group = ref->group && *ref->group ? lp_xstrdup(ref->group) : NULL;
  inf->version = lp_xstrdup(ref->version);
  inf->resource = lp_xstrdup(ref->resource);
  inf->namespace = ref->namespace && *ref->namespace ? lp_xstrdup(ref->namespace) : NULL;
  inf->metric = inf->group ? lp_xasprintf("%s.%s", inf->resource, inf->group) : lp_xstrdup(inf->resource);
  if (h) inf->h = *h;
  if (opts) inf->wopts = opts->watch;
  inf->wopts.query = NULL;
  if (!inf->wopts.backoff_initial_ms) inf->wopts.backoff_initial_ms = DEFAULT_BACKOFF_MS;
  if (!inf->wopts.backoff_max_ms) inf->wopts.backoff_max_ms = DEFAULT_BACKOFF_MAX_MS;
  if (opts && opts->label_selector && *opts->label_selector) {
    lp_buf q = LP_BUF_INIT;
    lp_buf_puts(&q, "labelSelector=");
    lp_kube__query_escape(&q, opts->label_selector);
    inf->query = lp_buf_take(&q, NULL);
  }
  lp_metrics *m = opts && opts->metrics ? opts->metrics : lp_metrics_default();
  inf->m_objects =
      lp_metrics_gauge(m, "luaprov_informer_objects", "Objects in informer stores.", LP_LABELS("resource"));
  inf->m_relists = lp_metrics_counter(m, "luaprov_informer_relists_total",
                                      "Relists after the watch's resourceVersion expired (410 Gone).",
                                      LP_LABELS("resource"));
  inf->m_events = lp_metrics_counter(m, "luaprov_informer_events_total",
                                     "Changes delivered to informer handlers, by type (add, update, delete).",
                                     LP_LABELS("resource", "type"));
  inf->store = json_object();
  uv_timer_init(lp_kube_client_loop(c), &inf->timer);
  inf->timer.data = inf;
  inf->state = INF_LISTING;
  start_list(inf);
  return inf;
}

int lp_informer_synced(const lp_informer *inf) {
  return inf->synced;
}

int lp_informer_current(const lp_informer *inf) {
  return is_current(inf);
}

void lp_informer_relist(lp_informer *inf) {
  if (inf->stopping) return;
  if (inf->listing) {
    inf->relist_wanted = 1;
    return;
  }
  if (inf->state != INF_WATCHING) return; /* a failed list's retry is waiting: it begins after this call */
  lp_log(LP_LOG_INFO, "engine.kube.informer", "relisting on request", LPF_STR("resource", inf->metric));
  /* a watch left running would apply events newer than the list, which the list's store then undoes */
  lp_kube_watch_stop(inf->watch);
  inf->watch = NULL;
  set_state(inf, INF_RELISTING);
  if (!inf->stopping) start_list(inf);
}

json_t *lp_informer_get(const lp_informer *inf, const char *key) {
  return json_object_get(inf->store, key);
}

size_t lp_informer_size(const lp_informer *inf) {
  return json_object_size(inf->store);
}

void lp_informer_list(const lp_informer *inf, void (*fn)(const char *key, json_t *obj, void *ud), void *ud) {
  const char *key;
  json_t *obj;
  json_object_foreach(inf->store, key, obj) fn(key, obj, ud);
}

static void on_timer_closed(uv_handle_t *t) {
  lp_informer *inf = t->data;
  inf->timer_closed = 1;
  maybe_free(inf);
}

void lp_informer_stop(lp_informer *inf) {
  if (inf->stopping) return;
  inf->stopping = 1;
  lp_gauge_add(inf->m_objects, LP_LABELS(inf->metric), -(double)json_object_size(inf->store));
  json_object_clear(inf->store);
  if (inf->watch) lp_kube_watch_stop(inf->watch);
  inf->watch = NULL;
  uv_close((uv_handle_t *)&inf->timer, on_timer_closed);
}

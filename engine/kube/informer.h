/* An informer: a local cache of one resource collection kept current by list + watch, and handlers
 * told of every change (client-go's shared informer, kube-rs's reflector, for one owner).
 *
 * States:
 *   LISTING   the initial paginated list (lp_kube_list) is in flight; a failure retries after a backoff
 *             (the watch options' 800 ms doubling to 30 s). Each listed object goes into the store and
 *             to on_add, then lp_informer_synced() turns true (for good) and on_synced runs.
 *   WATCHING  lp_kube_watch from the list's resourceVersion (its own states: see watch.h). ADDED,
 *             MODIFIED and DELETED update the store first, then call on_add / on_update / on_delete (an
 *             ADDED for a key already stored is an update, a MODIFIED for an unknown key an add).
 *   RELISTING the watch reported 410 Gone: the collection is listed into a shadow store, which replaces
 *             the store in one step; then handlers learn the difference (client-go Replace semantics):
 *             on_update for each object whose resourceVersion changed (or, without one, whose content
 *             changed), on_add for each new one, in list order, then on_delete for each object missing
 *             from the list. Unchanged objects are not reported again. Then the watch resumes from the
 *             relist's resourceVersion. lp_informer_relist forces one (the watch is dropped and
 *             started again from the new list's resourceVersion).
 *
 * Current: the store holds a complete list and is kept up by the watch (WATCHING), as opposed to
 * listing for the first time or relisting, when the store may lag the API by a whole outage. A watch
 * that failed and waits to resume from its resourceVersion still counts as current: nothing is lost,
 * the events since arrive once it resumes (or it gets a 410 and relists).
 *
 * Stored objects lose metadata.managedFields and the kubectl.kubernetes.io/last-applied-configuration
 * annotation (no controller reads them; they can be larger than the rest of the object).
 *
 * Keys are client-go's: "namespace/name" for namespaced objects, "name" for cluster-scoped ones.
 * Objects handed to handlers, lp_informer_get and lp_informer_list are borrowed: valid until the
 * informer next changes that key (json_incref to keep them) and never to be modified.
 *
 * Metrics (opts.metrics, or the default registry): luaprov_informer_objects{resource} (gauge, summed
 * over informers of the same resource), luaprov_informer_relists_total{resource} (410s that forced a
 * relist), luaprov_informer_events_total{resource,type} (changes delivered to handlers, type "add",
 * "update" or "delete", synthesized ones included). resource is "plural.group" ("nodeclaims.karpenter.sh"),
 * or the plural alone for the core group ("pods").
 * Loop thread only. */
#ifndef LUAPROV_KUBE_INFORMER_H
#define LUAPROV_KUBE_INFORMER_H

#include <jansson.h>

#include "core/metrics.h"
#include "kube/client.h"
#include "kube/watch.h"

typedef struct lp_informer lp_informer;

/* Every handler may be NULL and may call lp_informer_stop (no handler runs after that). Objects are
 * borrowed; the store already holds the new state when a handler runs. */
typedef struct lp_informer_handlers {
  void (*on_add)(lp_informer *inf, json_t *obj, void *ud);
  void (*on_update)(lp_informer *inf, json_t *old_obj, json_t *new_obj, void *ud);
  void (*on_delete)(lp_informer *inf, json_t *obj, void *ud); /* the last state seen */
  void (*on_synced)(lp_informer *inf, void *ud);              /* once, after the first full list */
  /* lp_informer_current changed to current: after the first list (right after on_synced), when a relist
   * begins and when it has been adopted. */
  void (*on_current)(lp_informer *inf, int current, void *ud);
  void *ud;
} lp_informer_handlers;

typedef struct lp_informer_opts {
  const char *label_selector; /* "app=x,tier!=db", escaped here; NULL for every object */
  lp_kube_watch_opts watch;   /* timeouts and backoff (its query is ignored); zeros are the defaults */
  lp_metrics *metrics;        /* NULL = lp_metrics_default() */
} lp_informer_opts;

/* Starts listing ref's collection (ref->name ignored; ref->namespace NULL for every namespace or a
 * cluster-scoped resource; strings copied). c must outlive the informer; opts may be NULL. Never fails:
 * list and watch failures are logged and retried. Release with lp_informer_stop. */
lp_informer *lp_informer_start(lp_kube_client *c, const lp_kube_ref *ref, const lp_informer_opts *opts,
                               const lp_informer_handlers *h);

/* Non-zero once the first full list is in the store; stays so across relists. */
int lp_informer_synced(const lp_informer *inf);

/* Non-zero while the informer is current (see above): synced and not relisting. */
int lp_informer_current(const lp_informer *inf);

/* Lists the collection again, into a shadow store as after a 410, and reports the difference; the
 * watch is started again from the new list's resourceVersion. A list in flight (begun before this call)
 * is followed by another, so once lp_informer_current is non-zero again the store holds a list begun
 * after this call. Not current until then (on_current tells). A new leader calls it so that it acts on
 * what the API holds now, not on what a watch that may have been cut off delivered. */
void lp_informer_relist(lp_informer *inf);

/* The stored object for key ("ns/name" or "name"), borrowed, or NULL. */
json_t *lp_informer_get(const lp_informer *inf, const char *key);

/* The number of stored objects. */
size_t lp_informer_size(const lp_informer *inf);

/* Calls fn for each stored object (borrowed key and object), in no promised order. fn must not stop the
 * informer. */
void lp_informer_list(const lp_informer *inf, void (*fn)(const char *key, json_t *obj, void *ud), void *ud);

/* The store key of obj: "namespace/name", "name", or NULL without metadata.name. The caller frees it. */
char *lp_informer_key(const json_t *obj);

/* Stops the informer: no handler runs after this returns, the watch stops, and the objects gauge drops
 * by the store's size. It frees itself once a list call in flight has returned (closing the client
 * cancels it). Safe from inside its own handlers; do not use inf afterwards. */
void lp_informer_stop(lp_informer *inf);

#endif

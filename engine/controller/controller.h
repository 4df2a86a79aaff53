/* The controller framework: what every reconciler (nodeclass.c, lifecycle*.c, termination.c, gc.c) is
 * built from, and the shared view of the cluster they read (controller-runtime's manager, cut down).
 *
 * A controller is a definition (lp_controller_def: a name, a reconcile function, which changes enqueue
 * which keys) run by the manager (manager.h) with its own workqueue (kube/workqueue.h). Reconciles read
 * the cluster from the manager's informer caches (lp_env_get, lp_env_index_*) and write through the
 * Kubernetes client (lp_env_kube, lp_env_patch) and the CloudProvider contract (lp_env_cloud). Writes
 * carry the cached object's resourceVersion (optimistic concurrency), so a reconcile that acted on a stale
 * cache gets a 409 Conflict and runs again once the cache has caught up: no sleep after writes is needed.
 *
 * Keys are the informers' ("name" for cluster-scoped objects, "namespace/name" otherwise); a
 * controller's keys are of its primary kind, or its singleton key.
 *
 * Every reconcile ends with exactly one lp_controller_done. The framework counts
 * luaprov_controller_reconciles_total{controller, result="success|error|requeue"} and logs each error
 * (logger "controller.<name>", fields controller, key, code, error) before retrying it with the
 * workqueue's per-key backoff.
 * Loop thread only. */
#ifndef LUAPROV_CONTROLLER_H
#define LUAPROV_CONTROLLER_H

#include <jansson.h>
#include <uv.h>

#include "contract/cloudprovider.h"
#include "core/error.h"
#include "core/metrics.h"
#include "kube/client.h"

/* The resources the manager keeps cached. */
typedef enum {
  LP_KIND_NODECLAIM = 0, /* karpenter.sh/v1 nodeclaims */
  LP_KIND_NODE,          /* v1 nodes */
  LP_KIND_NODEPOOL,      /* karpenter.sh/v1 nodepools */
  LP_KIND_NODECLASS,     /* the mapping's node class (lp_env_nodeclass: group, version, resource), in
                            its group and each alias group: see "node classes" below for its keys */
  LP_KIND_POD,           /* v1 pods, every namespace */
  LP_KIND_DAEMONSET,     /* apps/v1 daemonsets: their pod templates are every new node's overhead */
  LP_KIND_PDB,           /* policy/v1 poddisruptionbudgets: which pods disruption may move now */
  LP_KIND_PVC,           /* v1 persistentvolumeclaims, every namespace: a pod's volumes pin its zone */
  LP_KIND_PV,            /* v1 persistentvolumes: a bound claim's zone (spec.nodeAffinity) */
  LP_KIND_STORAGECLASS,  /* storage.k8s.io/v1 storageclasses: an unbound claim's allowedTopologies */
  LP_KIND_COUNT,
  LP_KIND_NONE = LP_KIND_COUNT /* a controller with no primary kind (a singleton) */
} lp_kind;

/* Secondary lookups the manager keeps current with the caches. */
typedef enum {
  LP_INDEX_NODE_BY_PROVIDER_ID = 0,  /* spec.providerID -> node keys */
  LP_INDEX_NODECLAIM_BY_PROVIDER_ID, /* status.providerID -> nodeclaim keys */
  LP_INDEX_NODECLAIM_BY_NODECLASS,   /* spec.nodeClassRef.name -> nodeclaim keys, whatever the ref's
                                        group (two groups may hold classes of one name: compare
                                        lp_env_nodeclass_key of the ref with the class's key) */
  LP_INDEX_POD_BY_NODE,              /* spec.nodeName -> pod keys */
  LP_INDEX_COUNT
} lp_index;

/* Tunables; zeros take the defaults given (Karpenter's where it has one). */
typedef struct lp_ctrl_settings {
  double launch_timeout_s;       /* 300: Launched not True this long after its condition appeared */
  double registration_timeout_s; /* 900: Registered not True this long after Launched */
  double gc_interval_s;          /* 120: how often instances and NodeClaims are compared */
  double gc_leak_grace_s;        /* 60: an instance with no NodeClaim younger than this is left alone */
  double nodeclass_resync_s;     /* 300: how often a Ready node class is resolved again */
  double drain_requeue_s;        /* 1: while pods are being evicted */
  double terminate_requeue_s;    /* 5: while the instance is shutting down */
  unsigned workers;              /* 10: reconciles at once per controller */
  /* 0: consolidation never replaces spot nodes with spot nodes (run --config spotToSpotConsolidation) */
  int spot_to_spot_consolidation;
} lp_ctrl_settings;

/* The settings with every zero replaced by its default. */
lp_ctrl_settings lp_ctrl_settings_resolve(const lp_ctrl_settings *s);

typedef struct lp_ctrl_env lp_ctrl_env; /* owned by the manager */
typedef struct lp_controller lp_controller;

typedef struct lp_controller_def {
  const char *name;          /* "nodeclaim.lifecycle": queue name, logger suffix, metrics label */
  lp_kind primary;           /* its keys: every change of this kind enqueues the object's key; LP_KIND_NONE
                                for a singleton */
  const char *singleton_key; /* LP_KIND_NONE only: the one key ("gc"), enqueued at start */
  double resync_s; /* > 0: every key of the primary kind (or the singleton) is enqueued this often */
  /* Optional: changes of any kind (primary included) that should enqueue keys besides the default,
   * with lp_controller_enqueue. old_obj is NULL on add, new_obj NULL on delete (both borrowed). */
  void (*on_change)(lp_controller *c, lp_kind kind, const json_t *old_obj, const json_t *new_obj);
  /* Reconciles key; must end, now or later, with lp_controller_done(c, key, ...). The key is owned by
   * the framework and valid until then. The cached object may be gone (deleted): handle that. */
  void (*reconcile)(lp_controller *c, const char *key);
  /* Optional per-controller state, made when the controller starts and freed when it stops (after
   * its last reconcile ended). */
  void *(*state_new)(lp_controller *c);
  void (*state_free)(void *state);
} lp_controller_def;

/* ---- used by reconcilers ----------------------------------------------------------------- */

lp_ctrl_env *lp_controller_env(lp_controller *c);
void *lp_controller_state(lp_controller *c);
const char *lp_controller_name(const lp_controller *c);
/* "controller.<name>", the logger every line of this controller uses. */
const char *lp_controller_logger(const lp_controller *c);

/* Adds key to this controller's queue (deduplicated; ignored once the controller stops). */
void lp_controller_enqueue(lp_controller *c, const char *key);
/* Adds key after seconds. */
void lp_controller_enqueue_after(lp_controller *c, const char *key, double seconds);
/* Adds every cached NodeClaim labelled karpenter.sh/nodepool=nodepool (a NodePool change reaching its
 * NodeClaims). */
void lp_controller_enqueue_pool_claims(lp_controller *c, const char *nodepool);

/* Calls fn(key, ud) for the keys waiting in this controller's queue, in the order they will be
 * reconciled, until fn returns 0 (lp_workqueue_each_waiting): for a reconcile that prepares, in one
 * call, what the keys served next will need. fn must not enqueue. */
void lp_controller_each_waiting(lp_controller *c, int (*fn)(const char *key, void *ud), void *ud);

/* Ends the reconcile of key. err (owned, freed here) NULL = success; otherwise it is logged and the key
 * retried with backoff. requeue_after_s > 0 (on success) reconciles the key again after that delay
 * (polling something the caches cannot tell: an instance shutting down, a drain in progress). */
void lp_controller_done(lp_controller *c, const char *key, lp_error *err, double requeue_after_s);

/* Non-zero when reply (of a patch, update or delete by c's reconcile of key) is a 404 Not Found: the
 * object written was deleted since the cache showed it, often by the reconcile's own finalizer removal
 * a moment before. For the object being reconciled that means there is nothing left to do, which is
 * success: the caller ends the reconcile without an error. Logged at debug level (action: what the
 * write was for, e.g. "removing the finalizer"). */
int lp_controller_gone(lp_controller *c, const char *key, const lp_kube_reply *reply, const char *action);

/* ---- the shared view --------------------------------------------------------------------- */

uv_loop_t *lp_env_loop(lp_ctrl_env *env);
lp_kube_client *lp_env_kube(lp_ctrl_env *env);
lp_cloudprovider *lp_env_cloud(lp_ctrl_env *env);
lp_metrics *lp_env_metrics(lp_ctrl_env *env);
const lp_ctrl_settings *lp_env_settings(lp_ctrl_env *env);

/* The controllers' monotonic clock, in seconds: for the retry times and backoffs they keep themselves
 * (not for Kubernetes timestamps, which are wall time). lp_clock_monotonic unless replaced. */
double lp_env_monotonic(lp_ctrl_env *env);
/* Replaces the clock lp_env_monotonic reads with now(ud) (NULL restores lp_clock_monotonic), so a test
 * moves time instead of waiting for it. Times already computed stay on the old clock. */
void lp_env_set_clock(lp_ctrl_env *env, double (*now)(void *ud), void *ud);
/* The controllers' wall clock, seconds since the epoch: what they compare with Kubernetes timestamps
 * (creationTimestamp, lastTransitionTime) and write into them. lp_clock_wall unless replaced. */
double lp_env_wall(lp_ctrl_env *env);
/* Replaces the clock lp_env_wall reads with now(ud) (NULL restores lp_clock_wall): a test moves wall
 * time (an expireAfter, a consolidateAfter) instead of waiting for it. */
void lp_env_set_wall_clock(lp_ctrl_env *env, double (*now)(void *ud), void *ud);

/* The resource of kind (group, version, plural; no namespace or name). Static storage. Not for
 * LP_KIND_NODECLASS, whose resource is the mapping's: use lp_env_ref. */
const lp_kube_ref *lp_kind_ref(lp_kind kind);
/* ref for the object of kind at key ("ns/name" or "name"); key must outlive the ref's use, and buf
 * (at least strlen(key) + 1 bytes) holds the split namespace. Not for LP_KIND_NODECLASS. */
lp_kube_ref lp_kind_ref_for(lp_kind kind, const char *key, char *buf);
/* The resource of any kind, LP_KIND_NODECLASS included (the strings of the mapping's descriptor, valid
 * while the CloudProvider lives; for LP_KIND_NODECLASS the descriptor's own group, not an alias). */
lp_kube_ref lp_env_ref(lp_ctrl_env *env, lp_kind kind);
/* The CloudProvider mapping's node class descriptor (kind for messages, finalizer, hash annotations). */
const lp_nodeclass_desc *lp_env_nodeclass(lp_ctrl_env *env);

/* ---- node classes ------------------------------------------------------------------------ */

/* The node class kind is served in the descriptor's group and in each of its aliases
 * (lp_nodeclass_desc.aliases), one informer a group, and a class is named by group and name: the
 * same name in two groups is two classes. Its keys (LP_KIND_NODECLASS in lp_env_get, lp_env_each,
 * lp_env_patch, lp_env_annotate and a controller's keys) are "name" in the descriptor's group and
 * "group/name" in an alias group: a node class is cluster-scoped and a name holds no '/', so neither
 * reads as the other. The finalizer and the hash annotations are the descriptor's in every group. */

/* The key of the class a nodeClassRef ({group, kind, name}; borrowed) names, malloc'd: "name" when its
 * group is the descriptor's, "group/name" when it is an alias; NULL when it has no name or another
 * group. A ref with no group (or "") is taken as the descriptor's group, as before aliases existed
 * (Karpenter requires the group, and lp_nodeclass_ref_supported does not accept such a ref). */
char *lp_env_nodeclass_key(lp_ctrl_env *env, const json_t *ref);
/* The cached class a nodeClassRef names (lp_env_get of lp_env_nodeclass_key), borrowed, or NULL. */
json_t *lp_env_nodeclass_of(lp_ctrl_env *env, const json_t *ref);
/* The name part of a node class key ("default" of "group/default"), borrowed from key. */
const char *lp_nodeclass_key_name(const char *key);
/* How messages name the class at key, malloc'd: "<Kind> <name>" in the descriptor's group,
 * "<Kind> <name> (<group>)" in an alias group ("ExampleNodeClass default (karpenter.example.com)"). */
char *lp_env_nodeclass_label(lp_ctrl_env *env, const char *key);

/* The cached object of kind at key, borrowed (valid until the cache changes that key; json_incref to
 * keep across an await), or NULL. LP_KIND_NODECLASS: every group's, by the keys above. */
json_t *lp_env_get(lp_ctrl_env *env, lp_kind kind, const char *key);
/* Calls fn for every cached object of kind (borrowed). fn must not change the caches. */
void lp_env_each(lp_ctrl_env *env, lp_kind kind, void (*fn)(const char *key, json_t *obj, void *ud),
                 void *ud);
size_t lp_env_count(lp_ctrl_env *env, lp_kind kind);
/* Calls fn for each object whose indexed value is value (borrowed key and object). Returns how many. */
size_t lp_env_index_each(lp_ctrl_env *env, lp_index idx, const char *value,
                         void (*fn)(const char *key, json_t *obj, void *ud), void *ud);
/* The first object indexed under value, or NULL; *count (may be NULL) gets how many there are. */
json_t *lp_env_index_first(lp_ctrl_env *env, lp_index idx, const char *value, size_t *count);

/* Records a Kubernetes Event about involved (borrowed; a cached object) — type "Normal" or "Warning",
 * reason in CamelCase — in its namespace ("default" for cluster-scoped objects), source component
 * "luaprov". Fire and forget: a failure is logged at debug level. The same (object uid, reason,
 * message) is recorded at most once per 10 minutes, as client-go's event correlator spams less. */
void lp_env_event(lp_ctrl_env *env, const json_t *involved, const char *type, const char *reason,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Merge-patches the object of kind at key (its subresource "status", or the object itself when
 * subresource is NULL) with patch (stolen), guarded by resource_version: the patch goes out with
 * metadata.resourceVersion set to it ("" when NULL), so a write made from a stale cache gets a 409
 * Conflict and runs again once the cache has caught up. done gets the reply (reply.object: the patched
 * object). */
void lp_env_patch(lp_ctrl_env *env, lp_kind kind, const char *key, const char *resource_version,
                  const char *subresource, json_t *patch, lp_kube_done_fn done, void *ud);
/* Merge-patches one annotation of the object of kind at key to value, WITHOUT a resourceVersion
 * precondition: for a mark that only ever goes one way (set once, never changed back), which a
 * concurrent write of another field cannot contradict, so a 409 Conflict would only repeat work.
 * done gets the reply (a 404 when the object is gone). */
void lp_env_annotate(lp_ctrl_env *env, lp_kind kind, const char *key, const char *annotation,
                     const char *value, lp_kube_done_fn done, void *ud);

/* A name for a new NodeClaim of the NodePool pool: "<pool>-<5 random characters>", as generateName
 * makes them, neither cached nor taken(name, ud) (taken may be NULL; it names what the caller has on its
 * way and the cache does not show yet). Chosen before the POST instead of generateName so that a create
 * whose answer is lost (lp_kube_reply_unconfirmed) can be settled: a POST of the same name again answers
 * AlreadyExists when the first landed, and a GET finds it. Caller frees. */
char *lp_env_nodeclaim_name(lp_ctrl_env *env, const char *pool, int (*taken)(const char *name, void *ud),
                            void *ud);

/* ---- object helpers ---------------------------------------------------------------------- */

/* metadata.name / metadata.uid / metadata.resourceVersion of obj, or NULL. Borrowed. */
const char *lp_obj_name(const json_t *obj);
const char *lp_obj_uid(const json_t *obj);
const char *lp_obj_resource_version(const json_t *obj);
/* Non-zero when metadata.deletionTimestamp is set. */
int lp_obj_deleting(const json_t *obj);
/* Non-zero when metadata.finalizers holds name. */
int lp_obj_has_finalizer(const json_t *obj, const char *name);
/* A new JSON array: obj's finalizers with name added (add != 0) or removed. */
json_t *lp_obj_finalizers_with(const json_t *obj, const char *name, int add);
/* A new ownerReference naming owner (borrowed; a cached object) as of api_version and kind, the way
 * Karpenter writes them: name, uid, blockOwnerDeletion true, not controller. The garbage collector
 * deletes the owned object once its owner is gone, so what a NodePool or NodeClaim made goes with it.
 * The uid is left out when owner has none (only a test object lacks one). */
json_t *lp_obj_owner_ref(const json_t *owner, const char *api_version, const char *kind);
/* The value at a dotted path ("spec.nodeClassRef"), borrowed, or NULL. */
json_t *lp_obj_get(const json_t *obj, const char *dotted_path);
/* A string at a dotted path ("status.providerID", "spec.nodeClassRef.name"), borrowed, or NULL. */
const char *lp_obj_str(const json_t *obj, const char *dotted_path);
/* metadata.labels[key] / metadata.annotations[key] of obj, borrowed, or NULL. The keys hold dots
 * ("karpenter.sh/nodepool"), which a dotted path cannot name. */
const char *lp_obj_label(const json_t *obj, const char *key);
const char *lp_obj_annotation(const json_t *obj, const char *key);
/* Non-zero when ref (a nodeClassRef {group, kind, name}; NULL gives 0) names a group and kind listed in
 * supported (lp_cloudprovider_supported_nodeclasses): the object referring to it is of a node class
 * this provider serves, so it is the controllers' to manage. */
int lp_nodeclass_ref_supported(const json_t *supported, const json_t *ref);

/* A Go duration ("90s", "1m30s", "1h", "500ms", "1.5h") in seconds; < 0 when s is not one. */
double lp_duration_parse(const char *s);

/* Timestamps are written with lp_clock_rfc3339 (core/clock.h). */
/* Parses RFC 3339 (fraction and offset allowed) into epoch seconds; < 0 on failure. */
double lp_rfc3339_parse(const char *s);

#endif

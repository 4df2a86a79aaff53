/* The Cluster Autoscaler's NodeGroup contract (docs/contracts.md#nodegroup-rules), served by a Lua
 * mapping (providers/bizfly/init.lua, docs/contracts.md#mappings) and enforced here: the engine does
 * not trust what the mapping returns, and it answers the cheap questions itself.
 *
 * Refresh calls the mapping's refresh(ctx) and keeps the validated result as the snapshot; the
 * readers (lp_ng_count, lp_ng_at, lp_ng_find, lp_ng_for_node) answer from it with no script call,
 * because the Cluster Autoscaler asks them many times per loop. When refresh fails (the cloud is
 * down, throttling, a timeout) and the last snapshot is younger than max_stale_s, Refresh succeeds and
 * the snapshot keeps serving (logged, counted in luaprov_nodegroup_refresh_total{result="stale"});
 * without a usable snapshot the failure is returned. A mapping that breaks its contract always fails
 * Refresh (the old snapshot stays for the readers).
 *
 * IncreaseSize, DecreaseTargetSize and DeleteNodes of one node group run one after another (each
 * sees the target the previous one left); different node groups proceed in parallel. Every operation
 * that needs a snapshot and finds none refreshes first.
 *
 * Asynchronous operations call done once, on the loop thread, never inside the lp_ng_* call; the
 * receiver owns (and frees) the error and the value. Error codes:
 *   InvalidArgument     the request itself is wrong (delta of the wrong sign, a node without providerID)
 *   NotFound            no node group has that id in the snapshot
 *   FailedPrecondition  the request does not fit the node group now (above max, below the node count
 *                       or min, a node of another group); the message is the upstream provider's
 *   Unimplemented       the mapping cannot build a template node for the group, or has no get_options,
 *                       node_price or pod_price (or answered nil)
 *   Contract            the mapping broke its contract: "providers/bizfly/init.lua: refresh: ...
 *                       (docs/contracts.md#mappings)"
 *   Cancelled           the engine is shutting down
 *   anything else       passed through from the mapping (Throttled, Transport, Auth, Timeout, ScriptError)
 * Loop thread only. */
#ifndef LUAPROV_CONTRACT_NODEGROUP_H
#define LUAPROV_CONTRACT_NODEGROUP_H

#include <jansson.h>

#include "core/error.h"
#include "script/host.h"

typedef struct lp_nodegroups lp_nodegroups;

typedef struct lp_nodegroups_config {
  uv_loop_t *loop;
  lp_script_host *scripts;
  const char *mapping;  /* entry module of the mapping; NULL = "providers.bizfly" */
  const char *cluster;  /* ctx.cluster, the BKE cluster UID; NULL = $CLUSTER_NAME (absent when unset) */
  const char *endpoint; /* ctx.endpoint, the KaaS API base URL (the simulator); NULL = the mapping's own */
  double max_stale_s;   /* how long a snapshot keeps serving while refresh fails; 0 = 300 */
} lp_nodegroups_config;

/* Instance states and error classes carry the externalgrpc protocol's numbers. */
enum { LP_NG_RUNNING = 1, LP_NG_CREATING = 2, LP_NG_DELETING = 3 };
enum { LP_NG_NO_ERROR = 0, LP_NG_OUT_OF_RESOURCES = 1, LP_NG_OTHER_ERROR = 99 };

typedef struct lp_ng_instance {
  const char *provider_id; /* "bizflycloud://<server uuid>", the Node's spec.providerID */
  int state;               /* LP_NG_RUNNING, LP_NG_CREATING or LP_NG_DELETING */
  int error_class;         /* LP_NG_NO_ERROR, LP_NG_OUT_OF_RESOURCES or LP_NG_OTHER_ERROR */
  const char *error_code;  /* "" when error_class is LP_NG_NO_ERROR */
  const char *error_message;
} lp_ng_instance;

typedef struct lp_ng_group {
  const char *id;
  const char *debug;
  int min_size, max_size, target_size;
  const lp_ng_instance *instances;
  size_t ninstances;
} lp_ng_group;

typedef void (*lp_ng_done_fn)(lp_error *err, void *ud);
/* node: a Kubernetes v1.Node as JSON (metadata, spec, status); the receiver decrefs it. */
typedef void (*lp_ng_node_fn)(json_t *node, lp_error *err, void *ud);

lp_nodegroups *lp_nodegroups_new(const lp_nodegroups_config *cfg);
/* From now on operations end with Cancelled instead of calling the mapping; operations waiting for
 * their turn end now. Operations whose script call is in flight end when it does (close the script
 * host to cancel those). */
void lp_nodegroups_shutdown(lp_nodegroups *ng);
/* Operations not yet ended (done not yet called). */
size_t lp_nodegroups_in_flight(const lp_nodegroups *ng);
/* Frees ng; call once lp_nodegroups_in_flight is 0. Its one libuv handle closes on the loop. */
void lp_nodegroups_free(lp_nodegroups *ng);

/* The mapping's `name` and `gpu_label` (re-read: a reload may change them), malloc'd; "" if unset. */
char *lp_nodegroups_name(lp_nodegroups *ng);
char *lp_nodegroups_gpu_label(lp_nodegroups *ng);

/* Refresh (see above). */
void lp_ng_refresh(lp_nodegroups *ng, lp_ng_done_fn done, void *ud);

/* Snapshot readers. Pointers stay valid until the next snapshot replaces this one, i.e. until control
 * returns to the loop: copy what you keep. Without a snapshot: 0 / NULL. */
int lp_ng_has_snapshot(const lp_nodegroups *ng);
/* Seconds since the snapshot was taken (successfully), or -1 without one. */
double lp_ng_snapshot_age(const lp_nodegroups *ng);
size_t lp_ng_count(const lp_nodegroups *ng);
const lp_ng_group *lp_ng_at(const lp_nodegroups *ng, size_t i);
const lp_ng_group *lp_ng_find(const lp_nodegroups *ng, const char *id);
/* The node group owning the instance with this provider ID, or NULL for a node luaprov does not
 * manage (the answer for a node the snapshot does not list yet, too). Labels are never consulted:
 * the Cluster Autoscaler's fake nodes for unregistered instances have none. */
const lp_ng_group *lp_ng_for_node(const lp_nodegroups *ng, const char *provider_id);

/* delta > 0 and target + delta <= max_size, then set_target_size(ctx, id, target + delta). */
void lp_ng_increase_size(lp_nodegroups *ng, const char *id, int delta, lp_ng_done_fn done, void *ud);
/* delta < 0, target + delta no lower than the instances that are not being deleted nor than
 * min_size, then set_target_size(ctx, id, target + delta). Never deletes an instance. */
void lp_ng_decrease_target_size(lp_nodegroups *ng, const char *id, int delta, lp_ng_done_fn done, void *ud);
/* nodes: [{"provider_id", "name", "labels": {...}}] (borrowed). Every node must belong to the group
 * by provider ID (checked before anything is deleted); then delete_node(ctx, id, node) one by one,
 * the target decremented after each success; the first failure ends the operation (nodes deleted
 * before it stay deleted) with a message saying how many were. */
void lp_ng_delete_nodes(lp_nodegroups *ng, const char *id, const json_t *nodes, lp_ng_done_fn done, void *ud);
/* The template Node of a scale-from-zero: template_node(ctx, id) -> {labels, taints, capacity,
 * allocatable}, checked and completed (name "template-<id>", os/arch/hostname labels, Ready).
 * Unimplemented when the mapping has no template_node or answers nil / NotFound. */
void lp_ng_template_node(lp_nodegroups *ng, const char *id, lp_ng_node_fn done, void *ud);

/* NodeGroupGetOptions: get_options(ctx, id, defaults) -> a table of overrides, checked and merged over
 * defaults. defaults and the result are objects of the NodeGroupAutoscalingOptions fields in
 * snake_case, durations in seconds: scale_down_utilization_threshold and
 * scale_down_gpu_utilization_threshold (numbers in [0, 1]), scale_down_unneeded_time,
 * scale_down_unready_time and max_node_provision_time (seconds, 0 to LP_NG_MAX_OPTION_SECONDS),
 * zero_or_max_node_scaling and ignore_daemon_sets_utilization (booleans). done gets the merged
 * object. InvalidArgument when defaults is not an object (NULL: the request had none), before anything
 * else. NotFound for a group the snapshot does not hold, whether or not the mapping has get_options;
 * Unimplemented when the mapping has no get_options (then without refreshing first: before the first
 * snapshot whatever the id) or returns nil. defaults is borrowed. */
#define LP_NG_MAX_OPTION_SECONDS 9223372036.0 /* what a meta.v1.Duration (int64 ns) holds */
void lp_ng_get_options(lp_nodegroups *ng, const char *id, const json_t *defaults, lp_ng_node_fn done,
                       void *ud);
/* PricingNodePrice: node_price(ctx, node, start_time, end_time) -> a price (a number >= 0), given to
 * done as a JSON real. node is {name, provider_id, labels, annotations}; times are RFC 3339 strings
 * or NULL (json.null in Lua). Needs no snapshot. Unimplemented when the mapping has no node_price
 * or returns nil. node is borrowed. */
void lp_ng_node_price(lp_nodegroups *ng, const json_t *node, const char *start_time, const char *end_time,
                      lp_ng_node_fn done, void *ud);
/* PricingPodPrice: pod_price(ctx, pod, start_time, end_time), as lp_ng_node_price. pod is
 * {name, namespace, labels, requests, limits, containers = {{name, requests, limits}}}. */
void lp_ng_pod_price(lp_nodegroups *ng, const json_t *pod, const char *start_time, const char *end_time,
                     lp_ng_node_fn done, void *ud);

/* For callers that wait (tests, benchmarks): pass lp_ng_outcome_store / lp_ng_outcome_node as done
 * and an lp_ng_outcome as ud, then lp_ng_outcome_wait runs the loop until it is filled. Not from
 * inside a loop callback. The caller owns node and error afterwards. */
typedef struct lp_ng_outcome {
  int done;
  json_t *node;
  lp_error *error;
} lp_ng_outcome;
void lp_ng_outcome_store(lp_error *err, void *outcome);
void lp_ng_outcome_node(json_t *node, lp_error *err, void *outcome);
void lp_ng_outcome_wait(uv_loop_t *loop, lp_ng_outcome *outcome);

#endif

/* Karpenter's CloudProvider contract (docs/contracts.md#cloudprovider-rules), served by a Lua mapping
 * (LUAPROV_CLOUDPROVIDER_MAPPING, set by the build) and enforced here: the engine does not trust what the
 * mapping returns. Every operation is asynchronous (the mapping awaits cloud APIs); done runs once on the
 * loop thread with either a value or an error, and owns both: the receiver json_decref()s the value and
 * lp_error_free()s the error.
 *
 * Error codes, as Karpenter's cloudprovider errors:
 *   NodeClassNotReady     the node class is not Ready (retry later)
 *   InsufficientCapacity  no offering compatible with the NodeClaim can launch now
 *   NodeClaimNotFound     the instance is gone (Delete, Get)
 *   CreateError           a structured launch failure (quota, unsupported configuration): the message
 *                         carries the reason (the API's code) and its text
 *   Contract              the mapping or a policy broke its contract: the message names the script file
 *                         and the rule ("<mapping>/init.lua: instance_types: ... (rule CP4 in
 *                         docs/contracts.md)")
 *   DriftUnknown          the drift policy could not decide yet (condition left as it is)
 *   anything else         passed through from the mapping (Throttled, Transport, Auth, ...)
 * Loop thread only. */
#ifndef LUAPROV_CONTRACT_CLOUDPROVIDER_H
#define LUAPROV_CONTRACT_CLOUDPROVIDER_H

#include <jansson.h>

#include "contract/nodeclass_desc.h"
#include "core/cache.h"
#include "core/error.h"
#include "script/host.h"

typedef struct lp_cloudprovider lp_cloudprovider;

typedef struct lp_cloudprovider_config {
  uv_loop_t *loop;
  lp_script_host *scripts;
  const char *mapping; /* entry module of the mapping; NULL = LUAPROV_CLOUDPROVIDER_MAPPING */
  /* the values of the mapping's settings (lp_settings_resolve, contract/settings.h), merged into the
   * ctx of every call (borrowed); NULL = resolved here as against the simulators (their `sim` values) */
  const json_t *settings;
  const char *cluster_id;       /* ctx.cluster_id: tags and the instances this cluster owns */
  const char *endpoint;         /* ctx.endpoint: one URL for every cloud API (the simulator); may be NULL */
  double unavailable_ttl_s;     /* how long an offering stays unavailable after a NoStock error; 0 = 180 */
  unsigned max_launch_attempts; /* at most this many offerings are handed to the mapping per Create; 0 = 10 */
  /* how often the instance types (prices, availability) of every node class seen are refreshed in
   * the background; 0 = every 20 minutes (the mapping caches prices 30 minutes), < 0 = never */
  double refresh_interval_s;
  /* how long a node class's instance types are answered from memory before a call also refreshes them
   * in the background (that call and those during the refresh get the held list); 0 = 60 seconds */
  double types_max_age_s;
} lp_cloudprovider_config;

typedef void (*lp_cp_done_fn)(json_t *value, lp_error *err, void *ud);

lp_cloudprovider *lp_cloudprovider_new(const lp_cloudprovider_config *cfg);
/* Frees the provider. Operations the caller started must have completed; a background refresh still
 * in flight finishes on its own (the provider's memory goes with it). */
void lp_cloudprovider_free(lp_cloudprovider *cp);

/* Before the script host closes: operations started from now on fail at once (on a later loop turn)
 * with code "ShuttingDown", and the background refresh stops. Operations in flight are not touched
 * (closing the host cancels them). */
void lp_cloudprovider_shutdown(lp_cloudprovider *cp);

/* The clock of the provider's held answers: when offerings marked unavailable expire and when held
 * instance types count as stale. NULL restores the monotonic clock. Tests move it. */
void lp_cloudprovider_set_clock(lp_cloudprovider *cp, lp_clock_fn clock, void *ud);

/* The script generation in service (it changes on every hot reload): what answers are cached against. */
uint64_t lp_cloudprovider_script_generation(const lp_cloudprovider *cp);
/* The content digest of the script generation in service (lp_generation_digest): unlike the
 * generation, the same for the same files after a restart, so it can be recorded on an object. */
uint64_t lp_cloudprovider_script_digest(const lp_cloudprovider *cp);

/* The mapping's `name` (the provider name Karpenter reports), valid while the provider lives. */
const char *lp_cloudprovider_name(lp_cloudprovider *cp);
/* [{"group", "version", "kind"}] of the node classes this provider serves: its descriptor's group
 * first, then each of its aliases (the same version and kind); caller decrefs. */
json_t *lp_cloudprovider_supported_nodeclasses(const lp_cloudprovider *cp);
/* The node class descriptor the mapping exported when the provider started (nodeclass_desc.h): the
 * resource the controllers watch, its finalizer and hash annotations. Valid while the provider lives;
 * a reload cannot change it. */
const lp_nodeclass_desc *lp_cloudprovider_nodeclass(const lp_cloudprovider *cp);
/* The drift reasons the mapping declares (its `drift_reasons`, CamelCase words), besides the
 * engine's own NodeClassDrift; borrowed, read when the provider started. */
const json_t *lp_cloudprovider_drift_reasons(const lp_cloudprovider *cp);

/* Launches the NodeClaim (objects borrowed, not stolen): the allowed offerings, cheapest first, are
 * handed to the mapping's create, which launches one (docs/contracts.md#create, rule CP9). Value: the
 * NodeClaim to persist, with the labels of rule 2, the hash annotations, status.providerID, imageID,
 * capacity and allocatable. Errors: NodeClassNotReady, InsufficientCapacity, CreateError ("launching
 * NodeClaim NAME failed: CODE: text"), Contract. */
void lp_cp_create(lp_cloudprovider *cp, const json_t *nodeclaim, const json_t *nodeclass, lp_cp_done_fn done,
                  void *ud);
/* Deletes the NodeClaim's instance. Value: json_true() once deletion is triggered. */
void lp_cp_delete(lp_cloudprovider *cp, const json_t *nodeclaim, lp_cp_done_fn done, void *ud);
/* Value: a NodeClaim describing the instance of provider_id. */
void lp_cp_get(lp_cloudprovider *cp, const char *provider_id, lp_cp_done_fn done, void *ud);
/* Value: the instance of provider_id in the instance shape, checked, exactly what the drift policy
 * receives as `instance` (`luaprov instance`). */
void lp_cp_get_instance(lp_cloudprovider *cp, const char *provider_id, lp_cp_done_fn done, void *ud);
/* Value: an array of NodeClaims, one per instance this cluster owns. */
void lp_cp_list(lp_cloudprovider *cp, lp_cp_done_fn done, void *ud);
/* Value: the validated instance types (the shape `luaprov eval instance-types` prints), offerings
 * marked unavailable when the engine saw a NoStock error for them recently. Answered from memory for
 * a class whose spec, status, labels and annotations and the script generation are those of the last
 * answer (types_max_age_s); the value is shared with that cache: read it, never modify it. */
void lp_cp_get_instance_types(lp_cloudprovider *cp, const json_t *nodeclass, lp_cp_done_fn done, void *ud);
/* Value: a JSON string, the DriftReason or "" when not drifted. */
void lp_cp_is_drifted(lp_cloudprovider *cp, const json_t *nodeclaim, const json_t *nodeclass,
                      lp_cp_done_fn done, void *ud);
/* At most this many instance IDs go to one call of the mapping's optional get_many. */
#define LP_CP_LOOKUP_MAX 100
/* How many NodeClaims' instances one lookup serves in service now: LP_CP_LOOKUP_MAX when the mapping
 * exports get_many (looked up once per script generation), 1 when it does not. What a caller of
 * lp_cp_is_drifted_many gathers. */
size_t lp_cloudprovider_lookup_batch(lp_cloudprovider *cp);

/* done(index, value, err, ud) of lp_cp_is_drifted_many: the answer for items[index], owned as
 * lp_cp_done_fn's. */
typedef void (*lp_cp_each_fn)(size_t index, json_t *value, lp_error *err, void *ud);
/* IsDrifted of several NodeClaims at once: items is [[nodeclaim, nodeclass], ...] (borrowed, copied), and
 * each gets exactly what lp_cp_is_drifted answers for it (values, error codes and messages, metrics), except
 * that the instances of those the policy's static_drift leaves undecided are looked up together once every
 * item got that far: the mapping's get_many(ctx, instance_ids) with at most LP_CP_LOOKUP_MAX distinct IDs a
 * call (an ID missing from its answer is NodeClaimNotFound for the NodeClaims of that ID alone; a call that
 * fails fails the NodeClaims of its IDs with its error, code, action and request ID kept; an answer that is
 * no list is a Contract error for them), or, without get_many, the mapping's get for each. done runs once
 * per item, on later loop turns, in no set order; ud must live until the last. An empty items answers
 * nothing. */
void lp_cp_is_drifted_many(lp_cloudprovider *cp, const json_t *items, lp_cp_each_fn done, void *ud);
/* Value: [{"condition_type", "condition_status", "toleration_seconds"}]. */
void lp_cp_repair_policies(lp_cloudprovider *cp, lp_cp_done_fn done, void *ud);

/* For callers that wait (the CLI, tests): pass lp_cp_outcome_store as done and an lp_cp_outcome as
 * ud, then lp_cp_outcome_wait runs the loop until it is filled. Not from inside a loop callback. The
 * caller owns value and error afterwards. */
typedef struct lp_cp_outcome {
  int done;
  json_t *value;
  lp_error *error;
} lp_cp_outcome;
void lp_cp_outcome_store(json_t *value, lp_error *err, void *outcome);
void lp_cp_outcome_wait(uv_loop_t *loop, lp_cp_outcome *outcome);

/* ---- node class status (cloudprovider_nodeclass.c) ---------------------------------------- */

/* Resolves the class (object borrowed) through the mapping's resolve_nodeclass(ctx, nodeclass).
 * Value: the status to write, checked to be an object with a conditions array (each {type, status
 * True|False|Unknown, reason?, message?}) plus whatever the mapping resolves (its cloud's lists);
 * the mapping says readiness with its Ready condition. Anything else is a Contract error naming the
 * script. The mapping reports cloud API failures as conditions (status Unknown), so an error here
 * means the call itself failed (script error, budget, Contract). */
void lp_cp_resolve_nodeclass(lp_cloudprovider *cp, const json_t *nodeclass, lp_cp_done_fn done, void *ud);

/* Value: {"hash": "...", "version": "..."}, the mapping's nodeclass_hash(nodeclass) (object borrowed):
 * the values of the descriptor's hash_annotation and hash_version_annotation. No cloud call. */
void lp_cp_nodeclass_hash(lp_cloudprovider *cp, const json_t *nodeclass, lp_cp_done_fn done, void *ud);

/* ---- the disruption policy (cloudprovider_disruption.c) ---------------------------------- */

/* Asks the disruption policy (policies/disruption.lua can_disrupt) whether the node of nodeclaim may be
 * disrupted now. node may be NULL (not registered yet); pods is a JSON array of the pods bound to it;
 * ctx is {"reason", "nodepool", "now", "method"} (all borrowed, copied as needed). done(allowed, why, err,
 * ud) runs once, later on the loop: without a disruption policy module, allowed = 1; a policy that answers
 * false gives allowed = 0 and why (its second value, or "vetoed by the disruption policy"); a policy that
 * fails (raises, exceeds its budget, returns something that is neither true nor false) gives allowed = 0 and
 * err (owned by done) naming policies/disruption.lua, the function, the file and line, as the other policies'
 * errors do. why is borrowed for the call. */
void lp_cp_can_disrupt(lp_cloudprovider *cp, const json_t *nodeclaim, const json_t *node, const json_t *pods,
                       const json_t *ctx, void (*done)(int allowed, const char *why, lp_error *err, void *ud),
                       void *ud);

/* ---- interruption and registration (cloudprovider_interruption.c) ------------------------ */

/* The Node condition types that announce an interruption of the instance (a spot reclaim), from the
 * mapping's optional `interruption_conditions` list: a new JSON array of strings, empty when the
 * mapping has none (caller decrefs). Re-read on every call: a reload may change it. */
json_t *lp_cloudprovider_interruption_conditions(lp_cloudprovider *cp);

/* Marks the offering (type, zone, capacity_type) unavailable for the unavailable-offerings TTL
 * (lp_cloudprovider_config.unavailable_ttl_s), as a NoStock error does: GetInstanceTypes answers it
 * available=false and Create skips it. reason is logged. Strings borrowed. */
void lp_cp_mark_unavailable(lp_cloudprovider *cp, const char *type, const char *zone,
                            const char *capacity_type, const char *reason);

/* Tells the mapping that the instance of provider_id registered as Node node_name, through its
 * optional registered(ctx, instance_id, node_name). Value: json_true() once the mapping answered,
 * json_false() when the mapping has no registered function; errors are the mapping's (with its
 * action and request ID in the message) or NodeClaimNotFound for an unparsable provider ID. */
void lp_cp_registered(lp_cloudprovider *cp, const char *provider_id, const char *node_name,
                      lp_cp_done_fn done, void *ud);

#endif

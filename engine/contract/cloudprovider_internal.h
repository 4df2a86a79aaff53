/* Shared by the CloudProvider operations (cloudprovider.c, cloudprovider_create.c, cloudprovider_drift.c,
 * cloudprovider_disruption.c, cloudprovider_nodeclass.c). */
#ifndef LUAPROV_CONTRACT_CLOUDPROVIDER_INTERNAL_H
#define LUAPROV_CONTRACT_CLOUDPROVIDER_INTERNAL_H

#include "contract/cloudprovider.h"
#include "core/cache.h"
#include "core/metrics.h"
#include "contract/types_cache.h"

#define LOGGER "engine.cloudprovider"

struct lp_cloudprovider {
  uv_loop_t *loop;
  lp_script_host *scripts;
  char *mapping;
  char *name;
  json_t *ctx;            /* {cluster_id, endpoint, <the mapping's settings>} passed to every mapping call */
  json_t *nodeclass_json; /* the mapping's `nodeclass` table, pinned (nodeclass_desc.h) */
  lp_nodeclass_desc desc; /* pointers into nodeclass_json (its alias list allocated) */
  /* whether the drift policy exports the optional static_drift, looked up once per generation */
  uint64_t static_drift_generation;
  int has_static_drift;
  /* whether the mapping exports the optional get_many, looked up once per generation */
  uint64_t get_many_generation;
  int has_get_many;
  json_t *drift_reasons; /* the mapping's `drift_reasons`: an array of strings */
  lp_cache *unavailable;
  lp_types_cache *types; /* the checked instance types of every node class seen (types_cache.h) */
  struct types_flight *types_flights; /* GetInstanceTypes misses the mapping is answering */
  unsigned max_launch_attempts;
  lp_metric *launches;
  lp_metric *drift_evaluations;      /* luaprov_drift_policy_evaluations_total{generation, result} */
  lp_metric *disruption_evaluations; /* luaprov_disruption_policy_evaluations_total{generation, result} */
  /* background refresh: every node class seen, asked for its instance types again periodically so
   * expired prices and availability are fetched before a Create needs them */
  json_t *known_classes; /* "apiVersion name" -> node class */
  uv_timer_t *refresh_timer;
  unsigned refreshing; /* background GetInstanceTypes in flight */
  int freed;           /* lp_cloudprovider_free ran; the last background call frees the struct */
  int shut_down;       /* lp_cloudprovider_shutdown ran: no script call starts any more */
};

/* One operation in flight: the caller's callback plus whatever the steps carry along. */
typedef struct op op;
typedef void (*step_fn)(op *o, json_t *values, lp_error *err);

struct op {
  lp_cloudprovider *cp;
  lp_cp_done_fn done;
  void *ud;
  json_t *nodeclaim, *nodeclass; /* own references */
  json_t *candidates;            /* create: [[type, offering], ...] still to hand, cheapest first */
  json_t *allowed;               /* create: the types and offerings an adopted instance may be of */
  size_t sold_out;               /* create: the offerings the mapping reported out of stock so far */
  size_t next_candidate;         /* list: the provider_id calls still running */
  json_t *tags;
  json_t *chosen_type;
  json_t *instance;
  char *provider_id;
  uv_timer_t *defer;       /* to report a failure found before any script ran, outside the caller's call */
  json_t *value;           /* a deferred outcome's value (the disruption policy's answer without a module) */
  lp_error *error;         /* a deferred failure */
  json_t *error_detail;    /* the mapping's structured error of the last call, e.g. {code, offerings} */
  uint64_t generation;     /* the script generation that ran the last call (0 before the first) */
  step_fn got;             /* get and get_instance: the step after the mapping's get */
  char *instance_id;       /* is_drifted_many: the instance ID get_many is to describe */
  struct drift_many *many; /* is_drifted_many: the batch this NodeClaim's IsDrifted belongs to, or NULL */
  int refresh;             /* instance types: a background refresh of the class's entry */
};

op *cp_op_new(lp_cloudprovider *cp, lp_cp_done_fn done, void *ud);
/* Calls done with value and err (ownership passes) and frees the operation. */
void cp_finish(op *o, json_t *value, lp_error *err);
/* Reports value and err (ownership passes) after the current call returns. */
void cp_finish_soon(op *o, json_t *value, lp_error *err);
/* Reports err (and o->value) after the current call returns: done never runs inside an lp_cp_* call. */
void cp_fail_soon(op *o, lp_error *err);
/* "file: function: problem (rule)"; takes problem. */
lp_error *cp_contract_error(op *o, const char *module, const char *function, char *problem, const char *rule);
/* A finished task's outcome: NULL and *values the results array, or the error (the task's own, or the
 * mapping's (nil, err), whose err table goes to *detail when detail is not NULL; caller decrefs). */
lp_error *cp_task_outcome(const lp_task_result *r, json_t **values, json_t **detail);
/* Calls module.function(args...) (args stolen) as a task; next gets the results array or an error. */
void cp_call(op *o, const char *module, const char *function, json_t *args, step_fn next);
/* [ctx, a] with a stolen. */
json_t *cp_ctx_args1(lp_cloudprovider *cp, json_t *a);
/* "type|zone|capacity_type", the key of the unavailable-offerings cache. */
void cp_offering_key(char *out, size_t cap, const char *type, const json_t *offering);

/* The NodeClaim's status.providerID (borrowed), or NULL. */
const char *cp_provider_id_of(const json_t *nodeclaim);
/* The step after parse_provider_id: the instance ID, borrowed for the call. */
typedef void (*cp_with_id_fn)(op *o, const char *instance_id);
/* Handles parse_provider_id's answer (values, err owned): calls then with the instance ID, or finishes
 * the operation with NodeClaimNotFound (unparsable) or a Contract error (no instance_id). */
void cp_parsed_for(op *o, json_t *values, lp_error *err, cp_with_id_fn then);
/* The instance a mapping's get (or get_many: function names it in a Contract error) returned, values
 * [instance], checked against the instance shape. On failure the operation is finished (NotFound becomes
 * NodeClaimNotFound), values freed, and NULL returned; otherwise the instance, borrowed from values. */
json_t *cp_got_instance(op *o, const char *function, json_t *values, lp_error *err);

/* The counter luaprov_<policy>_policy_evaluations_total{generation, result} of a policy's answers
 * (results lists the result labels, for the help line), registered in lp_metrics_default. */
lp_metric *cp_policy_evaluations(const char *policy, const char *results);
/* Registers luaprov_drift_policy_evaluations_total (cloudprovider_drift.c); lp_cloudprovider_new calls it. */
void cp_drift_init(lp_cloudprovider *cp);
/* Registers luaprov_disruption_policy_evaluations_total (cloudprovider_disruption.c); likewise. */
void cp_disruption_init(lp_cloudprovider *cp);

#endif

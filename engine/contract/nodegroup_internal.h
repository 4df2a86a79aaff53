/* Shared by the NodeGroup files: nodegroup.c (operation plumbing, Refresh, readers),
 * nodegroup_resize.c (size changes, deletions, template node), nodegroup_snapshot.c (what refresh
 * returns, checked and indexed), nodegroup_template.c (the template Node) and nodegroup_options.c
 * (the optional get_options, node_price and pod_price). */
#ifndef LUAPROV_CONTRACT_NODEGROUP_INTERNAL_H
#define LUAPROV_CONTRACT_NODEGROUP_INTERNAL_H

#include "contract/nodegroup.h"
#include "core/metrics.h"

#define NG_LOGGER "engine.nodegroup"

/* A validated refresh result. The strings of groups and instances point into doc. */
typedef struct ng_snapshot {
  json_t *doc;
  lp_ng_group *groups;
  size_t ngroups;
  lp_ng_instance *instances; /* every group's, group after group */
  size_t ninstances;
  json_t *by_id;          /* group id -> group index */
  json_t *by_provider_id; /* provider id -> group index */
  double taken_at;        /* lp_clock_monotonic() */
} ng_snapshot;

typedef struct ng_op ng_op;
typedef struct lane lane;
typedef void (*op_fn)(ng_op *o);

/* The mutations of one node group, oldest first; the head is running or about to. */
struct lane {
  char *id;
  ng_op *head, *tail;
  lane *next;
};

struct lp_nodegroups {
  uv_loop_t *loop;
  lp_script_host *scripts;
  char *mapping;
  json_t *ctx; /* {cluster, endpoint} passed to every mapping call */
  double max_stale_s;
  ng_snapshot *snapshot;
  int closing;
  size_t in_flight;
  int refreshing;
  ng_op *waiters; /* operations waiting for the refresh in flight */
  double refresh_started;
  ng_op *ready_head, *ready_tail; /* operations to start on the next loop turn */
  uv_idle_t *kick;
  lane *lanes;
  lp_metric *refresh_total, *refresh_seconds, *groups_gauge, *instances_gauge, *operations;
};

struct ng_op {
  lp_nodegroups *ng;
  const char *name; /* the operation, for logs and metrics */
  op_fn run;        /* runs once a snapshot exists */
  lp_ng_done_fn done;
  lp_ng_node_fn node_done;
  void *ud;
  char *id;
  int delta;
  long long target;
  json_t *nodes;   /* DeleteNodes: the nodes to delete, checked and deduplicated */
  json_t *args;    /* GetOptions: the defaults; pricing: the call's arguments after ctx */
  int no_snapshot; /* pricing: runs without a snapshot (and never refreshes for one) */
  size_t next_node;
  lane *lane;
  ng_op *next_ready, *next_in_lane, *next_waiter;
};

/* Operations (nodegroup.c). An operation ends exactly once, through ng_finish. */
ng_op *ng_op_new(lp_nodegroups *ng, const char *name, const char *id, op_fn run);
/* Starts o on the next loop turn (after a refresh when there is no snapshot yet). */
void ng_schedule(ng_op *o);
/* Queues o behind the other mutations of its node group, then as ng_schedule. */
void ng_enqueue(ng_op *o);
/* Calls the operation's done with err and node (ownership passes), lets the next mutation of the
 * group start and frees o. */
void ng_finish(ng_op *o, lp_error *err, json_t *node);
/* The group o names in the snapshot; else ends o with NotFound (the message names the id, in the
 * upstream provider's words) and returns NULL. */
lp_ng_group *ng_group_or_fail(ng_op *o);
/* "providers/bizfly/init.lua: refresh: <problem> (docs/contracts.md#mappings)"; takes problem. */
lp_error *ng_contract_error(lp_nodegroups *ng, const char *function, char *problem, const char *rule);
/* Calls mapping.function(args...) (args stolen) as a task; next gets the results array or an error
 * ((nil, {code, message}) and (nil, "message") become errors). failure is the mapping's error table
 * when it answered (nil, {...}), else NULL: borrowed, valid during next, for the fields beyond code and
 * message a log line wants (the Bizfly mapping's method, path, status, request_id). */
typedef void (*ng_call_next)(void *ud, json_t *values, lp_error *err, const json_t *failure);
void ng_call_mapping(lp_nodegroups *ng, const char *function, json_t *args, ng_call_next next, void *ud);
/* Whether the mapping in service exports function (optional exports such as template_node). */
int ng_mapping_has(lp_nodegroups *ng, const char *function);

/* Checks groups (the first value refresh returned; borrowed) against the mapping contract and the
 * NodeGroup rules and builds the snapshot. On a violation returns NULL, *problem gets a malloc'd
 * sentence naming the group and field and *rule the section of docs/contracts.md it breaks. Targets
 * outside [min, max] are accepted (the cloud may report them while bounds change) and logged. */
ng_snapshot *ng_snapshot_build(const json_t *groups, char **problem, const char **rule);
void ng_snapshot_free(ng_snapshot *s);
lp_ng_group *ng_snapshot_find(const ng_snapshot *s, const char *id);
lp_ng_group *ng_snapshot_owner(const ng_snapshot *s, const char *provider_id);
/* The instance of the group with this provider id, or NULL. */
lp_ng_instance *ng_group_instance(lp_ng_group *g, const char *provider_id);
/* Instances of the group not being deleted: the floor of DecreaseTargetSize. */
int ng_group_live_instances(const lp_ng_group *g);

/* Checks what template_node returned (borrowed) and builds the v1.Node for group id; NULL with
 * *problem (malloc'd) when it breaks the contract. */
json_t *ng_template_build(const char *id, const json_t *tmpl, char **problem);

#endif

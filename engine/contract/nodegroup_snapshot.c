/* What the NodeGroup mapping's refresh(ctx) returns, checked against docs/contracts.md (the mapping's
 * answer, the NodeGroup rules) and indexed for the Cluster Autoscaler's many cheap questions (a group
 * by id, the group of a provider ID). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "contract/nodegroup_internal.h"
#include "core/clock.h"
#include "core/log.h"

#define RULE_SHAPE "docs/contracts.md#mappings"
#define RULE_CA    "docs/contracts.md#nodegroup-rules"

static int nonempty_string(const json_t *v) {
  return json_is_string(v) && json_string_length(v) > 0;
}

/* An empty Lua table arrives as {}: it is an empty list too. */
static int is_list(const json_t *v) {
  return json_is_array(v) || (json_is_object(v) && json_object_size(v) == 0);
}

/* A whole number in [0, INT32_MAX] (a Lua float such as 3.0 counts). */
static int size_field(const json_t *obj, const char *key, int *out) {
  const json_t *v = json_object_get(obj, key);
  double d;
  if (json_is_integer(v))
    d = (double)json_integer_value(v);
  else if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v))
    d = json_real_value(v);
  else
    return 0;
  if (d < 0 || d > INT32_MAX) return 0;
  *out = (int)d;
  return 1;
}

static int parse_state(const char *s) {
  if (!s) return 0;
  if (strcmp(s, "running") == 0) return LP_NG_RUNNING;
  if (strcmp(s, "creating") == 0) return LP_NG_CREATING;
  if (strcmp(s, "deleting") == 0) return LP_NG_DELETING;
  return 0;
}

static int parse_error_class(const char *s) {
  if (!s) return 0;
  if (strcmp(s, "OutOfResources") == 0) return LP_NG_OUT_OF_RESOURCES;
  if (strcmp(s, "Other") == 0) return LP_NG_OTHER_ERROR;
  return 0;
}

void ng_snapshot_free(ng_snapshot *s) {
  if (!s) return;
  json_decref(s->doc);
  json_decref(s->by_id);
  json_decref(s->by_provider_id);
  free(s->groups);
  free(s->instances);
  free(s);
}

/* "node group 3 ('pool-a')": where a problem is, for the operator reading the error. */
static char *group_name(size_t i, const json_t *group) {
  const char *id = json_string_value(json_object_get(group, "id"));
  return id && *id ? lp_xasprintf("node group %zu ('%s')", i + 1, id) : lp_xasprintf("node group %zu", i + 1);
}

static char *check_instance(const json_t *node, const char *where, size_t k) {
  if (!json_is_object(node)) return lp_xasprintf("%s: nodes[%zu] is not a table", where, k + 1);
  if (!nonempty_string(json_object_get(node, "provider_id")))
    return lp_xasprintf("%s: nodes[%zu] has no provider_id string", where, k + 1);
  const char *pid = json_string_value(json_object_get(node, "provider_id"));
  const char *state = json_string_value(json_object_get(node, "state"));
  if (!parse_state(state))
    return lp_xasprintf("%s: node %s: state '%s' is not \"running\", \"creating\" or \"deleting\"", where,
                        pid, state ? state : "(none)");
  const json_t *error = json_object_get(node, "error");
  if (!error || json_is_null(error)) return NULL;
  if (!json_is_object(error))
    return lp_xasprintf("%s: node %s: error is not a table {class, code, message}", where, pid);
  const char *klass = json_string_value(json_object_get(error, "class"));
  if (!parse_error_class(klass))
    return lp_xasprintf("%s: node %s: error.class '%s' is not \"OutOfResources\" or \"Other\"", where, pid,
                        klass ? klass : "(none)");
  if (!nonempty_string(json_object_get(error, "code")))
    return lp_xasprintf("%s: node %s: error.code is not a non-empty string", where, pid);
  const json_t *message = json_object_get(error, "message");
  if (message && !json_is_string(message))
    return lp_xasprintf("%s: node %s: error.message is not a string", where, pid);
  return NULL;
}

static char *check_group(const json_t *group, size_t i, const char **rule) {
  char *where = group_name(i, group);
  char *problem = NULL;
  int min, max, target;
  const json_t *debug = json_object_get(group, "debug");
  if (!json_is_object(group))
    problem = lp_xasprintf("%s is not a table", where);
  else if (!nonempty_string(json_object_get(group, "id")))
    problem = lp_xasprintf("%s has no id string", where);
  else if (!size_field(group, "min_size", &min))
    problem = lp_xasprintf("%s: min_size is not a whole number >= 0", where);
  else if (!size_field(group, "max_size", &max))
    problem = lp_xasprintf("%s: max_size is not a whole number >= 0", where);
  else if (!size_field(group, "target_size", &target))
    problem = lp_xasprintf("%s: target_size is not a whole number >= 0", where);
  else if (min > max) {
    problem = lp_xasprintf("%s: min_size %d is above max_size %d", where, min, max);
    *rule = RULE_CA;
  } else if (debug && !json_is_null(debug) && !json_is_string(debug))
    problem = lp_xasprintf("%s: debug is not a string", where);
  else if (json_object_get(group, "nodes") && !is_list(json_object_get(group, "nodes")))
    problem = lp_xasprintf("%s: nodes is not a list", where);
  else {
    size_t k;
    const json_t *node;
    json_array_foreach(json_object_get(group, "nodes"), k, node) {
      if ((problem = check_instance(node, where, k))) break;
    }
  }
  free(where);
  return problem;
}

ng_snapshot *ng_snapshot_build(const json_t *groups, char **problem, const char **rule) {
  *rule = RULE_SHAPE;
  if (!is_list(groups)) {
    *problem = lp_xasprintf("returned %s instead of a list of node groups (or nil, err)",
                            json_is_null(groups) || !groups ? "nothing" : "something else");
    return NULL;
  }
  size_t ngroups = json_is_array(groups) ? json_array_size(groups) : 0, ninstances = 0, i;
  const json_t *group;
  json_array_foreach(groups, i, group) {
    if ((*problem = check_group(group, i, rule))) return NULL;
    ninstances += json_array_size(json_object_get(group, "nodes"));
  }

  ng_snapshot *s = lp_xcalloc(1, sizeof *s);
  s->doc = json_deep_copy(groups);
  if (!json_is_array(s->doc)) {
    json_decref(s->doc);
    s->doc = json_array();
  }
  s->groups = lp_xcalloc(ngroups ? ngroups : 1, sizeof *s->groups);
  s->instances = lp_xcalloc(ninstances ? ninstances : 1, sizeof *s->instances);
  s->by_id = json_object();
  s->by_provider_id = json_object();
  s->taken_at = lp_clock_monotonic();
  s->ngroups = ngroups;
  s->ninstances = ninstances;
  size_t next = 0;
  json_t *g;
  json_array_foreach(s->doc, i, g) {
    lp_ng_group *out = &s->groups[i];
    out->id = json_string_value(json_object_get(g, "id"));
    if (json_object_get(s->by_id, out->id)) {
      *problem = lp_xasprintf("node group id '%s' is listed twice", out->id);
      *rule = RULE_CA;
      ng_snapshot_free(s);
      return NULL;
    }
    json_object_set_new(s->by_id, out->id, json_integer((json_int_t)i));
    size_field(g, "min_size", &out->min_size);
    size_field(g, "max_size", &out->max_size);
    size_field(g, "target_size", &out->target_size);
    if (!json_is_string(json_object_get(g, "debug")))
      json_object_set_new(g, "debug",
                          json_sprintf("%s (min:%d max:%d)", out->id, out->min_size, out->max_size));
    out->debug = json_string_value(json_object_get(g, "debug"));
    if (out->target_size < out->min_size || out->target_size > out->max_size)
      lp_warn(NG_LOGGER, "node group target size is outside [min, max]", LPF_STR("node_group", out->id),
              LPF_INT("target_size", out->target_size), LPF_INT("min_size", out->min_size),
              LPF_INT("max_size", out->max_size));
    out->instances = &s->instances[next];
    size_t k;
    const json_t *node;
    json_array_foreach(json_object_get(g, "nodes"), k, node) {
      lp_ng_instance *inst = &s->instances[next++];
      inst->provider_id = json_string_value(json_object_get(node, "provider_id"));
      inst->state = parse_state(json_string_value(json_object_get(node, "state")));
      const json_t *error = json_object_get(node, "error");
      inst->error_class = json_is_object(error)
                              ? parse_error_class(json_string_value(json_object_get(error, "class")))
                              : LP_NG_NO_ERROR;
      inst->error_code = inst->error_class ? json_string_value(json_object_get(error, "code")) : "";
      const char *message = inst->error_class ? json_string_value(json_object_get(error, "message")) : NULL;
      inst->error_message = message ? message : "";
      const json_t *owner = json_object_get(s->by_provider_id, inst->provider_id);
      if (owner) {
        *problem =
            lp_xasprintf("provider ID %s is listed in node groups '%s' and '%s'; a node belongs to one "
                         "node group",
                         inst->provider_id, s->groups[json_integer_value(owner)].id, out->id);
        *rule = RULE_CA;
        ng_snapshot_free(s);
        return NULL;
      }
      json_object_set_new(s->by_provider_id, inst->provider_id, json_integer((json_int_t)i));
      out->ninstances++;
    }
  }
  return s;
}

lp_ng_group *ng_snapshot_find(const ng_snapshot *s, const char *id) {
  const json_t *i = s && id ? json_object_get(s->by_id, id) : NULL;
  return i ? &s->groups[json_integer_value(i)] : NULL;
}

lp_ng_group *ng_snapshot_owner(const ng_snapshot *s, const char *provider_id) {
  const json_t *i = s && provider_id && *provider_id ? json_object_get(s->by_provider_id, provider_id) : NULL;
  return i ? &s->groups[json_integer_value(i)] : NULL;
}

lp_ng_instance *ng_group_instance(lp_ng_group *g, const char *provider_id) {
  for (size_t k = 0; g && k < g->ninstances; k++)
    if (strcmp(g->instances[k].provider_id, provider_id) == 0) return (lp_ng_instance *)&g->instances[k];
  return NULL;
}

int ng_group_live_instances(const lp_ng_group *g) {
  int n = 0;
  for (size_t k = 0; k < g->ninstances; k++)
    if (g->instances[k].state != LP_NG_DELETING) n++;
  return n;
}

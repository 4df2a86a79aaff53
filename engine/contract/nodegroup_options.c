/* The optional exports of the NodeGroup mapping: get_options (NodeGroupGetOptions) and node_price /
 * pod_price (PricingNodePrice, PricingPodPrice). A mapping without them leaves the answers
 * UNIMPLEMENTED, which the Cluster Autoscaler reads as "use your own"; what they return is checked
 * (docs/contracts.md#mappings) before it reaches the autoscaler. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "contract/nodegroup_internal.h"
#include "core/log.h"

#define RULE "docs/contracts.md#mappings"

enum { OPT_RATIO, OPT_SECONDS, OPT_BOOL };

/* NodeGroupAutoscalingOptions, field by field, in snake_case. */
static const struct {
  const char *name;
  int kind;
} options[] = {
    {"scale_down_utilization_threshold", OPT_RATIO}, {"scale_down_gpu_utilization_threshold", OPT_RATIO},
    {"scale_down_unneeded_time", OPT_SECONDS},       {"scale_down_unready_time", OPT_SECONDS},
    {"max_node_provision_time", OPT_SECONDS},        {"zero_or_max_node_scaling", OPT_BOOL},
    {"ignore_daemon_sets_utilization", OPT_BOOL},
};
#define NOPTIONS (sizeof options / sizeof options[0])

static int unimplemented(ng_op *o, const char *function, const char *what) {
  if (ng_mapping_has(o->ng, function)) return 0;
  ng_finish(
      o,
      lp_error_new("Unimplemented", "the NodeGroup mapping %s has no %s: %s", o->ng->mapping, function, what),
      NULL);
  return 1;
}

/* A type name for messages about a value the mapping returned. */
static const char *kind_of(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT:
    return "table";
  case JSON_ARRAY:
    return "list";
  case JSON_STRING:
    return "string";
  case JSON_INTEGER:
  case JSON_REAL:
    return "number";
  case JSON_TRUE:
  case JSON_FALSE:
    return "boolean";
  default:
    return "nil";
  }
}

/* ---- GetOptions -------------------------------------------------------------------------- */

/* Checks one override; NULL when it is right, else a malloc'd sentence. */
static char *check_option(const char *name, const json_t *v) {
  size_t i = 0;
  while (i < NOPTIONS && strcmp(options[i].name, name) != 0) i++;
  if (i == NOPTIONS)
    return lp_xasprintf("'%s' is not a NodeGroupAutoscalingOptions field (scale_down_utilization_threshold, "
                        "scale_down_gpu_utilization_threshold, scale_down_unneeded_time, "
                        "scale_down_unready_time, max_node_provision_time, zero_or_max_node_scaling, "
                        "ignore_daemon_sets_utilization)",
                        name);
  if (options[i].kind == OPT_BOOL)
    return json_is_boolean(v) ? NULL : lp_xasprintf("%s must be a boolean, not a %s", name, kind_of(v));
  if (!json_is_number(v)) return lp_xasprintf("%s must be a number, not a %s", name, kind_of(v));
  double x = json_number_value(v);
  if (options[i].kind == OPT_RATIO && !(isfinite(x) && x >= 0 && x <= 1))
    return lp_xasprintf("%s must be between 0 and 1, not %g", name, x);
  if (options[i].kind == OPT_SECONDS && !(isfinite(x) && x >= 0 && x <= LP_NG_MAX_OPTION_SECONDS))
    return lp_xasprintf("%s must be a number of seconds between 0 and %.0f, not %g", name,
                        LP_NG_MAX_OPTION_SECONDS, x);
  return NULL;
}

static void options_done(void *ud, json_t *values, lp_error *err, const json_t *failure) {
  ng_op *o = ud;
  if (err) {
    lp_error *e = lp_error_new(err->code, "options of node group %s: %s", o->id, err->message);
    lp_error_free(err);
    ng_finish(o, e, NULL);
    return;
  }
  const json_t *overrides = json_array_get(values, 0);
  if (!overrides || json_is_null(overrides)) {
    json_decref(values);
    ng_finish(o,
              lp_error_new("Unimplemented",
                           "get_options has no options for node group %s: the "
                           "autoscaler's own options apply",
                           o->id),
              NULL);
    return;
  }
  char *problem = NULL;
  json_t *merged = json_deep_copy(o->args);
  if (json_is_array(overrides) && json_array_size(overrides) == 0) {
    /* an empty Lua table: no overrides */
  } else if (!json_is_object(overrides)) {
    problem = lp_xasprintf("node group %s: returned a %s, not a table of options", o->id, kind_of(overrides));
  } else {
    const char *name;
    json_t *v;
    json_object_foreach((json_t *)overrides, name, v) {
      char *why = check_option(name, v);
      if (why) {
        problem = lp_xasprintf("node group %s: %s", o->id, why);
        free(why);
        break;
      }
      json_object_set(merged, name, v);
    }
  }
  json_decref(values);
  if (problem) {
    json_decref(merged);
    lp_error *e = ng_contract_error(o->ng, "get_options", problem, RULE);
    lp_errorlog(NG_LOGGER, "get_options broke the NodeGroup contract", LPF_STR("error", e->message));
    ng_finish(o, e, NULL);
    return;
  }
  ng_finish(o, NULL, merged);
}

/* The group is checked before the mapping's exports: an UNIMPLEMENTED answer would tell the autoscaler
 * the group exists and takes its defaults. Without get_options and before the first snapshot there is
 * nothing to check the id against, and UNIMPLEMENTED is the answer (the autoscaler lists the groups
 * before it asks for their options). */
static void options_run(ng_op *o) {
  if (!o->args) {
    ng_finish(o,
              lp_error_new("InvalidArgument",
                           "NodeGroupGetOptions: defaults is required (the autoscaler's options for node "
                           "group %s, which the overrides are merged over)",
                           o->id),
              NULL);
    return;
  }
  if (o->ng->snapshot && !ng_group_or_fail(o)) return;
  if (unimplemented(o, "get_options", "the autoscaler's own options apply")) return;
  ng_call_mapping(o->ng, "get_options", json_pack("[OsO]", o->ng->ctx, o->id, o->args), options_done, o);
}

void lp_ng_get_options(lp_nodegroups *ng, const char *id, const json_t *defaults, lp_ng_node_fn done,
                       void *ud) {
  ng_op *o = ng_op_new(ng, "GetOptions", id, options_run);
  o->node_done = done;
  o->ud = ud;
  if (!json_is_object(defaults)) { /* refused in options_run: nothing to merge over */
    o->no_snapshot = 1;
    ng_schedule(o);
    return;
  }
  /* every field present, the ones the client left out as zero */
  o->args = json_object();
  for (size_t i = 0; i < NOPTIONS; i++) {
    const json_t *v = json_object_get(defaults, options[i].name);
    json_t *value = options[i].kind == OPT_BOOL ? json_boolean(json_is_true(v))
                    : json_is_integer(v)        ? json_integer(json_integer_value(v))
                                                : json_real(json_is_number(v) ? json_number_value(v) : 0);
    json_object_set_new(o->args, options[i].name, value);
  }
  /* without get_options the answer needs no snapshot: UNIMPLEMENTED even while Bizfly is down */
  o->no_snapshot = !ng_mapping_has(ng, "get_options");
  ng_schedule(o);
}

/* ---- Pricing ----------------------------------------------------------------------------- */

static void price_done(void *ud, json_t *values, lp_error *err, const json_t *failure) {
  ng_op *o = ud;
  const char *function = o->name;
  const char *subject = json_string_value(json_object_get(json_array_get(o->args, 0), "name"));
  if (!subject) subject = "";
  if (err) {
    lp_error *e = lp_error_new(err->code, "%s of %s: %s", function, subject, err->message);
    lp_error_free(err);
    ng_finish(o, e, NULL);
    return;
  }
  const json_t *price = json_array_get(values, 0);
  if (!price || json_is_null(price)) {
    json_decref(values);
    ng_finish(o, lp_error_new("Unimplemented", "%s has no price for %s", function, subject), NULL);
    return;
  }
  char *problem = NULL;
  if (!json_is_number(price))
    problem = lp_xasprintf("%s: returned a %s, not a price (a number >= 0)", subject, kind_of(price));
  else if (!isfinite(json_number_value(price)) || json_number_value(price) < 0)
    problem = lp_xasprintf("%s: price %g is not a finite number >= 0", subject, json_number_value(price));
  double value = json_is_number(price) ? json_number_value(price) : 0;
  json_decref(values);
  if (problem) {
    lp_error *e = ng_contract_error(o->ng, function, problem, RULE);
    lp_errorlog(NG_LOGGER, "a price broke the NodeGroup contract", LPF_STR("error", e->message));
    ng_finish(o, e, NULL);
    return;
  }
  ng_finish(o, NULL, json_real(value));
}

static void price_run(ng_op *o) {
  if (unimplemented(o, o->name, "the autoscaler has no prices from luaprov")) return;
  json_t *args = json_pack("[O]", o->ng->ctx);
  json_array_extend(args, o->args);
  ng_call_mapping(o->ng, o->name, args, price_done, o);
}

static void price(lp_nodegroups *ng, const char *function, const json_t *subject, const char *start_time,
                  const char *end_time, lp_ng_node_fn done, void *ud) {
  ng_op *o = ng_op_new(ng, function, NULL, price_run);
  o->node_done = done;
  o->ud = ud;
  o->no_snapshot = 1;
  o->args = json_pack("[Os?s?]", subject ? subject : json_null(), start_time, end_time);
  ng_schedule(o);
}

void lp_ng_node_price(lp_nodegroups *ng, const json_t *node, const char *start_time, const char *end_time,
                      lp_ng_node_fn done, void *ud) {
  price(ng, "node_price", node, start_time, end_time, done, ud);
}

void lp_ng_pod_price(lp_nodegroups *ng, const json_t *pod, const char *start_time, const char *end_time,
                     lp_ng_node_fn done, void *ud) {
  price(ng, "pod_price", pod, start_time, end_time, done, ud);
}

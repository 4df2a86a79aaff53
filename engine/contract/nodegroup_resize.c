/* The NodeGroup size changes, deletions and template node: each checks the Cluster Autoscaler's
 * rules (NG2-NG4, docs/contracts.md) against the snapshot before the mapping touches the cloud. */
#include <stdlib.h>
#include <string.h>

#include "contract/nodegroup_internal.h"
#include "core/log.h"

/* A size change or deletion the mapping or Bizfly refused: a warning with what an operator takes to
 * Bizfly's support, the API call (method and path, else the action the error names, else the mapping
 * function) and the request ID Bizfly answered with. The engine's own rule checks (FailedPrecondition,
 * InvalidArgument) are the autoscaler's to log and never get here. node is NULL for a size change.
 * The message is the mapping's, which never carries a credential (providers/bizfly/wire.lua). */
static void warn_refused(const ng_op *o, const char *function, const lp_error *err, const json_t *failure,
                         const json_t *node) {
  const char *method = json_string_value(json_object_get(failure, "method"));
  const char *path = json_string_value(json_object_get(failure, "path"));
  const char *named = json_string_value(json_object_get(failure, "action"));
  const char *request_id = json_string_value(json_object_get(failure, "request_id"));
  const json_t *status = json_object_get(failure, "status");
  char *action = method && path ? lp_xasprintf("%s %s", method, path) : lp_xstrdup(named ? named : function);
  char *rpc = lp_xasprintf("NodeGroup%s", o->name);
  const lp_field none = {.type = LP_FIELD_NONE};
  lp_warn(NG_LOGGER, "node group resize failed", LPF_STR("node_group", o->id), LPF_STR("rpc", rpc),
          LPF_STR("action", action),
          json_is_number(status) ? LPF_INT("status", json_number_value(status)) : none,
          request_id ? LPF_STR("request_id", request_id) : none, LPF_STR("code", err->code),
          LPF_STR("error", err->message),
          node ? LPF_STR("node", json_string_value(json_object_get(node, "name")))
               : LPF_INT("target_size", o->target),
          node ? LPF_STR("provider_id", json_string_value(json_object_get(node, "provider_id"))) : none,
          node ? LPF_INT("deleted", o->next_node) : none);
  free(rpc);
  free(action);
}

/* ---- IncreaseSize, DecreaseTargetSize ---------------------------------------------------- */

static void resized(void *ud, json_t *values, lp_error *err, const json_t *failure) {
  ng_op *o = ud;
  json_decref(values);
  if (err) {
    warn_refused(o, "set_target_size", err, failure, NULL);
    lp_error *e = lp_error_new(err->code, "setting the target size of node group %s to %lld failed: %s",
                               o->id, o->target, err->message);
    lp_error_free(err);
    ng_finish(o, e, NULL);
    return;
  }
  lp_ng_group *g = ng_snapshot_find(o->ng->snapshot, o->id);
  int before = g ? g->target_size : -1;
  if (g) g->target_size = (int)o->target;
  lp_info(NG_LOGGER, "node group resized", LPF_STR("node_group", o->id), LPF_INT("from", before),
          LPF_INT("to", o->target), LPF_STR("operation", o->name));
  ng_finish(o, NULL, NULL);
}

static void set_target(ng_op *o) {
  lp_nodegroups *ng = o->ng;
  ng_call_mapping(ng, "set_target_size", json_pack("[OsI]", ng->ctx, o->id, (json_int_t)o->target), resized,
                  o);
}

static void increase_run(ng_op *o) {
  if (o->delta <= 0) {
    ng_finish(o, lp_error_new("InvalidArgument", "delta must be positive, have: %d", o->delta), NULL);
    return;
  }
  lp_ng_group *g = ng_group_or_fail(o);
  if (!g) return;
  o->target = (long long)g->target_size + o->delta;
  if (o->target > g->max_size) {
    ng_finish(o,
              lp_error_new("FailedPrecondition",
                           "size increase is too large. current: %d desired: %lld max: %d", g->target_size,
                           o->target, g->max_size),
              NULL);
    return;
  }
  set_target(o);
}

static void decrease_run(ng_op *o) {
  if (o->delta >= 0) {
    ng_finish(o, lp_error_new("InvalidArgument", "delta must be negative, have: %d", o->delta), NULL);
    return;
  }
  lp_ng_group *g = ng_group_or_fail(o);
  if (!g) return;
  o->target = (long long)g->target_size + o->delta;
  int existing = ng_group_live_instances(g);
  if (o->target < existing) {
    ng_finish(o,
              lp_error_new("FailedPrecondition",
                           "attempt to delete existing nodes targetSize:%d delta:%d existingNodes: %d",
                           g->target_size, o->delta, existing),
              NULL);
    return;
  }
  if (o->target < g->min_size) {
    ng_finish(o,
              lp_error_new("FailedPrecondition",
                           "size decrease is too small. current: %d desired: %lld min: %d", g->target_size,
                           o->target, g->min_size),
              NULL);
    return;
  }
  set_target(o);
}

static void mutation(lp_nodegroups *ng, const char *name, const char *id, int delta, op_fn run,
                     lp_ng_done_fn done, void *ud) {
  ng_op *o = ng_op_new(ng, name, id, run);
  o->delta = delta;
  o->done = done;
  o->ud = ud;
  ng_enqueue(o);
}

void lp_ng_increase_size(lp_nodegroups *ng, const char *id, int delta, lp_ng_done_fn done, void *ud) {
  mutation(ng, "IncreaseSize", id, delta, increase_run, done, ud);
}

void lp_ng_decrease_target_size(lp_nodegroups *ng, const char *id, int delta, lp_ng_done_fn done, void *ud) {
  mutation(ng, "DecreaseTargetSize", id, delta, decrease_run, done, ud);
}

/* ---- DeleteNodes ------------------------------------------------------------------------- */

static const char *node_field(const json_t *node, const char *field) {
  const char *v = json_string_value(json_object_get(node, field));
  return v ? v : "";
}

static void delete_next(ng_op *o);

static void node_deleted(void *ud, json_t *values, lp_error *err, const json_t *failure) {
  ng_op *o = ud;
  json_decref(values);
  const json_t *node = json_array_get(o->nodes, o->next_node);
  const char *pid = node_field(node, "provider_id");
  if (err) {
    warn_refused(o, "delete_node", err, failure, node);
    lp_error *e = lp_error_new(
        err->code, "deleting node %s (provider ID %s) of node group %s failed: %s (%zu of %zu nodes deleted)",
        node_field(node, "name"), pid, o->id, err->message, o->next_node, json_array_size(o->nodes));
    lp_error_free(err);
    ng_finish(o, e, NULL);
    return;
  }
  lp_ng_group *g = ng_snapshot_find(o->ng->snapshot, o->id);
  if (g && g->target_size > 0) g->target_size--;
  lp_ng_instance *inst = ng_group_instance(g, pid);
  if (inst) inst->state = LP_NG_DELETING;
  lp_info(NG_LOGGER, "node deleted", LPF_STR("node_group", o->id), LPF_STR("node", node_field(node, "name")),
          LPF_STR("provider_id", pid), LPF_INT("target_size", g ? g->target_size : -1));
  o->next_node++;
  delete_next(o);
}

static void delete_next(ng_op *o) {
  size_t total = json_array_size(o->nodes);
  if (o->next_node == total) {
    ng_finish(o, NULL, NULL);
    return;
  }
  if (o->ng->closing) {
    ng_finish(o,
              lp_error_new("Cancelled",
                           "deleting nodes of node group %s: the engine is shutting down (%zu of %zu "
                           "nodes deleted)",
                           o->id, o->next_node, total),
              NULL);
    return;
  }
  ng_call_mapping(o->ng, "delete_node",
                  json_pack("[OsO]", o->ng->ctx, o->id, json_array_get(o->nodes, o->next_node)), node_deleted,
                  o);
}

static void delete_run(ng_op *o) {
  lp_ng_group *g = ng_group_or_fail(o);
  if (!g) return;
  /* every node first: a request with a stranger in it deletes nothing */
  size_t i;
  const json_t *node;
  json_t *seen = json_object();
  json_t *unique = json_array();
  lp_error *e = NULL;
  json_array_foreach(o->nodes, i, node) {
    const char *pid = node_field(node, "provider_id"), *name = node_field(node, "name");
    if (!*pid) {
      e = lp_error_new("InvalidArgument",
                       "node %s has no providerID: luaprov matches nodes to node groups by providerID", name);
      break;
    }
    lp_ng_group *owner = ng_snapshot_owner(o->ng->snapshot, pid);
    if (owner != g) {
      e = owner ? lp_error_new("FailedPrecondition",
                               "node %s (provider ID %s) belongs to node group %s, not %s", name, pid,
                               owner->id, o->id)
                : lp_error_new("FailedPrecondition", "node %s (provider ID %s) is not in node group %s", name,
                               pid, o->id);
      break;
    }
    if (json_object_get(seen, pid)) continue;
    json_object_set_new(seen, pid, json_true());
    /* already being deleted (by an earlier request; the target already counts it): nothing to do */
    const lp_ng_instance *inst = ng_group_instance(g, pid);
    if (inst && inst->state == LP_NG_DELETING) continue;
    json_array_append(unique, (json_t *)node);
  }
  json_decref(seen);
  if (e) {
    json_decref(unique);
    ng_finish(o, e, NULL);
    return;
  }
  json_decref(o->nodes);
  o->nodes = unique;
  delete_next(o);
}

void lp_ng_delete_nodes(lp_nodegroups *ng, const char *id, const json_t *nodes, lp_ng_done_fn done,
                        void *ud) {
  ng_op *o = ng_op_new(ng, "DeleteNodes", id, delete_run);
  o->done = done;
  o->ud = ud;
  o->nodes = json_array();
  size_t i;
  const json_t *node;
  json_array_foreach(nodes, i, node) {
    json_t *labels = json_object_get(node, "labels");
    json_array_append_new(o->nodes,
                          json_pack("{s:s, s:s, s:o}", "provider_id", node_field(node, "provider_id"), "name",
                                    node_field(node, "name"), "labels",
                                    json_is_object(labels) ? json_incref(labels) : json_object()));
  }
  ng_enqueue(o);
}

/* ---- TemplateNodeInfo -------------------------------------------------------------------- */

static void template_done(void *ud, json_t *values, lp_error *err, const json_t *failure) {
  ng_op *o = ud;
  if (err && strcmp(err->code, "NotFound") == 0) {
    lp_error *e =
        lp_error_new("Unimplemented", "no template node for node group %s: %s", o->id, err->message);
    lp_error_free(err);
    ng_finish(o, e, NULL);
    return;
  }
  if (err) {
    ng_finish(o, err, NULL);
    return;
  }
  json_t *tmpl = json_array_get(values, 0);
  if (!tmpl || json_is_null(tmpl)) {
    json_decref(values);
    ng_finish(o, lp_error_new("Unimplemented", "no template node for node group %s", o->id), NULL);
    return;
  }
  char *problem = NULL;
  json_t *node = ng_template_build(o->id, tmpl, &problem);
  json_decref(values);
  if (!node) {
    ng_finish(o, ng_contract_error(o->ng, "template_node", problem, "docs/contracts.md#mappings"), NULL);
    return;
  }
  ng_finish(o, NULL, node);
}

static void template_run(ng_op *o) {
  if (!ng_group_or_fail(o)) return;
  if (!ng_mapping_has(o->ng, "template_node")) {
    ng_finish(o,
              lp_error_new("Unimplemented",
                           "the NodeGroup mapping %s has no template_node: the Cluster Autoscaler "
                           "builds templates from running nodes only",
                           o->ng->mapping),
              NULL);
    return;
  }
  ng_call_mapping(o->ng, "template_node", json_pack("[Os]", o->ng->ctx, o->id), template_done, o);
}

void lp_ng_template_node(lp_nodegroups *ng, const char *id, lp_ng_node_fn done, void *ud) {
  ng_op *o = ng_op_new(ng, "TemplateNodeInfo", id, template_run);
  o->node_done = done;
  o->ud = ud;
  ng_schedule(o);
}

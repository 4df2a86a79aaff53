/* The node class side of the CloudProvider contract: the status the mapping resolves from the class,
 * and the hash behind the descriptor's hash annotation. Both are checked here, as every mapping
 * answer is, so the status controller can write what it gets without re-checking. Only what is
 * neutral is checked: a status object with a conditions list; what else the mapping resolves (its
 * cloud's lists) and whether the class is Ready (its Ready condition) are the mapping's to say. */
#include <stdlib.h>
#include <string.h>

#include "contract/cloudprovider_internal.h"

/* An empty Lua table arrives as {}: a list that is empty. */
static void normalize_empty_list(json_t *status, const char *field) {
  json_t *v = json_object_get(status, field);
  if (json_is_object(v) && json_object_size(v) == 0) json_object_set_new(status, field, json_array());
}

static char *check_condition(const json_t *c, size_t i) {
  const char *type = json_string_value(json_object_get(c, "type"));
  const char *status = json_string_value(json_object_get(c, "status"));
  if (!json_is_object(c) || !type || !*type) return lp_xasprintf("conditions[%zu] has no type", i + 1);
  if (!status ||
      (strcmp(status, "True") != 0 && strcmp(status, "False") != 0 && strcmp(status, "Unknown") != 0))
    return lp_xasprintf("conditions[%zu] (%s): status must be \"True\", \"False\" or \"Unknown\"", i + 1,
                        type);
  const json_t *reason = json_object_get(c, "reason"), *message = json_object_get(c, "message");
  if ((reason && !json_is_string(reason) && !json_is_null(reason)) ||
      (message && !json_is_string(message) && !json_is_null(message)))
    return lp_xasprintf("conditions[%zu] (%s): reason and message must be strings", i + 1, type);
  return NULL;
}

/* NULL when status is the shape the controller writes, else what is wrong (malloc'd). */
static char *check_status(json_t *status) {
  if (!json_is_object(status)) return lp_xstrdup("did not return a status table");
  normalize_empty_list(status, "conditions");
  if (!json_is_array(json_object_get(status, "conditions")))
    return lp_xstrdup("status.conditions is not a list");
  size_t i;
  const json_t *c;
  json_array_foreach(json_object_get(status, "conditions"), i, c) {
    char *problem = check_condition(c, i);
    if (problem) return problem;
  }
  return NULL;
}

static void resolve_done(op *o, json_t *values, lp_error *err) {
  if (err) {
    cp_finish(o, NULL, err);
    return;
  }
  json_t *status = json_incref(json_array_get(values, 0));
  json_decref(values);
  char *problem = check_status(status);
  if (problem) {
    json_decref(status);
    cp_finish(
        o, NULL,
        cp_contract_error(o, o->cp->mapping, "resolve_nodeclass", problem, "docs/contracts.md#mappings"));
    return;
  }
  cp_finish(o, status, NULL);
}

void lp_cp_resolve_nodeclass(lp_cloudprovider *cp, const json_t *nodeclass, lp_cp_done_fn done, void *ud) {
  op *o = cp_op_new(cp, done, ud);
  cp_call(o, cp->mapping, "resolve_nodeclass", cp_ctx_args1(cp, json_deep_copy(nodeclass)), resolve_done);
}

static void hash_done(op *o, json_t *values, lp_error *err) {
  if (err) {
    cp_finish(o, NULL, err);
    return;
  }
  const char *hash = json_string_value(json_array_get(values, 0));
  const char *version = json_string_value(json_array_get(values, 1));
  if (!hash || !*hash || !version || !*version) {
    json_decref(values);
    cp_finish(o, NULL,
              cp_contract_error(o, o->cp->mapping, "nodeclass_hash",
                                lp_xstrdup("did not return two non-empty strings (hash, version)"),
                                "docs/contracts.md#mappings"));
    return;
  }
  json_t *out = json_pack("{s:s, s:s}", "hash", hash, "version", version);
  json_decref(values);
  cp_finish(o, out, NULL);
}

void lp_cp_nodeclass_hash(lp_cloudprovider *cp, const json_t *nodeclass, lp_cp_done_fn done, void *ud) {
  op *o = cp_op_new(cp, done, ud);
  cp_call(o, cp->mapping, "nodeclass_hash", json_pack("[o]", json_deep_copy(nodeclass)), hash_done);
}

/* The conjunction of two requirement lists (requirements.h), as the provisioner narrows a NodePool's
 * requirements by each pod it places on a new NodeClaim. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "contract/requirements.h"
#include "core/buf.h"
#include "core/error.h"

static const char *op_of(const json_t *req) {
  const char *op = json_string_value(json_object_get(req, "operator"));
  return op ? op : "In";
}

static int is_op(const json_t *req, const char *op) {
  return strcmp(op_of(req), op) == 0;
}

static long long first_integer(const json_t *req) {
  const char *s = json_string_value(json_array_get(json_object_get(req, "values"), 0));
  char *end;
  long long v = s ? strtoll(s, &end, 10) : 0;
  return s && *s && !*end ? v : 0;
}

/* The requirements of a and b on key, in order. */
static json_t *on_key(const json_t *a, const json_t *b, const char *key) {
  json_t *out = json_array();
  const json_t *lists[2] = {a, b};
  for (int l = 0; l < 2; l++) {
    size_t i;
    const json_t *req;
    json_array_foreach(lists[l], i, req) {
      const char *k = json_string_value(json_object_get(req, "key"));
      if (k && strcmp(k, key) == 0) json_array_append(out, (json_t *)req);
    }
  }
  return out;
}

static json_t *requirement(const char *key, const char *op, json_t *values) {
  return json_pack("{s:s, s:s, s:o}", "key", key, "operator", op, "values", values);
}

static json_t *integer_values(long long v) {
  char text[32];
  snprintf(text, sizeof text, "%lld", v);
  return json_pack("[s]", text);
}

/* Appends the one requirement (or, with numeric bounds, several) the group of requirements on key
 * amounts to. Returns 0, or -1 when no value satisfies them all. */
static int merge_group(json_t *out, const char *key, const json_t *group) {
  size_t i;
  const json_t *req;
  const json_t *finite = NULL;
  int absent = 0, positive = 0, has_min = 0, has_max = 0;
  long long min = LLONG_MIN, max = LLONG_MAX;
  json_t *excluded = json_array();
  json_array_foreach(group, i, req) {
    if (is_op(req, "In") && !finite) finite = req;
    if (is_op(req, "DoesNotExist")) absent = 1;
    if (is_op(req, "NotIn")) json_array_extend(excluded, json_object_get(req, "values"));
    positive |= is_op(req, "Exists") || is_op(req, "In");
    long long v = first_integer(req);
    if (is_op(req, "Gt") || is_op(req, "Gte")) {
      positive = has_min = 1;
      v += is_op(req, "Gt");
      if (v > min) min = v;
    } else if (is_op(req, "Lt") || is_op(req, "Lte")) {
      positive = has_max = 1;
      v -= is_op(req, "Lt");
      if (v < max) max = v;
    }
  }
  int ok = 1;
  if (finite) {
    json_t *values = json_array();
    json_array_foreach(json_object_get(finite, "values"), i, req) {
      const char *v = json_string_value(req);
      int allowed = v != NULL;
      for (size_t k = 0; allowed && k < json_array_size(group); k++)
        allowed = lp_requirement_allows(json_array_get(group, k), v);
      if (allowed) json_array_append(values, (json_t *)req);
    }
    ok = json_array_size(values) > 0;
    json_array_append_new(out, requirement(key, "In", values));
  } else if (absent) {
    ok = !positive;
    json_array_append_new(out, requirement(key, "DoesNotExist", json_array()));
  } else if (has_min || has_max) {
    ok = min <= max;
    if (has_min) json_array_append_new(out, requirement(key, "Gt", integer_values(min - 1)));
    if (has_max) json_array_append_new(out, requirement(key, "Lt", integer_values(max + 1)));
    if (json_array_size(excluded) > 0)
      json_array_append_new(out, requirement(key, "NotIn", json_incref(excluded)));
  } else if (json_array_size(excluded) > 0) {
    json_array_append_new(out, requirement(key, "NotIn", json_incref(excluded)));
  } else {
    json_array_append_new(out, requirement(key, "Exists", json_array()));
  }
  json_decref(excluded);
  return ok ? 0 : -1;
}

static void describe_group(lp_buf *text, const char *key, const json_t *group) {
  lp_buf_printf(text, "%s: no value satisfies", key);
  size_t i;
  const json_t *req;
  json_array_foreach(group, i, req) {
    lp_buf_printf(text, "%s %s", i ? " and" : "", op_of(req));
    const json_t *values = json_object_get(req, "values");
    if (json_array_size(values) == 0) continue;
    lp_buf_puts(text, " [");
    size_t k;
    const json_t *v;
    json_array_foreach(values, k, v) lp_buf_printf(text, "%s%s", k ? " " : "", json_string_value(v) ?: "?");
    lp_buf_putc(text, ']');
  }
}

json_t *lp_requirements_intersect(const json_t *a, const json_t *b, char **why) {
  json_t *out = json_array(), *done = json_object();
  const json_t *lists[2] = {a, b};
  for (int l = 0; l < 2; l++) {
    size_t i;
    const json_t *req;
    json_array_foreach(lists[l], i, req) {
      const char *key = json_string_value(json_object_get(req, "key"));
      if (!key || json_object_get(done, key)) continue;
      json_object_set_new(done, key, json_true());
      json_t *group = on_key(a, b, key);
      int failed = merge_group(out, key, group);
      if (failed && why) {
        lp_buf text = LP_BUF_INIT;
        describe_group(&text, key, group);
        *why = lp_buf_take(&text, NULL);
      }
      json_decref(group);
      if (failed) {
        json_decref(out);
        json_decref(done);
        return NULL;
      }
    }
  }
  json_decref(done);
  return out;
}

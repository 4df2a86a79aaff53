#include "controller/conditions.h"

#include <stdio.h>
#include <string.h>

#include "controller/controller.h"
#include "core/clock.h"

static json_t *conditions_of(const json_t *obj) {
  return json_object_get(json_object_get(obj, "status"), "conditions");
}

json_t *lp_condition_get(const json_t *obj, const char *type) {
  size_t i;
  json_t *c;
  json_array_foreach(conditions_of(obj), i, c) {
    const char *t = json_string_value(json_object_get(c, "type"));
    if (t && strcmp(t, type) == 0) return c;
  }
  return NULL;
}

int lp_condition_is(const json_t *obj, const char *type, const char *status) {
  const char *s = json_string_value(json_object_get(lp_condition_get(obj, type), "status"));
  return s && strcmp(s, status) == 0;
}

double lp_condition_since(const json_t *obj, const char *type) {
  const char *t = json_string_value(json_object_get(lp_condition_get(obj, type), "lastTransitionTime"));
  return t ? lp_rfc3339_parse(t) : -1;
}

/* Sets key to a string value; returns 1 when it differed. */
static int set_string(json_t *obj, const char *key, const char *value) {
  const char *old = json_string_value(json_object_get(obj, key));
  if (old && strcmp(old, value) == 0) return 0;
  json_object_set_new(obj, key, json_string(value));
  return 1;
}

int lp_condition_set(json_t *obj, const char *type, const char *status, const char *reason,
                     const char *message, double now) {
  json_t *st = json_object_get(obj, "status");
  if (!json_is_object(st)) {
    st = json_object();
    json_object_set_new(obj, "status", st);
  }
  json_t *list = json_object_get(st, "conditions");
  if (!json_is_array(list)) {
    list = json_array();
    json_object_set_new(st, "conditions", list);
  }
  json_t *c = lp_condition_get(obj, type);
  int changed = 0;
  if (!c) {
    c = json_pack("{s:s}", "type", type);
    json_array_append_new(list, c);
    changed = 1;
  }
  if (!reason) reason = strcmp(status, "True") == 0 ? type : "Unknown";
  if (set_string(c, "status", status) || !json_object_get(c, "lastTransitionTime")) {
    char ts[LP_RFC3339_SIZE];
    lp_clock_rfc3339(now, 0, ts);
    json_object_set_new(c, "lastTransitionTime", json_string(ts));
    changed = 1;
  }
  changed |= set_string(c, "reason", reason);
  changed |= set_string(c, "message", message ? message : "");
  json_t *generation = json_object_get(json_object_get(obj, "metadata"), "generation");
  if (json_is_integer(generation) && !json_equal(generation, json_object_get(c, "observedGeneration"))) {
    json_object_set(c, "observedGeneration", generation);
    changed = 1;
  }
  return changed;
}

int lp_condition_clear(json_t *obj, const char *type) {
  json_t *list = conditions_of(obj);
  size_t i;
  json_t *c;
  json_array_foreach(list, i, c) {
    const char *t = json_string_value(json_object_get(c, "type"));
    if (t && strcmp(t, type) == 0) {
      json_array_remove(list, i);
      return 1;
    }
  }
  return 0;
}

int lp_condition_rollup_ready(json_t *obj, const char *const *types, double now) {
  const json_t *failed = NULL, *unknown = NULL;
  const char *missing = NULL; /* the first dependent condition not set at all */
  for (size_t i = 0; types[i]; i++) {
    const json_t *c = lp_condition_get(obj, types[i]);
    const char *s = json_string_value(json_object_get(c, "status"));
    if (!c) {
      if (!missing) missing = types[i];
    } else if (s && strcmp(s, "False") == 0) {
      if (!failed) failed = c;
    } else if (!s || strcmp(s, "True") != 0) {
      if (!unknown) unknown = c;
    }
  }
  if (failed || unknown) {
    const json_t *cause = failed ? failed : unknown;
    return lp_condition_set(obj, "Ready", failed ? "False" : "Unknown",
                            json_string_value(json_object_get(cause, "reason")),
                            json_string_value(json_object_get(cause, "message")), now);
  }
  if (missing) {
    char message[160];
    snprintf(message, sizeof message, "%s condition not set yet", missing);
    return lp_condition_set(obj, "Ready", "Unknown", "AwaitingReconciliation", message, now);
  }
  return lp_condition_set(obj, "Ready", "True", "Ready", NULL, now);
}

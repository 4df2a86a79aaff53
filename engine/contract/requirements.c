#include "contract/requirements.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/error.h"

/* A requirement as a set of values: a finite set (In), the complement of one (NotIn, Exists), or the
 * absence of the label (DoesNotExist); numeric bounds narrow the complement forms (Gt, Lt, ...). */
typedef struct value_set {
  enum { SET_FINITE, SET_COMPLEMENT, SET_ABSENT } kind;
  const json_t *values; /* the listed values: members (FINITE) or exclusions (COMPLEMENT) */
  int has_min, has_max;
  long long min, max; /* inclusive bounds */
} value_set;

int lp_requirement_integer(const char *s, long long *out) {
  if (!s || !*s) return -1;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (*end) return -1;
  *out = v;
  return 0;
}

static long long bound_value(const json_t *values) {
  long long v = 0;
  lp_requirement_integer(json_string_value(json_array_get(values, 0)), &v);
  return v;
}

static value_set to_set(const json_t *req) {
  const char *op = json_string_value(json_object_get(req, "operator"));
  const json_t *values = json_object_get(req, "values");
  value_set s = {SET_COMPLEMENT, NULL, 0, 0, 0, 0};
  if (!op || strcmp(op, "In") == 0) {
    s.kind = SET_FINITE;
    s.values = values;
  } else if (strcmp(op, "NotIn") == 0) {
    s.values = values;
  } else if (strcmp(op, "DoesNotExist") == 0) {
    s.kind = SET_ABSENT;
  } else if (strcmp(op, "Gt") == 0 || strcmp(op, "Gte") == 0) {
    s.has_min = 1;
    s.min = bound_value(values) + (strcmp(op, "Gt") == 0);
  } else if (strcmp(op, "Lt") == 0 || strcmp(op, "Lte") == 0) {
    s.has_max = 1;
    s.max = bound_value(values) - (strcmp(op, "Lt") == 0);
  } /* Exists: the full complement */
  return s;
}

static int listed(const json_t *values, const char *v) {
  size_t i;
  const json_t *item;
  json_array_foreach(values, i, item) {
    if (json_is_string(item) && strcmp(json_string_value(item), v) == 0) return 1;
  }
  return 0;
}

static int set_contains(const value_set *s, const char *v) {
  switch (s->kind) {
  case SET_ABSENT:
    return 0;
  case SET_FINITE:
    if (!listed(s->values, v)) return 0;
    break;
  case SET_COMPLEMENT:
    if (s->values && listed(s->values, v)) return 0;
    break;
  }
  if (s->has_min || s->has_max) {
    long long n;
    if (lp_requirement_integer(v, &n) != 0) return 0;
    if (s->has_min && n < s->min) return 0;
    if (s->has_max && n > s->max) return 0;
  }
  return 1;
}

static int sets_intersect(const value_set *a, const value_set *b) {
  int a_negative =
      a->kind == SET_ABSENT || (a->kind == SET_COMPLEMENT && !a->has_min && !a->has_max && a->values);
  int b_negative =
      b->kind == SET_ABSENT || (b->kind == SET_COMPLEMENT && !b->has_min && !b->has_max && b->values);
  if (a_negative && b_negative) return 1;
  if (a->kind == SET_ABSENT || b->kind == SET_ABSENT) {
    /* absent meets Exists/In/bounds: the label would have to both exist and not exist */
    return 0;
  }
  if (a->kind == SET_FINITE || b->kind == SET_FINITE) {
    const value_set *finite = a->kind == SET_FINITE ? a : b;
    const value_set *other = finite == a ? b : a;
    size_t i;
    const json_t *item;
    json_array_foreach(finite->values, i, item) {
      if (json_is_string(item) && set_contains(finite, json_string_value(item)) &&
          set_contains(other, json_string_value(item)))
        return 1;
    }
    return 0;
  }
  /* two complements: infinitely many strings, unless numeric bounds leave no integer */
  long long lo = a->has_min ? a->min : LLONG_MIN, hi = a->has_max ? a->max : LLONG_MAX;
  if (b->has_min && b->min > lo) lo = b->min;
  if (b->has_max && b->max < hi) hi = b->max;
  return lo <= hi;
}

static void describe(lp_buf *out, const json_t *req) {
  lp_buf_printf(out, "%s", json_string_value(json_object_get(req, "operator")) ?: "In");
  const json_t *values = json_object_get(req, "values");
  if (json_array_size(values) == 0) return;
  lp_buf_puts(out, " [");
  size_t i;
  const json_t *item;
  json_array_foreach(values, i, item)
      lp_buf_printf(out, "%s%s", i ? " " : "", json_string_value(item) ?: "?");
  lp_buf_putc(out, ']');
}

int lp_requirements_compatible(const json_t *a, const json_t *b, char **why) {
  size_t i, j;
  const json_t *ra, *rb;
  json_array_foreach(a, i, ra) {
    const char *key = json_string_value(json_object_get(ra, "key"));
    if (!key) continue;
    value_set sa = to_set(ra);
    json_array_foreach(b, j, rb) {
      const char *other = json_string_value(json_object_get(rb, "key"));
      if (!other || strcmp(key, other) != 0) continue;
      value_set sb = to_set(rb);
      if (sets_intersect(&sa, &sb)) continue;
      if (why) {
        lp_buf text = LP_BUF_INIT;
        lp_buf_printf(&text, "%s: ", key);
        describe(&text, ra);
        lp_buf_puts(&text, " has nothing in common with ");
        describe(&text, rb);
        *why = lp_buf_take(&text, NULL);
      }
      return 0;
    }
  }
  return 1;
}

int lp_requirement_allows(const json_t *requirement, const char *value) {
  value_set s = to_set(requirement);
  if (!value)
    return s.kind == SET_ABSENT || (s.kind == SET_COMPLEMENT && s.values && !s.has_min && !s.has_max);
  return set_contains(&s, value);
}

int lp_quantity_parse(const char *text, double *out) {
  static const struct {
    const char *suffix;
    double factor;
  } suffixes[] = {
      {"Ki", 1024.0},
      {"Mi", 1048576.0},
      {"Gi", 1073741824.0},
      {"Ti", 1099511627776.0},
      {"Pi", 1125899906842624.0},
      {"Ei", 1152921504606846976.0},
      {"n", 1e-9},
      {"u", 1e-6},
      {"m", 1e-3},
      {"k", 1e3},
      {"M", 1e6},
      {"G", 1e9},
      {"T", 1e12},
      {"P", 1e15},
      {"E", 1e18},
  };
  if (!text || !*text) return -1;
  char *end;
  double v = strtod(text, &end);
  if (end == text || !isfinite(v)) return -1;
  if (*end == '\0') {
    *out = v;
    return 0;
  }
  for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
    if (strcmp(end, suffixes[i].suffix) == 0) {
      *out = v * suffixes[i].factor;
      return 0;
    }
  }
  return -1;
}

void lp_quantity_format(double v, int binary, char *out, size_t cap) {
  static const struct {
    const char *suffix;
    double factor;
  } units[] = {{"Gi", 1073741824.0}, {"Mi", 1048576.0}, {"Ki", 1024.0}};
  if (v != floor(v)) {
    snprintf(out, cap, "%.0fm", ceil(v * 1000 - 1e-6));
    return;
  }
  for (size_t i = 0; binary && i < sizeof units / sizeof units[0]; i++) {
    if (v >= units[i].factor && fmod(v, units[i].factor) == 0) {
      snprintf(out, cap, "%.0f%s", v / units[i].factor, units[i].suffix);
      return;
    }
  }
  snprintf(out, cap, "%.0f", v);
}

static double quantity_of(const json_t *map, const char *resource) {
  const json_t *v = json_object_get(map, resource);
  double q = 0;
  if (json_is_string(v))
    lp_quantity_parse(json_string_value(v), &q);
  else if (json_is_number(v))
    q = json_number_value(v);
  return q;
}

int lp_resources_fit(const json_t *requests, const json_t *capacity, const json_t *overhead, char **why) {
  static const char *const parts[] = {"kube_reserved", "system_reserved", "eviction_threshold"};
  const char *resource;
  const json_t *value;
  json_object_foreach((json_t *)requests, resource, value) {
    double want = quantity_of(requests, resource);
    if (want <= 0) continue;
    double have = json_object_get(capacity, resource) ? quantity_of(capacity, resource) : 0;
    for (size_t i = 0; i < 3; i++) have -= quantity_of(json_object_get(overhead, parts[i]), resource);
    if (want > have + 1e-9) {
      if (why) *why = lp_xasprintf("%s: requested %g, allocatable %g", resource, want, have > 0 ? have : 0);
      return 0;
    }
  }
  return 1;
}

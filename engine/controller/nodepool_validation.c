/* Label rules and the run-time validation of a NodePool (nodepool.h), as Karpenter's NodePool
 * RuntimeValidate and its label sets define them. The CRD's schema (examples/deploy/crds) rejects most
 * of this at admission; a cluster running an older or another CRD, or an API server that does not
 * evaluate its rules, still gets the NodePool's ValidationSucceeded condition right. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/nodepool.h"
#include "core/buf.h"
#include "core/error.h"

#define LABEL_HOSTNAME      "kubernetes.io/hostname"
#define LABEL_CAPACITY_TYPE "karpenter.sh/capacity-type"
#define RESTRICTED_DOMAIN   "karpenter.sh"

const char *lp_label_normalized(const char *key) {
  static const char *const map[][2] = {
      {"failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone"},
      {"failure-domain.beta.kubernetes.io/region", "topology.kubernetes.io/region"},
      {"beta.kubernetes.io/arch", "kubernetes.io/arch"},
      {"beta.kubernetes.io/os", "kubernetes.io/os"},
      {"beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type"},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(key, map[i][0]) == 0) return map[i][1];
  return key;
}

int lp_label_well_known(const char *key) {
  static const char *const labels[] = {LP_LABEL_NODEPOOL,
                                       "topology.kubernetes.io/zone",
                                       "topology.kubernetes.io/region",
                                       "node.kubernetes.io/instance-type",
                                       "kubernetes.io/arch",
                                       "kubernetes.io/os",
                                       LABEL_CAPACITY_TYPE,
                                       "node.kubernetes.io/windows-build",
                                       NULL};
  for (size_t i = 0; labels[i]; i++)
    if (strcmp(key, labels[i]) == 0) return 1;
  return 0;
}

int lp_label_restricted(const char *key) {
  if (lp_label_well_known(key)) return 0;
  if (strcmp(key, LABEL_HOSTNAME) == 0) return 1;
  const char *slash = strchr(key, '/');
  if (!slash) return 0;
  size_t n = (size_t)(slash - key), k = strlen(RESTRICTED_DOMAIN);
  /* the domain itself, or one ending in ".karpenter.sh" */
  return n >= k && strncmp(slash - k, RESTRICTED_DOMAIN, k) == 0 && (n == k || slash[-(long)k - 1] == '.');
}

/* ---- the syntax of names and values (Kubernetes' validation of qualified names) ------------- */

static int alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* A label value or the name part of a qualified name: at most 63 characters, alphanumerics with '-',
 * '_' and '.' inside; empty only when allowed. */
static int valid_name(const char *s, size_t n, int empty_ok) {
  if (n == 0) return empty_ok;
  if (n > 63 || !alnum(s[0]) || !alnum(s[n - 1])) return 0;
  for (size_t i = 0; i < n; i++)
    if (!alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.') return 0;
  return 1;
}

/* A DNS-1123 subdomain: at most 253 characters, dot-separated labels of lower-case alphanumerics and
 * '-', each starting and ending alphanumeric. */
static int valid_subdomain(const char *s, size_t n) {
  if (n == 0 || n > 253) return 0;
  size_t start = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i < n && s[i] != '.') {
      int lower = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9');
      if (!lower && s[i] != '-') return 0;
      continue;
    }
    if (i == start || s[start] == '-' || s[i - 1] == '-') return 0;
    start = i + 1;
  }
  return 1;
}

/* "prefix/name" or "name", the form of label and taint keys. */
static int valid_qualified(const char *key) {
  const char *slash = strchr(key, '/');
  if (!slash) return valid_name(key, strlen(key), 0);
  if (strchr(slash + 1, '/')) return 0;
  return valid_subdomain(key, (size_t)(slash - key)) && valid_name(slash + 1, strlen(slash + 1), 0);
}

/* ---- the checks ------------------------------------------------------------------------------ */

typedef struct problems {
  lp_buf text;
  int n;
} problems;

static void add(problems *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(problems *ps, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (ps->n++) lp_buf_puts(&ps->text, "; ");
  lp_buf_puts(&ps->text, line);
}

static const json_t *template_part(const json_t *nodepool, const char *part) {
  return json_object_get(json_object_get(json_object_get(nodepool, "spec"), "template"), part);
}

static void check_labels(problems *ps, const json_t *labels) {
  const char *key;
  const json_t *value;
  json_object_foreach((json_t *)labels, key, value) {
    const char *v = json_string_value(value);
    if (strcmp(key, LP_LABEL_NODEPOOL) == 0 || lp_label_restricted(key))
      add(ps, "label %s is restricted: Karpenter sets it itself", key);
    else if (!valid_qualified(key))
      add(ps, "label key %s is not a qualified name", key);
    if (!v || !valid_name(v, strlen(v), 1)) add(ps, "label %s has an invalid value", key);
  }
}

static int str_eq(const char *a, const char *b) {
  return strcmp(a ? a : "", b ? b : "") == 0;
}

/* seen: the taints and startup taints checked so far (a key and effect may appear once in both). */
static void check_taints(problems *ps, const json_t *taints, const char *field, json_t *seen) {
  size_t i;
  const json_t *taint;
  json_array_foreach(taints, i, taint) {
    const char *key = json_string_value(json_object_get(taint, "key"));
    const char *value = json_string_value(json_object_get(taint, "value"));
    const char *effect = json_string_value(json_object_get(taint, "effect"));
    if (!key || !valid_qualified(key))
      add(ps, "%s: taint key %s is not a qualified name", field, key ? key : "\"\"");
    if (value && *value && !valid_qualified(value))
      add(ps, "%s: the value %s of taint %s is not a qualified name", field, value, key ? key : "");
    if (!str_eq(effect, "") && !str_eq(effect, "NoSchedule") && !str_eq(effect, "PreferNoSchedule") &&
        !str_eq(effect, "NoExecute"))
      add(ps, "%s: taint %s has the unknown effect %s", field, key ? key : "", effect);
    char *pair = lp_xasprintf("%s:%s", key ? key : "", effect ? effect : "");
    if (json_object_get(seen, pair)) add(ps, "%s: taint %s appears twice", field, pair);
    json_object_set_new(seen, pair, json_true());
    free(pair);
  }
}

static int is_operator(const char *op, const char *const *ops) {
  for (size_t i = 0; ops[i]; i++)
    if (str_eq(op, ops[i])) return 1;
  return 0;
}

/* capacity-type In: at least one value (and minValues of them) must be a capacity type Karpenter
 * knows, or no offering can ever match. */
static void check_known_values(problems *ps, const char *key, const json_t *values, json_int_t min_values) {
  static const char *const capacity_types[] = {"on-demand", "spot", "reserved", NULL};
  json_int_t known = 0;
  size_t i;
  const json_t *v;
  json_array_foreach(values, i, v) known += is_operator(json_string_value(v), capacity_types);
  if (known == 0)
    add(ps, "requirement %s: no value is one of on-demand, spot, reserved", key);
  else if (min_values > known)
    add(ps, "requirement %s: minValues %lld but only %lld known value(s)", key, (long long)min_values,
        (long long)known);
}

static int non_negative_integer(const char *s) {
  if (!s || !*s) return 0;
  for (const char *c = s; *c; c++)
    if (*c < '0' || *c > '9') return 0;
  return 1;
}

static void check_requirement(problems *ps, const json_t *req) {
  static const char *const ops[] = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte", NULL};
  static const char *const numeric[] = {"Gt", "Lt", "Gte", "Lte", NULL};
  const char *raw = json_string_value(json_object_get(req, "key"));
  const char *key = lp_label_normalized(raw ? raw : "");
  const char *op = json_string_value(json_object_get(req, "operator"));
  const json_t *values = json_object_get(req, "values");
  const json_t *min = json_object_get(req, "minValues");
  size_t nvalues = json_array_size(values);
  if (!is_operator(op, ops)) add(ps, "requirement %s: unsupported operator %s", key, op ? op : "\"\"");
  if (strcmp(key, LP_LABEL_NODEPOOL) == 0 || lp_label_restricted(key))
    add(ps, "requirement key %s is restricted: Karpenter sets it itself", key);
  else if (!valid_qualified(key))
    add(ps, "requirement key %s is not a qualified name", key);
  size_t i;
  const json_t *v;
  json_array_foreach(values, i, v) {
    const char *s = json_string_value(v);
    if (!s || !valid_name(s, strlen(s), 1))
      add(ps, "requirement %s: invalid value %s", key, s ? s : "(not a string)");
  }
  if (str_eq(op, "In")) {
    if (nvalues == 0) add(ps, "requirement %s: operator In needs a value", key);
    if (json_is_integer(min) && (json_int_t)nvalues < json_integer_value(min))
      add(ps, "requirement %s: minValues %lld but %zu value(s)", key, (long long)json_integer_value(min),
          nvalues);
    if (strcmp(key, LABEL_CAPACITY_TYPE) == 0) check_known_values(ps, key, values, json_integer_value(min));
  }
  if (is_operator(op, numeric) &&
      (nvalues != 1 || !non_negative_integer(json_string_value(json_array_get(values, 0)))))
    add(ps, "requirement %s: operator %s needs a single non-negative integer", key, op);
}

char *lp_nodepool_validate(const json_t *nodepool) {
  problems ps = {LP_BUF_INIT, 0};
  check_labels(&ps, json_object_get(template_part(nodepool, "metadata"), "labels"));
  const json_t *spec = template_part(nodepool, "spec");
  json_t *seen = json_object();
  check_taints(&ps, json_object_get(spec, "taints"), "taints", seen);
  check_taints(&ps, json_object_get(spec, "startupTaints"), "startupTaints", seen);
  json_decref(seen);
  size_t i;
  const json_t *req;
  json_array_foreach(json_object_get(spec, "requirements"), i, req) check_requirement(&ps, req);
  if (ps.n == 0) {
    lp_buf_free(&ps.text);
    return NULL;
  }
  return lp_buf_take(&ps.text, NULL);
}

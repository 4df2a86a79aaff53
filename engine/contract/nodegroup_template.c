/* The template Node of a node group (scale from zero): what the mapping's template_node(ctx, id)
 * says a new node of the group looks like, checked and completed into a v1.Node the Cluster
 * Autoscaler can simulate scheduling on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "contract/nodegroup_internal.h"
#include "contract/requirements.h"
#include "core/clock.h"

static int is_empty_table(const json_t *v) {
  return json_is_object(v) && json_object_size(v) == 0;
}

static char *check_labels(const json_t *labels) {
  if (!labels || json_is_null(labels)) return NULL;
  if (!json_is_object(labels)) return lp_xstrdup("labels is not a map of strings");
  const char *key;
  const json_t *value;
  json_object_foreach((json_t *)labels, key, value) {
    if (!*key) return lp_xstrdup("labels has an empty key");
    if (!json_is_string(value)) return lp_xasprintf("label %s is not a string", key);
  }
  return NULL;
}

static char *check_taints(const json_t *taints) {
  static const char *const effects[] = {"NoSchedule", "PreferNoSchedule", "NoExecute", NULL};
  if (!taints || json_is_null(taints) || is_empty_table(taints)) return NULL;
  if (!json_is_array(taints)) return lp_xstrdup("taints is not a list of {key, value, effect}");
  size_t i;
  const json_t *t;
  json_array_foreach(taints, i, t) {
    const char *key = json_string_value(json_object_get(t, "key"));
    const char *effect = json_string_value(json_object_get(t, "effect"));
    const json_t *value = json_object_get(t, "value");
    if (!key || !*key) return lp_xasprintf("taints[%zu] has no key", i + 1);
    if (value && !json_is_null(value) && !json_is_string(value))
      return lp_xasprintf("taint %s: value is not a string", key);
    int known = 0;
    for (const char *const *e = effects; effect && *e; e++) known |= strcmp(effect, *e) == 0;
    if (!known)
      return lp_xasprintf("taint %s: effect '%s' is not NoSchedule, PreferNoSchedule or NoExecute", key,
                          effect ? effect : "(none)");
  }
  return NULL;
}

/* A resource list: names to Kubernetes quantities, numbers accepted and written as quantities. On
 * success *out is a new {name: "quantity"} object. */
static char *resource_list(const json_t *list, const char *field, int required, json_t **out) {
  *out = json_object();
  if (!list || json_is_null(list) || is_empty_table(list))
    return required
               ? lp_xasprintf("%s is missing: a template node needs at least cpu, memory and pods", field)
               : NULL;
  if (!json_is_object(list)) return lp_xasprintf("%s is not a map of resource name to quantity", field);
  const char *name;
  const json_t *q;
  json_object_foreach((json_t *)list, name, q) {
    char text[64];
    double parsed;
    if (json_is_integer(q))
      snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(q));
    else if (json_is_real(q))
      snprintf(text, sizeof text, "%.15g", json_real_value(q));
    else if (json_is_string(q) && json_string_length(q) < sizeof text)
      snprintf(text, sizeof text, "%s", json_string_value(q));
    else
      return lp_xasprintf("%s.%s is not a quantity", field, name);
    if (lp_quantity_parse(text, &parsed) != 0 || parsed < 0)
      return lp_xasprintf("%s.%s: '%s' is not a Kubernetes quantity", field, name, text);
    json_object_set_new(*out, name, json_string(text));
  }
  return NULL;
}

static void rfc3339_now(char *out, size_t cap) {
  time_t t = (time_t)lp_clock_wall();
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

json_t *ng_template_build(const char *id, const json_t *tmpl, char **problem) {
  if (!json_is_object(tmpl)) {
    *problem = lp_xstrdup("did not return a table {labels, taints, capacity, allocatable}");
    return NULL;
  }
  json_t *capacity = NULL, *allocatable = NULL;
  if ((*problem = check_labels(json_object_get(tmpl, "labels"))) ||
      (*problem = check_taints(json_object_get(tmpl, "taints"))) ||
      (*problem = resource_list(json_object_get(tmpl, "capacity"), "capacity", 1, &capacity)) ||
      (*problem = resource_list(json_object_get(tmpl, "allocatable"), "allocatable", 0, &allocatable))) {
    json_decref(capacity);
    json_decref(allocatable);
    return NULL;
  }
  if (json_object_size(allocatable) == 0) json_object_update(allocatable, capacity);

  char *name = lp_xasprintf("template-%s", id);
  json_t *labels = json_pack("{s:s, s:s}", "kubernetes.io/os", "linux", "kubernetes.io/arch", "amd64");
  if (json_is_object(json_object_get(tmpl, "labels")))
    json_object_update(labels, json_object_get(tmpl, "labels"));
  json_object_set_new(labels, "kubernetes.io/hostname", json_string(name));

  json_t *taints = json_array();
  size_t i;
  const json_t *t;
  json_array_foreach(json_object_get(tmpl, "taints"), i, t) {
    const char *value = json_string_value(json_object_get(t, "value"));
    json_array_append_new(taints, json_pack("{s:O, s:s, s:O}", "key", json_object_get(t, "key"), "value",
                                            value ? value : "", "effect", json_object_get(t, "effect")));
  }
  char now[32];
  rfc3339_now(now, sizeof now);
  json_t *node =
      json_pack("{s:s, s:s, s:{s:s, s:o}, s:{s:o}, s:{s:o, s:o, s:s, s:[{s:s, s:s, s:s, s:s, s:s, s:s}], "
                "s:{s:O, s:O}}}",
                "apiVersion", "v1", "kind", "Node", "metadata", "name", name, "labels", labels, "spec",
                "taints", taints, "status", "capacity", capacity, "allocatable", allocatable, "phase",
                "Running", "conditions", "type", "Ready", "status", "True", "reason", "KubeletReady",
                "message", "kubelet is posting ready status", "lastHeartbeatTime", now, "lastTransitionTime",
                now, "nodeInfo", "operatingSystem", json_object_get(labels, "kubernetes.io/os"),
                "architecture", json_object_get(labels, "kubernetes.io/arch"));
  free(name);
  return node;
}

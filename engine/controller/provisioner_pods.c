/* What a pending pod asks of a node (provisioner_internal.h): whether it is provisionable at all, its
 * resource requests as the scheduler counts them, its node requirements and its tolerations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/requirements.h"
#include "controller/conditions.h"
#include "controller/nodepool.h"
#include "controller/provisioner_internal.h"
#include "core/error.h"

static int owned_by(const json_t *pod, const char *kind) {
  size_t i;
  const json_t *ref;
  json_array_foreach(json_object_get(json_object_get(pod, "metadata"), "ownerReferences"), i, ref) {
    const char *k = json_string_value(json_object_get(ref, "kind"));
    if (k && strcmp(k, kind) == 0) return 1;
  }
  return 0;
}

static int non_empty(const char *s) {
  return s && *s;
}

int pv_pod_provisionable(const json_t *pod) {
  if (!pod || lp_obj_deleting(pod) || non_empty(lp_obj_str(pod, "spec.nodeName")) ||
      non_empty(lp_obj_str(pod, "status.nominatedNodeName")))
    return 0;
  const char *phase = lp_obj_str(pod, "status.phase");
  if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)) return 0;
  if (owned_by(pod, "DaemonSet") || owned_by(pod, "Node")) return 0;
  const json_t *cond = lp_condition_get(pod, "PodScheduled");
  const char *reason = json_string_value(json_object_get(cond, "reason"));
  return lp_condition_is(pod, "PodScheduled", "False") && reason && strcmp(reason, "Unschedulable") == 0;
}

int pv_pod_reschedulable(const json_t *pod) {
  const char *phase = lp_obj_str(pod, "status.phase");
  if (!pod || lp_obj_deleting(pod) ||
      (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)))
    return 0;
  return !owned_by(pod, "DaemonSet") && !owned_by(pod, "Node") &&
         !lp_obj_annotation(pod, "kubernetes.io/config.mirror");
}

char *pv_pod_key(const json_t *pod) {
  const char *ns = lp_obj_str(pod, "metadata.namespace");
  return lp_xasprintf("%s/%s", ns ? ns : "default", lp_obj_name(pod) ?: "");
}

/* A container's requests, its limits standing in for the requests it lacks (as the API server
 * defaults them). */
static void container_requests(pv_dims *d, const json_t *container, pv_res *out) {
  const json_t *resources = json_object_get(container, "resources");
  const json_t *requests = json_object_get(resources, "requests");
  pv_res_add_list(d, out, requests, 1);
  const char *name;
  const json_t *value;
  json_object_foreach(json_object_get(resources, "limits"), name, value) {
    if (json_object_get(requests, name)) continue;
    json_t *one = json_pack("{s:O}", name, value);
    pv_res_add_list(d, out, one, 1);
    json_decref(one);
  }
}

void pv_pod_requests(pv_dims *d, const json_t *spec, pv_res *out) {
  memset(out, 0, sizeof *out);
  size_t i;
  const json_t *container;
  json_array_foreach(json_object_get(spec, "containers"), i, container) container_requests(d, container, out);
  pv_res init_max = {{0}};
  json_array_foreach(json_object_get(spec, "initContainers"), i, container) {
    pv_res one = {{0}};
    container_requests(d, container, &one);
    for (size_t k = 0; k < PV_RES_MAX; k++)
      if (one.v[k] > init_max.v[k]) init_max.v[k] = one.v[k];
  }
  for (size_t k = 0; k < PV_RES_MAX; k++)
    if (init_max.v[k] > out->v[k]) out->v[k] = init_max.v[k];
  pv_res_add_list(d, out, json_object_get(spec, "overhead"), 1);
  out->v[PV_PODS] += 1;
}

/* A node selector term's matchExpressions as requirements appended to out, label keys normalized. */
static void append_term(json_t *out, const json_t *term) {
  size_t i;
  const json_t *expr;
  json_array_foreach(json_object_get(term, "matchExpressions"), i, expr) {
    const char *k = json_string_value(json_object_get(expr, "key"));
    const json_t *values = json_object_get(expr, "values");
    if (!k) continue;
    json_array_append_new(out,
                          json_pack("{s:s, s:O, s:o}", "key", lp_label_normalized(k), "operator",
                                    json_object_get(expr, "operator"), "values",
                                    json_is_array(values) ? json_incref((json_t *)values) : json_array()));
  }
}

static json_t *selector_requirements(const json_t *spec) {
  json_t *out = json_array();
  const char *key;
  const json_t *value;
  json_object_foreach(json_object_get(spec, "nodeSelector"), key, value) {
    if (json_is_string(value))
      json_array_append_new(out, json_pack("{s:s, s:s, s:[O]}", "key", lp_label_normalized(key), "operator",
                                           "In", "values", value));
  }
  return out;
}

static const json_t *node_affinity(const json_t *spec) {
  return json_object_get(json_object_get(spec, "affinity"), "nodeAffinity");
}

static const json_t *required_terms(const json_t *spec) {
  return json_object_get(
      json_object_get(node_affinity(spec), "requiredDuringSchedulingIgnoredDuringExecution"),
      "nodeSelectorTerms");
}

static json_t *none_if_empty(json_t *list) {
  if (json_array_size(list) > 0) return list;
  json_decref(list);
  return NULL;
}

json_t *pv_pod_requirements(const json_t *spec) {
  json_t *out = selector_requirements(spec);
  append_term(out, json_array_get(required_terms(spec), 0));
  return none_if_empty(out);
}

json_t *pv_pod_requirement_terms(const json_t *spec) {
  const json_t *terms = required_terms(spec);
  json_t *out = json_array();
  size_t i;
  const json_t *term;
  json_array_foreach(terms, i, term) {
    json_t *one = selector_requirements(spec);
    append_term(one, term);
    json_array_append_new(out, one);
  }
  if (json_array_size(out) == 0) {
    json_t *one = none_if_empty(selector_requirements(spec));
    if (one) json_array_append_new(out, one);
  }
  return none_if_empty(out);
}

json_t *pv_pod_preferences(const json_t *spec) {
  json_t *sorted = pv_heaviest_first(
      json_object_get(node_affinity(spec), "preferredDuringSchedulingIgnoredDuringExecution"), "preference");
  json_t *out = json_array();
  size_t i;
  const json_t *term;
  json_array_foreach(sorted, i, term) {
    json_t *one = json_array();
    append_term(one, term);
    if (json_array_size(one) > 0) json_array_append(out, one);
    json_decref(one);
  }
  json_decref(sorted);
  return none_if_empty(out);
}

static int str_is(const json_t *obj, const char *field, const char *want) {
  const char *v = json_string_value(json_object_get(obj, field));
  return strcmp(v ? v : "", want ? want : "") == 0;
}

static int toleration_matches(const json_t *tol, const json_t *taint) {
  const char *effect = json_string_value(json_object_get(tol, "effect"));
  if (effect && *effect && !str_is(taint, "effect", effect)) return 0;
  const char *key = json_string_value(json_object_get(tol, "key"));
  const char *op = json_string_value(json_object_get(tol, "operator"));
  if (op && strcmp(op, "Exists") == 0) return !key || !*key || str_is(taint, "key", key);
  return str_is(taint, "key", key) &&
         str_is(taint, "value", json_string_value(json_object_get(tol, "value")));
}

int pv_tolerates(const json_t *tolerations, const json_t *taints, const json_t **untolerated) {
  size_t i, k;
  const json_t *taint, *tol;
  json_array_foreach(taints, i, taint) {
    if (!str_is(taint, "effect", "NoSchedule") && !str_is(taint, "effect", "NoExecute")) continue;
    int ok = 0;
    json_array_foreach(tolerations, k, tol) {
      if ((ok = toleration_matches(tol, taint))) break;
    }
    if (!ok) {
      if (untolerated) *untolerated = taint;
      return 0;
    }
  }
  return 1;
}

static int defines(const json_t *reqs, const char *key) {
  size_t i;
  const json_t *req;
  json_array_foreach(reqs, i, req) {
    if (strcmp(json_string_value(json_object_get(req, "key")) ?: "", key) == 0) return 1;
  }
  return 0;
}

const char *pv_undefined_key(const json_t *reqs, const json_t *defined, const json_t *known,
                             int allow_well_known) {
  size_t i;
  const json_t *req;
  json_array_foreach(reqs, i, req) {
    const char *key = json_string_value(json_object_get(req, "key"));
    const char *op = json_string_value(json_object_get(req, "operator"));
    if (!key || (op && (strcmp(op, "NotIn") == 0 || strcmp(op, "DoesNotExist") == 0))) continue;
    if (defines(defined, key) || json_object_get(known, key) ||
        (allow_well_known && lp_label_well_known(key)))
      continue;
    return key;
  }
  return NULL;
}

int pv_labels_satisfy(const json_t *labels, const json_t *reqs) {
  size_t i;
  const json_t *req;
  json_array_foreach(reqs, i, req) {
    const char *key = json_string_value(json_object_get(req, "key"));
    if (key && !lp_requirement_allows(req, json_string_value(json_object_get(labels, key)))) return 0;
  }
  return 1;
}

char *pv_taint_text(const json_t *taint) {
  const char *key = json_string_value(json_object_get(taint, "key"));
  const char *value = json_string_value(json_object_get(taint, "value"));
  const char *effect = json_string_value(json_object_get(taint, "effect"));
  return lp_xasprintf("%s%s%s:%s", key ? key : "", value && *value ? "=" : "", value && *value ? value : "",
                      effect ? effect : "");
}

void pv_ports_of(const json_t *spec, pv_ports *out) {
  size_t i, k;
  const json_t *container, *port;
  json_array_foreach(json_object_get(spec, "containers"), i, container) {
    json_array_foreach(json_object_get(container, "ports"), k, port) {
      json_int_t host = json_integer_value(json_object_get(port, "hostPort"));
      if (host <= 0) continue;
      pv_port one = {.port = (int)host};
      snprintf(one.protocol, sizeof one.protocol, "%s",
               json_string_value(json_object_get(port, "protocol")) ?: "TCP");
      const char *ip = json_string_value(json_object_get(port, "hostIP"));
      if (ip && strcmp(ip, "0.0.0.0") != 0 && strcmp(ip, "::") != 0)
        snprintf(one.ip, sizeof one.ip, "%s", ip);
      pv_ports sole = {&one, 1, 1};
      pv_ports_add(out, &sole);
    }
  }
}

void pv_ports_add(pv_ports *to, const pv_ports *from) {
  if (to->n + from->n > to->cap) {
    to->cap = to->n + from->n + 4;
    to->v = lp_xrealloc(to->v, to->cap * sizeof *to->v);
  }
  if (from->n) memcpy(to->v + to->n, from->v, from->n * sizeof *from->v);
  to->n += from->n;
}

const pv_port *pv_ports_clash(const pv_ports *used, const pv_ports *want) {
  for (size_t i = 0; i < want->n; i++) {
    const pv_port *w = &want->v[i];
    for (size_t k = 0; k < used->n; k++) {
      const pv_port *u = &used->v[k];
      if (u->port == w->port && strcmp(u->protocol, w->protocol) == 0 &&
          (!*u->ip || !*w->ip || strcmp(u->ip, w->ip) == 0))
        return w;
    }
  }
  return NULL;
}

void pv_ports_free(pv_ports *ports) {
  free(ports->v);
  memset(ports, 0, sizeof *ports);
}

void pv_pod_init(pv_pass *p, pv_pod *pod, const char *key, json_t *obj) {
  memset(pod, 0, sizeof *pod);
  pod->key = lp_xstrdup(key);
  pod->obj = json_incref(obj);
  const json_t *spec = json_object_get(obj, "spec");
  pv_pod_requests(&p->dims, spec, &pod->requests);
  pod->terms = pv_pod_requirement_terms(spec);
  pod->prefs = pv_pod_preferences(spec);
  pod->reqs = json_incref(json_array_get(pod->terms, 0));
  pod->tolerations = json_object_get(spec, "tolerations");
  pv_ports_of(spec, &pod->ports);
  pv_topology_pod(p, pod);
  pod->created = lp_rfc3339_parse(lp_obj_str(obj, "metadata.creationTimestamp"));
}

void pv_pod_require(pv_pod *pod, const json_t *reqs) {
  if (!pod->terms) {
    pod->terms = json_pack("[O]", reqs);
    json_decref(pod->reqs);
    pod->reqs = json_incref(json_array_get(pod->terms, 0));
    return;
  }
  size_t i;
  json_t *term;
  json_array_foreach(pod->terms, i, term) json_array_extend(term, (json_t *)reqs);
}

void pv_pod_free(pv_pod *pod) {
  free(pod->key);
  json_decref(pod->obj);
  json_decref(pod->reqs);
  json_decref(pod->terms);
  json_decref(pod->prefs);
  pv_ports_free(&pod->ports);
  free(pod->topo);
  free(pod->why);
}

static size_t term_count(const pv_pod *pod) {
  size_t n = json_array_size(pod->terms);
  return n ? n : 1;
}

size_t pv_pod_attempts(const pv_pod *pod) {
  return term_count(pod) * (json_array_size(pod->prefs) + pod->nsoft + 1);
}

int pv_pod_attempt(pv_pod *pod, size_t attempt) {
  if (!pod->terms && !pod->prefs && !pod->nsoft) return 1; /* reqs as they are (none, or set by hand) */
  size_t level = attempt / term_count(pod), prefs = json_array_size(pod->prefs);
  size_t kept = level < prefs ? prefs - level : 0, dropped = level > prefs ? level - prefs : 0;
  pod->soft_kept = dropped < pod->nsoft ? pod->nsoft - dropped : 0;
  json_t *reqs = json_incref(json_array_get(pod->terms, attempt % term_count(pod)));
  int ok = 1;
  for (size_t i = 0; i < kept && ok; i++) { /* heaviest first: the lightest is the first one dropped */
    json_t *both = lp_requirements_intersect(reqs, json_array_get(pod->prefs, i), NULL);
    ok = both != NULL;
    json_decref(reqs);
    reqs = both;
  }
  json_decref(pod->reqs);
  pod->reqs = reqs;
  return ok;
}

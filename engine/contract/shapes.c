#include "contract/shapes.h"

#include <string.h>

#include "contract/requirements.h"
#include "core/buf.h"
#include "core/error.h"

static int one_of(const char *s, const char *const *allowed) {
  for (; s && *allowed; allowed++)
    if (strcmp(s, *allowed) == 0) return 1;
  return 0;
}

static int nonempty_string(const json_t *v) {
  return json_is_string(v) && json_string_length(v) > 0;
}

char *lp_check_instance(const json_t *instance) {
  static const char *const states[] = {"pending", "running", "stopping", "stopped", "terminated", NULL};
  static const char *const capacity_types[] = {"on-demand", "spot", NULL};
  static const char *const required[] = {"id", "zone", "instance_type", "image_id", NULL};
  if (!json_is_object(instance)) return lp_xstrdup("the instance is not an object");
  for (const char *const *f = required; *f; f++)
    if (!nonempty_string(json_object_get(instance, *f)))
      return lp_xasprintf("the instance has no string '%s'", *f);
  const char *state = json_string_value(json_object_get(instance, "state"));
  if (!one_of(state, states))
    return lp_xasprintf("instance %s: state '%s' is not pending, running, stopping, stopped or terminated",
                        json_string_value(json_object_get(instance, "id")), state ? state : "(none)");
  const char *ct = json_string_value(json_object_get(instance, "capacity_type"));
  if (!one_of(ct, capacity_types))
    return lp_xasprintf("instance %s: capacity_type '%s' is not on-demand or spot",
                        json_string_value(json_object_get(instance, "id")), ct ? ct : "(none)");
  const json_t *tags = json_object_get(instance, "tags");
  if (tags && !json_is_object(tags) && !(json_is_array(tags) && json_array_size(tags) == 0))
    return lp_xstrdup("tags is not a map");
  return NULL;
}

static char *check_requirements(const json_t *reqs, const char *where) {
  static const char *const ops[] = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte", NULL};
  if (!json_is_array(reqs)) return lp_xasprintf("%s: requirements is not a list", where);
  size_t i;
  const json_t *r;
  json_array_foreach(reqs, i, r) {
    if (!nonempty_string(json_object_get(r, "key")))
      return lp_xasprintf("%s: requirement %zu has no key", where, i + 1);
    if (!one_of(json_string_value(json_object_get(r, "operator")), ops))
      return lp_xasprintf("%s: requirement %s has an unknown operator", where,
                          json_string_value(json_object_get(r, "key")));
    const json_t *values = json_object_get(r, "values");
    if (values && !json_is_array(values))
      return lp_xasprintf("%s: requirement %s: values is not a list", where,
                          json_string_value(json_object_get(r, "key")));
    size_t k;
    const json_t *v;
    json_array_foreach(values, k, v) {
      if (!json_is_string(v))
        return lp_xasprintf("%s: requirement %s: value %zu is not a string", where,
                            json_string_value(json_object_get(r, "key")), k + 1);
    }
  }
  return NULL;
}

const char *lp_requirement_single_value(const json_t *requirements, const char *key) {
  size_t i;
  const json_t *r;
  json_array_foreach(requirements, i, r) {
    const char *k = json_string_value(json_object_get(r, "key"));
    const char *op = json_string_value(json_object_get(r, "operator"));
    const json_t *values = json_object_get(r, "values");
    if (k && strcmp(k, key) == 0 && op && strcmp(op, "In") == 0 && json_array_size(values) == 1)
      return json_string_value(json_array_get(values, 0));
  }
  return NULL;
}

/* The values of an In requirement on key, or NULL. */
static const json_t *in_values(const json_t *requirements, const char *key) {
  size_t i;
  const json_t *r;
  json_array_foreach(requirements, i, r) {
    const char *k = json_string_value(json_object_get(r, "key"));
    const char *op = json_string_value(json_object_get(r, "operator"));
    if (k && strcmp(k, key) == 0 && op && strcmp(op, "In") == 0) return json_object_get(r, "values");
  }
  return NULL;
}

static int has_offering(const json_t *offerings, const char *zone, const char *capacity_type) {
  size_t i;
  const json_t *o;
  json_array_foreach(offerings, i, o) {
    const char *z = json_string_value(json_object_get(o, "zone"));
    const char *c = json_string_value(json_object_get(o, "capacity_type"));
    if (z && c && strcmp(z, zone) == 0 && strcmp(c, capacity_type) == 0) return 1;
  }
  return 0;
}

static int value_listed(const json_t *values, const char *v) {
  size_t i;
  const json_t *item;
  json_array_foreach(values, i, item) {
    if (json_is_string(item) && strcmp(json_string_value(item), v) == 0) return 1;
  }
  return 0;
}

char *lp_check_instance_type(const json_t *type) {
  static const char *const capacity_types[] = {"on-demand", "spot", NULL};
  const char *name = json_string_value(json_object_get(type, "name"));
  if (!name || !*name) return lp_xstrdup("an instance type has no name");
  const json_t *reqs = json_object_get(type, "requirements");
  char *problem = check_requirements(reqs, name);
  if (problem) return problem;
  const json_t *offerings = json_object_get(type, "offerings");
  if (!json_is_array(offerings)) return lp_xasprintf("%s: offerings is not a list", name);
  if (!json_is_object(json_object_get(type, "capacity")))
    return lp_xasprintf("%s: capacity is not a map", name);
  const json_t *zones = in_values(reqs, LP_LABEL_ZONE);
  const json_t *cts = in_values(reqs, LP_LABEL_CAPACITY_TYPE);
  size_t i;
  const json_t *o;
  json_array_foreach(offerings, i, o) {
    const char *zone = json_string_value(json_object_get(o, "zone"));
    const char *ct = json_string_value(json_object_get(o, "capacity_type"));
    if (!zone || !*zone) return lp_xasprintf("%s: offering %zu has no zone", name, i + 1);
    if (!one_of(ct, capacity_types))
      return lp_xasprintf("%s: offering %zu: capacity_type '%s' is not on-demand or spot", name, i + 1,
                          ct ? ct : "(none)");
    if (!json_is_boolean(json_object_get(o, "available")))
      return lp_xasprintf("%s: offering %s/%s: available is not a boolean", name, zone, ct);
    const json_t *price = json_object_get(o, "price");
    if (price && !json_is_null(price) && !json_is_number(price))
      return lp_xasprintf("%s: offering %s/%s: price is not a number", name, zone, ct);
    /* rule CP4: requirements are built from all offerings, available or not */
    if (!zones || !value_listed(zones, zone))
      return lp_xasprintf("%s: requirement %s does not include %s, the zone of an offering", name,
                          LP_LABEL_ZONE, zone);
    if (!cts || !value_listed(cts, ct))
      return lp_xasprintf("%s: requirement %s does not include %s, the capacity type of an offering", name,
                          LP_LABEL_CAPACITY_TYPE, ct);
  }
  /* rule CP4: an offering for every known (zone, capacity type), with available=false when out of stock */
  size_t zi, ci;
  const json_t *z, *c;
  json_array_foreach(zones, zi, z) {
    json_array_foreach(cts, ci, c) {
      if (!has_offering(offerings, json_string_value(z), json_string_value(c)))
        return lp_xasprintf("%s: no offering for %s/%s although its requirements name both", name,
                            json_string_value(z), json_string_value(c));
    }
  }
  return NULL;
}

char *lp_check_tags(const json_t *tags) {
  if (json_is_array(tags) && json_array_size(tags) == 0) return NULL; /* an empty table */
  if (!json_is_object(tags)) return lp_xstrdup("the tags are not a map of strings");
  const char *key;
  const json_t *value;
  json_object_foreach((json_t *)tags, key, value) {
    if (!*key) return lp_xstrdup("a tag has an empty key");
    if (!json_is_string(value)) return lp_xasprintf("tag %s: the value is not a string", key);
  }
  return NULL;
}

static json_t *object_at(json_t *parent, const char *key) {
  json_t *o = json_object_get(parent, key);
  if (!json_is_object(o)) {
    o = json_object();
    json_object_set_new(parent, key, o);
  }
  return o;
}

/* capacity minus every overhead part, written back as numbers in base units */
static json_t *allocatable_of(const json_t *capacity, const json_t *overhead) {
  static const char *const parts[] = {"kube_reserved", "system_reserved", "eviction_threshold"};
  json_t *out = json_object();
  const char *resource;
  const json_t *value;
  json_object_foreach((json_t *)capacity, resource, value) {
    double have = 0, minus = 0;
    if (json_is_string(value))
      lp_quantity_parse(json_string_value(value), &have);
    else if (json_is_number(value))
      have = json_number_value(value);
    for (size_t i = 0; i < 3; i++) {
      const json_t *o = json_object_get(json_object_get(overhead, parts[i]), resource);
      double q = 0;
      if (json_is_string(o) && lp_quantity_parse(json_string_value(o), &q) == 0) minus += q;
    }
    double left = have - minus;
    if (left < 0) left = 0;
    lp_buf text = LP_BUF_INIT;
    if (strcmp(resource, "cpu") == 0)
      lp_buf_printf(&text, "%.0fm", left * 1000.0);
    else
      lp_buf_printf(&text, "%.0f", left);
    json_object_set_new(out, resource, json_string(lp_buf_cstr(&text)));
    lp_buf_free(&text);
  }
  return out;
}

json_t *lp_nodeclaim_for_instance(const json_t *template_claim, const json_t *instance, const json_t *type,
                                  const char *provider_id) {
  json_t *claim = template_claim ? json_deep_copy(template_claim) : json_object();
  if (!template_claim) {
    json_object_set_new(claim, "apiVersion", json_string("karpenter.sh/v1"));
    json_object_set_new(claim, "kind", json_string("NodeClaim"));
  }
  json_t *metadata = object_at(claim, "metadata");
  json_t *labels = object_at(metadata, "labels");
  const json_t *reqs = json_object_get(type, "requirements");
  size_t i;
  const json_t *r;
  json_array_foreach(reqs, i, r) { /* single-valued requirements of the type become labels */
    const char *key = json_string_value(json_object_get(r, "key"));
    const char *v = key ? lp_requirement_single_value(reqs, key) : NULL;
    if (v && strcmp(key, LP_LABEL_ZONE) != 0 && strcmp(key, LP_LABEL_CAPACITY_TYPE) != 0)
      json_object_set_new(labels, key, json_string(v));
  }
  json_object_set_new(labels, LP_LABEL_ZONE,
                      json_string(json_string_value(json_object_get(instance, "zone"))));
  json_object_set_new(labels, LP_LABEL_INSTANCE_TYPE,
                      json_string(json_string_value(json_object_get(instance, "instance_type"))));
  json_object_set_new(labels, LP_LABEL_CAPACITY_TYPE,
                      json_string(json_string_value(json_object_get(instance, "capacity_type"))));
  if (!json_object_get(labels, LP_LABEL_OS)) json_object_set_new(labels, LP_LABEL_OS, json_string("linux"));
  /* tags written at launch name the NodePool and NodeClaim: recover them for listed instances */
  const json_t *tags = json_object_get(instance, "tags");
  const json_t *pool = json_object_get(tags, "karpenter.sh/nodepool");
  if (nonempty_string(pool) && !json_object_get(labels, "karpenter.sh/nodepool"))
    json_object_set(labels, "karpenter.sh/nodepool", (json_t *)pool);
  const json_t *name = json_object_get(tags, "karpenter.sh/nodeclaim");
  if (nonempty_string(name) && !json_object_get(metadata, "name"))
    json_object_set(metadata, "name", (json_t *)name);
  /* a listed instance is as old as its launch (garbage collection's grace period counts from it) */
  const json_t *launched = json_object_get(instance, "launch_time");
  if (nonempty_string(launched) && !json_object_get(metadata, "creationTimestamp"))
    json_object_set(metadata, "creationTimestamp", (json_t *)launched);

  json_t *status = object_at(claim, "status");
  json_object_set_new(status, "providerID", json_string(provider_id));
  json_object_set_new(status, "imageID",
                      json_string(json_string_value(json_object_get(instance, "image_id"))));
  const json_t *capacity = json_object_get(type, "capacity");
  if (json_is_object(capacity)) {
    json_object_set_new(status, "capacity", json_deep_copy(capacity));
    json_object_set_new(status, "allocatable", allocatable_of(capacity, json_object_get(type, "overhead")));
  }
  return claim;
}

char *lp_check_nodeclaim_labels(const json_t *nodeclaim) {
  static const char *const required[] = {
      LP_LABEL_ZONE, LP_LABEL_INSTANCE_TYPE, LP_LABEL_CAPACITY_TYPE, LP_LABEL_ARCH, LP_LABEL_OS, NULL};
  const json_t *labels = json_object_get(json_object_get(nodeclaim, "metadata"), "labels");
  lp_buf missing = LP_BUF_INIT;
  for (const char *const *l = required; *l; l++)
    if (!nonempty_string(json_object_get(labels, *l)))
      lp_buf_printf(&missing, "%s%s", missing.len ? ", " : "", *l);
  return missing.len ? lp_buf_take(&missing, NULL) : (lp_buf_free(&missing), NULL);
}

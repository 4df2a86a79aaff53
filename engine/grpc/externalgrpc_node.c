/* A Kubernetes v1.Node, as the NodeGroup contract builds it in JSON, encoded as the protobuf message
 * of k8s.io/api/core/v1 (k8s_core.proto): the bytes Go's Node.Marshal() would produce for the same
 * fields, which the Cluster Autoscaler's client decodes with Node.Unmarshal. */
#define _GNU_SOURCE /* timegm */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grpc/externalgrpc.h"
#include "contract/requirements.h"
#include "k8s_core.pb-c.h"

typedef K8s__Io__Api__Core__V1__Node pb_node;
typedef K8s__Io__Api__Core__V1__NodeSpec pb_spec;
typedef K8s__Io__Api__Core__V1__NodeStatus pb_status;
typedef K8s__Io__Api__Core__V1__Taint pb_taint;
typedef K8s__Io__Api__Core__V1__NodeCondition pb_condition;
typedef K8s__Io__Api__Core__V1__NodeAddress pb_address;
typedef K8s__Io__Api__Core__V1__NodeSystemInfo pb_info;
typedef K8s__Io__Api__Core__V1__NodeStatus__CapacityEntry
    pb_quantity_entry; /* same layout as allocatable's */
typedef K8s__Io__Apimachinery__Pkg__Apis__Meta__V1__ObjectMeta pb_meta;
typedef K8s__Io__Apimachinery__Pkg__Apis__Meta__V1__ObjectMeta__LabelsEntry pb_string_entry;
typedef K8s__Io__Apimachinery__Pkg__Apis__Meta__V1__Time pb_time;
typedef K8s__Io__Apimachinery__Pkg__Api__Resource__Quantity pb_quantity;

/* Every allocation of one encoding, freed together. */
typedef struct arena {
  void **items;
  size_t n, cap;
} arena;

static void *alloc(arena *a, size_t size) {
  if (a->n == a->cap) {
    a->cap = a->cap ? 2 * a->cap : 32;
    a->items = lp_xrealloc(a->items, a->cap * sizeof *a->items);
  }
  return a->items[a->n++] = lp_xcalloc(1, size ? size : 1);
}

static void arena_free(arena *a) {
  for (size_t i = 0; i < a->n; i++) free(a->items[i]);
  free(a->items);
}

/* JSON strings are borrowed: packing only reads them. */
static char *str(const json_t *object, const char *key) {
  return (char *)json_string_value(json_object_get(object, key));
}

static pb_string_entry **string_map(arena *a, const json_t *map, size_t *n) {
  *n = 0;
  if (!json_is_object(map) || json_object_size(map) == 0) return NULL;
  pb_string_entry **out = alloc(a, json_object_size(map) * sizeof *out);
  const char *key;
  json_t *value;
  json_object_foreach((json_t *)map, key, value) {
    if (!json_is_string(value)) continue;
    pb_string_entry *e = alloc(a, sizeof *e);
    k8s__io__apimachinery__pkg__apis__meta__v1__object_meta__labels_entry__init(e);
    e->key = (char *)key;
    e->value = (char *)json_string_value(value);
    out[(*n)++] = e;
  }
  return out;
}

/* capacity and allocatable: name -> Quantity{string}. The two entry types share one layout. */
static void quantity_map(arena *a, const json_t *map, const ProtobufCMessageDescriptor *entry_descriptor,
                         size_t *n, pb_quantity_entry ***out) {
  *n = 0;
  *out = NULL;
  if (!json_is_object(map) || json_object_size(map) == 0) return;
  *out = alloc(a, json_object_size(map) * sizeof **out);
  const char *key;
  json_t *value;
  json_object_foreach((json_t *)map, key, value) {
    if (!json_is_string(value)) continue;
    pb_quantity_entry *e = alloc(a, sizeof *e);
    k8s__io__api__core__v1__node_status__capacity_entry__init(e);
    e->base.descriptor = entry_descriptor;
    e->key = (char *)key;
    pb_quantity *q = alloc(a, sizeof *q);
    k8s__io__apimachinery__pkg__api__resource__quantity__init(q);
    q->string = (char *)json_string_value(value);
    e->value = q;
    (*out)[(*n)++] = e;
  }
}

/* RFC 3339 "2026-01-02T03:04:05Z" -> meta.v1.Time; NULL when absent or unreadable. */
static pb_time *time_of(arena *a, const char *text) {
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  if (!text || !strptime(text, "%Y-%m-%dT%H:%M:%S", &tm)) return NULL;
  pb_time *t = alloc(a, sizeof *t);
  k8s__io__apimachinery__pkg__apis__meta__v1__time__init(t);
  t->has_seconds = 1;
  t->seconds = (int64_t)timegm(&tm);
  return t;
}

static pb_spec *spec_of(arena *a, const json_t *spec) {
  pb_spec *s = alloc(a, sizeof *s);
  k8s__io__api__core__v1__node_spec__init(s);
  s->providerid = str(spec, "providerID");
  s->podcidr = str(spec, "podCIDR");
  if (json_is_boolean(json_object_get(spec, "unschedulable"))) {
    s->has_unschedulable = 1;
    s->unschedulable = json_is_true(json_object_get(spec, "unschedulable"));
  }
  const json_t *taints = json_object_get(spec, "taints");
  if (json_array_size(taints) > 0) {
    s->taints = alloc(a, json_array_size(taints) * sizeof *s->taints);
    size_t i;
    const json_t *t;
    json_array_foreach(taints, i, t) {
      pb_taint *pt = alloc(a, sizeof *pt);
      k8s__io__api__core__v1__taint__init(pt);
      pt->key = str(t, "key");
      pt->value = str(t, "value");
      pt->effect = str(t, "effect");
      s->taints[s->n_taints++] = pt;
    }
  }
  return s;
}

static pb_status *status_of(arena *a, const json_t *status) {
  pb_status *s = alloc(a, sizeof *s);
  k8s__io__api__core__v1__node_status__init(s);
  quantity_map(a, json_object_get(status, "capacity"),
               &k8s__io__api__core__v1__node_status__capacity_entry__descriptor, &s->n_capacity,
               &s->capacity);
  quantity_map(a, json_object_get(status, "allocatable"),
               &k8s__io__api__core__v1__node_status__allocatable_entry__descriptor, &s->n_allocatable,
               (pb_quantity_entry ***)&s->allocatable);
  s->phase = str(status, "phase");
  const json_t *conditions = json_object_get(status, "conditions");
  if (json_array_size(conditions) > 0) {
    s->conditions = alloc(a, json_array_size(conditions) * sizeof *s->conditions);
    size_t i;
    const json_t *c;
    json_array_foreach(conditions, i, c) {
      pb_condition *pc = alloc(a, sizeof *pc);
      k8s__io__api__core__v1__node_condition__init(pc);
      pc->type = str(c, "type");
      pc->status = str(c, "status");
      pc->reason = str(c, "reason");
      pc->message = str(c, "message");
      pc->lastheartbeattime = time_of(a, str(c, "lastHeartbeatTime"));
      pc->lasttransitiontime = time_of(a, str(c, "lastTransitionTime"));
      s->conditions[s->n_conditions++] = pc;
    }
  }
  const json_t *addresses = json_object_get(status, "addresses");
  if (json_array_size(addresses) > 0) {
    s->addresses = alloc(a, json_array_size(addresses) * sizeof *s->addresses);
    size_t i;
    const json_t *ad;
    json_array_foreach(addresses, i, ad) {
      pb_address *pa = alloc(a, sizeof *pa);
      k8s__io__api__core__v1__node_address__init(pa);
      pa->type = str(ad, "type");
      pa->address = str(ad, "address");
      s->addresses[s->n_addresses++] = pa;
    }
  }
  const json_t *info = json_object_get(status, "nodeInfo");
  if (json_is_object(info)) {
    pb_info *pi = alloc(a, sizeof *pi);
    k8s__io__api__core__v1__node_system_info__init(pi);
    pi->operatingsystem = str(info, "operatingSystem");
    pi->architecture = str(info, "architecture");
    pi->kubeletversion = str(info, "kubeletVersion");
    s->nodeinfo = pi;
  }
  return s;
}

uint8_t *lp_externalgrpc_node_bytes(const json_t *node, size_t *len) {
  arena a = {0};
  const json_t *md = json_object_get(node, "metadata");
  pb_meta *meta = alloc(&a, sizeof *meta);
  k8s__io__apimachinery__pkg__apis__meta__v1__object_meta__init(meta);
  meta->name = str(md, "name");
  meta->uid = str(md, "uid");
  meta->labels = string_map(&a, json_object_get(md, "labels"), &meta->n_labels);
  meta->annotations = (K8s__Io__Apimachinery__Pkg__Apis__Meta__V1__ObjectMeta__AnnotationsEntry **)string_map(
      &a, json_object_get(md, "annotations"), &meta->n_annotations);
  for (size_t i = 0; i < meta->n_annotations; i++)
    meta->annotations[i]->base.descriptor =
        &k8s__io__apimachinery__pkg__apis__meta__v1__object_meta__annotations_entry__descriptor;
  pb_node pn = K8S__IO__API__CORE__V1__NODE__INIT;
  pn.metadata = meta;
  pn.spec = spec_of(&a, json_object_get(node, "spec"));
  pn.status = status_of(&a, json_object_get(node, "status"));
  *len = k8s__io__api__core__v1__node__get_packed_size(&pn);
  uint8_t *out = lp_xmalloc(*len ? *len : 1);
  k8s__io__api__core__v1__node__pack(&pn, out);
  arena_free(&a);
  return out;
}

/* ---- the Pod of a PricingPodPrice request -------------------------------------------------- */

typedef K8s__Io__Api__Core__V1__Pod pb_pod;
typedef K8s__Io__Api__Core__V1__Container pb_container;
typedef K8s__Io__Api__Core__V1__ResourceRequirements__RequestsEntry pb_resource_entry; /* = limits' */

/* name -> quantity string; *sum (when not NULL) gets each parsed quantity added (max: the largest). */
static json_t *resources_of(pb_resource_entry **entries, size_t n, json_t *sum, int max) {
  json_t *out = json_object();
  for (size_t i = 0; i < n; i++) {
    const char *q = entries[i]->value ? entries[i]->value->string : NULL;
    if (!entries[i]->key || !q) continue;
    json_object_set_new(out, entries[i]->key, json_string(q));
    double v;
    if (!sum || lp_quantity_parse(q, &v) != 0) continue;
    double have = json_number_value(json_object_get(sum, entries[i]->key));
    json_object_set_new(sum, entries[i]->key, json_real(max ? (v > have ? v : have) : have + v));
  }
  return out;
}

json_t *lp_externalgrpc_pod_json(const uint8_t *bytes, size_t len) {
  pb_pod *pod = k8s__io__api__core__v1__pod__unpack(NULL, len, bytes);
  if (!pod) return NULL;
  const pb_meta *md = pod->metadata;
  json_t *labels = json_object();
  for (size_t i = 0; md && i < md->n_labels; i++)
    if (md->labels[i]->key && md->labels[i]->value)
      json_object_set_new(labels, md->labels[i]->key, json_string(md->labels[i]->value));
  json_t *requests = json_object(), *limits = json_object(), *init_requests = json_object(),
         *init_limits = json_object();
  json_t *containers = json_array();
  const K8s__Io__Api__Core__V1__PodSpec *spec = pod->spec;
  for (size_t i = 0; spec && i < spec->n_containers + spec->n_initcontainers; i++) {
    int init = i >= spec->n_containers;
    const pb_container *c = init ? spec->initcontainers[i - spec->n_containers] : spec->containers[i];
    const K8s__Io__Api__Core__V1__ResourceRequirements *r = c->resources;
    json_t *req = resources_of(r ? (pb_resource_entry **)r->requests : NULL, r ? r->n_requests : 0,
                               init ? init_requests : requests, init);
    json_t *lim = resources_of(r ? (pb_resource_entry **)r->limits : NULL, r ? r->n_limits : 0,
                               init ? init_limits : limits, init);
    if (!init)
      json_array_append_new(containers,
                            json_pack("{s:s?, s:o, s:o}", "name", c->name, "requests", req, "limits", lim));
    else {
      json_decref(req);
      json_decref(lim);
    }
  }
  /* what the scheduler reserves: the containers' sum, or the largest init container when larger */
  json_t *sums[] = {requests, limits}, *inits[] = {init_requests, init_limits};
  for (int k = 0; k < 2; k++) {
    const char *name;
    json_t *v;
    json_object_foreach(inits[k], name, v) {
      if (json_number_value(v) > json_number_value(json_object_get(sums[k], name)))
        json_object_set(sums[k], name, v);
    }
    json_decref(inits[k]);
  }
  json_t *out =
      json_pack("{s:s?, s:s?, s:o, s:s?, s:o, s:o, s:o}", "name", md ? md->name : NULL, "namespace",
                md ? md->namespace_ : NULL, "labels", labels, "node_name", spec ? spec->nodename : NULL,
                "requests", requests, "limits", limits, "containers", containers);
  k8s__io__api__core__v1__pod__free_unpacked(pod, NULL);
  return out;
}

/* The shared view controllers read (controller.h): cached objects, indices, Events, and the small
 * object and time helpers every reconciler needs. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller/controller_internal.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/log.h"

#define EVENT_DEDUP_S 600.0

/* ---- settings and resources ---------------------------------------------------------------- */

lp_ctrl_settings lp_ctrl_settings_resolve(const lp_ctrl_settings *s) {
  lp_ctrl_settings out = s ? *s : (lp_ctrl_settings){0};
#define DEFAULT(field, value)                                                                                \
  if (out.field <= 0) out.field = (value)
  DEFAULT(launch_timeout_s, 300);
  DEFAULT(registration_timeout_s, 900);
  DEFAULT(gc_interval_s, 120);
  DEFAULT(gc_leak_grace_s, 60);
  DEFAULT(nodeclass_resync_s, 300);
  DEFAULT(drain_requeue_s, 1);
  DEFAULT(terminate_requeue_s, 5);
  DEFAULT(workers, 10);
#undef DEFAULT
  return out;
}

static const lp_kube_ref kind_refs[LP_KIND_COUNT] = {
    [LP_KIND_NODECLAIM] = {.group = "karpenter.sh", .version = "v1", .resource = "nodeclaims"},
    [LP_KIND_NODE] = {.version = "v1", .resource = "nodes"},
    [LP_KIND_NODEPOOL] = {.group = "karpenter.sh", .version = "v1", .resource = "nodepools"},
    /* LP_KIND_NODECLASS: the mapping's descriptor says which (lp_env_ref) */
    [LP_KIND_POD] = {.version = "v1", .resource = "pods"},
    [LP_KIND_DAEMONSET] = {.group = "apps", .version = "v1", .resource = "daemonsets"},
    [LP_KIND_PDB] = {.group = "policy", .version = "v1", .resource = "poddisruptionbudgets"},
    [LP_KIND_PVC] = {.version = "v1", .resource = "persistentvolumeclaims"},
    [LP_KIND_PV] = {.version = "v1", .resource = "persistentvolumes"},
    [LP_KIND_STORAGECLASS] = {.group = "storage.k8s.io", .version = "v1", .resource = "storageclasses"},
};

const lp_kube_ref *lp_kind_ref(lp_kind kind) {
  return &kind_refs[kind];
}

lp_kube_ref lp_env_ref(lp_ctrl_env *env, lp_kind kind) {
  return kind == LP_KIND_NODECLASS ? env_nodeclass_group_ref(env, 0) : kind_refs[kind];
}

static lp_kube_ref split_key(lp_kube_ref ref, const char *key, char *buf) {
  const char *slash = strchr(key, '/');
  if (slash) {
    memcpy(buf, key, (size_t)(slash - key));
    buf[slash - key] = '\0';
    ref.namespace = buf;
    ref.name = slash + 1;
  } else {
    ref.name = key;
  }
  return ref;
}

lp_kube_ref lp_kind_ref_for(lp_kind kind, const char *key, char *buf) {
  return split_key(kind_refs[kind], key, buf);
}

uv_loop_t *lp_env_loop(lp_ctrl_env *env) {
  return env->loop;
}
lp_kube_client *lp_env_kube(lp_ctrl_env *env) {
  return env->kube;
}
lp_cloudprovider *lp_env_cloud(lp_ctrl_env *env) {
  return env->cloud;
}
lp_metrics *lp_env_metrics(lp_ctrl_env *env) {
  return env->metrics;
}
const lp_ctrl_settings *lp_env_settings(lp_ctrl_env *env) {
  return &env->settings;
}

double lp_env_monotonic(lp_ctrl_env *env) {
  return env->clock ? env->clock(env->clock_ud) : lp_clock_monotonic();
}

void lp_env_set_clock(lp_ctrl_env *env, double (*now)(void *ud), void *ud) {
  env->clock = now;
  env->clock_ud = now ? ud : NULL;
}

double lp_env_wall(lp_ctrl_env *env) {
  return env->wall ? env->wall(env->wall_ud) : lp_clock_wall();
}

void lp_env_set_wall_clock(lp_ctrl_env *env, double (*now)(void *ud), void *ud) {
  env->wall = now;
  env->wall_ud = now ? ud : NULL;
}

/* ---- caches and indices -------------------------------------------------------------------- */

json_t *lp_env_get(lp_ctrl_env *env, lp_kind kind, const char *key) {
  if (kind == LP_KIND_NODECLASS) return env_nodeclass_get(env, key);
  return env->informers[kind] ? lp_informer_get(env->informers[kind], key) : NULL;
}

void lp_env_each(lp_ctrl_env *env, lp_kind kind, void (*fn)(const char *key, json_t *obj, void *ud),
                 void *ud) {
  if (kind == LP_KIND_NODECLASS)
    env_nodeclass_each(env, fn, ud);
  else if (env->informers[kind])
    lp_informer_list(env->informers[kind], fn, ud);
}

size_t lp_env_count(lp_ctrl_env *env, lp_kind kind) {
  if (kind == LP_KIND_NODECLASS) return env_nodeclass_count(env);
  return env->informers[kind] ? lp_informer_size(env->informers[kind]) : 0;
}

static const struct {
  lp_kind kind;
  const char *path;
} index_defs[LP_INDEX_COUNT] = {
    [LP_INDEX_NODE_BY_PROVIDER_ID] = {LP_KIND_NODE, "spec.providerID"},
    [LP_INDEX_NODECLAIM_BY_PROVIDER_ID] = {LP_KIND_NODECLAIM, "status.providerID"},
    [LP_INDEX_NODECLAIM_BY_NODECLASS] = {LP_KIND_NODECLAIM, "spec.nodeClassRef.name"},
    [LP_INDEX_POD_BY_NODE] = {LP_KIND_POD, "spec.nodeName"},
};

void env_index_update(lp_ctrl_env *env, lp_kind kind, const char *key, const json_t *old_obj,
                      const json_t *new_obj) {
  for (int i = 0; i < LP_INDEX_COUNT; i++) {
    if (index_defs[i].kind != kind) continue;
    const char *before = old_obj ? lp_obj_str(old_obj, index_defs[i].path) : NULL;
    const char *after = new_obj ? lp_obj_str(new_obj, index_defs[i].path) : NULL;
    if (before && after && strcmp(before, after) == 0) continue;
    json_t *index = env->indices[i];
    if (before && *before) {
      json_t *keys = json_object_get(index, before);
      json_object_del(keys, key);
      if (json_object_size(keys) == 0) json_object_del(index, before);
    }
    if (after && *after) {
      json_t *keys = json_object_get(index, after);
      if (!keys) {
        keys = json_object();
        json_object_set_new(index, after, keys);
      }
      json_object_set(keys, key, json_true());
    }
  }
}

size_t lp_env_index_each(lp_ctrl_env *env, lp_index idx, const char *value,
                         void (*fn)(const char *key, json_t *obj, void *ud), void *ud) {
  if (!value || !*value) return 0;
  json_t *keys = json_object_get(env->indices[idx], value);
  size_t n = 0;
  const char *key;
  json_t *unused;
  json_object_foreach(keys, key, unused) {
    json_t *obj = lp_env_get(env, index_defs[idx].kind, key);
    if (!obj) continue;
    n++;
    if (fn) fn(key, obj, ud);
  }
  return n;
}

json_t *lp_env_index_first(lp_ctrl_env *env, lp_index idx, const char *value, size_t *count) {
  json_t *first = NULL;
  size_t n = 0;
  if (value && *value) {
    const char *key;
    json_t *unused;
    json_object_foreach(json_object_get(env->indices[idx], value), key, unused) {
      json_t *obj = lp_env_get(env, index_defs[idx].kind, key);
      if (!obj) continue;
      if (!first) first = obj;
      n++;
    }
  }
  if (count) *count = n;
  return first;
}

void env_init(lp_ctrl_env *env) {
  for (int i = 0; i < LP_INDEX_COUNT; i++) env->indices[i] = json_object();
  env->recent_events = json_object();
}

void env_free(lp_ctrl_env *env) {
  for (int i = 0; i < LP_INDEX_COUNT; i++) json_decref(env->indices[i]);
  json_decref(env->recent_events);
}

/* ---- events -------------------------------------------------------------------------------- */

static void event_recorded(const lp_kube_reply *reply, void *ud) {
  (void)ud;
  if (reply->error)
    lp_debug("controller.events", "cannot record event", LPF_STR("code", reply->error->code),
             LPF_STR("error", reply->error->message));
}

/* Forgets events older than the dedup window, so the map does not grow for ever. */
static void forget_old_events(lp_ctrl_env *env, double now) {
  const char *k;
  json_t *v;
  void *tmp;
  json_object_foreach_safe(env->recent_events, tmp, k, v) {
    if (now - json_real_value(v) > EVENT_DEDUP_S) json_object_del(env->recent_events, k);
  }
}

void lp_env_event(lp_ctrl_env *env, const json_t *involved, const char *type, const char *reason,
                  const char *fmt, ...) {
  char message[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  const json_t *md = json_object_get(involved, "metadata");
  const char *uid = lp_obj_uid(involved), *name = lp_obj_name(involved);
  const char *ns = json_string_value(json_object_get(md, "namespace"));
  double now = lp_env_wall(env);
  char *dedup = lp_xasprintf("%s\n%s\n%s", uid ? uid : (name ? name : ""), reason, message);
  json_t *seen = json_object_get(env->recent_events, dedup);
  if (seen && now - json_real_value(seen) < EVENT_DEDUP_S) {
    free(dedup);
    return;
  }
  if (json_object_size(env->recent_events) > 4096) forget_old_events(env, now);
  json_object_set_new(env->recent_events, dedup, json_real(now));
  free(dedup);

  char ts[LP_RFC3339_SIZE];
  lp_clock_rfc3339(now, 0, ts);
  const char *event_ns = ns && *ns ? ns : "default";
  json_t *ev = json_pack(
      "{s:s, s:s, s:{s:s}, s:{s:O*, s:O*, s:s*, s:s*, s:s*, s:O*}, s:s, s:s, s:s, s:{s:s}, s:s, s:s, s:i}",
      "apiVersion", "v1", "kind", "Event", "metadata", "namespace", event_ns, "involvedObject", "apiVersion",
      json_object_get(involved, "apiVersion"), "kind", json_object_get(involved, "kind"), "name", name,
      "namespace", ns, "uid", uid, "resourceVersion", json_object_get(md, "resourceVersion"), "type", type,
      "reason", reason, "message", message, "source", "component", "luaprov", "firstTimestamp", ts,
      "lastTimestamp", ts, "count", 1);
  /* "<object>.<random>", as client-go names them */
  char *generate = lp_xasprintf("%s.", name ? name : "luaprov");
  json_object_set_new(json_object_get(ev, "metadata"), "generateName", json_string(generate));
  free(generate);
  lp_kube_ref ref = {.version = "v1", .resource = "events", .namespace = event_ns};
  lp_kube_create(env->kube, &ref, ev, event_recorded, NULL);
  json_decref(ev);
}

/* ---- writes -------------------------------------------------------------------------------- */

/* The reference of the object of kind at key; buf (strlen(key) + 1 bytes) holds a split namespace. A
 * node class's key names its group instead (env_nodeclass.c). */
static lp_kube_ref object_ref(lp_ctrl_env *env, lp_kind kind, const char *key, char *buf) {
  return kind == LP_KIND_NODECLASS ? env_nodeclass_ref_for(env, key) : split_key(kind_refs[kind], key, buf);
}

void lp_env_patch(lp_ctrl_env *env, lp_kind kind, const char *key, const char *resource_version,
                  const char *subresource, json_t *patch, lp_kube_done_fn done, void *ud) {
  json_t *meta = json_object_get(patch, "metadata");
  if (!meta) json_object_set_new(patch, "metadata", meta = json_object());
  json_object_set_new(meta, "resourceVersion", json_string(resource_version ? resource_version : ""));
  char *buf = lp_xmalloc(strlen(key) + 1); /* the namespace of a namespaced key */
  lp_kube_ref ref = object_ref(env, kind, key, buf);
  lp_kube_merge_patch(env->kube, &ref, subresource, patch, done, ud);
  free(buf);
  json_decref(patch);
}

void lp_env_annotate(lp_ctrl_env *env, lp_kind kind, const char *key, const char *annotation,
                     const char *value, lp_kube_done_fn done, void *ud) {
  json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "annotations", annotation, value);
  char *buf = lp_xmalloc(strlen(key) + 1);
  lp_kube_ref ref = object_ref(env, kind, key, buf);
  lp_kube_merge_patch(env->kube, &ref, NULL, patch, done, ud);
  free(buf);
  json_decref(patch);
}

/* ---- names of new NodeClaims --------------------------------------------------------------- */

/* generateName's: the base is cut to 58 characters, 5 random ones follow, vowels and look-alikes left
 * out so that no word is spelt by chance. */
#define NAME_BASE_MAX 58
#define NAME_SUFFIX   5
static const char suffix_chars[] = "bcdfghjklmnpqrstvwxz2456789";

char *lp_env_nodeclaim_name(lp_ctrl_env *env, const char *pool, int (*taken)(const char *name, void *ud),
                            void *ud) {
  int base = (int)strlen(pool) > NAME_BASE_MAX ? NAME_BASE_MAX : (int)strlen(pool);
  for (;;) {
    unsigned char rnd[NAME_SUFFIX];
    if (uv_random(NULL, NULL, rnd, sizeof rnd, 0, NULL) != 0)
      for (size_t i = 0; i < sizeof rnd; i++) rnd[i] = (unsigned char)rand();
    char suffix[NAME_SUFFIX + 1];
    for (size_t i = 0; i < NAME_SUFFIX; i++) suffix[i] = suffix_chars[rnd[i] % (sizeof suffix_chars - 1)];
    suffix[NAME_SUFFIX] = '\0';
    char *name = lp_xasprintf("%.*s-%s", base, pool, suffix);
    if (!lp_env_get(env, LP_KIND_NODECLAIM, name) && !(taken && taken(name, ud))) return name;
    free(name);
  }
}

/* ---- objects ------------------------------------------------------------------------------- */

json_t *lp_obj_get(const json_t *obj, const char *dotted_path) {
  json_t *at = (json_t *)obj;
  const char *p = dotted_path;
  char part[128];
  while (at && *p) {
    const char *dot = strchr(p, '.');
    size_t n = dot ? (size_t)(dot - p) : strlen(p);
    if (n >= sizeof part) return NULL;
    memcpy(part, p, n);
    part[n] = '\0';
    at = json_object_get(at, part);
    p += n + (dot ? 1 : 0);
  }
  return at;
}

const char *lp_obj_str(const json_t *obj, const char *dotted_path) {
  return json_string_value(lp_obj_get(obj, dotted_path));
}

const char *lp_obj_label(const json_t *obj, const char *key) {
  return json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"), key));
}

const char *lp_obj_annotation(const json_t *obj, const char *key) {
  return json_string_value(
      json_object_get(json_object_get(json_object_get(obj, "metadata"), "annotations"), key));
}

int lp_nodeclass_ref_supported(const json_t *supported, const json_t *ref) {
  const char *group = json_string_value(json_object_get(ref, "group"));
  const char *kind = json_string_value(json_object_get(ref, "kind"));
  size_t i;
  const json_t *nc;
  json_array_foreach(supported, i, nc) {
    const char *g = json_string_value(json_object_get(nc, "group"));
    const char *k = json_string_value(json_object_get(nc, "kind"));
    if (group && kind && g && k && strcmp(group, g) == 0 && strcmp(kind, k) == 0) return 1;
  }
  return 0;
}

const char *lp_obj_name(const json_t *obj) {
  return lp_obj_str(obj, "metadata.name");
}
const char *lp_obj_uid(const json_t *obj) {
  return lp_obj_str(obj, "metadata.uid");
}
const char *lp_obj_resource_version(const json_t *obj) {
  return lp_obj_str(obj, "metadata.resourceVersion");
}

int lp_obj_deleting(const json_t *obj) {
  const char *ts = lp_obj_str(obj, "metadata.deletionTimestamp");
  return ts && *ts;
}

int lp_obj_has_finalizer(const json_t *obj, const char *name) {
  size_t i;
  json_t *f;
  json_array_foreach(json_object_get(json_object_get(obj, "metadata"), "finalizers"), i, f) {
    if (json_is_string(f) && strcmp(json_string_value(f), name) == 0) return 1;
  }
  return 0;
}

json_t *lp_obj_finalizers_with(const json_t *obj, const char *name, int add) {
  json_t *out = json_array();
  size_t i;
  json_t *f;
  json_array_foreach(json_object_get(json_object_get(obj, "metadata"), "finalizers"), i, f) {
    if (json_is_string(f) && strcmp(json_string_value(f), name) == 0) continue;
    json_array_append(out, f);
  }
  if (add) json_array_append_new(out, json_string(name));
  return out;
}

json_t *lp_obj_owner_ref(const json_t *owner, const char *api_version, const char *kind) {
  return json_pack("{s:s, s:s, s:s?, s:s*, s:b}", "apiVersion", api_version, "kind", kind, "name",
                   lp_obj_name(owner), "uid", lp_obj_uid(owner), "blockOwnerDeletion", 1);
}

/* ---- time ---------------------------------------------------------------------------------- */

double lp_rfc3339_parse(const char *s) {
  int y, mo, d, h, mi, n = 0;
  double sec;
  if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%lf%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6) return -1;
  const char *rest = s + n;
  double offset = 0;
  if (*rest == '+' || *rest == '-') {
    int oh, om;
    if (sscanf(rest + 1, "%2d:%2d", &oh, &om) != 2) return -1;
    offset = (*rest == '-' ? -1 : 1) * (oh * 3600.0 + om * 60.0);
  } else if (*rest != 'Z' && *rest != 'z') {
    return -1;
  }
  struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi};
  return (double)timegm(&tm) + sec - offset;
}

double lp_duration_parse(const char *s) {
  static const struct {
    const char *unit;
    double seconds;
  } units[] = {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"m", 60}, {"h", 3600}};
  if (!s || !*s) return -1;
  double total = 0;
  while (*s) {
    char *end;
    double value = strtod(s, &end);
    if (end == s || value < 0) return -1;
    size_t n = 0;
    while (end[n] && (end[n] < '0' || end[n] > '9') && end[n] != '.') n++;
    if (n == 0 && *end == '\0' && value == 0) return total; /* "0" needs no unit, as in Go */
    int matched = 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0] && !matched; i++) {
      if (strlen(units[i].unit) == n && strncmp(end, units[i].unit, n) == 0) {
        total += value * units[i].seconds;
        matched = 1;
      }
    }
    if (!matched) return -1;
    s = end + n;
  }
  return total;
}

/* The node class kind across its API groups (controller.h "node classes"): the descriptor's group and
 * its aliases, one informer each, seen by the controllers as one kind whose keys name the group
 * ("name" in the descriptor's group, "group/name" in an alias group). env.c hands LP_KIND_NODECLASS
 * here; the manager starts an informer per group (env_nodeclass_group_ref) and keys their objects with
 * env_nodeclass_key_in. Nothing here calls back into env.c or manager.c. */
#include <stdlib.h>
#include <string.h>

#include "controller/controller_internal.h"

const lp_nodeclass_desc *lp_env_nodeclass(lp_ctrl_env *env) {
  /* a manager with no CloudProvider */
  static const lp_nodeclass_desc none = {"", "", "", "", "", "", "", NULL, 0};
  return env->cloud ? lp_cloudprovider_nodeclass(env->cloud) : &none;
}

char *env_nodeclass_key_in(const char *alias, const char *name) {
  return alias ? lp_xasprintf("%s/%s", alias, name) : lp_xstrdup(name);
}

lp_kube_ref env_nodeclass_group_ref(lp_ctrl_env *env, size_t i) {
  const lp_nodeclass_desc *d = lp_env_nodeclass(env);
  return (lp_kube_ref){
      .group = i == 0 ? d->group : d->aliases[i - 1], .version = d->version, .resource = d->resource};
}

/* The alias index of group (len bytes; not NUL-terminated), or -1 when it is none of them. */
static long alias_index(const lp_nodeclass_desc *d, const char *group, size_t len) {
  for (size_t i = 0; i < d->naliases; i++)
    if (strlen(d->aliases[i]) == len && strncmp(d->aliases[i], group, len) == 0) return (long)i;
  return -1;
}

const char *lp_nodeclass_key_name(const char *key) {
  const char *slash = strrchr(key, '/');
  return slash ? slash + 1 : key;
}

/* The informer holding the class at key (NULL: a group not served, or not started), and its name. */
static lp_informer *informer_of(lp_ctrl_env *env, const char *key, const char **name) {
  *name = lp_nodeclass_key_name(key);
  if (*name == key) return env->informers[LP_KIND_NODECLASS];
  long i = alias_index(lp_env_nodeclass(env), key, (size_t)(*name - 1 - key));
  return i >= 0 && env->alias_informers ? env->alias_informers[i] : NULL;
}

json_t *env_nodeclass_get(lp_ctrl_env *env, const char *key) {
  const char *name;
  lp_informer *inf = informer_of(env, key, &name);
  return inf ? lp_informer_get(inf, name) : NULL;
}

typedef struct keyed {
  const char *alias;
  void (*fn)(const char *key, json_t *obj, void *ud);
  void *ud;
} keyed;

static void each_in_alias(const char *name, json_t *obj, void *ud) {
  keyed *k = ud;
  char *key = env_nodeclass_key_in(k->alias, name);
  k->fn(key, obj, k->ud);
  free(key);
}

void env_nodeclass_each(lp_ctrl_env *env, void (*fn)(const char *key, json_t *obj, void *ud), void *ud) {
  const lp_nodeclass_desc *d = lp_env_nodeclass(env);
  if (env->informers[LP_KIND_NODECLASS]) lp_informer_list(env->informers[LP_KIND_NODECLASS], fn, ud);
  for (size_t i = 0; env->alias_informers && i < d->naliases; i++) {
    keyed k = {d->aliases[i], fn, ud};
    if (env->alias_informers[i]) lp_informer_list(env->alias_informers[i], each_in_alias, &k);
  }
}

size_t env_nodeclass_count(lp_ctrl_env *env) {
  const lp_nodeclass_desc *d = lp_env_nodeclass(env);
  size_t n = env->informers[LP_KIND_NODECLASS] ? lp_informer_size(env->informers[LP_KIND_NODECLASS]) : 0;
  for (size_t i = 0; env->alias_informers && i < d->naliases; i++)
    n += env->alias_informers[i] ? lp_informer_size(env->alias_informers[i]) : 0;
  return n;
}

lp_kube_ref env_nodeclass_ref_for(lp_ctrl_env *env, const char *key) {
  const char *name = lp_nodeclass_key_name(key);
  long i = name == key ? -1 : alias_index(lp_env_nodeclass(env), key, (size_t)(name - 1 - key));
  if (name != key && i < 0) name = key; /* no group of ours: the API refuses the name */
  lp_kube_ref ref = env_nodeclass_group_ref(env, (size_t)(i + 1));
  ref.name = name;
  return ref;
}

char *lp_env_nodeclass_key(lp_ctrl_env *env, const json_t *ref) {
  const char *name = json_string_value(json_object_get(ref, "name"));
  const char *group = json_string_value(json_object_get(ref, "group"));
  if (!name || !*name) return NULL;
  const lp_nodeclass_desc *d = lp_env_nodeclass(env);
  if (!group || !*group || strcmp(group, d->group) == 0) return env_nodeclass_key_in(NULL, name);
  long i = alias_index(d, group, strlen(group));
  return i >= 0 ? env_nodeclass_key_in(d->aliases[i], name) : NULL;
}

json_t *lp_env_nodeclass_of(lp_ctrl_env *env, const json_t *ref) {
  char *key = lp_env_nodeclass_key(env, ref);
  json_t *obj = key ? env_nodeclass_get(env, key) : NULL;
  free(key);
  return obj;
}

char *lp_env_nodeclass_label(lp_ctrl_env *env, const char *key) {
  const char *kind = lp_env_nodeclass(env)->kind, *name = lp_nodeclass_key_name(key);
  if (name == key) return lp_xasprintf("%s %s", kind, name);
  return lp_xasprintf("%s %s (%.*s)", kind, name, (int)(name - 1 - key), key);
}

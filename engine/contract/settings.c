/* Provider settings declared by a CloudProvider mapping: their shape, their values, their help. */
#include "contract/settings.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* Options the engine itself takes on the command lines that take settings (`run`, `eval`): a setting
 * of the same name would be shadowed by them, silently. */
static const char *const reserved[] = {
    "bizfly-cluster",   "ca-file",   "capacity-type", "cluster-id", "config",    "endpoint",   "grpc-addr",
    "grpc-ca",          "grpc-cert", "grpc-key",      "help",       "instance",  "kubeconfig", "leader-elect",
    "log-format",       "log-level", "metrics-addr",  "nodeclaim",  "nodeclass", "nodepool",   "scripts",
    "shutdown-timeout", "sim",       "version",       NULL};

static int lower_kebab(const char *s) {
  if (!s || !(*s >= 'a' && *s <= 'z')) return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-')) return 0;
  return 1;
}

static char *entry_problem(const json_t *s, size_t i) {
  if (!json_is_object(s)) return lp_xasprintf("settings[%zu] is not a table", i + 1);
  const char *name = json_string_value(json_object_get(s, "name"));
  if (!lower_kebab(name))
    return lp_xasprintf("settings[%zu].name is not a lower-case option name like \"cluster-type\"", i + 1);
  for (const char *const *r = reserved; *r; r++)
    if (strcmp(name, *r) == 0)
      return lp_xasprintf("settings[%zu].name \"%s\" is an option of the engine itself", i + 1, name);
  const json_t *env = json_object_get(s, "env");
  if (env && !(json_is_array(env) || (json_is_object(env) && json_object_size(env) == 0)))
    return lp_xasprintf("settings[%zu] (%s): env is not a list of variable names", i + 1, name);
  size_t k;
  const json_t *var;
  json_array_foreach(env, k, var) if (!json_is_string(var) || !json_string_length(var)) return lp_xasprintf(
      "settings[%zu] (%s): env[%zu] is not a variable name", i + 1, name, k + 1);
  static const char *const strings[] = {"default", "sim", "help", NULL};
  for (const char *const *f = strings; *f; f++) {
    const json_t *v = json_object_get(s, *f);
    if (v && !json_is_string(v))
      return lp_xasprintf("settings[%zu] (%s): %s is not a string", i + 1, name, *f);
  }
  const json_t *required = json_object_get(s, "required");
  if (required && !json_is_boolean(required))
    return lp_xasprintf("settings[%zu] (%s): required is not a boolean", i + 1, name);
  return NULL;
}

char *lp_settings_problem(const json_t *declared) {
  if (!declared || (json_is_object(declared) && json_object_size(declared) == 0)) return NULL;
  if (!json_is_array(declared)) return lp_xstrdup("settings is not a list");
  size_t i, j;
  const json_t *s, *t;
  json_array_foreach(declared, i, s) {
    char *problem = entry_problem(s, i);
    if (problem) return problem;
    const char *name = json_string_value(json_object_get(s, "name"));
    for (j = 0; j < i; j++) {
      t = json_array_get(declared, j);
      if (strcmp(name, json_string_value(json_object_get(t, "name"))) == 0)
        return lp_xasprintf("settings[%zu]: \"%s\" is declared twice", i + 1, name);
    }
  }
  return NULL;
}

/* "cluster-type" -> "cluster_type" (malloc'd). */
static char *ctx_key(const char *name) {
  char *key = lp_xstrdup(name);
  for (char *c = key; *c; c++)
    if (*c == '-') *c = '_';
  return key;
}

static const char *from_env(const json_t *env) {
  size_t k;
  const json_t *var;
  json_array_foreach(env, k, var) {
    const char *v = getenv(json_string_value(var));
    if (v && *v) return v;
  }
  return NULL;
}

/* "the zone is not set: pass --zone VALUE or set ZONE_ID or CLOUD_ZONE" */
static char *missing(const char *name, const json_t *env) {
  lp_buf b = {0};
  lp_buf_printf(&b, "the %s is not set: pass --%s VALUE", name, name);
  size_t k;
  const json_t *var;
  json_array_foreach(env, k, var) lp_buf_printf(&b, " or set %s", json_string_value(var));
  return lp_buf_take(&b, NULL);
}

static const json_t *declared_named(const json_t *declared, const char *name) {
  size_t i;
  const json_t *s;
  json_array_foreach(declared, i,
                     s) if (strcmp(json_string_value(json_object_get(s, "name")), name) == 0) return s;
  return NULL;
}

json_t *lp_settings_resolve(const json_t *declared, const json_t *flags, lp_settings_sim sim,
                            char **problem) {
  *problem = NULL;
  const char *flag;
  const json_t *given;
  json_object_foreach((json_t *)flags, flag,
                      given) if (!json_is_array(declared) || !declared_named(declared, flag)) {
    *problem = lp_xasprintf("unknown option --%s", flag);
    return NULL;
  }
  json_t *out = json_object();
  size_t i;
  const json_t *s;
  json_array_foreach(declared, i, s) {
    const char *name = json_string_value(json_object_get(s, "name"));
    const json_t *env = json_object_get(s, "env");
    const char *v = json_string_value(json_object_get(flags, name));
    if (!v && sim == LP_SETTINGS_SIM_FIRST) v = json_string_value(json_object_get(s, "sim"));
    if (!v) v = from_env(env);
    if (!v && sim == LP_SETTINGS_SIM_FALLBACK) v = json_string_value(json_object_get(s, "sim"));
    if (!v) v = json_string_value(json_object_get(s, "default"));
    if (!v && json_is_true(json_object_get(s, "required"))) {
      *problem = missing(name, env);
      json_decref(out);
      return NULL;
    }
    if (!v) continue;
    char *key = ctx_key(name);
    json_object_set_new(out, key, json_string(v));
    free(key);
  }
  return out;
}

void lp_settings_usage(const json_t *declared, lp_buf *out) {
  size_t i;
  const json_t *s;
  json_array_foreach(declared, i, s) {
    const char *name = json_string_value(json_object_get(s, "name"));
    const char *help = json_string_value(json_object_get(s, "help"));
    lp_buf_printf(out, "  --%s VALUE%*s%s (", name, (int)(name && strlen(name) < 16 ? 16 - strlen(name) : 1),
                  "", help ? help : "");
    const json_t *env = json_object_get(s, "env");
    size_t k;
    const json_t *var;
    json_array_foreach(env, k, var) lp_buf_printf(out, "%s$%s", k ? ", " : "env ", json_string_value(var));
    const char *def = json_string_value(json_object_get(s, "default"));
    if (json_is_true(json_object_get(s, "required")))
      lp_buf_printf(out, "%srequired", json_array_size(env) ? "; " : "");
    else if (def)
      lp_buf_printf(out, "%sdefault %s", json_array_size(env) ? "; " : "", def);
    lp_buf_puts(out, ")\n");
  }
}

/* The node class descriptor a CloudProvider mapping exports: its shape and the process-wide pin that
 * keeps a hot reload from changing it (nodeclass_desc.h). Loop thread only, as the script host. */
#include "contract/nodeclass_desc.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static const char *const FIELDS[] = {
    "group", "version", "kind", "resource", "finalizer", "hash_annotation", "hash_version_annotation", NULL};

static json_t *pinned;

static const char *field(const json_t *t, const char *name) {
  const char *v = json_string_value(json_object_get(t, name));
  return v && *v ? v : NULL;
}

/* The first field t misses (not a non-empty string), or NULL when it has them all. */
static const char *missing(const json_t *t) {
  for (const char *const *f = FIELDS; *f; f++)
    if (!field(t, *f)) return *f;
  return NULL;
}

/* Non-zero when t's aliases are absent (or an empty Lua table, which arrives as {}): none. */
static int no_aliases(const json_t *t) {
  const json_t *a = json_object_get(t, "aliases");
  return !a || json_is_null(a) || (json_is_object(a) && json_object_size(a) == 0) ||
         (json_is_array(a) && json_array_size(a) == 0);
}

/* A DNS subdomain, as API group names are: lower-case letters, digits, '-' and '.', a letter or digit
 * at both ends. */
static int group_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 253) return 0;
  for (size_t i = 0; i < n; i++) {
    int alnum = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9');
    if (!alnum && ((s[i] != '-' && s[i] != '.') || i == 0 || i == n - 1)) return 0;
  }
  return 1;
}

/* What is wrong with t's aliases (malloc'd), or NULL. */
static char *aliases_problem(const json_t *t) {
  if (no_aliases(t)) return NULL;
  const json_t *list = json_object_get(t, "aliases");
  if (!json_is_array(list)) return lp_xstrdup("nodeclass.aliases is not a list of API group names");
  const char *group = field(t, "group");
  size_t i;
  const json_t *a;
  json_array_foreach(list, i, a) {
    const char *s = json_string_value(a);
    if (!s || !*s) return lp_xasprintf("nodeclass.aliases[%zu] is not a non-empty string", i + 1);
    if (!group_name(s))
      return lp_xasprintf("nodeclass.aliases[%zu] \"%s\" is not an API group name (lower-case letters, "
                          "digits, '-' and '.', as karpenter.example.com)",
                          i + 1, s);
    if (group && strcmp(s, group) == 0)
      return lp_xasprintf("nodeclass.aliases[%zu] \"%s\" is nodeclass.group itself: an alias is another "
                          "group serving the same kind",
                          i + 1, s);
    for (size_t j = 0; j < i; j++)
      if (strcmp(s, json_string_value(json_array_get(list, j))) == 0)
        return lp_xasprintf("nodeclass.aliases[%zu] \"%s\" repeats aliases[%zu]", i + 1, s, j + 1);
  }
  return NULL;
}

/* t's problems of its own, before any comparison with the pin. */
static char *own_problem(const json_t *t) {
  if (!json_is_object(t))
    return lp_xstrdup("nodeclass is missing or not a table {group, version, kind, resource, finalizer, "
                      "hash_annotation, hash_version_annotation[, aliases]}");
  const char *gap = missing(t);
  if (gap) return lp_xasprintf("nodeclass.%s is missing or not a non-empty string", gap);
  return aliases_problem(t);
}

char *lp_nodeclass_desc_problem(const json_t *t) {
  char *problem = own_problem(t);
  if (problem || !pinned) return problem;
  static const char why[] = "since the engine started: the controllers watch the resource and stamp the "
                            "annotations it names, so restart luaprov to change the node class";
  /* the pin has no problem of its own (lp_nodeclass_desc_pin refuses others) */
  for (const char *const *f = FIELDS; *f; f++)
    if (strcmp(field(t, *f), field(pinned, *f)) != 0)
      return lp_xasprintf("nodeclass.%s changed from \"%s\" to \"%s\" %s", *f, field(pinned, *f),
                          field(t, *f), why);
  if (no_aliases(pinned) && no_aliases(t)) return NULL;
  json_t *before = json_object_get(pinned, "aliases"), *after = json_object_get(t, "aliases");
  if (!no_aliases(pinned) && !no_aliases(t) && json_equal(before, after)) return NULL;
  char *b = no_aliases(pinned) ? lp_xstrdup("none") : json_dumps(before, JSON_COMPACT);
  char *a = no_aliases(t) ? lp_xstrdup("none") : json_dumps(after, JSON_COMPACT);
  problem = lp_xasprintf("nodeclass.aliases changed from %s to %s %s", b, a, why);
  free(b);
  free(a);
  return problem;
}

void lp_nodeclass_desc_from_json(const json_t *t, lp_nodeclass_desc *out) {
  const char **slots[] = {&out->group,
                          &out->version,
                          &out->kind,
                          &out->resource,
                          &out->finalizer,
                          &out->hash_annotation,
                          &out->hash_version_annotation};
  for (size_t i = 0; FIELDS[i]; i++) {
    const char *v = field(t, FIELDS[i]);
    *slots[i] = v ? v : "";
  }
  out->aliases = NULL;
  out->naliases = 0;
  char *problem = aliases_problem(t);
  const json_t *list = problem || no_aliases(t) ? NULL : json_object_get(t, "aliases");
  free(problem);
  if (!list) return;
  out->aliases = lp_xcalloc(json_array_size(list), sizeof *out->aliases);
  size_t i;
  const json_t *a;
  json_array_foreach(list, i, a) out->aliases[out->naliases++] = json_string_value(a);
}

void lp_nodeclass_desc_release(lp_nodeclass_desc *d) {
  free(d->aliases);
  d->aliases = NULL;
  d->naliases = 0;
}

void lp_nodeclass_desc_pin(json_t *t) {
  char *problem = own_problem(t);
  free(problem);
  if (problem) return; /* nothing to hold a later load to */
  json_incref(t);
  json_decref(pinned);
  pinned = t;
}

void lp_nodeclass_desc_unpin(const json_t *t) {
  if (!pinned || pinned != t) return;
  json_decref(pinned);
  pinned = NULL;
}

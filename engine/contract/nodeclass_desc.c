/* The node class descriptor a CloudProvider mapping exports: its shape and the process-wide pin that
 * keeps a hot reload from changing it (nodeclass_desc.h). Loop thread only, as the script host. */
#include "contract/nodeclass_desc.h"

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

char *lp_nodeclass_desc_problem(const json_t *t) {
  if (!json_is_object(t))
    return lp_xstrdup("nodeclass is missing or not a table {group, version, kind, resource, finalizer, "
                      "hash_annotation, hash_version_annotation}");
  const char *gap = missing(t);
  if (gap) return lp_xasprintf("nodeclass.%s is missing or not a non-empty string", gap);
  /* the pin holds every field (lp_nodeclass_desc_pin refuses others) */
  for (const char *const *f = FIELDS; pinned && *f; f++)
    if (strcmp(field(t, *f), field(pinned, *f)) != 0)
      return lp_xasprintf("nodeclass.%s changed from \"%s\" to \"%s\" since the engine started: the "
                          "controllers watch the resource and stamp the annotations it names, so restart "
                          "luaprov to change the node class",
                          *f, field(pinned, *f), field(t, *f));
  return NULL;
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
}

void lp_nodeclass_desc_pin(json_t *t) {
  if (!json_is_object(t) || missing(t)) return; /* nothing to hold a later load to */
  json_incref(t);
  json_decref(pinned);
  pinned = t;
}

void lp_nodeclass_desc_unpin(const json_t *t) {
  if (!pinned || pinned != t) return;
  json_decref(pinned);
  pinned = NULL;
}

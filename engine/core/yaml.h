/* YAML documents as JSON values (libyaml): Kubernetes objects as `kubectl get -o yaml` prints them,
 * kubeconfig files. Plain scalars follow the YAML 1.2 core schema (null, true/false, integers,
 * floats); quoted scalars are always strings. Anchors and aliases are resolved (into copies, at most
 * 100 000 values and 8 MiB of scalar text beyond the document's own: more is InvalidYAML, so a small
 * file of aliases cannot expand into billions of values or gigabytes); only the first document of a
 * stream is read. */
#ifndef LUAPROV_CORE_YAML_H
#define LUAPROV_CORE_YAML_H

#include <jansson.h>
#include <stddef.h>

#include "core/error.h"

/* Returns a new reference, or NULL with *err (code "InvalidYAML", message with line and column). */
json_t *lp_yaml_parse(const char *text, size_t len, lp_error **err);

/* Reads a file holding JSON or YAML (JSON is tried first: it is also YAML, but jansson keeps integer
 * precision and reports better errors). NULL with *err (codes "NotFound", "InvalidYAML"). */
json_t *lp_load_json_or_yaml_file(const char *path, lp_error **err);

#endif

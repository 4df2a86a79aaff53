#include "core/yaml.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/buf.h"

#define MAX_DEPTH 128
/* Aliases are expanded into copies, so a few hundred bytes of nested aliases ("billion laughs") would
 * build billions of values, and a long scalar aliased many times gigabytes of text. A document may
 * produce its own node count plus MAX_ALIAS_VALUES values, and its own length plus MAX_ALIAS_BYTES of
 * scalar text. */
#define MAX_ALIAS_VALUES 100000
#define MAX_ALIAS_BYTES  (8u << 20)

typedef struct converter {
  yaml_document_t *doc;
  size_t left;       /* values still allowed */
  size_t bytes_left; /* scalar bytes still allowed */
  int too_many;
} converter;

static json_t *plain_scalar(const char *s, size_t len) {
  if (len == 0 || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
      strcmp(s, "NULL") == 0)
    return json_null();
  if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0) return json_true();
  if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "FALSE") == 0) return json_false();
  char *end;
  errno = 0;
  long long i = strtoll(s, &end, 10);
  if (*end == '\0' && errno == 0 && (s[0] == '-' || s[0] == '+' || (s[0] >= '0' && s[0] <= '9'))) {
    /* "0123" stays a string: YAML 1.2 core has no octal without 0o, and Kubernetes never means one */
    const char *digits = s[0] == '-' || s[0] == '+' ? s + 1 : s;
    if (digits[0] == '0' && digits[1] != '\0') return json_stringn(s, len);
    return json_integer(i);
  }
  if ((s[0] >= '0' && s[0] <= '9') || ((s[0] == '-' || s[0] == '+' || s[0] == '.') && len > 1)) {
    double d = strtod(s, &end);
    if (*end == '\0' && end != s) return json_real(d);
  }
  if (strcmp(s, ".inf") == 0 || strcmp(s, ".nan") == 0) return json_stringn(s, len); /* JSON has neither */
  return json_stringn(s, len);
}

static json_t *convert(converter *cv, yaml_node_t *node, int depth) {
  if (!node || depth > MAX_DEPTH) return NULL;
  if (cv->left == 0) {
    cv->too_many = 1;
    return NULL;
  }
  cv->left--;
  switch (node->type) {
  case YAML_SCALAR_NODE: {
    const char *s = (const char *)node->data.scalar.value;
    size_t len = node->data.scalar.length;
    if (len > cv->bytes_left) {
      cv->too_many = 1;
      return NULL;
    }
    cv->bytes_left -= len;
    if (node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return json_stringn(s, len);
    return plain_scalar(s, len);
  }
  case YAML_SEQUENCE_NODE: {
    json_t *arr = json_array();
    for (yaml_node_item_t *item = node->data.sequence.items.start; item < node->data.sequence.items.top;
         item++) {
      json_t *v = convert(cv, yaml_document_get_node(cv->doc, *item), depth + 1);
      if (!v) {
        json_decref(arr);
        return NULL;
      }
      json_array_append_new(arr, v);
    }
    return arr;
  }
  case YAML_MAPPING_NODE: {
    json_t *obj = json_object();
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top;
         pair++) {
      yaml_node_t *key = yaml_document_get_node(cv->doc, pair->key);
      json_t *v = convert(cv, yaml_document_get_node(cv->doc, pair->value), depth + 1);
      if (!key || key->type != YAML_SCALAR_NODE || !v) {
        json_decref(v);
        json_decref(obj);
        return NULL;
      }
      char *k = lp_xstrndup((const char *)key->data.scalar.value, key->data.scalar.length);
      json_object_set_new(obj, k, v);
      free(k);
    }
    return obj;
  }
  default:
    return NULL;
  }
}

json_t *lp_yaml_parse(const char *text, size_t len, lp_error **err) {
  yaml_parser_t parser;
  yaml_document_t doc;
  yaml_parser_initialize(&parser);
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  if (!yaml_parser_load(&parser, &doc)) {
    lp_error_set(err, "InvalidYAML", "%s at line %zu, column %zu",
                 parser.problem ? parser.problem : "invalid YAML", parser.problem_mark.line + 1,
                 parser.problem_mark.column + 1);
    yaml_parser_delete(&parser);
    return NULL;
  }
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  converter cv = {.doc = &doc,
                  .left = (size_t)(doc.nodes.top - doc.nodes.start) + MAX_ALIAS_VALUES,
                  .bytes_left = len + MAX_ALIAS_BYTES};
  json_t *value = root ? convert(&cv, root, 0) : json_null();
  if (!value && cv.too_many)
    lp_error_set(err, "InvalidYAML",
                 "unsupported YAML: aliases expand to more than %d values or %u MiB of text beyond the "
                 "document's own",
                 MAX_ALIAS_VALUES, MAX_ALIAS_BYTES >> 20);
  else if (!value)
    lp_error_set(err, "InvalidYAML", "unsupported YAML: non-scalar mapping keys or nesting deeper than %d",
                 MAX_DEPTH);
  yaml_document_delete(&doc);
  yaml_parser_delete(&parser);
  return value;
}

json_t *lp_load_json_or_yaml_file(const char *path, lp_error **err) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    lp_error_set(err, errno == ENOENT ? "NotFound" : "IO", "%s: %s", path, strerror(errno));
    return NULL;
  }
  lp_buf b = LP_BUF_INIT;
  char chunk[8192];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) lp_buf_append(&b, chunk, n);
  fclose(f);
  const char *text = lp_buf_cstr(&b);
  size_t i = 0;
  while (i < b.len && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) i++;
  json_t *value = NULL;
  if (i < b.len && (text[i] == '{' || text[i] == '[')) {
    json_error_t jerr;
    value = json_loadb(text, b.len, 0, &jerr);
    if (!value) lp_error_set(err, "InvalidJSON", "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
  } else {
    lp_error *yerr = NULL;
    value = lp_yaml_parse(text, b.len, &yerr);
    if (!value) {
      lp_error_set(err, yerr->code, "%s: %s", path, yerr->message);
      lp_error_free(yerr);
    }
  }
  lp_buf_free(&b);
  return value;
}

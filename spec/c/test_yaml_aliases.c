/* The YAML reader (engine/core/yaml.c) bounds what aliases expand to: a few hundred bytes of nested
 * aliases (a "billion laughs" document, kept as spec/fuzz/corpus/fuzz_eval_input/alias-bomb.yaml) are
 * refused with InvalidYAML at once instead of building hundreds of millions of values, and so is a long
 * scalar aliased many times (gigabytes of copies from a small file), while ordinary
 * anchors, and many aliases of a small anchor, still read. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/buf.h"
#include "core/yaml.h"

/* a0 is 9 strings, each further level 9 aliases of the one before: 9^9 (387 million) strings. */
static char *laughs(int levels) {
  lp_buf b = LP_BUF_INIT;
  lp_buf_puts(&b, "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
  for (int i = 1; i < levels; i++) {
    lp_buf_printf(&b, "a%d: &a%d [", i, i);
    for (int j = 0; j < 9; j++) lp_buf_printf(&b, "%s*a%d", j ? ", " : "", i - 1);
    lp_buf_puts(&b, "]\n");
  }
  return lp_buf_take(&b, NULL);
}

static void test_alias_bomb_refused(void) {
  char *doc = laughs(9);
  lp_error *err = NULL;
  json_t *v = lp_yaml_parse(doc, strlen(doc), &err);
  CHECK(v == NULL);
  CHECK(err && strcmp(err->code, "InvalidYAML") == 0);
  if (err) CHECK_CONTAINS(err->message, "aliases expand to more than 100000 values");
  json_decref(v);
  lp_error_free(err);
  free(doc);
}

/* One 1 MiB scalar aliased 20 times: few values, but 20 MiB of copies from a 1 MiB file. */
static void test_long_scalar_aliased_refused(void) {
  lp_buf b = LP_BUF_INIT;
  lp_buf_puts(&b, "a: &a ");
  for (int i = 0; i < (1 << 20); i++) lp_buf_putc(&b, 'x');
  lp_buf_puts(&b, "\nb:\n");
  for (int i = 0; i < 20; i++) lp_buf_puts(&b, "- *a\n");
  lp_error *err = NULL;
  json_t *v = lp_yaml_parse(b.data, b.len, &err);
  CHECK(v == NULL);
  CHECK(err && strcmp(err->code, "InvalidYAML") == 0);
  if (err) CHECK_CONTAINS(err->message, "or 8 MiB of text beyond the document's own");
  json_decref(v);
  lp_error_free(err);
  lp_buf_free(&b);
}

static void test_aliases_within_bounds(void) {
  /* 4 levels: 9^4 = 6561 strings, well inside the bound */
  char *doc = laughs(4);
  lp_error *err = NULL;
  json_t *v = lp_yaml_parse(doc, strlen(doc), &err);
  CHECK(v != NULL && err == NULL);
  json_t *top = json_object_get(v, "a3");
  CHECK_INT(json_array_size(top), 9);
  json_t *a0 = json_array_get(json_array_get(json_array_get(top, 8), 8), 8); /* a3 -> a2 -> a1 -> a0 */
  CHECK_INT(json_array_size(a0), 9);
  CHECK_STR(json_string_value(json_array_get(a0, 8)), "lol");
  json_decref(v);
  lp_error_free(err);
  free(doc);
}

int main(void) {
  RUN(test_alias_bomb_refused);
  RUN(test_long_scalar_aliased_refused);
  RUN(test_aliases_within_bounds);
  return check_summary();
}

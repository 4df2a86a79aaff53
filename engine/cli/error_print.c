/* A failed command's {"error": ...} and the error's fields (error_print.h). */
#include "cli/error_print.h"

#include <stddef.h>
#include <string.h>

#include "core/buf.h"

/* The fields shown, in the operator's order: what the cloud said, about what, where, what to do.
 * The file row is shown as "at: file:line". */
static const struct {
  const char *label;
  size_t offset; /* of the char * in lp_error */
} FIELDS[] = {
    {"reason", offsetof(lp_error, reason)},
    {"action", offsetof(lp_error, action)},
    {"request id", offsetof(lp_error, request_id)},
    {"object", offsetof(lp_error, object)},
    {"at", offsetof(lp_error, file)},
    {"hint", offsetof(lp_error, hint)},
    {"traceback", offsetof(lp_error, traceback)},
};

/* "  label: value", a value's further lines indented under it. A traceback loses its heading (the label
 * says it) and its frames their tab, so they line up under the label. */
static void write_field(FILE *out, const char *label, const char *value, int line) {
  static const char heading[] = "stack traceback:\n";
  if (strncmp(value, heading, sizeof heading - 1) == 0) value += sizeof heading - 1;
  fprintf(out, "  %s: ", label);
  for (const char *s = value; *s; s++) {
    if (*s == '\t' && (s == value || s[-1] == '\n')) continue;
    fputc(*s, out);
    if (*s == '\n' && s[1]) fputs("    ", out);
  }
  if (line) fprintf(out, ":%d", line);
  if (value[strlen(value) - 1] != '\n') fputc('\n', out);
}

void lp_cli_write_error_fields(FILE *out, const lp_error *e) {
  for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++) {
    const char *value = *(char *const *)((const char *)e + FIELDS[i].offset);
    if (!value || !*value) continue;
    write_field(out, FIELDS[i].label, value, FIELDS[i].offset == offsetof(lp_error, file) ? e->line : 0);
  }
}

int lp_cli_print_error(const lp_error *e) {
  lp_buf doc = LP_BUF_INIT; /* lp_buf_json_string keeps invalid UTF-8 from a script printable */
  lp_buf_puts(&doc, "{\"error\":");
  lp_buf_json_string(&doc, e->message, strlen(e->message));
  lp_buf_puts(&doc, "}\n");
  fputs(doc.data, stdout);
  fflush(stdout);
  lp_buf_free(&doc);
  lp_cli_write_error_fields(stderr, e);
  return 1;
}

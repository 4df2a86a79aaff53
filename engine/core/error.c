#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void out_of_memory(size_t n) {
  fprintf(stderr, "{\"level\":\"error\",\"logger\":\"engine\",\"msg\":\"out of memory\",\"bytes\":%zu}\n", n);
  abort();
}

void *lp_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) out_of_memory(n);
  return p;
}

void *lp_xcalloc(size_t count, size_t n) {
  void *p = calloc(count ? count : 1, n ? n : 1);
  if (!p) out_of_memory(count * n);
  return p;
}

void *lp_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) out_of_memory(n);
  return q;
}

char *lp_xstrdup(const char *s) {
  return lp_xstrndup(s, strlen(s));
}

char *lp_xstrndup(const char *s, size_t n) {
  char *d = lp_xmalloc(n + 1);
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

static char *vasprintf_x(const char *fmt, va_list ap) {
  va_list copy;
  va_copy(copy, ap);
  int n = vsnprintf(NULL, 0, fmt, copy);
  va_end(copy);
  if (n < 0) n = 0;
  char *s = lp_xmalloc((size_t)n + 1);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  return s;
}

char *lp_xasprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = vasprintf_x(fmt, ap);
  va_end(ap);
  return s;
}

lp_error *lp_error_newv(const char *code, const char *fmt, va_list ap) {
  lp_error *e = lp_xcalloc(1, sizeof *e);
  e->code = lp_xstrdup(code ? code : "Error");
  e->message = vasprintf_x(fmt, ap);
  return e;
}

lp_error *lp_error_new(const char *code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lp_error *e = lp_error_newv(code, fmt, ap);
  va_end(ap);
  return e;
}

void lp_error_set(lp_error **out, const char *code, const char *fmt, ...) {
  if (!out || *out) return;
  va_list ap;
  va_start(ap, fmt);
  *out = lp_error_newv(code, fmt, ap);
  va_end(ap);
}

void lp_error_keep_first(lp_error **first, lp_error *err) {
  if (!*first)
    *first = err;
  else
    lp_error_free(err);
}

static char **part_of(lp_error *e, lp_error_part part) {
  switch (part) {
  case LP_ERROR_REASON:
    return &e->reason;
  case LP_ERROR_ACTION:
    return &e->action;
  case LP_ERROR_REQUEST_ID:
    return &e->request_id;
  case LP_ERROR_OBJECT:
    return &e->object;
  case LP_ERROR_FILE:
    return &e->file;
  case LP_ERROR_TRACEBACK:
    return &e->traceback;
  case LP_ERROR_HINT:
    break;
  }
  return &e->hint;
}

static const lp_error_part PARTS[] = {LP_ERROR_REASON, LP_ERROR_ACTION, LP_ERROR_REQUEST_ID, LP_ERROR_OBJECT,
                                      LP_ERROR_FILE,   LP_ERROR_HINT,   LP_ERROR_TRACEBACK};

/* A traceback longer than LP_ERROR_TRACEBACK_MAX keeps its head (the frames nearest the error) and
 * ends in LP_ERROR_TRACEBACK_CUT, so one runaway recursion cannot fill a log line. */
static char *bounded_traceback(const char *tb) {
  size_t n = strlen(tb), cut = sizeof LP_ERROR_TRACEBACK_CUT - 1;
  if (n <= LP_ERROR_TRACEBACK_MAX) return lp_xstrdup(tb);
  size_t keep = LP_ERROR_TRACEBACK_MAX - cut;
  while (keep > 0 && tb[keep] != '\n') keep--; /* end on a whole frame */
  char *out = lp_xmalloc(keep + cut + 1);
  memcpy(out, tb, keep);
  memcpy(out + keep, LP_ERROR_TRACEBACK_CUT, cut + 1);
  return out;
}

lp_error *lp_error_with(lp_error *e, lp_error_part part, const char *value) {
  char **slot = part_of(e, part);
  free(*slot);
  *slot = !value ? NULL : part == LP_ERROR_TRACEBACK ? bounded_traceback(value) : lp_xstrdup(value);
  return e;
}

lp_error *lp_error_at(lp_error *e, const char *file, int line) {
  lp_error_with(e, LP_ERROR_FILE, file);
  e->line = file ? line : 0;
  return e;
}

lp_error *lp_error_inherit(lp_error *e, const lp_error *src) {
  if (!src) return e;
  for (size_t i = 0; i < sizeof PARTS / sizeof PARTS[0]; i++) {
    const char *value = *part_of((lp_error *)src, PARTS[i]);
    if (!*part_of(e, PARTS[i]) && value) lp_error_with(e, PARTS[i], value);
  }
  if (!e->line && e->file && src->file && strcmp(e->file, src->file) == 0) e->line = src->line;
  return e;
}

lp_error *lp_error_copy(const lp_error *e) {
  if (!e) return NULL;
  lp_error *c = lp_error_new(e->code, "%s", e->message);
  lp_error_inherit(c, e);
  c->line = e->line;
  return c;
}

/* A part the message already names (a mapping that words the cloud's answer, "RunInstances: ...
 * (RequestId 5A2B...)") is not said again: one ID per message in events and conditions, as in logs. */
static const char *unsaid(const lp_error *e, const char *part) {
  return part && *part && !strstr(e->message, part) ? part : NULL;
}

char *lp_error_describe(const lp_error *e) {
  const char *action = unsaid(e, e->action), *request_id = unsaid(e, e->request_id);
  if (!action && !request_id) return lp_xstrdup(e->message);
  return lp_xasprintf("%s (%s%s%s%s%s)", e->message, action ? "action " : "", action ? action : "",
                      action && request_id ? ", " : "", request_id ? "request ID " : "",
                      request_id ? request_id : "");
}

void lp_error_free(lp_error *e) {
  if (!e) return;
  free(e->code);
  free(e->message);
  for (size_t i = 0; i < sizeof PARTS / sizeof PARTS[0]; i++) free(*part_of(e, PARTS[i]));
  free(e);
}

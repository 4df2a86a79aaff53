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
  lp_error *e = lp_xmalloc(sizeof *e);
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

void lp_error_free(lp_error *e) {
  if (!e) return;
  free(e->code);
  free(e->message);
  free(e);
}

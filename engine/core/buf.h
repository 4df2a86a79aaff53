/* A growable byte buffer for building log lines, metric pages and JSON. Not thread-safe; the owner
 * frees it with lp_buf_free (or takes the bytes with lp_buf_take). Appends abort on out-of-memory. */
#ifndef LUAPROV_CORE_BUF_H
#define LUAPROV_CORE_BUF_H

#include <stddef.h>

typedef struct lp_buf {
  char *data; /* always NUL-terminated when len > 0 or after lp_buf_cstr */
  size_t len;
  size_t cap;
} lp_buf;

#define LP_BUF_INIT                                                                                          \
  { NULL, 0, 0 }

void lp_buf_reserve(lp_buf *b, size_t extra);
void lp_buf_append(lp_buf *b, const void *data, size_t n);
void lp_buf_puts(lp_buf *b, const char *s);
void lp_buf_putc(lp_buf *b, char c);
void lp_buf_printf(lp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal, quotes included; invalid UTF-8 bytes become U+FFFD. */
void lp_buf_json_string(lp_buf *b, const char *s, size_t n);
/* Appends a number the way JSON and Prometheus both accept: integers without a fraction, others
 * with up to 17 significant digits; NaN and infinities as the given spellings. */
void lp_buf_number(lp_buf *b, double v, const char *nan, const char *pinf, const char *ninf);
const char *lp_buf_cstr(lp_buf *b);
/* Returns the bytes (NUL-terminated) and leaves b empty; the caller frees them with free(). */
char *lp_buf_take(lp_buf *b, size_t *len);
void lp_buf_reset(lp_buf *b);
void lp_buf_free(lp_buf *b);

#endif

#include "core/buf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

void lp_buf_reserve(lp_buf *b, size_t extra) {
  size_t need = b->len + extra + 1;
  if (need > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap *= 2;
    b->data = lp_xrealloc(b->data, cap);
    b->cap = cap;
  }
  b->data[b->len] = '\0'; /* an empty buffer reads as "" too */
}

void lp_buf_append(lp_buf *b, const void *data, size_t n) {
  lp_buf_reserve(b, n);
  if (n) memcpy(b->data + b->len, data, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void lp_buf_puts(lp_buf *b, const char *s) {
  lp_buf_append(b, s, strlen(s));
}

void lp_buf_putc(lp_buf *b, char c) {
  lp_buf_append(b, &c, 1);
}

void lp_buf_printf(lp_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list copy;
  va_copy(copy, ap);
  int n = vsnprintf(NULL, 0, fmt, copy);
  va_end(copy);
  if (n > 0) {
    lp_buf_reserve(b, (size_t)n);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
  }
  va_end(ap);
}

/* Length of the valid UTF-8 sequence starting at s (at most n bytes), or 0 when it is invalid. */
static size_t utf8_sequence(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  size_t len;
  unsigned int cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF)
    len = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF)
    len = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4)
    len = 4, cp = c & 0x07;
  else
    return 0;
  if (len > n) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return len;
}

void lp_buf_json_string(lp_buf *b, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)s;
  lp_buf_reserve(b, n + 2);
  lp_buf_putc(b, '"');
  size_t i = 0;
  while (i < n) {
    unsigned char c = p[i];
    if (c >= 0x80) {
      size_t len = utf8_sequence(p + i, n - i);
      if (len == 0) {
        lp_buf_puts(b, "\xEF\xBF\xBD");
        i++;
      } else {
        lp_buf_append(b, p + i, len);
        i += len;
      }
      continue;
    }
    switch (c) {
    case '"':
      lp_buf_puts(b, "\\\"");
      break;
    case '\\':
      lp_buf_puts(b, "\\\\");
      break;
    case '\n':
      lp_buf_puts(b, "\\n");
      break;
    case '\r':
      lp_buf_puts(b, "\\r");
      break;
    case '\t':
      lp_buf_puts(b, "\\t");
      break;
    case '\b':
      lp_buf_puts(b, "\\b");
      break;
    case '\f':
      lp_buf_puts(b, "\\f");
      break;
    default:
      if (c < 0x20 || c == 0x7F) {
        char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        lp_buf_append(b, esc, sizeof esc);
      } else {
        lp_buf_putc(b, (char)c);
      }
    }
    i++;
  }
  lp_buf_putc(b, '"');
}

void lp_buf_number(lp_buf *b, double v, const char *nan, const char *pinf, const char *ninf) {
  if (isnan(v)) {
    lp_buf_puts(b, nan);
  } else if (isinf(v)) {
    lp_buf_puts(b, v > 0 ? pinf : ninf);
  } else if (v == floor(v) && fabs(v) < 1e15) {
    /* + 0.0 turns -0.0 into 0.0: they compare equal, so they must not print "-0" and "0" */
    lp_buf_printf(b, "%.0f", v + 0.0);
  } else {
    /* the shortest of 15..17 digits that reads back as the same double */
    char tmp[32];
    for (int digits = 15; digits <= 17; digits++) {
      snprintf(tmp, sizeof tmp, "%.*g", digits, v);
      if (strtod(tmp, NULL) == v) break;
    }
    lp_buf_puts(b, tmp);
  }
}

const char *lp_buf_cstr(lp_buf *b) {
  lp_buf_reserve(b, 0);
  return b->data;
}

char *lp_buf_take(lp_buf *b, size_t *len) {
  lp_buf_reserve(b, 0);
  char *d = b->data;
  if (len) *len = b->len;
  b->data = NULL;
  b->len = b->cap = 0;
  return d;
}

void lp_buf_reset(lp_buf *b) {
  b->len = 0;
  if (b->data) b->data[0] = '\0';
}

void lp_buf_free(lp_buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

/* Errors that cross module boundaries: a stable code a caller can branch on plus a message for
 * operators. Functions that can fail take `lp_error **err` as their last argument; on failure they
 * store a new error there (when err is not NULL) and the caller frees it with lp_error_free. */
#ifndef LUAPROV_CORE_ERROR_H
#define LUAPROV_CORE_ERROR_H

#include <stdarg.h>
#include <stddef.h>

typedef struct lp_error {
  char *code;    /* stable identifier: "NotFound", "Timeout", "Throttled", "Syntax", ... */
  char *message; /* one line for operators; never contains credentials */
} lp_error;

/* Returns a new error; never NULL (aborts on out-of-memory, like the rest of the engine's small
 * allocations). The caller owns it. */
lp_error *lp_error_new(const char *code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
lp_error *lp_error_newv(const char *code, const char *fmt, va_list ap);

/* Stores a new error in *out when out is not NULL and *out is empty; a first error wins. */
void lp_error_set(lp_error **out, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Keeps err (owned; NULL is a no-op) in *first when that is empty and frees it otherwise: the first
 * error of a run that goes on after failures (parallel writes, steps that all run) is the one reported. */
void lp_error_keep_first(lp_error **first, lp_error *err);

/* Frees e and its strings; NULL is a no-op. */
void lp_error_free(lp_error *e);

/* Small allocation helpers that abort with a message instead of returning NULL. The engine treats
 * running out of memory for bookkeeping as fatal; Lua states have their own capped allocator. */
void *lp_xmalloc(size_t n);
void *lp_xcalloc(size_t count, size_t n);
void *lp_xrealloc(void *p, size_t n);
char *lp_xstrdup(const char *s);
char *lp_xstrndup(const char *s, size_t n);
char *lp_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif

/* Errors that cross module boundaries: a stable code a caller can branch on plus a message for
 * operators. Functions that can fail take `lp_error **err` as their last argument; on failure they
 * store a new error there (when err is not NULL) and the caller frees it with lp_error_free. */
#ifndef LUAPROV_CORE_ERROR_H
#define LUAPROV_CORE_ERROR_H

#include <stdarg.h>
#include <stddef.h>

/* Every string is owned by the error (freed by lp_error_free, copied by lp_error_copy). code and
 * message are never NULL; the others are NULL when unknown and line is 0 then. The parts are filled
 * where they are known (a mapping's error table, a Lua error's position), never parsed back out of
 * message; docs/reference-metrics-logs.md#error-fields lists the log keys they become. */
typedef struct lp_error {
  char *code;       /* stable identifier: "NotFound", "Timeout", "Throttled", "Syntax", ... */
  char *message;    /* one line for operators; never contains credentials */
  char *reason;     /* the cloud's own code: "QuotaExceed.ElasticQuota" */
  char *action;     /* the API action that failed: "RunInstances" */
  char *request_id; /* the cloud's request ID of that call */
  char *object;     /* what the error concerns: a Kubernetes object's name, an instance ID */
  char *file;       /* the script file the error was raised in: "drift.lua" */
  int line;         /* its line in file; 0 when unknown */
  char *hint;       /* what the operator should do about it */
  char *traceback;  /* the Lua traceback of a script error ("stack traceback:\n\t..."), at most
                     * LP_ERROR_TRACEBACK_MAX bytes (longer ones end in LP_ERROR_TRACEBACK_CUT) */
} lp_error;

#define LP_ERROR_TRACEBACK_MAX 2048
#define LP_ERROR_TRACEBACK_CUT "\n\t...(traceback truncated)"

typedef enum {
  LP_ERROR_REASON,
  LP_ERROR_ACTION,
  LP_ERROR_REQUEST_ID,
  LP_ERROR_OBJECT,
  LP_ERROR_FILE,
  LP_ERROR_HINT,
  LP_ERROR_TRACEBACK, /* lp_error_with bounds it to LP_ERROR_TRACEBACK_MAX */
} lp_error_part;

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

/* Replaces one part of e with a copy of value (NULL clears it); returns e so calls chain. */
lp_error *lp_error_with(lp_error *e, lp_error_part part, const char *value);

/* Sets e's script position; file NULL clears both. Returns e. */
lp_error *lp_error_at(lp_error *e, const char *file, int line);

/* A deep copy of e (every part); NULL for NULL. */
lp_error *lp_error_copy(const lp_error *e);

/* Copies every part e lacks and src has (code and message excepted): a wrapping error keeps what
 * the error it wraps knew. Returns e. */
lp_error *lp_error_inherit(lp_error *e, const lp_error *src);

/* e's message followed by the action and request ID when known and not already in the message, "text
 * (action RunInstances, request ID 5A2B...)", for events and conditions; malloc'd. A mapping whose message
 * names them ("RunInstances: ... (RequestId 5A2B..., HTTP 400)") is shown as it is, so every place says the
 * ID once and in the same words (docs/troubleshooting.md). */
char *lp_error_describe(const lp_error *e);

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

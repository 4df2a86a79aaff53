/* Structured logs: one JSON object per line on stderr with the stable keys ts (RFC 3339, UTC,
 * milliseconds), level, logger, msg, then the fields in the order given. When stderr is a terminal
 * (or the format is forced to text) lines are human-readable instead:
 *   2026-11-30T03:22:51.123Z INFO  engine.script  reloaded  generation=7 dir=/etc/luaprov
 * In the text form a field value is bare unless it is empty, holds a space or '=', or needs escaping
 * (quotes, control characters, invalid UTF-8); then it is the JSON string literal. Colour is used
 * only when the fd is a terminal.
 * Field values whose key names a secret are written as "[redacted]", whatever their type (a NULL
 * string stays null: that it is missing is no secret): credentials never reach a log line even when
 * a caller passes one by mistake. A key names a secret when, lower-cased and with everything but
 * letters and digits removed ("X-Api-Key" -> "xapikey"), it contains one of: password, passwd,
 * passphrase, secret (client_secret, AccessKeySecret), token, authorization, credential, privatekey,
 * apikey, signature, cookie.
 * Loop thread only; every line is written with a single write(2) (continued after a short write or
 * EINTR), so nothing is buffered and there is nothing to lose at exit (lp_log_flush exists for the
 * shutdown path's clarity and for fsync-like sinks in tests). On a non-blocking fd that stays full
 * for a second the rest of the line is dropped rather than stalling the loop. */
#ifndef LUAPROV_CORE_LOG_H
#define LUAPROV_CORE_LOG_H

#include <stddef.h>

typedef enum { LP_LOG_DEBUG = 0, LP_LOG_INFO, LP_LOG_WARN, LP_LOG_ERROR } lp_log_level;
typedef enum { LP_LOG_FORMAT_AUTO = 0, LP_LOG_FORMAT_JSON, LP_LOG_FORMAT_TEXT } lp_log_format;

typedef enum {
  LP_FIELD_NONE = 0, /* placeholder, skipped */
  LP_FIELD_STR,      /* v.s, NULL written as null */
  LP_FIELD_INT,      /* v.i */
  LP_FIELD_NUM,      /* v.d; NaN and infinities as the strings "NaN", "+Inf", "-Inf" in JSON */
  LP_FIELD_BOOL,     /* v.b */
  LP_FIELD_JSON,     /* v.s is already valid JSON and is embedded as is (CR/LF become spaces) */
} lp_field_type;

typedef struct lp_field {
  const char *key;
  lp_field_type type;
  union {
    const char *s;
    long long i;
    double d;
    int b;
  } v;
} lp_field;

#define LPF_STR(k, x)  ((lp_field){.key = (k), .type = LP_FIELD_STR, .v.s = (x)})
#define LPF_INT(k, x)  ((lp_field){.key = (k), .type = LP_FIELD_INT, .v.i = (long long)(x)})
#define LPF_NUM(k, x)  ((lp_field){.key = (k), .type = LP_FIELD_NUM, .v.d = (double)(x)})
#define LPF_BOOL(k, x) ((lp_field){.key = (k), .type = LP_FIELD_BOOL, .v.b = !!(x)})
#define LPF_JSON(k, x) ((lp_field){.key = (k), .type = LP_FIELD_JSON, .v.s = (x)})

/* Sets the minimum level, the format and the output file descriptor (2 by default). AUTO picks
 * TEXT when fd is a terminal and JSON otherwise. May be called again at any time. */
void lp_log_configure(lp_log_level min_level, lp_log_format format, int fd);

/* Parses "debug", "info", "warn"/"warning", "error" (case-insensitive). Returns 0 and stores the
 * level, or -1 for anything else. */
int lp_log_parse_level(const char *s, lp_log_level *out);
const char *lp_log_level_name(lp_log_level level);

/* Non-zero when a line of this level would be written. */
int lp_log_enabled(lp_log_level level);

/* Writes one line. logger is a dotted component name ("engine.script"); msg a constant text (the
 * variable parts belong in fields). Fields of type LP_FIELD_NONE are skipped. */
void lp_log_emit(lp_log_level level, const char *logger, const char *msg, const lp_field *fields,
                 size_t nfields);

/* Renders one line (newline included) without writing it; the caller frees the result. ts is seconds
 * since the epoch (shown rounded to the millisecond). AUTO renders JSON, TEXT never has colour. Used
 * by lp_log_emit and by the unit tests. */
char *lp_log_render(lp_log_format format, double ts, lp_log_level level, const char *logger, const char *msg,
                    const lp_field *fields, size_t nfields);

/* Non-zero when key names a credential whose value must never be logged. */
int lp_log_key_is_secret(const char *key);

void lp_log_flush(void);

/* lp_log(LP_LOG_INFO, "engine.script", "reloaded", LPF_INT("generation", 7)); fields optional. */
#define lp_log(level, logger, msg, ...)                                                                      \
  do {                                                                                                       \
    if (lp_log_enabled(level)) {                                                                             \
      const lp_field lp_log_fields_[] = {{.type = LP_FIELD_NONE}, __VA_ARGS__};                              \
      lp_log_emit((level), (logger), (msg), lp_log_fields_,                                                  \
                  sizeof lp_log_fields_ / sizeof lp_log_fields_[0]);                                         \
    }                                                                                                        \
  } while (0)

#define lp_debug(logger, msg, ...)    lp_log(LP_LOG_DEBUG, logger, msg, __VA_ARGS__)
#define lp_info(logger, msg, ...)     lp_log(LP_LOG_INFO, logger, msg, __VA_ARGS__)
#define lp_warn(logger, msg, ...)     lp_log(LP_LOG_WARN, logger, msg, __VA_ARGS__)
#define lp_errorlog(logger, msg, ...) lp_log(LP_LOG_ERROR, logger, msg, __VA_ARGS__)

#endif

#include "core/log.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/clock.h"

/* How long a line may wait for a non-blocking sink (a pipe libuv made O_NONBLOCK) that is full and
 * not draining. Past it the rest of the line is dropped: a stalled log reader must not freeze the
 * event loop that runs the controller. */
#define WRITE_STALL_MS 1000

static struct {
  lp_log_level min_level;
  lp_log_format format;
  int fd;
  int tty; /* -1 until first asked: isatty is a syscall we do not want per line */
} sink = {LP_LOG_INFO, LP_LOG_FORMAT_AUTO, 2, -1};

static const char *const level_names[] = {"debug", "info", "warn", "error"};
static const char *const level_labels[] = {"DEBUG", "INFO", "WARN", "ERROR"};
/* zap's console colours, so a terminal looks like the Go controllers next to it */
static const char *const level_colors[] = {"\033[35m", "\033[34m", "\033[33m", "\033[31m"};
#define COLOR_DIM   "\033[2m"
#define COLOR_RESET "\033[0m"

/* Matched against the key folded to lower case with everything but letters and digits dropped, so
 * "X-Auth-Token", "accessKeySecret" and "ACCESS_KEY_SECRET" all hit. Over-redacting a harmless key
 * ("token_count") costs a debugging detail; under-redacting leaks a credential into log storage. */
static const char *const secret_words[] = {
    "password",   "passwd",     "passphrase", "secret",    "token",  "authorization",
    "credential", "privatekey", "apikey",     "signature", "cookie",
};

static int is_level(lp_log_level level) {
  return level >= LP_LOG_DEBUG && level <= LP_LOG_ERROR;
}

void lp_log_configure(lp_log_level min_level, lp_log_format format, int fd) {
  sink.min_level = min_level;
  sink.format = format;
  sink.fd = fd;
  sink.tty = isatty(fd);
}

int lp_log_parse_level(const char *s, lp_log_level *out) {
  static const struct {
    const char *name;
    lp_log_level level;
  } names[] = {{"debug", LP_LOG_DEBUG},
               {"info", LP_LOG_INFO},
               {"warn", LP_LOG_WARN},
               {"warning", LP_LOG_WARN},
               {"error", LP_LOG_ERROR}};
  if (!s) return -1;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (strcasecmp(s, names[i].name) == 0) {
      *out = names[i].level;
      return 0;
    }
  }
  return -1;
}

const char *lp_log_level_name(lp_log_level level) {
  return is_level(level) ? level_names[level] : "unknown";
}

int lp_log_enabled(lp_log_level level) {
  return level >= sink.min_level;
}

/* Does needle occur in key once key is folded (see secret_words)? */
static int folded_contains(const char *key, const char *needle) {
  for (const char *start = key; *start; start++) {
    if (!isalnum((unsigned char)*start)) continue;
    const char *k = start, *n = needle;
    while (*n && *k) {
      if (!isalnum((unsigned char)*k)) {
        k++;
        continue;
      }
      if (tolower((unsigned char)*k) != *n) break;
      k++;
      n++;
    }
    if (!*n) return 1;
  }
  return 0;
}

int lp_log_key_is_secret(const char *key) {
  if (!key) return 0;
  for (size_t i = 0; i < sizeof secret_words / sizeof secret_words[0]; i++)
    if (folded_contains(key, secret_words[i])) return 1;
  return 0;
}

static void put_timestamp(lp_buf *b, double ts) {
  /* a broken caller clock still yields a parseable line (and no out-of-range time_t conversion) */
  if (!(fabs(ts) < 1e12)) ts = 0;
  /* whole milliseconds first, so .9996 carries into the next second instead of printing ".1000" */
  double total_ms = floor(ts * 1000.0 + 0.5);
  double secs = floor(total_ms / 1000.0);
  time_t t = (time_t)secs;
  struct tm tm;
  gmtime_r(&t, &tm);
  lp_buf_printf(b, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(total_ms - secs * 1000.0));
}

/* Raw JSON from a caller may be pretty-printed. Outside strings (inside them a raw line break is
 * invalid JSON anyway) CR and LF are plain whitespace, so turning them into spaces keeps the value
 * equivalent and the line a line. */
static void put_raw_json(lp_buf *b, const char *s) {
  size_t start = b->len;
  lp_buf_puts(b, s);
  for (size_t i = start; i < b->len; i++)
    if (b->data[i] == '\n' || b->data[i] == '\r') b->data[i] = ' ';
}

/* Text form: bare when the JSON spelling would not change it (and, for field values, when it has no
 * space or '=' that would confuse a logfmt reader); otherwise the JSON string literal, which escapes
 * quotes, control characters and invalid UTF-8 the same way the JSON form does. */
static void put_text_string(lp_buf *b, const char *s, int logfmt_value) {
  size_t n = strlen(s);
  lp_buf quoted = LP_BUF_INIT;
  lp_buf_json_string(&quoted, s, n);
  int bare = quoted.len == n + 2 && memcmp(quoted.data + 1, s, n) == 0;
  if (logfmt_value && (n == 0 || strpbrk(s, " =") != NULL)) bare = 0;
  if (bare)
    lp_buf_append(b, s, n);
  else
    lp_buf_append(b, quoted.data, quoted.len);
  lp_buf_free(&quoted);
}

/* A NULL key is a caller's bug; the line it was meant to carry is still worth having. */
static const char *field_key(const lp_field *f) {
  return f->key ? f->key : "";
}

static void put_value(lp_buf *b, const lp_field *f, int json) {
  if (lp_log_key_is_secret(f->key) && !(f->type == LP_FIELD_STR && !f->v.s)) {
    lp_buf_puts(b, json ? "\"[redacted]\"" : "[redacted]");
    return;
  }
  switch (f->type) {
  case LP_FIELD_STR:
    if (!f->v.s)
      lp_buf_puts(b, "null");
    else if (json)
      lp_buf_json_string(b, f->v.s, strlen(f->v.s));
    else
      put_text_string(b, f->v.s, 1);
    break;
  case LP_FIELD_INT:
    lp_buf_printf(b, "%lld", f->v.i);
    break;
  case LP_FIELD_NUM:
    /* JSON has no NaN or infinities; strings keep the line parseable and the value visible */
    if (json)
      lp_buf_number(b, f->v.d, "\"NaN\"", "\"+Inf\"", "\"-Inf\"");
    else
      lp_buf_number(b, f->v.d, "NaN", "+Inf", "-Inf");
    break;
  case LP_FIELD_BOOL:
    lp_buf_puts(b, f->v.b ? "true" : "false");
    break;
  case LP_FIELD_JSON:
    if (f->v.s)
      put_raw_json(b, f->v.s);
    else
      lp_buf_puts(b, "null");
    break;
  case LP_FIELD_NONE:
    break;
  }
}

static void render_json(lp_buf *b, double ts, lp_log_level level, const char *logger, const char *msg,
                        const lp_field *fields, size_t nfields) {
  lp_buf_puts(b, "{\"ts\":\"");
  put_timestamp(b, ts);
  lp_buf_printf(b, "\",\"level\":\"%s\",\"logger\":", lp_log_level_name(level));
  lp_buf_json_string(b, logger, strlen(logger));
  lp_buf_puts(b, ",\"msg\":");
  lp_buf_json_string(b, msg, strlen(msg));
  for (size_t i = 0; i < nfields; i++) {
    if (fields[i].type == LP_FIELD_NONE) continue;
    lp_buf_putc(b, ',');
    lp_buf_json_string(b, field_key(&fields[i]), strlen(field_key(&fields[i])));
    lp_buf_putc(b, ':');
    put_value(b, &fields[i], 1);
  }
  lp_buf_puts(b, "}\n");
}

static void render_text(lp_buf *b, int color, double ts, lp_log_level level, const char *logger,
                        const char *msg, const lp_field *fields, size_t nfields) {
  const char *label = level_labels[level];
  if (color) lp_buf_puts(b, COLOR_DIM);
  put_timestamp(b, ts);
  if (color)
    lp_buf_printf(b, COLOR_RESET " %s%s" COLOR_RESET, level_colors[level], label);
  else
    lp_buf_printf(b, " %s", label);
  /* padding outside the colour codes keeps the columns aligned on a terminal */
  lp_buf_printf(b, "%*s", (int)(6 - strlen(label)), "");
  put_text_string(b, logger, 0);
  lp_buf_puts(b, "  ");
  put_text_string(b, msg, 0);
  int first = 1;
  for (size_t i = 0; i < nfields; i++) {
    if (fields[i].type == LP_FIELD_NONE) continue;
    lp_buf_puts(b, first ? "  " : " ");
    first = 0;
    if (color) lp_buf_puts(b, COLOR_DIM);
    put_text_string(b, field_key(&fields[i]), 1);
    lp_buf_putc(b, '=');
    if (color) lp_buf_puts(b, COLOR_RESET);
    put_value(b, &fields[i], 0);
  }
  lp_buf_putc(b, '\n');
}

static void render(lp_buf *b, lp_log_format format, int color, double ts, lp_log_level level,
                   const char *logger, const char *msg, const lp_field *fields, size_t nfields) {
  if (!logger) logger = "engine";
  if (!msg) msg = "";
  /* a level outside the enum came from a cast somewhere; showing it as an error gets it looked at */
  if (!is_level(level)) level = LP_LOG_ERROR;
  if (format == LP_LOG_FORMAT_TEXT)
    render_text(b, color, ts, level, logger, msg, fields, nfields);
  else
    render_json(b, ts, level, logger, msg, fields, nfields);
}

char *lp_log_render(lp_log_format format, double ts, lp_log_level level, const char *logger, const char *msg,
                    const lp_field *fields, size_t nfields) {
  lp_buf b = LP_BUF_INIT;
  render(&b, format, 0, ts, level, logger, msg, fields, nfields);
  return lp_buf_take(&b, NULL);
}

/* One write(2) per line so concurrent writers to the same pipe (the engine and a child, or several
 * processes sharing a container's stderr) interleave whole lines; the loop only finishes a line the
 * kernel accepted in part. */
static void write_line(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd pfd = {.fd = fd, .events = POLLOUT};
      int r;
      do r = poll(&pfd, 1, WRITE_STALL_MS);
      while (r < 0 && errno == EINTR);
      if (r <= 0) return;
    } else {
      return; /* a closed or broken sink: nowhere left to report it */
    }
  }
}

void lp_log_emit(lp_log_level level, const char *logger, const char *msg, const lp_field *fields,
                 size_t nfields) {
  if (!lp_log_enabled(level)) return;
  if (sink.tty < 0) sink.tty = isatty(sink.fd);
  lp_log_format format = sink.format;
  if (format == LP_LOG_FORMAT_AUTO) format = sink.tty ? LP_LOG_FORMAT_TEXT : LP_LOG_FORMAT_JSON;
  lp_buf b = LP_BUF_INIT;
  render(&b, format, format == LP_LOG_FORMAT_TEXT && sink.tty, lp_clock_wall(), level, logger, msg, fields,
         nfields);
  write_line(sink.fd, b.data, b.len);
  lp_buf_free(&b);
}

/* Nothing is buffered: every line reached the kernel in lp_log_emit. */
void lp_log_flush(void) {}

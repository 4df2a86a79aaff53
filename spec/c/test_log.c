/* Structured logs: the exact JSON and text lines, redaction, level filtering on a real fd. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <unistd.h>

#include "check.h"
#include "core/log.h"

#define TS         1796008971.123 /* 2026-11-30T03:22:51.123Z */
#define NFIELDS(a) (sizeof(a) / sizeof((a)[0]))

static void check_render(lp_log_format format, double ts, lp_log_level level, const char *logger,
                         const char *msg, const lp_field *fields, size_t n, const char *expected) {
  char *line = lp_log_render(format, ts, level, logger, msg, fields, n);
  CHECK_STR(line, expected);
  free(line);
}

static void test_json_shape(void) {
  lp_field f[] = {LPF_INT("generation", 7), LPF_STR("dir", "/etc/luaprov")};
  check_render(LP_LOG_FORMAT_JSON, TS, LP_LOG_INFO, "engine.script", "reloaded", f, NFIELDS(f),
               "{\"ts\":\"2026-11-30T03:22:51.123Z\",\"level\":\"info\",\"logger\":\"engine.script\","
               "\"msg\":\"reloaded\",\"generation\":7,\"dir\":\"/etc/luaprov\"}\n");
  check_render(LP_LOG_FORMAT_JSON, 0, LP_LOG_ERROR, "x", "m", NULL, 0,
               "{\"ts\":\"1970-01-01T00:00:00.000Z\",\"level\":\"error\",\"logger\":\"x\",\"msg\":\"m\"}\n");
  /* AUTO without an fd to look at means JSON */
  check_render(LP_LOG_FORMAT_AUTO, 0, LP_LOG_DEBUG, "x", "m", NULL, 0,
               "{\"ts\":\"1970-01-01T00:00:00.000Z\",\"level\":\"debug\",\"logger\":\"x\",\"msg\":\"m\"}\n");
}

static void test_timestamp_rounding(void) {
  /* .9996 rounds to the next whole second rather than printing ".1000" */
  check_render(LP_LOG_FORMAT_JSON, 1796008971.9996, LP_LOG_WARN, "x", "m", NULL, 0,
               "{\"ts\":\"2026-11-30T03:22:52.000Z\",\"level\":\"warn\",\"logger\":\"x\",\"msg\":\"m\"}\n");
  check_render(LP_LOG_FORMAT_JSON, -0.5, LP_LOG_WARN, "x", "m", NULL, 0,
               "{\"ts\":\"1969-12-31T23:59:59.500Z\",\"level\":\"warn\",\"logger\":\"x\",\"msg\":\"m\"}\n");
  /* a broken clock still gives a parseable line */
  check_render(LP_LOG_FORMAT_JSON, NAN, LP_LOG_WARN, "x", "m", NULL, 0,
               "{\"ts\":\"1970-01-01T00:00:00.000Z\",\"level\":\"warn\",\"logger\":\"x\",\"msg\":\"m\"}\n");
  check_render(LP_LOG_FORMAT_JSON, 1796008971.0004, LP_LOG_WARN, "x", "m", NULL, 0,
               "{\"ts\":\"2026-11-30T03:22:51.000Z\",\"level\":\"warn\",\"logger\":\"x\",\"msg\":\"m\"}\n");
}

static void test_json_escaping(void) {
  lp_field f[] = {LPF_STR("body", "say \"hi\"\n\tback\\slash\x01\x7f"), LPF_STR("utf8", "caf\xc3\xa9 \xff!"),
                  LPF_STR("we\"ird", "k")};
  check_render(
      LP_LOG_FORMAT_JSON, TS, LP_LOG_INFO, "engine\n", "line1\nline2 \"q\"", f, NFIELDS(f),
      "{\"ts\":\"2026-11-30T03:22:51.123Z\",\"level\":\"info\",\"logger\":\"engine\\n\","
      "\"msg\":\"line1\\nline2 \\\"q\\\"\",\"body\":\"say \\\"hi\\\"\\n\\tback\\\\slash\\u0001\\u007f\","
      "\"utf8\":\"caf\xc3\xa9 \xef\xbf\xbd!\",\"we\\\"ird\":\"k\"}\n");
}

static void test_field_types(void) {
  lp_field f[] = {
      LPF_INT("neg", -42),       LPF_INT("max", 9223372036854775807LL),
      {.type = LP_FIELD_NONE},   LPF_NUM("ratio", 0.25),
      LPF_NUM("whole", 3.0),     LPF_NUM("nan", NAN),
      LPF_NUM("pinf", INFINITY), LPF_NUM("ninf", -INFINITY),
      LPF_BOOL("ok", 5),         LPF_BOOL("no", 0),
      LPF_STR("missing", NULL),  LPF_JSON("obj", "{\"a\": [1, 2],\n \"b\": null}"),
      LPF_JSON("none", NULL),
  };
  check_render(LP_LOG_FORMAT_JSON, TS, LP_LOG_INFO, "t", "types", f, NFIELDS(f),
               "{\"ts\":\"2026-11-30T03:22:51.123Z\",\"level\":\"info\",\"logger\":\"t\",\"msg\":\"types\","
               "\"neg\":-42,\"max\":9223372036854775807,\"ratio\":0.25,\"whole\":3,\"nan\":\"NaN\","
               "\"pinf\":\"+Inf\",\"ninf\":\"-Inf\",\"ok\":true,\"no\":false,\"missing\":null,"
               "\"obj\":{\"a\": [1, 2],  \"b\": null},\"none\":null}\n");
  check_render(LP_LOG_FORMAT_TEXT, TS, LP_LOG_INFO, "t", "types", f, NFIELDS(f),
               "2026-11-30T03:22:51.123Z INFO  t  types  neg=-42 max=9223372036854775807 ratio=0.25 whole=3 "
               "nan=NaN pinf=+Inf ninf=-Inf ok=true no=false missing=null obj={\"a\": [1, 2],  \"b\": null} "
               "none=null\n");
}

static void test_text_form(void) {
  lp_field f[] = {LPF_INT("generation", 7), LPF_STR("dir", "/etc/luaprov")};
  check_render(LP_LOG_FORMAT_TEXT, TS, LP_LOG_INFO, "engine.script", "reloaded", f, NFIELDS(f),
               "2026-11-30T03:22:51.123Z INFO  engine.script  reloaded  generation=7 dir=/etc/luaprov\n");
  check_render(LP_LOG_FORMAT_TEXT, TS, LP_LOG_ERROR, "engine.script", "handler failed", NULL, 0,
               "2026-11-30T03:22:51.123Z ERROR engine.script  handler failed\n");
  check_render(LP_LOG_FORMAT_TEXT, TS, LP_LOG_DEBUG, "a", "b", NULL, 0,
               "2026-11-30T03:22:51.123Z DEBUG a  b\n");
  /* values a logfmt reader would split are quoted; control characters never reach the terminal raw */
  lp_field q[] = {LPF_STR("reason", "two words"), LPF_STR("empty", ""),   LPF_STR("eq", "a=b"),
                  LPF_STR("nl", "a\nb"),          LPF_STR("bad", "\xff"), LPF_STR("odd key", "v")};
  check_render(LP_LOG_FORMAT_TEXT, TS, LP_LOG_WARN, "x", "evil\nmsg", q, NFIELDS(q),
               "2026-11-30T03:22:51.123Z WARN  x  \"evil\\nmsg\"  reason=\"two words\" empty=\"\" eq=\"a=b\" "
               "nl=\"a\\nb\" bad=\"\xef\xbf\xbd\" \"odd key\"=v\n");
}

static void test_redaction(void) {
  const char *secret[] = {
      "password",        "Passwd",  "db_password",  "client_secret", "accessKeySecret", "ACCESS_KEY_SECRET",
      "AccessKeySecret", "token",   "X-Auth-Token", "Authorization", "credentials",     "private_key",
      "privateKey",      "api_key", "x-api-key",    "Signature",     "Cookie",          "passphrase"};
  for (size_t i = 0; i < NFIELDS(secret); i++) {
    if (!lp_log_key_is_secret(secret[i])) fprintf(stderr, "  not secret: %s\n", secret[i]);
    CHECK(lp_log_key_is_secret(secret[i]));
  }
  const char *plain[] = {"key",    "name", "access_key_id", "region", "instance_id",
                         "author", "pass", "sign",          ""};
  for (size_t i = 0; i < NFIELDS(plain); i++) {
    if (lp_log_key_is_secret(plain[i])) fprintf(stderr, "  secret: %s\n", plain[i]);
    CHECK(!lp_log_key_is_secret(plain[i]));
  }
  CHECK(!lp_log_key_is_secret(NULL));

  lp_field f[] = {LPF_STR("user", "admin"), LPF_STR("Password", "hunter2"), LPF_INT("api_key", 1234),
                  LPF_JSON("credentials", "{\"k\":\"v\"}"), LPF_STR("token", NULL)};
  check_render(
      LP_LOG_FORMAT_JSON, TS, LP_LOG_INFO, "auth", "login", f, NFIELDS(f),
      "{\"ts\":\"2026-11-30T03:22:51.123Z\",\"level\":\"info\",\"logger\":\"auth\",\"msg\":\"login\","
      "\"user\":\"admin\",\"Password\":\"[redacted]\",\"api_key\":\"[redacted]\","
      "\"credentials\":\"[redacted]\",\"token\":null}\n");
  check_render(
      LP_LOG_FORMAT_TEXT, TS, LP_LOG_INFO, "auth", "login", f, NFIELDS(f),
      "2026-11-30T03:22:51.123Z INFO  auth  login  user=admin Password=[redacted] api_key=[redacted] "
      "credentials=[redacted] token=null\n");
}

static void test_parse_level(void) {
  lp_log_level l = LP_LOG_ERROR;
  CHECK_INT(lp_log_parse_level("debug", &l), 0);
  CHECK_INT(l, LP_LOG_DEBUG);
  CHECK_INT(lp_log_parse_level("INFO", &l), 0);
  CHECK_INT(l, LP_LOG_INFO);
  CHECK_INT(lp_log_parse_level("Warn", &l), 0);
  CHECK_INT(l, LP_LOG_WARN);
  l = LP_LOG_DEBUG;
  CHECK_INT(lp_log_parse_level("warning", &l), 0);
  CHECK_INT(l, LP_LOG_WARN);
  CHECK_INT(lp_log_parse_level("ERROR", &l), 0);
  CHECK_INT(l, LP_LOG_ERROR);
  l = LP_LOG_INFO;
  CHECK_INT(lp_log_parse_level("fatal", &l), -1);
  CHECK_INT(lp_log_parse_level("", &l), -1);
  CHECK_INT(lp_log_parse_level("info ", &l), -1);
  CHECK_INT(lp_log_parse_level(NULL, &l), -1);
  CHECK_INT(l, LP_LOG_INFO);
  CHECK_STR(lp_log_level_name(LP_LOG_WARN), "warn");
  CHECK_STR(lp_log_level_name((lp_log_level)9), "unknown");
}

/* Everything currently readable from a non-blocking fd, NUL-terminated. */
static char *drain(int fd) {
  size_t cap = 1 << 16, len = 0;
  char *out = malloc(cap);
  ssize_t n;
  while ((n = read(fd, out + len, cap - len - 1)) > 0) len += (size_t)n;
  out[len] = '\0';
  return out;
}

static size_t count_lines(const char *s) {
  size_t n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

static void test_filtering_on_a_pipe(void) {
  int p[2];
  CHECK_INT(pipe(p), 0);
  fcntl(p[0], F_SETFL, O_NONBLOCK);
  lp_log_configure(LP_LOG_WARN, LP_LOG_FORMAT_AUTO, p[1]);
  CHECK(!lp_log_enabled(LP_LOG_DEBUG));
  CHECK(!lp_log_enabled(LP_LOG_INFO));
  CHECK(lp_log_enabled(LP_LOG_WARN));
  CHECK(lp_log_enabled(LP_LOG_ERROR));

  lp_info("engine.test", "dropped", LPF_INT("n", 1));
  lp_debug("engine.test", "dropped", LPF_INT("n", 2));
  lp_warn("engine.test", "kept", LPF_INT("n", 3), LPF_STR("secret_ref", "s3cr3t"));
  lp_errorlog("engine.test", "also kept", LPF_BOOL("fatal", 0));
  lp_log_emit(LP_LOG_INFO, "engine.test", "dropped too", NULL, 0);
  lp_log_flush();

  char *out = drain(p[0]);
  CHECK_INT(count_lines(out), 2);
  /* a pipe is not a terminal, so AUTO wrote JSON; ts is the wall clock, so compare from "level" on */
  CHECK(strncmp(out, "{\"ts\":\"", 7) == 0);
  CHECK_CONTAINS(out, "Z\",\"level\":\"warn\",\"logger\":\"engine.test\",\"msg\":\"kept\",\"n\":3,"
                      "\"secret_ref\":\"[redacted]\"}\n{\"ts\":\"");
  CHECK_CONTAINS(out,
                 "\"level\":\"error\",\"logger\":\"engine.test\",\"msg\":\"also kept\",\"fatal\":false}\n");
  CHECK(strstr(out, "dropped") == NULL);
  CHECK(strstr(out, "s3cr3t") == NULL);
  free(out);

  /* forced text on a non-terminal: readable layout, no colour codes */
  lp_log_configure(LP_LOG_DEBUG, LP_LOG_FORMAT_TEXT, p[1]);
  lp_debug("engine.test", "plain", LPF_STR("token", "abc"));
  out = drain(p[0]);
  CHECK_CONTAINS(out, "Z DEBUG engine.test  plain  token=[redacted]\n");
  CHECK(strchr(out, '\033') == NULL);
  CHECK_INT(count_lines(out), 1);
  free(out);

  lp_log_configure(LP_LOG_INFO, LP_LOG_FORMAT_AUTO, 2);
  close(p[0]);
  close(p[1]);
}

typedef struct {
  int fd;
  char *data; /* cap bytes */
  size_t len, cap;
} reader_state;

static void *reader(void *arg) {
  reader_state *r = arg;
  while (r->len < r->cap) {
    size_t want = r->cap - r->len < 4096 ? r->cap - r->len : 4096;
    ssize_t n = read(r->fd, r->data + r->len, want);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    r->len += (size_t)n;
    usleep(100); /* slower than the writer, so the pipe fills and writes come back short */
  }
  r->data[r->len] = '\0';
  return NULL;
}

/* A line far larger than the pipe buffer on an O_NONBLOCK fd (as libuv leaves stdio pipes) arrives
 * whole: partial writes are continued and EAGAIN waits for the reader. */
static void test_large_line_on_nonblocking_pipe(void) {
  int p[2];
  CHECK_INT(pipe(p), 0);
  fcntl(p[1], F_SETFL, O_NONBLOCK);
  size_t n = 1 << 20;
  char *big = malloc(n + 1);
  memset(big, 'x', n);
  big[n] = '\0';
  lp_field f[] = {LPF_STR("blob", big)};
  char *expected = lp_log_render(LP_LOG_FORMAT_JSON, 0, LP_LOG_ERROR, "engine.test", "big", f, 1);

  size_t cap = strlen(expected) + 16;
  reader_state r = {.fd = p[0], .data = malloc(cap + 1), .cap = cap};
  pthread_t t;
  pthread_create(&t, NULL, reader, &r);
  lp_log_configure(LP_LOG_DEBUG, LP_LOG_FORMAT_JSON, p[1]);
  lp_log_emit(LP_LOG_ERROR, "engine.test", "big", f, 1);
  close(p[1]);
  pthread_join(t, NULL);
  close(p[0]);

  CHECK_INT(r.len, strlen(expected));
  /* the timestamps differ (emit reads the wall clock), everything from "level" on must match */
  const char *got_tail = strstr(r.data, "\"level\""), *want_tail = strstr(expected, "\"level\"");
  CHECK(got_tail && strcmp(got_tail, want_tail) == 0);
  free(r.data);
  lp_log_configure(LP_LOG_INFO, LP_LOG_FORMAT_AUTO, 2);
  free(expected);
  free(big);
}

int main(void) {
  RUN(test_json_shape);
  RUN(test_timestamp_rounding);
  RUN(test_json_escaping);
  RUN(test_field_types);
  RUN(test_text_form);
  RUN(test_redaction);
  RUN(test_parse_level);
  RUN(test_filtering_on_a_pipe);
  RUN(test_large_line_on_nonblocking_pipe);
  return check_summary();
}

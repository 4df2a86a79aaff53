/* The demo's plumbing (demo.h): the engine child, requests to it and to its simulators, the output. */
#include "cli/demo.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/mapping_exports.h"
#include "core/clock.h"
#include "core/error.h"
#include "http/client.h"

/* ---- output ------------------------------------------------------------------------------- */

static int tty(void) {
  return isatty(STDOUT_FILENO);
}

static void vprint(const char *prefix_tty, const char *prefix, const char *fmt, va_list ap) {
  fputs(tty() ? prefix_tty : prefix, stdout);
  vprintf(fmt, ap);
  fputs(tty() ? "\033[0m\n" : "\n", stdout);
  fflush(stdout);
}

void demo_step(demo *d, const char *fmt, ...) {
  char head[64];
  snprintf(head, sizeof head, "\n[%d, %.0fs] ", ++d->step, lp_clock_monotonic() - d->started);
  char head_tty[80];
  snprintf(head_tty, sizeof head_tty, "\n\033[1m[%d, %.0fs] ", d->step, lp_clock_monotonic() - d->started);
  va_list ap;
  va_start(ap, fmt);
  vprint(head_tty, head, fmt, ap);
  va_end(ap);
}

void demo_ok(demo *d, const char *fmt, ...) {
  (void)d;
  va_list ap;
  va_start(ap, fmt);
  vprint("    \033[32mok\033[0m ", "    ok ", fmt, ap);
  va_end(ap);
}

void demo_note(demo *d, const char *fmt, ...) {
  (void)d;
  va_list ap;
  va_start(ap, fmt);
  vprint("    \033[2m", "    ", fmt, ap);
  va_end(ap);
}

int demo_fail(demo *d, const char *fmt, ...) {
  d->failed = 1;
  va_list ap;
  va_start(ap, fmt);
  vprint("    \033[31mFAILED\033[0m ", "    FAILED ", fmt, ap);
  va_end(ap);
  FILE *log = fopen(d->log_path, "r");
  if (log) {
    /* the engine's last lines say what it was doing */
    char lines[12][1024];
    int n = 0;
    while (fgets(lines[n % 12], sizeof lines[0], log)) n++;
    fclose(log);
    printf("    the engine's last log lines (%s):\n", d->log_path);
    for (int i = n > 12 ? n - 12 : 0; i < n; i++) printf("      %s", lines[i % 12]);
  }
  return -1;
}

int demo_wait(demo *d, const char *what, double timeout_s,
              int (*progress)(demo *d, void *ud, char *line, size_t cap), void *ud) {
  double deadline = lp_clock_monotonic() + timeout_s;
  char line[256] = "", shown[256] = "";
  for (;;) {
    line[0] = '\0';
    int done = progress(d, ud, line, sizeof line);
    if (line[0] && strcmp(line, shown) != 0) {
      demo_note(d, "%s", line);
      snprintf(shown, sizeof shown, "%s", line);
    }
    if (done) return 0;
    if (lp_clock_monotonic() > deadline)
      return demo_fail(d, "timed out after %.0f s waiting for %s%s%s", timeout_s, what, shown[0] ? ": " : "",
                       shown);
    usleep(100000);
  }
}

/* ---- requests ----------------------------------------------------------------------------- */

static json_t *request(const char *url, const char *method, const char *ctype, const char *body,
                       long *status) {
  lp_http_header ct = {"Content-Type", (char *)ctype};
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  req.method = method;
  req.url = url;
  req.headers = &ct;
  req.nheaders = 1;
  req.body = body;
  req.body_len = body ? strlen(body) : 0;
  req.timeout_ms = 10000;
  lp_http_result *r = lp_http_request_sync(NULL, &req);
  if (status) *status = r->status;
  json_t *v = r->error ? NULL : json_loads(r->body, JSON_DECODE_ANY, NULL);
  lp_http_result_free(r);
  return v;
}

json_t *demo_kube(demo *d, const char *method, const char *path, const char *body, long *status) {
  char url[512];
  snprintf(url, sizeof url, "%s%s", d->kubernetes, path);
  return request(url, method,
                 strcmp(method, "PATCH") == 0 ? "application/merge-patch+json" : "application/json", body,
                 status);
}

json_t *demo_admin(demo *d, const char *base, const char *method, const char *path, const char *body) {
  (void)d;
  char url[512];
  snprintf(url, sizeof url, "%s%s", base, path);
  return request(url, method, "application/json", body, NULL);
}

double demo_metric(demo *d, const char *prefix) {
  char url[256];
  snprintf(url, sizeof url, "http://%s/metrics", d->metrics);
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  req.url = url;
  req.timeout_ms = 5000;
  lp_http_result *r = lp_http_request_sync(NULL, &req);
  double sum = 0;
  size_t n = strlen(prefix);
  for (char *line = r->body; line && *line;) {
    char *end = strchr(line, '\n');
    if (end) *end = '\0';
    if (strncmp(line, prefix, n) == 0) {
      const char *value = strrchr(line, ' ');
      if (value) sum += atof(value + 1);
    }
    line = end ? end + 1 : NULL;
  }
  lp_http_result_free(r);
  return sum;
}

int demo_log_count(demo *d, const char *needle) {
  FILE *log = fopen(d->log_path, "r");
  if (!log) return 0;
  char line[8192];
  int n = 0;
  while (fgets(line, sizeof line, log))
    if (strstr(line, needle)) n++;
  fclose(log);
  return n;
}

/* ---- the engine child --------------------------------------------------------------------- */

/* Copies the value of "key":"..." (or "key":{...} for an object) from a JSON log line into out. */
static int field(const char *line, const char *key, char *out, size_t cap) {
  char pattern[64];
  snprintf(pattern, sizeof pattern, "\"%s\":", key);
  const char *at = strstr(line, pattern);
  if (!at) return -1;
  json_error_t error;
  json_t *v = json_loads(at + strlen(pattern), JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &error);
  if (!v) return -1;
  if (json_is_string(v))
    snprintf(out, cap, "%s", json_string_value(v));
  else
    out[0] = '\0';
  json_decref(v);
  return 0;
}

static int read_start_line(demo *d) {
  FILE *log = fopen(d->log_path, "r");
  if (!log) return 0;
  char line[8192];
  int found = 0;
  while (!found && fgets(line, sizeof line, log)) {
    if (!strstr(line, "\"msg\":\"engine started\"")) continue;
    found = field(line, "metrics_addr", d->metrics, sizeof d->metrics) == 0 &&
            field(line, "grpc_addr", d->grpc, sizeof d->grpc) == 0;
    const char *sim = strstr(line, "\"sim\":");
    json_t *urls = sim ? json_loads(sim + 6, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    snprintf(d->kubernetes, sizeof d->kubernetes, "%s",
             json_string_value(json_object_get(urls, "kubernetes")));
    const char *service = json_string_value(json_object_get(json_object_get(d->mapping, "sim"), "service"));
    const char *cloud = service ? json_string_value(json_object_get(urls, service)) : NULL;
    snprintf(d->cloud, sizeof d->cloud, "%s", cloud ? cloud : "");
    snprintf(d->bizfly, sizeof d->bizfly, "%s", json_string_value(json_object_get(urls, "bizfly")));
    found = found && urls != NULL;
    json_decref(urls);
  }
  fclose(log);
  return found;
}

int demo_read_mapping(demo *d) {
  static const char *const fields[] = {"nodeclass", "sim", "demo", NULL};
  char scripts[300], *problem = NULL;
  snprintf(scripts, sizeof scripts, "%s/scripts", d->workdir);
  d->mapping = lp_cli_mapping_exports(scripts, fields, &problem);
  if (!d->mapping) {
    fprintf(stderr, "luaprov demo: %s\n", problem);
    free(problem);
    return -1;
  }
  if (!json_is_object(json_object_get(d->mapping, "demo"))) {
    fprintf(stderr, "luaprov demo: the CloudProvider mapping exports no `demo` table (what the demo applies "
                    "and edits; docs/contracts.md#mappings)\n");
    return -1;
  }
  return 0;
}

int demo_start_engine(demo *d, const char *self) {
  char scripts[300], config[300];
  snprintf(scripts, sizeof scripts, "%s/scripts", d->workdir);
  snprintf(config, sizeof config, "%s/config.yaml", d->workdir);
  snprintf(d->log_path, sizeof d->log_path, "%s/engine.log", d->workdir);
  d->engine = fork();
  if (d->engine < 0) return demo_fail(d, "fork: %s", strerror(errno));
  if (d->engine == 0) {
    if (!freopen(d->log_path, "w", stderr)) _exit(127);
    execl(self, self, "run", "--sim", "--scripts", scripts, "--config", config, "--metrics-addr",
          "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--log-format", "json", (char *)NULL);
    _exit(127);
  }
  double deadline = lp_clock_monotonic() + 20;
  while (lp_clock_monotonic() < deadline) {
    if (read_start_line(d)) return 0;
    int status;
    if (waitpid(d->engine, &status, WNOHANG) == d->engine) {
      d->engine = 0;
      return demo_fail(d, "the engine exited during start (status %d)", WEXITSTATUS(status));
    }
    usleep(50000);
  }
  return demo_fail(d, "the engine did not log \"engine started\" within 20 s");
}

int demo_stop_engine(demo *d) {
  if (d->engine <= 0) return -1;
  kill(d->engine, SIGTERM);
  int status = 0;
  waitpid(d->engine, &status, 0);
  d->engine = 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

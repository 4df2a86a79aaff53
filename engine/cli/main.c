/* luaprov: entry point and verb dispatch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/cache.h"
#include "core/log.h"

static const char usage[] =
    "usage: luaprov <command> [options]\n"
    "\n"
    "A Lua-scriptable node-provisioning engine for Kubernetes.\n"
    "\n"
    "commands:\n"
    "  run      run the engine: script host with hot reload, /healthz, /readyz, /metrics\n"
    "  sim      serve the built-in simulators of the cloud and Kubernetes APIs\n"
    "  eval     dry-run a policy or the mapping on objects read from files\n"
    "  demo     the scripted story (provisioning, drift, repair, hot reload, Bizfly scaling) against the\n"
    "           simulators; exits 0 when every step checked out\n"
    "  check    load every script of a tree in the sandbox and validate its contracts\n"
    "  instance print the instance document of a NodeClaim, as a drift policy receives it\n"
    "  version  print the version\n"
    "\n"
    "Run 'luaprov <command> --help' for the options of a command.\n"
    "Environment: LUAPROV_LOG_LEVEL (debug|info|warn|error), LUAPROV_LOG_FORMAT (json|text).\n";

int lp_cli_configure_logging(const char *level, const char *format) {
  lp_log_level lvl = LP_LOG_INFO;
  lp_log_format fmt = LP_LOG_FORMAT_AUTO;
  const char *level_src = level ? "--log-level" : "LUAPROV_LOG_LEVEL";
  const char *format_src = format ? "--log-format" : "LUAPROV_LOG_FORMAT";
  if (!level) level = getenv("LUAPROV_LOG_LEVEL");
  if (!format) format = getenv("LUAPROV_LOG_FORMAT");
  if (level && *level && lp_log_parse_level(level, &lvl) != 0) {
    fprintf(stderr, "luaprov: %s: unknown level '%s' (use debug, info, warn or error)\n", level_src, level);
    return -1;
  }
  if (format && *format) {
    if (strcmp(format, "json") == 0)
      fmt = LP_LOG_FORMAT_JSON;
    else if (strcmp(format, "text") == 0)
      fmt = LP_LOG_FORMAT_TEXT;
    else {
      fprintf(stderr, "luaprov: %s: unknown format '%s' (use json or text)\n", format_src, format);
      return -1;
    }
  }
  lp_log_configure(lvl, fmt, 2);
  return 0;
}

int lp_cli_parse_addr(const char *flag, const char *value, char **host_out, int *port_out) {
  const char *colon = strrchr(value, ':');
  if (!colon || colon == value) goto bad;
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (*end || colon[1] == '\0' || port < 0 || port > 65535) goto bad;
  const char *host = value;
  size_t len = (size_t)(colon - value);
  if (host[0] == '[' && len >= 2 && host[len - 1] == ']') {
    host++;
    len -= 2;
  }
  *host_out = strndup(host, len);
  *port_out = (int)port;
  return 0;
bad:
  fprintf(stderr, "luaprov: %s: expected HOST:PORT (e.g. 127.0.0.1:8080 or [::1]:8080), got '%s'\n", flag,
          value);
  return -1;
}

/* The commands: add one here (and to the usage above). */
static const struct {
  const char *name;
  int (*run)(int, char **);
} commands[] = {{"run", lp_cmd_run},          {"sim", lp_cmd_sim},     {"eval", lp_cmd_eval},
                {"demo", lp_cmd_demo},        {"check", lp_cmd_check}, {"version", lp_cmd_version},
                {"instance", lp_cmd_instance}};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

int main(int argc, char **argv) {
  if (argc < 2) return lp_cli_usage_error(NULL, "missing command");
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
    fputs(usage, stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) return lp_cmd_version(1, argv);
  const char *names[NCOMMANDS + 1];
  for (size_t i = 0; i < NCOMMANDS; i++) {
    names[i] = commands[i].name;
    if (strcmp(argv[1], commands[i].name) == 0) {
      int status = commands[i].run(argc - 1, argv + 1);
      lp_cache_registry_clear();
      lp_log_flush();
      return status;
    }
  }
  names[NCOMMANDS] = NULL;
  return lp_cli_unknown_choice(NULL, "command", argv[1], names);
}

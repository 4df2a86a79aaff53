/* luaprov run: the engine process. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/engine.h"

static const char usage[] =
    "usage: luaprov run [--scripts DIR] [--metrics-addr HOST:PORT] [--shutdown-timeout SECONDS]\n"
    "                   [--ca-file FILE] [--log-level LEVEL] [--log-format json|text]\n"
    "\n"
    "Runs the engine: loads the scripts (DIR first, the default tree for files DIR does not hold),\n"
    "reloads them when files under the trees change or on SIGHUP (a script that fails to load or\n"
    "validate is rejected and the previous generation keeps serving), and serves /healthz, /readyz and\n"
    "/metrics on --metrics-addr (default 127.0.0.1:8080; port 0 picks a free port, logged at start).\n"
    "SIGTERM or SIGINT shut down gracefully: script calls in flight get --shutdown-timeout (default 10)\n"
    "seconds to finish.\n"
    "\n"
    "The Kubernetes controllers, the simulators (--sim) and the externalgrpc server are not part of\n"
    "this build yet.\n";

int lp_cmd_run(int argc, char **argv) {
  if (lp_cli_wants_help(argc, argv)) {
    fputs(usage, stdout);
    return 0;
  }
  lp_engine_options opts = {.metrics_port = 8080};
  const char *level = NULL, *format = NULL, *metrics_addr = NULL;
  char *metrics_host = NULL;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(arg, "--scripts") == 0 && value)
      opts.scripts_dir = value;
    else if (strcmp(arg, "--metrics-addr") == 0 && value)
      metrics_addr = value;
    else if (strcmp(arg, "--shutdown-timeout") == 0 && value)
      opts.shutdown_timeout_ms = (unsigned)(atof(value) * 1000);
    else if (strcmp(arg, "--ca-file") == 0 && value)
      opts.ca_file = value;
    else if (strcmp(arg, "--log-level") == 0 && value)
      level = value;
    else if (strcmp(arg, "--log-format") == 0 && value)
      format = value;
    else {
      fprintf(stderr, "luaprov run: %s '%s'\n\n%s",
              value || arg[0] != '-' ? "unknown option" : "missing value for", arg, usage);
      return 2;
    }
    i++;
  }
  if (lp_cli_configure_logging(level, format) != 0) return 2;
  if (metrics_addr &&
      lp_cli_parse_addr("--metrics-addr", metrics_addr, &metrics_host, &opts.metrics_port) != 0)
    return 2;
  opts.metrics_host = metrics_host;
  int status = lp_engine_run(&opts);
  free(metrics_host);
  return status;
}

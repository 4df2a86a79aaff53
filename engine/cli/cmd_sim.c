/* luaprov sim [--addr HOST:PORT]: serve the simulators until SIGTERM/SIGINT. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "cli/cli.h"
#include "core/log.h"
#include "sim/sim.h"

static const char usage[] =
    "usage: luaprov sim [--addr HOST:PORT] [--log-level LEVEL] [--log-format json|text]\n"
    "\n"
    "Serves the built-in simulators (the scripts under sim/ of the default tree) until SIGTERM or\n"
    "SIGINT: the Kubernetes API on PORT, Alibaba Cloud ECS/VPC/STS on PORT+1, Bizfly KaaS on PORT+2\n"
    "(each only when its simulator is in the tree; the default --addr 127.0.0.1:0 picks free ports).\n"
    "Once listening, prints one JSON line on stdout naming the endpoints, e.g.\n"
    "  {\"alibaba\":\"http://127.0.0.1:41234\"}\n"
    "Each simulator has an admin path /_sim/ to inject faults and advance simulated time (docs/sim.md).\n";

static uv_signal_t sigterm, sigint;
static lp_sim *running;

static void closed(uv_handle_t *h) {}

static void sim_closed(void *ud) {
  uv_close((uv_handle_t *)&sigterm, closed);
  uv_close((uv_handle_t *)&sigint, closed);
}

static void on_signal(uv_signal_t *handle, int signum) {
  if (!running) return;
  lp_info("sim", "shutting down", LPF_STR("signal", signum == SIGTERM ? "SIGTERM" : "SIGINT"));
  lp_sim *sim = running;
  running = NULL;
  lp_sim_close(sim, sim_closed, NULL);
}

int lp_cmd_sim(int argc, char **argv) {
  if (lp_cli_wants_help(argc, argv)) {
    fputs(usage, stdout);
    return 0;
  }
  const char *addr = NULL, *level = NULL, *format = NULL;
  for (int i = 1; i < argc; i++) {
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--addr") == 0 && value)
      addr = value;
    else if (strcmp(argv[i], "--log-level") == 0 && value)
      level = value;
    else if (strcmp(argv[i], "--log-format") == 0 && value)
      format = value;
    else {
      fprintf(stderr, "luaprov sim: unknown option '%s'\n\n%s", argv[i], usage);
      return 2;
    }
    i++;
  }
  if (lp_cli_configure_logging(level, format) != 0) return 2;
  lp_sim_options opts = {0};
  char *host = NULL;
  if (addr && lp_cli_parse_addr("--addr", addr, &host, &opts.port) != 0) return 2;
  opts.host = host;

  uv_loop_t loop;
  uv_loop_init(&loop);
  lp_error *err = NULL;
  running = lp_sim_start(&loop, &opts, &err);
  if (!running) {
    lp_errorlog("sim", "cannot start the simulators", LPF_STR("error", err->message));
    lp_error_free(err);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    free(host);
    return 1;
  }
  char *endpoints = lp_sim_endpoints_json(running);
  printf("%s\n", endpoints);
  fflush(stdout);
  free(endpoints);
  uv_signal_init(&loop, &sigterm);
  uv_signal_start(&sigterm, on_signal, SIGTERM);
  uv_signal_init(&loop, &sigint);
  uv_signal_start(&sigint, on_signal, SIGINT);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  free(host);
  return 0;
}

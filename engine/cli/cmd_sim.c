/* luaprov sim [--addr HOST:PORT] [--kubelet-kubeconfig FILE]: serve the simulators until SIGTERM/SIGINT,
 * optionally with the simulated kubelet posting its Nodes to a real API server. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "cli/cli.h"
#include "core/log.h"
#include "kube/client.h"
#include "kube/config.h"
#include "sim/kubelet.h"
#include "sim/sim.h"

static const char usage[] =
    "usage: luaprov sim [--addr HOST:PORT] [--kubelet-kubeconfig FILE [--node-gone-after SECONDS]]\n"
    "                   [--log-level LEVEL] [--log-format json|text]\n"
    "\n"
    "Serves the built-in simulators (the scripts under sim/ of the default tree) until SIGTERM or\n"
    "SIGINT, one per directory sim/<service>/: the Kubernetes API on PORT, the others on PORT+1,\n"
    "PORT+2, ... by name (the default --addr 127.0.0.1:0 picks free ports; docs/sim.md lists them).\n"
    "Once listening, prints one JSON line on stdout naming the endpoints, e.g.\n"
    "  {\"kubernetes\":\"http://127.0.0.1:41233\", ...}\n"
    "Each simulator has an admin path /_sim/ to inject faults and advance simulated time (docs/sim.md).\n"
    "\n"
    "--kubelet-kubeconfig FILE runs the simulated kubelet against the API server FILE names (a real\n"
    "kube-apiserver, say): a Node for each Running simulated instance, its Lease renewed as a\n"
    "heartbeat, bound pods set Running and deleted pods removed; the Node of an instance that went\n"
    "turns NotReady and is deleted --node-gone-after seconds later (default 30).\n";

typedef struct sim_run {
  lp_sim *sim;
  lp_kube_config *kube_config;
  lp_kube_client *kube;
  lp_sim_kubelet *kubelet;
  uv_signal_t sigterm, sigint;
  int stopping;
} sim_run;

static sim_run run;

static void closed(uv_handle_t *h) {
  (void)h;
}

static void sim_closed(void *ud) {
  (void)ud;
  uv_close((uv_handle_t *)&run.sigterm, closed);
  uv_close((uv_handle_t *)&run.sigint, closed);
}

static void kube_closed(void *ud) {
  (void)ud;
  lp_kube_config_free(run.kube_config);
  run.kube_config = NULL;
  lp_sim_close(run.sim, sim_closed, NULL);
}

static void kubelet_stopped(void *ud) {
  (void)ud;
  lp_kube_client_close(run.kube, kube_closed, NULL);
}

static void on_signal(uv_signal_t *handle, int signum) {
  (void)handle;
  if (run.stopping) return;
  run.stopping = 1;
  lp_info("sim", "shutting down", LPF_STR("signal", signum == SIGTERM ? "SIGTERM" : "SIGINT"));
  if (run.kubelet)
    lp_sim_kubelet_stop(run.kubelet, kubelet_stopped, NULL);
  else
    lp_sim_close(run.sim, sim_closed, NULL);
}

/* The simulated kubelet against the API server of kubeconfig; 0, or -1 after logging why. */
static int start_kubelet(uv_loop_t *loop, const char *kubeconfig, double gone_after) {
  lp_error *err = NULL;
  run.kube_config = lp_kube_config_load_file(kubeconfig, &err);
  if (run.kube_config) run.kube = lp_kube_client_new(loop, run.kube_config, NULL, &err);
  const char *url = lp_sim_url(run.sim, "kubernetes");
  if (run.kube && url)
    run.kubelet = lp_sim_kubelet_start(
        loop,
        &(lp_sim_kubelet_options){.simulator_url = url, .kube = run.kube, .gone_after_seconds = gone_after},
        &err);
  if (run.kubelet) return 0;
  lp_errorlog("sim", "cannot start the simulated kubelet", LPF_STR("kubeconfig", kubeconfig),
              LPF_STR("error", err ? err->message : "the tree has no Kubernetes simulator"));
  lp_error_free(err);
  return -1;
}

int lp_cmd_sim(int argc, char **argv) {
  const char *addr = NULL, *kubeconfig = NULL, *gone = NULL;
  double gone_after = 0;
  const lp_cli_opt options[] = {{"--addr", &addr, NULL},
                                {"--kubelet-kubeconfig", &kubeconfig, NULL},
                                {"--node-gone-after", &gone, NULL},
                                {NULL, NULL, NULL}};
  lp_cli_args a = {.cmd = "sim", .opts = options};
  int parsed = lp_cli_parse(&a, argc, argv);
  if (parsed == LP_CLI_HELP) {
    fputs(usage, stdout);
    return 0;
  }
  if (parsed != LP_CLI_OK) return 2;
  if (gone) {
    char *end;
    gone_after = strtod(gone, &end);
    if (*end || gone_after <= 0)
      return lp_cli_usage_error("sim", "--node-gone-after needs a number of seconds > 0, got '%s'", gone);
  }
  const char *level = a.log_level, *format = a.log_format;
  if (gone_after > 0 && !kubeconfig) {
    return lp_cli_usage_error("sim", "--node-gone-after needs --kubelet-kubeconfig");
  }
  if (lp_cli_configure_logging(level, format) != 0) return 2;
  lp_sim_options opts = {0};
  char *host = NULL;
  if (addr && lp_cli_parse_addr("--addr", addr, &host, &opts.port) != 0) return 2;
  opts.host = host;

  uv_loop_t loop;
  uv_loop_init(&loop);
  uv_signal_init(&loop, &run.sigterm);
  uv_signal_init(&loop, &run.sigint);
  lp_error *err = NULL;
  int status = 0;
  run.sim = lp_sim_start(&loop, &opts, &err);
  if (!run.sim) {
    lp_errorlog("sim", "cannot start the simulators", LPF_STR("error", err->message));
    lp_error_free(err);
    status = 1;
  } else if (kubeconfig && start_kubelet(&loop, kubeconfig, gone_after) != 0) {
    status = 1;
    run.stopping = 1;
    if (run.kube)
      lp_kube_client_close(run.kube, kube_closed, NULL);
    else
      kube_closed(NULL);
  } else {
    char *endpoints = lp_sim_endpoints_json(run.sim);
    printf("%s\n", endpoints);
    fflush(stdout);
    free(endpoints);
  }
  if (status == 0) {
    uv_signal_start(&run.sigterm, on_signal, SIGTERM);
    uv_signal_start(&run.sigint, on_signal, SIGINT);
  } else if (!run.sim) {
    sim_closed(NULL);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  free(host);
  return status;
}

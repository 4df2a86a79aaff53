/* luaprov demo: the scripted story against the built-in simulators (demo_story.c). */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/demo.h"
#include "core/clock.h"
#include "core/log.h"
#include "script/tree.h"

static const char usage[] =
    "usage: luaprov demo [--speed N] [--keep] [--log-level LEVEL] [--log-format json|text]\n"
    "\n"
    "Tells the engine's story against the built-in simulators, with no cluster and no cloud account: a\n"
    "`luaprov run --sim` child serves the simulated Kubernetes API and clouds, the controllers and the\n"
    "externalgrpc server, and this command acts as the operator and the Cluster Autoscaler. Steps: the\n"
    "mapping's node class and a NodePool are applied; pending pods get NodeClaims that launch,\n"
    "register and take the pods; an edit of the node class drifts the nodes, which are replaced within\n"
    "the NodePool's disruption budget; the repair policy is hot-reloaded and a node that stops being\n"
    "Ready is repaired; a Bizfly pool is scaled up over gRPC. Each step is checked and printed with its\n"
    "progress, then a summary. Exit status 0 only when every step checked out.\n"
    "\n"
    "--speed N runs simulated time N times faster than the wall clock (default 10): instances boot in\n"
    "15 simulated seconds. --keep leaves the scratch folder (the engine's log, config and scripts).\n";

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(text, f);
  return fclose(f);
}

/* The operator's tree (a repair policy to reload later) and the engine's config: fast loops, so the
 * story takes a minute, not the production defaults' hours. */
static int prepare(demo *d) {
  char path[400];
  snprintf(path, sizeof path, "%s/scripts", d->workdir);
  if (mkdir(path, 0700) != 0) return -1;
  snprintf(path, sizeof path, "%s/scripts/policies", d->workdir);
  if (mkdir(path, 0700) != 0) return -1;
  char src[400];
  snprintf(src, sizeof src, "%s/policies/repair.lua", lp_default_scripts_dir());
  FILE *in = fopen(src, "r");
  if (!in) return -1;
  char text[8192];
  size_t n = fread(text, 1, sizeof text - 1, in);
  fclose(in);
  text[n] = '\0';
  snprintf(path, sizeof path, "%s/scripts/policies/repair.lua", d->workdir);
  if (write_file(path, text) != 0) return -1;
  snprintf(path, sizeof path, "%s/config.yaml", d->workdir);
  return write_file(path, "controllers:\n"
                          "  garbageCollectionInterval: 10s\n"
                          "  leakedInstanceGrace: 30s\n"
                          "  drainRequeue: 0.2s\n"
                          "  terminateRequeue: 0.5s\n"
                          "  nodeClassResync: 30s\n");
}

static int ready(demo *d, void *ud, char *line, size_t cap) {
  (void)ud;
  double synced = demo_metric(d, "luaprov_caches_synced"),
         active = demo_metric(d, "luaprov_controllers_active");
  snprintf(line, cap, "caches synced %.0f, controllers active %.0f", synced, active);
  return synced == 1 && active == 1;
}

static void summary(demo *d, int engine_status) {
  printf(
      "\n%ssummary%s (%.0f s): %d nodes launched, %d pods bound, %d nodes drifted and replaced, %d nodes "
      "repaired, script generation %lld after the hot reload, %d nodes consolidated (%.3f -> %.3f per hour), "
      "%d Bizfly scale-up over gRPC; engine exit status %d.\n%s\n",
      isatty(STDOUT_FILENO) ? "\033[1m" : "", isatty(STDOUT_FILENO) ? "\033[0m" : "",
      lp_clock_monotonic() - d->started, d->nodes_launched, d->pods_bound, d->nodes_replaced,
      d->nodes_repaired, d->generation, d->nodes_consolidated, d->cost_before, d->cost_after, d->scale_ups,
      engine_status, d->failed ? "A step failed (see above)." : "Every step checked out.");
}

int lp_cmd_demo(int argc, char **argv) {
  demo d = {.speed = 10};
  int keep = 0;
  const char *speed = NULL;
  const lp_cli_opt opts[] = {{"--speed", &speed, NULL}, {"--keep", NULL, &keep}, {NULL, NULL, NULL}};
  lp_cli_args a = {.cmd = "demo", .opts = opts};
  int parsed = lp_cli_parse(&a, argc, argv);
  if (parsed == LP_CLI_HELP) {
    fputs(usage, stdout);
    return 0;
  }
  if (parsed != LP_CLI_OK) return 2;
  if (speed) {
    char *end;
    d.speed = strtod(speed, &end);
    if (*end || d.speed <= 0 || d.speed > 1000)
      return lp_cli_usage_error("demo", "--speed must be a number from 0 (excluded) to 1000, got '%s'",
                                speed);
  }
  if ((a.log_level || a.log_format) && lp_cli_configure_logging(a.log_level, a.log_format) != 0) return 2;
  snprintf(d.workdir, sizeof d.workdir, "%s/luaprov-demo-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(d.workdir) || prepare(&d) != 0) {
    fprintf(stderr, "luaprov demo: cannot prepare a scratch folder under /tmp\n");
    return 1;
  }
  if (demo_read_mapping(&d) != 0) {
    nftw(d.workdir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    json_decref(d.mapping);
    return 1;
  }
  d.started = lp_clock_monotonic();
  printf("luaprov demo: provisioning, drift, repair and hot reload against the built-in simulators "
         "(simulated time x%g)\n",
         d.speed);
  demo_step(&d, "start the engine: luaprov run --sim (simulators, controllers, externalgrpc server)");
  int rc = -1;
  if (demo_start_engine(&d, "/proc/self/exe") == 0 &&
      demo_wait(&d, "the controllers", 20, ready, NULL) == 0) {
    char body[64];
    snprintf(body, sizeof body, "{\"speed\": %g}", d.speed);
    json_decref(demo_admin(&d, d.cloud, "POST", "/_sim/clock", body));
    demo_ok(&d, "metrics on %s, gRPC on %s, Kubernetes API at %s", d.metrics, d.grpc, d.kubernetes);
    rc = demo_story(&d);
  }
  demo_grpc_close(&d);
  int engine_status = d.engine > 0 ? demo_stop_engine(&d) : -1;
  if (engine_status != 0) d.failed = 1;
  summary(&d, engine_status);
  if (keep || d.failed)
    printf("the engine's log, config and scripts: %s\n", d.workdir);
  else
    nftw(d.workdir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
  json_decref(d.mapping);
  return rc == 0 && !d.failed ? 0 : 1;
}

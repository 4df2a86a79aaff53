#include "sim/sim.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/log.h"
#include "http/server.h"
#include "script/handler.h"
#include "script/host.h"
#include "script/tree.h"

#define NSERVICES 8 /* at most this many simulated services */

struct lp_sim {
  /* the services found under sim/ (find_services): names[i] is served by module sim.<names[i]> */
  char *names[NSERVICES];
  size_t nservices;
  lp_module_spec modules[NSERVICES + 1]; /* what the simulators' script host loads */
  lp_script_host *host;
  lp_http_server *servers[NSERVICES];
  lp_script_handler *handlers[NSERVICES];
  char *urls[NSERVICES];
  int pending_closes;
  void (*on_closed)(void *ud);
  void *on_closed_ud;
};

static int by_port_order(const void *a, const void *b) {
  const char *x = *(char *const *)a, *y = *(char *const *)b;
  int kx = strcmp(x, "kubernetes") == 0, ky = strcmp(y, "kubernetes") == 0;
  return kx != ky ? ky - kx : strcmp(x, y);
}

/* Every directory sim/<name>/ of the tree holding an init.lua is a simulated service. The order fixes
 * the ports when a base port is given: the Kubernetes API first, then the others by name. */
static void find_services(lp_sim *sim, const char *tree) {
  char path[4096];
  snprintf(path, sizeof path, "%s/sim", tree);
  DIR *dir = opendir(path);
  struct dirent *ent;
  while (dir && (ent = readdir(dir)) && sim->nservices < NSERVICES) {
    if (ent->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/sim/%s/init.lua", tree, ent->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    fclose(f);
    sim->names[sim->nservices++] = lp_xstrdup(ent->d_name);
  }
  if (dir) closedir(dir);
  qsort(sim->names, sim->nservices, sizeof sim->names[0], by_port_order);
  for (size_t i = 0; i < sim->nservices; i++)
    sim->modules[i] = (lp_module_spec){lp_xasprintf("sim.%s", sim->names[i]), "simulator", 0, NULL};
}

static void free_services(lp_sim *sim) {
  for (size_t i = 0; i < sim->nservices; i++) {
    free(sim->names[i]);
    free((char *)sim->modules[i].module);
  }
}

lp_sim *lp_sim_start(uv_loop_t *loop, const lp_sim_options *opts, lp_error **err) {
  lp_sim *sim = lp_xcalloc(1, sizeof *sim);
  const char *tree = opts->scripts_dir ? opts->scripts_dir : lp_default_scripts_dir();
  find_services(sim, tree);
  lp_script_host_config cfg = {
      .loop = loop,
      .defaults_dir = tree,
      .modules = sim->modules,
      /* simulators keep every object of a run in memory: give them room */
      .limits = {.memory_bytes = 512u << 20},
      .purpose = "simulator", /* not the engine's tree: `run --sim` logs that one as "scripts loaded" */
  };
  lp_problems problems = {0};
  sim->host = lp_script_host_new(&cfg, &problems);
  if (!sim->host) {
    char *text = lp_problems_render(&problems);
    lp_error_set(err, "Simulator", "the simulators failed to load:\n%s", text);
    free(text);
    lp_problems_free(&problems);
    free_services(sim);
    free(sim);
    return NULL;
  }
  const char *host = opts->host ? opts->host : "127.0.0.1";
  for (size_t i = 0; i < sim->nservices; i++) {
    const char *module = sim->modules[i].module;
    if (!lp_generation_module_file(lp_script_host_current(sim->host), module)) continue;
    sim->handlers[i] = lp_script_handler_new(sim->host, module, "handle", sim->names[i]);
    sim->servers[i] = lp_http_server_new(loop, NULL);
    lp_http_server_route(sim->servers[i], NULL, "/*", lp_script_handler_serve, sim->handlers[i]);
    int port = opts->port ? opts->port + (int)i : 0;
    if (lp_http_server_listen(sim->servers[i], host, port, err) != 0) {
      lp_sim_close(sim, NULL, NULL);
      return NULL;
    }
    sim->urls[i] = lp_xasprintf(strchr(host, ':') ? "http://[%s]:%d" : "http://%s:%d", host,
                                lp_http_server_port(sim->servers[i]));
    lp_info("sim", "simulator listening", LPF_STR("service", sim->names[i]), LPF_STR("url", sim->urls[i]));
  }
  return sim;
}

const char *lp_sim_url(const lp_sim *sim, const char *name) {
  for (size_t i = 0; name && i < sim->nservices; i++)
    if (strcmp(sim->names[i], name) == 0) return sim->urls[i];
  return NULL;
}

char *lp_sim_endpoints_json(const lp_sim *sim) {
  lp_buf out = LP_BUF_INIT;
  lp_buf_putc(&out, '{');
  int first = 1;
  for (size_t i = 0; i < sim->nservices; i++) {
    if (!sim->urls[i]) continue;
    lp_buf_printf(&out, "%s\"%s\":", first ? "" : ",", sim->names[i]);
    lp_buf_json_string(&out, sim->urls[i], strlen(sim->urls[i]));
    first = 0;
  }
  lp_buf_putc(&out, '}');
  return lp_buf_take(&out, NULL);
}

static void part_closed(void *ud) {
  lp_sim *sim = ud;
  if (--sim->pending_closes > 0) return;
  for (size_t i = 0; i < NSERVICES; i++) {
    lp_script_handler_free(sim->handlers[i]);
    free(sim->urls[i]);
  }
  free_services(sim);
  void (*cb)(void *) = sim->on_closed;
  void *cb_ud = sim->on_closed_ud;
  free(sim);
  if (cb) cb(cb_ud);
}

static void servers_closed(void *ud) {
  lp_sim *sim = ud;
  if (--sim->pending_closes > 0) return;
  /* the servers are gone, so no request can start a task any more: close the host now */
  sim->pending_closes = 1;
  lp_script_host_close(sim->host, part_closed, sim);
}

void lp_sim_close(lp_sim *sim, void (*on_closed)(void *ud), void *ud) {
  sim->on_closed = on_closed;
  sim->on_closed_ud = ud;
  sim->pending_closes = 1; /* held until every server close has been started */
  for (size_t i = 0; i < NSERVICES; i++) {
    if (!sim->servers[i]) continue;
    sim->pending_closes++;
    lp_http_server_close(sim->servers[i], servers_closed, sim);
    sim->servers[i] = NULL;
  }
  servers_closed(sim);
}

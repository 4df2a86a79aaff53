/* Helpers for C tests and benchmarks that drive an in-process simulator (engine/sim/sim.h) on their
 * own loop: requests to its services (sim_request; spec/c/controller_fixture.h's ctrl_kube is one) and
 * its unsigned admin API (/_sim/...: sim_admin), through the engine's HTTP client; and an operator's
 * script tree in a temporary directory, watched by a script host (sim_tree_*: hot-reload tests).
 * Header-only: each test is its own executable. */
#ifndef LUAPROV_SPEC_SIM_ADMIN_H
#define LUAPROV_SPEC_SIM_ADMIN_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "contract/contracts.h"
#include "http/client.h"
#include "script/host.h"
#include "sim/sim.h"

typedef struct sim_admin_reply {
  int done;
  long status;
  char *body;
} sim_admin_reply;

static void sim_admin_got_reply(lp_http_result *r, void *ud) {
  sim_admin_reply *out = ud;
  out->status = r->status;
  out->body = strdup(r->body ? r->body : "");
  out->done = 1;
  lp_http_result_free(r);
}

/* METHOD path on the simulated service ("alibaba", "kubernetes", ...) with an optional body of
 * content_type; runs the loop until the answer is in and returns it decoded (NULL when not JSON), its
 * status in *status when status is not NULL. With report, a status >= 300 is printed to stderr as
 * "report METHOD path -> status body"; NULL keeps it quiet (for tests that expect errors). */
static inline json_t *sim_request(uv_loop_t *loop, lp_http_client *http, lp_sim *sim, const char *service,
                                  const char *method, const char *path, const char *content_type,
                                  const char *body, long *status, const char *report) {
  char url[512];
  snprintf(url, sizeof url, "%s%s", lp_sim_url(sim, service), path);
  lp_http_header ct = {"Content-Type", (char *)content_type}; /* the client copies it */
  lp_http_request_opts req = {.method = method,
                              .url = url,
                              .headers = &ct,
                              .nheaders = 1,
                              .body = body,
                              .body_len = body ? strlen(body) : 0};
  sim_admin_reply r = {0};
  lp_http_client_request(http, &req, sim_admin_got_reply, &r);
  while (!r.done) uv_run(loop, UV_RUN_ONCE);
  if (status) *status = r.status;
  json_t *v = json_loads(r.body, JSON_DECODE_ANY, NULL);
  if (report && r.status >= 300)
    fprintf(stderr, "%s %s %s -> %ld %s\n", report, method, path, r.status, r.body);
  free(r.body);
  return v;
}

/* METHOD service/_sim/... with an optional JSON body; runs the loop until the answer is in and
 * returns it decoded (NULL when not JSON). A status >= 300 is printed to stderr. */
static inline json_t *sim_admin(uv_loop_t *loop, lp_http_client *http, lp_sim *sim, const char *service,
                                const char *method, const char *path, const char *body) {
  return sim_request(loop, http, sim, service, method, path, "application/json", body, NULL, "admin");
}

/* Starts the in-process simulators of the source tree, an HTTP client and an engine script host with
 * the contract modules, all on loop; the host's operator tree is scripts_dir (NULL: none, the source
 * tree's scripts alone). Returns 0, or -1 after printing why (service's simulator missing, scripts not
 * loading). */
static inline int sim_fixture_start_tree(uv_loop_t *loop, const char *service, lp_sim **sim,
                                         lp_http_client **http, lp_script_host **scripts,
                                         const char *scripts_dir) {
  uv_loop_init(loop);
  lp_error *err = NULL;
  *sim = lp_sim_start(loop, &(lp_sim_options){.scripts_dir = LUAPROV_SOURCE_DIR}, &err);
  if (!*sim || !lp_sim_url(*sim, service)) {
    fprintf(stderr, "simulator: %s\n", err ? err->message : "no simulator for this service");
    return -1;
  }
  *http = lp_http_client_new(loop, NULL, &err);
  lp_script_host_config cfg = {.loop = loop,
                               .scripts_dir = scripts_dir,
                               .defaults_dir = LUAPROV_SOURCE_DIR,
                               .modules = lp_contract_modules,
                               .http = *http};
  lp_problems problems = {0};
  *scripts = lp_script_host_new(&cfg, &problems);
  if (!*scripts) {
    char *text = lp_problems_render(&problems);
    fprintf(stderr, "%s", text);
    free(text);
    lp_problems_free(&problems);
    return -1;
  }
  return 0;
}

/* sim_fixture_start_tree with the source tree's scripts alone. */
static inline int sim_fixture_start(uv_loop_t *loop, const char *service, lp_sim **sim, lp_http_client **http,
                                    lp_script_host **scripts) {
  return sim_fixture_start_tree(loop, service, sim, http, scripts, NULL);
}

/* ---- an operator's script tree ------------------------------------------------------------ */

/* Makes the temporary tree named by template (mkdtemp's "...XXXXXX", filled in place) with an empty
 * policies/ directory. Aborts on failure. */
static inline void sim_tree_make(char *template) {
  if (!mkdtemp(template)) abort();
  char dir[300];
  snprintf(dir, sizeof dir, "%s/policies", template);
  if (mkdir(dir, 0700) != 0) abort();
}

/* Writes text as tree/policies/<name>.lua in one rename, so the watcher never reads half a file.
 * Aborts on failure. */
static inline void sim_tree_write_policy(const char *tree, const char *name, const char *text) {
  char tmp[300], path[300];
  snprintf(tmp, sizeof tmp, "%s/%s.lua.tmp", tree, name);
  snprintf(path, sizeof path, "%s/policies/%s.lua", tree, name);
  FILE *out = fopen(tmp, "w");
  if (!out) abort();
  fputs(text, out);
  fclose(out);
  if (rename(tmp, path) != 0) abort();
}

/* A script host on loop over tree, watched (an edit is hot-reloaded as a new generation), the source
 * tree's scripts as defaults and the contract modules; the caller closes it. Prints the problems and
 * aborts when the scripts do not load. */
static inline lp_script_host *sim_tree_scripts(uv_loop_t *loop, lp_http_client *http, const char *tree) {
  lp_problems problems = {0};
  lp_script_host *scripts = lp_script_host_new(&(lp_script_host_config){.loop = loop,
                                                                        .scripts_dir = tree,
                                                                        .defaults_dir = LUAPROV_SOURCE_DIR,
                                                                        .modules = lp_contract_modules,
                                                                        .http = http,
                                                                        .watch = 1},
                                               &problems);
  if (!scripts) {
    char *text = lp_problems_render(&problems);
    fprintf(stderr, "%s", text);
    abort();
  }
  return scripts;
}

/* Removes tree and everything in it; returns system()'s status (0 when it went). */
static inline int sim_tree_remove(const char *tree) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tree);
  return system(cmd);
}

/* Undoes sim_fixture_start once what else runs on loop is closed: closes the script host, the HTTP
 * client and the simulators, runs the loop dry and closes it. */
static inline void sim_fixture_stop(uv_loop_t *loop, lp_sim *sim, lp_http_client *http,
                                    lp_script_host *scripts) {
  lp_script_host_close(scripts, NULL, NULL);
  lp_http_client_close(http, NULL, NULL);
  lp_sim_close(sim, NULL, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
  uv_loop_close(loop);
}

#endif

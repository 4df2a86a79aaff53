/* A fixture for CloudProvider tests (spec/c/test_cloudprovider*.c): the Alibaba simulator, an engine
 * script host over the default tree with the contract modules, and a CloudProvider over the real mapping
 * (providers/alibaba), all on one loop over real HTTP: the engine's script host calls the mapping, the
 * mapping signs requests to the simulator's HTTP server, the simulator's own script host answers. An
 * operator's tree of one file over the default scripts (cpf_tree_new) gets a CloudProvider of its own
 * (cpf_provider):
 *
 *   static cp_fixture fx;
 *   if (cpf_start(&fx) != 0) return 1;
 *   json_t *claim = cpf_nodeclaim("default-a1", "uid-a1", CPF_ON_DEMAND_REQ, "{}");
 *   lp_cp_outcome o = {0};
 *   const char *code;
 *   lp_cp_create(fx.cp, claim, fx.nodeclass, lp_cp_outcome_store, &o);
 *   json_t *created = cpf_wait(&fx, &o, &code);
 *   cpf_check_engine_tags(&fx, created, "default-a1");
 *   cpf_stop(&fx);
 *
 * Header-only: each test is its own executable. */
#ifndef LUAPROV_SPEC_CLOUDPROVIDER_FIXTURE_H
#define LUAPROV_SPEC_CLOUDPROVIDER_FIXTURE_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract/cloudprovider.h"
#include "contract/contracts.h"
#include "core/cache.h"
#include "core/log.h"
#include "http/client.h"
#include "mapping_fixture.h"
#include "sim/sim.h"
#include "sim_admin.h"

typedef struct cp_fixture {
  uv_loop_t loop;
  lp_sim *sim;
  lp_http_client *http;
  lp_script_host *scripts;      /* the default tree */
  lp_cloudprovider *cp;         /* over scripts */
  json_t *nodeclass;            /* the ECSNodeClass "default", resolved: Ready */
  lp_script_limits tree_limits; /* the limits of the trees cpf_tree_new loads; zero = the defaults */
} cp_fixture;

#define CPF_ON_DEMAND_REQ                                                                                    \
  "[{\"key\":\"karpenter.sh/capacity-type\",\"operator\":\"In\",\"values\":[\"on-demand\"]}]"

/* Starts the simulator, the script host, the CloudProvider and the resolved node class; 0, or -1 after
 * printing why. */
static inline int cpf_start(cp_fixture *f) {
  lp_log_configure(LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "LTAI5simulatoraccess", 1);
  setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "simulator-secret-do-not-use", 1);
  if (sim_fixture_start(&f->loop, "alibaba", &f->sim, &f->http, &f->scripts) != 0) return -1;
  f->cp = lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = &f->loop,
                                                          .scripts = f->scripts,
                                                          .cluster_id = "luaprov-sim",
                                                          .endpoint = lp_sim_url(f->sim, "alibaba")});
  f->nodeclass = mapping_resolved_nodeclass(f->scripts, f->sim);
  return 0;
}

static inline void cpf_stop(cp_fixture *f) {
  json_decref(f->nodeclass);
  lp_cloudprovider_free(f->cp);
  sim_fixture_stop(&f->loop, f->sim, f->http, f->scripts);
  lp_cache_registry_clear();
}

/* METHOD path on the simulator's admin API (/_sim/...), decoded; caller decrefs. */
static inline json_t *cpf_admin(cp_fixture *f, const char *method, const char *path, const char *body) {
  return sim_admin(&f->loop, f->http, f->sim, "alibaba", method, path, body);
}

/* The simulator's record of the instance behind a provider ID ("cn-hangzhou.i-..."); caller decrefs. */
static inline json_t *cpf_sim_instance(cp_fixture *f, const char *provider_id) {
  json_t *state = cpf_admin(f, "GET", "/_sim/state", NULL);
  json_t *found = json_incref(mapping_sim_instance(state, provider_id));
  json_decref(state);
  return found;
}

/* Runs the loop until o is in; *code is its error's code (NULL on success, the error printed). The
 * value, owned by the caller. */
static inline json_t *cpf_wait(cp_fixture *f, lp_cp_outcome *o, const char **code) {
  lp_cp_outcome_wait(&f->loop, o);
  *code = o->error ? o->error->code : NULL;
  if (o->error) fprintf(stderr, "  (%s: %s)\n", o->error->code, o->error->message);
  return o->value;
}

/* A NodeClaim of NodePool "default" and ECSNodeClass "default" with requirements and resource requests
 * (JSON texts); caller decrefs. */
static inline json_t *cpf_nodeclaim(const char *name, const char *uid, const char *requirements_json,
                                    const char *requests_json) {
  return json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:{s:s, s:s, s:s}, s:o, s:{s:o}}}", "apiVersion",
                   "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name", name, "uid", uid, "labels",
                   "karpenter.sh/nodepool", "default", "spec", "nodeClassRef", "group",
                   "karpenter.alibabacloud.com", "kind", "ECSNodeClass", "name", "default", "requirements",
                   json_loads(requirements_json, 0, NULL), "resources", "requests",
                   json_loads(requests_json, 0, NULL));
}

/* Rule CP7: the instance behind the NodeClaim created (as Create answered it) carries the engine's and
 * the mapping's own tags, the NodeClaim's name among them. */
static inline void cpf_check_engine_tags(cp_fixture *f, const json_t *created, const char *nodeclaim) {
  const char *pid = json_string_value(json_object_get(json_object_get(created, "status"), "providerID"));
  json_t *instance = pid ? cpf_sim_instance(f, pid) : NULL;
  json_t *tags = json_object_get(instance, "tags");
  CHECK_STR(json_string_value(json_object_get(tags, "kubernetes.io/cluster/luaprov-sim")), "owned");
  CHECK_STR(json_string_value(json_object_get(tags, "karpenter.sh/nodepool")), "default");
  CHECK_STR(json_string_value(json_object_get(tags, "karpenter.sh/nodeclaim")), nodeclaim);
  CHECK_STR(json_string_value(json_object_get(tags, "karpenter.k8s.alibabacloud/ecsnodeclass")), "default");
  CHECK_STR(json_string_value(json_object_get(tags, "ecs:ecs-cluster-id")), "luaprov-sim");
  json_decref(instance);
}

/* An operator's script tree in a new temporary directory (dir, at least 32 bytes) holding one file,
 * file (e.g. "init.lua") in folder (e.g. "providers/alibaba") with text lua, loaded over the default
 * scripts without validation's policy calls, so these trees reach the run-time checks; NULL on
 * failure. Freed with cpf_tree_free. */
static inline lp_script_host *cpf_tree_new(cp_fixture *f, char *dir, const char *folder, const char *file,
                                           const char *lua) {
  strcpy(dir, "/tmp/luaprov-cp-XXXXXX");
  if (!mkdtemp(dir)) return NULL;
  char path[256], cmd[512];
  snprintf(cmd, sizeof cmd, "mkdir -p %s/%s", dir, folder);
  CHECK(system(cmd) == 0);
  snprintf(path, sizeof path, "%s/%s/%s", dir, folder, file);
  FILE *out = fopen(path, "w");
  if (!out) return NULL;
  fputs(lua, out);
  fclose(out);
  lp_script_host_config cfg = {.loop = &f->loop,
                               .scripts_dir = dir,
                               .defaults_dir = LUAPROV_SOURCE_DIR,
                               .modules = lp_contract_modules,
                               .http = f->http,
                               .limits = f->tree_limits,
                               .no_policy_calls = 1};
  lp_problems problems = {0};
  lp_script_host *h = lp_script_host_new(&cfg, &problems);
  CHECK(h != NULL);
  lp_problems_free(&problems);
  return h;
}

static inline void cpf_tree_free(lp_script_host *h, const char *dir) {
  if (h) lp_script_host_close(h, NULL, NULL);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
}

/* A CloudProvider over the script host h against the simulator (max_launch_attempts 0: the default). */
static inline lp_cloudprovider *cpf_provider(cp_fixture *f, lp_script_host *h, unsigned max_launch_attempts) {
  return lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = &f->loop,
                                                         .scripts = h,
                                                         .cluster_id = "luaprov-sim",
                                                         .endpoint = lp_sim_url(f->sim, "alibaba"),
                                                         .max_launch_attempts = max_launch_attempts});
}

#endif

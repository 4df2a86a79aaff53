/* What a CloudProvider mapping exports besides functions and the engine reads once: the node class
 * descriptor (its checks, the pin a reload cannot change), the settings (shape, values, help) and
 * the drift reasons, through lp_cloudprovider_* and `luaprov check`'s validation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <uv.h>

#include "check.h"
#include "contract/cloudprovider.h"
#include "contract/contracts.h"
#include "contract/nodeclass_desc.h"
#include "contract/settings.h"

static uv_loop_t loop;

/* ---- settings ------------------------------------------------------------------------------ */

static json_t *declared(void) {
  return json_loads(
      "[{\"name\": \"zone\", \"env\": [\"ZONE_ID\", \"CLOUD_ZONE\"], \"required\": true,"
      "  \"sim\": \"z-sim\", \"help\": \"where the cluster is\"},"
      " {\"name\": \"cluster-type\", \"env\": [\"KIND_OF_CLUSTER\"], \"default\": \"managed\"}]",
      0, NULL);
}

static void test_settings_values(void) {
  json_t *d = declared();
  CHECK(lp_settings_problem(d) == NULL);
  unsetenv("ZONE_ID"), unsetenv("CLOUD_ZONE"), unsetenv("KIND_OF_CLUSTER");
  char *problem = NULL;

  /* a required setting with no value names the flag and every variable */
  CHECK(lp_settings_resolve(d, NULL, LP_SETTINGS_REAL, &problem) == NULL);
  CHECK_STR(problem, "the zone is not set: pass --zone VALUE or set ZONE_ID or set CLOUD_ZONE");
  free(problem);

  /* the second variable when the first is unset or empty; the default; ctx keys with '_' */
  setenv("ZONE_ID", "", 1);
  setenv("CLOUD_ZONE", "z-env2", 1);
  json_t *v = lp_settings_resolve(d, NULL, LP_SETTINGS_REAL, &problem);
  CHECK(problem == NULL);
  CHECK_STR(json_string_value(json_object_get(v, "zone")), "z-env2");
  CHECK_STR(json_string_value(json_object_get(v, "cluster_type")), "managed");
  json_decref(v);

  /* the first variable wins over the second; the flag over both */
  setenv("ZONE_ID", "z-env1", 1);
  v = lp_settings_resolve(d, NULL, LP_SETTINGS_REAL, &problem);
  CHECK_STR(json_string_value(json_object_get(v, "zone")), "z-env1");
  json_decref(v);
  json_t *flags = json_pack("{s:s, s:s}", "zone", "z-flag", "cluster-type", "dedicated");
  v = lp_settings_resolve(d, flags, LP_SETTINGS_SIM_FIRST, &problem);
  CHECK_STR(json_string_value(json_object_get(v, "zone")), "z-flag");
  CHECK_STR(json_string_value(json_object_get(v, "cluster_type")), "dedicated");
  json_decref(v);
  json_decref(flags);

  /* under the simulators the sim value wins over the environment (as --sim always did) */
  v = lp_settings_resolve(d, NULL, LP_SETTINGS_SIM_FIRST, &problem);
  CHECK_STR(json_string_value(json_object_get(v, "zone")), "z-sim");
  json_decref(v);
  /* for the offline tools the operator's environment wins, the sim value only fills a gap */
  v = lp_settings_resolve(d, NULL, LP_SETTINGS_SIM_FALLBACK, &problem);
  CHECK_STR(json_string_value(json_object_get(v, "zone")), "z-env1");
  json_decref(v);
  unsetenv("ZONE_ID"), unsetenv("CLOUD_ZONE");
  v = lp_settings_resolve(d, NULL, LP_SETTINGS_SIM_FALLBACK, &problem);
  CHECK_STR(json_string_value(json_object_get(v, "zone")), "z-sim");
  json_decref(v);
  setenv("ZONE_ID", "z-env1", 1);

  /* a flag that names no setting */
  flags = json_pack("{s:s}", "colour", "blue");
  CHECK(lp_settings_resolve(d, flags, LP_SETTINGS_REAL, &problem) == NULL);
  CHECK_STR(problem, "unknown option --colour");
  free(problem);
  json_decref(flags);
  unsetenv("ZONE_ID"), unsetenv("CLOUD_ZONE");

  /* the help lines */
  lp_buf out = LP_BUF_INIT;
  lp_settings_usage(d, &out);
  CHECK_CONTAINS(lp_buf_cstr(&out), "  --zone VALUE");
  CHECK_CONTAINS(lp_buf_cstr(&out), "where the cluster is (env $ZONE_ID, $CLOUD_ZONE; required)");
  CHECK_CONTAINS(lp_buf_cstr(&out), "--cluster-type VALUE");
  CHECK_CONTAINS(lp_buf_cstr(&out), "(env $KIND_OF_CLUSTER; default managed)");
  lp_buf_free(&out);
  json_decref(d);
}

static void test_settings_shape(void) {
  static const struct {
    const char *json, *problem;
  } bad[] = {
      {"{\"name\": \"zone\"}", "settings is not a list"},
      {"[{\"name\": \"Zone\"}]", "settings[1].name is not a lower-case option name like \"cluster-type\""},
      {"[{\"name\": \"cluster-id\"}]", "settings[1].name \"cluster-id\" is an option of the engine itself"},
      /* `run` takes --kubeconfig and --log-level before any setting would see them */
      {"[{\"name\": \"kubeconfig\"}]", "settings[1].name \"kubeconfig\" is an option of the engine itself"},
      {"[{\"name\": \"log-level\"}]", "settings[1].name \"log-level\" is an option of the engine itself"},
      {"[{\"name\": \"zone\", \"env\": \"ZONE\"}]",
       "settings[1] (zone): env is not a list of variable names"},
      {"[{\"name\": \"zone\", \"env\": [1]}]", "settings[1] (zone): env[1] is not a variable name"},
      {"[{\"name\": \"zone\", \"default\": 3}]", "settings[1] (zone): default is not a string"},
      {"[{\"name\": \"zone\", \"required\": \"yes\"}]", "settings[1] (zone): required is not a boolean"},
      {"[{\"name\": \"zone\"}, {\"name\": \"zone\"}]", "settings[2]: \"zone\" is declared twice"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    json_t *d = json_loads(bad[i].json, JSON_DECODE_ANY, NULL);
    char *problem = lp_settings_problem(d);
    CHECK_STR(problem, bad[i].problem);
    free(problem);
    json_decref(d);
  }
  CHECK(lp_settings_problem(NULL) == NULL); /* none declared */
}

/* ---- the node class descriptor ------------------------------------------------------------- */

static json_t *descriptor(const char *kind) {
  return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "group", "karpenter.k8s.example.com", "version",
                   "v1", "kind", kind, "resource", "examplenodeclasses", "finalizer",
                   "example.com/termination", "hash_annotation", "example.com/hash",
                   "hash_version_annotation", "example.com/hash-version");
}

static void test_descriptor_checks(void) {
  json_t *d = descriptor("ExampleNodeClass");
  CHECK(lp_nodeclass_desc_problem(d) == NULL);
  lp_nodeclass_desc out;
  lp_nodeclass_desc_from_json(d, &out);
  CHECK_STR(out.resource, "examplenodeclasses");
  CHECK_STR(out.hash_version_annotation, "example.com/hash-version");
  json_object_del(d, "finalizer");
  char *problem = lp_nodeclass_desc_problem(d);
  CHECK_STR(problem, "nodeclass.finalizer is missing or not a non-empty string");
  free(problem);
  problem = lp_nodeclass_desc_problem(NULL);
  CHECK_CONTAINS(problem, "nodeclass is missing or not a table");
  free(problem);
  json_decref(d);

  /* pinned: another kind is a problem naming both; the same values are not; unpinned: anything goes */
  json_t *pinned = descriptor("ExampleNodeClass"), *other = descriptor("OtherNodeClass");
  lp_nodeclass_desc_pin(pinned);
  problem = lp_nodeclass_desc_problem(other);
  CHECK_CONTAINS(problem, "nodeclass.kind changed from \"ExampleNodeClass\" to \"OtherNodeClass\" since the "
                          "engine started");
  CHECK_CONTAINS(problem, "restart luaprov to change the node class");
  free(problem);
  json_t *same = descriptor("ExampleNodeClass");
  CHECK(lp_nodeclass_desc_problem(same) == NULL);
  lp_nodeclass_desc_unpin(pinned);
  CHECK(lp_nodeclass_desc_problem(other) == NULL);

  /* a descriptor with a gap is not pinned: a later check compares with nothing (and cannot crash) */
  json_t *broken = descriptor("OtherNodeClass"); /* as other, but for the gap */
  json_object_del(broken, "finalizer");
  lp_nodeclass_desc_pin(broken);
  CHECK(lp_nodeclass_desc_problem(other) == NULL);
  lp_nodeclass_desc_pin(json_null());
  CHECK(lp_nodeclass_desc_problem(other) == NULL);
  lp_nodeclass_desc_unpin(broken);
  json_decref(broken);
  json_decref(pinned), json_decref(other), json_decref(same);
}

/* aliases: absent, empty (a Lua {} arrives as an object) or a list of distinct other group names */
static void test_descriptor_aliases(void) {
  json_t *d = descriptor("ExampleNodeClass");
  lp_nodeclass_desc out;
  lp_nodeclass_desc_from_json(d, &out);
  CHECK_INT((int)out.naliases, 0);
  CHECK(out.aliases == NULL);
  json_object_set_new(d, "aliases", json_object());
  CHECK(lp_nodeclass_desc_problem(d) == NULL);
  json_object_set_new(d, "aliases", json_pack("[s, s]", "karpenter.example.com", "old.example.com"));
  CHECK(lp_nodeclass_desc_problem(d) == NULL);
  lp_nodeclass_desc_from_json(d, &out);
  CHECK_INT((int)out.naliases, 2);
  CHECK_STR(out.aliases[0], "karpenter.example.com");
  CHECK_STR(out.aliases[1], "old.example.com");
  lp_nodeclass_desc_release(&out);
  CHECK(out.aliases == NULL && out.naliases == 0);

  static const struct {
    const char *aliases, *problem;
  } bad[] = {
      {"\"karpenter.example.com\"", "nodeclass.aliases is not a list of API group names"},
      {"{\"a\": \"karpenter.example.com\"}", "nodeclass.aliases is not a list of API group names"},
      {"[\"karpenter.example.com\", 7]", "nodeclass.aliases[2] is not a non-empty string"},
      {"[\"\"]", "nodeclass.aliases[1] is not a non-empty string"},
      {"[\"Karpenter.Example.com\"]",
       "nodeclass.aliases[1] \"Karpenter.Example.com\" is not an API group name"},
      {"[\"karpenter.example.com/v1\"]",
       "nodeclass.aliases[1] \"karpenter.example.com/v1\" is not an API group"},
      {"[\"old.example.com\", \"karpenter.k8s.example.com\"]",
       "nodeclass.aliases[2] \"karpenter.k8s.example.com\" is nodeclass.group itself"},
      {"[\"a.example.com\", \"b.example.com\", \"a.example.com\"]",
       "nodeclass.aliases[3] \"a.example.com\" repeats aliases[1]"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    json_object_set_new(d, "aliases", json_loads(bad[i].aliases, JSON_DECODE_ANY, NULL));
    char *problem = lp_nodeclass_desc_problem(d);
    CHECK_CONTAINS(problem, bad[i].problem);
    free(problem);
    /* a descriptor with a problem of its own is not pinned */
    lp_nodeclass_desc_pin(d);
    json_t *plain = descriptor("OtherNodeClass");
    CHECK(lp_nodeclass_desc_problem(plain) == NULL);
    json_decref(plain);
    lp_nodeclass_desc_unpin(d);
    /* and reads as having none */
    lp_nodeclass_desc_from_json(d, &out);
    CHECK_INT((int)out.naliases, 0);
  }

  /* pinned: adding, dropping, reordering or renaming an alias is a change; the same list is not */
  json_t *pinned = descriptor("ExampleNodeClass");
  json_object_set_new(pinned, "aliases", json_pack("[s, s]", "a.example.com", "b.example.com"));
  lp_nodeclass_desc_pin(pinned);
  static const char *const changed[] = {"[]", "[\"a.example.com\"]", "[\"b.example.com\", \"a.example.com\"]",
                                        "[\"a.example.com\", \"c.example.com\"]", NULL};
  for (const char *const *c = changed; *c; c++) {
    json_object_set_new(d, "aliases", json_loads(*c, JSON_DECODE_ANY, NULL));
    char *problem = lp_nodeclass_desc_problem(d);
    CHECK_CONTAINS(problem, "nodeclass.aliases changed from [\"a.example.com\",\"b.example.com\"] to ");
    CHECK_CONTAINS(problem, "restart luaprov to change the node class");
    free(problem);
  }
  json_object_del(d, "aliases");
  char *problem = lp_nodeclass_desc_problem(d);
  CHECK_CONTAINS(problem, "nodeclass.aliases changed from [\"a.example.com\",\"b.example.com\"] to none");
  free(problem);
  json_object_set_new(d, "aliases", json_pack("[s, s]", "a.example.com", "b.example.com"));
  CHECK(lp_nodeclass_desc_problem(d) == NULL);
  lp_nodeclass_desc_unpin(pinned);
  json_decref(pinned);

  /* pinned without aliases: an empty table is still none, a new alias is a change */
  pinned = descriptor("ExampleNodeClass");
  lp_nodeclass_desc_pin(pinned);
  json_object_set_new(d, "aliases", json_object());
  CHECK(lp_nodeclass_desc_problem(d) == NULL);
  json_object_set_new(d, "aliases", json_pack("[s]", "a.example.com"));
  problem = lp_nodeclass_desc_problem(d);
  CHECK_CONTAINS(problem,
                 "nodeclass.aliases changed from none to [\"a.example.com\"] since the engine started");
  free(problem);
  lp_nodeclass_desc_unpin(pinned);
  json_decref(pinned);
  json_decref(d);
}

/* ---- through the script host ------------------------------------------------------------- */

static char tree[] = "/tmp/luaprov-exports-XXXXXX";

/* The default mapping with `edit` (Lua statements on M) applied, as the operator's init.lua. */
static void write_mapping(const char *edit) {
  char path[256];
  snprintf(path, sizeof path, "%s/providers/alibaba/init.lua", tree);
  FILE *f = fopen(path, "w");
  fprintf(f,
          "local default = require 'defaults.providers.alibaba'\n"
          "local M = {}\n"
          "for k, v in pairs(default) do M[k] = v end\n"
          "M.nodeclass = {}\n"
          "for k, v in pairs(default.nodeclass) do M.nodeclass[k] = v end\n"
          "%s\n"
          "return M\n",
          edit);
  fclose(f);
}

static lp_script_host *host_of(lp_problems *problems) {
  lp_script_host_config cfg = {
      .loop = &loop, .scripts_dir = tree, .defaults_dir = LUAPROV_SOURCE_DIR, .modules = lp_contract_modules};
  return lp_script_host_new(&cfg, problems);
}

/* A script host over the default mapping with edit applied (write_mapping) and a CloudProvider over it;
 * NULL (with *h NULL) when the scripts do not load. */
static lp_cloudprovider *provider_over(const char *edit, lp_script_host **h) {
  write_mapping(edit);
  lp_problems problems = {0};
  *h = host_of(&problems);
  CHECK(*h != NULL);
  lp_problems_free(&problems);
  if (!*h) return NULL;
  return lp_cloudprovider_new(
      &(lp_cloudprovider_config){.loop = &loop, .scripts = *h, .refresh_interval_s = -1});
}

static void test_provider_reads_exports(void) {
  lp_script_host *h;
  lp_cloudprovider *cp = provider_over("", &h);
  if (!cp) return;
  lp_problems problems = {0};
  const lp_nodeclass_desc *d = lp_cloudprovider_nodeclass(cp);
  CHECK_STR(d->group, "karpenter.alibabacloud.com");
  CHECK_STR(d->kind, "ECSNodeClass");
  CHECK_STR(d->resource, "ecsnodeclasses");
  CHECK_STR(d->finalizer, "karpenter.k8s.alibabacloud/termination");
  CHECK_STR(d->hash_annotation, "karpenter.k8s.alibabacloud/ecsnodeclass-hash");
  json_t *supported = lp_cloudprovider_supported_nodeclasses(cp);
  char *text = json_dumps(supported, JSON_COMPACT | JSON_SORT_KEYS);
  CHECK_STR(text,
            "[{\"group\":\"karpenter.alibabacloud.com\",\"kind\":\"ECSNodeClass\",\"version\":\"v1alpha1\"},"
            "{\"group\":\"karpenter.k8s.alibabacloud\",\"kind\":\"ECSNodeClass\",\"version\":\"v1alpha1\"}]");
  free(text);
  json_decref(supported);
  text = json_dumps(lp_cloudprovider_drift_reasons(cp), JSON_COMPACT);
  CHECK_STR(text, "[\"ImageDrift\",\"SecurityGroupDrift\",\"VSwitchDrift\"]");
  free(text);

  /* a reload that changes the descriptor is refused and the old generation keeps serving */
  uint64_t before = lp_script_host_generation_id(h);
  write_mapping("M.nodeclass.kind = 'OtherNodeClass'");
  CHECK_INT(lp_script_host_reload(h, "test", 1, &problems), -1);
  text = lp_problems_render(&problems);
  CHECK_CONTAINS(text, "providers/alibaba/init.lua:");
  CHECK_CONTAINS(text, "nodeclass.kind changed from \"ECSNodeClass\" to \"OtherNodeClass\"");
  free(text);
  lp_problems_free(&problems);
  CHECK_INT(lp_script_host_generation_id(h), before);
  CHECK_STR(lp_cloudprovider_nodeclass(cp)->kind, "ECSNodeClass");

  /* other changes still reload */
  write_mapping("M.name = 'alibabacloud'");
  CHECK_INT(lp_script_host_reload(h, "test", 1, NULL), 1);
  CHECK(lp_script_host_generation_id(h) > before);
  lp_cloudprovider_free(cp);

  /* once no provider holds the pin, a new descriptor loads (a restart) */
  write_mapping("M.nodeclass.kind = 'OtherNodeClass'");
  CHECK_INT(lp_script_host_reload(h, "test", 1, NULL), 1);
  lp_script_host_close(h, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
}

/* A mapping with aliases answers GetSupportedNodeClasses with every group, primary first; a reload
 * that changes the aliases is refused. */
static void test_provider_aliases(void) {
  lp_script_host *h;
  lp_cloudprovider *cp =
      provider_over("M.nodeclass.aliases = { 'karpenter.k8s.alibabacloud', 'old.example.com' }", &h);
  if (!cp) return;
  lp_problems problems = {0};
  const lp_nodeclass_desc *d = lp_cloudprovider_nodeclass(cp);
  CHECK_INT((int)d->naliases, 2);
  json_t *supported = lp_cloudprovider_supported_nodeclasses(cp);
  char *text = json_dumps(supported, JSON_COMPACT | JSON_SORT_KEYS);
  CHECK_STR(text,
            "[{\"group\":\"karpenter.alibabacloud.com\",\"kind\":\"ECSNodeClass\",\"version\":\"v1alpha1\"},"
            "{\"group\":\"karpenter.k8s.alibabacloud\",\"kind\":\"ECSNodeClass\",\"version\":\"v1alpha1\"},"
            "{\"group\":\"old.example.com\",\"kind\":\"ECSNodeClass\",\"version\":\"v1alpha1\"}]");
  free(text);
  json_decref(supported);

  uint64_t before = lp_script_host_generation_id(h);
  write_mapping("M.nodeclass.aliases = { 'karpenter.k8s.alibabacloud' }");
  CHECK_INT(lp_script_host_reload(h, "test", 1, &problems), -1);
  text = lp_problems_render(&problems);
  CHECK_CONTAINS(text, "providers/alibaba/init.lua:");
  CHECK_CONTAINS(text,
                 "nodeclass.aliases changed from [\"karpenter.k8s.alibabacloud\",\"old.example.com\"] to "
                 "[\"karpenter.k8s.alibabacloud\"] since the engine started");
  free(text);
  lp_problems_free(&problems);
  CHECK_INT(lp_script_host_generation_id(h), before);
  CHECK_INT((int)lp_cloudprovider_nodeclass(cp)->naliases, 2);
  write_mapping("M.nodeclass.aliases = { 'karpenter.k8s.alibabacloud', 'old.example.com' }\nM.name = 'x'");
  CHECK_INT(lp_script_host_reload(h, "test", 1, NULL), 1);
  lp_cloudprovider_free(cp);
  lp_script_host_close(h, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
}

/* A CloudProvider over a mapping loaded without validation, whose descriptor misses a field, logs it
 * and pins nothing: a validated load afterwards (a hot reload, another host) is not compared with its
 * gaps. */
static void test_unvalidated_descriptor_not_pinned(void) {
  static const lp_module_spec unchecked[] = {
      {LUAPROV_CLOUDPROVIDER_MAPPING, "CloudProvider mapping", 0, NULL}, {NULL, NULL, 0, NULL}};
  write_mapping("M.nodeclass.finalizer = nil");
  lp_problems problems = {0};
  lp_script_host_config cfg = {
      .loop = &loop, .scripts_dir = tree, .defaults_dir = LUAPROV_SOURCE_DIR, .modules = unchecked};
  lp_script_host *loose = lp_script_host_new(&cfg, &problems);
  CHECK(loose != NULL);
  lp_problems_free(&problems);
  if (!loose) return;
  lp_cloudprovider *cp = lp_cloudprovider_new(
      &(lp_cloudprovider_config){.loop = &loop, .scripts = loose, .refresh_interval_s = -1});
  CHECK_STR(lp_cloudprovider_nodeclass(cp)->finalizer, "");

  write_mapping("");
  lp_script_host *checked = host_of(&problems);
  CHECK(checked != NULL);
  lp_problems_free(&problems);
  if (checked) lp_script_host_close(checked, NULL, NULL);
  lp_cloudprovider_free(cp);
  lp_script_host_close(loose, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
}

static void test_load_refuses_broken_exports(void) {
  static const struct {
    const char *edit, *problem;
  } cases[] = {
      {"M.nodeclass.finalizer = nil", "node class descriptor: nodeclass.finalizer is missing"},
      {"M.nodeclass = nil", "nodeclass is missing or not a table"},
      {"M.nodeclass.aliases = { M.nodeclass.group }",
       "nodeclass.aliases[1] \"karpenter.alibabacloud.com\" is "
       "nodeclass.group itself"},
      {"M.settings = { { name = 'Region' } }", "settings: settings[1].name is not a lower-case option name"},
      {"M.drift_reasons = { 'imageDrift' }", "drift_reasons must be a list of CamelCase words"},
      {"M.drift_reasons = { 'Drift' .. string.rep('x', 59) }", "CamelCase words of at most 63 characters"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_mapping(cases[i].edit);
    lp_problems problems = {0};
    lp_script_host *h = host_of(&problems);
    CHECK(h == NULL);
    char *text = lp_problems_render(&problems);
    CHECK_CONTAINS(text, "providers/alibaba/init.lua:");
    CHECK_CONTAINS(text, cases[i].problem);
    free(text);
    lp_problems_free(&problems);
    if (h) lp_script_host_close(h, NULL, NULL);
  }
}

int main(void) {
  uv_loop_init(&loop);
  if (!mkdtemp(tree)) return 1;
  char path[256];
  snprintf(path, sizeof path, "%s/providers", tree);
  mkdir(path, 0700);
  snprintf(path, sizeof path, "%s/providers/alibaba", tree);
  mkdir(path, 0700);
  RUN(test_settings_values);
  RUN(test_settings_shape);
  RUN(test_descriptor_checks);
  RUN(test_descriptor_aliases);
  RUN(test_provider_reads_exports);
  RUN(test_provider_aliases);
  RUN(test_unvalidated_descriptor_not_pinned);
  RUN(test_load_refuses_broken_exports);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tree);
  if (system(cmd) != 0) return 1;
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return check_summary();
}

/* The CloudProvider mapping's exports, read from a script tree loaded once without a loop (as
 * `luaprov check` loads it): scripts cannot do I/O at load time, and nothing is called. */
#include "cli/mapping_exports.h"

#include <stdlib.h>
#include <string.h>

#include "contract/contracts.h"
#include "core/error.h"
#include "script/host.h"
#include "script/tree.h"

json_t *lp_cli_mapping_exports(const char *scripts_dir, const char *const *fields, char **problem) {
  *problem = NULL;
  const char *defaults = lp_default_scripts_dir();
  const char *layers[3] = {scripts_dir ? scripts_dir : defaults, NULL, NULL};
  if (scripts_dir && strcmp(scripts_dir, defaults) != 0) layers[1] = defaults;
  lp_generation_config cfg = {.layers = layers, .modules = lp_contract_modules, .id = 1};
  lp_problems problems = {0};
  lp_generation *g = lp_generation_load(&cfg, &problems);
  if (!g) {
    char *text = lp_problems_render(&problems);
    *problem = lp_xasprintf("the scripts do not load:\n%s", text);
    free(text);
    lp_problems_free(&problems);
    return NULL;
  }
  lp_problems_free(&problems);
  json_t *out = json_object();
  for (const char *const *f = fields; *f; f++) {
    json_t *value = lp_generation_module_json(g, LUAPROV_CLOUDPROVIDER_MAPPING, *f);
    if (value) json_object_set_new(out, *f, value);
  }
  lp_generation_unref(g);
  return out;
}

json_t *lp_cli_mapping_settings(const char *scripts_dir, char **problem) {
  static const char *const fields[] = {"settings", NULL};
  json_t *exports = lp_cli_mapping_exports(scripts_dir, fields, problem);
  if (!exports) return NULL;
  json_t *declared = json_incref(json_object_get(exports, "settings"));
  json_decref(exports);
  if (!json_is_array(declared)) {
    json_decref(declared);
    declared = json_array();
  }
  return declared;
}

char *lp_cli_unknown_setting(const char *scripts_dir, const json_t *flags) {
  if (json_object_size(flags) == 0) return NULL;
  char *problem = NULL;
  json_t *declared = lp_cli_mapping_settings(scripts_dir, &problem);
  if (!declared) { /* the command reports the tree that does not load, as without settings */
    free(problem);
    return NULL;
  }
  const char *name;
  const json_t *value;
  json_object_foreach((json_t *)flags, name, value) {
    int found = 0;
    size_t i;
    const json_t *s;
    json_array_foreach(declared, i, s) found |=
        strcmp(json_string_value(json_object_get(s, "name")), name) == 0;
    if (!found) {
      problem = lp_xasprintf("unknown option '--%s'", name);
      break;
    }
  }
  json_decref(declared);
  return problem;
}

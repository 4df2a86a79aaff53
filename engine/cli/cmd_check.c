/* luaprov check [--scripts DIR] [DIR...]: load every script of each tree in the sandbox and validate the
 * contracts of the entry modules present (docs/contracts.md). One "file:line: message" line per problem. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "contract/contracts.h"
#include "luaprov.h"
#include "script/tree.h"

static const char usage[] =
    "usage: luaprov check [--scripts DIR] [--log-level LEVEL] [--log-format json|text] [DIR...]\n"
    "\n"
    "Loads every script under DIR/policies and DIR/providers in the sandbox (as the engine does on\n"
    "reload) and validates the contract of each entry module present: policies/drift.lua,\n"
    "policies/repair.lua, policies/tags.lua, policies/disruption.lua, the CloudProvider mapping\n"
    "(" LUAPROV_CLOUDPROVIDER_MAPPING "), providers/bizfly/init.lua.\n"
    "Modules a tree does not hold come from the default tree, as at run time.\n"
    "--scripts DIR is the same as DIR (the flag every command takes). Without DIR, checks the default\n"
    "tree. Prints one 'file:line: message' line per problem and exits 1 when there is any.\n";

/* At load time scripts must not do I/O: a host that can never yield makes luaprov.http.request
 * raise the same error it raises in the engine. */
static int never_yield(lua_State *L, void *ud) {
  return 0;
}
static int no_http(lua_State *L, const lp_http_request_opts *req, void *ud) {
  return 0;
}

static int check_tree(const char *dir, const char *defaults) {
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    printf("%s: not a directory\n", dir);
    return 1;
  }
  const char *layers[3] = {dir, NULL, NULL};
  if (strcmp(dir, defaults) != 0) layers[1] = defaults;
  static const lp_lua_host load_only_host = {.http_request = no_http, .can_yield = never_yield};
  lp_generation_config cfg = {
      .layers = layers,
      .modules = lp_contract_modules,
      .host = &load_only_host,
      .id = 1,
      .load_all = 1,
  };
  lp_problems problems = {0};
  lp_generation *g = lp_generation_load(&cfg, &problems);
  if (!g) {
    char *text = lp_problems_render(&problems);
    fputs(text, stdout);
    printf("%s: %zu problem%s\n", dir, problems.count, problems.count == 1 ? "" : "s");
    free(text);
    lp_problems_free(&problems);
    return 1;
  }
  lp_script_files files = {0};
  lp_script_tree_list(dir, &files);
  if (files.count == 0) {
    /* checking nothing must not look like a pass: usually the policies/ folder was given */
    printf("%s: no scripts found: a scripts tree holds policies/*.lua and providers/<name>/*.lua; pass its "
           "root (the folder that contains policies/)\n",
           dir);
    lp_script_files_free(&files);
    lp_generation_unref(g);
    return 1;
  }
  int entries = 0;
  for (const lp_module_spec *m = lp_contract_modules; m->module; m++)
    if (lp_generation_module_file(g, m->module)) entries++;
  printf("%s: ok (%zu scripts, %d contract modules)\n", dir, files.count, entries);
  lp_script_files_free(&files);
  lp_generation_unref(g);
  return 0;
}

int lp_cmd_check(int argc, char **argv) {
  const char *dirs[64], *scripts = NULL;
  const lp_cli_opt opts[] = {{"--scripts", &scripts, NULL}, {NULL, NULL, NULL}};
  lp_cli_args a = {.cmd = "check", .opts = opts, .positional = dirs + 1, .max_positional = 63};
  int parsed = lp_cli_parse(&a, argc, argv);
  if (parsed == LP_CLI_HELP) {
    fputs(usage, stdout);
    return 0;
  }
  if (parsed != LP_CLI_OK) return 2;
  /* --scripts DIR is the tree every command takes; positional trees are checked after it */
  int ndirs = a.npositional;
  const char **first = dirs + 1;
  if (scripts) *--first = scripts, ndirs++;
  const char *level = a.log_level;
  if (!level && !getenv("LUAPROV_LOG_LEVEL")) level = "warn"; /* check talks through its own output */
  if (lp_cli_configure_logging(level, a.log_format) != 0) return 2;
  const char *defaults = lp_default_scripts_dir();
  if (ndirs == 0) first[ndirs++] = defaults;
  int failed = 0;
  for (int i = 0; i < ndirs; i++) failed |= check_tree(first[i], defaults);
  return failed ? 1 : 0;
}

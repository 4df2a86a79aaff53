/* Validators for the policy and provider-mapping contracts. They run inside the script host's
 * protected calls on the generation being loaded, so they may raise; every problem names the
 * script file and the best line we can find. */
#include "contract/contracts.h"

#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

#include "script/call.h"

typedef struct field_rule {
  const char *name;
  int type; /* LUA_TFUNCTION, LUA_TSTRING */
  int required;
} field_rule;

/* The line of the module's last top-level `return`: where the exported table is handed back, so the
 * place to add a missing field. 0 when the file cannot be read. */
static int return_line(const char *file) {
  FILE *f = fopen(file, "r");
  if (!f) return 0;
  char line[1024];
  int n = 0, found = 0;
  while (fgets(line, sizeof line, f)) {
    n++;
    if (strncmp(line, "return", 6) == 0) found = n;
  }
  fclose(f);
  return found ? found : n;
}

static int function_line(lua_State *L, int idx) {
  lua_Debug ar;
  lua_pushvalue(L, idx);
  if (!lua_getinfo(L, ">S", &ar)) return 0;
  return ar.linedefined > 0 ? ar.linedefined : 0;
}

static int check_fields(lua_State *L, int idx, const char *file, lp_problems *problems, const char *contract,
                        const field_rule *rules) {
  if (!lua_istable(L, idx)) {
    lp_problems_add(problems, file, return_line(file), "the %s must return a table, not a %s", contract,
                    luaL_typename(L, idx));
    return 0;
  }
  int ok = 1;
  for (const field_rule *r = rules; r->name; r++) {
    lua_pushstring(L, r->name);
    int t = lua_rawget(L, idx);
    if (t == LUA_TNIL) {
      if (r->required) {
        lp_problems_add(problems, file, return_line(file), "the %s must export %s '%s'", contract,
                        r->type == LUA_TFUNCTION ? "function" : "string", r->name);
        ok = 0;
      }
    } else if (t != r->type) {
      int line = t == LUA_TFUNCTION ? function_line(L, lua_gettop(L)) : return_line(file);
      lp_problems_add(problems, file, line, "'%s' of the %s must be a %s, not a %s", r->name, contract,
                      lua_typename(L, r->type), lua_typename(L, t));
      ok = 0;
    }
    lua_pop(L, 1);
  }
  return ok;
}

static void validate_drift(lua_State *L, int idx, const char *file, lp_problems *problems) {
  /* static_drift(nodeclaim, nodeclass) is optional: when present the engine asks it first, and only
   * fetches the instance for is_drifted when it finds nothing (NodeClassDrift needs no API call). */
  static const field_rule rules[] = {
      {"is_drifted", LUA_TFUNCTION, 1}, {"static_drift", LUA_TFUNCTION, 0}, {NULL, 0, 0}};
  check_fields(L, idx, file, problems, "drift policy", rules);
}

static void validate_tags(lua_State *L, int idx, const char *file, lp_problems *problems) {
  static const field_rule rules[] = {{"build_instance_tags", LUA_TFUNCTION, 1}, {NULL, 0, 0}};
  check_fields(L, idx, file, problems, "tags policy", rules);
}

static int valid_condition_status(const char *s) {
  return strcmp(s, "True") == 0 || strcmp(s, "False") == 0 || strcmp(s, "Unknown") == 0;
}

/* Besides the shape, the repair policy's list is checked by calling policies({}): it is cheap, pure
 * by contract, and a wrong entry would otherwise surface only when a node goes bad. */
static void validate_repair(lua_State *L, int idx, const char *file, lp_problems *problems) {
  static const field_rule rules[] = {{"policies", LUA_TFUNCTION, 1}, {NULL, 0, 0}};
  if (!check_fields(L, idx, file, problems, "repair policy", rules)) return;
  lua_getfield(L, idx, "policies");
  int line = function_line(L, lua_gettop(L));
  lua_newtable(L);
  lua_call(L, 1, 1);
  int list = lua_gettop(L);
  if (!lua_istable(L, list)) {
    lp_problems_add(problems, file, line,
                    "policies(ctx) must return a list of {condition_type, condition_status, "
                    "toleration_seconds}, not a %s",
                    luaL_typename(L, list));
    return;
  }
  lua_Integer n = (lua_Integer)lua_rawlen(L, list);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, list, i);
    int entry = lua_gettop(L);
    if (!lua_istable(L, entry)) {
      lp_problems_add(problems, file, line, "policies(ctx)[%d] must be a table, not a %s", (int)i,
                      luaL_typename(L, entry));
      lua_pop(L, 1);
      continue;
    }
    lua_getfield(L, entry, "condition_type");
    if (lua_type(L, -1) != LUA_TSTRING || lua_rawlen(L, -1) == 0)
      lp_problems_add(problems, file, line, "policies(ctx)[%d].condition_type must be a non-empty string",
                      (int)i);
    lua_getfield(L, entry, "condition_status");
    if (lua_type(L, -1) != LUA_TSTRING || !valid_condition_status(lua_tostring(L, -1)))
      lp_problems_add(problems, file, line,
                      "policies(ctx)[%d].condition_status must be \"True\", \"False\" or \"Unknown\"",
                      (int)i);
    lua_getfield(L, entry, "toleration_seconds");
    if (!lua_isnumber(L, -1) || lua_tonumber(L, -1) < 0)
      lp_problems_add(problems, file, line, "policies(ctx)[%d].toleration_seconds must be a number >= 0",
                      (int)i);
    lua_settop(L, list);
  }
}

static void validate_cloudprovider(lua_State *L, int idx, const char *file, lp_problems *problems) {
  static const field_rule rules[] = {
      {"name", LUA_TSTRING, 1},
      {"instance_types", LUA_TFUNCTION, 1},
      {"create", LUA_TFUNCTION, 1},
      {"delete", LUA_TFUNCTION, 1},
      {"get", LUA_TFUNCTION, 1},
      {"list", LUA_TFUNCTION, 1},
      {"resolve_nodeclass", LUA_TFUNCTION, 1},
      {"provider_id", LUA_TFUNCTION, 1},
      {"parse_provider_id", LUA_TFUNCTION, 1},
      {NULL, 0, 0},
  };
  check_fields(L, idx, file, problems, "CloudProvider mapping", rules);
}

static void validate_nodegroup(lua_State *L, int idx, const char *file, lp_problems *problems) {
  static const field_rule rules[] = {
      {"name", LUA_TSTRING, 1},
      {"gpu_label", LUA_TSTRING, 1},
      {"refresh", LUA_TFUNCTION, 1},
      {"set_target_size", LUA_TFUNCTION, 1},
      {"delete_node", LUA_TFUNCTION, 1},
      {"template_node", LUA_TFUNCTION, 0}, /* the optional ones: without them, UNIMPLEMENTED */
      {"get_options", LUA_TFUNCTION, 0},   /* NodeGroupGetOptions */
      {"node_price", LUA_TFUNCTION, 0},    /* PricingNodePrice */
      {"pod_price", LUA_TFUNCTION, 0},     /* PricingPodPrice */
      {NULL, 0, 0},
  };
  check_fields(L, idx, file, problems, "NodeGroup mapping", rules);
}

const lp_module_spec lp_contract_modules[] = {
    {"policies.drift", "drift policy (SPEC 4.4)", 0, validate_drift},
    {"policies.repair", "repair policy (SPEC 4.4)", 0, validate_repair},
    {"policies.tags", "tags policy (SPEC 4.4)", 0, validate_tags},
    {"providers.alibaba", "CloudProvider mapping (SPEC 4.5)", 0, validate_cloudprovider},
    {"providers.bizfly", "NodeGroup mapping (SPEC 4.5)", 0, validate_nodegroup},
    {NULL, NULL, 0, NULL},
};

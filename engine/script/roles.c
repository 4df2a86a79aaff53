/* The capability table of the script roles (roles.h) and the `luaprov` copy each role sees. */
#include "script/roles.h"

#include <lauxlib.h>
#include <string.h>

#include "core/error.h"
#include "script/endpoints.h"
#include "script/module_name.h"
#include "script/sandbox.h"

#define ROLE(r) (1u << (r))
#define POLICIES                                                                                             \
  (ROLE(LP_ROLE_DRIFT) | ROLE(LP_ROLE_REPAIR) | ROLE(LP_ROLE_TAGS) | ROLE(LP_ROLE_DISRUPTION) |              \
   ROLE(LP_ROLE_POLICY))
#define EVERY   ((1u << LP_ROLE_COUNT) - 1)
#define MAPPING ROLE(LP_ROLE_MAPPING)
#define SIM     ROLE(LP_ROLE_SIMULATOR)

/* THE table (docs/lua-api.md#capabilities keeps its prose twin). A row with a function applies to that
 * function only and wins over its sub-module's row; a sub-module or field with no row is refused to
 * every role, so a binding added later is nobody's until it is listed here. */
static const struct capability {
  const char *module;
  const char *function; /* NULL = the whole sub-module */
  unsigned roles;
} capabilities[] = {
    {"http", NULL, MAPPING | SIM},  /* a mapping's only to its endpoints (script/endpoints.h) */
    {"env", NULL, MAPPING | SIM},   /* where the credentials are */
    {"fs", NULL, MAPPING | SIM},    /* mounted secrets and tokens */
    {"cache", NULL, MAPPING | SIM}, /* caches are process-wide by name: a policy could read a mapping's */
    {"stream", NULL, SIM},          /* the simulators' streaming HTTP handlers */
    {"json", NULL, EVERY},
    {"log", NULL, EVERY},
    {"crypto", NULL, EVERY},
    {"time", NULL, EVERY},
    {"time", "sleep", MAPPING | SIM}, /* a policy answers at once; the kit's builders never wait */
    {"version", NULL, EVERY},
};

static const struct {
  const char *title;
  const char *reason; /* why the role lacks what it lacks */
} roles[LP_ROLE_COUNT] = {
    [LP_ROLE_DRIFT] = {"a drift policy", "policies decide from the objects they are given"},
    [LP_ROLE_REPAIR] = {"a repair policy", "policies decide from the objects they are given"},
    [LP_ROLE_TAGS] = {"a tags policy", "policies decide from the objects they are given"},
    [LP_ROLE_DISRUPTION] = {"a disruption policy", "policies decide from the objects they are given"},
    [LP_ROLE_POLICY] = {"a policy module", "policies decide from the objects they are given"},
    [LP_ROLE_MAPPING] = {"a mapping", "streams belong to the simulators' HTTP handlers"},
    [LP_ROLE_SIMULATOR] = {"a simulator", "a simulator may use every capability"},
    [LP_ROLE_TESTKIT] = {"the test kit", "the test kit's builders only build objects"},
};

lp_role lp_role_of_module(const char *module) {
  static const struct {
    const char *name;
    int prefix; /* the name and everything below it */
    lp_role role;
  } names[] = {
      {"policies.drift", 0, LP_ROLE_DRIFT},     {"policies.repair", 0, LP_ROLE_REPAIR},
      {"policies.tags", 0, LP_ROLE_TAGS},       {"policies.disruption", 0, LP_ROLE_DISRUPTION},
      {"providers.", 1, LP_ROLE_MAPPING},       {"sim.", 1, LP_ROLE_SIMULATOR},
      {"luaprov.testkit.", 1, LP_ROLE_TESTKIT},
  };
  if (!module) return LP_ROLE_POLICY;
  module = lp_module_bare(module);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].prefix ? strncmp(module, names[i].name, strlen(names[i].name)) == 0
                        : strcmp(module, names[i].name) == 0)
      return names[i].role;
  return LP_ROLE_POLICY;
}

const char *lp_role_title(lp_role role) {
  return roles[role].title;
}

/* The row that decides module.function (function NULL: the sub-module itself); NULL when none. */
static const struct capability *row_for(const char *module, const char *function) {
  const struct capability *found = NULL;
  for (size_t i = 0; i < sizeof capabilities / sizeof capabilities[0]; i++) {
    const struct capability *c = &capabilities[i];
    if (strcmp(c->module, module) != 0) continue;
    if (function && c->function && strcmp(c->function, function) == 0) return c;
    if (!c->function) found = c;
  }
  return found;
}

static int allowed(lp_role role, const char *module, const char *function) {
  const struct capability *c = row_for(module, function);
  return c && (c->roles & ROLE(role));
}

/* Pushes the refusal for luaprov.<name> (a table of refusals when table). [-0, +1, m] */
static void push_refused(lua_State *L, lp_role role, const char *name, int table) {
  lua_pushfstring(L, "luaprov.%s is not available to %s (%s; see docs/lua-api.md#capabilities)", name,
                  roles[role].title, roles[role].reason);
  if (table)
    lp_sandbox_push_refusing_table(L, lua_tostring(L, -1));
  else
    lp_sandbox_push_refusal(L, lua_tostring(L, -1));
  lua_remove(L, -2);
}

/* Pushes role's copy of the sub-table at idx, named module.            [-0, +1, m] */
static void push_sub_copy(lua_State *L, int idx, lp_role role, const char *module) {
  idx = lua_absindex(L, idx);
  lua_newtable(L);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) == LUA_TSTRING && !allowed(role, module, lua_tostring(L, -2))) {
      lua_pop(L, 1);
      lua_pushfstring(L, "%s.%s", module, lua_tostring(L, -1));
      push_refused(L, role, lua_tostring(L, -1), 0);
      lua_remove(L, -2);
    }
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, -4);
  }
}

void lp_role_push_bindings(lua_State *L, int src, lp_role role, const char *module) {
  src = lua_absindex(L, src);
  lua_newtable(L);
  lua_pushnil(L);
  while (lua_next(L, src)) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      lua_pop(L, 1);
      continue;
    }
    const char *name = lua_tostring(L, -2);
    if (!allowed(role, name, NULL)) {
      int table = lua_istable(L, -1);
      lua_pop(L, 1);
      push_refused(L, role, name, table);
    } else if (lua_istable(L, -1)) {
      push_sub_copy(L, -1, role, name);
      lua_replace(L, -2);
      if (role == LP_ROLE_MAPPING && strcmp(name, "http") == 0) lp_endpoints_guard_http(L, -1, module);
    }
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, -4);
  }
}

char *lp_role_require_problem(const char *requirer_module, const char *module) {
  lp_role requirer = lp_role_of_module(requirer_module), required = lp_role_of_module(module);
  char own[128], other[128];
  const char *mine = lp_module_mapping(requirer_module, own, sizeof own);
  const char *theirs = lp_module_mapping(module, other, sizeof other);
  if (mine && theirs && strcmp(mine, theirs) != 0)
    return lp_xasprintf(
        "module '%s' is not available to the mapping %s: it is the mapping %s's, and a mapping "
        "requires only its own modules (each reaches only its own endpoints; see "
        "docs/lua-api.md#capabilities)",
        module, mine, theirs);
  for (size_t i = 0; i < sizeof capabilities / sizeof capabilities[0]; i++) {
    const struct capability *c = &capabilities[i];
    if (!(c->roles & ROLE(required)) || (c->roles & ROLE(requirer))) continue;
    return lp_xasprintf(
        "module '%s' is not available to %s: it is %s's and may use luaprov.%s%s%s, which %s may "
        "not (%s; see docs/lua-api.md#capabilities)",
        module, roles[requirer].title, roles[required].title, c->module, c->function ? "." : "",
        c->function ? c->function : "", roles[requirer].title, roles[requirer].reason);
  }
  return NULL;
}

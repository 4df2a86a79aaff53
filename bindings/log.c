/* luaprov.log: structured log lines from scripts, through the engine's logger. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "json.h"
#include "luaprov.h"

#define MAX_FIELDS 32

static int compare_fields(const void *a, const void *b) {
  return strcmp(((const lp_field *)a)->key, ((const lp_field *)b)->key);
}

/* Converts the fields table at idx. Nested tables are rendered as JSON strings anchored on the
 * stack below the traversal, so every pointer in fields stays valid until the line is written. */
static size_t read_fields(lua_State *L, int idx, lp_field *fields) {
  size_t n = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "luaprov.log: field names must be strings");
    if (n == MAX_FIELDS) luaL_error(L, "luaprov.log: more than %d fields", MAX_FIELDS);
    const char *key = lua_tostring(L, -2);
    switch (lua_type(L, -1)) {
    case LUA_TSTRING:
      fields[n] = LPF_STR(key, lua_tostring(L, -1));
      break;
    case LUA_TNUMBER:
      fields[n] =
          lua_isinteger(L, -1) ? LPF_INT(key, lua_tointeger(L, -1)) : LPF_NUM(key, lua_tonumber(L, -1));
      break;
    case LUA_TBOOLEAN:
      fields[n] = LPF_BOOL(key, lua_toboolean(L, -1));
      break;
    case LUA_TTABLE: {
      lp_buf json = LP_BUF_INIT;
      lp_error *err = NULL;
      int ok = lp_json_encode(L, lua_gettop(L), &json, &err) == 0;
      lua_pushstring(L, ok ? lp_buf_cstr(&json) : "\"(table that is not plain data)\"");
      lp_buf_free(&json);
      lp_error_free(err);
      lua_insert(L, idx + 1);
      fields[n] = LPF_JSON(key, lua_tostring(L, idx + 1));
      break;
    }
    default:
      fields[n] = LPF_STR(key, luaL_typename(L, -1)); /* static type names */
    }
    n++;
    lua_pop(L, 1);
  }
  qsort(fields, n, sizeof *fields, compare_fields);
  return n;
}

static int log_at(lua_State *L, lp_log_level level) {
  const char *msg = luaL_checkstring(L, 1);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  if (!lp_log_enabled(level)) return 0;
  lua_settop(L, 2);
  const lp_lua_host *host = lp_bindings_host(L);
  const char *logger = host && host->logger_name ? host->logger_name(L, host->ud) : "script";
  lp_field fields[MAX_FIELDS];
  size_t n = lua_istable(L, 2) ? read_fields(L, 2, fields) : 0;
  lp_log_emit(level, logger, msg, fields, n);
  return 0;
}

/* luaprov.log.debug|info|warn|error(msg, fields?)                         [-(1|2), +0, e]
 * msg is a constant text; variable parts go in fields (string keys; string, number, boolean or
 * table values — tables are written as JSON). Keys naming credentials are redacted by the logger. */
static int log_debug(lua_State *L) {
  return log_at(L, LP_LOG_DEBUG);
}
static int log_info(lua_State *L) {
  return log_at(L, LP_LOG_INFO);
}
static int log_warn(lua_State *L) {
  return log_at(L, LP_LOG_WARN);
}
static int log_error(lua_State *L) {
  return log_at(L, LP_LOG_ERROR);
}

int lp_open_log(lua_State *L) {
  static const luaL_Reg functions[] = {
      {"debug", log_debug}, {"info", log_info}, {"warn", log_warn}, {"error", log_error}, {NULL, NULL},
  };
  luaL_newlib(L, functions);
  return 1;
}

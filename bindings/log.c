/* luaprov.log: structured log lines from scripts, through the engine's logger. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "json.h"
#include "luaprov.h"

#define MAX_FIELDS 32

/* Credentials nested anywhere in a table field are replaced as the logger does for top-level keys:
 * {request = {headers = {Authorization = ...}}} must not reach a log line either. */
static void redact_nested(json_t *value) {
  const char *key;
  json_t *child;
  size_t i;
  if (json_is_object(value)) {
    json_object_foreach(value, key, child) {
      if (lp_log_key_is_secret(key))
        json_object_set_new(value, key, json_string("[redacted]"));
      else
        redact_nested(child);
    }
  } else if (json_is_array(value)) {
    json_array_foreach(value, i, child) redact_nested(child);
  }
}

/* The JSON text of a table field with nested credentials redacted; the caller frees it. */
static char *redacted_json(const char *text) {
  json_t *value = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
  if (!value) return NULL;
  redact_nested(value);
  char *out = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
  json_decref(value);
  return out;
}

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
      char *clean = ok ? redacted_json(lp_buf_cstr(&json)) : NULL;
      lp_buf_free(&json);
      lp_error_free(err);
      lua_pushstring(L, clean ? clean : "\"(table that is not plain data)\"");
      free(clean);
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
  if (lua_istable(L, 2) && lp_json_push_view_contents(L, 2)) lua_replace(L, 2); /* obj.metadata.labels */
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

/* luaprov.cache: TTL caches owned by the engine (C), shared by every script generation, so cached
 * answers survive hot reloads. Values are strings, numbers, booleans or plain-data tables; tables
 * are stored as JSON and come back as fresh tables. */
#include <string.h>

#include "core/cache.h"
#include "json.h"
#include "luaprov.h"

#define CACHE_MT            "luaprov.cache"
#define DEFAULT_MAX_ENTRIES 10000

/* A tag byte before the payload says how to rebuild the value. */
enum {
  TAG_STRING = 's',
  TAG_INTEGER = 'i',
  TAG_FLOAT = 'f',
  TAG_TRUE = 't',
  TAG_FALSE = 'F',
  TAG_JSON = 'j'
};

static lp_cache *check_cache(lua_State *L, int idx) {
  lp_cache **ud = luaL_checkudata(L, idx, CACHE_MT);
  return *ud;
}

/* luaprov.cache.new(name, ttl_s [, max_entries]) -> cache                 [-(2|3), +1, e]
 * The same name returns the same underlying cache (its first ttl and size win), in this and every
 * later generation. */
static int cache_new(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  lua_Number ttl = luaL_checknumber(L, 2);
  lua_Integer max = luaL_optinteger(L, 3, DEFAULT_MAX_ENTRIES);
  luaL_argcheck(L, name[0] != '\0', 1, "cache name must not be empty");
  luaL_argcheck(L, ttl > 0, 2, "ttl must be positive (seconds)");
  luaL_argcheck(L, max > 0, 3, "max_entries must be positive");
  lp_cache **ud = lua_newuserdatauv(L, sizeof *ud, 0);
  *ud = lp_cache_registry_get(name, (double)ttl, (size_t)max);
  luaL_setmetatable(L, CACHE_MT);
  return 1;
}

/* cache:get(key) -> value | nil                                          [-2, +1, e] */
static int cache_get(lua_State *L) {
  lp_cache *c = check_cache(L, 1);
  size_t key_len;
  const char *key = luaL_checklstring(L, 2, &key_len);
  size_t len;
  const char *v = lp_cache_get(c, key, key_len, &len);
  if (!v || len == 0) {
    lua_pushnil(L);
    return 1;
  }
  const char *payload = v + 1;
  size_t payload_len = len - 1;
  switch (v[0]) {
  case TAG_STRING:
    lua_pushlstring(L, payload, payload_len);
    break;
  case TAG_INTEGER: {
    lua_Integer i; /* the payload follows a tag byte: unaligned, so copy it out */
    memcpy(&i, payload, sizeof i);
    lua_pushinteger(L, i);
    break;
  }
  case TAG_FLOAT: {
    lua_Number d;
    memcpy(&d, payload, sizeof d);
    lua_pushnumber(L, d);
    break;
  }
  case TAG_TRUE:
    lua_pushboolean(L, 1);
    break;
  case TAG_FALSE:
    lua_pushboolean(L, 0);
    break;
  case TAG_JSON: {
    /* copy into one Lua string first: decoding allocates, and nothing may run between reading the
     * cache's pointer and the copy (lua_pushlstring copies before it can collect) */
    lua_pushlstring(L, payload, payload_len);
    size_t n;
    const char *text = lua_tolstring(L, -1, &n);
    lp_error *err = NULL;
    if (lp_json_push_text(L, text, n, &err) != 0) {
      lp_error_free(err);
      lua_pushnil(L);
    }
    break;
  }
  default:
    lua_pushnil(L);
  }
  return 1;
}

/* cache:set(key, value [, ttl_s]) -> true                                 [-(3|4), +1, e]
 * value nil deletes the key. */
static int cache_set(lua_State *L) {
  lp_cache *c = check_cache(L, 1);
  size_t key_len;
  const char *key = luaL_checklstring(L, 2, &key_len);
  lua_Number ttl = luaL_optnumber(L, 4, 0);
  luaL_argcheck(L, ttl >= 0, 4, "ttl must not be negative");
  lp_buf value = LP_BUF_INIT;
  switch (lua_type(L, 3)) {
  case LUA_TNIL:
    lp_cache_delete(c, key, key_len);
    lua_pushboolean(L, 1);
    return 1;
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, 3, &n);
    lp_buf_putc(&value, TAG_STRING);
    lp_buf_append(&value, s, n);
    break;
  }
  case LUA_TNUMBER:
    if (lua_isinteger(L, 3)) {
      lua_Integer i = lua_tointeger(L, 3);
      lp_buf_putc(&value, TAG_INTEGER);
      lp_buf_append(&value, &i, sizeof i);
    } else {
      lua_Number d = lua_tonumber(L, 3);
      lp_buf_putc(&value, TAG_FLOAT);
      lp_buf_append(&value, &d, sizeof d);
    }
    break;
  case LUA_TBOOLEAN:
    lp_buf_putc(&value, lua_toboolean(L, 3) ? TAG_TRUE : TAG_FALSE);
    break;
  case LUA_TTABLE: {
    lp_buf_putc(&value, TAG_JSON);
    lp_error *err = NULL;
    if (lp_json_encode(L, 3, &value, &err) != 0) {
      lp_buf_free(&value);
      lua_pushstring(L, err->message);
      lp_error_free(err);
      return luaL_argerror(L, 3, lua_tostring(L, -1));
    }
    break;
  }
  default:
    return luaL_argerror(L, 3, "cache values must be strings, numbers, booleans or plain tables");
  }
  lp_cache_set(c, key, key_len, value.data, value.len, (double)ttl);
  lp_buf_free(&value);
  lua_pushboolean(L, 1);
  return 1;
}

/* cache:delete(key) -> boolean (whether it was present)                  [-2, +1, e] */
static int cache_delete(lua_State *L) {
  lp_cache *c = check_cache(L, 1);
  size_t key_len;
  const char *key = luaL_checklstring(L, 2, &key_len);
  lua_pushboolean(L, lp_cache_delete(c, key, key_len));
  return 1;
}

static int cache_tostring(lua_State *L) {
  lp_cache *c = check_cache(L, 1);
  lua_pushfstring(L, "luaprov.cache(%s, %d entries)", lp_cache_name(c), (int)lp_cache_size(c));
  return 1;
}

int lp_open_cache(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"get", cache_get},
      {"set", cache_set},
      {"delete", cache_delete},
      {NULL, NULL},
  };
  if (luaL_newmetatable(L, CACHE_MT)) {
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, cache_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "luaprov.cache");
    lua_setfield(L, -2, "__metatable");
  }
  lua_pop(L, 1);
  static const luaL_Reg functions[] = {{"new", cache_new}, {NULL, NULL}};
  luaL_newlib(L, functions);
  return 1;
}

#include "script/sandbox.h"

#include <lauxlib.h>
#include <lualib.h>
#include <string.h>

#include "core/buf.h"
#include "core/log.h"
#include "script/pattern.h"

#define SANDBOX_LIBS_KEY "luaprov.sandbox.libs"

/* Base functions a script may use. Missing on purpose: dofile, loadfile, collectgarbage (a script
 * could stop the collector), print/load/getmetatable/require (replaced below). */
static const char *const safe_base_functions[] = {
    "assert", "error",  "ipairs",       "next",     "pairs",    "pcall", "rawequal", "rawget", "rawlen",
    "rawset", "select", "setmetatable", "tonumber", "tostring", "type",  "xpcall",   NULL,
};

/* Libraries copied per script; the copy is what the script sees, so assigning string.upper in one
 * script changes nothing for the others. */
static const char *const copied_libraries[] = {"string", "table", "math", "utf8", "coroutine", NULL};

static const char *const safe_os_functions[] = {"clock", "time", "date", NULL};

static void copy_table_shallow(lua_State *L, int src, const char *skip) {
  src = lua_absindex(L, src);
  lua_newtable(L);
  lua_pushnil(L);
  while (lua_next(L, src)) {
    if (skip && lua_type(L, -2) == LUA_TSTRING && strcmp(lua_tostring(L, -2), skip) == 0) {
      lua_pop(L, 1);
      continue;
    }
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, -4);
  }
}

void lp_sandbox_prepare(lua_State *L) {
  static const luaL_Reg libs[] = {
      {LUA_GNAME, luaopen_base},       {LUA_STRLIBNAME, luaopen_string},
      {LUA_TABLIBNAME, luaopen_table}, {LUA_MATHLIBNAME, luaopen_math},
      {LUA_UTF8LIBNAME, luaopen_utf8}, {LUA_COLIBNAME, luaopen_coroutine},
      {LUA_OSLIBNAME, luaopen_os},     {NULL, NULL},
  };
  lua_newtable(L); /* registry copy of the pristine libraries */
  for (const luaL_Reg *lib = libs; lib->func; lib++) {
    luaL_requiref(L, lib->name, lib->func, 0);
    lua_setfield(L, -2, lib->name);
  }

  /* The state's own string table is the string metatable's __index, so ("x"):find(...) goes through
   * the guarded matcher too, not only string.find. */
  lua_getfield(L, -1, LUA_STRLIBNAME);
  lp_pattern_install(L, lua_gettop(L));
  lua_pop(L, 1);

  lua_pushliteral(L, "");
  if (lua_getmetatable(L, -1)) {
    lua_pushliteral(L, "the string metatable is sealed in the sandbox");
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
  }
  lua_pop(L, 1);

  lua_setfield(L, LUA_REGISTRYINDEX, SANDBOX_LIBS_KEY);
}

/* getmetatable(v) -> metatable | __metatable field | nil; refuses strings.   [-1, +1, e] */
static int sandbox_getmetatable(lua_State *L) {
  luaL_checkany(L, 1);
  if (lua_type(L, 1) == LUA_TSTRING)
    return luaL_error(L, "getmetatable on strings is not allowed in the sandbox");
  if (!lua_getmetatable(L, 1)) {
    lua_pushnil(L);
    return 1;
  }
  luaL_getmetafield(L, 1, "__metatable");
  return 1;
}

/* load(chunk [, chunkname [, mode [, env]]]) -> function | nil, message
 * Text chunks only; env defaults to the calling script's own environment (upvalue 1). [-(1..4), +(1|2), e] */
static int sandbox_load(lua_State *L) {
  const char *mode = luaL_optstring(L, 3, "t");
  if (strcmp(mode, "t") != 0)
    return luaL_error(L, "load: mode '%s' is not allowed in the sandbox (text only)", mode);
  int nargs = lua_gettop(L);
  lua_settop(L, 4);
  if (nargs < 4) {
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_replace(L, 4);
  }
  lua_pushliteral(L, "t");
  lua_replace(L, 3);
  lua_getfield(L, LUA_REGISTRYINDEX, SANDBOX_LIBS_KEY);
  lua_getfield(L, -1, LUA_GNAME);
  lua_getfield(L, -1, "load");
  lua_insert(L, 1);
  lua_settop(L, 5);
  lua_call(L, 4, LUA_MULTRET);
  return lua_gettop(L);
}

/* print(...) writes one info line with the script's logger name (upvalue 1). [-n, +0, e] */
static int sandbox_print(lua_State *L) {
  int n = lua_gettop(L);
  lp_buf text = LP_BUF_INIT;
  for (int i = 1; i <= n; i++) {
    size_t len;
    const char *s = luaL_tolstring(L, i, &len);
    if (i > 1) lp_buf_putc(&text, '\t');
    lp_buf_append(&text, s, len);
    lua_pop(L, 1);
  }
  const char *logger = lua_tostring(L, lua_upvalueindex(1));
  lp_info(logger, "print", LPF_STR("text", lp_buf_cstr(&text)));
  lp_buf_free(&text);
  return 0;
}

void lp_sandbox_push_env(lua_State *L, const char *script_name, lua_CFunction require_fn, void *require_ud) {
  lua_getfield(L, LUA_REGISTRYINDEX, SANDBOX_LIBS_KEY);
  int libs = lua_gettop(L);
  lua_newtable(L);
  int env = lua_gettop(L);

  lua_getfield(L, libs, LUA_GNAME);
  for (const char *const *name = safe_base_functions; *name; name++) {
    lua_getfield(L, -1, *name);
    lua_setfield(L, env, *name);
  }
  lua_getfield(L, -1, "_VERSION");
  lua_setfield(L, env, "_VERSION");
  lua_pop(L, 1);

  for (const char *const *name = copied_libraries; *name; name++) {
    lua_getfield(L, libs, *name);
    copy_table_shallow(L, -1, strcmp(*name, LUA_STRLIBNAME) == 0 ? "dump" : NULL);
    lua_setfield(L, env, *name);
    lua_pop(L, 1);
  }

  lua_getfield(L, libs, LUA_OSLIBNAME);
  lua_newtable(L);
  for (const char *const *name = safe_os_functions; *name; name++) {
    lua_getfield(L, -2, *name);
    lua_setfield(L, -2, *name);
  }
  lua_setfield(L, env, LUA_OSLIBNAME);
  lua_pop(L, 1);

  lua_pushcfunction(L, sandbox_getmetatable);
  lua_setfield(L, env, "getmetatable");

  lua_pushvalue(L, env);
  lua_pushcclosure(L, sandbox_load, 1);
  lua_setfield(L, env, "load");

  lua_pushfstring(L, "script.%s", script_name);
  lua_pushcclosure(L, sandbox_print, 1);
  lua_setfield(L, env, "print");

  lua_pushlightuserdata(L, require_ud);
  lua_pushcclosure(L, require_fn, 1);
  lua_setfield(L, env, "require");

  lua_pushvalue(L, env);
  lua_setfield(L, env, "_G");

  lua_remove(L, libs);
}

#include "script/sandbox.h"

#include <lauxlib.h>
#include <lualib.h>
#include <string.h>

#include "core/log.h"
#include "json.h"
#include "script/call.h"
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

/* What the sandbox removed, by the name a script would use: reading one gives a function that raises
 * "<name> is not available in the sandbox (see docs/lua-api.md#the-sandbox)" at the caller's line,
 * rather than "attempt to call a nil value". The removed libraries read as tables whose every field is
 * such a function, so io.open(...) says "io.open is not available". Nothing is added to the
 * environment itself: pairs(_G) and rawget(_G, "dofile") still see nothing. */
static const char *const removed_functions[] = {"dofile", "loadfile", "collectgarbage", "warn", NULL};
static const char *const removed_libraries[] = {"io", "debug", "package", NULL};
static const char *const removed_os_functions[] = {"execute", "exit",    "getenv",    "remove",
                                                   "rename",  "tmpname", "setlocale", NULL};

static int listed(const char *const *names, const char *name) {
  for (const char *const *n = names; *n; n++)
    if (strcmp(*n, name) == 0) return 1;
  return 0;
}

/* Located at the nearest script line: after a tail call (`return io.open(f)`) the calling frame is
 * gone, and the line is that of the frame below it. */
int lp_sandbox_raise(lua_State *L, const char *message) {
  lua_Debug ar;
  int level = 1;
  while (lua_getstack(L, level, &ar) && lua_getinfo(L, "l", &ar) && ar.currentline <= 0) level++;
  luaL_where(L, level);
  lua_pushstring(L, message);
  lua_concat(L, 2);
  return lua_error(L);
}

/* A function that refuses (upvalue 1: the whole message).                     [-0, +0, e] */
static int refusal(lua_State *L) {
  return lp_sandbox_raise(L, lua_tostring(L, lua_upvalueindex(1)));
}

void lp_sandbox_push_refusal(lua_State *L, const char *message) {
  lua_pushstring(L, message);
  lua_pushcclosure(L, refusal, 1);
}

/* __index of a refusing table (upvalue 1: the message every field's function raises). [-0, +1, -] */
static int refusing_index(lua_State *L) {
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushcclosure(L, refusal, 1);
  return 1;
}

void lp_sandbox_push_refusing_table(lua_State *L, const char *message) {
  lua_newtable(L);
  lua_newtable(L);
  lua_pushstring(L, message);
  lua_pushcclosure(L, refusing_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pushliteral(L, "a refused library");
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
}

/* The stand-in for a removed function, by the name a script would use.       [-0, +1, m] */
static void push_removed_function(lua_State *L, const char *prefix, const char *name) {
  lua_pushfstring(L, "%s%s is not available in the sandbox (see docs/lua-api.md#the-sandbox)", prefix, name);
  lua_pushcclosure(L, refusal, 1);
}

/* __index of a removed library's stand-in table (upvalue 1: the library's name).  [-0, +1, -] */
static int removed_library_index(lua_State *L) {
  if (lua_type(L, 2) != LUA_TSTRING) return 0;
  lua_pushfstring(L, "%s.", lua_tostring(L, lua_upvalueindex(1)));
  push_removed_function(L, lua_tostring(L, -1), lua_tostring(L, 2));
  return 1;
}

/* __index of a script's environment: the removed functions and libraries; nil otherwise. */
static int removed_global_index(lua_State *L) {
  if (lua_type(L, 2) != LUA_TSTRING) return 0;
  const char *name = lua_tostring(L, 2);
  if (listed(removed_functions, name)) {
    push_removed_function(L, "", name);
    return 1;
  }
  if (!listed(removed_libraries, name)) return 0;
  lua_newtable(L);
  lua_newtable(L);
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, removed_library_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pushliteral(L, "a removed library");
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
  return 1;
}

/* __index of a script's os table: the removed os functions; nil otherwise. */
static int removed_os_index(lua_State *L) {
  if (lua_type(L, 2) != LUA_TSTRING || !listed(removed_os_functions, lua_tostring(L, 2))) return 0;
  push_removed_function(L, "os.", lua_tostring(L, 2));
  return 1;
}

/* Sets on the table at idx a metatable whose __index is fn. */
static void set_index(lua_State *L, int idx, lua_CFunction fn) {
  idx = lua_absindex(L, idx);
  lua_newtable(L);
  lua_pushcfunction(L, fn);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, idx);
}

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
  lua_pushnil(L); /* ("").dump would reach it through the string metatable otherwise */
  lua_setfield(L, -2, "dump");
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
  luaL_Buffer text; /* Lua memory: a raising __tostring leaks nothing and counts against the cap */
  luaL_buffinit(L, &text);
  for (int i = 1; i <= n; i++) {
    luaL_tolstring(L, i, NULL);
    if (i > 1) luaL_addchar(&text, '\t');
    luaL_addvalue(&text);
  }
  luaL_pushresult(&text);
  const char *logger = lua_tostring(L, lua_upvalueindex(1));
  lp_info(logger, "print", LPF_STR("text", lua_tostring(L, -1)));
  return 0;
}

/* setmetatable(t, mt): as Lua's, but refuses __gc. Lua runs finalizers with hooks off, so a finalizer
 * would escape the instruction budget and could spin the loop thread forever. [-2, +1, e] */
static int sandbox_setmetatable(lua_State *L) {
  if (lua_istable(L, 2)) {
    lua_pushliteral(L, "__gc");
    if (lua_rawget(L, 2) != LUA_TNIL)
      return luaL_error(
          L, "__gc metamethods are not allowed in the sandbox (finalizers run outside the budget)");
    lua_pop(L, 1);
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

/* next, rawget, rawlen (upvalue 1: Lua's own) on a read-only view (bindings/json.h) act on what it
 * shows: a view is an empty table, and `next(obj.metadata.labels) == nil` must not call every object
 * empty. rawset refuses a view as an assignment would. */
static int sandbox_raw_view(lua_State *L) {
  if (lua_istable(L, 1) && lp_json_push_view_contents(L, 1)) lua_replace(L, 1);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

static int sandbox_rawset(lua_State *L) {
  if (lua_istable(L, 1) && lp_json_push_view_contents(L, 1)) return lp_json_view_refuse(L, 1, 2);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

/* The coroutine a task runs on belongs to the host: a script resuming or closing it would wake it
 * while the host still waits for its request or timer. */
static int is_task_thread(lua_State *co) {
  lp_thread_ctx *ctx = lp_thread_ctx_get(co);
  return ctx && ctx->task && lp_task_coroutine(ctx->task) == co;
}

/* While a script's coroutine runs, it runs on the budget of the thread that resumed it (the calling
 * task), and only then: between resumes it holds no pointer that could outlive that task. */
static void lend_budget(lua_State *L, lua_State *co) {
  *(lp_thread_ctx **)lua_getextraspace(co) = L ? lp_thread_ctx_get(L) : NULL;
}

/* coroutine.create(f) -> co                                                  [-1, +1, e] */
static int sandbox_co_create(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_State *co = lua_newthread(L);
  lend_budget(NULL, co);
  lua_pushvalue(L, 1);
  lua_xmove(L, co, 1);
  return 1;
}

/* coroutine.resume|close(co, ...): Lua's own (upvalue 1), except on a task's coroutine. */
static int sandbox_co_guarded(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  if (co && is_task_thread(co))
    return luaL_error(L, "a task's own coroutine cannot be resumed or closed by a script");
  if (co) lend_budget(L, co);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  int status = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
  if (co) lend_budget(NULL, co);
  if (status != LUA_OK) return lua_error(L);
  return lua_gettop(L);
}

/* The function coroutine.wrap returns: resume, and raise the coroutine's error in the caller. */
static int sandbox_co_wrapped(lua_State *L) {
  lua_State *co = lua_tothread(L, lua_upvalueindex(1));
  int nargs = lua_gettop(L);
  if (lua_status(co) == LUA_OK && lua_gettop(co) == 0) return luaL_error(L, "cannot resume dead coroutine");
  if (!lua_checkstack(co, nargs + 1)) return luaL_error(L, "too many arguments to resume");
  lua_xmove(L, co, nargs);
  int nres = 0;
  lend_budget(L, co);
  int status = lua_resume(co, L, nargs, &nres);
  lend_budget(NULL, co);
  if (status == LUA_OK || status == LUA_YIELD) {
    if (!lua_checkstack(L, nres + 1)) return luaL_error(L, "too many results to resume");
    lua_xmove(co, L, nres);
    return nres;
  }
  lua_xmove(co, L, 1);                  /* the error object */
  if (lua_type(L, -1) == LUA_TSTRING) { /* as Lua's wrap: add where the wrapped call was made */
    luaL_where(L, 1);
    lua_insert(L, -2);
    lua_concat(L, 2);
  }
  return lua_error(L);
}

/* coroutine.wrap(f) -> function                                              [-1, +1, e] */
static int sandbox_co_wrap(lua_State *L) {
  sandbox_co_create(L);
  lua_pushcclosure(L, sandbox_co_wrapped, 1);
  return 1;
}

/* Replaces, in the script's copy of the coroutine library at idx, the functions that create or drive
 * coroutines. */
static void guard_coroutines(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  lua_pushcfunction(L, sandbox_co_create);
  lua_setfield(L, idx, "create");
  lua_pushcfunction(L, sandbox_co_wrap);
  lua_setfield(L, idx, "wrap");
  static const char *const guarded[] = {"resume", "close", NULL};
  for (const char *const *name = guarded; *name; name++) {
    lua_getfield(L, idx, *name);
    lua_pushcclosure(L, sandbox_co_guarded, 1);
    lua_setfield(L, idx, *name);
  }
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
  set_index(L, -1, removed_os_index);
  lua_setfield(L, env, LUA_OSLIBNAME);
  lua_pop(L, 1);

  lua_pushcfunction(L, sandbox_getmetatable);
  lua_setfield(L, env, "getmetatable");

  static const char *const raw_functions[] = {"next", "rawget", "rawlen", NULL};
  for (const char *const *name = raw_functions; *name; name++) {
    lua_getfield(L, env, *name);
    lua_pushcclosure(L, sandbox_raw_view, 1);
    lua_setfield(L, env, *name);
  }
  lua_getfield(L, env, "rawset");
  lua_pushcclosure(L, sandbox_rawset, 1);
  lua_setfield(L, env, "rawset");

  lua_getfield(L, env, "setmetatable");
  lua_pushcclosure(L, sandbox_setmetatable, 1);
  lua_setfield(L, env, "setmetatable");

  lua_getfield(L, env, LUA_COLIBNAME);
  guard_coroutines(L, -1);
  lua_pop(L, 1);

  lua_pushvalue(L, env);
  lua_pushcclosure(L, sandbox_load, 1);
  lua_setfield(L, env, "load");

  lua_pushfstring(L, "script.%s", script_name);
  lua_pushcclosure(L, sandbox_print, 1);
  lua_setfield(L, env, "print");

  lua_pushlightuserdata(L, require_ud);
  lua_pushstring(L, script_name);
  lua_pushcclosure(L, require_fn, 2);
  lua_setfield(L, env, "require");

  lua_pushvalue(L, env);
  lua_setfield(L, env, "_G");
  set_index(L, env, removed_global_index);

  lua_remove(L, libs);
}

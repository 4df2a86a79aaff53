#include "script/call.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "script/generation.h"
#include "script/lua_message.h"

/* The hook fires every HOOK_PERIOD instructions: often enough to stop a runaway loop within
 * microseconds, rarely enough to cost well under 1% of a call. */
#define HOOK_PERIOD 1000

lp_thread_ctx *lp_thread_ctx_get(lua_State *L) {
  return *(lp_thread_ctx **)lua_getextraspace(L);
}

static void budget_hook(lua_State *L, lua_Debug *ar) {
  lp_thread_ctx *ctx = lp_thread_ctx_get(L);
  if (!ctx || ctx->limit <= 0) return;
  if (!ctx->exceeded) {
    ctx->used += HOOK_PERIOD;
    if (ctx->used <= ctx->limit) return;
    ctx->exceeded = 1;
    /* From now on every instruction raises again, so pcall inside the script cannot absorb it. */
    lua_sethook(L, budget_hook, LUA_MASKCOUNT, 1);
  }
  lua_getinfo(L, "Sl", ar);
  lua_pushfstring(L, "%s:%d: instruction budget of %I exceeded", ar->short_src, ar->currentline,
                  (lua_Integer)ctx->limit);
  lua_error(L);
}

void lp_thread_ctx_attach(lua_State *L, lp_thread_ctx *ctx) {
  *(lp_thread_ctx **)lua_getextraspace(L) = ctx;
  lua_sethook(L, budget_hook, LUA_MASKCOUNT, HOOK_PERIOD);
}

void lp_thread_ctx_reset(lua_State *L, long limit) {
  lp_thread_ctx *ctx = lp_thread_ctx_get(L);
  ctx->limit = limit;
  ctx->used = 0;
  ctx->exceeded = 0;
  lua_sethook(L, budget_hook, LUA_MASKCOUNT, HOOK_PERIOD);
}

/* Turns any error value into "message\nstack traceback:..." [-1, +1, m] */
static int message_handler(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) {
    if (lua_type(L, 1) == LUA_TTABLE && lua_getfield(L, 1, "message") == LUA_TSTRING) {
      msg = lua_tostring(L, -1);
    } else if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) {
      msg = lua_tostring(L, -1);
    } else {
      msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* Lua places a raised string at its origin, "drift.lua:12: text": that file and line become the
 * error's position (the message keeps them, as Lua wrote it). */
static void place_from_lua(lp_error *e) {
  char *file;
  int line;
  const char *text;
  if (!lp_lua_message_place(e->message, &file, &line, &text)) return;
  lp_error_at(e, file, line);
  free(file);
}

/* Stores a new error (code, msg) in *err when that is empty, with its position and traceback. */
static void set_script_error(lp_error **err, const char *code, const char *msg, const lp_error *parts,
                             const char *traceback) {
  if (!err || *err) return;
  *err = lp_error_new(code, "%s", msg);
  lp_error_inherit(*err, parts);
  if (!(*err)->file) place_from_lua(*err);
  if (traceback) lp_error_with(*err, LP_ERROR_TRACEBACK, traceback);
}

/* Splits "message\nstack traceback:\n..." into its two parts. */
static void split_traceback(const char *full, lp_error **err, const char *code, char **traceback) {
  const char *tb = strstr(full, "\nstack traceback:");
  size_t msg_len = tb ? (size_t)(tb - full) : strlen(full);
  char *msg = lp_xstrndup(full, msg_len);
  set_script_error(err, code, msg, NULL, tb ? tb + 1 : NULL);
  free(msg);
  if (traceback) *traceback = tb ? lp_xstrdup(tb + 1) : NULL;
}

/* The cap's error, at the line whose allocation it refused (lp_generation_refused_at): Lua runs no
 * message handler for a memory error, so that record is the only position there is. */
static void memory_error(lua_State *L, lp_error **err) {
  lp_generation *g = lp_generation_of(L);
  size_t cap = g ? lp_generation_limits(g)->memory_bytes : 0;
  const char *file = NULL;
  int line = g ? lp_generation_refused_at(g, &file) : 0;
  if (!err || *err) return;
  if (line > 0) {
    *err = lp_error_new(LP_ERR_MEMORY, "%s:%d: memory limit of %zu KiB for the script generation exceeded",
                        file, line, cap / 1024);
    lp_error_at(*err, file, line);
  } else {
    *err =
        lp_error_new(LP_ERR_MEMORY, "memory limit of %zu KiB for the script generation exceeded", cap / 1024);
  }
}

static const char *status_code(lua_State *L, int status) {
  lp_thread_ctx *ctx = lp_thread_ctx_get(L);
  if (ctx && ctx->exceeded) return LP_ERR_BUDGET;
  return status == LUA_ERRSYNTAX ? LP_ERR_SYNTAX : LP_ERR_SCRIPT;
}

int lp_script_pcall(lua_State *L, int nargs, int nresults, lp_error **err, char **traceback) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, message_handler);
  lua_insert(L, base);
  lp_generation *g = lp_generation_of(L);
  lua_State *outer = g ? lp_generation_enter(g, L) : NULL;
  int status = lua_pcall(L, nargs, nresults, base);
  lua_remove(L, base);
  if (traceback) *traceback = NULL;
  if (status == LUA_ERRMEM) memory_error(L, err); /* before leaving: that clears the record */
  if (g) lp_generation_enter(g, outer);
  if (status == LUA_OK) return 0;
  if (status == LUA_ERRMEM) {
    lua_pop(L, 1);
    if (g) lp_generation_drop_objects(g);
    lua_gc(L, LUA_GCCOLLECT);
    return -1;
  }
  const char *full = lua_tostring(L, -1);
  split_traceback(full ? full : "(no error message)", err, status_code(L, status), traceback);
  lua_pop(L, 1);
  return -1;
}

typedef struct coroutine_error {
  lua_State *co;
  char *message;
  char *traceback;
  lp_error *parts; /* the structured fields of a table error, or NULL */
} coroutine_error;

/* The fields of an error table {reason | api_code, action, request_id, object, hint} at index idx. */
static lp_error *table_parts(lua_State *L, int idx) {
  static const struct {
    const char *key;
    lp_error_part part;
  } keys[] = {{"api_code", LP_ERROR_REASON},       {"reason", LP_ERROR_REASON}, {"action", LP_ERROR_ACTION},
              {"request_id", LP_ERROR_REQUEST_ID}, {"object", LP_ERROR_OBJECT}, {"hint", LP_ERROR_HINT}};
  lp_error *parts = lp_error_new(NULL, "%s", "");
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    if (lua_getfield(L, idx, keys[i].key) == LUA_TSTRING && lua_rawlen(L, -1) > 0)
      lp_error_with(parts, keys[i].part, lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  return parts;
}

/* Reads a dead coroutine's error value and its traceback on the main thread. [-1, +0, e] */
static int describe_coroutine_error(lua_State *L) {
  coroutine_error *ce = lua_touserdata(L, 1);
  lua_xmove(ce->co, L, 1);
  const char *msg;
  if (lua_type(L, -1) == LUA_TTABLE) ce->parts = table_parts(L, lua_gettop(L));
  if (lua_type(L, -1) == LUA_TTABLE && lua_getfield(L, -1, "message") == LUA_TSTRING) {
    msg = lua_tostring(L, -1);
  } else {
    msg = luaL_tolstring(L, -1, NULL);
  }
  luaL_traceback(L, ce->co, msg, 0);
  const char *full = lua_tostring(L, -1);
  const char *tb = strstr(full, "\nstack traceback:");
  size_t msg_len = tb ? (size_t)(tb - full) : strlen(full);
  ce->message = lp_xstrndup(full, msg_len);
  ce->traceback = tb ? lp_xstrdup(tb + 1) : NULL;
  return 0;
}

int lp_script_resume(lua_State *L, lua_State *co, int nargs, int *nresults, lp_error **err,
                     char **traceback) {
  if (traceback) *traceback = NULL;
  lp_generation *g = lp_generation_of(L);
  lua_State *outer = g ? lp_generation_enter(g, co) : NULL;
  int status = lua_resume(co, L, nargs, nresults);
  if (status == LUA_ERRMEM) memory_error(L, err); /* before leaving: that clears the record */
  if (g) lp_generation_enter(g, outer);
  if (status == LUA_OK || status == LUA_YIELD) return status;
  if (status == LUA_ERRMEM) {
    if (g) lp_generation_drop_objects(g);
    return -1;
  }
  const char *code = status_code(co, status);
  coroutine_error ce = {co, NULL, NULL, NULL};
  lp_error *describe_err = NULL;
  if (lp_script_cpcall(L, describe_coroutine_error, &ce, &describe_err) != 0) {
    lp_error_set(err, code, "script failed and its error could not be described: %s", describe_err->message);
    lp_error_free(describe_err);
    lp_error_free(ce.parts);
    free(ce.message);
    free(ce.traceback);
    return -1;
  }
  set_script_error(err, code, ce.message, ce.parts, ce.traceback);
  lp_error_free(ce.parts);
  free(ce.message);
  if (traceback)
    *traceback = ce.traceback;
  else
    free(ce.traceback);
  return -1;
}

int lp_script_cpcall(lua_State *L, lua_CFunction fn, void *ud, lp_error **err) {
  lua_pushcfunction(L, fn);
  lua_pushlightuserdata(L, ud);
  return lp_script_pcall(L, 1, 0, err, NULL);
}

/* luaprov.stream: writes to a streaming HTTP response that a script handler started by returning
 * {status, headers, stream = id} (engine/script/handler.h). The streams live in C, in the engine's
 * handler; scripts only name them. Under plain lua5.4 there are none: every call answers
 * nil, "Unavailable". */
#include <lauxlib.h>

#include "luaprov.h"

static int stream_op(lua_State *L, int op) {
  const char *id = luaL_checkstring(L, 1);
  size_t len = 0;
  const char *data = op == LP_STREAM_WRITE ? luaL_checklstring(L, 2, &len) : NULL;
  const lp_lua_host *host = lp_bindings_host(L);
  if (!host || !host->stream) return lp_push_fail(L, "streams exist only inside the engine", "Unavailable");
  int open = host->stream(id, op, data, len, host->ud);
  if (op == LP_STREAM_OPEN) {
    lua_pushboolean(L, open);
    return 1;
  }
  if (!open) return lp_push_fail(L, "the stream is closed", "Closed");
  lua_pushboolean(L, 1);
  return 1;
}

/* luaprov.stream.write(id, data) -> true | nil, message, "Closed"|"Unavailable"   [-2, +(1|3), m] */
static int stream_write(lua_State *L) {
  return stream_op(L, LP_STREAM_WRITE);
}

/* luaprov.stream.close(id) -> true | nil, message, "Closed"|"Unavailable"         [-1, +(1|3), m] */
static int stream_close(lua_State *L) {
  return stream_op(L, LP_STREAM_CLOSE);
}

/* luaprov.stream.open(id) -> boolean | nil, message, "Unavailable"                 [-1, +(1|3), m] */
static int stream_open(lua_State *L) {
  return stream_op(L, LP_STREAM_OPEN);
}

static const luaL_Reg stream_funcs[] = {
    {"write", stream_write},
    {"close", stream_close},
    {"open", stream_open},
    {NULL, NULL},
};

int lp_open_stream(lua_State *L) {
  luaL_newlib(L, stream_funcs);
  return 1;
}

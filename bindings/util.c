/* Helpers shared by the binding sources. */
#include <lauxlib.h>

#include "luaprov.h"

int lp_push_fail(lua_State *L, const char *message, const char *code) {
  luaL_pushfail(L);
  lua_pushstring(L, message);
  lua_pushstring(L, code);
  return 3;
}

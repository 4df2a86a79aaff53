/* lp_lua_message_place, the one reader of the position Lua writes in front of a raised string, and
 * both of its users: the call door (an lp_error's file and line) and the load-time problem list. */
#include <lauxlib.h>
#include <lualib.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "script/call.h"
#include "script/generation.h"
#include "script/lua_message.h"

static void placed(const char *message, const char *file, int line, const char *text) {
  char *f = NULL;
  int l = 0;
  const char *t = NULL;
  CHECK_INT(lp_lua_message_place(message, &f, &l, &t), 1);
  if (!f) return;
  CHECK_STR(f, file);
  CHECK_INT(l, line);
  CHECK_STR(t, text);
  free(f);
}

static void unplaced(const char *message) {
  char *f = NULL;
  int l = 0;
  const char *t = NULL;
  CHECK_INT(lp_lua_message_place(message, &f, &l, &t), 0);
  CHECK(f == NULL);
  free(f);
}

static void test_forms(void) {
  placed("policies/drift.lua:12: boom", "policies/drift.lua", 12, "boom");
  placed("/tmp/x/policies/drift.lua:3:   spaced", "/tmp/x/policies/drift.lua", 3, "spaced");
  placed("my scripts/policies/drift.lua:4: a folder with a space", "my scripts/policies/drift.lua", 4,
         "a folder with a space");
  placed("drift:7: a chunk without .lua", "drift", 7, "a chunk without .lua");
  unplaced("[string \"x\"]:1: not a file");
  unplaced("[C]: in ?");
  unplaced("attempt to index: 3: a nil value");
  unplaced("drift.lua: -3: no line");
  unplaced("drift.lua: 3: a space before the line");
  unplaced("drift.lua:0: line zero");
  unplaced("drift.lua:12 no second colon");
  unplaced("module 'policies.x' not found in the script tree (searched a, b)");
  unplaced(" drift.lua:1: leading space");
}

/* The call door and the problem list read the same position from the same message. */
static void test_both_users(void) {
  lua_State *L = luaL_newstate();
  *(void **)lua_getextraspace(L) = NULL; /* no engine thread context */
  luaL_openlibs(L);
  const char *src = "error('no image yet')";
  CHECK(luaL_loadbuffer(L, src, strlen(src), "=my scripts/drift.lua") == LUA_OK);
  lp_error *err = NULL;
  CHECK_INT(lp_script_pcall(L, 0, 0, &err, NULL), -1);
  CHECK_STR(err->file, "my scripts/drift.lua");
  CHECK_INT(err->line, 1);
  lp_problems p = {0};
  lp_problems_add_lua_message(&p, "fallback.lua", err->message);
  lp_problems_add_lua_message(&p, "fallback.lua", "[string \"x\"]:1: no file");
  CHECK_INT((int)p.count, 2);
  if (p.count == 2) {
    CHECK_STR(p.items[0].file, "my scripts/drift.lua");
    CHECK_INT(p.items[0].line, 1);
    CHECK_STR(p.items[0].message, "no image yet");
    CHECK_STR(p.items[1].file, "fallback.lua");
    CHECK_INT(p.items[1].line, 0);
    CHECK_STR(p.items[1].message, "[string \"x\"]:1: no file");
  }
  lp_problems_free(&p);
  lp_error_free(err);
  lua_close(L);
}

int main(void) {
  RUN(test_forms);
  RUN(test_both_users);
  return check_summary();
}

/* lp_error's structured fields: set, copied, filled from a mapping's error table and from a Lua
 * error's position, and written to log lines under stable keys. */
#include <lauxlib.h>
#include <lualib.h>
#include <string.h>

#include "check.h"
#include "contract/error_table.h"
#include "core/error_log.h"
#include "script/call.h"

/* Every structured field set. */
static const lp_error FULL = {.reason = "QuotaExceed.ElasticQuota",
                              .action = "RunInstances",
                              .request_id = "REQ-1",
                              .object = "nc-a",
                              .file = "launch.lua",
                              .line = 42,
                              .hint = "raise the quota"};

/* A CreateError with FULL's fields, set one by one. */
static lp_error *full_error(void) {
  lp_error *e = lp_error_new("CreateError", "launching NodeClaim nc-a failed");
  lp_error_with(e, LP_ERROR_REASON, FULL.reason);
  lp_error_with(e, LP_ERROR_ACTION, FULL.action);
  lp_error_with(e, LP_ERROR_REQUEST_ID, FULL.request_id);
  lp_error_with(e, LP_ERROR_OBJECT, FULL.object);
  lp_error_with(e, LP_ERROR_HINT, FULL.hint);
  return lp_error_at(e, FULL.file, FULL.line);
}

/* got's structured fields are want's: each one want sets, and no other (NULL, or line 0, in want: unset
 * in got). Code and message are the tests' own to check. */
#define CHECK_FIELD(got, want, field)                                                                        \
  do {                                                                                                       \
    if ((want)->field)                                                                                       \
      CHECK_STR((got)->field, (want)->field);                                                                \
    else                                                                                                     \
      CHECK((got)->field == NULL);                                                                           \
  } while (0)

static void check_fields(const lp_error *got, const lp_error *want) {
  CHECK_FIELD(got, want, reason);
  CHECK_FIELD(got, want, action);
  CHECK_FIELD(got, want, request_id);
  CHECK_FIELD(got, want, object);
  CHECK_FIELD(got, want, file);
  CHECK_INT(got->line, want->line);
  CHECK_FIELD(got, want, hint);
}

static void test_copy_keeps_every_field(void) {
  lp_error *e = full_error();
  lp_error *c = lp_error_copy(e);
  lp_error_free(e);
  CHECK_STR(c->code, "CreateError");
  CHECK_STR(c->message, "launching NodeClaim nc-a failed");
  check_fields(c, &FULL);
  lp_error *plain = lp_error_new("NotFound", "gone");
  check_fields(plain, &(lp_error){0});
  lp_error_inherit(plain, c); /* a wrapper keeps what it wraps knew, not its code or message */
  CHECK_STR(plain->code, "NotFound");
  CHECK_STR(plain->reason, "QuotaExceed.ElasticQuota");
  CHECK_INT(plain->line, 42);
  lp_error_free(plain);
  lp_error_free(c);
}

static void test_from_table(void) {
  json_t *t =
      json_pack("{s:s, s:s, s:s, s:s, s:s}", "code", "QuotaExceeded", "api_code", "QuotaExceed.ElasticQuota",
                "action", "RunInstances", "request_id", "REQ-2", "message", "no quota");
  lp_error *e = lp_error_from_table(t);
  CHECK_STR(e->code, "QuotaExceeded");
  CHECK_STR(e->message, "no quota");
  check_fields(
      e, &(lp_error){.reason = "QuotaExceed.ElasticQuota", .action = "RunInstances", .request_id = "REQ-2"});
  char *d = lp_error_describe(e);
  CHECK_STR(d, "no quota (action RunInstances, request ID REQ-2)");
  free(d);
  /* a message that names the ID and the action already (the Alibaba mapping's) is not extended */
  free(e->message);
  e->message = lp_xstrdup("RunInstances: QuotaExceeded: no quota (RequestId REQ-2, HTTP 400)");
  d = lp_error_describe(e);
  CHECK_STR(d, "RunInstances: QuotaExceeded: no quota (RequestId REQ-2, HTTP 400)");
  free(d);
  free(e->message);
  e->message = lp_xstrdup("QuotaExceeded: no quota (RequestId REQ-2)"); /* only the action is added */
  d = lp_error_describe(e);
  CHECK_STR(d, "QuotaExceeded: no quota (RequestId REQ-2) (action RunInstances)");
  free(d);
  lp_error_free(e);
  json_decref(t);
  json_t *s = json_string("plain text");
  e = lp_error_from_table(s);
  CHECK_STR(e->code, "Error");
  check_fields(e, &(lp_error){0});
  d = lp_error_describe(e);
  CHECK_STR(d, "plain text");
  free(d);
  lp_error_free(e);
  json_decref(s);
}

static lua_State *new_state(void) {
  lua_State *L = luaL_newstate();
  *(void **)lua_getextraspace(L) = NULL; /* no engine thread context */
  luaL_openlibs(L);
  return L;
}

static void test_lua_position(void) {
  lua_State *L = new_state();
  const char *src = "local x = 1\nerror('is_drifted returned a table')\n";
  CHECK(luaL_loadbuffer(L, src, strlen(src), "=drift.lua") == LUA_OK);
  lp_error *err = NULL;
  CHECK_INT(lp_script_pcall(L, 0, 0, &err, NULL), -1);
  CHECK_STR(err->message, "drift.lua:2: is_drifted returned a table");
  check_fields(err, &(lp_error){.file = "drift.lua", .line = 2});
  lp_error_free(err);
  err = NULL; /* a message without a position has none */
  src = "error('no place', 0)";
  CHECK(luaL_loadbuffer(L, src, strlen(src), "=drift.lua") == LUA_OK);
  CHECK_INT(lp_script_pcall(L, 0, 0, &err, NULL), -1);
  check_fields(err, &(lp_error){0});
  lp_error_free(err);
  lua_close(L);
}

static void test_lua_table_error(void) {
  lua_State *L = new_state();
  lua_State *co = lua_newthread(L);
  const char *src = "error({code = 'Throttled', api_code = 'Throttling.User', action = 'DescribeInstances',"
                    " request_id = 'REQ-3', object = 'i-1', hint = 'slow down', message = 'too many calls'})";
  CHECK(luaL_loadbuffer(co, src, strlen(src), "=client.lua") == LUA_OK);
  lp_error *err = NULL;
  int n = 0;
  CHECK_INT(lp_script_resume(L, co, 0, &n, &err, NULL), -1);
  CHECK_STR(err->message, "too many calls");
  check_fields(err, &(lp_error){.reason = "Throttling.User",
                                .action = "DescribeInstances",
                                .request_id = "REQ-3",
                                .object = "i-1",
                                .hint = "slow down"});
  lp_error_free(err);
  lua_close(L);
}

static void test_log_fields(void) {
  lp_error *e = full_error();
  lp_field f[] = {LPF_STR("nodeclaim", "nc-a"), LPF_ERROR(e)};
  char *line = lp_log_render(LP_LOG_FORMAT_JSON, 0, LP_LOG_WARN, "x", "m", f, sizeof f / sizeof f[0]);
  CHECK_STR(line,
            "{\"ts\":\"1970-01-01T00:00:00.000Z\",\"level\":\"warn\",\"logger\":\"x\",\"msg\":\"m\","
            "\"nodeclaim\":\"nc-a\",\"error\":\"launching NodeClaim nc-a failed\",\"code\":\"CreateError\","
            "\"reason\":\"QuotaExceed.ElasticQuota\",\"action\":\"RunInstances\",\"request_id\":\"REQ-1\","
            "\"object\":\"nc-a\",\"file\":\"launch.lua\",\"line\":42,\"hint\":\"raise the quota\"}\n");
  free(line);
  lp_error_free(e);
  e = lp_error_new("Timeout", "slow"); /* unknown fields are left out, not null */
  lp_field g[] = {LPF_ERROR(e)};
  line = lp_log_render(LP_LOG_FORMAT_JSON, 0, LP_LOG_WARN, "x", "m", g, sizeof g / sizeof g[0]);
  CHECK_STR(line, "{\"ts\":\"1970-01-01T00:00:00.000Z\",\"level\":\"warn\",\"logger\":\"x\",\"msg\":\"m\","
                  "\"error\":\"slow\",\"code\":\"Timeout\"}\n");
  free(line);
  lp_error_free(e);
}

/* A script error carries the Lua traceback (both doors: a call and a resume), a copy keeps it, the
 * log line writes it under "traceback", and a long one is cut to LP_ERROR_TRACEBACK_MAX with a marker. */
static void test_traceback(void) {
  lua_State *L = new_state();
  const char *src = "local function inner() error('boom') end\nlocal function outer() inner() end\nouter()\n";
  CHECK(luaL_loadbuffer(L, src, strlen(src), "=drift.lua") == LUA_OK);
  lp_error *err = NULL;
  CHECK_INT(lp_script_pcall(L, 0, 0, &err, NULL), -1);
  CHECK_STR(err->message, "drift.lua:1: boom");
  CHECK(err->traceback != NULL);
  if (err->traceback) {
    CHECK(strncmp(err->traceback, "stack traceback:\n", 17) == 0);
    CHECK_CONTAINS(err->traceback, "drift.lua:1: in upvalue 'inner'");
    CHECK_CONTAINS(err->traceback, "drift.lua:2: in local 'outer'");
  }
  lp_error *copy = lp_error_copy(err);
  CHECK_STR(copy->traceback, err->traceback);
  lp_field f[] = {LPF_ERROR(copy)};
  char *line = lp_log_render(LP_LOG_FORMAT_JSON, 0, LP_LOG_WARN, "x", "m", f, sizeof f / sizeof f[0]);
  CHECK_CONTAINS(line, "\"line\":1,\"traceback\":\"stack traceback:\\n\\t");
  free(line);
  lp_error_free(copy);
  lp_error_free(err);

  lua_State *co = lua_newthread(L);
  CHECK(luaL_loadbuffer(co, src, strlen(src), "=drift.lua") == LUA_OK);
  err = NULL;
  int n = 0;
  CHECK_INT(lp_script_resume(L, co, 0, &n, &err, NULL), -1);
  CHECK(err->traceback && strstr(err->traceback, "drift.lua:2: in local 'outer'"));
  lp_error_free(err);
  lua_close(L);

  char long_tb[6000] = "stack traceback:";
  while (strlen(long_tb) < sizeof long_tb - 40) strcat(long_tb, "\n\tdrift.lua:1: in function 'f'");
  lp_error *e = lp_error_with(lp_error_new("ScriptError", "deep"), LP_ERROR_TRACEBACK, long_tb);
  size_t cut = strlen(LP_ERROR_TRACEBACK_CUT), len = strlen(e->traceback);
  CHECK(len <= LP_ERROR_TRACEBACK_MAX && len > LP_ERROR_TRACEBACK_MAX - 64);
  CHECK_STR(e->traceback + len - cut, LP_ERROR_TRACEBACK_CUT);
  CHECK(strncmp(e->traceback + len - cut - 3, "'f'", 3) == 0); /* whole frames only */
  lp_error_free(e);
}

int main(void) {
  RUN(test_copy_keeps_every_field);
  RUN(test_from_table);
  RUN(test_lua_position);
  RUN(test_lua_table_error);
  RUN(test_log_fields);
  RUN(test_traceback);
  return check_summary();
}

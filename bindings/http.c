/* luaprov.http: HTTP requests from scripts. Inside the engine the calling task yields to the loop
 * while the request runs; under plain lua5.4 the request is made synchronously. */
#include <stdlib.h>
#include <string.h>

#include "luaprov.h"

#define MAX_HEADERS 64

static const char *opt_string_field(lua_State *L, int t, const char *field, const char *def) {
  lua_getfield(L, t, field);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return def;
  }
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "luaprov.http.request: field '%s' must be a string, got %s", field, luaL_typename(L, -1));
  const char *s = lua_tostring(L, -1);
  lua_pop(L, 1); /* the string stays alive: the request table at t still references it */
  return s;
}

/* Reads the headers table {name = value} into hdrs; returns the count. */
static size_t read_headers(lua_State *L, int t, lp_http_header *hdrs) {
  size_t n = 0;
  if (lua_getfield(L, t, "headers") == LUA_TNIL) {
    lua_pop(L, 1);
    return 0;
  }
  if (!lua_istable(L, -1)) luaL_error(L, "luaprov.http.request: field 'headers' must be a table");
  int headers = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, headers)) {
    if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "luaprov.http.request: headers must map strings to strings");
    if (n == MAX_HEADERS) luaL_error(L, "luaprov.http.request: more than %d headers", MAX_HEADERS);
    hdrs[n].name = (char *)lua_tostring(L, -2);
    hdrs[n].value = (char *)lua_tostring(L, -1);
    n++;
    lua_pop(L, 1);
  }
  /* The headers table stays on the stack so that its strings outlive this call. */
  return n;
}

int lp_push_http_result(lua_State *L, const lp_http_result *res) {
  if (res->error) return lp_push_fail(L, res->error->message, res->error->code);
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, res->status);
  lua_setfield(L, -2, "status");
  lua_createtable(L, 0, (int)res->nheaders);
  for (size_t i = 0; i < res->nheaders; i++) {
    lua_pushstring(L, res->headers[i].value);
    lua_setfield(L, -2, res->headers[i].name);
  }
  lua_setfield(L, -2, "headers");
  lua_pushlstring(L, res->body ? res->body : "", res->body_len);
  lua_setfield(L, -2, "body");
  return 1;
}

static int push_result_protected(lua_State *L) {
  return lp_push_http_result(L, lua_touserdata(L, 1));
}

/* luaprov.http.request{method, url, headers, body, timeout_ms}
 *   -> {status, headers, body} | nil, message, code                       [-1, +(1|3), e]
 * An HTTP error status is a response, not a failure; failures are transport-level: codes
 * "Timeout", "ConnectFailed", "TLS", "TooLarge", "Cancelled", "Transport", "Unavailable".
 * Header names in the response are lower-case. */
static int http_request(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lp_http_header headers[MAX_HEADERS];
  lp_http_request_opts req = {0};
  req.method = opt_string_field(L, 1, "method", "GET");
  req.url = opt_string_field(L, 1, "url", NULL);
  if (!req.url) return luaL_error(L, "luaprov.http.request: field 'url' is required");
  size_t body_len = 0;
  lua_getfield(L, 1, "body");
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING)
      return luaL_error(L, "luaprov.http.request: field 'body' must be a string");
    req.body = lua_tolstring(L, -1, &body_len);
  }
  req.body_len = body_len;
  lua_getfield(L, 1, "timeout_ms");
  if (!lua_isnil(L, -1)) {
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) <= 0)
      return luaL_error(L, "luaprov.http.request: field 'timeout_ms' must be a positive integer");
    req.timeout_ms = (long)lua_tointeger(L, -1);
  }
  lua_pop(L, 1);
  req.idempotent = -1;
  req.max_retries = -1;
  req.headers = headers;
  req.nheaders = read_headers(L, 1, headers);

  int top;
  const lp_lua_host *host = lp_bindings_host(L);
  if (host && host->http_request) {
    if (!host->can_yield(L, host->ud))
      return luaL_error(L, "luaprov.http.request cannot run here: call it from a contract function (not at "
                           "module load, inside a coroutine the script created, or a sort/gsub callback)");
    return host->http_request(L, &req, host->ud);
  }
  top = lua_gettop(L);
  lp_http_result *res = lp_http_request_sync(NULL, &req);
  /* The result is freed whatever happens: a memory error while pushing must not leak it. */
  lua_pushcfunction(L, push_result_protected);
  lua_pushlightuserdata(L, res);
  int status = lua_pcall(L, 1, LUA_MULTRET, 0);
  lp_http_result_free(res);
  if (status != LUA_OK) return lua_error(L);
  return lua_gettop(L) - top;
}

int lp_open_http(lua_State *L) {
  static const luaL_Reg functions[] = {{"request", http_request}, {NULL, NULL}};
  luaL_newlib(L, functions);
  return 1;
}

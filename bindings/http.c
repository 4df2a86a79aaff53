/* luaprov.http: HTTP requests from scripts. Inside the engine the calling task yields to the loop
 * while requests run; under plain lua5.4 they are made synchronously, one after the other. */
#include <stdlib.h>
#include <string.h>

#include "luaprov.h"

#define MAX_HEADERS         64
#define MAX_BATCH           10000
#define DEFAULT_CONCURRENCY 8
#define MAX_CONCURRENCY     64

/* Fields are read raw: an __index function could return strings nothing else references, which the
 * collector might free before the request is copied. Raw values stay referenced by the request table
 * (the caller's argument) for as long as the request is in use, so nothing is copied here. */
static int raw_field(lua_State *L, int t, const char *field) {
  lua_pushstring(L, field);
  return lua_rawget(L, t);
}

static const char *opt_string_field(lua_State *L, int t, const char *fn, const char *field, const char *def,
                                    size_t *len) {
  raw_field(L, t, field);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    if (len) *len = def ? strlen(def) : 0;
    return def;
  }
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "%s: field '%s' must be a string, got %s", fn, field, luaL_typename(L, -1));
  const char *s = lua_tolstring(L, -1, len);
  lua_pop(L, 1);
  return s;
}

static size_t read_headers(lua_State *L, int t, const char *fn, lp_http_header *hdrs) {
  size_t n = 0;
  if (raw_field(L, t, "headers") == LUA_TNIL) {
    lua_pop(L, 1);
    return 0;
  }
  if (!lua_istable(L, -1)) luaL_error(L, "%s: field 'headers' must be a table", fn);
  int headers = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, headers)) {
    if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "%s: headers must map strings to strings", fn);
    if (n == MAX_HEADERS) luaL_error(L, "%s: more than %d headers", fn, MAX_HEADERS);
    hdrs[n].name = (char *)lua_tostring(L, -2);
    hdrs[n].value = (char *)lua_tostring(L, -1);
    n++;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return n;
}

/* Reads the request table at t into req; headers must hold MAX_HEADERS entries. Raises on misuse. */
static void read_request(lua_State *L, int t, const char *fn, lp_http_request_opts *req,
                         lp_http_header *headers) {
  t = lua_absindex(L, t);
  if (!lua_istable(L, t)) luaL_error(L, "%s: a request must be a table, got %s", fn, luaL_typename(L, t));
  memset(req, 0, sizeof *req);
  req->method = opt_string_field(L, t, fn, "method", "GET", NULL);
  req->url = opt_string_field(L, t, fn, "url", NULL, NULL);
  if (!req->url) luaL_error(L, "%s: field 'url' is required", fn);
  req->body = opt_string_field(L, t, fn, "body", NULL, &req->body_len);
  raw_field(L, t, "timeout_ms");
  if (!lua_isnil(L, -1)) {
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) <= 0)
      luaL_error(L, "%s: field 'timeout_ms' must be a positive integer", fn);
    req->timeout_ms = (long)lua_tointeger(L, -1);
  }
  lua_pop(L, 1);
  req->idempotent = -1;
  req->max_retries = -1;
  req->headers = headers;
  req->nheaders = read_headers(L, t, fn, headers);
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

int lp_push_http_results(lua_State *L, lp_http_result *const *results, size_t n) {
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    if (results[i]->error) {
      lua_createtable(L, 0, 2);
      lua_pushstring(L, results[i]->error->message);
      lua_setfield(L, -2, "error");
      lua_pushstring(L, results[i]->error->code);
      lua_setfield(L, -2, "code");
    } else {
      lp_push_http_result(L, results[i]);
    }
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

/* Results of synchronous requests are freed whatever happens: a memory error while pushing them
 * must not leak them. */
typedef struct sync_results {
  lp_http_result **results;
  size_t n;
  int single;
} sync_results;

static int push_sync_results(lua_State *L) {
  sync_results *s = lua_touserdata(L, 1);
  lua_settop(L, 0);
  if (s->single) return lp_push_http_result(L, s->results[0]);
  return lp_push_http_results(L, s->results, s->n);
}

static int finish_sync(lua_State *L, sync_results *s) {
  int top = lua_gettop(L);
  lua_pushcfunction(L, push_sync_results);
  lua_pushlightuserdata(L, s);
  int status = lua_pcall(L, 1, LUA_MULTRET, 0);
  for (size_t i = 0; i < s->n; i++) lp_http_result_free(s->results[i]);
  if (status != LUA_OK) return lua_error(L);
  return lua_gettop(L) - top;
}

static const lp_lua_host *yielding_host(lua_State *L, const char *fn) {
  const lp_lua_host *host = lp_bindings_host(L);
  if (!host || !host->http_request) return NULL;
  if (!host->can_yield(L, host->ud))
    luaL_error(L,
               "%s cannot run here: call it from a contract function (not at module load, inside a coroutine "
               "the script created, or a sort/gsub callback)",
               fn);
  return host;
}

/* luaprov.http.request{method, url, headers, body, timeout_ms}
 *   -> {status, headers, body} | nil, message, code                       [-1, +(1|3), e]
 * An HTTP error status is a response, not a failure; failures are transport-level: codes
 * "Timeout", "ConnectFailed", "TLS", "TooLarge", "Cancelled", "Transport", "Unavailable".
 * Header names in the response are lower-case. */
static int http_request(lua_State *L) {
  static const char fn[] = "luaprov.http.request";
  luaL_checktype(L, 1, LUA_TTABLE);
  lp_http_header headers[MAX_HEADERS];
  lp_http_request_opts req;
  read_request(L, 1, fn, &req, headers);
  const lp_lua_host *host = yielding_host(L, fn);
  if (host) return host->http_request(L, &req, host->ud);
  lp_http_result *res = lp_http_request_sync(NULL, &req);
  sync_results s = {&res, 1, 1};
  return finish_sync(L, &s);
}

/* luaprov.http.request_all(requests [, {concurrency = n}]) -> results       [-(1|2), +1, e]
 * Runs a list of requests, at most concurrency (default 8, at most 64) at a time inside the engine
 * (one after the other under plain lua5.4), and returns a list in the same order: each entry is the
 * response {status, headers, body} or {error = message, code = code}. */
static int http_request_all(lua_State *L) {
  static const char fn[] = "luaprov.http.request_all";
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer concurrency = DEFAULT_CONCURRENCY;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_getfield(L, 2, "concurrency");
    if (!lua_isnil(L, -1)) concurrency = luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    luaL_argcheck(L, concurrency >= 1 && concurrency <= MAX_CONCURRENCY, 2, "concurrency must be 1..64");
  }
  size_t n = (size_t)lua_rawlen(L, 1);
  luaL_argcheck(L, n <= MAX_BATCH, 1, "at most 10000 requests");
  /* request and header arrays live in a userdata: a raise while reading leaks nothing */
  size_t per = sizeof(lp_http_request_opts) + MAX_HEADERS * sizeof(lp_http_header);
  char *space = lua_newuserdatauv(L, n ? n * per : 1, 0);
  lp_http_request_opts *reqs = (lp_http_request_opts *)(void *)space;
  lp_http_header *headers = (lp_http_header *)(void *)(space + n * sizeof(lp_http_request_opts));
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(L, 1, (lua_Integer)i + 1);
    read_request(L, -1, fn, &reqs[i], headers + i * MAX_HEADERS);
    lua_pop(L, 1);
  }
  const lp_lua_host *host = yielding_host(L, fn);
  if (host && host->http_request_all)
    return host->http_request_all(L, reqs, n, (unsigned)concurrency, host->ud);
  lp_http_result **results = lua_newuserdatauv(L, (n ? n : 1) * sizeof *results, 0);
  for (size_t i = 0; i < n; i++) results[i] = lp_http_request_sync(NULL, &reqs[i]);
  sync_results s = {results, n, 0};
  return finish_sync(L, &s);
}

int lp_open_http(lua_State *L) {
  static const luaL_Reg functions[] = {
      {"request", http_request}, {"request_all", http_request_all}, {NULL, NULL}};
  luaL_newlib(L, functions);
  return 1;
}

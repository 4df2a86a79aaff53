/* The mapping's endpoint allow-list (endpoints.h): declaration, URL parsing and the guarded luaprov.http. */
#include "script/endpoints.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "script/module_name.h"
#include "script/sandbox.h"

#define ENDPOINTS_KEY "luaprov.endpoints" /* registry: mapping name -> {hosts = {...}, env = {...}} */
#define HOST_MAX      256

/* host and port of a URL; port "" when the URL has none (the scheme's default). */
typedef struct authority {
  char host[HOST_MAX];
  char port[8];
} authority;

static void lower_copy(char *dst, size_t cap, const char *src, size_t n) {
  if (n >= cap) n = cap - 1;
  for (size_t i = 0; i < n; i++)
    dst[i] = (char)(src[i] >= 'A' && src[i] <= 'Z' ? src[i] - 'A' + 'a' : src[i]);
  dst[n] = '\0';
}

/* Parses "http(s)://host[:port][/...]" (bare "host[:port]" too when bare). 0 when it is not such a URL,
 * names a user, or its host is empty or too long. */
static int parse_authority(const char *url, int bare, authority *out) {
  const char *p = url;
  if (strncasecmp(p, "https://", 8) == 0)
    p += 8;
  else if (strncasecmp(p, "http://", 7) == 0)
    p += 7;
  else if (!bare || strstr(url, "://"))
    return 0;
  size_t len = strcspn(p, "/?#");
  if (memchr(p, '@', len) || memchr(p, '\\', len)) return 0;
  const char *host = p, *colon;
  size_t host_len;
  if (*p == '[') {
    const char *close = memchr(p, ']', len);
    if (!close) return 0;
    host_len = (size_t)(close - p) + 1;
    colon = close + 1 < p + len && close[1] == ':' ? close + 1 : NULL;
  } else {
    colon = memchr(p, ':', len);
    host_len = colon ? (size_t)(colon - p) : len;
  }
  if (host_len == 0 || host_len >= HOST_MAX) return 0;
  lower_copy(out->host, sizeof out->host, host, host_len);
  size_t port_len = colon ? (size_t)(p + len - colon - 1) : 0;
  if (port_len >= sizeof out->port) return 0;
  memcpy(out->port, colon ? colon + 1 : "", port_len);
  out->port[port_len] = '\0';
  return 1;
}

static const char *effective_port(const authority *a, const char *url) {
  if (a->port[0]) return a->port;
  return strncasecmp(url, "https://", 8) == 0 ? "443" : "80";
}

/* Same host, and the same port when the allowed one names one. */
static int same_endpoint(const authority *allowed, const authority *req, const char *url) {
  return strcmp(allowed->host, req->host) == 0 &&
         (!allowed->port[0] || strcmp(allowed->port, effective_port(req, url)) == 0);
}

/* ---- configured endpoints (--endpoint) ---------------------------------------------------- */

static authority *configured;
static size_t nconfigured;

void lp_endpoints_allow_configured(const char *url) {
  authority a;
  if (!url || !*url || !parse_authority(url, 1, &a)) return;
  if (!a.port[0] && strstr(url, "://")) snprintf(a.port, sizeof a.port, "%s", effective_port(&a, url));
  for (size_t i = 0; i < nconfigured; i++)
    if (strcmp(configured[i].host, a.host) == 0 && strcmp(configured[i].port, a.port) == 0) return;
  configured = lp_xrealloc(configured, (nconfigured + 1) * sizeof *configured);
  configured[nconfigured++] = a;
}

/* ---- declaration --------------------------------------------------------------------------- */

static int valid_host_pattern(const char *s) {
  if (strncmp(s, "*.", 2) == 0) {
    s += 2;
    if (!strchr(s, '.')) return 0; /* "*.com" is every host of a top-level domain */
  }
  if (!*s || *s == '.' || s[strlen(s) - 1] == '.') return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '.' || *s == ':' ||
          *s == '[' || *s == ']'))
      return 0;
  return 1;
}

/* Pushes a plain copy of the list field of the declaration at decl; raises on a bad entry. */
static void copy_list(lua_State *L, int decl, const char *mapping, const char *field, int hosts) {
  lua_pushstring(L, field);
  int t = lua_rawget(L, decl);
  lua_newtable(L);
  if (t == LUA_TNIL) {
    lua_remove(L, -2);
    return;
  }
  if (t != LUA_TTABLE) luaL_error(L, "%s: endpoints.%s is not a list of strings", mapping, field);
  lua_Integer n = (lua_Integer)lua_rawlen(L, -2);
  for (lua_Integer i = 1; i <= n; i++) {
    size_t len;
    if (lua_rawgeti(L, -2, i) != LUA_TSTRING)
      luaL_error(L, "%s: endpoints.%s[%d] is not a string", mapping, field, (int)i);
    const char *s = lua_tolstring(L, -1, &len);
    if (hosts ? !valid_host_pattern(s) : (len == 0 || strlen(s) != len || strchr(s, '=')))
      luaL_error(L,
                 hosts ? "%s: endpoints.%s[%d] \"%s\" is not a lower-case host name, address or *.domain "
                         "(see docs/lua-api.md#capabilities)"
                       : "%s: endpoints.%s[%d] \"%s\" is not an environment variable name",
                 mapping, field, (int)i, s);
    lua_rawseti(L, -2, i);
  }
  lua_remove(L, -2);
}

void lp_endpoints_declare(lua_State *L, const char *module, int idx) {
  char buf[256];
  const char *bare = lp_module_bare(module);
  const char *mapping = lp_module_mapping(module, buf, sizeof buf);
  if (!mapping || strcmp(mapping, bare) != 0 || !lua_istable(L, idx)) return;
  idx = lua_absindex(L, idx);
  lua_pushliteral(L, "endpoints");
  int t = lua_rawget(L, idx);
  if (t == LUA_TNIL) {
    lua_pop(L, 1);
    return;
  }
  if (t != LUA_TTABLE)
    luaL_error(L,
               "%s: endpoints is not a table {hosts = {...}, env = {...}} (see docs/lua-api.md#capabilities)",
               mapping);
  int decl = lua_gettop(L);
  if (lua_getfield(L, LUA_REGISTRYINDEX, ENDPOINTS_KEY) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, ENDPOINTS_KEY);
  }
  lua_createtable(L, 0, 2);
  copy_list(L, decl, mapping, "hosts", 1);
  lua_setfield(L, -2, "hosts");
  copy_list(L, decl, mapping, "env", 0);
  lua_setfield(L, -2, "env");
  lua_setfield(L, -2, mapping);
  lua_settop(L, decl - 1);
}

/* ---- the guard ----------------------------------------------------------------------------- */

static int host_matches(const char *pattern, const char *host) {
  if (strncmp(pattern, "*.", 2) != 0) return strcmp(pattern, host) == 0;
  size_t p = strlen(pattern) - 1, h = strlen(host); /* ".domain" */
  return h > p && strcmp(host + h - p, pattern + 1) == 0;
}

/* 1 when the declaration of mapping (or the configured endpoints) allow url's authority req. */
static int allowed(lua_State *L, const char *mapping, const authority *req, const char *url) {
  for (size_t i = 0; i < nconfigured; i++)
    if (same_endpoint(&configured[i], req, url)) return 1;
  int ok = 0, top = lua_gettop(L);
  if (lua_getfield(L, LUA_REGISTRYINDEX, ENDPOINTS_KEY) == LUA_TTABLE &&
      lua_getfield(L, -1, mapping) == LUA_TTABLE) {
    lua_getfield(L, -1, "hosts");
    for (lua_Integer i = 1; !ok && lua_rawgeti(L, -1, i) == LUA_TSTRING; i++) {
      ok = host_matches(lua_tostring(L, -1), req->host);
      lua_pop(L, 1);
    }
    lua_settop(L, top + 2);
    lua_getfield(L, -1, "env");
    for (lua_Integer i = 1; !ok && lua_rawgeti(L, -1, i) == LUA_TSTRING; i++) {
      const char *value = getenv(lua_tostring(L, -1));
      authority a;
      ok = value && parse_authority(value, 1, &a) && same_endpoint(&a, req, url);
      lua_pop(L, 1);
    }
  }
  lua_settop(L, top);
  return ok;
}

/* Replaces the request table at idx with a raw copy (no metatable: what is checked is what is sent)
 * and raises unless its url is one mapping may reach. A request that is not a table, or has no
 * string url, is left to the binding's own checks.                               [-0, +0, e] */
static void check_request(lua_State *L, int idx, const char *mapping, const char *fn) {
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx)) return;
  lua_newtable(L);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, -4);
  }
  lua_replace(L, idx);
  lua_pushliteral(L, "url");
  int type = lua_rawget(L, idx);
  if (type == LUA_TNIL) { /* the binding says the field is required */
    lua_pop(L, 1);
    return;
  }
  const char *url = type == LUA_TSTRING ? lua_tostring(L, -1) : "";
  authority req;
  if (!parse_authority(url, 0, &req)) {
    lua_pushfstring(L,
                    "%s: a mapping may reach only http(s) URLs with a host and no user name (see "
                    "docs/lua-api.md#capabilities)",
                    fn);
    lp_sandbox_raise(L, lua_tostring(L, -1));
  }
  if (!allowed(L, mapping, &req, url)) {
    lua_pushfstring(L,
                    "%s: host %s%s%s is not an endpoint of the mapping %s (a mapping reaches only the hosts "
                    "its endpoints declare, the ones its endpoint variables name, and --endpoint or --sim; "
                    "see docs/lua-api.md#capabilities)",
                    fn, req.host, req.port[0] ? ":" : "", req.port, mapping);
    lp_sandbox_raise(L, lua_tostring(L, -1));
  }
  lua_pop(L, 1);
}

static int finish_call(lua_State *L, int status, lua_KContext ctx) {
  (void)status;
  (void)ctx;
  return lua_gettop(L);
}

/* Calls the binding (upvalue 1) with the checked arguments; it may yield (lua_callk). */
static int call_binding(lua_State *L) {
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_callk(L, lua_gettop(L) - 1, LUA_MULTRET, 0, finish_call);
  return finish_call(L, LUA_OK, 0);
}

/* luaprov.http.request for a mapping (upvalues: the binding, the mapping's name). */
static int guarded_request(lua_State *L) {
  check_request(L, 1, lua_tostring(L, lua_upvalueindex(2)), "luaprov.http.request");
  return call_binding(L);
}

/* luaprov.http.request_all for a mapping: every request of the list is checked. */
static int guarded_request_all(lua_State *L) {
  if (lua_istable(L, 1)) {
    const char *mapping = lua_tostring(L, lua_upvalueindex(2));
    lua_Integer n = (lua_Integer)lua_rawlen(L, 1);
    if (n > 10000) return call_binding(L); /* which refuses the batch as too large */
    lua_createtable(L, (int)n, 0);
    for (lua_Integer i = 1; i <= n; i++) {
      lua_rawgeti(L, 1, i);
      check_request(L, -1, mapping, "luaprov.http.request_all");
      lua_rawseti(L, -2, i);
    }
    lua_replace(L, 1);
  }
  return call_binding(L);
}

void lp_endpoints_guard_http(lua_State *L, int idx, const char *module) {
  char buf[256];
  const char *mapping = lp_module_mapping(module, buf, sizeof buf);
  idx = lua_absindex(L, idx);
  static const struct {
    const char *name;
    lua_CFunction guard;
  } guarded[] = {{"request", guarded_request}, {"request_all", guarded_request_all}};
  for (size_t i = 0; i < sizeof guarded / sizeof guarded[0]; i++) {
    lua_getfield(L, idx, guarded[i].name);
    lua_pushstring(L, mapping ? mapping : "providers");
    lua_pushcclosure(L, guarded[i].guard, 2);
    lua_setfield(L, idx, guarded[i].name);
  }
}

/* The hosts a mapping may reach with luaprov.http (docs/lua-api.md#capabilities).
 *
 * A mapping's entry module (providers.<name>, its init.lua) declares them when it loads:
 *
 *   M.endpoints = {
 *     hosts = { "*.example-cloud.com", "169.254.169.254" }, -- exact hosts, or *.domain for any host below it
 *     env = { "EXAMPLE_ENDPOINT" },                         -- variables that may point it elsewhere
 *   }
 *
 * The engine checks the declaration when the module loads (a bad one is a load problem) and keeps its
 * own copy, out of the scripts' reach. Every module under providers.<name>/ may then send requests
 * only to: a declared host (any port), the host and port of a URL (or host) one of the declared
 * variables holds when the request is made (how --sim and an operator's override reach the
 * mapping), and every endpoint the engine was configured with (--endpoint, given
 * by the contract or command that sets ctx.endpoint: lp_endpoints_allow_configured). A mapping that declares
 * nothing reaches only the last. Anything else, and any URL that is not http(s) or names a user
 * ("http://u@host"), raises
 * "<file>:<line>: luaprov.http.request: host <host> is not an endpoint of providers.<name> (...)"
 * at the script's line. The request table is copied (raw) before the check, so what is checked is
 * what is sent. */
#ifndef LUAPROV_SCRIPT_ENDPOINTS_H
#define LUAPROV_SCRIPT_ENDPOINTS_H

#include <jansson.h>
#include <lua.h>

/* Records the endpoints declared by the value at idx of the module named module, when module is a
 * mapping's entry (providers.<name>, "defaults." ignored; anything else is ignored). Raises when the
 * declaration is malformed.                                                     [-0, +0, e] */
void lp_endpoints_declare(lua_State *L, const char *module, int idx);

/* Replaces request and request_all in the luaprov.http copy at idx with guarded versions for the
 * module named module (a providers.* module).                                   [-0, +0, m] */
void lp_endpoints_guard_http(lua_State *L, int idx, const char *module);

/* Allows url's host and port to every mapping from now on: called by whoever configures a mapping
 * with an endpoint (--endpoint: the simulator, a private gateway), never with what a script
 * returned. NULL and "" are ignored; so is a URL with no host. */
void lp_endpoints_allow_configured(const char *url);

#endif

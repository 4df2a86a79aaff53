/* Script roles: what each kind of script may use of the `luaprov` module (docs/lua-api.md#capabilities).
 * A script's role follows from its module name: policies.drift is the drift policy, any other
 * policies.* module a policy module, providers.* a mapping, sim.* a simulator, luaprov.testkit.* the
 * test kit's builders. One table in roles.c says, per sub-module (and, where it matters, per
 * function), which roles may use it; everything it does not list is refused. A refused capability is
 * still there by name: using it raises "<file>:<line>: luaprov.http is not available to a drift
 * policy (...)" at the script's line, so `luaprov check` and a reload name the mistake.
 *
 * The rule covers require as well: a script may require a module only when that module's role may
 * use nothing its own role may not (a policy cannot borrow a mapping's client and its network).
 * Under plain lua5.4 (luaprov.so, busted) there are no roles: the engine enforces them. */
#ifndef LUAPROV_SCRIPT_ROLES_H
#define LUAPROV_SCRIPT_ROLES_H

#include <lua.h>

typedef enum lp_role {
  LP_ROLE_DRIFT,
  LP_ROLE_REPAIR,
  LP_ROLE_TAGS,
  LP_ROLE_DISRUPTION,
  LP_ROLE_POLICY, /* any other module under policies/ (helpers a policy requires) */
  LP_ROLE_MAPPING,
  LP_ROLE_SIMULATOR,
  LP_ROLE_TESTKIT,
  LP_ROLE_COUNT
} lp_role;

/* The role of the module named module ("defaults." is ignored: the shipped version of a module has
 * its role). A name that fits no role gets LP_ROLE_POLICY, the narrowest. */
lp_role lp_role_of_module(const char *module);

/* "a drift policy", "a mapping", ...: how messages name the role. */
const char *lp_role_title(lp_role role);

/* Pushes the `luaprov` table role sees: a copy of the full module at index src (its sub-tables
 * copied too, so a script that replaces luaprov.json.encode changes it for itself only), with every
 * capability role lacks replaced by a refusal (script/sandbox.h), and luaprov.http guarded by the
 * mapping's endpoints (script/endpoints.h) when role is LP_ROLE_MAPPING. module is the requiring
 * module's name.                                                              [-0, +1, m] */
void lp_role_push_bindings(lua_State *L, int src, lp_role role, const char *module);

/* NULL when the module named requirer may require the module named module: module's role may use
 * nothing requirer's role may not, and a mapping's file requires no other mapping's (each reaches
 * only its own endpoints). Else a malloc'd sentence saying why not, e.g. "module
 * 'providers.acme.client' is not available to a drift policy: it is a mapping's and may use
 * luaprov.http, which a drift policy may not (...)". */
char *lp_role_require_problem(const char *requirer, const char *module);

#endif

/* What a module name says: whether it asks for the shipped version ("defaults.") and which mapping
 * (providers.<name>) it belongs to. Plain string functions; no Lua state. */
#ifndef LUAPROV_SCRIPT_MODULE_NAME_H
#define LUAPROV_SCRIPT_MODULE_NAME_H

#include <stddef.h>

/* The prefix that asks require for the shipped version of a module: require "defaults.policies.drift". */
#define LP_MODULE_DEFAULTS_PREFIX "defaults."

/* name without LP_MODULE_DEFAULTS_PREFIX (a pointer into name): the module the shipped version is of,
 * which has that module's role and mapping. */
const char *lp_module_bare(const char *name);

/* The mapping name belongs to, "providers.acme" for "providers.acme.client" (and for
 * "defaults.providers.acme"), written into buf (cap bytes) and returned; NULL when name is not under
 * providers.<name> or the mapping's name does not fit. */
const char *lp_module_mapping(const char *name, char *buf, size_t cap);

#endif

/* Provider settings: the options a CloudProvider mapping declares in its `settings` list
 * (docs/contracts.md#settings), taken from `--<name> VALUE` or the environment and passed to every
 * mapping call as ctx[<name> with "-" -> "_"]. The engine names no setting of its own here: what a
 * cloud needs (where its API lives, the kind of cluster) is the mapping's to declare.
 *
 * A declared setting is {name, env = {VAR...}?, required = bool?, default = string?, sim = string?,
 * help = string?}. Its value is, first found: the flag; under `run --sim` its `sim` value (the
 * simulators know only their own values); the first environment variable set and non-empty; for
 * the offline tools (`eval`) its `sim` value, so they work with no environment while an operator's
 * environment still wins; its `default`. */
#ifndef LUAPROV_CONTRACT_SETTINGS_H
#define LUAPROV_CONTRACT_SETTINGS_H

#include <jansson.h>

#include "core/buf.h"

/* NULL when declared (the mapping's `settings`, borrowed; NULL = none declared) is a well-formed list,
 * else a malloc'd sentence naming the entry and field ("settings[2].env is not a list of strings"). */
char *lp_settings_problem(const json_t *declared);

/* The ctx keys of the declared settings resolved as above: a new object {"zone": "z1",
 * "cluster_type": "managed"}. flags ({"zone": "z2"}, borrowed, may be NULL) are the `--<name> VALUE`
 * options given. Returns NULL with *problem (malloc'd) when a flag names no declared setting
 * ("unknown option --colour") or a required setting has no value ("the zone is not set: pass
 * --zone VALUE or set ZONE_ID or CLOUD_ZONE"). */
typedef enum lp_settings_sim {
  LP_SETTINGS_REAL = 0,      /* flag, environment, default */
  LP_SETTINGS_SIM_FIRST = 1, /* flag, sim value, environment, default (`run --sim`) */
  LP_SETTINGS_SIM_FALLBACK,  /* flag, environment, sim value, default (`eval`) */
} lp_settings_sim;
json_t *lp_settings_resolve(const json_t *declared, const json_t *flags, lp_settings_sim sim, char **problem);

/* Appends one help line per declared setting to out:
 * "  --zone VALUE   the zone ... (env $ZONE_ID, $CLOUD_ZONE; required)". */
void lp_settings_usage(const json_t *declared, lp_buf *out);

#endif

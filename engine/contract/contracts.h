/* The script contracts of SPEC §4.4 and §4.5: which entry modules a script tree may hold and what
 * each must export. The script host loads these modules into every generation and rejects a
 * generation whose modules break their contract; `luaprov check` reports the same problems.
 * Depends on: engine/script (lp_module_spec). */
#ifndef LUAPROV_CONTRACT_CONTRACTS_H
#define LUAPROV_CONTRACT_CONTRACTS_H

#include "script/generation.h"

/* Entry modules of a script tree, terminated by {NULL}: policies.drift, policies.repair,
 * policies.tags, providers.alibaba (the CloudProvider mapping), providers.bizfly (the NodeGroup
 * mapping). None is required by the loader; the engine's controllers require the ones they use. */
extern const lp_module_spec lp_contract_modules[];

#endif

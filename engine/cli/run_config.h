/* `luaprov run --config FILE`: the engine's tunables as YAML (or JSON), for what flags would make
 * unwieldy. Today the controllers' timings:
 *
 *   controllers:
 *     launchTimeout: 5m              # Launched not True for this long -> the NodeClaim is deleted
 *     registrationTimeout: 15m       # Registered not True for this long -> deleted
 *     garbageCollectionInterval: 2m  # instances and NodeClaims compared this often
 *     leakedInstanceGrace: 1m        # an instance with no NodeClaim younger than this is left alone
 *     nodeClassResync: 5m            # a Ready node class is resolved again this often
 *     drainRequeue: 1s               # while pods are being evicted
 *     terminateRequeue: 5s           # while an instance shuts down
 *     workers: 10                    # reconciles at once per controller
 *
 * Durations are Go durations ("90s", "1m30s") or numbers of seconds. Unknown keys are errors, so a
 * typo is not silently ignored. */
#ifndef LUAPROV_CLI_RUN_CONFIG_H
#define LUAPROV_CLI_RUN_CONFIG_H

#include "controller/controller.h"

/* Reads path into *settings (fields not named keep their value). Returns 0, or -1 after printing
 * "luaprov run: <file>: <what is wrong>" on stderr. */
int lp_run_config_load(const char *path, lp_ctrl_settings *settings);

#endif

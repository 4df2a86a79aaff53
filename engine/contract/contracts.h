/* The script contracts (docs/contracts.md#policies, docs/contracts.md#mappings): which entry modules
 * a script tree may hold and what each must export. The script host loads these modules into every
 * generation and rejects a generation whose modules break their contract; `luaprov check` reports
 * the same problems.
 * Depends on: engine/script (lp_module_spec). */
#ifndef LUAPROV_CONTRACT_CONTRACTS_H
#define LUAPROV_CONTRACT_CONTRACTS_H

#include <jansson.h>

#include "script/generation.h"

/* Entry modules of a script tree, terminated by {NULL}: policies.drift, policies.repair,
 * policies.tags, policies.disruption (optional: without it every voluntary disruption goes ahead),
 * LUAPROV_CLOUDPROVIDER_MAPPING (the CloudProvider mapping the build ships; it also
 * exports its node class descriptor, settings and drift reasons, checked here), providers.bizfly (the
 * NodeGroup mapping). None is required by the loader; the engine's controllers require the ones they
 * use. */
extern const lp_module_spec lp_contract_modules[];

/* The candidate at most two edits from word (case-insensitive) and not equal to it, for "did you
 * mean" hints; NULL when none is that close. candidates is NULL-terminated. */
const char *lp_contract_closest(const char *word, const char *const *candidates);

/* Where module.function is defined in generation g: returns its first line (0 when unknown) and sets
 * *file to the script it was defined in, else the module's file, else NULL (caller frees). Loop
 * thread only. */
int lp_contract_function_line(lp_generation *g, const char *module, const char *function, char **file);

/* NULL when reason may become a Drifted condition reason (docs/contracts.md#policies); otherwise a
 * malloc'd sentence starting "is_drifted returned ...", with a hint: a reason is "" or a CamelCase
 * word, and not a typo of a known reason: NodeClassDrift or one of mapping_reasons (the mapping's
 * `drift_reasons`, an array of strings, borrowed; NULL = none), e.g. "ImagDrift". */
char *lp_drift_reason_problem(const char *reason, const json_t *mapping_reasons);

/* The same for any answer of is_drifted or static_drift (function; the first value, borrowed; NULL or
 * null = ""): a value that is not a string gets "is_drifted returned a table {...}, not a string;
 * return a drift reason such as ...". The engine, `luaprov eval` and load-time validation all check
 * the answer with this. */
char *lp_drift_answer_problem(const char *function, const json_t *reason, const json_t *mapping_reasons);

/* NULL when tags (the first value of build_instance_tags, borrowed) is a map of tag key to string;
 * otherwise a malloc'd sentence with the hint ("build_instance_tags returned tag 'cost' = 42, a
 * number; tag values must be strings (wrap it in tostring())"). The engine, `luaprov eval` and
 * load-time validation all check the answer with this. */
char *lp_tags_answer_problem(const json_t *tags);

/* NULL when list (the first value of the repair policy's policies(ctx), borrowed; NULL = nil) is a list
 * of {condition_type, condition_status, toleration_seconds} the repair controller can use; otherwise a
 * malloc'd sentence about the first thing wrong, with the hint: "policies(ctx) must return a list of
 * {...}, not a string", "policies(ctx)[1].condition_status is \"false\"; it must be \"True\", \"False\"
 * or \"Unknown\" (did you mean \"False\"?)". The engine, `luaprov eval` and load-time validation all
 * check the answer with this (and the test kit's check_repair_policies says the same). */
char *lp_repair_answer_problem(const json_t *list);

/* NULL when answer (the first value of can_disrupt, borrowed; NULL = nothing) is true or false;
 * otherwise a malloc'd "can_disrupt returned X, which is neither true nor false; return true to allow
 * ..." The engine (and so `luaprov eval`, which asks through it) and load-time validation all check the
 * answer with this. */
char *lp_can_disrupt_answer_problem(const json_t *answer);

/* A Contract error for a policy's answer that breaks its contract: "<file>:<line>: <problem>", the
 * file and first line of module.function in generation g (lp_contract_function_line), also set as the
 * error's file and line, so the engine and `luaprov eval` say the same. Loop thread only. */
lp_error *lp_policy_answer_error(lp_generation *g, const char *module, const char *function,
                                 const char *problem);

#endif

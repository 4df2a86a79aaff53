/* Status conditions (metav1.Condition) as Karpenter's operatorpkg keeps them: a list keyed by type in
 * status.conditions, each {type, status, reason, message, lastTransitionTime, observedGeneration}.
 * lastTransitionTime changes only when status does, so "how long has it been Unknown" can be read from
 * it (launch and registration timeouts are measured that way). Loop thread only. */
#ifndef LUAPROV_CONTROLLER_CONDITIONS_H
#define LUAPROV_CONTROLLER_CONDITIONS_H

#include <jansson.h>

/* The condition of type in obj.status.conditions (borrowed), or NULL. */
json_t *lp_condition_get(const json_t *obj, const char *type);

/* Non-zero when the condition exists with that status ("True", "False", "Unknown"). */
int lp_condition_is(const json_t *obj, const char *type, const char *status);

/* The condition's lastTransitionTime in epoch seconds, or < 0 when absent or unparsable. */
double lp_condition_since(const json_t *obj, const char *type);

/* Sets the condition in obj (creating status and status.conditions as needed; reason defaults to
 * type when status is "True" and reason is NULL, message NULL = ""). observedGeneration is copied from
 * metadata.generation. now is wall time for lastTransitionTime when the status changes. Returns
 * non-zero when anything changed. */
int lp_condition_set(json_t *obj, const char *type, const char *status, const char *reason,
                     const char *message, double now);

/* Removes the condition of type; returns non-zero when there was one. */
int lp_condition_clear(json_t *obj, const char *type);

/* Sets the root condition "Ready" from the given dependent types, as operatorpkg rolls them up: True
 * when every one is True; else False when any is False (its reason and message), else Unknown (the
 * first not True). Returns non-zero when Ready changed. */
int lp_condition_rollup_ready(json_t *obj, const char *const *types, double now);

#endif

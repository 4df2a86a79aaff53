/* What a drift replacement records about why it was made, shared by the disruption controller (which
 * stamps it, disruption_replace.c) and the drift controller (which reads it, drift.c): a drift rule no
 * replacement can satisfy (one every new node fails too, say) would otherwise replace nodes in a
 * loop (docs/controllers.md#when-replacing-cannot-resolve-a-drift).
 *
 * A drift replacement carries luaprov.io/replaced-for (the Drifted reason of the node it replaces) and
 * luaprov.io/replaced-under (the inputs that decide drift when it was made: its node class's
 * resourceVersion, the scripts' content digest and a digest of its NodePool's spec.template). Found drifted
 * for the same reason under the same inputs, it shows that replacing cannot resolve that reason: the drift
 * controller sets its DriftUnresolvable condition, and the disruption controller replaces no node of its
 * NodePool for that reason while the condition holds. Everything is on the objects, nothing in memory: a
 * restart or a new leader finds the same. */
#ifndef LUAPROV_CONTROLLER_DRIFT_REPLACEMENT_H
#define LUAPROV_CONTROLLER_DRIFT_REPLACEMENT_H

#include <jansson.h>

#include "controller/controller.h"

#define LP_REPLACED_FOR_ANNOTATION   "luaprov.io/replaced-for"
#define LP_REPLACED_UNDER_ANNOTATION "luaprov.io/replaced-under"
#define LP_DRIFT_UNRESOLVABLE        "DriftUnresolvable" /* the NodeClaim condition */

/* Stamps replacement (the drift replacement of candidate in nodepool, all borrowed) with the two
 * annotations: the candidate's Drifted reason, and the inputs now. */
void lp_drift_stamp_replacement(lp_ctrl_env *env, json_t *replacement, const json_t *candidate,
                                const json_t *nodepool);

/* Non-zero when claim (borrowed), drifted for reason with its node class nodeclass (borrowed, NULL when
 * not cached) in nodepool, is a drift replacement made for that reason under the inputs that still hold. */
int lp_drift_unresolvable(lp_ctrl_env *env, const json_t *claim, const json_t *nodeclass,
                          const json_t *nodepool, const char *reason);

#endif

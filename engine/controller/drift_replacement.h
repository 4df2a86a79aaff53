/* What a drift replacement records about why it was made, shared by the disruption controller (which
 * stamps it, disruption_replace.c) and the drift controller (which reads it, drift.c): a drift rule no
 * replacement can satisfy (one every new node fails too, say) would otherwise replace nodes in a
 * loop (docs/controllers.md#when-replacing-cannot-resolve-a-drift).
 *
 * A drift replacement carries luaprov.io/replaced-for (the Drifted reason of the node it replaces) and
 * luaprov.io/replaced-under (the inputs that decide drift when it was made: digests of its node class's
 * spec and status without conditions and numbers, of the scripts' content and of its NodePool's
 * spec.template). Found drifted
 * for the same reason under the same inputs, it shows that replacing cannot resolve that reason: the drift
 * controller sets its DriftUnresolvable condition (True, reason the drift reason) and records the verdict
 * on the NodePool (annotation drift-unresolvable.luaprov.io/<reason> = {"under", "nodeclaim"}), and the
 * disruption controller replaces no node of the NodePool for that reason while the condition holds or the
 * record's inputs still do: deleting the replacement does not lift the block, a change of the node class,
 * the NodePool's template or the scripts (a reload) does. A replacement not drifted for its reason once
 * initialized gets DriftUnresolvable=False ("Resolved"): it is judged, replacing does resolve the drift,
 * and made under the inputs now, it lifts the block of the record (not that of a NodeClaim still True).
 * Until one is judged, at most one replacement per NodePool and reason is on its way (lp_drift_gate), so an
 * unsatisfiable rule costs one node, whatever the budget. Everything is on the objects, nothing in memory:
 * a restart or a new leader finds the same.
 *
 * Used by drift.c (the verdicts, the record) and disruption.c (the gate); calls neither. */
#ifndef LUAPROV_CONTROLLER_DRIFT_REPLACEMENT_H
#define LUAPROV_CONTROLLER_DRIFT_REPLACEMENT_H

#include <jansson.h>

#include "controller/controller.h"

#define LP_REPLACED_FOR_ANNOTATION   "luaprov.io/replaced-for"
#define LP_REPLACED_UNDER_ANNOTATION "luaprov.io/replaced-under"
#define LP_DRIFT_UNRESOLVABLE        "DriftUnresolvable" /* the NodeClaim condition */
#define LP_DRIFT_RESOLVED            "Resolved"      /* its reason when False: judged, not drifted for it */
#define LP_DRIFT_INPUTS_CHANGED      "InputsChanged" /* its reason when False: made under other inputs */
#define LP_DRIFT_RECORD_PREFIX       "drift-unresolvable.luaprov.io/" /* + reason: the NodePool annotation */

/* Stamps replacement (the drift replacement of candidate in nodepool, all borrowed) with the two
 * annotations: the candidate's Drifted reason, and the inputs now. */
void lp_drift_stamp_replacement(lp_ctrl_env *env, json_t *replacement, const json_t *candidate,
                                const json_t *nodepool);

/* Non-zero when claim (borrowed), drifted for reason with its node class nodeclass (borrowed, NULL when
 * not cached) in nodepool, is a drift replacement made for that reason under the inputs that still hold. */
int lp_drift_unresolvable(lp_ctrl_env *env, const json_t *claim, const json_t *nodeclass,
                          const json_t *nodepool, const char *reason);

/* The drift reason claim (borrowed) was made a replacement for (its luaprov.io/replaced-for), or NULL. */
const char *lp_drift_replaced_for(const json_t *claim);

/* The value of the NodePool record (LP_DRIFT_RECORD_PREFIX reason) that claim (borrowed, DriftUnresolvable
 * for reason) makes under the inputs now, malloc'd; NULL when nodepool (borrowed) carries it already. */
char *lp_drift_record_wanted(lp_ctrl_env *env, const json_t *claim, const json_t *nodeclass,
                             const json_t *nodepool, const char *reason);

/* ---- the disruption controller's gate ---------------------------------------------------------- */

/* What drift replacement may do per NodePool and drift reason in one disruption pass, read from the
 * cached NodeClaims and NodePools when made, the first that applies: held (a NodeClaim
 * DriftUnresolvable=True for it), proven (a replacement for it judged Resolved under the inputs that hold
 * now: replace within the budget), recorded (a NodePool record under the inputs now: held), probing (a
 * replacement for it not judged yet), or free. */
typedef struct lp_drift_gate lp_drift_gate;

lp_drift_gate *lp_drift_gate_new(lp_ctrl_env *env);
void lp_drift_gate_free(lp_drift_gate *g);
/* Why no NodeClaim of pool drifted for reason may be replaced now (the DisruptionBlocked event's text,
 * owned by the gate until it is freed), or NULL: it may. */
const char *lp_drift_gate_why(lp_drift_gate *g, const char *pool, const char *reason);
/* A replacement of candidate is on its way for reason in pool (decided now: replacement NULL, not named
 * yet; or POSTed and not cached yet, named replacement): unless the reason is proven, no other is made for
 * it in this pass. All borrowed. */
void lp_drift_gate_launched(lp_drift_gate *g, const char *pool, const char *reason, const char *replacement,
                            const char *candidate);

#endif

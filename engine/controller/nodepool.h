/* NodePool helpers shared by the provisioner, the drift controller and the NodePool status controller.
 *
 * The static-drift hash: a NodePool's spec.template minus what Karpenter leaves out of its hash
 * (requirements, resources): labels, annotations, taints, startupTaints, nodeClassRef, expireAfter,
 * terminationGracePeriod. It is SHA-256 of that subtree serialized with sorted keys, shown as 16 hex
 * digits, under hash version LP_NODEPOOL_HASH_VERSION. It is not Go Karpenter's hashstructure value,
 * on purpose: the version differs, so the two are never compared. */
#ifndef LUAPROV_CONTROLLER_NODEPOOL_H
#define LUAPROV_CONTROLLER_NODEPOOL_H

#include <jansson.h>

#define LP_NODEPOOL_HASH_ANNOTATION         "karpenter.sh/nodepool-hash"
#define LP_NODEPOOL_HASH_VERSION_ANNOTATION "karpenter.sh/nodepool-hash-version"
#define LP_NODEPOOL_HASH_VERSION            "lp1"

/* Writes the hash of nodepool (borrowed) into out (17 bytes with the NUL). */
void lp_nodepool_hash(const json_t *nodepool, char out[17]);

/* ---- labels and runtime validation (nodepool_validation.c) ------------------------------------ */

#define LP_LABEL_NODEPOOL "karpenter.sh/nodepool"

/* Karpenter's NormalizedLabels: the current key for a deprecated one a pod may still select on
 * ("beta.kubernetes.io/arch" -> "kubernetes.io/arch"), else key itself. Static storage or key. */
const char *lp_label_normalized(const char *key);

/* Non-zero for Karpenter's WellKnownLabels: nodepool, topology zone and its parent domain, instance
 * type, arch, os, capacity type, windows build. A pod may require them of a NodePool that does not mention
 * them. */
int lp_label_well_known(const char *key);

/* Non-zero when key is a label Karpenter keeps to itself: one in the karpenter.sh domain (or a
 * subdomain of it) that is not well-known, or kubernetes.io/hostname. */
int lp_label_restricted(const char *key);

/* The checks Karpenter makes of a NodePool at run time, beyond what the CRD's schema can say (its
 * RuntimeValidate): template labels (qualified keys, valid values, no restricted or karpenter.sh/nodepool
 * key), taints and startup taints (qualified keys and values, known effects, no key and effect twice)
 * and requirements (supported operators, no restricted or karpenter.sh/nodepool key, qualified keys,
 * valid values, In with values and enough of them for minValues, Gt/Lt/Gte/Lte with one non-negative
 * integer, capacity-type In naming a known capacity type). Returns NULL when nodepool passes, else
 * every problem found joined by "; " (malloc'd). */
char *lp_nodepool_validate(const json_t *nodepool);

#endif

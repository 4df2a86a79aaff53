/* NodePool helpers shared by the provisioner and the drift controller.
 *
 * The static-drift hash: a NodePool's spec.template minus what Karpenter leaves out of its hash
 * (requirements, resources): labels, annotations, taints, startupTaints, nodeClassRef, expireAfter,
 * terminationGracePeriod. It is SHA-256 of that subtree serialized with sorted keys, shown as 16 hex
 * digits, under hash version LP_NODEPOOL_HASH_VERSION. It is not Go Karpenter's hashstructure value,
 * on purpose (karpenter_core.md §3.3): the version differs, so the two are never compared. */
#ifndef LUAPROV_CONTROLLER_NODEPOOL_H
#define LUAPROV_CONTROLLER_NODEPOOL_H

#include <jansson.h>

#define LP_NODEPOOL_HASH_ANNOTATION         "karpenter.sh/nodepool-hash"
#define LP_NODEPOOL_HASH_VERSION_ANNOTATION "karpenter.sh/nodepool-hash-version"
#define LP_NODEPOOL_HASH_VERSION            "lp1"

/* Writes the hash of nodepool (borrowed) into out (17 bytes with the NUL). */
void lp_nodepool_hash(const json_t *nodepool, char out[17]);

#endif

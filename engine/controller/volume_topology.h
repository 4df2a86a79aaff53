/* Volume topology: the node requirements a pod's PersistentVolumeClaims add (kube-scheduler's
 * VolumeBinding and VolumeZone filters, as Karpenter's scheduler applies them to new nodes). A pod
 * whose volume lives in one zone can only run on a node in that zone, so a NodeClaim made for it must
 * be launched there. Loop thread only; reads the manager's caches (LP_KIND_PVC, LP_KIND_PV,
 * LP_KIND_STORAGECLASS). */
#ifndef LUAPROV_CONTROLLER_VOLUME_TOPOLOGY_H
#define LUAPROV_CONTROLLER_VOLUME_TOPOLOGY_H

#include <jansson.h>

#include "controller/controller.h"

/* The requirements ({key, operator, values} list, keys normalized like a pod's) that the claims of
 * pod's volumes (spec.volumes[].persistentVolumeClaim, and the claim "<pod>-<volume>" of a generic
 * ephemeral volume) put on its node, ANDed with whatever else the pod asks for:
 *   - a claim bound to a PersistentVolume (spec.volumeName): the first term of the volume's
 *     spec.nodeAffinity.required.nodeSelectorTerms (a volume names the zone it was made in);
 *   - an unbound claim: the first term of its StorageClass's allowedTopologies (matchLabelExpressions
 *     as In requirements); the class is spec.storageClassName, else the class annotated
 *     storageclass.kubernetes.io/is-default-class=true.
 * Returns a new list, or NULL when the volumes add nothing. A claim, volume or named class the cache
 * does not have sets *why (malloc'd, caller frees: "persistentvolumeclaim default/data not found") and
 * returns NULL: the pod cannot be placed until it exists, as kube-scheduler would not bind it. */
json_t *lp_volume_requirements(lp_ctrl_env *env, const json_t *pod, char **why);

#endif

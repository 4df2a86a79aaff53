/* Checks of what the CloudProvider mapping and the policies return (docs/contracts.md), and the
 * NodeClaims built from instances. Each check returns NULL when the value is well-formed, or a
 * malloc'd sentence naming the offending field, which the caller prefixes with the script and rule. */
#ifndef LUAPROV_CONTRACT_SHAPES_H
#define LUAPROV_CONTRACT_SHAPES_H

#include <jansson.h>

#define LP_LABEL_ZONE          "topology.kubernetes.io/zone"
#define LP_LABEL_INSTANCE_TYPE "node.kubernetes.io/instance-type"
#define LP_LABEL_CAPACITY_TYPE "karpenter.sh/capacity-type"
#define LP_LABEL_ARCH          "kubernetes.io/arch"
#define LP_LABEL_OS            "kubernetes.io/os"

/* The instance shape (docs/contracts.md#the-instance-shape). */
char *lp_check_instance(const json_t *instance);

/* One instance type of GetInstanceTypes (the shape `luaprov eval instance-types` prints) and rule
 * CP4: an offering for every (zone, capacity type) its requirements name, and requirements that cover
 * every offering's zone and capacity type. */
char *lp_check_instance_type(const json_t *type);

/* A tag map: string keys to string values, keys non-empty. */
char *lp_check_tags(const json_t *tags);

/* The single value of the requirement `key` in a requirement list, or NULL. */
const char *lp_requirement_single_value(const json_t *requirements, const char *key);

/* Builds the NodeClaim for a launched or listed instance. template_claim (may be NULL) supplies
 * metadata and spec to keep; type (may be NULL) supplies capacity, overhead and labels from its
 * single-valued requirements. Sets the labels of rule 2, status.providerID, imageID, capacity and
 * allocatable. Returns a new reference. */
json_t *lp_nodeclaim_for_instance(const json_t *template_claim, const json_t *instance, const json_t *type,
                                  const char *provider_id);

/* The labels rule CP2 requires that the NodeClaim lacks, as "a, b" (malloc'd), or NULL. */
char *lp_check_nodeclaim_labels(const json_t *nodeclaim);

#endif

/* The node class descriptor: which Kubernetes resource a CloudProvider mapping resolves and launches
 * from, exported as the mapping's `nodeclass` table (docs/contracts.md#the-node-class-descriptor).
 * The engine's controllers watch that resource, answer GetSupportedNodeClasses with it, put its
 * finalizer on classes and stamp its hash annotations; nothing in the engine names a cloud's class.
 *
 * The same kind, version and resource may also be served under other API groups, the descriptor's
 * `aliases` (a group the class moved away from, still holding users' objects): the controllers watch
 * each of them too and treat an object of an alias group as a node class of its own (a class is
 * named by group and name). The finalizer and the hash annotations are the same for every group.
 *
 * The descriptor is read once when the CloudProvider starts and pinned for the process: a hot reload
 * whose mapping exports a different one is refused like a broken script (the controllers' watches
 * and the annotations on existing objects cannot change under them); a restart takes the new one. */
#ifndef LUAPROV_CONTRACT_NODECLASS_DESC_H
#define LUAPROV_CONTRACT_NODECLASS_DESC_H

#include <jansson.h>
#include <stddef.h>

typedef struct lp_nodeclass_desc {
  const char *group;                   /* API group, e.g. "karpenter.k8s.example.com" */
  const char *version;                 /* "v1alpha1" */
  const char *kind;                    /* the Kind, used in messages ("ExampleNodeClass ... is not Ready") */
  const char *resource;                /* the plural resource the controllers watch */
  const char *finalizer;               /* held on a class until no NodeClaim references it */
  const char *hash_annotation;         /* the class hash static drift compares */
  const char *hash_version_annotation; /* the version of the hash algorithm */
  /* The other API groups serving kind/version/resource (`aliases`), in the mapping's order: distinct,
   * none equal to group. naliases 0 (aliases NULL) when it has none. */
  const char **aliases;
  size_t naliases;
} lp_nodeclass_desc;

/* NULL when t (the mapping's `nodeclass`, borrowed; NULL = absent) has every field as a non-empty
 * string and, when present, `aliases` as a list of distinct API group names other than `group` (an
 * empty list, or an empty table, is none), else a malloc'd sentence naming the first problem
 * ("nodeclass.finalizer is missing or not a non-empty string", "nodeclass.aliases[2]
 * \"karpenter.example.com\" repeats aliases[1]"). When a descriptor is pinned, one that differs from
 * it is a problem too ("nodeclass.kind changed from X to Y since the engine started: restart luaprov
 * to change the node class"; the aliases compare as a list, in order). */
char *lp_nodeclass_desc_problem(const json_t *t);

/* Fills out with pointers into t (which must outlive out) after lp_nodeclass_desc_problem(t) found
 * nothing; fields missing in t are "", and aliases that are not usable are left out. out->aliases is
 * allocated (lp_nodeclass_desc_release frees it). */
void lp_nodeclass_desc_from_json(const json_t *t, lp_nodeclass_desc *out);
/* Frees what lp_nodeclass_desc_from_json allocated in d (not the strings, which are t's) and empties
 * the alias list. */
void lp_nodeclass_desc_release(lp_nodeclass_desc *d);

/* Pins t (a reference is kept) as the process's descriptor, checked on every later load; a second pin
 * replaces the first. A descriptor with a problem of its own (a field missing; not a table) is not
 * pinned and leaves the pin as it was: a mapping loaded without validation does not hold later loads
 * to its gaps. lp_nodeclass_desc_unpin(t) drops the pin when t is the pinned value. */
void lp_nodeclass_desc_pin(json_t *t);
void lp_nodeclass_desc_unpin(const json_t *t);

#endif

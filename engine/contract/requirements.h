/* Karpenter scheduling requirements and resource quantities, on JSON values (the shapes of the
 * NodeClaim spec and of GetInstanceTypes). Pure functions; no Lua, no I/O.
 *
 * A requirement is {"key", "operator", "values"} with operator In, NotIn, Exists, DoesNotExist, Gt,
 * Lt, Gte or Lte (the last four take one non-negative integer). Two lists are compatible when every
 * key both define has values in common, as Karpenter's Requirements.Compatible does (two negative
 * operators, NotIn/DoesNotExist, always agree); keys defined on one side only do not constrain. */
#ifndef LUAPROV_CONTRACT_REQUIREMENTS_H
#define LUAPROV_CONTRACT_REQUIREMENTS_H

#include <jansson.h>

/* Non-zero when the requirement lists a and b (JSON arrays; NULL = none) are compatible. When they
 * are not and why is not NULL, *why gets a malloc'd explanation ("topology.kubernetes.io/zone: In
 * [zone-c] has nothing in common with In [zone-a zone-b]"). */
int lp_requirements_compatible(const json_t *a, const json_t *b, char **why);

/* Non-zero when value (NULL = the label is absent) satisfies one requirement. */
int lp_requirement_allows(const json_t *requirement, const char *value);

/* Reads text as Gt, Lt, Gte and Lte read a value: a base-10 integer and nothing after it. Returns 0 and
 * stores it, or -1 (NULL, empty, anything else). */
int lp_requirement_integer(const char *text, long long *out);

/* Parses a Kubernetes quantity ("1500m", "3Gi", "4", "100M", "1e3", "0.5") into a number of base
 * units. Returns 0 and stores it, or -1 for anything else. */
int lp_quantity_parse(const char *text, double *out);

/* Writes v as Kubernetes prints a quantity into out (cap bytes): a whole number in the largest binary
 * unit that divides it ("1536Mi") when binary is set, else as is ("110"); a fraction in millis,
 * rounded up ("1500m": a request must not shrink). */
void lp_quantity_format(double v, int binary, char *out, size_t cap);

/* Non-zero when every request in requests ({"cpu": "1500m", ...}; NULL = none) fits in capacity
 * minus the overhead ({"kube_reserved": {...}, "system_reserved": {...}, "eviction_threshold": {...}};
 * NULL = none). A resource the type does not have fits only a zero request. When it does not fit and
 * why is not NULL, *why names the first resource that does not. */
int lp_resources_fit(const json_t *requests, const json_t *capacity, const json_t *overhead, char **why);

/* The conjunction of the requirement lists a and b (NULL = none), one entry per key where one says it
 * all: an In list narrowed by every other requirement on its key, NotIn lists merged, Exists dropped
 * beside anything narrower; numeric bounds become Gt and Lt entries. Returns a new list, or NULL when
 * some key can take no value; then *why (when why is not NULL) gets a malloc'd explanation
 * ("kubernetes.io/arch: no value satisfies In [amd64] and In [arm64]"). requirements_merge.c. */
json_t *lp_requirements_intersect(const json_t *a, const json_t *b, char **why);

/* A requirement list compiled for repeated lp_reqs_compatible checks (requirements_compiled.c): the
 * same answers as lp_requirements_compatible on the list, without walking JSON per check. */
typedef struct lp_reqs lp_reqs;

/* Compiles list (a JSON array; NULL = none). The result keeps a reference to list and borrows its
 * strings: list must not be modified while it lives. Never NULL; free with lp_reqs_free. */
lp_reqs *lp_reqs_compile(const json_t *list);
/* Frees r (NULL is fine) and drops its reference to the list. */
void lp_reqs_free(lp_reqs *r);
/* The list r was compiled from (borrowed), or NULL. */
const json_t *lp_reqs_json(const lp_reqs *r);
/* lp_requirements_compatible(the list of a, the list of b, NULL); NULL stands for no requirement. */
int lp_reqs_compatible(const lp_reqs *a, const lp_reqs *b);

#endif

/* Shared by the provisioner's files: provisioner.c (triggers, batching, the pass and its nominations),
 * provisioner_resources.c (resource vectors), provisioner_pods.c (what a pod asks for: requests, node
 * requirement terms and preferences, tolerations, host ports),
 * provisioner_capacity.c (existing capacity: Ready nodes and in-flight NodeClaims; NodePools, their
 * limits, minValues and DaemonSet overhead), provisioner_schedule.c (packing pods into new NodeClaims),
 * provisioner_topology.c (pod affinity, anti-affinity and topology spread counted over the pass's
 * places; called by capacity and schedule, calls neither),
 * provisioner_create.c (the NodeClaim objects and their creation) and provisioner_inflight.c (the
 * NodeClaims created and not cached yet: names, lost answers, checks by name).
 *
 * One pass is one pv_pass: the pods to place, the capacity they may use, the NodePools with their
 * instance types, and the new NodeClaims computed. Everything but the checks by name, the instance
 * types and the NodeClaim POSTs is synchronous.
 *
 * Packing checks requirements thousands of times (a NodeClaim's against every option and its
 * offerings, per pod), so what it checks is compiled once (lp_reqs, contract/requirements.h): each
 * pool type's requirements and offerings in pv_pool_set_types, the offerings' requirement lists shared
 * (a handful per pool: zone x capacity type) so one check answers for every offering with that list,
 * and a NodeClaim's requirements each time a pod narrows them.
 *
 * The consolidation simulation (disruption_simulate.c) runs passes of its own over these functions, with
 * pv_pass.st NULL: nothing on its way, nothing nominated, no event recorded. The dependency is one way:
 * no provisioner file calls the simulation.
 * Loop thread only. */
#ifndef LUAPROV_CONTROLLER_PROVISIONER_INTERNAL_H
#define LUAPROV_CONTROLLER_PROVISIONER_INTERNAL_H

#include <jansson.h>
#include <uv.h>

#include "contract/requirements.h"
#include "controller/controller.h"
#include "core/buf.h"
#include "core/metrics.h"

#define PV_LABEL_NODEPOOL "karpenter.sh/nodepool"
/* Karpenter's MaxInstanceTypes before v1.7: the options a NodeClaim keeps, cheapest first. */
#define PV_MAX_INSTANCE_TYPES 60

/* ---- resource vectors ----------------------------------------------------------------------- */

/* Resources a pass tracks: cpu, memory and pods first, then any other name met, up to PV_RES_MAX. */
#define PV_RES_MAX 12
enum { PV_CPU = 0, PV_MEMORY = 1, PV_PODS = 2 };

typedef struct pv_res {
  double v[PV_RES_MAX]; /* base units: cores, bytes, pods, ... */
} pv_res;

typedef struct pv_dims {
  size_t n;
  char *name[PV_RES_MAX];
} pv_dims;

void pv_dims_init(pv_dims *d);
void pv_dims_free(pv_dims *d);
/* The index of resource name, added when new; -1 past PV_RES_MAX names. */
int pv_dim(pv_dims *d, const char *name);
/* Adds factor times every quantity of list ({"cpu": "500m", ...}; NULL = none) to r. A resource past
 * PV_RES_MAX distinct names is ignored. */
void pv_res_add_list(pv_dims *d, pv_res *r, const json_t *list, double factor);
/* Non-zero when want fits in have on every resource want asks for. */
int pv_res_fits(const pv_dims *d, const pv_res *want, const pv_res *have);
/* r + s, per resource. */
pv_res pv_res_sum(const pv_res *r, const pv_res *s);
/* {"cpu": "1500m", "memory": "2Gi", "pods": "3"} of the non-zero resources of r; new reference. */
json_t *pv_res_to_list(const pv_dims *d, const pv_res *r);
/* "cpu: requested 2, allocatable 1.9": the first resource of want that have lacks, malloc'd. */
char *pv_res_shortfall(const pv_dims *d, const pv_res *want, const pv_res *have);

/* ---- pods (provisioner_pods.c) -------------------------------------------------------------- */

/* A pod the scheduler could not place that a new node could: not bound, not being deleted, not
 * preempting (status.nominatedNodeName), not a DaemonSet's or a Node's (mirror) pod, and
 * PodScheduled=False with reason Unschedulable. */
int pv_pod_provisionable(const json_t *pod);
/* A pod bound to a node that would have to move if the node went: not finished (Succeeded, Failed),
 * not being deleted, not a DaemonSet's, not a mirror pod (annotation kubernetes.io/config.mirror, or
 * owned by a Node). */
int pv_pod_reschedulable(const json_t *pod);
/* "namespace/name", malloc'd. */
char *pv_pod_key(const json_t *pod);
/* What a pod of spec asks for: the sum of its containers' requests (a limit stands for a missing
 * request), or its largest init container when that is more, plus spec.overhead, plus one pod. */
void pv_pod_requests(pv_dims *d, const json_t *spec, pv_res *out);
/* The node requirements of a pod spec: nodeSelector as In requirements and the first term of its
 * required node affinity, deprecated beta label keys normalized. New list, or NULL when the pod has
 * none. (What a DaemonSet's pod needs; a pending pod's alternatives are pv_pod_requirement_terms.) */
json_t *pv_pod_requirements(const json_t *spec);
/* The alternatives a pod spec's node requirements allow: one list per term of its required node
 * affinity (the terms are ORed), each with the nodeSelector, or the nodeSelector alone when there is
 * no term. New array of lists, or NULL when the pod requires nothing. */
json_t *pv_pod_requirement_terms(const json_t *spec);
/* The requirements of each preferred node-affinity term, heaviest weight first (equal weights keep
 * their order). New array of lists, or NULL when there is none. */
json_t *pv_pod_preferences(const json_t *spec);
/* Non-zero when tolerations (a pod spec's list; NULL = none) tolerate every NoSchedule and NoExecute
 * taint of taints. Otherwise *untolerated (may be NULL) gets the first taint that is not. */
int pv_tolerates(const json_t *tolerations, const json_t *taints, const json_t **untolerated);
/* The first key a positive requirement of reqs names (NotIn and DoesNotExist hold for an absent
 * label) that the requirement list defined does not define, the set known (may be NULL) does not hold
 * and, with allow_well_known, is not a well-known label (lp_label_well_known); or NULL. Karpenter: "label X
 * does not have known values". */
const char *pv_undefined_key(const json_t *reqs, const json_t *defined, const json_t *known,
                             int allow_well_known);
/* Non-zero when labels (a node's) satisfy every requirement of reqs (NULL = none). */
int pv_labels_satisfy(const json_t *labels, const json_t *reqs);
/* "key=value:Effect" of a taint, malloc'd. */
char *pv_taint_text(const json_t *taint);

/* A host port a pod asks for: a container port with hostPort set. */
typedef struct pv_port {
  int port;
  char protocol[8]; /* TCP (the default), UDP, SCTP */
  char ip[48];      /* hostIP; "" = every address */
} pv_port;

typedef struct pv_ports {
  pv_port *v;
  size_t n, cap;
} pv_ports;

/* Appends the host ports of a pod spec's containers to out. */
void pv_ports_of(const json_t *spec, pv_ports *out);
/* Appends every port of from to to. */
void pv_ports_add(pv_ports *to, const pv_ports *from);
/* The first port of want that one of used holds already (same port and protocol, addresses that
 * overlap: equal, or either is every address), or NULL. */
const pv_port *pv_ports_clash(const pv_ports *used, const pv_ports *want);
void pv_ports_free(pv_ports *ports);

/* ---- topology terms ------------------------------------------------------------------------- */

enum { PV_TOPO_AFFINITY, PV_TOPO_ANTI, PV_TOPO_SPREAD };

/* One distinct pod (anti-)affinity term or spread constraint of the pass's pods, and the pods matching
 * its selector per domain (provisioner_topology.c). */
typedef struct pv_group {
  int kind;           /* PV_TOPO_* */
  char *key;          /* topologyKey */
  json_t *selector;   /* labelSelector as requirements (own); NULL matches nothing */
  json_t *namespaces; /* the namespaces whose pods count: name -> true (own) */
  int max_skew, min_domains;
  json_t *counts;   /* domain -> matching pods there */
  json_t *owners;   /* anti-affinity: domain -> pods carrying the term there */
  json_int_t total; /* matching pods counted in some domain */
} pv_group;

/* A term of one pod: its group, and whether it is hard (required, DoNotSchedule) or a preference
 * (ScheduleAnyway). */
typedef struct pv_term {
  size_t group;
  int hard;
} pv_term;

/* Where a pod is (or would be) placed, as topology sees it. */
typedef struct pv_site {
  const char *host;     /* its kubernetes.io/hostname domain: a node's name, a NodeClaim's */
  const json_t *labels; /* a node's labels, or NULL */
  const json_t *reqs;   /* otherwise a NodeClaim's requirements: a key with one In value is pinned */
  int fresh;            /* a new NodeClaim: a key its requirements leave open may take any known domain */
} pv_site;

/* ---- the pass ------------------------------------------------------------------------------- */

typedef struct pv_pod {
  char *key;   /* "namespace/name" */
  json_t *obj; /* own reference */
  pv_res requests;
  json_t *terms; /* pv_pod_requirement_terms (own), or NULL: existing capacity takes any that fits */
  json_t *prefs; /* pv_pod_preferences (own), or NULL */
  json_t *reqs;  /* the requirements of the current attempt (own; pv_pod_attempt), or NULL: none */
  const json_t *tolerations;
  pv_ports ports; /* its host ports */
  pv_term *topo;  /* its pod (anti-)affinity terms and spread constraints (provisioner_topology.c) */
  size_t ntopo, nsoft;
  size_t soft_kept;  /* the current attempt keeps its first soft_kept soft terms (pv_topology_pod) */
  double created;    /* creationTimestamp, epoch seconds */
  char *why;         /* set when no NodePool can take it */
  int placed;        /* on existing capacity, or on a new NodeClaim */
  const char *claim; /* the in-flight NodeClaim it was placed on (its bin's name), or NULL */
} pv_pod;

/* One offering of an instance type, read once (pv_pool_set_types). */
typedef struct pv_offer {
  const json_t *obj;   /* borrowed, like its type's */
  const lp_reqs *reqs; /* its requirements, compiled: its pool's offer_reqs[group] */
  size_t group;
  const char *capacity_type; /* or NULL */
  double price;              /* meaningful when priced */
  int priced, available;
} pv_offer;

/* One instance type of GetInstanceTypes (the shape `luaprov eval instance-types` prints). */
typedef struct pv_type {
  const json_t *obj; /* borrowed from the pass's lists of types */
  const char *name;
  pv_res capacity, allocatable; /* allocatable = capacity - kube_reserved - system_reserved - eviction */
  lp_reqs *reqs;                /* its requirements, compiled (own) */
  pv_offer *offers;             /* its offerings, in order (own) */
  size_t noffers;
} pv_type;

typedef struct pv_pool {
  const char *name;
  json_t *obj;           /* own reference */
  char *nodeclass;       /* the key of its node class (lp_env_nodeclass_key) */
  const json_t *taints;  /* spec.template.spec.taints */
  json_t *reqs;          /* template requirements, template labels (In) and nodepool In [name]; NULL
                            when they contradict each other (skip_why says how) */
  lp_reqs *creqs;        /* reqs compiled (own; pv_pool_set_types), or NULL */
  json_t *provider_keys; /* every key an instance type defines: a pod may require these, keys of
                            reqs and well-known labels, and no other */
  pv_res daemon;         /* requests of the DaemonSet pods a node of this pool would run */
  pv_ports daemon_ports; /* and their host ports */
  pv_res limit;          /* spec.limits (limited[i] says which) */
  int limited[PV_RES_MAX];
  double node_limit; /* spec.limits.nodes, or < 0 */
  pv_res used;       /* capacity of the pool's NodeClaims */
  double nodes_used;
  json_t *min_values; /* [{"key", "minValues"}] of the template requirements that set it (own), or NULL */
  pv_type *types;     /* the nodeclass's instance types compatible with reqs */
  size_t ntypes;
  lp_reqs **offer_reqs; /* the distinct requirement lists of their offerings (a handful: zone x capacity
                           type), compiled (own): a check under some requirements is made once per list */
  size_t noffer_reqs;
  char *skip_why; /* set: the pool takes no pod this pass */
} pv_pool;

/* A new NodeClaim being filled. */
typedef struct pv_claim {
  pv_pool *pool;
  json_t *reqs;    /* pool requirements narrowed by each pod's */
  lp_reqs *creqs;  /* reqs compiled (own), or NULL; compiled again when reqs was replaced */
  pv_res requests; /* the pods' sum (the pool's DaemonSet overhead comes on top) */
  pv_type **types; /* options that fit every pod so far */
  size_t ntypes;
  pv_res max_alloc; /* per resource, the largest allocatable among types: a quick "cannot fit" */
  pv_ports ports;   /* of its pods and of its pool's DaemonSet pods */
  char host[32];    /* its hostname domain for topology ("new-<index>") */
  size_t *pods;     /* indices into the pass's pods */
  size_t npods, cap;
  json_t *capacity_types; /* after pv_finalize: of the options' available compatible offerings */
  double cheapest_price;  /* after pv_finalize */
} pv_claim;

/* Capacity that exists or is on its way: a Ready node, or a NodeClaim not yet initialized. */
typedef struct pv_bin {
  const char *claim;    /* the in-flight NodeClaim (for nominations), or NULL for a node */
  const char *node;     /* the node's name (borrowed from the cache), or NULL for a NodeClaim */
  const json_t *labels; /* a node's labels */
  json_t *reqs;         /* a NodeClaim's requirements and labels (own), or NULL */
  const json_t *taints;
  pv_res free;
  pv_ports ports; /* host ports of the pods bound to it, nominated for it, or placed on it */
  char *host;     /* its hostname domain: the node's name, or the NodeClaim's node or name (own) */
} pv_bin;

/* The controller's state (state_new). */
typedef struct pv_state {
  uv_timer_t *batch_timer; /* ends the batch window; closed with the state */
  double batch_start;      /* monotonic time the open batch began; 0 = none open */
  json_t *pending;         /* keys of provisionable pods, as on_change saw them -> true */
  json_t *nominations;     /* pod key -> the NodeClaim name it should land on */
  json_t *created; /* NodeClaim name -> {"claim": object, "at": monotonic, "unconfirmed": bool}: created
                      (or being created) by this controller, not cached yet (provisioner_inflight.c) */
  lp_metric *duration, *created_total, *pods_pending, *unschedulable, *lost_answers;
} pv_state;

typedef struct pv_pass {
  lp_controller *c;
  lp_ctrl_env *env;
  pv_state *st; /* the provisioner's; NULL in a simulation (disruption_simulate.c) */
  const char *key;
  double started; /* lp_env_monotonic: the controllers' clock, which a test may move */
  pv_dims dims;
  pv_pod *pods;
  size_t npods;
  pv_bin *bins;
  size_t nbins;
  pv_pool *pools; /* by weight, then name */
  size_t npools;
  json_t *types; /* node class key -> its instance types (own) */
  size_t fetching;
  pv_claim *claims;
  size_t nclaims, claims_cap;
  size_t next_create, creating;
  size_t checking;  /* checks by name in flight (pv_inflight_check) */
  pv_group *groups; /* the topology terms of the pass's pods */
  size_t ngroups;
  json_t *domains;  /* topology key -> {value: true}: the domains known (own) */
  int pool_domains; /* the NodePools' domains are among them (pv_topology_add_pool_domains) */
  lp_error *err;    /* the first failure; the pass ends with it and is retried */
} pv_pass;

/* ---- a pod of the pass (provisioner_pods.c) -------------------------------------------------- */

/* Fills pod from the Pod obj (a new reference is kept) under key: its requests, requirement terms and
 * preferences, tolerations and creation time, computed once; reqs is the first term. */
void pv_pod_init(pv_pass *p, pv_pod *pod, const char *key, json_t *obj);
void pv_pod_free(pv_pod *pod);
/* ANDs reqs (borrowed; a volume's zone, say) into every requirement term of the pod, so each of its
 * alternatives needs them too. After pv_pod_init. */
void pv_pod_require(pv_pod *pod, const json_t *reqs);
/* How many ways a new NodeClaim may take the pod, strictest first: with every preferred node-affinity
 * term and soft topology term, each required term in turn; then the same with the
 * lightest preference dropped, and so on; then dropping the soft topology terms one at a time (the last
 * first: pv_topology_pod), until no preference is left. */
size_t pv_pod_attempts(const pv_pod *pod);
/* Sets pod->reqs and pod->soft_kept for attempt (< pv_pod_attempts). Returns 0 when that attempt's
 * requirements contradict each other (a preference against its term): nothing can take the pod that way. */
int pv_pod_attempt(pv_pod *pod, size_t attempt);

/* ---- provisioner.c -------------------------------------------------------------------------- */

/* Records that the pod should land on the NodeClaim name (in memory) and says so in a Nominated
 * event on the pod. */
void pv_nominate(pv_pass *p, const pv_pod *pod, const char *claim);
/* The creations are over: the pass ends. */
void pv_finish(pv_pass *p);

/* ---- provisioner_capacity.c ----------------------------------------------------------------- */

/* The pass's bins: Ready schedulable nodes not backing an in-flight NodeClaim (free = allocatable -
 * bound pods), and NodeClaims neither deleting nor initialized, the pass's own created ones included
 * (free = status.allocatable, else spec.resources.requests, minus the DaemonSet overhead of their pool
 * and the pods bound to or nominated for them). nominated: pod key -> NodeClaim name. */
void pv_collect_bins(pv_pass *p, const json_t *nominated);
/* Places each pod it can on a bin (pods sorted by size already); a pod placed on an in-flight
 * NodeClaim is nominated for it. Returns how many pods are left. */
size_t pv_place_on_bins(pv_pass *p);
/* The pass's NodePools, by weight then name, each with its requirements, DaemonSet overhead and limit
 * usage; pools whose node class is missing or not Ready, or that are deleting, are left out (logged at
 * debug), pools past their limits kept with skip_why. */
void pv_collect_pools(pv_pass *p);
/* Builds pool->types from types (the node class's list: those compatible with the pool's requirements
 * and with a compatible offering, available or not, each with its requirements and offerings compiled),
 * pool->creqs and provider_keys; when none is left, sets
 * skip_why and records a NoCompatibleInstanceTypes event on the NodePool. */
void pv_pool_set_types(pv_pass *p, pv_pool *pool, const json_t *types);
void pv_pools_free(pv_pass *p);
void pv_bins_free(pv_pass *p);

/* ---- provisioner_schedule.c ----------------------------------------------------------------- */

/* The price of offer (one of an instance type's, read by pv_pool_set_types) when it is available, priced
 * and compatible with reqs (compiled; NULL = none); < 0 otherwise: what a launch under reqs could land on. */
double pv_offer_price(const pv_offer *offer, const lp_reqs *reqs);
/* Sorts the pass's pods: cpu, then memory, descending; then oldest first; then by key. */
void pv_sort_pods(pv_pass *p);
/* Packs the pods not placed yet into new NodeClaims, first fit over the claims opened so far, else a
 * new one on the first NodePool that takes the pod; sets pod->why for the rest. */
void pv_schedule(pv_pass *p);
/* Orders each claim's options by their cheapest available compatible offering (then name), keeps the
 * first PV_MAX_INSTANCE_TYPES and notes the capacity types those offerings have. */
void pv_finalize(pv_pass *p);
void pv_claims_free(pv_pass *p);

/* ---- provisioner_topology.c: pod (anti-)affinity and topology spread ---------------------------- */

/* A labelSelector as requirements (matchLabels as In, matchExpressions as they are) for
 * pv_labels_satisfy: NULL for a null selector, which matches nothing; [] for {}, which matches
 * everything. New reference. */
json_t *pv_selector_requirements(const json_t *selector);

/* The field of each item of list (weighted preferred terms: [{"weight": w, field: term}]; NULL = none),
 * heaviest weight first, equal weights in their order; items without the field are left out. New array
 * of borrowed terms. */
json_t *pv_heaviest_first(const json_t *list, const char *field);
/* Adds the pod's pod affinity and anti-affinity terms and its topology spread constraints on
 * kubernetes.io/hostname, topology.kubernetes.io/zone and karpenter.sh/capacity-type to the pass's
 * groups (equal terms share one) and to pod->topo. Other keys are ignored. Required terms and
 * DoNotSchedule constraints are hard; ScheduleAnyway constraints, then preferred anti-affinity, then
 * preferred affinity terms (each heaviest first) are soft, in that order, so a pass drops the lightest
 * preferred affinity term first. A preferred anti-affinity term keeps the pod out of a domain, never
 * another pod. */
void pv_topology_pod(pv_pass *p, pv_pod *pod);
/* Counts the pods bound to nodes (not finished) in every group whose selector they match, adds their
 * own required anti-affinity terms (a pod matching one keeps out of its domain), and notes the domains
 * of the nodes. Once, after every pod of the pass is added (pv_collect_bins). */
void pv_topology_count(pv_pass *p);
/* Copies from's groups, with their counts and owners, and its domains (the pools' too, once noted)
 * into to (which owns them: pv_topology_free), for a pass over the same pods and pools (a consolidation
 * simulation's, which records its placements into its own counts). to has no groups before. */
void pv_topology_copy(pv_pass *to, const pv_pass *from);
/* Takes back what pv_topology_count counted for obj, a pod bound to node (its spec.nodeName's Node as
 * counted, or NULL when there was none): the pod leaves its node, as a consolidation candidate's do. */
void pv_topology_uncount(pv_pass *p, const json_t *obj, const json_t *node);
/* Notes the domains the NodePools' instance types offer and their requirements allow (after
 * pv_pool_set_types), once: a later call, or one on a pv_topology_copy of the pass, does nothing. */
void pv_topology_add_pool_domains(pv_pass *p);
/* Counts pod (of the pass), or obj (any pod, e.g. nominated for a launching NodeClaim), at site. */
void pv_topology_record(pv_pass *p, const pv_pod *pod, const pv_site *site);
void pv_topology_record_obj(pv_pass *p, const json_t *obj, const pv_site *site);
/* Non-zero when the pod's hard terms (and soft ones its attempt keeps) allow site, whose constrained
 * keys must be pinned (an existing node, a launching NodeClaim). */
int pv_topology_allows(const pv_pass *p, const pv_pod *pod, const pv_site *site);
/* For a NodeClaim at site (reqs: its requirements with the pod's): NULL when topology asks nothing;
 * otherwise the requirement lists to add, best first, each pinning one value of every constrained key
 * the site leaves open (new array; empty when none will do, and then why, when empty, gets the
 * constraint that failed: "topology spread constraint on topology.kubernetes.io/zone (maxSkew 1)
 * cannot be met"). */
json_t *pv_topology_options(const pv_pass *p, const pv_pod *pod, const pv_site *site, lp_buf *why);
/* The values type offers for key: those of its In requirement on key (its name for the instance-type
 * label), or NULL. */
const json_t *pv_type_values(const pv_type *type, const char *key);
void pv_topology_free(pv_pass *p);

/* ---- provisioner_create.c ------------------------------------------------------------------- */

/* POSTs every computed claim (a few at once), nominating its pods, then pv_finish. A create whose
 * answer says nothing of the object (pv_inflight_answer) is POSTed once more under the same name. */
void pv_create_claims(pv_pass *p);
/* The claim's requirements with its options: instance-type In [options], capacity-type In
 * [capacity_types]; new reference. */
json_t *pv_claim_requirements(const pv_claim *c);

/* ---- provisioner_inflight.c: NodeClaims created and not cached yet ------------------------------ */

/* A name for a new NodeClaim of pool (lp_env_nodeclaim_name), neither cached nor on its way. malloc'd. */
char *pv_claim_name(pv_pass *p, const char *pool);
/* Records obj (borrowed), about to be POSTed under name: from now on it counts as capacity
 * (pv_collect_bins) and against its pool's limits, until the cache shows it or a check drops it. */
void pv_inflight_add(pv_pass *p, const char *name, json_t *obj);

typedef enum {
  PV_STORED,      /* created, or AlreadyExists (an earlier try whose answer was lost stored it) */
  PV_UNCONFIRMED, /* no answer, or a server error: it may be stored; it stays on its way */
  PV_REFUSED      /* the API refused it: forgotten */
} pv_outcome;
/* What the answer to the create of name (retried: its second POST) says; the record follows it.
 * Logged when unanswered; luaprov_provisioner_lost_answers_total counts how such a creation settled. */
pv_outcome pv_inflight_answer(pv_pass *p, const char *name, const lp_kube_reply *reply, int retried);
/* Asks the API by name about every NodeClaim on its way that the cache has not shown a few seconds
 * after its creation or its last check: found, it keeps counting (the cache is behind); not found, it
 * is forgotten (it never landed, or was deleted unseen) and its pods are planned again. A failed check
 * keeps it and sets p->err. Then next(p). */
void pv_inflight_check(pv_pass *p, void (*next)(pv_pass *p));
/* When the pass should run again to check what is on its way (seconds), or 0 for nothing. */
double pv_inflight_requeue_s(const pv_pass *p);

#endif

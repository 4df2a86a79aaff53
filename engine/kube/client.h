/* A small asynchronous Kubernetes API client over lp_http_client: typed resource paths, get, paginated
 * list, create, delete, replace (PUT with a resourceVersion precondition), JSON merge patch (also on
 * /status) and a read-modify-write helper that retries on 409 Conflict. Objects are jansson values; nothing
 * here knows a resource's schema.
 *
 * Every call sends `Authorization: Bearer <token>` when the config has a token (re-read as it rotates,
 * see lp_kube_config_token) and uses the config's TLS material. Results arrive in a done callback on
 * the loop thread, never from inside the starting call. Errors (lp_kube_reply.error) carry a stable
 * code — the Kubernetes Status reason ("NotFound", "Conflict", "AlreadyExists", "Gone", "Forbidden",
 * ...; "HTTP<status>" when the body is no Status) or the HTTP client's transport code ("Timeout",
 * "ConnectFailed", "TLS", "Cancelled", ...) — and a message naming the verb, the path, the object
 * name, the HTTP status and the Status message:
 *   PATCH /apis/karpenter.sh/v1/nodeclaims/nc-1/status (nc-1): 409 Conflict: the object has been modified
 * Loop thread only. */
#ifndef LUAPROV_KUBE_CLIENT_H
#define LUAPROV_KUBE_CLIENT_H

#include <jansson.h>
#include <uv.h>

#include "core/error.h"
#include "http/client.h"
#include "kube/config.h"

typedef struct lp_kube_client lp_kube_client;

/* Names a resource or a collection. Strings are borrowed for the duration of the call only. */
typedef struct lp_kube_ref {
  const char *group;     /* NULL or "" for the core group ("/api/v1") */
  const char *version;   /* "v1" */
  const char *resource;  /* plural, lower case: "pods", "nodeclaims" */
  const char *namespace; /* NULL for cluster-scoped resources (or a list across namespaces) */
  const char *name;      /* NULL for the collection */
} lp_kube_ref;

/* What a call's done callback sees. Everything is borrowed: valid until done returns (json_incref
 * what you keep). */
typedef struct lp_kube_reply {
  long status;    /* HTTP status of the last answer; 0 when none arrived */
  json_t *object; /* the decoded answer on success (list: see lp_kube_list), else NULL */
  lp_error *error;
} lp_kube_reply;

typedef void (*lp_kube_done_fn)(const lp_kube_reply *reply, void *ud);

/* Non-zero when reply is a failure that says nothing about the object: no HTTP answer at all (a
 * timeout, a reset connection), a server error (the API server may have stored the object before
 * failing, or a proxy answered) or a success that could not be read. A write answered so may have
 * taken effect: a create may have stored its object, which only a GET (or a POST of the same name,
 * answering AlreadyExists) can tell. 0 for a success and for any other error (a 4xx: not done). */
int lp_kube_reply_unconfirmed(const lp_kube_reply *reply);

/* Builds the API path of a resource: "/api/v1/namespaces/ns/pods/x", "/apis/karpenter.sh/v1/nodeclaims/x",
 * and with subresource ("status") "/apis/karpenter.sh/v1/nodeclaims/x/status". NULL or "" parts are
 * left out (namespace, name, subresource; group means the core group). The caller frees the string. */
char *lp_kube_path(const char *group, const char *version, const char *resource, const char *namespace,
                   const char *name, const char *subresource);

/* Creates a client for cfg, which is borrowed and must outlive the client. http_opts may be NULL; its
 * TLS fields are replaced by the config's, and max_per_host 0 means LP_KUBE_MAX_CONNECTIONS. Returns NULL
 * with err (the HTTP client's error). */
lp_kube_client *lp_kube_client_new(uv_loop_t *loop, lp_kube_config *cfg,
                                   const lp_http_client_options *http_opts, lp_error **err);

/* The underlying HTTP client (watches use it); owned by c. */
lp_http_client *lp_kube_client_http(lp_kube_client *c);
lp_kube_config *lp_kube_client_config(lp_kube_client *c);
uv_loop_t *lp_kube_client_loop(lp_kube_client *c);

/* Cancels calls in flight (their done callbacks run with "Cancelled"), then frees c and calls on_closed
 * (may be NULL). Stop watches on c before closing it. */
void lp_kube_client_close(lp_kube_client *c, void (*on_closed)(void *ud), void *ud);

/* GET ref (name required). reply.object is the object. */
void lp_kube_get(lp_kube_client *c, const lp_kube_ref *ref, lp_kube_done_fn done, void *ud);

/* Lists ref's collection page by page (limit=500, continue=TOKEN). query (may be NULL) is appended as is
 * ("labelSelector=a%3Db"). A 410 Gone on a continue token (the snapshot expired) restarts the list once.
 * reply.object is {"metadata":{"resourceVersion":RV},"items":[...all pages...]}. */
void lp_kube_list(lp_kube_client *c, const lp_kube_ref *ref, const char *query, lp_kube_done_fn done,
                  void *ud);

/* POST obj (borrowed) to ref's collection (ref->name ignored). reply.object is the created object. */
void lp_kube_create(lp_kube_client *c, const lp_kube_ref *ref, json_t *obj, lp_kube_done_fn done, void *ud);

/* DELETE ref; with resource_version (may be NULL) sends preconditions.resourceVersion, so the server
 * answers 409 Conflict when the object changed. reply.object is the server's answer (Status or object). */
void lp_kube_delete(lp_kube_client *c, const lp_kube_ref *ref, const char *resource_version,
                    lp_kube_done_fn done, void *ud);

/* DELETE ref with options (borrowed; may be NULL) as the DeleteOptions body: gracePeriodSeconds,
 * preconditions.uid, propagationPolicy. reply.object is the server's answer. */
void lp_kube_delete_with(lp_kube_client *c, const lp_kube_ref *ref, const json_t *options,
                         lp_kube_done_fn done, void *ud);

/* PATCH ref (or its subresource, e.g. "status"; may be NULL) with patch (borrowed) as
 * application/merge-patch+json. reply.object is the patched object. */
void lp_kube_merge_patch(lp_kube_client *c, const lp_kube_ref *ref, const char *subresource, json_t *patch,
                         lp_kube_done_fn done, void *ud);

/* PUT obj (borrowed) to ref (name required): replaces the whole object. When obj carries
 * metadata.resourceVersion the server applies it only if the stored object still has that version and
 * otherwise answers 409 Conflict (error code "Conflict"), which is delivered as is: no retry, the caller
 * decides (leader election counts it as "another candidate won this round"). reply.object is the
 * stored object with its new resourceVersion. */
void lp_kube_replace(lp_kube_client *c, const lp_kube_ref *ref, json_t *obj, lp_kube_done_fn done, void *ud);

/* Builds a merge patch from the current object (borrowed). Returns a new reference; NULL without *err
 * means "nothing to change" (done then gets the current object), NULL with *err fails the update. */
typedef json_t *(*lp_kube_mutate_fn)(const json_t *current, void *ud, lp_error **err);

/* Read-modify-write with optimistic concurrency: GET ref (subresource too, when given), run mutate,
 * merge-patch the result with metadata.resourceVersion set to the object's, and on 409 Conflict start
 * again from a fresh GET, at most 5 attempts in all (then the Conflict error is delivered). mutate runs
 * once per attempt with ud; done gets the patched object. */
void lp_kube_update(lp_kube_client *c, const lp_kube_ref *ref, const char *subresource,
                    lp_kube_mutate_fn mutate, lp_kube_done_fn done, void *ud);

#define LP_KUBE_UPDATE_ATTEMPTS 5
#define LP_KUBE_MAX_CONNECTIONS 128 /* per API server; watches over HTTP/1.1 hold one each */
#define LP_KUBE_LIST_LIMIT      500

#endif

/* Shared by client.c, watch.c and informer.c; not part of the public API. */
#ifndef LUAPROV_KUBE_INTERNAL_H
#define LUAPROV_KUBE_INTERNAL_H

#include "core/buf.h"
#include "kube/client.h"

/* Appends s percent-encoded for a query value (RFC 3986 unreserved characters kept). */
void lp_kube__query_escape(lp_buf *b, const char *s);

/* Fills headers[0..] with Accept, and Authorization when the config has a token; returns the count.
 * The strings live in auth (caller frees with free). headers must hold 3 entries. */
size_t lp_kube__headers(lp_kube_client *c, lp_http_header *headers, char **auth);

/* The error for a failed answer: transport error, or a non-2xx status with its Status body. */
lp_error *lp_kube__error(const char *verb, const char *path, const char *name, const lp_http_result *r,
                         json_t *body);

/* 401 Unauthorized or 403 Forbidden: the credentials or their RBAC, not the request, are wrong. Such an
 * answer is logged once per cause by lp_kube__note_answer, so the lines every retry would log are
 * debug only. */
#define LP_KUBE_DENIED(status) ((status) == 401 || (status) == 403)

/* Notes the answer r (body: its decoded JSON, may be NULL) to a request of api_verb ("get", "list",
 * "watch", "create", "update", "patch", "delete": what RBAC rules name) on path. A 401 or 403 is
 * logged at warn (logger engine.kube, "API request denied": verb, path, status, reason and the
 * server's Status message; never a header) the first time its cause is seen on c; the cause is the
 * status, the verb and the path with its namespace and name left out ("/api/v1/namespaces/{namespace}/
 * pods/{name}/eviction"), so a watch or a Lease retried every second logs one line, and another
 * resource or verb logs its own. A 2xx answer for the same verb and path forgets the cause: a denial
 * that comes back after it was fixed is logged again. */
void lp_kube__note_answer(lp_kube_client *c, const char *api_verb, const char *path, const lp_http_result *r,
                          json_t *body);

#endif

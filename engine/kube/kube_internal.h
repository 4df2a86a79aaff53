/* Shared by client.c and watch.c; not part of the public API. */
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

#endif

/* The Kubernetes API client (see client.h). One kube_call per public call; list and update run several
 * HTTP requests in sequence on the same kube_call. */
#include "kube/client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/log.h"
#include "http/server.h"
#include "kube/kube_internal.h"

struct lp_kube_client {
  uv_loop_t *loop;
  lp_kube_config *cfg;
  lp_http_client *http;
  json_t *denied; /* causes of 401/403 answers already logged ("403 patch /apis/.../{name}") -> true */
  void (*on_closed)(void *ud);
  void *on_closed_ud;
};

typedef enum { OP_GET, OP_LIST, OP_CREATE, OP_DELETE, OP_PATCH, OP_UPDATE, OP_REPLACE } op_kind;

typedef struct kube_call {
  lp_kube_client *c;
  op_kind op;
  char *path; /* without query */
  char *name; /* for messages; may be NULL */
  char *query;
  lp_kube_done_fn done;
  void *ud;
  /* list */
  json_t *items;
  char *cont;
  int restarted;
  /* update */
  lp_kube_mutate_fn mutate;
  int attempts;
  int patching; /* the update's current step: 0 GET, 1 PATCH */
} kube_call;

/* ---- helpers shared with watch.c ---- */

void lp_kube__query_escape(lp_buf *b, const char *s) {
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' ||
        ch == '.' || ch == '_' || ch == '~')
      lp_buf_putc(b, (char)ch);
    else
      lp_buf_printf(b, "%%%02X", ch);
  }
}

size_t lp_kube__headers(lp_kube_client *c, lp_http_header *headers, char **auth) {
  size_t n = 0;
  headers[n++] = (lp_http_header){"Accept", "application/json"};
  const char *token = lp_kube_config_token(c->cfg);
  *auth = token ? lp_xasprintf("Bearer %s", token) : NULL;
  if (*auth) headers[n++] = (lp_http_header){"Authorization", *auth};
  return n;
}

lp_error *lp_kube__error(const char *verb, const char *path, const char *name, const lp_http_result *r,
                         json_t *body) {
  const char *nm = name ? name : "-";
  if (r->error) return lp_error_new(r->error->code, "%s %s (%s): %s", verb, path, nm, r->error->message);
  const char *reason = NULL, *message = NULL;
  if (json_is_object(body) && json_is_string(json_object_get(body, "kind")) &&
      strcmp(json_string_value(json_object_get(body, "kind")), "Status") == 0) {
    reason = json_string_value(json_object_get(body, "reason"));
    message = json_string_value(json_object_get(body, "message"));
  }
  char fallback[32];
  snprintf(fallback, sizeof fallback, "HTTP%ld", r->status);
  return lp_error_new(reason && *reason ? reason : fallback, "%s %s (%s): %ld %s: %s", verb, path, nm,
                      r->status, lp_http_status_text((int)r->status),
                      message ? message : "no Status in the answer");
}

/* path with its namespace and object name replaced by placeholders: what RBAC grants on. */
static void path_template(lp_buf *out, const char *path) {
  const char *seg[16];
  size_t len[16], n = 0;
  for (const char *p = path; *p && n < 16;) {
    while (*p == '/') p++;
    if (!*p) break;
    seg[n] = p;
    while (*p && *p != '/') p++;
    len[n] = (size_t)(p - seg[n]);
    n++;
  }
  /* "/api/v1/..." or "/apis/<group>/<version>/..." */
  size_t i = n > 0 && len[0] == 4 && strncmp(seg[0], "apis", 4) == 0 ? 3 : 2;
  if (i > n) i = n;
  for (size_t k = 0; k < i; k++) lp_buf_printf(out, "/%.*s", (int)len[k], seg[k]);
  int namespaced = n >= i + 3 && len[i] == 10 && strncmp(seg[i], "namespaces", 10) == 0;
  if (namespaced) {
    lp_buf_puts(out, "/namespaces/{namespace}");
    i += 2;
  }
  for (size_t k = i; k < n; k++) {
    if (k == i + 1) /* after the resource: the object's name; what follows is a subresource */
      lp_buf_puts(out, "/{name}");
    else
      lp_buf_printf(out, "/%.*s", (int)len[k], seg[k]);
  }
}

void lp_kube__note_answer(lp_kube_client *c, const char *api_verb, const char *path, const lp_http_result *r,
                          json_t *body) {
  int denied = !r->error && LP_KUBE_DENIED(r->status);
  int ok = !r->error && r->status / 100 == 2;
  if (!denied && !(ok && json_object_size(c->denied) > 0)) return;
  lp_buf key = LP_BUF_INIT;
  lp_buf_printf(&key, "%s ", api_verb);
  path_template(&key, path);
  if (ok) {
    json_object_del(c->denied, lp_buf_cstr(&key)); /* every status of this verb and path */
    lp_buf_free(&key);
    return;
  }
  json_t *statuses = json_object_get(c->denied, lp_buf_cstr(&key));
  if (!statuses) json_object_set_new(c->denied, lp_buf_cstr(&key), statuses = json_object());
  char status[8];
  snprintf(status, sizeof status, "%ld", r->status);
  if (!json_object_get(statuses, status)) {
    json_object_set_new(statuses, status, json_true());
    const char *reason = NULL, *message = NULL;
    if (json_is_object(body)) {
      reason = json_string_value(json_object_get(body, "reason"));
      message = json_string_value(json_object_get(body, "message"));
    }
    lp_warn("engine.kube", "API request denied", LPF_STR("verb", api_verb), LPF_STR("path", path),
            LPF_INT("status", r->status),
            LPF_STR("reason", reason ? reason : lp_http_status_text((int)r->status)),
            LPF_STR("message", message ? message : ""),
            LPF_STR("hint", r->status == 401 ? "the API server rejects the credentials: check the token or "
                                               "client certificate in use"
                                             : "the credentials lack this permission: check the RBAC rules "
                                               "(examples/deploy/rbac.yaml)"));
  }
  lp_buf_free(&key);
}

/* ---- paths ---- */

char *lp_kube_path(const char *group, const char *version, const char *resource, const char *namespace,
                   const char *name, const char *subresource) {
  lp_buf b = LP_BUF_INIT;
  if (group && *group)
    lp_buf_printf(&b, "/apis/%s/%s", group, version);
  else
    lp_buf_printf(&b, "/api/%s", version);
  if (namespace && *namespace) lp_buf_printf(&b, "/namespaces/%s", namespace);
  lp_buf_printf(&b, "/%s", resource);
  if (name && *name) {
    lp_buf_printf(&b, "/%s", name);
    if (subresource && *subresource) lp_buf_printf(&b, "/%s", subresource);
  }
  return lp_buf_take(&b, NULL);
}

static char *ref_path(const lp_kube_ref *ref, int with_name, const char *subresource) {
  return lp_kube_path(ref->group, ref->version, ref->resource, ref->namespace, with_name ? ref->name : NULL,
                      subresource);
}

/* ---- client ---- */

lp_kube_client *lp_kube_client_new(uv_loop_t *loop, lp_kube_config *cfg,
                                   const lp_http_client_options *http_opts, lp_error **err) {
  lp_http_client_options o = {0};
  if (http_opts) o = *http_opts;
  /* Over HTTP/1.1 every watch holds a connection for minutes; the HTTP client's default of 16 per host
   * would leave a controller's few informers, its workers and the leader's renewals queueing behind
   * each other (a renewal stuck in that queue costs the lease). Over HTTP/2 they share one. */
  if (!o.max_per_host) o.max_per_host = LP_KUBE_MAX_CONNECTIONS;
  o.ca_file = cfg->ca_file;
  o.client_cert_file = cfg->client_cert_file;
  o.client_key_file = cfg->client_key_file;
  o.insecure_skip_verify = cfg->insecure_skip_verify;
  lp_http_client *http = lp_http_client_new(loop, &o, err);
  if (!http) return NULL;
  lp_kube_client *c = lp_xcalloc(1, sizeof *c);
  c->loop = loop;
  c->cfg = cfg;
  c->http = http;
  c->denied = json_object();
  return c;
}

lp_http_client *lp_kube_client_http(lp_kube_client *c) {
  return c->http;
}

uv_loop_t *lp_kube_client_loop(lp_kube_client *c) {
  return c->loop;
}

lp_kube_config *lp_kube_client_config(lp_kube_client *c) {
  return c->cfg;
}

static void on_http_closed(void *ud) {
  lp_kube_client *c = ud;
  void (*cb)(void *) = c->on_closed;
  void *cb_ud = c->on_closed_ud;
  json_decref(c->denied);
  free(c);
  if (cb) cb(cb_ud);
}

void lp_kube_client_close(lp_kube_client *c, void (*on_closed)(void *ud), void *ud) {
  c->on_closed = on_closed;
  c->on_closed_ud = ud;
  lp_http_client_close(c->http, on_http_closed, c);
}

/* ---- calls ---- */

static void call_free(kube_call *k) {
  free(k->path);
  free(k->name);
  free(k->query);
  free(k->cont);
  json_decref(k->items);
  free(k);
}

static void finish(kube_call *k, long status, json_t *object, lp_error *error) {
  lp_kube_reply reply = {.status = status, .object = error ? NULL : object, .error = error};
  k->done(&reply, k->ud);
  lp_error_free(error);
  call_free(k);
}

int lp_kube_reply_unconfirmed(const lp_kube_reply *reply) {
  long status = reply->status;
  return reply->error && (status == 0 || status >= 500 || (status >= 200 && status < 300));
}

static void on_http_done(lp_http_result *r, void *ud);

static const char *verb_of(kube_call *k) {
  switch (k->op) {
  case OP_GET:
  case OP_LIST:
    return "GET";
  case OP_CREATE:
    return "POST";
  case OP_DELETE:
    return "DELETE";
  case OP_PATCH:
    return "PATCH";
  case OP_REPLACE:
    return "PUT";
  case OP_UPDATE:
    return k->patching ? "PATCH" : "GET";
  }
  return "GET";
}

/* The verb RBAC names for the call's current request. */
static const char *api_verb_of(kube_call *k) {
  switch (k->op) {
  case OP_GET:
    return "get";
  case OP_LIST:
    return "list";
  case OP_CREATE:
    return "create";
  case OP_DELETE:
    return "delete";
  case OP_PATCH:
    return "patch";
  case OP_REPLACE:
    return "update";
  case OP_UPDATE:
    return k->patching ? "patch" : "get";
  }
  return "get";
}

/* Sends the call's next request; body (borrowed, may be NULL) is serialized compactly. */
static void call_send(kube_call *k, const json_t *body, const char *content_type) {
  lp_buf url = LP_BUF_INIT;
  lp_buf_printf(&url, "%s%s", k->c->cfg->server, k->path);
  char sep = '?';
  if (k->op == OP_LIST) {
    lp_buf_printf(&url, "?limit=%d", LP_KUBE_LIST_LIMIT);
    sep = '&';
    if (k->cont) {
      lp_buf_puts(&url, "&continue=");
      lp_kube__query_escape(&url, k->cont);
    }
  }
  if (k->query && *k->query) lp_buf_printf(&url, "%c%s", sep, k->query);
  lp_http_header headers[3];
  char *auth;
  size_t n = lp_kube__headers(k->c, headers, &auth);
  if (body) headers[n++] = (lp_http_header){"Content-Type", (char *)content_type};
  char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  req.method = verb_of(k);
  req.url = lp_buf_cstr(&url);
  req.headers = headers;
  req.nheaders = n;
  req.body = text;
  req.body_len = text ? strlen(text) : 0;
  lp_http_client_request(k->c->http, &req, on_http_done, k);
  free(text);
  free(auth);
  lp_buf_free(&url);
}

static void list_step(kube_call *k, lp_http_result *r, json_t *body) {
  if (r->status == 410 && k->cont && !k->restarted) { /* the continue token expired: once from the start */
    k->restarted = 1;
    free(k->cont);
    k->cont = NULL;
    json_array_clear(k->items);
    call_send(k, NULL, NULL);
    return;
  }
  if (r->error || r->status / 100 != 2) {
    finish(k, r->status, NULL, lp_kube__error("GET", k->path, k->name, r, body));
    return;
  }
  json_t *items = json_object_get(body, "items");
  if (json_is_array(items)) json_array_extend(k->items, items);
  json_t *meta = json_object_get(body, "metadata");
  const char *cont = json_string_value(json_object_get(meta, "continue"));
  free(k->cont);
  k->cont = cont && *cont ? lp_xstrdup(cont) : NULL;
  if (k->cont) {
    call_send(k, NULL, NULL);
    return;
  }
  const char *rv = json_string_value(json_object_get(meta, "resourceVersion"));
  json_t *out = json_pack("{s:{s:s},s:O}", "metadata", "resourceVersion", rv ? rv : "", "items", k->items);
  finish(k, r->status, out, NULL);
  json_decref(out);
}

static void update_step(kube_call *k, lp_http_result *r, json_t *body) {
  int ok = !r->error && r->status / 100 == 2;
  if (k->patching && r->status == 409 && k->attempts < LP_KUBE_UPDATE_ATTEMPTS) {
    k->patching = 0; /* someone else wrote first: read again and re-run mutate */
    call_send(k, NULL, NULL);
    return;
  }
  if (!ok || k->patching) {
    finish(k, r->status, body, ok ? NULL : lp_kube__error(verb_of(k), k->path, k->name, r, body));
    return;
  }
  k->attempts++;
  lp_error *err = NULL;
  json_t *patch = k->mutate(body, k->ud, &err);
  if (!patch) {
    finish(k, r->status, body, err);
    return;
  }
  const char *rv = json_string_value(json_object_get(json_object_get(body, "metadata"), "resourceVersion"));
  json_t *meta = json_object_get(patch, "metadata");
  if (!json_is_object(meta)) {
    meta = json_object();
    json_object_set_new(patch, "metadata", meta);
  }
  if (rv) json_object_set_new(meta, "resourceVersion", json_string(rv));
  k->patching = 1;
  call_send(k, patch, "application/merge-patch+json");
  json_decref(patch);
}

static void on_http_done(lp_http_result *r, void *ud) {
  kube_call *k = ud;
  json_t *body = NULL;
  if (!r->error && r->body_len) body = json_loadb(r->body, r->body_len, 0, NULL);
  lp_kube__note_answer(k->c, api_verb_of(k), k->path, r, body);
  if (!r->error && r->status / 100 == 2 && !json_is_object(body)) {
    /* a 2xx answer that is no JSON object: the server (or a proxy) is not speaking the API */
    lp_error *e = lp_error_new("InvalidResponse", "%s %s (%s): %ld answer is not a JSON object", verb_of(k),
                               k->path, k->name ? k->name : "-", r->status);
    finish(k, r->status, NULL, e);
  } else if (k->op == OP_LIST) {
    list_step(k, r, body);
  } else if (k->op == OP_UPDATE) {
    update_step(k, r, body);
  } else {
    int ok = !r->error && r->status / 100 == 2;
    finish(k, r->status, body, ok ? NULL : lp_kube__error(verb_of(k), k->path, k->name, r, body));
  }
  json_decref(body);
  lp_http_result_free(r);
}

static kube_call *call_new(lp_kube_client *c, op_kind op, char *path, const char *name, lp_kube_done_fn done,
                           void *ud) {
  kube_call *k = lp_xcalloc(1, sizeof *k);
  k->c = c;
  k->op = op;
  k->path = path;
  k->name = name && *name ? lp_xstrdup(name) : NULL;
  k->done = done;
  k->ud = ud;
  return k;
}

void lp_kube_get(lp_kube_client *c, const lp_kube_ref *ref, lp_kube_done_fn done, void *ud) {
  call_send(call_new(c, OP_GET, ref_path(ref, 1, NULL), ref->name, done, ud), NULL, NULL);
}

void lp_kube_list(lp_kube_client *c, const lp_kube_ref *ref, const char *query, lp_kube_done_fn done,
                  void *ud) {
  kube_call *k = call_new(c, OP_LIST, ref_path(ref, 0, NULL), NULL, done, ud);
  k->query = query ? lp_xstrdup(query) : NULL;
  k->items = json_array();
  call_send(k, NULL, NULL);
}

void lp_kube_create(lp_kube_client *c, const lp_kube_ref *ref, json_t *obj, lp_kube_done_fn done, void *ud) {
  json_t *meta = json_object_get(obj, "metadata");
  const char *name = json_string_value(json_object_get(meta, "name"));
  if (!name) name = json_string_value(json_object_get(meta, "generateName"));
  call_send(call_new(c, OP_CREATE, ref_path(ref, 0, NULL), name, done, ud), obj, "application/json");
}

void lp_kube_delete(lp_kube_client *c, const lp_kube_ref *ref, const char *resource_version,
                    lp_kube_done_fn done, void *ud) {
  json_t *opts = NULL;
  if (resource_version)
    opts = json_pack("{s:s,s:s,s:{s:s}}", "apiVersion", "v1", "kind", "DeleteOptions", "preconditions",
                     "resourceVersion", resource_version);
  lp_kube_delete_with(c, ref, opts, done, ud);
  json_decref(opts);
}

void lp_kube_delete_with(lp_kube_client *c, const lp_kube_ref *ref, const json_t *options,
                         lp_kube_done_fn done, void *ud) {
  call_send(call_new(c, OP_DELETE, ref_path(ref, 1, NULL), ref->name, done, ud), options, "application/json");
}

void lp_kube_merge_patch(lp_kube_client *c, const lp_kube_ref *ref, const char *subresource, json_t *patch,
                         lp_kube_done_fn done, void *ud) {
  call_send(call_new(c, OP_PATCH, ref_path(ref, 1, subresource), ref->name, done, ud), patch,
            "application/merge-patch+json");
}

void lp_kube_replace(lp_kube_client *c, const lp_kube_ref *ref, json_t *obj, lp_kube_done_fn done, void *ud) {
  call_send(call_new(c, OP_REPLACE, ref_path(ref, 1, NULL), ref->name, done, ud), obj, "application/json");
}

void lp_kube_update(lp_kube_client *c, const lp_kube_ref *ref, const char *subresource,
                    lp_kube_mutate_fn mutate, lp_kube_done_fn done, void *ud) {
  kube_call *k = call_new(c, OP_UPDATE, ref_path(ref, 1, subresource), ref->name, done, ud);
  k->mutate = mutate;
  call_send(k, NULL, NULL);
}

#include "script/handler.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/log.h"

struct lp_script_handler {
  lp_script_host *host;
  char *module;
  char *function;
  char *service;
};

/* One request waiting for its task. The response may outlive the client (connection closed): then
 * res is NULL and the task's answer is dropped. */
typedef struct pending_request {
  lp_script_handler *handler;
  lp_http_response *res;
} pending_request;

lp_script_handler *lp_script_handler_new(lp_script_host *host, const char *module, const char *function,
                                         const char *service) {
  lp_script_handler *h = lp_xcalloc(1, sizeof *h);
  h->host = host;
  h->module = lp_xstrdup(module);
  h->function = lp_xstrdup(function);
  h->service = lp_xstrdup(service);
  return h;
}

void lp_script_handler_free(lp_script_handler *h) {
  if (!h) return;
  free(h->module);
  free(h->function);
  free(h->service);
  free(h);
}

static json_t *request_json(const lp_script_handler *h, const lp_http_request *req) {
  json_t *headers = json_object();
  for (size_t i = 0; i < req->nheaders; i++) {
    char *name = lp_xstrdup(req->headers[i].name);
    for (char *c = name; *c; c++) *c = (char)tolower((unsigned char)*c);
    json_t *prev = json_object_get(headers, name);
    if (prev) { /* repeated headers fold into one, comma-separated (RFC 9110 §5.3) */
      char *joined = lp_xasprintf("%s, %s", json_string_value(prev), req->headers[i].value);
      json_object_set_new(headers, name, json_string_nocheck(joined));
      free(joined);
    } else {
      json_object_set_new(headers, name, json_string_nocheck(req->headers[i].value));
    }
    free(name);
  }
  return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s#, s:s}", "service", h->service, "method", req->method,
                   "path", req->path, "query", req->query, "headers", headers, "body", req->body,
                   req->body_len, "remote", req->remote_addr ? req->remote_addr : "");
}

/* Written with lp_buf_json_string, which replaces invalid UTF-8 (a script's error text may hold any
 * bytes) instead of failing as jansson would. */
static void respond_error(lp_http_response *res, int status, const char *message) {
  lp_buf body = LP_BUF_INIT;
  lp_buf_puts(&body, "{\"error\":");
  lp_buf_json_string(&body, message, strlen(message));
  lp_buf_putc(&body, '}');
  lp_http_respond(res, status, "application/json", body.data, body.len);
  lp_buf_free(&body);
}

static void respond_with(lp_http_response *res, const lp_script_handler *h, const char *results) {
  json_error_t jerr;
  json_t *values = json_loads(results, 0, &jerr);
  json_t *response = json_array_get(values, 0);
  json_t *status = json_object_get(response, "status");
  if (!json_is_object(response) || !json_is_integer(status) || json_integer_value(status) < 100 ||
      json_integer_value(status) > 599) {
    lp_errorlog("engine.handler", "handler returned no response", LPF_STR("module", h->module),
                LPF_STR("function", h->function), LPF_STR("result", results));
    respond_error(res, 500, "the handler did not return {status = 100..599, headers, body}");
    json_decref(values);
    return;
  }
  const char *key;
  json_t *value;
  const char *content_type = NULL;
  json_object_foreach(json_object_get(response, "headers"), key, value) {
    if (!json_is_string(value)) continue;
    if (strcasecmp(key, "content-type") == 0)
      content_type = json_string_value(value);
    else
      lp_http_response_header(res, key, json_string_value(value));
  }
  json_t *body = json_object_get(response, "body");
  const char *text = json_is_string(body) ? json_string_value(body) : "";
  size_t len = json_is_string(body) ? json_string_length(body) : 0;
  lp_http_respond(res, (int)json_integer_value(status), content_type, text, len);
  json_decref(values);
}

static void task_done(const lp_task_result *r, void *ud) {
  pending_request *p = ud;
  if (p->res) {
    lp_http_response_on_close(p->res, NULL, NULL);
    if (r->error) {
      lp_errorlog("engine.handler", "handler failed", LPF_STR("module", p->handler->module),
                  LPF_STR("function", p->handler->function), LPF_STR("code", r->error->code),
                  LPF_STR("error", r->error->message));
      respond_error(p->res, 500, r->error->message);
    } else {
      respond_with(p->res, p->handler, r->json);
    }
  }
  free(p);
}

static void client_gone(lp_http_response *res, void *ud) {
  pending_request *p = ud;
  p->res = NULL;
}

void lp_script_handler_serve(const lp_http_request *req, lp_http_response *res, void *handler) {
  lp_script_handler *h = handler;
  pending_request *p = lp_xcalloc(1, sizeof *p);
  p->handler = h;
  p->res = res;
  lp_http_response_on_close(res, client_gone, p);
  lp_script_host_call(h->host, h->module, h->function, json_pack("[o]", request_json(h, req)), task_done, p);
}

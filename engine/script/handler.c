#include "script/handler.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/log.h"
#include "script/host_internal.h"

struct lp_script_handler {
  lp_script_host *host;
  char *module;
  char *function;
  char *service;
};

/* One request: waiting for its task, then (when the handler answered with a stream) an open
 * streaming response. Listed in the registry while its id may be written to. res is NULL once the
 * client has gone or the response is finished; the entry is freed when nothing refers to it any
 * more (the task has ended and the stream is over), after its timer handle has closed. */
typedef struct pending_request {
  lp_script_handler *handler;
  lp_http_response *res;
  char *id;
  int task_running;
  int streaming;
  int listed;
  lp_buf backlog; /* writes before the stream began */
  uv_timer_t timer;
  int timer_on;
  uint64_t deadline_ms; /* loop time at which the stream ends; 0 = never */
  struct pending_request *prev, *next;
} pending_request;

/* The registry: every entry of every handler, told apart by host. Loop thread only. */
static pending_request *registry;
static unsigned long long next_stream_id;

static void list_entry(pending_request *p) {
  p->next = registry;
  if (registry) registry->prev = p;
  registry = p;
  p->listed = 1;
}

static void unlist_entry(pending_request *p) {
  if (!p->listed) return;
  if (p->prev)
    p->prev->next = p->next;
  else
    registry = p->next;
  if (p->next) p->next->prev = p->prev;
  p->prev = p->next = NULL;
  p->listed = 0;
}

static pending_request *find_entry(const lp_script_host *host, const char *id) {
  for (pending_request *p = registry; p; p = p->next)
    if (p->handler->host == host && p->res && strcmp(p->id, id) == 0) return p;
  return NULL;
}

static void entry_freed(uv_handle_t *handle) {
  free(handle->data);
}

/* Frees p once the task is over and the response is gone. */
static void release(pending_request *p) {
  if (p->task_running || p->res) return;
  unlist_entry(p);
  free(p->id);
  p->id = NULL;
  lp_buf_free(&p->backlog);
  if (p->timer_on) {
    p->timer_on = 0;
    p->timer.data = p;
    uv_close((uv_handle_t *)&p->timer, entry_freed);
  } else {
    free(p);
  }
}

/* Ends the stream (last chunk) and forgets it. */
static void finish_stream(pending_request *p) {
  lp_http_response *res = p->res;
  p->res = NULL;
  unlist_entry(p);
  lp_http_response_on_close(res, NULL, NULL);
  lp_http_stream_end(res);
  release(p);
}

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

static void client_gone(lp_http_response *res, void *ud);

static void tick_done(const lp_task_result *r, void *ud) {
  if (r->error)
    lp_errorlog("engine.handler", "stream tick failed", LPF_STR("module", r->module),
                LPF_STR("code", r->error->code), LPF_STR("error", r->error->message));
}

static void stream_timer(uv_timer_t *timer) {
  pending_request *p = timer->data;
  if (!p->res) return;
  if (p->deadline_ms && uv_now(timer->loop) >= p->deadline_ms) {
    uv_timer_stop(timer);
    finish_stream(p);
    return;
  }
  lp_script_handler *h = p->handler;
  json_t *req =
      json_pack("{s:s, s:s, s:s, s:s, s:{}, s:s, s:s, s:s}", "service", h->service, "method", "TICK", "path",
                "", "query", "", "headers", "body", "", "remote", "", "stream", p->id);
  lp_script_host_call(h->host, h->module, h->function, json_pack("[o]", req), tick_done, NULL);
}

static double number_field(json_t *response, const char *name) {
  json_t *v = json_object_get(response, name);
  return json_is_number(v) && json_number_value(v) > 0 ? json_number_value(v) : 0;
}

/* Begins the streaming response under id; the body and what was written before go first. */
static void begin_stream(pending_request *p, lp_http_response *res, json_t *response, int status,
                         const char *content_type, const char *id) {
  p->res = res;
  lp_http_response_on_close(res, client_gone, p);
  if (strcmp(id, p->id) != 0) {
    free(p->id);
    p->id = lp_xstrdup(id);
    lp_buf_reset(&p->backlog);
  }
  p->streaming = 1;
  lp_http_stream_begin(res, status, content_type);
  json_t *body = json_object_get(response, "body");
  int ok = 1;
  if (json_is_string(body) && json_string_length(body) > 0)
    ok = lp_http_stream_write(res, json_string_value(body), json_string_length(body)) == 0;
  if (ok && p->backlog.len > 0) ok = lp_http_stream_write(res, p->backlog.data, p->backlog.len) == 0;
  lp_buf_free(&p->backlog);
  if (!ok) {
    finish_stream(p);
    return;
  }
  double timeout = number_field(response, "timeout"), tick = number_field(response, "tick");
  if (timeout > 0 || tick > 0) {
    uv_loop_t *loop = p->handler->host->loop;
    uv_timer_init(loop, &p->timer);
    p->timer.data = p;
    p->timer_on = 1;
    if (timeout > 0) p->deadline_ms = uv_now(loop) + (uint64_t)(timeout * 1000.0);
    uint64_t every = (uint64_t)((tick > 0 && (timeout <= 0 || tick < timeout) ? tick : timeout) * 1000.0);
    if (every == 0) every = 1;
    uv_timer_start(&p->timer, stream_timer, every, every);
  }
}

/* Answers p's request; p->res stays set only when a stream began. */
static void respond_with(pending_request *p, const char *results) {
  lp_http_response *res = p->res;
  p->res = NULL;
  const lp_script_handler *h = p->handler;
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
  json_t *stream = json_object_get(response, "stream");
  if (stream &&
      (!json_is_string(stream) || json_string_length(stream) == 0 ||
       (strcmp(json_string_value(stream), p->id) != 0 && find_entry(h->host, json_string_value(stream))))) {
    lp_errorlog("engine.handler", "handler returned a bad stream id", LPF_STR("module", h->module),
                LPF_STR("result", results));
    respond_error(res, 500, "the handler's stream id is not a string, or is in use");
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
  if (stream) {
    begin_stream(p, res, response, (int)json_integer_value(status), content_type, json_string_value(stream));
    json_decref(values);
    return;
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
      p->res = NULL;
    } else {
      respond_with(p, r->json);
    }
  }
  if (!p->res) unlist_entry(p);
  p->task_running = 0;
  release(p);
}

static void client_gone(lp_http_response *res, void *ud) {
  pending_request *p = ud;
  p->res = NULL;
  unlist_entry(p);
  release(p);
}

void lp_script_handler_serve(const lp_http_request *req, lp_http_response *res, void *handler) {
  lp_script_handler *h = handler;
  pending_request *p = lp_xcalloc(1, sizeof *p);
  p->handler = h;
  p->res = res;
  p->task_running = 1;
  p->id = lp_xasprintf("req-%llu", ++next_stream_id);
  list_entry(p);
  lp_http_response_on_close(res, client_gone, p);
  json_t *request = request_json(h, req);
  json_object_set_new(request, "stream", json_string(p->id));
  lp_script_host_call(h->host, h->module, h->function, json_pack("[o]", request), task_done, p);
}

int lp_script_stream_op(lp_script_host *host, const char *id, int op, const char *data, size_t len) {
  pending_request *p = find_entry(host, id);
  if (!p) return 0;
  switch (op) {
  case LP_STREAM_WRITE:
    if (!p->streaming) {
      lp_buf_append(&p->backlog, data, len);
      return 1;
    }
    if (lp_http_stream_write(p->res, data, len) != 0) {
      finish_stream(p);
      return 0;
    }
    return 1;
  case LP_STREAM_CLOSE:
    if (!p->streaming) return 0; /* its task has not answered yet: nothing to end */
    finish_stream(p);
    return 1;
  default:
    return 1;
  }
}

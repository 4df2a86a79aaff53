/* fuzz_kube_informer: the Kubernetes list decoding, the watch stream's line splitter and event
 * decoding, and the informer's store (engine/kube/watch.c, informer.c; README.md).
 *
 * A fake API server (the engine's HTTP server on a loopback port) and a Kubernetes client pointed at
 * it live for the whole run. Each input is one informer of pods: when the input holds a NUL byte,
 * the bytes before it are the body of the first list answer (otherwise a valid empty list at
 * resourceVersion 1), and the rest is the body of the first watch, streamed in two writes split at
 * an offset the input picks (its last byte), so lines cut across writes are split too. Whatever the
 * informer then asks for next (a list retry, a relist after a 410, the next page, a new watch) means
 * it is done with the input: it is answered with an empty list or a silent watch, and the informer is
 * stopped. A crash, a sanitizer report or an informer that never asks again (libFuzzer's -timeout)
 * is a finding. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "core/log.h"
#include "core/metrics.h"
#include "http/server.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/informer.h"

static const char empty_list[] =
    "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[]}";

static uv_loop_t *loop;
static lp_kube_client *kc;
static lp_metrics *metrics;

static struct {
  const char *list;
  size_t list_len;
  const char *watch;
  size_t watch_len, split;
  int lists, watches, done;
} in;

static void h_api(const lp_http_request *req, lp_http_response *res, void *ud) {
  if (!strstr(req->query, "watch=1")) {
    if (in.lists++ || in.done) {
      in.done = 1;
      lp_http_respond(res, 200, "application/json", empty_list, sizeof empty_list - 1);
      return;
    }
    lp_http_respond(res, 200, "application/json", in.list, in.list_len);
    return;
  }
  lp_http_stream_begin(res, 200, "application/json");
  if (in.watches++ || in.done) {
    in.done = 1; /* left open: stopping the informer cancels it */
    return;
  }
  (void)lp_http_stream_write(res, in.watch, in.split);
  (void)lp_http_stream_write(res, in.watch + in.split, in.watch_len - in.split);
  lp_http_stream_end(res);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  int devnull = open("/dev/null", O_WRONLY);
  lp_log_configure(LP_LOG_ERROR, LP_LOG_FORMAT_JSON, devnull < 0 ? 2 : devnull);
  loop = uv_default_loop();
  lp_http_server *s = lp_http_server_new(loop, NULL);
  lp_http_server_route(s, "GET", "/api/*", h_api, NULL);
  lp_error *err = NULL;
  if (lp_http_server_listen(s, "127.0.0.1", 0, &err)) abort();
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d", lp_http_server_port(s));
  lp_kube_config *cfg = lp_kube_config_for_server(url, "default"); /* lives for the run */
  kc = lp_kube_client_new(loop, cfg, NULL, &err);
  if (!kc) abort();
  metrics = lp_metrics_new();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  const char *nul = memchr(text, '\0', size);
  in.list = nul ? text : empty_list;
  in.list_len = nul ? (size_t)(nul - text) : sizeof empty_list - 1;
  in.watch = nul ? nul + 1 : text;
  in.watch_len = nul ? size - (size_t)(nul + 1 - text) : size;
  in.split = in.watch_len ? data[size - 1] % (in.watch_len + 1) : 0;
  in.lists = in.watches = in.done = 0;

  lp_kube_ref pods = {.version = "v1", .resource = "pods", .namespace = "default"};
  lp_informer_opts opts = {.metrics = metrics};
  opts.watch.backoff_initial_ms = 1;
  opts.watch.backoff_max_ms = 1;
  opts.watch.max_line_bytes = 64 * 1024;
  lp_informer_handlers h = {0};
  lp_informer *inf = lp_informer_start(kc, &pods, &opts, &h);
  while (!in.done) uv_run(loop, UV_RUN_ONCE);
  lp_informer_stop(inf);
  for (int i = 0; i < 4; i++) uv_run(loop, UV_RUN_NOWAIT); /* let the cancelled calls finish */
  return 0;
}

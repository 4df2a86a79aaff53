/* HTTP requests answered by a script function: the simulators (and any Lua endpoint) plug into the
 * engine's HTTP server through this. The function runs as a task, so it may await HTTP itself.
 *
 *   handle(request) -> response
 *   request  = {service, method, path, query, headers = {lower-case name = value}, body, remote,
 *               stream = "<id>"}   (query is the raw query string, undecoded)
 *   response = {status = 200, headers = {name = value}, body = "..."}   (body optional)
 *
 * Streaming (the Kubernetes watch): a response {status, headers, stream = "<id>", body?,
 * timeout = seconds?, tick = seconds?} begins a chunked response, sends body first if any, and
 * keeps it open under id, in a registry per script host. Any task of that host then writes to it
 * with luaprov.stream.write(id, data), ends it with luaprov.stream.close(id), and asks
 * luaprov.stream.open(id) whether the client is still there. Each request is pre-registered under
 * request.stream while its task runs: writes to that id before the task returns are kept and sent
 * right after body, so a handler that answers with stream = request.stream misses nothing written
 * in between (another id is accepted too, but is only registered when the task returns).
 * timeout ends the stream after that many seconds; tick calls the same function every tick seconds
 * with {service, method = "TICK", stream = id} while the stream is open (results are ignored).
 *
 * Ownership: the registry owns each stream entry. It is freed when the client goes away, when a
 * script closes it, when timeout expires, when a write finds the client gone, or when the server
 * closes (which ends streams and reports them gone); a request answered without a stream frees its
 * entry when the task ends. Nothing else holds the response.
 *
 * A script error, a result that is not a response, or a call over budget answers 500 with
 * {"error": message} and logs the cause; the server keeps serving. Loop thread only. */
#ifndef LUAPROV_SCRIPT_HANDLER_H
#define LUAPROV_SCRIPT_HANDLER_H

#include "http/server.h"
#include "script/host.h"

typedef struct lp_script_handler lp_script_handler;

/* service names the endpoint for the script (several services may share one function). Strings are
 * copied. The caller owns the handler and frees it after the server has closed. */
lp_script_handler *lp_script_handler_new(lp_script_host *host, const char *module, const char *function,
                                         const char *service);
void lp_script_handler_free(lp_script_handler *h);

/* An lp_http_handler: pass the lp_script_handler as the route's ud. */
void lp_script_handler_serve(const lp_http_request *req, lp_http_response *res, void *handler);

/* The lp_lua_host.stream operation for host's streams (LP_STREAM_OPEN, _WRITE, _CLOSE; see
 * luaprov.h): 1 when the stream named id is open (and the write was queued / it was ended), else 0. */
int lp_script_stream_op(lp_script_host *host, const char *id, int op, const char *data, size_t len);

#endif

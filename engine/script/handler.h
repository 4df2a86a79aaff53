/* HTTP requests answered by a script function: the simulators (and any Lua endpoint) plug into the
 * engine's HTTP server through this. The function runs as a task, so it may await HTTP itself.
 *
 *   handle(request) -> response
 *   request  = {service, method, path, query, headers = {lower-case name = value}, body, remote}
 *              (query is the raw query string, undecoded)
 *   response = {status = 200, headers = {name = value}, body = "..."}   (body optional)
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

#endif

/* The built-in simulators, served in-process: each simulated service (the Kubernetes API and each
 * cloud's APIs) is a Lua module sim/<service>/init.lua with a handle(request) function (see
 * script/handler.h), answered by its own HTTP server on the loop. Every such directory of the tree is
 * a service; nothing here names a cloud. The simulators run in a script host of their own, apart from the
 * engine's policies, and are never hot-reloaded (a reload would lose their state). Used by `luaprov sim`,
 * later by `luaprov run --sim` and the demo, and by the tests. Loop thread only. */
#ifndef LUAPROV_SIM_H
#define LUAPROV_SIM_H

#include <uv.h>

#include "core/error.h"

typedef struct lp_sim lp_sim;

typedef struct lp_sim_options {
  const char *host;        /* NULL = 127.0.0.1 */
  int port;                /* the Kubernetes API's port, the other services' follow by name; 0 = free ports */
  const char *scripts_dir; /* the tree holding sim/; NULL = the default script tree */
} lp_sim_options;

/* Loads the simulators and listens. Returns NULL with *err when a module fails to load or a port
 * cannot be bound. */
lp_sim *lp_sim_start(uv_loop_t *loop, const lp_sim_options *opts, lp_error **err);

/* Base URL of a service (its directory under sim/, e.g. "kubernetes"), e.g. "http://127.0.0.1:41234", or NULL
 * when that simulator is not running. Valid until lp_sim_close. */
const char *lp_sim_url(const lp_sim *sim, const char *service);

/* {"kubernetes": URL, "<service>": URL, ...} for the services running; caller frees. */
char *lp_sim_endpoints_json(const lp_sim *sim);

/* Stops serving, closes the servers and the simulators' script host, then calls on_closed. */
void lp_sim_close(lp_sim *sim, void (*on_closed)(void *ud), void *ud);

#endif

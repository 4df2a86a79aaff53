/* The log fields of an lp_error, with the stable keys docs/reference-metrics-logs.md#error-fields
 * lists: error, code, then reason, action, request_id, object, file, line, hint and traceback when known.
 *   lp_warn("engine.controller", "launch failed", LPF_STR("nodeclaim", name), LPF_ERROR(err));
 * e must be a non-NULL lp_error * without side effects (it is read once per field). */
#ifndef LUAPROV_CORE_ERROR_LOG_H
#define LUAPROV_CORE_ERROR_LOG_H

#include "core/error.h"
#include "core/log.h"

/* A string field that is left out of the line when x is NULL. */
#define LPF_OPT_STR(k, x) ((lp_field){.key = (k), .type = (x) ? LP_FIELD_STR : LP_FIELD_NONE, .v.s = (x)})

#define LPF_ERROR(e)                                                                                         \
  LPF_STR("error", (e)->message), LPF_STR("code", (e)->code), LPF_OPT_STR("reason", (e)->reason),            \
      LPF_OPT_STR("action", (e)->action), LPF_OPT_STR("request_id", (e)->request_id),                        \
      LPF_OPT_STR("object", (e)->object), LPF_OPT_STR("file", (e)->file),                                    \
      ((lp_field){.key = "line", .type = (e)->line > 0 ? LP_FIELD_INT : LP_FIELD_NONE, .v.i = (e)->line}),   \
      LPF_OPT_STR("hint", (e)->hint), LPF_OPT_STR("traceback", (e)->traceback)

#endif

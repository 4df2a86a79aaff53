#include "contract/error_table.h"

static const char *str(const json_t *t, const char *key) {
  const char *s = json_string_value(json_object_get(t, key));
  return s && *s ? s : NULL;
}

lp_error *lp_error_from_table(const json_t *value) {
  const char *code = str(value, "code");
  const char *message = json_is_string(value) ? json_string_value(value) : str(value, "message");
  lp_error *e = lp_error_new(code ? code : "Error", "%s", message ? message : "(no message)");
  const char *reason = str(value, "reason") ? str(value, "reason") : str(value, "api_code");
  lp_error_with(e, LP_ERROR_REASON, reason);
  lp_error_with(e, LP_ERROR_ACTION, str(value, "action"));
  lp_error_with(e, LP_ERROR_REQUEST_ID, str(value, "request_id"));
  lp_error_with(e, LP_ERROR_OBJECT, str(value, "object"));
  lp_error_with(e, LP_ERROR_HINT, str(value, "hint"));
  return e;
}

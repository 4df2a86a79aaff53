/* The lp_error of a mapping's operational failure, `nil, err`: err is a string (the message) or a
 * table {code, message, reason | api_code, action, request_id, object, hint}. The table's parts
 * become the error's fields (docs/contracts.md#errors-a-mapping-returns). */
#ifndef LUAPROV_CONTRACT_ERROR_TABLE_H
#define LUAPROV_CONTRACT_ERROR_TABLE_H

#include <jansson.h>

#include "core/error.h"

/* A new error (never NULL) from value, a JSON string or object; code "Error" when it names none. */
lp_error *lp_error_from_table(const json_t *value);

#endif

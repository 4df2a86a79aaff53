/* How a command that answers with one JSON document (eval, instance) reports a failure: the message
 * as {"error": "..."} on stdout, the document a script reads, then on stderr the error's fields that
 * are set, one per line, indented, for the operator (docs/writing-policies.md#when-eval-fails):
 *   {"error":"listing instance types: ..."}
 *     reason: <the cloud's own code>
 *     action: <the API action>
 *     request id: 5A2B...
 *     object: web-1
 *     at: drift.lua:3
 *     hint: ...
 * A field lp_error gains is one row of the table in error_print.c. */
#ifndef LUAPROV_CLI_ERROR_PRINT_H
#define LUAPROV_CLI_ERROR_PRINT_H

#include <stdio.h>

#include "core/error.h"

/* Writes e's fields that are set to out, "  label: value\n" each, in the order above. */
void lp_cli_write_error_fields(FILE *out, const lp_error *e);

/* Prints e as above (stdout flushed before stderr, so a terminal shows the fields under the message);
 * returns 1, the exit status of a failed command. */
int lp_cli_print_error(const lp_error *e);

#endif

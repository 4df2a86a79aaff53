/* What the CloudProvider mapping exports besides functions (its node class descriptor, settings,
 * simulator, demo; docs/contracts.md#mappings), read from a script tree by the commands that need it
 * before or without an engine: `luaprov run` (its --help lists the settings, and a --<setting> flag
 * that names none is refused) and `luaprov demo` (what it applies and edits). */
#ifndef LUAPROV_CLI_MAPPING_EXPORTS_H
#define LUAPROV_CLI_MAPPING_EXPORTS_H

#include <jansson.h>

/* {field: value} for each of fields (NULL-terminated) the mapping exports, as JSON (new reference),
 * from scripts_dir over the default tree (scripts_dir NULL = the default tree alone). NULL with
 * *problem (malloc'd, "the scripts do not load: ...") when the tree does not load. */
json_t *lp_cli_mapping_exports(const char *scripts_dir, const char *const *fields, char **problem);

/* The mapping's `settings` list (an empty array when it declares none), as above. */
json_t *lp_cli_mapping_settings(const char *scripts_dir, char **problem);

#endif

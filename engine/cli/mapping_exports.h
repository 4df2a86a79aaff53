/* What the CloudProvider mapping exports besides functions (its node class descriptor, settings,
 * simulator, demo; docs/contracts.md#mappings), read from a script tree by the commands that need it
 * before or without an engine: `luaprov run` and `luaprov eval` (run's --help lists the settings, and
 * both refuse a --<setting> flag that names none) and `luaprov demo` (what it applies and edits). */
#ifndef LUAPROV_CLI_MAPPING_EXPORTS_H
#define LUAPROV_CLI_MAPPING_EXPORTS_H

#include <jansson.h>

/* {field: value} for each of fields (NULL-terminated) the mapping exports, as JSON (new reference),
 * from scripts_dir over the default tree (scripts_dir NULL = the default tree alone). NULL with
 * *problem (malloc'd, "the scripts do not load: ...") when the tree does not load. */
json_t *lp_cli_mapping_exports(const char *scripts_dir, const char *const *fields, char **problem);

/* The mapping's `settings` list (an empty array when it declares none), as above. */
json_t *lp_cli_mapping_settings(const char *scripts_dir, char **problem);

/* NULL when every name of flags ({name: value}, the --NAME VALUE options a command did not know) is a
 * setting the mapping of scripts_dir declares, or when that tree does not load (the command reports
 * it); else "unknown option '--NAME'" (malloc'd), which the command prints as its usage error. */
char *lp_cli_unknown_setting(const char *scripts_dir, const json_t *flags);

#endif

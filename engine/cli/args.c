/* The shared argument parser of the luaprov commands (args.h). */
#include "cli/args.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lp_cli_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return 1;
  return 0;
}

static void vusage_error(const char *cmd, const char *fmt, va_list ap) {
  fprintf(stderr, "luaprov%s%s: ", cmd && *cmd ? " " : "", cmd ? cmd : "");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nrun 'luaprov%s%s --help' for usage\n", cmd && *cmd ? " " : "", cmd ? cmd : "");
}

int lp_cli_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vusage_error(cmd, fmt, ap);
  va_end(ap);
  return LP_CLI_USAGE;
}

int lp_cli_unknown_choice(const char *cmd, const char *what, const char *got, const char *const *choices) {
  char list[512] = "";
  size_t n = 0;
  for (const char *const *c = choices; *c && n < sizeof list; c++)
    n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", c == choices ? "" : ", ", *c);
  return lp_cli_usage_error(cmd, "unknown %s '%s' (one of %s)", what, got, list);
}

static const lp_cli_opt *find(const lp_cli_opt *opts, const char *name, size_t len) {
  for (const lp_cli_opt *o = opts; o && o->name; o++)
    if (strlen(o->name) == len && strncmp(o->name, name, len) == 0) return o;
  return NULL;
}

int lp_cli_parse(lp_cli_args *a, int argc, char **argv) {
  if (lp_cli_wants_help(argc, argv)) return LP_CLI_HELP;
  const lp_cli_opt common[] = {
      {"--log-level", &a->log_level, NULL}, {"--log-format", &a->log_format, NULL}, {NULL, NULL, NULL}};
  a->npositional = 0;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strncmp(arg, "--", 2) != 0 || !arg[2]) {
      if (!a->positional || a->npositional >= a->max_positional)
        return lp_cli_usage_error(a->cmd, "unexpected argument '%s'", arg);
      a->positional[a->npositional++] = arg;
      continue;
    }
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    const lp_cli_opt *o = find(a->opts, arg, len);
    if (!o) o = find(common, arg, len);
    /* the value: after '=', else the next word unless that is an option itself */
    const char *value = eq ? eq + 1 : i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 ? argv[i + 1] : NULL;
    if (o && !o->value) {
      if (eq) return lp_cli_usage_error(a->cmd, "option '%.*s' takes no value", (int)len, arg);
      *o->flag = 1;
      continue;
    }
    if (!o && (!a->settings || !value))
      return lp_cli_usage_error(a->cmd, "unknown option '%.*s'", (int)len, arg);
    if (!value) return lp_cli_usage_error(a->cmd, "option '%s' needs a value", arg);
    if (o)
      *o->value = value;
    else {
      char *name = strndup(arg + 2, len - 2);
      json_object_set_new(a->settings, name, json_string(value));
      free(name);
    }
    if (!eq) i++;
  }
  return LP_CLI_OK;
}

/* The one argument parser of every luaprov command (engine/cli/README.md): the same spelling for the same
 * flag everywhere, and the same usage errors. A usage error is one line on stderr,
 *   luaprov check: unknown option '--bogus'
 * then "run 'luaprov check --help' for usage", and exit status 2; --help prints the full help, exit 0. */
#ifndef LUAPROV_CLI_ARGS_H
#define LUAPROV_CLI_ARGS_H

#include <jansson.h>

/* One option: a value option stores argv's next word (or what follows '=') in *value; a switch
 * (value NULL) sets *flag to 1. */
typedef struct lp_cli_opt {
  const char *name; /* "--scripts" */
  const char **value;
  int *flag;
} lp_cli_opt;

typedef struct lp_cli_args {
  const char *cmd;         /* "check", "eval drift": names the command in messages */
  const lp_cli_opt *opts;  /* the command's own options, terminated by {NULL} */
  const char **positional; /* receives the words that are not options; NULL = none accepted */
  int max_positional;
  json_t *settings; /* non-NULL: an unknown --NAME VALUE is stored as setting NAME (the caller checks it) */
  /* out: every command takes --log-level LEVEL and --log-format json|text */
  int npositional;
  const char *log_level, *log_format;
} lp_cli_args;

enum { LP_CLI_OK = 0, LP_CLI_HELP = 1, LP_CLI_USAGE = 2 };

/* Parses argv[1..argc-1] (argv[0] is the command's name). Returns LP_CLI_HELP when -h or --help is
 * there (nothing else parsed), LP_CLI_USAGE after printing the usage error, else LP_CLI_OK. */
int lp_cli_parse(lp_cli_args *a, int argc, char **argv);

/* Prints "luaprov <cmd>: <message>" and the --help hint on stderr; returns 2, the exit status. */
int lp_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A usage error for a word that is not one of choices (NULL-terminated):
 *   luaprov eval: unknown policy 'bogus' (one of drift, repair, ...)
 * what is "command", "policy", ...; returns 2. */
int lp_cli_unknown_choice(const char *cmd, const char *what, const char *got, const char *const *choices);

/* True when argv holds -h or --help. */
int lp_cli_wants_help(int argc, char **argv);

#endif

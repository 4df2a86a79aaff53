/* The luaprov command line (README.md, each verb's --help). One file per verb; main.c dispatches.
 * Each verb returns the process exit status. */
#ifndef LUAPROV_CLI_H
#define LUAPROV_CLI_H

#include "cli/args.h"

int lp_cmd_version(int argc, char **argv);
int lp_cmd_check(int argc, char **argv);
int lp_cmd_run(int argc, char **argv);
int lp_cmd_sim(int argc, char **argv);
int lp_cmd_eval(int argc, char **argv);
int lp_cmd_demo(int argc, char **argv);
int lp_cmd_instance(int argc, char **argv);

/* Configures logging from LUAPROV_LOG_LEVEL / LUAPROV_LOG_FORMAT, then from --log-level /
 * --log-format if given (NULL = not given). Returns 0, or -1 after printing what was wrong. */
int lp_cli_configure_logging(const char *level, const char *format);

/* Splits "HOST:PORT" ("[::1]:8080" for IPv6). Returns 0, or -1 with a message on stderr naming
 * the flag. host_out receives a malloc'd string. */
int lp_cli_parse_addr(const char *flag, const char *value, char **host_out, int *port_out);

#endif

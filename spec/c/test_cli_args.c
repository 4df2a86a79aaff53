/* The shared argument parser of the luaprov commands (engine/cli/args.h): values, switches, '=',
 * positionals, settings and each usage error, with the exact line and hint on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "cli/args.h"

/* Runs lp_cli_parse on the words of line (split on spaces) with stderr captured into err. */
static int parse(lp_cli_args *a, char *line, char *err, size_t cap) {
  char *argv[32];
  int argc = 0;
  for (char *w = strtok(line, " "); w && argc < 32; w = strtok(NULL, " ")) argv[argc++] = w;
  fflush(stderr);
  FILE *tmp = tmpfile();
  int saved = dup(STDERR_FILENO);
  dup2(fileno(tmp), STDERR_FILENO);
  int rc = lp_cli_parse(a, argc, argv);
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  rewind(tmp);
  size_t n = fread(err, 1, cap - 1, tmp);
  err[n] = '\0';
  fclose(tmp);
  return rc;
}

static const char *scripts, *now;
static int sim;
static const lp_cli_opt opts[] = {
    {"--scripts", &scripts, NULL}, {"--now", &now, NULL}, {"--sim", NULL, &sim}, {NULL, NULL, NULL}};

static void reset(void) {
  scripts = now = NULL;
  sim = 0;
}

static void test_values_switches_positionals(void) {
  reset();
  const char *pos[4];
  lp_cli_args a = {.cmd = "check", .opts = opts, .positional = pos, .max_positional = 4};
  char line[] = "check a --scripts s --sim --now=2026-12-01T00:00:00Z --log-level warn b";
  char err[512];
  CHECK_INT(parse(&a, line, err, sizeof err), LP_CLI_OK);
  CHECK_STR(err, "");
  CHECK_STR(scripts, "s");
  CHECK_STR(now, "2026-12-01T00:00:00Z");
  CHECK_INT(sim, 1);
  CHECK_STR(a.log_level, "warn");
  CHECK(a.log_format == NULL);
  CHECK_INT(a.npositional, 2);
  CHECK_STR(pos[0], "a");
  CHECK_STR(pos[1], "b");
}

static void test_usage_errors(void) {
  static const struct {
    char line[80];
    const char *want;
  } cases[] = {
      {"check --bogus", "luaprov check: unknown option '--bogus'\nrun 'luaprov check --help' for usage\n"},
      {"check --bogus=1", "luaprov check: unknown option '--bogus'\nrun 'luaprov check --help' for usage\n"},
      {"check --scripts",
       "luaprov check: option '--scripts' needs a value\nrun 'luaprov check --help' for usage\n"},
      {"check --scripts --sim",
       "luaprov check: option '--scripts' needs a value\nrun 'luaprov check --help' for usage\n"},
      {"check --sim=1",
       "luaprov check: option '--sim' takes no value\nrun 'luaprov check --help' for usage\n"},
      {"check dir", "luaprov check: unexpected argument 'dir'\nrun 'luaprov check --help' for usage\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    reset();
    lp_cli_args a = {.cmd = "check", .opts = opts};
    char line[80], err[512];
    memcpy(line, cases[i].line, sizeof line);
    CHECK_INT(parse(&a, line, err, sizeof err), LP_CLI_USAGE);
    CHECK_STR(err, cases[i].want);
  }
}

static void test_help_wins(void) {
  reset();
  lp_cli_args a = {.cmd = "check", .opts = opts};
  char line[] = "check --bogus --help", err[512];
  CHECK_INT(parse(&a, line, err, sizeof err), LP_CLI_HELP);
  CHECK_STR(err, "");
}

static void test_settings(void) {
  reset();
  json_t *settings = json_object();
  lp_cli_args a = {.cmd = "run", .opts = opts, .settings = settings};
  char line[] = "run --region cn-beijing --zone=z1 --sim", err[512];
  CHECK_INT(parse(&a, line, err, sizeof err), LP_CLI_OK);
  CHECK_STR(json_string_value(json_object_get(settings, "region")), "cn-beijing");
  CHECK_STR(json_string_value(json_object_get(settings, "zone")), "z1");
  CHECK_INT(sim, 1);
  /* a setting without a value is an unknown option, not "needs a value": it may be a typo */
  char bare[] = "run --bogus";
  CHECK_INT(parse(&a, bare, err, sizeof err), LP_CLI_USAGE);
  CHECK_STR(err, "luaprov run: unknown option '--bogus'\nrun 'luaprov run --help' for usage\n");
  json_decref(settings);
}

static void test_unknown_choice(void) {
  static const char *const kinds[] = {"drift", "repair", NULL};
  fflush(stderr);
  FILE *tmp = tmpfile();
  int saved = dup(STDERR_FILENO);
  dup2(fileno(tmp), STDERR_FILENO);
  int rc = lp_cli_unknown_choice("eval", "subcommand", "bogus", kinds);
  int rc_main = lp_cli_unknown_choice(NULL, "command", "bogus", kinds);
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  rewind(tmp);
  char err[512];
  err[fread(err, 1, sizeof err - 1, tmp)] = '\0';
  fclose(tmp);
  CHECK_INT(rc, 2);
  CHECK_INT(rc_main, 2);
  CHECK_STR(err, "luaprov eval: unknown subcommand 'bogus' (one of drift, repair)\n"
                 "run 'luaprov eval --help' for usage\n"
                 "luaprov: unknown command 'bogus' (one of drift, repair)\n"
                 "run 'luaprov --help' for usage\n");
}

int main(void) {
  RUN(test_values_switches_positionals);
  RUN(test_usage_errors);
  RUN(test_help_wins);
  RUN(test_settings);
  RUN(test_unknown_choice);
  return check_summary();
}

/* `luaprov run --config` (engine/cli/run_config.c): controllers.spotToSpotConsolidation read as the
 * settings code says: true and false set it, absent keeps the value it had (off by default), anything
 * but a boolean (a string "true", a word, a number) is refused and the settings are left alone. The
 * files are written to a temporary directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "cli/run_config.h"

static char dir[] = "/tmp/luaprov-run-config-XXXXXX";

/* Writes text to a file of the temporary directory and loads it into *settings; returns its answer. */
static int load(const char *text, lp_ctrl_settings *settings) {
  char path[128];
  snprintf(path, sizeof path, "%s/config.yaml", dir);
  FILE *fp = fopen(path, "w");
  CHECK(fp != NULL);
  if (!fp) return -2;
  fputs(text, fp);
  fclose(fp);
  int rc = lp_run_config_load(path, settings);
  unlink(path);
  return rc;
}

static void test_spot_to_spot(void) {
  lp_ctrl_settings s = {0};
  CHECK_INT(load("controllers:\n  spotToSpotConsolidation: true\n", &s), 0);
  CHECK_INT(s.spot_to_spot_consolidation, 1);
  CHECK_INT(load("controllers:\n  spotToSpotConsolidation: false\n", &s), 0);
  CHECK_INT(s.spot_to_spot_consolidation, 0);

  s.spot_to_spot_consolidation = 1; /* absent: what it was */
  CHECK_INT(load("controllers:\n  drainRequeue: 2s\n", &s), 0);
  CHECK_INT(s.spot_to_spot_consolidation, 1);
  s = (lp_ctrl_settings){0};
  CHECK_INT(load("controllers:\n  workers: 3\n", &s), 0);
  CHECK_INT(s.spot_to_spot_consolidation, 0); /* off unless asked for */

  const char *invalid[] = {"\"true\"", "sometimes", "1", NULL};
  for (int i = 0; invalid[i]; i++) {
    char text[128];
    snprintf(text, sizeof text, "controllers:\n  spotToSpotConsolidation: %s\n", invalid[i]);
    s = (lp_ctrl_settings){.spot_to_spot_consolidation = 1};
    CHECK_INT(load(text, &s), -1);
    CHECK_INT(s.spot_to_spot_consolidation, 1);
  }
}

int main(void) {
  CHECK(mkdtemp(dir) != NULL);
  RUN(test_spot_to_spot);
  rmdir(dir);
  return check_summary();
}

#include "cli/run_config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/yaml.h"

static const struct {
  const char *key;
  size_t offset;
} durations[] = {
    {"launchTimeout", offsetof(lp_ctrl_settings, launch_timeout_s)},
    {"registrationTimeout", offsetof(lp_ctrl_settings, registration_timeout_s)},
    {"garbageCollectionInterval", offsetof(lp_ctrl_settings, gc_interval_s)},
    {"leakedInstanceGrace", offsetof(lp_ctrl_settings, gc_leak_grace_s)},
    {"nodeClassResync", offsetof(lp_ctrl_settings, nodeclass_resync_s)},
    {"drainRequeue", offsetof(lp_ctrl_settings, drain_requeue_s)},
    {"terminateRequeue", offsetof(lp_ctrl_settings, terminate_requeue_s)},
};

/* A duration value: a Go duration string or a number of seconds, > 0. */
static double duration_value(const json_t *v) {
  if (json_is_number(v)) return json_number_value(v) > 0 ? json_number_value(v) : -1;
  double d = lp_duration_parse(json_string_value(v));
  return d > 0 ? d : -1;
}

static int load_controllers(const char *path, const json_t *section, lp_ctrl_settings *settings) {
  const char *key;
  json_t *value;
  json_object_foreach((json_t *)section, key, value) {
    if (strcmp(key, "workers") == 0) {
      if (!json_is_integer(value) || json_integer_value(value) < 1 || json_integer_value(value) > 1000) {
        fprintf(stderr, "luaprov run: %s: controllers.workers must be an integer from 1 to 1000\n", path);
        return -1;
      }
      settings->workers = (unsigned)json_integer_value(value);
      continue;
    }
    if (strcmp(key, "spotToSpotConsolidation") == 0) {
      if (!json_is_boolean(value)) {
        fprintf(stderr, "luaprov run: %s: controllers.spotToSpotConsolidation must be true or false\n", path);
        return -1;
      }
      settings->spot_to_spot_consolidation = json_is_true(value);
      continue;
    }
    size_t i = 0;
    while (i < sizeof durations / sizeof durations[0] && strcmp(durations[i].key, key) != 0) i++;
    if (i == sizeof durations / sizeof durations[0]) {
      fprintf(stderr, "luaprov run: %s: unknown setting controllers.%s\n", path, key);
      return -1;
    }
    double seconds = duration_value(value);
    if (seconds <= 0) {
      fprintf(stderr,
              "luaprov run: %s: controllers.%s must be a positive duration such as \"90s\" or \"5m\"\n", path,
              key);
      return -1;
    }
    *(double *)((char *)settings + durations[i].offset) = seconds;
  }
  return 0;
}

int lp_run_config_load(const char *path, lp_ctrl_settings *settings) {
  lp_error *err = NULL;
  json_t *doc = lp_load_json_or_yaml_file(path, &err);
  if (!doc) {
    fprintf(stderr, "luaprov run: --config: %s\n", err->message);
    lp_error_free(err);
    return -1;
  }
  int rc = 0;
  const char *key;
  json_t *value;
  if (!json_is_object(doc)) {
    fprintf(stderr, "luaprov run: %s: expected a mapping at the top\n", path);
    rc = -1;
  }
  json_object_foreach(json_is_object(doc) ? doc : NULL, key, value) {
    if (rc != 0) break;
    if (strcmp(key, "controllers") == 0 && json_is_object(value)) {
      rc = load_controllers(path, value, settings);
    } else {
      fprintf(stderr, "luaprov run: %s: unknown section %s (known: controllers)\n", path, key);
      rc = -1;
    }
  }
  json_decref(doc);
  return rc;
}

/* The engine's log lines, captured by a C test: log_capture_start sends them (JSON, from a level on)
 * to a temporary file, log_capture_stop puts the logger back on stderr at error level, as the tests'
 * main functions set it, and returns the lines decoded. Header-only: each test is its own executable. */
#ifndef LUAPROV_SPEC_LOG_CAPTURE_H
#define LUAPROV_SPEC_LOG_CAPTURE_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

static FILE *log_capture_file;

static void log_capture_start(lp_log_level level) {
  log_capture_file = tmpfile();
  lp_log_configure(level, LP_LOG_FORMAT_JSON, log_capture_file ? fileno(log_capture_file) : 2);
}

/* The lines written since log_capture_start as a JSON array of objects (a new reference); *text
 * (when not NULL) gets them as written, for checks on the raw bytes (the caller frees it). */
static json_t *log_capture_stop(char **text) {
  lp_log_configure(LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  json_t *lines = json_array();
  char line[16384];
  size_t total = 0;
  char *all = calloc(1, 1);
  if (log_capture_file) {
    rewind(log_capture_file); /* the logger wrote through the descriptor; one offset for both */
    while (fgets(line, sizeof line, log_capture_file)) {
      size_t n = strlen(line);
      all = realloc(all, total + n + 1);
      memcpy(all + total, line, n + 1);
      total += n;
      json_t *entry = json_loads(line, 0, NULL);
      if (entry) json_array_append_new(lines, entry);
    }
    fclose(log_capture_file);
    log_capture_file = NULL;
  }
  if (text)
    *text = all;
  else
    free(all);
  return lines;
}

/* The nth (from 0) captured line whose msg is msg, borrowed from lines; NULL when there is none. */
static const json_t *log_capture_line(const json_t *lines, const char *msg, size_t nth) {
  size_t i;
  const json_t *entry;
  json_array_foreach(lines, i, entry) {
    const char *m = json_string_value(json_object_get(entry, "msg"));
    if (m && strcmp(m, msg) == 0 && nth-- == 0) return entry;
  }
  return NULL;
}

#endif

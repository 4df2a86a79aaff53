/* Shared by the fuzz targets whose parser reads a file: writes an input to a private temporary
 * file (one per process, rewritten for each input) and returns its path. Header-only: each target
 * is an executable of its own. */
#ifndef LUAPROV_SPEC_FUZZ_FILE_H
#define LUAPROV_SPEC_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *fuzz_file_write(const char *name, const uint8_t *data, size_t size) {
  static char dir[64], path[128];
  if (!dir[0]) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/luaprov-fuzz-XXXXXX", tmp && *tmp && strlen(tmp) < 32 ? tmp : "/tmp");
    if (!mkdtemp(dir)) abort();
  }
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
  return path;
}

#endif

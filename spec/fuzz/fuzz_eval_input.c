/* fuzz_eval_input: the readers behind `luaprov eval`'s --nodeclaim, --nodeclass, --instance and
 * --pods files (engine/core/yaml.c: lp_load_json_or_yaml_file, which tries JSON then YAML, and
 * lp_yaml_parse; README.md). Each input is written to a file and loaded as eval loads it, then parsed
 * as YAML directly too (JSON inputs never reach the YAML parser through the loader), and the result is
 * serialised. eval's own checks of the loaded objects (cmd_eval.c) are not reached: they are static
 * there. A crash, a sanitizer report, a leak or a hang is a finding; an error is not. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/yaml.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void consume(json_t *doc, lp_error *err) {
  free(json_dumps(doc, JSON_ENCODE_ANY | JSON_COMPACT));
  json_decref(doc);
  lp_error_free(err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lp_error *err = NULL;
  json_t *doc = lp_load_json_or_yaml_file(fuzz_file_write("input.yaml", data, size), &err);
  consume(doc, err);
  err = NULL;
  doc = lp_yaml_parse((const char *)data, size, &err);
  consume(doc, err);
  return 0;
}

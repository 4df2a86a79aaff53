/* fuzz_kubeconfig: kubeconfig files (engine/kube/config.c: lp_kube_config_load_file; README.md). Each
 * input is written to a file and loaded; a config that loads has its token read and is freed (which
 * removes the temporary files its *-data fields were decoded into). A crash, a sanitizer report, a
 * leak or a hang is a finding; an InvalidConfig or InvalidYAML error is not. */
#include <stdint.h>

#include "fuzz_file.h"
#include "kube/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lp_error *err = NULL;
  lp_kube_config *cfg = lp_kube_config_load_file(fuzz_file_write("config", data, size), &err);
  if (cfg) {
    (void)lp_kube_config_token(cfg);
    lp_kube_config_free(cfg);
  }
  lp_error_free(err);
  return 0;
}

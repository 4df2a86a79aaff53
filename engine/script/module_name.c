/* What a module name says (module_name.h). */
#include "script/module_name.h"

#include <string.h>

#define PROVIDERS "providers."

const char *lp_module_bare(const char *name) {
  size_t n = strlen(LP_MODULE_DEFAULTS_PREFIX);
  return strncmp(name, LP_MODULE_DEFAULTS_PREFIX, n) == 0 ? name + n : name;
}

const char *lp_module_mapping(const char *name, char *buf, size_t cap) {
  name = lp_module_bare(name);
  size_t prefix = strlen(PROVIDERS);
  if (strncmp(name, PROVIDERS, prefix) != 0 || !name[prefix]) return NULL;
  size_t n = prefix + strcspn(name + prefix, ".");
  if (n >= cap) return NULL;
  memcpy(buf, name, n);
  buf[n] = '\0';
  return buf;
}

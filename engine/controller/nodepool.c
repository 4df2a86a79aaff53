#include "controller/nodepool.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lp_nodepool_hash(const json_t *nodepool, char out[17]) {
  json_t *tmpl = json_deep_copy(json_object_get(json_object_get(nodepool, "spec"), "template"));
  if (!tmpl) tmpl = json_object();
  json_t *spec = json_object_get(tmpl, "spec");
  json_object_del(spec, "requirements");
  json_object_del(spec, "resources");
  char *text = json_dumps(tmpl, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(text, strlen(text), digest, &n, EVP_sha256(), NULL);
  for (int i = 0; i < 8; i++) snprintf(out + 2 * i, 3, "%02x", digest[i]);
  free(text);
  json_decref(tmpl);
}

/* Resource vectors of the provisioner (provisioner_internal.h): requests, allocatable and limits as
 * fixed arrays of numbers, so that fitting a pod against hundreds of instance types compares doubles
 * instead of parsing quantities. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "contract/requirements.h"
#include "controller/provisioner_internal.h"
#include "core/error.h"

void pv_dims_init(pv_dims *d) {
  memset(d, 0, sizeof *d);
  d->name[PV_CPU] = lp_xstrdup("cpu");
  d->name[PV_MEMORY] = lp_xstrdup("memory");
  d->name[PV_PODS] = lp_xstrdup("pods");
  d->n = 3;
}

void pv_dims_free(pv_dims *d) {
  for (size_t i = 0; i < d->n; i++) free(d->name[i]);
  d->n = 0;
}

int pv_dim(pv_dims *d, const char *name) {
  for (size_t i = 0; i < d->n; i++)
    if (strcmp(d->name[i], name) == 0) return (int)i;
  if (d->n == PV_RES_MAX) return -1;
  d->name[d->n] = lp_xstrdup(name);
  return (int)d->n++;
}

void pv_res_add_list(pv_dims *d, pv_res *r, const json_t *list, double factor) {
  const char *name;
  const json_t *value;
  json_object_foreach((json_t *)list, name, value) {
    double q = 0;
    if (json_is_string(value))
      lp_quantity_parse(json_string_value(value), &q);
    else if (json_is_number(value))
      q = json_number_value(value);
    int i = q != 0 ? pv_dim(d, name) : -1;
    if (i >= 0) r->v[i] += factor * q;
  }
}

/* A request may exceed what is there by rounding noise only (millicores, Ki). */
static int within(double want, double have) {
  return want <= have + 1e-6 * (fabs(have) > 1 ? fabs(have) : 1);
}

int pv_res_fits(const pv_dims *d, const pv_res *want, const pv_res *have) {
  for (size_t i = 0; i < d->n; i++)
    if (want->v[i] > 0 && !within(want->v[i], have->v[i])) return 0;
  return 1;
}

pv_res pv_res_sum(const pv_res *r, const pv_res *s) {
  pv_res out;
  for (size_t i = 0; i < PV_RES_MAX; i++) out.v[i] = r->v[i] + s->v[i];
  return out;
}

json_t *pv_res_to_list(const pv_dims *d, const pv_res *r) {
  json_t *out = json_object();
  for (size_t i = 0; i < d->n; i++) {
    if (r->v[i] <= 0) continue;
    char text[48];
    lp_quantity_format(r->v[i], 1, text, sizeof text);
    json_object_set_new(out, d->name[i], json_string(text));
  }
  return out;
}

char *pv_res_shortfall(const pv_dims *d, const pv_res *want, const pv_res *have) {
  for (size_t i = 0; i < d->n; i++) {
    if (want->v[i] > 0 && !within(want->v[i], have->v[i])) {
      char w[48], h[48];
      lp_quantity_format(want->v[i], 1, w, sizeof w);
      lp_quantity_format(have->v[i] > 0 ? have->v[i] : 0, 1, h, sizeof h);
      return lp_xasprintf("%s: requested %s, allocatable %s", d->name[i], w, h);
    }
  }
  return lp_xstrdup("fits");
}

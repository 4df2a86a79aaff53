/* What the engine learns about an instance from outside the cloud API, handed to the CloudProvider:
 * the Node conditions the mapping says announce an interruption (a spot reclaim), marking an offering
 * unavailable when one is interrupted, and the optional registered(ctx, instance_id, node_name) hook
 * called once a NodeClaim's Node registered (a mapping may tag the instance Name=<node>).
 * docs/contracts.md#mappings states the optional fields. */
#include <string.h>

#include "contract/cloudprovider_internal.h"
#include "core/log.h"

json_t *lp_cloudprovider_interruption_conditions(lp_cloudprovider *cp) {
  json_t *list = lp_script_host_module_strings(cp->scripts, cp->mapping, "interruption_conditions");
  return list ? list : json_array();
}

void lp_cp_mark_unavailable(lp_cloudprovider *cp, const char *type, const char *zone,
                            const char *capacity_type, const char *reason) {
  json_t *offering = json_pack("{s:s, s:s}", "zone", zone, "capacity_type", capacity_type);
  char key[512];
  cp_offering_key(key, sizeof key, type, offering);
  json_decref(offering);
  lp_cache_set(cp->unavailable, key, strlen(key), "1", 1, 0);
  lp_info(LOGGER, "offering marked unavailable", LPF_STR("instance_type", type), LPF_STR("zone", zone),
          LPF_STR("capacity_type", capacity_type), LPF_STR("reason", reason),
          LPF_NUM("ttl_s", lp_cache_ttl(cp->unavailable)));
}

/* ---- registered ---------------------------------------------------------------------------- */

static void registered_done(op *o, json_t *values, lp_error *err) {
  if (err && err->reason && strcmp(err->reason, LP_ERR_NOT_EXPORTED) == 0) {
    lp_error_free(err); /* the hook is optional: nothing to do */
    cp_finish(o, json_false(), NULL);
    return;
  }
  json_decref(values);
  cp_finish(o, err ? NULL : json_true(), err);
}

static void registered_with_id(op *o, const char *id) {
  const char *node = json_string_value(json_object_get(o->nodeclaim, "node"));
  cp_call(o, o->cp->mapping, "registered", json_pack("[Oss]", o->cp->ctx, id, node), registered_done);
}

static void registered_parsed(op *o, json_t *values, lp_error *err) {
  cp_parsed_for(o, values, err, registered_with_id);
}

void lp_cp_registered(lp_cloudprovider *cp, const char *provider_id, const char *node_name,
                      lp_cp_done_fn done, void *ud) {
  op *o = cp_op_new(cp, done, ud);
  o->provider_id = lp_xstrdup(provider_id);
  o->nodeclaim = json_pack("{s:s}", "node", node_name); /* carried to the call */
  cp_call(o, cp->mapping, "parse_provider_id", json_pack("[s]", provider_id), registered_parsed);
}

#include "controller/defs.h"
#include "controller/manager.h"

/* Order matters only for the first pass after start: classes resolve before claims need them. */
/* One controller per line reads better than the columns clang-format would make. */
/* clang-format off */
const lp_controller_def *const lp_controllers_default[] = {
    &lp_nodeclass_controller,
    &lp_nodepool_status_controller,
    &lp_nodeclaim_lifecycle_controller,
    &lp_termination_controller,
    &lp_gc_controller,
    &lp_provisioner_controller,
    &lp_repair_controller,
    &lp_drift_controller,
    &lp_disruption_controller,
    &lp_interruption_controller,
    &lp_tagging_controller,
    &lp_expiration_controller,
    &lp_consolidatable_controller,
    NULL,
};
/* clang-format on */

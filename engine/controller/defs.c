#include "controller/defs.h"
#include "controller/manager.h"

/* Order matters only for the first pass after start: classes resolve before claims need them. */
const lp_controller_def *const lp_controllers_default[] = {
    &lp_nodeclass_controller,
    &lp_nodeclaim_lifecycle_controller,
    &lp_termination_controller,
    &lp_gc_controller,
    NULL,
};

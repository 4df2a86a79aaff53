/* The engine's controllers (one file each); the manager runs lp_controllers_default, tests pick. */
#ifndef LUAPROV_CONTROLLER_DEFS_H
#define LUAPROV_CONTROLLER_DEFS_H

#include "controller/controller.h"

extern const lp_controller_def lp_nodeclass_controller;           /* nodeclass.c */
extern const lp_controller_def lp_nodepool_status_controller;     /* nodepool_status.c */
extern const lp_controller_def lp_nodeclaim_lifecycle_controller; /* lifecycle.c */
extern const lp_controller_def lp_termination_controller;         /* termination.c */
extern const lp_controller_def lp_gc_controller;                  /* gc.c */
extern const lp_controller_def lp_provisioner_controller;         /* provisioner.c */
extern const lp_controller_def lp_repair_controller;              /* repair.c */
extern const lp_controller_def lp_drift_controller;               /* drift.c */
extern const lp_controller_def lp_disruption_controller;          /* disruption.c */
extern const lp_controller_def lp_interruption_controller;        /* interruption.c */
extern const lp_controller_def lp_tagging_controller;             /* tagging.c */
extern const lp_controller_def lp_expiration_controller;          /* expiration.c */
extern const lp_controller_def lp_consolidatable_controller;      /* consolidatable.c */

#endif

/* `luaprov demo`: the scripted story, told against a real `luaprov run --sim` child process
 * by a client that does what an operator would (kubectl-style requests, gRPC calls as the Cluster
 * Autoscaler makes them) and checks each outcome. demo.c runs the child and the requests; demo_story.c
 * is the story; demo_grpc.c the externalgrpc calls. */
#ifndef LUAPROV_CLI_DEMO_H
#define LUAPROV_CLI_DEMO_H

#include <jansson.h>
#include <sys/types.h>

typedef struct demo {
  double speed;       /* simulated seconds per wall second */
  char workdir[256];  /* scratch: the operator's scripts, the engine's config and log */
  char log_path[300]; /* the engine's JSON log */
  pid_t engine;       /* the `luaprov run --sim` child */
  char metrics[128], grpc[128];
  char kubernetes[160], cloud[160], bizfly[160]; /* cloud: the simulator the mapping's `sim` names */
  json_t *mapping; /* the CloudProvider mapping's exports: nodeclass (descriptor), sim, demo */
  void *curl;
  int step, failed;
  double started;
  /* the summary */
  int nodes_launched, pods_bound, pods_recreated, nodes_drifted, nodes_replaced, nodes_repaired, scale_ups;
  int nodes_consolidated;
  double cost_before, cost_after; /* the instances' hourly price before and after consolidation */
  int pods_kept; /* the ReplicaSet the demo plays keeps this many pods (NPODS until scaled down) */
  long long generation;
} demo;

/* Reads the CloudProvider mapping's exports of the tree under workdir into d->mapping. Returns 0, or
 * -1 after printing why. */
int demo_read_mapping(demo *d);
/* Starts the engine child with the simulators, the externalgrpc server and the operator's scripts
 * under workdir; waits for its start line. Returns 0, or -1 after printing why. */
int demo_start_engine(demo *d, const char *self);
/* SIGTERM, wait; returns the child's exit status (0 when it shut down cleanly). */
int demo_stop_engine(demo *d);

/* A request to the simulated Kubernetes API (path from /api or /apis; body JSON or NULL; PATCH is a
 * merge patch). Returns the decoded answer (caller decrefs) or NULL; *status gets the HTTP status. */
json_t *demo_kube(demo *d, const char *method, const char *path, const char *body, long *status);
/* The same for an admin path of a simulator (base URL d->cloud, d->kubernetes, d->bizfly). */
json_t *demo_admin(demo *d, const char *base, const char *method, const char *path, const char *body);
/* One sample of the engine's /metrics ("name" or "name{labels}"), summed over every series whose name
 * and labels start with prefix; 0 when absent. */
double demo_metric(demo *d, const char *prefix);
/* Lines of the engine's log containing needle, counted. */
int demo_log_count(demo *d, const char *needle);

/* A step: "[n] title", then its lines. */
void demo_step(demo *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void demo_ok(demo *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void demo_note(demo *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Marks the demo failed, prints why and the engine log's last lines. Returns -1. */
int demo_fail(demo *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Polls progress(d, ud, line, cap) every 100 ms until it returns 1 (done) or timeout_s wall seconds
 * pass (-1: fails the step naming what). progress fills line with "what so far" (e.g. "2/3 nodes
 * ready"), printed whenever it changes, so a long wait shows movement. */
int demo_wait(demo *d, const char *what, double timeout_s,
              int (*progress)(demo *d, void *ud, char *line, size_t cap), void *ud);

/* The externalgrpc calls (demo_grpc.c): NodeGroups as "id min max" lines, TargetSize, IncreaseSize.
 * Each returns 0 or -1 with *error (static text or the grpc-message) set. */
int demo_grpc_node_groups(demo *d, char ids[][64], int max, int *count, const char **error);
int demo_grpc_target_size(demo *d, const char *id, int *size, const char **error);
int demo_grpc_increase_size(demo *d, const char *id, int delta, const char **error);
int demo_grpc_refresh(demo *d, const char **error);
/* Releases the connection state of the calls above. */
void demo_grpc_close(demo *d);

/* The story (demo_story.c). Returns 0 when every step checked out. */
int demo_story(demo *d);

#endif

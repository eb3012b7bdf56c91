/* fault_coll.h — a collective plugin for the no-hang tests (scenario.c):
 * it forwards every call to a real collective plugin ("inner": mpi, gloo,
 * file) and, once armed on the faulty rank, makes that rank stall or exit
 * when it reaches a chosen call, so the other ranks are left waiting in the
 * middle of a save or a load. Registered in-process under the name "fault"
 * (dcp_plugin_register); the inner plugin is dlopen'd from DCP_PLUGIN_PATH. */
#ifndef DCP_TEST_FAULT_COLL_H
#define DCP_TEST_FAULT_COLL_H

/* What the faulty rank does at the chosen call. */
typedef enum fc_action {
  FC_STALL, /* writes its pid to the pid file, then stops itself (SIGSTOP)
               and never continues: it can only be killed */
  FC_EXIT,  /* _exit(3) at once, without closing anything */
  FC_PAUSE  /* writes its pid to the pid file, waits until "<pid file>.go"
               exists (a harness changes the network meanwhile:
               tests/hosts; a minute at most), then makes the call */
} fc_action;

/* Loads dcp-coll-<inner>.so (first match on DCP_PLUGIN_PATH) and registers
 * the forwarding table "fault" over it. Returns 0, or -1 with a message on
 * stderr (plugin not found, no entry symbol, registration refused). */
int fc_register(const char *inner);

/* From now on, the nth call (1-based) of collective op `op` ("barrier",
 * "bcast", "allgather", "gatherv", "scatterv", "allreduce", "group_bcast",
 * or "any" for every kind) does `action` instead of running. pid_file (for
 * FC_STALL) is copied. Returns 0, or -1 for an unknown op or nth < 1. */
int fc_arm(fc_action action, const char *op, int nth, const char *pid_file);

/* Does `action` now (the fault at "start": before the save or load). */
void fc_fire(fc_action action, const char *pid_file);

#endif

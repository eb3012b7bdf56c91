/* fault_coll.c — the forwarding collective with a stall/exit fault (see
 * fault_coll.h). The communicator handle is the inner plugin's own: every
 * function passes it through unchanged, so the inner plugin behaves exactly
 * as it does when loaded directly. */
#define _POSIX_C_SOURCE 200809L
#include "fault_coll.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dcp.h"
#include "dcp_plugin.h"

static const dcp_coll_plugin *inner;
static dcp_coll_plugin table;

static struct {
  int armed;
  fc_action action;
  char op[32];
  int nth, seen;
  char pid_file[4096];
} fault;

static const char *const OPS[] = {"barrier", "bcast", "allgather", "gatherv",
                                  "scatterv", "allreduce", "group_bcast", "any"};

void fc_fire(fc_action action, const char *pid_file) {
  if (action == FC_EXIT) {
    fprintf(stderr, "fault coll: rank exits now (pid %d)\n", (int)getpid());
    _exit(3);
  }
  FILE *f = fopen(pid_file, "w");
  if (f) {
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
  }
  if (action == FC_PAUSE) {
    char go[4200];
    snprintf(go, sizeof go, "%s.go", pid_file);
    fprintf(stderr, "fault coll: rank pauses until %s exists (pid %d)\n", go, (int)getpid());
    /* at most a minute: a harness that died never leaves it waiting forever */
    for (int i = 0; i < 12000 && access(go, F_OK) != 0; i++)
      nanosleep(&(struct timespec){0, 5000000}, NULL);
    return;
  }
  fprintf(stderr, "fault coll: rank stalls now (pid %d, SIGSTOP)\n", (int)getpid());
  for (;;) { /* even a SIGCONT does not make it go on */
    raise(SIGSTOP);
    pause();
  }
}

/* Counts a call of op and fires the fault when it is the chosen one. */
static void maybe_fault(const char *op) {
  if (!fault.armed || (strcmp(fault.op, "any") != 0 && strcmp(fault.op, op) != 0)) return;
  if (++fault.seen == fault.nth) fc_fire(fault.action, fault.pid_file);
}

int fc_arm(fc_action action, const char *op, int nth, const char *pid_file) {
  int known = 0;
  for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++) known |= !strcmp(OPS[i], op);
  if (!known || nth < 1 || strlen(op) >= sizeof fault.op) return -1;
  snprintf(fault.op, sizeof fault.op, "%s", op);
  snprintf(fault.pid_file, sizeof fault.pid_file, "%s", pid_file ? pid_file : "/dev/null");
  fault.action = action;
  fault.nth = nth;
  fault.seen = 0;
  fault.armed = 1;
  return 0;
}

/* ---- forwarding -------------------------------------------------------- */

static int f_open(const dcp_coll_config *cfg, dcp_comm **out, dcp_plugin_err *err) {
  return inner->open(cfg, out, err);
}
static void f_close(dcp_comm *c) {
  inner->close(c);
}
static int32_t f_rank(const dcp_comm *c) {
  return inner->rank(c);
}
static int32_t f_size(const dcp_comm *c) {
  return inner->size(c);
}
static int f_barrier(dcp_comm *c, dcp_plugin_err *err) {
  maybe_fault("barrier");
  return inner->barrier(c, err);
}
static int f_bcast(dcp_comm *c, void *buf, size_t len, int32_t root, dcp_plugin_err *err) {
  maybe_fault("bcast");
  return inner->bcast(c, buf, len, root, err);
}
static int f_allgather(dcp_comm *c, const void *send, size_t len, void *recv,
                       dcp_plugin_err *err) {
  maybe_fault("allgather");
  return inner->allgather(c, send, len, recv, err);
}
static int f_gatherv(dcp_comm *c, const void *send, size_t len, void *recv, const size_t *lens,
                     int32_t root, dcp_plugin_err *err) {
  maybe_fault("gatherv");
  return inner->gatherv(c, send, len, recv, lens, root, err);
}
static int f_scatterv(dcp_comm *c, const void *send, const size_t *lens, void *recv, size_t len,
                      int32_t root, dcp_plugin_err *err) {
  maybe_fault("scatterv");
  return inner->scatterv(c, send, lens, recv, len, root, err);
}
static int f_allreduce(dcp_comm *c, int64_t *vals, size_t n, uint32_t op, dcp_plugin_err *err) {
  maybe_fault("allreduce");
  return inner->allreduce_i64(c, vals, n, op, err);
}
static int f_group_bcast(dcp_comm *c, const int32_t *ranks, size_t n, void *buf, size_t len,
                         int32_t root, dcp_plugin_err *err) {
  maybe_fault("group_bcast");
  return inner->group_bcast(c, ranks, n, buf, len, root, err);
}

/* The inner plugin's table: dcp-coll-<name>.so on DCP_PLUGIN_PATH. */
static const dcp_coll_plugin *load_inner(const char *name) {
  const char *path = getenv("DCP_PLUGIN_PATH");
  char *copy = strdup(path ? path : ""), *save = NULL;
  const dcp_coll_plugin *t = NULL;
  for (char *d = strtok_r(copy, ":", &save); d && !t; d = strtok_r(NULL, ":", &save)) {
    char so[4096];
    snprintf(so, sizeof so, "%s/dcp-coll-%s.so", d, name);
    if (access(so, R_OK) != 0) continue;
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    dcp_plugin_entry_fn entry = h ? (dcp_plugin_entry_fn)dlsym(h, DCP_PLUGIN_ENTRY_SYMBOL) : NULL;
    if (!entry) fprintf(stderr, "fault coll: %s: %s\n", so, dlerror());
    t = entry ? entry(DCP_PLUGIN_COLL) : NULL;
  }
  free(copy);
  if (!t) fprintf(stderr, "fault coll: no dcp-coll-%s.so on DCP_PLUGIN_PATH=%s\n", name, path);
  return t;
}

int fc_register(const char *name) {
  if (!(inner = load_inner(name))) return -1;
  table = (dcp_coll_plugin){
      .abi_version = DCP_PLUGIN_ABI_VERSION, .struct_size = sizeof table, .name = "fault",
      .caps = inner->caps, .open = f_open, .close = f_close, .rank = f_rank, .size = f_size,
      .barrier = f_barrier, .bcast = f_bcast, .allgather = f_allgather, .gatherv = f_gatherv,
      .scatterv = f_scatterv, .allreduce_i64 = f_allreduce,
      .group_bcast = inner->group_bcast ? f_group_bcast : NULL};
  dcp_status rc = dcp_plugin_register(DCP_PLUGIN_COLL, &table);
  if (rc) fprintf(stderr, "fault coll: register: %s\n", dcp_strerror(rc));
  return rc ? -1 : 0;
}

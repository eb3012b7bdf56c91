/* manager_int.h — the manager's handle and what its files share. */
#ifndef DCP_MANAGER_MANAGER_INT_H
#define DCP_MANAGER_MANAGER_INT_H

#include <signal.h>
#include <stdint.h>

#include "base/err.h"
#include "dcp.h"
#include "manager/policy.h"
#include "manager/steps.h"
#include "runtime/lease.h"
#include "runtime/rt.h"

struct dcp_manager {
  dcp_ctx *ctx;
  char *root;
  dcp_manager_options opts; /* keep_steps points at keep */
  int64_t *keep;            /* owned copy of the keep list */
  dcpi_rt rt;               /* rank 0, not read-only: storage open on root */
  dcpi_lease *lease;        /* rank 0, not read-only: the root's lease */
  int64_t newest;           /* newest durable step (-1: none), on every rank */
  dcp_async *pending;       /* the async save not finished yet, or NULL */
  int64_t pending_step;
  uint64_t root_plan_sum;   /* rank 0: trailing xxh3 of the .plan last copied
                               into the root (0: none yet) */
  dcp_manager_gc_report last_gc;
  volatile sig_atomic_t want_save; /* dcp_manager_request_save */
  int signals_held;                /* this manager holds the signal handler */
};

/* A log line on rank 0 (opts.log_fn, or stderr), unless QUIET. */
void dcpi_manager_log(dcp_manager *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Collective: every rank's outcome of a phase (dcpi_rt_agree) into err. */
dcp_status dcpi_manager_agree(dcp_manager *m, dcp_status local, dcpi_err *err);

/* Collective: rank 0's len bytes at buf to every rank. */
dcp_status dcpi_manager_bcast(dcp_manager *m, void *buf, size_t len, dcpi_err *err);

/* The retention verdicts of a scan (v[0..n) sorted by step). */
dcp_status dcpi_manager_decide(dcp_manager *m, const dcpi_step_scan *v, size_t n,
                               dcpi_verdict *verdicts, dcpi_decision_summary *sum);

/* Restore the signal handlers this manager installed (preempt.c). */
void dcpi_manager_signals_release(dcp_manager *m);

#endif

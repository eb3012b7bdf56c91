/* preempt.c — the preemption save ("last words"): a signal handler that
 * only sets a flag, an agreement of every rank at a step boundary, and a
 * save bounded by a grace period (dcp.h, docs/manager.md "Preemption"). */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "core/ctx.h"
#include "manager/manager_int.h"

/* The manager whose flag the handler sets; one per process. */
static _Atomic(dcp_manager *) signal_owner;
static struct sigaction old_term, old_usr1;

static void on_signal(int sig) {
  (void)sig;
  dcp_manager *m = atomic_load(&signal_owner);
  if (m) m->want_save = 1;
}

void dcp_manager_request_save(dcp_manager *m) {
  if (m) m->want_save = 1;
}

dcp_status dcp_manager_install_signal_handler(dcp_manager *m) {
  if (!m) return DCP_EINVAL;
  dcpi_err err;
  dcpi_err_clear(&err);
  dcp_manager *expected = NULL;
  if (m->signals_held) return DCP_OK;
  if (!atomic_compare_exchange_strong(&signal_owner, &expected, m)) {
    dcpi_fail(&err, DCP_EBUSY, "another checkpoint manager of this process holds the "
                               "preemption signal handler");
    return dcpi_ctx_report(m->ctx, &err);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGTERM, &sa, &old_term) != 0 || sigaction(SIGUSR1, &sa, &old_usr1) != 0) {
    int e = errno;
    sigaction(SIGTERM, &old_term, NULL);
    atomic_store(&signal_owner, NULL);
    dcpi_fail(&err, DCP_EIO, "sigaction: %s", strerror(e));
    return dcpi_ctx_report(m->ctx, &err);
  }
  m->signals_held = 1;
  return DCP_OK;
}

void dcpi_manager_signals_release(dcp_manager *m) {
  if (!m->signals_held) return;
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGUSR1, &old_usr1, NULL);
  atomic_store(&signal_owner, NULL);
  m->signals_held = 0;
}

dcp_status dcp_manager_should_save(dcp_manager *m, int *out) {
  if (out) *out = 0;
  if (!m || !out) return DCP_EINVAL;
  dcpi_rt rt = {.ctx = m->ctx, .path = m->root};
  dcpi_err_clear(&rt.err);
  int64_t flag = m->want_save ? 1 : 0;
  dcp_status rc = dcpi_rt_allreduce(&rt, &flag, 1, DCP_REDUCE_MAX);
  if (rc) {
    dcpi_err err;
    dcpi_fail(&err, rc,
              "the preemption agreement failed (a rank did not join within the context's "
              "timeout, or is gone): no preemption save is taken: %s",
              rt.err.msg);
    return dcpi_ctx_report(m->ctx, &err);
  }
  if (flag) m->want_save = 0;
  *out = flag != 0;
  return DCP_OK;
}

dcp_status dcp_manager_save_now(dcp_manager *m, int64_t step, dcp_state *st,
                                const dcp_save_options *opts, int64_t grace_ms) {
  if (!m || !st) return DCP_EINVAL;
  dcp_status rc = dcp_manager_save_async(m, step, st, opts);
  if (rc) return rc;
  rc = dcp_manager_wait(m, grace_ms < 0 ? -1 : grace_ms);
  if (rc == DCP_ETIMEDOUT && m->pending) {
    dcpi_err err;
    dcpi_fail(&err, DCP_ETIMEDOUT,
              "the preemption save of step %lld was not durable within %lld ms: aborted "
              "(the previous steps are untouched)",
              (long long)step, (long long)grace_ms);
    dcp_manager_abort(m);
    return dcpi_ctx_report(m->ctx, &err);
  }
  return rc;
}

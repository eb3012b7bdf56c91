/* memtier.c — Context.set_memtier(keep=1, budget_bytes=0, linger_ms=0,
 * job=None, replicas=0, peer_jump=0) and Context.memtier_stop(): the memory tier (dcp_memtier_set,
 * dcp_memtier_stop; docs/recovery.md). Where a load's bytes came from is in
 * Context.stats(): mem_tier, mem_read_bytes, mem_fallback_bytes. */
#include "pydcp.h"

PyObject *dcpi_py_ctx_set_memtier(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"keep", "budget_bytes", "linger_ms", "job", "replicas", "peer_jump", NULL};
  unsigned int keep = 1, replicas = 0;
  unsigned long long budget = 0;
  long long linger = 0;
  const char *job = NULL;
  int jump = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$IKLzIi", kw, &keep, &budget, &linger, &job,
                                   &replicas, &jump))
    return NULL;
  dcpi_py_ctx *c = dcpi_py_ctx_usable(self);
  if (!c) return NULL;
  dcp_memtier_options o;
  dcp_memtier_options_init(&o);
  o.keep = keep;
  o.budget_bytes = budget;
  o.linger_ms = linger;
  o.job = job;
  o.replicas = replicas;
  o.peer_jump = jump;
  dcp_status rc = dcp_memtier_set(c->ctx, &o); /* copies job */
  if (rc) return dcpi_py_raise_ctx(c->ctx, rc);
  Py_RETURN_NONE;
}

PyObject *dcpi_py_ctx_memtier_stop(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_ctx *c = dcpi_py_ctx_usable(self);
  if (!c) return NULL;
  dcp_status rc;
  Py_BEGIN_ALLOW_THREADS
  rc = dcp_memtier_stop(c->ctx);
  Py_END_ALLOW_THREADS
  if (rc) return dcpi_py_raise_ctx(c->ctx, rc);
  Py_RETURN_NONE;
}

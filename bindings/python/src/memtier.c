/* memtier.c — Context.set_memtier(keep=1, budget_bytes=0, linger_ms=0,
 * job=None, replicas=0, peer_jump=0) and Context.memtier_stop(): the memory tier (dcp_memtier_set,
 * dcp_memtier_stop; docs/recovery.md). Where a load's bytes came from is in
 * Context.stats(): mem_tier, mem_read_bytes, mem_fallback_bytes. */
#include "pydcp.h"

PyObject *dcpi_py_ctx_set_memtier(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"keep", "budget_bytes", "linger_ms", "job", "replicas", "peer_jump", NULL};
  PyObject *keep_obj = NULL, *budget_obj = NULL, *replicas_obj = NULL;
  uint64_t keep = 1, replicas = 0, budget = 0;
  long long linger = 0;
  const char *job = NULL;
  int jump = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOLzOi", kw, &keep_obj, &budget_obj, &linger,
                                   &job, &replicas_obj, &jump) ||
      dcpi_py_uint_arg(keep_obj, "keep", UINT32_MAX, &keep) ||
      dcpi_py_uint_arg(budget_obj, "budget_bytes", UINT64_MAX, &budget) ||
      dcpi_py_uint_arg(replicas_obj, "replicas", UINT32_MAX, &replicas))
    return NULL;
  dcpi_py_ctx *c = dcpi_py_ctx_usable(self);
  if (!c) return NULL;
  dcp_memtier_options o;
  dcp_memtier_options_init(&o);
  o.keep = (uint32_t)keep;
  o.budget_bytes = budget;
  o.linger_ms = linger;
  o.job = job;
  o.replicas = (uint32_t)replicas;
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

/* replica.c — Context.check_replicas(state, report_only=False): the
 * standalone replica check (dcp_check_replicas) with the GIL released. It
 * returns the report as a dict, or raises dcp.ReplicaError (a mismatch,
 * unless report_only) or the other errors of the call. */
#include "pydcp.h"

PyObject *dcpi_py_ctx_check_replicas(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"state", "report_only", NULL};
  PyObject *state_obj;
  int report_only = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$p", kw, &state_obj, &report_only))
    return NULL;
  dcpi_py_ctx *c = dcpi_py_ctx_usable(self);
  if (!c) return NULL;
  dcpi_py_state *s = dcpi_py_state_check(state_obj, c, 0);
  if (!s) return NULL;
  dcp_replica_report rep = {.struct_size = sizeof rep};
  dcp_status rc;
  dcpi_py_ctx_enter(c);
  Py_BEGIN_ALLOW_THREADS
  rc = dcp_check_replicas(c->ctx, s->st, report_only ? DCP_CHECK_REPORT_ONLY : 0u, &rep);
  Py_END_ALLOW_THREADS
  dcpi_py_ctx_leave(c);
  if (rc) return dcpi_py_raise_ctx(c->ctx, rc);
  return Py_BuildValue("{s:i,s:K,s:K,s:K,s:K,s:s}", "status", (int)rep.status, "boxes_checked",
                       (unsigned long long)rep.boxes_checked, "mismatches",
                       (unsigned long long)rep.mismatches, "hashed_bytes",
                       (unsigned long long)rep.hashed_bytes, "exchange_bytes",
                       (unsigned long long)rep.exchange_bytes, "message", rep.message);
}

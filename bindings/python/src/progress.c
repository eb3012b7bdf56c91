/* progress.c — _dcp.set_phase_progress(ctx, fn): dcp_ctx_set_phase_progress
 * for Python. fn(phase, done, total) gets the phase's name ("save", "load",
 * "import", "export", "verify") and bytes; it runs on the thread doing the
 * work (the caller's, or a load's reader thread) with the GIL taken back. */
#include "pydcp.h"

static void phase_trampoline(void *arg, dcp_phase phase, uint64_t done, uint64_t total) {
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *fn = ((dcpi_py_ctx *)arg)->phase_progress;
  if (fn) {
    PyObject *r = PyObject_CallFunction(fn, "sKK", dcp_phase_name(phase),
                                        (unsigned long long)done, (unsigned long long)total);
    if (!r) PyErr_WriteUnraisable(fn); /* it cannot stop the operation */
    Py_XDECREF(r);
  }
  PyGILState_Release(g);
}

PyObject *dcpi_py_set_phase_progress(PyObject *module, PyObject *args) {
  (void)module;
  PyObject *ctx, *fn;
  if (!PyArg_ParseTuple(args, "OO:set_phase_progress", &ctx, &fn)) return NULL;
  dcpi_py_ctx *c = dcpi_py_ctx_usable(ctx);
  if (!c) return NULL;
  if (fn != Py_None && !PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "set_phase_progress needs a callable or None");
    return NULL;
  }
  if (c->busy) return dcpi_py_raise(DCP_EINVAL, "the context is in use by another thread");
  Py_CLEAR(c->phase_progress);
  if (fn != Py_None) c->phase_progress = Py_NewRef(fn);
  dcp_ctx_set_phase_progress(c->ctx, c->phase_progress ? phase_trampoline : NULL, c);
  Py_RETURN_NONE;
}

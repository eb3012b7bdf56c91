/* errors.c — dcp.Error and its subclasses, one per dcp_status code. Every
 * failing call raises the subclass of its status with the library's
 * message, and the instance carries .status (the negative code), .code
 * ("DCP_ENOTFOUND") and .message. */
#include "pydcp.h"

#include <stdarg.h>
#include <stdio.h>

typedef struct {
  dcp_status status;
  const char *code;  /* the C enumerator */
  const char *klass; /* the Python class name in module dcp */
} error_kind;

static const error_kind kinds[] = {
    {DCP_EINVAL, "DCP_EINVAL", "InvalidError"},
    {DCP_ENOMEM, "DCP_ENOMEM", "NoMemoryError"},
    {DCP_EOVERFLOW, "DCP_EOVERFLOW", "SizeOverflowError"},
    {DCP_ECORRUPT, "DCP_ECORRUPT", "CorruptError"},
    {DCP_EVERSION, "DCP_EVERSION", "VersionError"},
    {DCP_EMISMATCH, "DCP_EMISMATCH", "MismatchError"},
    {DCP_EBOUNDS, "DCP_EBOUNDS", "BoundsError"},
    {DCP_EOVERLAP, "DCP_EOVERLAP", "OverlapError"},
    {DCP_EEXIST, "DCP_EEXIST", "ExistsError"},
    {DCP_ENOTFOUND, "DCP_ENOTFOUND", "NotFoundError"},
    {DCP_ESCOPE, "DCP_ESCOPE", "ScopeError"},
    {DCP_ENAME, "DCP_ENAME", "InvalidNameError"},
    {DCP_EINCOMPLETE, "DCP_EINCOMPLETE", "IncompleteError"},
    {DCP_EIO, "DCP_EIO", "StorageError"},
    {DCP_ENOSPC, "DCP_ENOSPC", "NoSpaceError"},
    {DCP_ETIMEDOUT, "DCP_ETIMEDOUT", "TimedOutError"},
    {DCP_EPEER, "DCP_EPEER", "PeerError"},
    {DCP_EPLUGIN, "DCP_EPLUGIN", "PluginError"},
    {DCP_EBUSY, "DCP_EBUSY", "BusyError"},
    {DCP_ESTALE, "DCP_ESTALE", "StaleError"},
};
#define NKINDS (sizeof kinds / sizeof kinds[0])

static PyObject *base_error;       /* dcp.Error */
static PyObject *classes[NKINDS]; /* parallel to kinds */

int dcpi_py_errors_init(PyObject *module) {
  base_error = PyErr_NewExceptionWithDoc(
      "dcp.Error",
      "An error reported by libdcp. .status is the dcp_status code (negative), "
      ".code its C name, .message the library's message.",
      PyExc_Exception, NULL);
  if (!base_error || PyModule_AddObjectRef(module, "Error", base_error) < 0) return -1;
  for (size_t i = 0; i < NKINDS; i++) {
    char qual[64];
    snprintf(qual, sizeof qual, "dcp.%s", kinds[i].klass);
    char doc[96];
    snprintf(doc, sizeof doc, "libdcp status %s (%s).", kinds[i].code,
             dcp_strerror(kinds[i].status));
    classes[i] = PyErr_NewExceptionWithDoc(qual, doc, base_error, NULL);
    if (!classes[i] || PyModule_AddObjectRef(module, kinds[i].klass, classes[i]) < 0) return -1;
  }
  return 0;
}

/* The kind of status, or NULL for a code this binding does not know (a
 * newer library): those raise the base class. */
static const error_kind *kind_of(dcp_status status, PyObject **klass) {
  for (size_t i = 0; i < NKINDS; i++)
    if (kinds[i].status == status) {
      *klass = classes[i];
      return &kinds[i];
    }
  *klass = base_error;
  return NULL;
}

/* Set attribute name of exc to value (stolen). Returns -1 on failure. */
static int set_attr(PyObject *exc, const char *name, PyObject *value) {
  if (!value) return -1;
  int rc = PyObject_SetAttrString(exc, name, value);
  Py_DECREF(value);
  return rc;
}

PyObject *dcpi_py_raise(dcp_status status, const char *msg) {
  PyObject *klass;
  const error_kind *k = kind_of(status, &klass);
  if (!msg || !msg[0]) msg = dcp_strerror(status);
  PyObject *exc = PyObject_CallFunction(klass, "s", msg);
  if (!exc) return NULL;
  if (set_attr(exc, "status", PyLong_FromLong((long)status)) < 0 ||
      set_attr(exc, "code", PyUnicode_FromString(k ? k->code : "DCP_UNKNOWN")) < 0 ||
      set_attr(exc, "message", PyUnicode_FromString(msg)) < 0) {
    Py_DECREF(exc);
    return NULL;
  }
  PyErr_SetObject(klass, exc);
  Py_DECREF(exc);
  return NULL;
}

PyObject *dcpi_py_raise_ctx(const dcp_ctx *ctx, dcp_status status) {
  return dcpi_py_raise(status, ctx ? dcp_ctx_last_error(ctx) : NULL);
}

PyObject *dcpi_py_raisef(dcp_status status, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dcpi_py_raise(status, msg);
}

/* errors.c — dcp.Error and its subclasses, one per dcp_status code. Every
 * failing call raises the subclass of its status with the library's
 * message, and the instance carries .status (the negative code), .code
 * ("DCP_ENOTFOUND") and .message. */
#include "pydcp.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
    {DCP_EREPLICA, "DCP_EREPLICA", "ReplicaError"},
};
#define NKINDS (sizeof kinds / sizeof kinds[0])

static int set_attr(PyObject *exc, const char *name, PyObject *value);

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
    /* class defaults, for errors raised by the Python layer (dcp.torch, ...) */
    if (set_attr(classes[i], "status", PyLong_FromLong((long)kinds[i].status)) < 0 ||
        set_attr(classes[i], "code", PyUnicode_FromString(kinds[i].code)) < 0)
      return -1;
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

/* The library's messages name its C API ("set DCP_SAVE_OVERWRITE",
 * "dcp_async_set_coordination"); from Python they name what a Python
 * caller passes or calls instead. Environment variables (DCP_WRITER,
 * DCP_PLUGIN_PATH) are the same from both sides and stay. */
static const struct {
  const char *c, *py;
} python_names[] = {
    {"DCP_SAVE_OVERWRITE", "overwrite=True"},
    {"DCP_SAVE_COMPRESS", "compress=True"},
    {"DCP_LOAD_METADATA_PER_RANK", "flags=dcp.LOAD_METADATA_PER_RANK"},
    {"DCP_LOAD_NO_PIPELINE", "flags=dcp.LOAD_NO_PIPELINE"},
    {"DCP_MAX_NAME", "dcp.MAX_NAME"},
    {"DCP_MAX_NDIM", "dcp.MAX_NDIM"},
    {"dcp_async_set_coordination", "Context.set_async_coordination()"},
    {"dcp_async_set_staging", "the async staging mode"},
    {"dcp_async_abort", "abort()"},
    {"dcp_async_save", "dcp.async_save()"},
    {"dcp_async_test", "done()"},
    {"dcp_async_wait", "wait()"},
    {"dcp_meta_open_memory", "dcp.meta_open_memory()"},
    {"dcp_layout_box", "Layout.box()"},
};

static int ident_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_';
}

/* msg with the C names of python_names replaced, into out (cap bytes). */
static const char *pythonize(const char *msg, char *out, size_t cap) {
  size_t o = 0;
  for (const char *p = msg; *p && o + 1 < cap;) {
    size_t len = 0;
    const char *py = NULL;
    if ((p == msg || !ident_char(p[-1])) && (!strncmp(p, "DCP_", 4) || !strncmp(p, "dcp_", 4))) {
      while (ident_char(p[len])) len++;
      for (size_t i = 0; i < sizeof python_names / sizeof python_names[0]; i++)
        if (strlen(python_names[i].c) == len && !strncmp(p, python_names[i].c, len))
          py = python_names[i].py;
    }
    if (py) {
      for (; *py && o + 1 < cap; py++) out[o++] = *py;
      p += len;
    } else {
      out[o++] = *p++;
    }
  }
  out[o] = '\0';
  return out;
}

PyObject *dcpi_py_raise(dcp_status status, const char *msg) {
  PyObject *klass;
  const error_kind *k = kind_of(status, &klass);
  char translated[4096];
  if (!msg || !msg[0]) msg = dcp_strerror(status);
  msg = pythonize(msg, translated, sizeof translated);
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
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dcpi_py_raise(status, msg);
}

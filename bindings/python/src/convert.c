/* convert.c — argument converters between Python objects and the C types of
 * dcp.h: int sequences, boxes, dtypes and buffers. */
#include "pydcp.h"

#include <string.h>

int dcpi_py_i64_seq(PyObject *seq, int64_t *out, uint32_t cap, uint32_t *n, const char *what) {
  PyObject *fast = PySequence_Fast(seq, what);
  if (!fast) return -1;
  Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
  if ((size_t)len > cap) {
    Py_DECREF(fast);
    dcpi_py_raisef(DCP_EINVAL, "%s has %zd entries, at most %u allowed", what, len, cap);
    return -1;
  }
  for (Py_ssize_t i = 0; i < len; i++) {
    long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      /* a Python int past int64: say which argument, as a dcp error */
      if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
        PyErr_Clear();
        dcpi_py_raisef(DCP_EINVAL, "%s[%zd] does not fit in int64", what, i);
      }
      return -1;
    }
    out[i] = (int64_t)v;
  }
  *n = (uint32_t)len;
  Py_DECREF(fast);
  return 0;
}

PyObject *dcpi_py_i64_tuple(const int64_t *v, uint32_t n) {
  PyObject *t = PyTuple_New(n);
  for (uint32_t i = 0; t && i < n; i++) {
    PyObject *x = PyLong_FromLongLong((long long)v[i]);
    if (!x) {
      Py_CLEAR(t);
      break;
    }
    PyTuple_SET_ITEM(t, i, x);
  }
  return t;
}

PyObject *dcpi_py_box_tuple(const dcp_box *box) {
  PyObject *off = dcpi_py_i64_tuple(box->offset, box->ndim);
  PyObject *size = off ? dcpi_py_i64_tuple(box->size, box->ndim) : NULL;
  PyObject *r = size ? PyTuple_Pack(2, off, size) : NULL;
  Py_XDECREF(off);
  Py_XDECREF(size);
  return r;
}

const char *dcpi_py_utf8(PyObject *obj, const char *what) {
  Py_ssize_t len;
  const char *s = PyUnicode_AsUTF8AndSize(obj, &len);
  const char *why = NULL;
  if (s && strlen(s) != (size_t)len) why = "contains a NUL character";
  else if (!s && PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
    why = "has no UTF-8 form (a lone surrogate)";
  if (!why) return s;
  PyErr_Clear();
  PyObject *r = PyObject_Repr(obj);
  const char *rs = r ? PyUnicode_AsUTF8(r) : NULL;
  PyErr_Clear();
  dcpi_py_raisef(DCP_EINVAL, "%s %.200s %s", what, rs ? rs : "?", why);
  Py_XDECREF(r);
  return NULL;
}

int dcpi_py_uint_arg(PyObject *o, const char *name, uint64_t max, uint64_t *out) {
  if (!o) return 0;
  if (PyBool_Check(o) || !PyIndex_Check(o)) {
    dcpi_py_raisef(DCP_EINVAL, "%s= must be an integer, got %.100s", name, Py_TYPE(o)->tp_name);
    return -1;
  }
  PyObject *n = PyNumber_Index(o);
  if (!n) return -1;
  unsigned long long v = PyLong_AsUnsignedLongLong(n);
  int bad = v == (unsigned long long)-1 && PyErr_Occurred();
  if (bad) PyErr_Clear(); /* negative or past 64 bits */
  if (bad || v > max) {
    PyObject *r = PyObject_Repr(n);
    const char *rs = r ? PyUnicode_AsUTF8(r) : NULL;
    PyErr_Clear();
    dcpi_py_raisef(DCP_EINVAL, "%s=%.100s is not in 0..%llu", name, rs ? rs : "?",
                   (unsigned long long)max);
    Py_XDECREF(r);
    Py_DECREF(n);
    return -1;
  }
  Py_DECREF(n);
  *out = (uint64_t)v;
  return 0;
}

int dcpi_py_dtype(PyObject *obj, dcp_dtype *out) {
  if (PyUnicode_Check(obj)) {
    const char *name = dcpi_py_utf8(obj, "dtype name");
    if (!name) return -1;
    *out = dcp_dtype_from_name(name);
    if (*out == DCP_DTYPE_INVALID) {
      dcpi_py_raisef(DCP_EINVAL, "unknown dtype name '%s' (safetensors names: F32, BF16, ...)",
                     name);
      return -1;
    }
    return 0;
  }
  long v = PyLong_AsLong(obj);
  if (v == -1 && PyErr_Occurred()) return -1;
  if (v <= 0 || v > INT32_MAX || !dcp_dtype_size((dcp_dtype)v)) { /* 2**32+F32 is not F32 */
    dcpi_py_raisef(DCP_EINVAL, "invalid dtype %ld", v);
    return -1;
  }
  *out = (dcp_dtype)v;
  return 0;
}

int dcpi_py_foreign_byte_order(const char *format) {
  const uint16_t one = 1;
  const int little = *(const unsigned char *)&one == 1;
  if (!format) return 0;
  return little ? (format[0] == '>' || format[0] == '!') : format[0] == '<';
}

int dcpi_py_get_buffer(PyObject *obj, Py_buffer *view, int *readonly) {
  const int want = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
  if (PyObject_GetBuffer(obj, view, want | PyBUF_WRITABLE) == 0) {
    *readonly = 0;
    return 0;
  }
  /* Not writable (bytes, a read-only array) is fine for a save; the error
   * of the read-only request is the one that says what is wrong otherwise. */
  PyErr_Clear();
  if (PyObject_GetBuffer(obj, view, want) < 0) return -1;
  *readonly = 1;
  return 0;
}

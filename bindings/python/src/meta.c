/* meta.c — dcp.Meta: a read-only view of a checkpoint's committed
 * .metadata (dcp_meta_open): tensors, chunks, bytes items (with their
 * lengths, which a load of an unknown bytes item needs), files, user
 * key/values, and whole-tensor reads. Opened by dcp._dcp.meta_open. */
#include "pydcp.h"

#include <stdarg.h>

typedef struct {
  PyObject_HEAD
  dcpi_py_ctx *owner;
  dcp_meta *meta;
  PyObject *path; /* bytes: the checkpoint directory, file-system encoded */
} dcpi_py_meta;

static void meta_dealloc(PyObject *self) {
  dcpi_py_meta *m = (dcpi_py_meta *)self;
  dcp_meta_free(m->meta);
  Py_XDECREF(m->path);
  if (m->owner) {
    dcpi_py_ctx_release(m->owner);
    Py_DECREF(m->owner);
  }
  Py_TYPE(self)->tp_free(self);
}

/* Build a dict from alternating (name, value) pairs; values are stolen,
 * a NULL value fails the whole dict. */
static PyObject *dict_of(int n, ...) {
  va_list ap;
  va_start(ap, n);
  PyObject *d = PyDict_New();
  for (int i = 0; i < n; i++) {
    const char *name = va_arg(ap, const char *);
    PyObject *v = va_arg(ap, PyObject *);
    if (d && (!v || PyDict_SetItemString(d, name, v) < 0)) Py_CLEAR(d);
    Py_XDECREF(v);
  }
  va_end(ap);
  return d;
}

static PyObject *tensor_dict(const dcp_tensor_info *t) {
  return dict_of(4, "fqn", PyUnicode_FromString(t->fqn), "dtype", PyLong_FromLong(t->dtype),
                 "shape", dcpi_py_i64_tuple(t->shape, t->ndim), "chunk_count",
                 PyLong_FromUnsignedLongLong(t->chunk_count));
}

static PyObject *meta_tensors(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_meta *m = (dcpi_py_meta *)self;
  size_t n = dcp_meta_tensor_count(m->meta);
  PyObject *list = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; list && i < n; i++) {
    dcp_tensor_info t;
    dcp_status rc = dcp_meta_tensor(m->meta, i, &t);
    PyObject *d = rc ? dcpi_py_raise(rc, NULL) : tensor_dict(&t);
    if (!d) Py_CLEAR(list);
    else PyList_SET_ITEM(list, (Py_ssize_t)i, d);
  }
  return list;
}

/* The index of the tensor given by fqn (str) or index (int). */
static int tensor_index(dcpi_py_meta *m, PyObject *which, size_t *index) {
  if (PyLong_Check(which)) {
    Py_ssize_t i = PyLong_AsSsize_t(which);
    if (i == -1 && PyErr_Occurred()) return -1;
    if (i < 0 || (size_t)i >= dcp_meta_tensor_count(m->meta)) {
      dcpi_py_raisef(DCP_ENOTFOUND, "tensor index %zd out of range", i);
      return -1;
    }
    *index = (size_t)i;
    return 0;
  }
  const char *fqn = PyUnicode_Check(which) ? dcpi_py_utf8(which, "tensor name") : NULL;
  if (!fqn) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "expected an fqn (str) or an index");
    return -1;
  }
  if (dcp_meta_find_tensor(m->meta, fqn, index)) {
    dcpi_py_raisef(DCP_ENOTFOUND, "no tensor '%s' in the checkpoint", fqn);
    return -1;
  }
  return 0;
}

static PyObject *meta_tensor(PyObject *self, PyObject *which) {
  dcpi_py_meta *m = (dcpi_py_meta *)self;
  size_t i;
  if (tensor_index(m, which, &i)) return NULL;
  dcp_tensor_info t;
  dcp_status rc = dcp_meta_tensor(m->meta, i, &t);
  return rc ? dcpi_py_raise(rc, NULL) : tensor_dict(&t);
}

static PyObject *meta_chunks(PyObject *self, PyObject *which) {
  dcpi_py_meta *m = (dcpi_py_meta *)self;
  size_t i;
  dcp_tensor_info t;
  /* decoding a chunk list must not race a read_tensor of another thread */
  if (!dcpi_py_ctx_usable((PyObject *)m->owner) || tensor_index(m, which, &i)) return NULL;
  dcp_status rc = dcp_meta_tensor(m->meta, i, &t);
  if (rc) return dcpi_py_raise(rc, NULL);
  PyObject *list = PyList_New(0);
  for (uint64_t c = 0; list && c < t.chunk_count; c++) {
    dcp_chunk_info ci;
    rc = dcp_meta_chunk(m->meta, i, (size_t)c, &ci);
    PyObject *b = rc ? dcpi_py_raisef(rc, "chunk list of '%s' is unreadable", t.fqn)
                     : dcpi_py_box_tuple(&ci.box);
    if (!b || PyList_Append(list, b) < 0) Py_CLEAR(list);
    Py_XDECREF(b);
  }
  return list;
}

static PyObject *meta_bytes_items(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_meta *m = (dcpi_py_meta *)self;
  size_t n = dcp_meta_bytes_count(m->meta);
  PyObject *list = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; list && i < n; i++) {
    dcp_bytes_info b;
    dcp_status rc = dcp_meta_bytes(m->meta, i, &b);
    PyObject *d = rc ? dcpi_py_raise(rc, NULL)
                     : dict_of(4, "key", PyUnicode_FromString(b.key), "scope",
                               PyLong_FromLong(b.scope), "rank", PyLong_FromLong(b.rank),
                               "length", PyLong_FromUnsignedLongLong(b.ref.raw_length));
    if (!d) Py_CLEAR(list);
    else PyList_SET_ITEM(list, (Py_ssize_t)i, d);
  }
  return list;
}

static PyObject *meta_kv(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_meta *m = (dcpi_py_meta *)self;
  PyObject *d = PyDict_New();
  for (size_t i = 0; d && i < dcp_meta_kv_count(m->meta); i++) {
    const char *k, *v;
    dcp_status rc = dcp_meta_kv(m->meta, i, &k, &v);
    PyObject *value = rc ? dcpi_py_raise(rc, NULL) : PyUnicode_FromString(v);
    if (!value || PyDict_SetItemString(d, k, value) < 0) Py_CLEAR(d);
    Py_XDECREF(value);
  }
  return d;
}

static PyObject *meta_files(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_meta *m = (dcpi_py_meta *)self;
  PyObject *list = PyList_New(0);
  for (size_t i = 0; list && i < dcp_meta_file_count(m->meta); i++) {
    const char *name;
    dcp_status rc = dcp_meta_file(m->meta, i, &name);
    PyObject *s = rc ? dcpi_py_raise(rc, NULL) : PyUnicode_FromString(name);
    if (!s || PyList_Append(list, s) < 0) Py_CLEAR(list);
    Py_XDECREF(s);
  }
  return list;
}

/* read_tensor(which, out): the whole tensor into the writable buffer out
 * (dcp_read_tensor), with the GIL released. */
static PyObject *meta_read_tensor(PyObject *self, PyObject *args) {
  dcpi_py_meta *m = (dcpi_py_meta *)self;
  PyObject *which, *out;
  if (!PyArg_ParseTuple(args, "OO", &which, &out)) return NULL;
  size_t i;
  if (tensor_index(m, which, &i)) return NULL;
  if (!PyBytes_GET_SIZE(m->path))
    return dcpi_py_raise(DCP_EINVAL, "read_tensor: this view was opened from memory, not a path");
  dcpi_py_ctx *c = dcpi_py_ctx_usable((PyObject *)m->owner);
  if (!c) return NULL;
  dcp_tensor_info t;
  dcp_status rc = dcp_meta_tensor(m->meta, i, &t);
  if (rc) return dcpi_py_raise(rc, NULL);
  Py_buffer view;
  if (PyObject_GetBuffer(out, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
    return NULL;
  /* a typed buffer must have the tensor's element size and this host's byte
   * order (bytes of 1-byte items are taken raw): a float64 array of the right
   * length was filled with float32 bytes */
  size_t esize = dcp_dtype_size(t.dtype);
  if (view.itemsize > 1 &&
      ((size_t)view.itemsize != esize || dcpi_py_foreign_byte_order(view.format))) {
    dcpi_py_raisef(DCP_EINVAL,
                   "read_tensor: tensor '%s' is %s (%zu-byte elements, native order); the "
                   "buffer has %zd-byte items of format '%s'",
                   t.fqn, dcp_dtype_name(t.dtype), esize, view.itemsize,
                   view.format ? view.format : "B");
    PyBuffer_Release(&view);
    return NULL;
  }
  const char *path = PyBytes_AS_STRING(m->path);
  dcpi_py_ctx_enter(c);
  Py_BEGIN_ALLOW_THREADS
  rc = dcp_read_tensor(c->ctx, path, m->meta, i, view.buf, (size_t)view.len);
  Py_END_ALLOW_THREADS
  dcpi_py_ctx_leave(c);
  PyBuffer_Release(&view);
  if (rc) return dcpi_py_raise_ctx(c->ctx, rc);
  Py_RETURN_NONE;
}

static PyObject *meta_get_int(PyObject *self, void *closure) {
  dcpi_py_meta *m = (dcpi_py_meta *)self;
  if (closure) return PyLong_FromLong(dcp_meta_world_size(m->meta));
  return PyLong_FromUnsignedLong(dcp_meta_format_version(m->meta));
}

static PyObject *meta_get_path(PyObject *self, void *closure) {
  (void)closure;
  PyObject *p = ((dcpi_py_meta *)self)->path;
  return PyUnicode_DecodeFSDefaultAndSize(PyBytes_AS_STRING(p), PyBytes_GET_SIZE(p));
}

#define METH(name, fn, flags, doc) {name, (PyCFunction)(void (*)(void))(fn), flags, doc}
static PyMethodDef meta_methods[] = {
    METH("tensors", meta_tensors, METH_NOARGS,
         "List of dicts: fqn, dtype, shape, chunk_count."),
    METH("tensor", meta_tensor, METH_O, "tensor(fqn or index) -> dict (NotFoundError if absent)."),
    METH("chunks", meta_chunks, METH_O, "chunks(fqn or index) -> list of (offset, size)."),
    METH("bytes_items", meta_bytes_items, METH_NOARGS,
         "List of dicts: key, scope, rank (-1 when replicated), length."),
    METH("kv", meta_kv, METH_NOARGS, "The user key/values as a dict of str."),
    METH("files", meta_files, METH_NOARGS, "Data file names."),
    METH("read_tensor", meta_read_tensor, METH_VARARGS,
         "read_tensor(fqn or index, out): read the whole tensor into the writable buffer out."),
    {NULL, NULL, 0, NULL}};

static PyGetSetDef meta_getset[] = {
    {"format_version", meta_get_int, NULL, "Format version of the .metadata.", NULL},
    {"world_size", meta_get_int, NULL, "World size at save time.", (void *)1},
    {"path", meta_get_path, NULL, "The checkpoint directory.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject dcpi_py_meta_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dcp.Meta",
    .tp_basicsize = sizeof(dcpi_py_meta),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A read-only view of a checkpoint's .metadata (from dcp.meta_open).",
    .tp_dealloc = meta_dealloc,
    .tp_methods = meta_methods,
    .tp_getset = meta_getset,
};

/* Wrap an opened view (taken) with its path (taken, fs-encoded bytes). */
static PyObject *wrap(dcpi_py_ctx *c, dcp_meta *meta, PyObject *path) {
  dcpi_py_meta *m = PyObject_New(dcpi_py_meta, &dcpi_py_meta_type);
  if (!m) {
    dcp_meta_free(meta);
    Py_DECREF(path);
    return NULL;
  }
  m->meta = meta;
  m->path = path;
  m->owner = (dcpi_py_ctx *)Py_NewRef((PyObject *)c);
  dcpi_py_ctx_hold(c);
  return (PyObject *)m;
}

PyObject *dcpi_py_meta_open(PyObject *module, PyObject *args) {
  (void)module;
  PyObject *ctx_obj, *enc;
  if (!PyArg_ParseTuple(args, "OO&", &ctx_obj, PyUnicode_FSConverter, &enc)) return NULL;
  dcpi_py_ctx *c = dcpi_py_ctx_usable(ctx_obj);
  if (!c) {
    Py_DECREF(enc);
    return NULL;
  }
  const char *path = PyBytes_AS_STRING(enc);
  dcp_meta *meta = NULL;
  dcp_status rc;
  dcpi_py_ctx_enter(c);
  Py_BEGIN_ALLOW_THREADS
  rc = dcp_meta_open(c->ctx, path, &meta);
  Py_END_ALLOW_THREADS
  dcpi_py_ctx_leave(c);
  if (rc) {
    Py_DECREF(enc);
    return dcpi_py_raise_ctx(c->ctx, rc);
  }
  return wrap(c, meta, enc);
}

PyObject *dcpi_py_meta_open_memory(PyObject *module, PyObject *args) {
  (void)module;
  PyObject *ctx_obj;
  Py_buffer data;
  if (!PyArg_ParseTuple(args, "Oy*", &ctx_obj, &data)) return NULL;
  dcpi_py_ctx *c = dcpi_py_ctx_usable(ctx_obj);
  dcp_meta *meta = NULL;
  dcp_status rc = c ? dcp_meta_open_memory(c->ctx, data.buf, (size_t)data.len, &meta) : DCP_OK;
  PyBuffer_Release(&data);
  if (!c) return NULL;
  if (rc) return dcpi_py_raise_ctx(c->ctx, rc);
  PyObject *path = PyBytes_FromString("");
  if (!path) {
    dcp_meta_free(meta);
    return NULL;
  }
  return wrap(c, meta, path);
}

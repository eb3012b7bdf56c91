/* state.c — dcp.State: a rank's tensor items, their chunks and bytes items,
 * pointing into Python buffers (numpy arrays, CPU torch tensors through
 * .numpy(), bytearrays, memoryviews, ...). Each buffer is checked against
 * the item before the C state sees it: C-contiguous, element size equal to
 * the dtype's, byte length equal to the box's. The views are held until the
 * state is freed, which keeps the memory alive and unresizable. */
#include "pydcp.h"

static int state_init(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"ctx", NULL};
  dcpi_py_state *s = (dcpi_py_state *)self;
  PyObject *ctx_obj;
  if (s->st) {
    dcpi_py_raise(DCP_EINVAL, "the state is already initialised");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O", kw, &ctx_obj)) return -1;
  dcpi_py_ctx *c = dcpi_py_ctx_usable(ctx_obj);
  if (!c) return -1;
  if (!(s->dtypes = PyDict_New())) return -1;
  dcp_status rc = dcp_state_create(c->ctx, &s->st);
  if (rc) {
    dcpi_py_raise_ctx(c->ctx, rc);
    return -1;
  }
  s->owner = (dcpi_py_ctx *)Py_NewRef(ctx_obj);
  dcpi_py_ctx_hold(c);
  return 0;
}

static void state_dealloc(PyObject *self) {
  dcpi_py_state *s = (dcpi_py_state *)self;
  dcp_state_free(s->st);
  for (size_t i = 0; i < s->nviews; i++) {
    PyBuffer_Release(s->views[i]);
    PyMem_Free(s->views[i]);
  }
  PyMem_Free(s->views);
  Py_XDECREF(s->dtypes);
  Py_XDECREF(s->readonly);
  if (s->owner) {
    dcpi_py_ctx_release(s->owner);
    Py_DECREF(s->owner);
  }
  Py_TYPE(self)->tp_free(self);
}

/* The initialised state behind self, its context usable (not busy). */
static dcpi_py_state *usable(PyObject *self) {
  dcpi_py_state *s = (dcpi_py_state *)self;
  if (!s->st) return (dcpi_py_state *)dcpi_py_raise(DCP_EINVAL, "the state is not initialised");
  if (!dcpi_py_ctx_usable((PyObject *)s->owner)) return NULL;
  return s;
}

dcpi_py_state *dcpi_py_state_check(PyObject *obj, const dcpi_py_ctx *c, int for_load) {
  if (!PyObject_TypeCheck(obj, &dcpi_py_state_type)) {
    PyErr_Format(PyExc_TypeError, "expected a dcp.State, got %.100s", Py_TYPE(obj)->tp_name);
    return NULL;
  }
  dcpi_py_state *s = (dcpi_py_state *)obj;
  if (!s->st) return (dcpi_py_state *)dcpi_py_raise(DCP_EINVAL, "the state is not initialised");
  if (s->owner != c)
    return (dcpi_py_state *)dcpi_py_raise(DCP_EINVAL, "the state belongs to another context");
  if (for_load && s->readonly)
    return (dcpi_py_state *)dcpi_py_raisef(
        DCP_EINVAL, "cannot load into '%s': its buffer is read-only", PyUnicode_AsUTF8(s->readonly));
  return s;
}

/* A zeroed Py_buffer on the heap (kept by the state once filled), or NULL
 * with MemoryError. */
static Py_buffer *new_view(void) {
  Py_buffer *v = PyMem_Calloc(1, sizeof *v);
  if (!v) PyErr_NoMemory();
  return v;
}

/* Keep view for the state's lifetime (on success of the C call). */
static int keep(dcpi_py_state *s, Py_buffer *view, int readonly, PyObject *name) {
  if (s->nviews == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 16;
    Py_buffer **v = PyMem_Realloc(s->views, cap * sizeof *v);
    if (!v) {
      PyErr_NoMemory();
      return -1;
    }
    s->views = v;
    s->cap = cap;
  }
  s->views[s->nviews++] = view;
  if (readonly && !s->readonly) s->readonly = Py_NewRef(name);
  return 0;
}

/* A buffer for numel elements of dtype: byte order, element size and length
 * checked. Returns 0 (view filled, *readonly set) or -1 with an exception. */
static int elem_buffer(PyObject *data, const char *fqn, dcp_dtype dtype, int64_t numel,
                       Py_buffer *view, int *readonly) {
  if (dcpi_py_get_buffer(data, view, readonly)) return -1;
  if (view->itemsize > 1 && dcpi_py_foreign_byte_order(view->format)) {
    dcpi_py_raisef(DCP_EINVAL,
                   "'%s': the buffer's elements are in the other byte order (format '%s'); "
                   "libdcp reads and writes native-order elements: convert it first (numpy: "
                   "a.astype(a.dtype.newbyteorder('='))",
                   fqn, view->format);
    PyBuffer_Release(view);
    return -1;
  }
  size_t esize = dcp_dtype_size(dtype);
  int64_t want;
  const char *err = NULL;
  if ((size_t)view->itemsize != esize) err = "element size";
  else if (__builtin_mul_overflow(numel, (int64_t)esize, &want) || want != (int64_t)view->len)
    err = "length";
  if (!err) return 0;
  dcpi_py_raisef(DCP_EINVAL,
                 "'%s': buffer %s does not match: %s has %zu-byte elements and the box %lld "
                 "elements; the buffer has %zd bytes of %zd-byte items (format '%s')",
                 fqn, err, dcp_dtype_name(dtype), esize, (long long)numel, view->len,
                 view->itemsize, view->format ? view->format : "B");
  PyBuffer_Release(view);
  return -1;
}

/* dcpi_py_i64_seq of an argument of tensor name (its errors name both:
 * "tensor 'w' shape has 17 entries, at most 16 allowed"). */
static int named_seq(const char *name, const char *what, PyObject *seq, int64_t *out,
                     uint32_t *n) {
  char label[256];
  snprintf(label, sizeof label, "tensor '%.200s' %s", name, what);
  return dcpi_py_i64_seq(seq, out, DCP_MAX_NDIM, n, label);
}

/* The dtype declared for fqn in this state, or -1 with NotFoundError. */
static int declared_dtype(dcpi_py_state *s, PyObject *fqn, dcp_dtype *out) {
  PyObject *d = PyDict_GetItemWithError(s->dtypes, fqn);
  if (!d) {
    if (!PyErr_Occurred())
      dcpi_py_raisef(DCP_ENOTFOUND, "no tensor '%s' declared in the state", PyUnicode_AsUTF8(fqn));
    return -1;
  }
  *out = (dcp_dtype)PyLong_AsLong(d);
  return 0;
}

/* Element count of the box [offset, offset+size); -1 with an exception. */
static int box_numel(const int64_t *offset, const int64_t *size, uint32_t ndim, const char *fqn,
                     int64_t *numel) {
  dcp_box b = {.ndim = ndim};
  for (uint32_t i = 0; i < ndim; i++) {
    b.offset[i] = offset[i];
    b.size[i] = size[i];
  }
  dcp_status rc = dcp_box_numel(&b, numel);
  if (!rc) return 0;
  dcpi_py_raisef(rc, "tensor '%s': invalid box (a negative or overflowing offset or size)", fqn);
  return -1;
}

/* Drop a filled view that the state will not keep. */
static void drop(Py_buffer *view) {
  PyBuffer_Release(view);
  PyMem_Free(view);
}

/* Finish an add: keep the view on success, or drop it and raise the
 * library's message. Returns None or NULL. */
static PyObject *finish(dcpi_py_state *s, dcp_status rc, Py_buffer *view, int readonly,
                        PyObject *name) {
  if (rc) {
    drop(view);
    return dcpi_py_raise_ctx(s->owner->ctx, rc);
  }
  if (keep(s, view, readonly, name)) {
    drop(view);
    return NULL;
  }
  Py_RETURN_NONE;
}

/* A new view of data for numel elements of dtype (see elem_buffer), or NULL
 * with an exception. */
static Py_buffer *elem_view(PyObject *data, const char *fqn, dcp_dtype dtype, int64_t numel,
                            int *readonly) {
  Py_buffer *view = new_view();
  if (view && elem_buffer(data, fqn, dtype, numel, view, readonly)) {
    PyMem_Free(view);
    return NULL;
  }
  return view;
}

static PyObject *state_add_tensor(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"fqn", "dtype", "shape", NULL};
  PyObject *fqn, *dtype_obj, *shape_obj;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UOO", kw, &fqn, &dtype_obj, &shape_obj))
    return NULL;
  dcpi_py_state *s = usable(self);
  dcp_dtype dtype;
  int64_t shape[DCP_MAX_NDIM];
  uint32_t ndim;
  const char *name = dcpi_py_utf8(fqn, "tensor name");
  if (!s || !name || dcpi_py_dtype(dtype_obj, &dtype) ||
      named_seq(name, "shape", shape_obj, shape, &ndim))
    return NULL;
  dcp_status rc = dcp_state_add_tensor(s->st, name, dtype, ndim, shape);
  if (rc) return dcpi_py_raise_ctx(s->owner->ctx, rc);
  PyObject *d = PyLong_FromLong((long)dtype);
  int bad = !d || PyDict_SetItem(s->dtypes, fqn, d) < 0;
  Py_XDECREF(d);
  if (bad) return NULL;
  Py_RETURN_NONE;
}

static PyObject *state_add_chunk(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"fqn", "offset", "size", "data", NULL};
  PyObject *fqn, *off_obj, *size_obj, *data;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UOOO", kw, &fqn, &off_obj, &size_obj, &data))
    return NULL;
  dcpi_py_state *s = usable(self);
  const char *name = dcpi_py_utf8(fqn, "tensor name");
  int64_t off[DCP_MAX_NDIM], size[DCP_MAX_NDIM], numel;
  uint32_t n_off, n_size;
  dcp_dtype dtype;
  if (!s || !name || declared_dtype(s, fqn, &dtype) ||
      named_seq(name, "offset", off_obj, off, &n_off) ||
      named_seq(name, "size", size_obj, size, &n_size))
    return NULL;
  if (n_off != n_size)
    return dcpi_py_raisef(DCP_EINVAL, "tensor '%s': offset has %u dims, size %u", name, n_off,
                          n_size);
  int ro;
  Py_buffer *view;
  if (box_numel(off, size, n_off, name, &numel) ||
      !(view = elem_view(data, name, dtype, numel, &ro)))
    return NULL;
  dcp_status rc = dcp_state_add_chunk(s->st, name, off, size, view->buf);
  return finish(s, rc, view, ro, fqn);
}

/* region: None (the whole tensor) or (offset, size). */
static int parse_region(PyObject *o, dcp_box *box, int *given) {
  *given = o && o != Py_None;
  if (!*given) return 0;
  PyObject *off, *size;
  if (!PyArg_ParseTuple(o, "OO;region must be (offset, size)", &off, &size)) return -1;
  uint32_t n2;
  if (dcpi_py_i64_seq(off, box->offset, DCP_MAX_NDIM, &box->ndim, "region offset") ||
      dcpi_py_i64_seq(size, box->size, DCP_MAX_NDIM, &n2, "region size"))
    return -1;
  if (n2 != box->ndim) {
    dcpi_py_raise(DCP_EINVAL, "region offset and size have different lengths");
    return -1;
  }
  return 0;
}

static PyObject *state_add_flat(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"fqn", "flat_begin", "flat_count", "data", "region", NULL};
  PyObject *fqn, *data, *region_obj = NULL;
  long long begin, count;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "ULLO|O", kw, &fqn, &begin, &count, &data,
                                   &region_obj))
    return NULL;
  dcpi_py_state *s = usable(self);
  const char *name = dcpi_py_utf8(fqn, "tensor name");
  dcp_dtype dtype;
  dcp_box region;
  int has_region;
  if (!s || !name || declared_dtype(s, fqn, &dtype) ||
      parse_region(region_obj, &region, &has_region))
    return NULL;
  if (count < 0) return dcpi_py_raisef(DCP_EINVAL, "tensor '%s': negative flat_count", name);
  int ro;
  Py_buffer *view = elem_view(data, name, dtype, (int64_t)count, &ro);
  if (!view) return NULL;
  dcp_status rc = dcp_state_add_flat(s->st, name, has_region ? &region : NULL, (int64_t)begin,
                                     (int64_t)count, view->buf);
  return finish(s, rc, view, ro, fqn);
}

/* finish() for a call that also declared fqn: on success its dtype is
 * remembered (later chunks of it are checked against it). */
static PyObject *finish_declared(dcpi_py_state *s, dcp_status rc, Py_buffer *view, int ro,
                                 PyObject *fqn, dcp_dtype dtype) {
  if (!rc) {
    PyObject *d = PyLong_FromLong((long)dtype);
    if (!d || PyDict_SetItem(s->dtypes, fqn, d) < 0) {
      Py_XDECREF(d);
      drop(view);
      return NULL;
    }
    Py_DECREF(d);
  }
  return finish(s, rc, view, ro, fqn);
}

/* The arguments add_sharded and add_flat_sharded share: the name, dtype
 * and shape, and a layout that is initialised and maps ndim dims. -1 with
 * an exception when not. */
static int laid_out_args(PyObject *fqn, PyObject *dtype_obj, PyObject *shape_obj,
                         const dcpi_py_layout *l, const char **name, dcp_dtype *dtype,
                         int64_t *shape, uint32_t *ndim) {
  if (!(*name = dcpi_py_utf8(fqn, "tensor name")) || dcpi_py_dtype(dtype_obj, dtype) ||
      named_seq(*name, "shape", shape_obj, shape, ndim))
    return -1;
  if (!l->layout) return dcpi_py_raise(DCP_EINVAL, "the layout is not initialised"), -1;
  if ((Py_ssize_t)*ndim != PyTuple_GET_SIZE(l->tensor_map))
    return dcpi_py_raisef(DCP_EINVAL, "tensor '%s': shape has %u dims, the layout maps %zd",
                          *name, *ndim, PyTuple_GET_SIZE(l->tensor_map)), -1;
  return 0;
}

static PyObject *state_add_sharded(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"fqn", "dtype", "shape", "layout", "data", NULL};
  PyObject *fqn, *dtype_obj, *shape_obj, *layout_obj, *data;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UOOO!O", kw, &fqn, &dtype_obj, &shape_obj,
                                   &dcpi_py_layout_type, &layout_obj, &data))
    return NULL;
  dcpi_py_state *s = usable(self);
  dcpi_py_layout *l = (dcpi_py_layout *)layout_obj;
  const char *name;
  dcp_dtype dtype;
  int64_t shape[DCP_MAX_NDIM], numel;
  uint32_t ndim;
  if (!s || laid_out_args(fqn, dtype_obj, shape_obj, l, &name, &dtype, shape, &ndim)) return NULL;
  dcp_box box;
  int32_t rank = dcp_ctx_rank(s->owner->ctx);
  dcp_status rc = dcp_layout_box(l->layout, shape, rank, &box);
  if (rc)
    return dcpi_py_raisef(rc, "tensor '%s': %s", name,
                          rc == DCP_ENOTFOUND ? "this rank is not in the layout's mesh"
                                              : "invalid shape for the layout");
  int ro;
  Py_buffer *view;
  if (box_numel(box.offset, box.size, box.ndim, name, &numel) ||
      !(view = elem_view(data, name, dtype, numel, &ro)))
    return NULL;
  rc = dcp_state_add_sharded(s->st, name, dtype, ndim, shape, l->layout, view->buf);
  return finish_declared(s, rc, view, ro, fqn, dtype);
}

static PyObject *state_add_flat_sharded(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"fqn", "dtype", "shape", "layout", "data", "flat_dims", NULL};
  PyObject *fqn, *dtype_obj, *shape_obj, *layout_obj, *data;
  unsigned int flat_dims = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UOOO!O|I", kw, &fqn, &dtype_obj, &shape_obj,
                                   &dcpi_py_layout_type, &layout_obj, &data, &flat_dims))
    return NULL;
  dcpi_py_state *s = usable(self);
  dcpi_py_layout *l = (dcpi_py_layout *)layout_obj;
  const char *name;
  dcp_dtype dtype;
  int64_t shape[DCP_MAX_NDIM], begin, count;
  uint32_t ndim;
  if (!s || laid_out_args(fqn, dtype_obj, shape_obj, l, &name, &dtype, shape, &ndim)) return NULL;
  int32_t rank = dcp_ctx_rank(s->owner->ctx);
  dcp_status rc = dcp_layout_flat_range(l->layout, shape, flat_dims, rank, NULL, &begin, &count);
  if (rc)
    return dcpi_py_raisef(rc, "tensor '%s': %s", name,
                          rc == DCP_ENOTFOUND ? "this rank is not in the layout's mesh"
                                              : "invalid shape or flat_dims for the layout");
  int ro;
  Py_buffer *view = elem_view(data, name, dtype, count, &ro);
  if (!view) return NULL;
  rc = dcp_state_add_flat_sharded(s->st, name, dtype, ndim, shape, l->layout, flat_dims,
                                  count ? view->buf : NULL);
  return finish_declared(s, rc, view, ro, fqn, dtype);
}

static PyObject *state_add_bytes(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"key", "data", "scope", NULL};
  PyObject *key, *data;
  int scope = DCP_SCOPE_REPLICATED;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UO|i", kw, &key, &data, &scope)) return NULL;
  dcpi_py_state *s = usable(self);
  const char *name = dcpi_py_utf8(key, "bytes key");
  if (!s || !name) return NULL;
  int ro;
  Py_buffer *view = new_view();
  if (!view) return NULL;
  if (dcpi_py_get_buffer(data, view, &ro)) {
    PyMem_Free(view);
    return NULL;
  }
  dcp_status rc = dcp_state_add_bytes(s->st, name, (dcp_scope)scope, view->len ? view->buf : NULL,
                                      (size_t)view->len);
  return finish(s, rc, view, ro, key);
}

static PyObject *state_get_count(PyObject *self, void *closure) {
  dcpi_py_state *s = (dcpi_py_state *)self;
  if (!s->st) return dcpi_py_raise(DCP_EINVAL, "the state is not initialised");
  return PyLong_FromSize_t(closure ? dcp_state_bytes_count(s->st) : dcp_state_tensor_count(s->st));
}

#define METH(name, fn, doc) \
  {name, (PyCFunction)(void (*)(void))(fn), METH_VARARGS | METH_KEYWORDS, doc}
static PyMethodDef state_methods[] = {
    METH("add_tensor", state_add_tensor,
         "add_tensor(fqn, dtype, shape): declare a tensor item (dtype: int code or 'F32')."),
    METH("add_chunk", state_add_chunk,
         "add_chunk(fqn, offset, size, data): a local chunk of a declared tensor; data is a "
         "C-contiguous buffer of exactly the box's elements."),
    METH("add_flat", state_add_flat,
         "add_flat(fqn, flat_begin, flat_count, data, region=None): a flat element range "
         "of the row-major region (offset, size) of a declared tensor."),
    METH("add_sharded", state_add_sharded,
         "add_sharded(fqn, dtype, shape, layout, data): declare a tensor and add this "
         "rank's box of it as given by layout."),
    METH("add_flat_sharded", state_add_flat_sharded,
         "add_flat_sharded(fqn, dtype, shape, layout, data, flat_dims=0): declare a tensor "
         "and add this rank's flat range of its layout cell (ZeRO/FSDP): the mesh dims in "
         "flat_dims (0: all that shard nothing) cut the flattened cell; data holds exactly "
         "Layout.flat_range's elements."),
    METH("add_bytes", state_add_bytes,
         "add_bytes(key, data, scope=SCOPE_REPLICATED): a bytes item."),
    {NULL, NULL, 0, NULL}};

static PyGetSetDef state_getset[] = {
    {"tensor_count", state_get_count, NULL, "Number of tensor items.", NULL},
    {"bytes_count", state_get_count, NULL, "Number of bytes items.", (void *)1},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject dcpi_py_state_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dcp.State",
    .tp_basicsize = sizeof(dcpi_py_state),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "State(ctx): what this rank saves or loads. Buffers given to it are held "
              "(and must not change during a save) until the state is freed.",
    .tp_new = PyType_GenericNew,
    .tp_init = state_init,
    .tp_dealloc = state_dealloc,
    .tp_methods = state_methods,
    .tp_getset = state_getset,
};

/* layout.c — dcp.Layout: a device mesh and a tensor_map (dcp_layout_create),
 * with the box and replica group of a rank computed locally. */
#include "pydcp.h"

/* One tensor_map entry: an int bit mask, None (not sharded), or a sequence
 * of mesh dimensions (combined in mesh order). Returns 0 or -1. */
static int map_entry(PyObject *o, uint32_t *mask) {
  if (o == Py_None) {
    *mask = 0;
    return 0;
  }
  if (PyLong_Check(o)) {
    unsigned long v = PyLong_AsUnsignedLong(o);
    if (v == (unsigned long)-1 && PyErr_Occurred()) return -1;
    if (v >> DCP_MAX_MESH_NDIM) {
      dcpi_py_raisef(DCP_EINVAL, "tensor_map mask %#lx names a mesh dimension >= %d", v,
                     DCP_MAX_MESH_NDIM);
      return -1;
    }
    *mask = (uint32_t)v;
    return 0;
  }
  int64_t dims[DCP_MAX_MESH_NDIM];
  uint32_t n;
  if (dcpi_py_i64_seq(o, dims, DCP_MAX_MESH_NDIM, &n,
                      "a tensor_map entry (an int mask, None or a sequence of mesh dims)"))
    return -1;
  *mask = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (dims[i] < 0 || dims[i] >= DCP_MAX_MESH_NDIM) {
      dcpi_py_raisef(DCP_EINVAL, "tensor_map names mesh dimension %lld", (long long)dims[i]);
      return -1;
    }
    *mask |= 1u << dims[i];
  }
  return 0;
}

/* The tensor_map sequence into masks[], its length into *n. */
static int parse_map(PyObject *seq, uint32_t *masks, uint32_t *n) {
  PyObject *fast = PySequence_Fast(seq, "tensor_map must be a sequence");
  if (!fast) return -1;
  Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
  int rc = 0;
  if (len > DCP_MAX_NDIM) {
    dcpi_py_raisef(DCP_EINVAL, "tensor_map has %zd entries, at most %d allowed", len,
                   DCP_MAX_NDIM);
    rc = -1;
  }
  for (Py_ssize_t i = 0; !rc && i < len; i++) rc = map_entry(PySequence_Fast_GET_ITEM(fast, i), &masks[i]);
  *n = (uint32_t)len;
  Py_DECREF(fast);
  return rc;
}

/* mesh_ranks (a sequence, or None for 0..n-1) into ranks[]; *given 0 for None. */
static int parse_ranks(PyObject *seq, int32_t *ranks, Py_ssize_t cap, int *given) {
  *given = seq && seq != Py_None;
  if (!*given) return 0;
  PyObject *fast = PySequence_Fast(seq, "mesh_ranks must be a sequence or None");
  if (!fast) return -1;
  Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
  int rc = 0;
  if (len != cap) {
    dcpi_py_raisef(DCP_EINVAL, "mesh_ranks has %zd entries, the mesh has %zd positions", len, cap);
    rc = -1;
  }
  for (Py_ssize_t i = 0; !rc && i < len; i++) {
    long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
    if (v == -1 && PyErr_Occurred()) rc = -1;
    else if (v < INT32_MIN || v > INT32_MAX) {
      dcpi_py_raisef(DCP_EINVAL, "mesh rank %ld out of range", v);
      rc = -1;
    } else
      ranks[i] = (int32_t)v;
  }
  Py_DECREF(fast);
  return rc;
}

/* Product of the mesh extents, or -1 (with an exception) when absurd. */
static Py_ssize_t mesh_positions(const int64_t *shape, uint32_t n) {
  Py_ssize_t p = 1;
  for (uint32_t i = 0; i < n; i++) {
    if (shape[i] < 1 || shape[i] > (1 << 24) || p > ((Py_ssize_t)1 << 24) / shape[i]) {
      dcpi_py_raisef(DCP_EINVAL, "mesh extent %lld is < 1 or the mesh is too large",
                     (long long)shape[i]);
      return -1;
    }
    p *= (Py_ssize_t)shape[i];
  }
  return p;
}

/* Create the C layout; the message of a refusal comes from ctx, or from a
 * scratch single-rank context when the caller gave none. */
static dcp_status create(PyObject *ctx_obj, uint32_t mesh_ndim, const int64_t *shape,
                         const int32_t *ranks, uint32_t ndim, const uint32_t *map,
                         dcp_layout **out, char *msg, size_t cap) {
  dcp_ctx *ctx = NULL, *scratch = NULL;
  if (ctx_obj && ctx_obj != Py_None) {
    dcpi_py_ctx *c = dcpi_py_ctx_usable(ctx_obj);
    if (!c) return DCP_EINVAL;
    ctx = c->ctx;
  } else if (dcp_ctx_create(NULL, &scratch) == DCP_OK) {
    ctx = scratch;
  }
  dcp_status rc = dcp_layout_create(ctx, mesh_ndim, shape, ranks, ndim, map, out);
  if (rc) snprintf(msg, cap, "%s", ctx ? dcp_ctx_last_error(ctx) : "");
  dcp_ctx_free(scratch);
  return rc;
}

static int layout_init(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"mesh_shape", "tensor_map", "mesh_ranks", "ctx", NULL};
  dcpi_py_layout *l = (dcpi_py_layout *)self;
  PyObject *shape_obj, *map_obj, *ranks_obj = NULL, *ctx_obj = NULL;
  if (l->layout) {
    dcpi_py_raise(DCP_EINVAL, "the layout is already initialised");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O$O", kw, &shape_obj, &map_obj, &ranks_obj,
                                   &ctx_obj))
    return -1;
  int64_t shape[DCP_MAX_MESH_NDIM];
  uint32_t mesh_ndim, ndim, map[DCP_MAX_NDIM];
  if (dcpi_py_i64_seq(shape_obj, shape, DCP_MAX_MESH_NDIM, &mesh_ndim, "mesh_shape") ||
      parse_map(map_obj, map, &ndim))
    return -1;
  Py_ssize_t npos = mesh_positions(shape, mesh_ndim);
  if (npos < 0) return -1;
  int32_t *ranks = PyMem_Malloc((size_t)npos * sizeof *ranks);
  if (!ranks) {
    PyErr_NoMemory();
    return -1;
  }
  int given;
  if (parse_ranks(ranks_obj, ranks, npos, &given)) {
    PyMem_Free(ranks);
    return -1;
  }
  if (!given)
    for (Py_ssize_t i = 0; i < npos; i++) ranks[i] = (int32_t)i;
  char msg[1024] = "";
  dcp_status rc = create(ctx_obj, mesh_ndim, shape, ranks, ndim, map, &l->layout, msg, sizeof msg);
  if (rc) {
    PyMem_Free(ranks);
    if (!PyErr_Occurred()) dcpi_py_raise(rc, msg);
    return -1;
  }
  l->mesh_shape = dcpi_py_i64_tuple(shape, mesh_ndim);
  l->mesh_ranks = PyTuple_New(npos);
  for (Py_ssize_t i = 0; l->mesh_ranks && i < npos; i++)
    PyTuple_SET_ITEM(l->mesh_ranks, i, PyLong_FromLong(ranks[i]));
  int64_t masks[DCP_MAX_NDIM];
  for (uint32_t i = 0; i < ndim; i++) masks[i] = map[i];
  l->tensor_map = dcpi_py_i64_tuple(masks, ndim);
  PyMem_Free(ranks);
  return l->mesh_shape && l->mesh_ranks && l->tensor_map ? 0 : -1;
}

static void layout_dealloc(PyObject *self) {
  dcpi_py_layout *l = (dcpi_py_layout *)self;
  dcp_layout_free(l->layout);
  Py_XDECREF(l->mesh_shape);
  Py_XDECREF(l->mesh_ranks);
  Py_XDECREF(l->tensor_map);
  Py_TYPE(self)->tp_free(self);
}

/* The initialised layout behind self, or NULL with an exception. */
static const dcp_layout *get(PyObject *self) {
  const dcp_layout *l = ((dcpi_py_layout *)self)->layout;
  if (!l) dcpi_py_raise(DCP_EINVAL, "the layout is not initialised");
  return l;
}

static PyObject *layout_box(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"global_shape", "rank", NULL};
  PyObject *shape_obj;
  int rank;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Oi", kw, &shape_obj, &rank)) return NULL;
  const dcp_layout *l = get(self);
  int64_t shape[DCP_MAX_NDIM];
  uint32_t ndim;
  if (!l || dcpi_py_i64_seq(shape_obj, shape, DCP_MAX_NDIM, &ndim, "global_shape")) return NULL;
  if ((Py_ssize_t)ndim != PyTuple_GET_SIZE(((dcpi_py_layout *)self)->tensor_map))
    return dcpi_py_raisef(DCP_EINVAL, "global_shape has %u dims, the layout maps %zd", ndim,
                          PyTuple_GET_SIZE(((dcpi_py_layout *)self)->tensor_map));
  dcp_box box;
  dcp_status rc = dcp_layout_box(l, shape, rank, &box);
  if (rc == DCP_ENOTFOUND) return dcpi_py_raisef(rc, "rank %d is not in the layout's mesh", rank);
  if (rc) return dcpi_py_raise(rc, "invalid global shape for dcp_layout_box");
  return dcpi_py_box_tuple(&box);
}

static PyObject *layout_replica_group(PyObject *self, PyObject *args) {
  int rank;
  if (!PyArg_ParseTuple(args, "i", &rank)) return NULL;
  const dcp_layout *l = get(self);
  if (!l) return NULL;
  size_t count;
  dcp_status rc = dcp_layout_replica_group(l, rank, NULL, 0, &count);
  if (rc) return dcpi_py_raisef(rc, "rank %d is not in the layout's mesh", rank);
  int32_t *g = PyMem_Malloc((count ? count : 1) * sizeof *g);
  if (!g) return PyErr_NoMemory();
  rc = dcp_layout_replica_group(l, rank, g, count, &count);
  PyObject *t = rc ? dcpi_py_raise(rc, NULL) : PyTuple_New((Py_ssize_t)count);
  for (size_t i = 0; t && i < count; i++) PyTuple_SET_ITEM(t, (Py_ssize_t)i, PyLong_FromLong(g[i]));
  PyMem_Free(g);
  return t;
}

static PyObject *layout_flat_range(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"global_shape", "rank", "flat_dims", NULL};
  PyObject *shape_obj;
  int rank;
  unsigned int flat_dims = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Oi|I", kw, &shape_obj, &rank, &flat_dims))
    return NULL;
  const dcp_layout *l = get(self);
  int64_t shape[DCP_MAX_NDIM], begin, count;
  uint32_t ndim;
  if (!l || dcpi_py_i64_seq(shape_obj, shape, DCP_MAX_NDIM, &ndim, "global_shape")) return NULL;
  if ((Py_ssize_t)ndim != PyTuple_GET_SIZE(((dcpi_py_layout *)self)->tensor_map))
    return dcpi_py_raisef(DCP_EINVAL, "global_shape has %u dims, the layout maps %zd", ndim,
                          PyTuple_GET_SIZE(((dcpi_py_layout *)self)->tensor_map));
  dcp_box cell;
  dcp_status rc = dcp_layout_flat_range(l, shape, flat_dims, rank, &cell, &begin, &count);
  if (rc == DCP_ENOTFOUND) return dcpi_py_raisef(rc, "rank %d is not in the layout's mesh", rank);
  if (rc) return dcpi_py_raise(rc, "invalid global shape or flat_dims for dcp_layout_flat_range");
  return Py_BuildValue("(NLL)", dcpi_py_box_tuple(&cell), (long long)begin, (long long)count);
}

static PyObject *layout_repr(PyObject *self) {
  dcpi_py_layout *l = (dcpi_py_layout *)self;
  if (!l->layout) return PyUnicode_FromString("dcp.Layout(<uninitialised>)");
  return PyUnicode_FromFormat("dcp.Layout(mesh_shape=%R, tensor_map=%R, mesh_ranks=%R)",
                              l->mesh_shape, l->tensor_map, l->mesh_ranks);
}

static PyObject *get_field(PyObject *self, void *closure) {
  dcpi_py_layout *l = (dcpi_py_layout *)self;
  if (!get(self)) return NULL;
  PyObject *v = *(PyObject **)((char *)l + (size_t)closure);
  return Py_NewRef(v);
}

#define METH(name, fn, flags, doc) {name, (PyCFunction)(void (*)(void))(fn), flags, doc}
static PyMethodDef layout_methods[] = {
    METH("box", layout_box, METH_VARARGS | METH_KEYWORDS,
         "box(global_shape, rank) -> (offset, size): the box rank holds (dcp_layout_box)."),
    METH("replica_group", layout_replica_group, METH_VARARGS,
         "replica_group(rank) -> tuple of the ranks holding the same box."),
    METH("flat_range", layout_flat_range, METH_VARARGS | METH_KEYWORDS,
         "flat_range(global_shape, rank, flat_dims=0) -> ((offset, size), begin, count): the "
         "cell rank's flat shard cuts and its element range (dcp_layout_flat_range)."),
    {NULL, NULL, 0, NULL}};

static PyGetSetDef layout_getset[] = {
    {"mesh_shape", get_field, NULL, "The mesh extents.",
     (void *)offsetof(dcpi_py_layout, mesh_shape)},
    {"mesh_ranks", get_field, NULL, "The global rank at each mesh position (row-major).",
     (void *)offsetof(dcpi_py_layout, mesh_ranks)},
    {"tensor_map", get_field, NULL, "Per tensor dimension, the bit mask of sharding mesh dims.",
     (void *)offsetof(dcpi_py_layout, tensor_map)},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject dcpi_py_layout_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dcp.Layout",
    .tp_basicsize = sizeof(dcpi_py_layout),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Layout(mesh_shape, tensor_map, mesh_ranks=None, *, ctx=None): how a tensor "
              "is spread over a device mesh. tensor_map[d] is an int bit mask of the mesh "
              "dims sharding tensor dim d, None, or a sequence of mesh dims.",
    .tp_new = PyType_GenericNew,
    .tp_init = layout_init,
    .tp_dealloc = layout_dealloc,
    .tp_methods = layout_methods,
    .tp_getset = layout_getset,
    .tp_repr = layout_repr,
};

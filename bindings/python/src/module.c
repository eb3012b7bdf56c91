/* module.c — the dcp._dcp module: its types, error classes, constants and
 * the small stateless functions of dcp.h (version, dtypes, flat ranges).
 * The Python package dcp (bindings/python/dcp/) builds on it. */
#include "pydcp.h"

static PyObject *py_version(PyObject *m, PyObject *unused) {
  (void)m, (void)unused;
  return PyUnicode_FromString(dcp_version_string());
}

static PyObject *py_strerror(PyObject *m, PyObject *arg) {
  (void)m;
  long s = PyLong_AsLong(arg);
  if (s == -1 && PyErr_Occurred()) return NULL;
  return PyUnicode_FromString(dcp_strerror((dcp_status)s));
}

static PyObject *py_dtype_size(PyObject *m, PyObject *arg) {
  (void)m;
  dcp_dtype dt;
  if (dcpi_py_dtype(arg, &dt)) return NULL;
  return PyLong_FromSize_t(dcp_dtype_size(dt));
}

static PyObject *py_dtype_name(PyObject *m, PyObject *arg) {
  (void)m;
  dcp_dtype dt;
  if (dcpi_py_dtype(arg, &dt)) return NULL;
  return PyUnicode_FromString(dcp_dtype_name(dt));
}

/* flat_to_boxes(region, flat_begin, flat_count) -> list of (offset, size):
 * the boxes covering a flat range of the row-major region (offset, size). */
static PyObject *py_flat_to_boxes(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *off_obj, *size_obj;
  long long begin, count;
  if (!PyArg_ParseTuple(args, "(OO)LL", &off_obj, &size_obj, &begin, &count)) return NULL;
  dcp_box region;
  uint32_t n2;
  if (dcpi_py_i64_seq(off_obj, region.offset, DCP_MAX_NDIM, &region.ndim, "region offset") ||
      dcpi_py_i64_seq(size_obj, region.size, DCP_MAX_NDIM, &n2, "region size"))
    return NULL;
  if (n2 != region.ndim) return dcpi_py_raise(DCP_EINVAL, "region offset and size differ in length");
  dcp_box out[2 * DCP_MAX_NDIM];
  size_t nout;
  dcp_status rc = dcp_flat_to_boxes(&region, (int64_t)begin, (int64_t)count, out,
                                    sizeof out / sizeof out[0], &nout);
  if (rc)
    return dcpi_py_raise(rc, rc == DCP_EBOUNDS ? "the flat range exceeds the region"
                                               : "invalid region or range");
  PyObject *list = PyList_New((Py_ssize_t)nout);
  for (size_t i = 0; list && i < nout; i++) {
    PyObject *b = dcpi_py_box_tuple(&out[i]);
    if (!b) Py_CLEAR(list);
    else PyList_SET_ITEM(list, (Py_ssize_t)i, b);
  }
  return list;
}

/* A box given as (offset, size) into *box. Returns 0 or -1. */
static int parse_box(PyObject *o, dcp_box *box, const char *what) {
  PyObject *off, *size;
  uint32_t n2;
  if (!PyArg_ParseTuple(o, "OO", &off, &size) ||
      dcpi_py_i64_seq(off, box->offset, DCP_MAX_NDIM, &box->ndim, what) ||
      dcpi_py_i64_seq(size, box->size, DCP_MAX_NDIM, &n2, what))
    return -1;
  if (n2 != box->ndim) {
    dcpi_py_raisef(DCP_EINVAL, "%s: offset and size differ in length", what);
    return -1;
  }
  return 0;
}

static PyObject *py_box_numel(PyObject *m, PyObject *arg) {
  (void)m;
  dcp_box b;
  int64_t n;
  if (parse_box(arg, &b, "box")) return NULL;
  dcp_status rc = dcp_box_numel(&b, &n);
  if (rc) return dcpi_py_raise(rc, "invalid box (negative or overflowing extents)");
  return PyLong_FromLongLong((long long)n);
}

/* box_intersect(a, b) -> (offset, size) of the intersection, or None. */
static PyObject *py_box_intersect(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *ao, *bo;
  dcp_box a, b, out;
  if (!PyArg_ParseTuple(args, "OO", &ao, &bo) || parse_box(ao, &a, "box a") ||
      parse_box(bo, &b, "box b"))
    return NULL;
  int rc = dcp_box_intersect(&a, &b, &out);
  if (rc < 0) return dcpi_py_raise((dcp_status)rc, "boxes of different ndim, or invalid");
  if (rc == 0) Py_RETURN_NONE;
  return dcpi_py_box_tuple(&out);
}

#define METH(name, fn, flags, doc) {name, (PyCFunction)(void (*)(void))(fn), flags, doc}
#define KW (METH_VARARGS | METH_KEYWORDS)
static PyMethodDef module_methods[] = {
    METH("version", py_version, METH_NOARGS, "The linked libdcp's version string."),
    METH("strerror", py_strerror, METH_O, "strerror(status) -> description of a status code."),
    METH("dtype_size", py_dtype_size, METH_O, "Bytes per element of a dtype (code or name)."),
    METH("dtype_name", py_dtype_name, METH_O, "The safetensors name of a dtype."),
    METH("flat_to_boxes", py_flat_to_boxes, METH_VARARGS,
         "flat_to_boxes((offset, size), flat_begin, flat_count) -> list of (offset, size)."),
    METH("box_numel", py_box_numel, METH_O, "box_numel((offset, size)) -> element count."),
    METH("box_intersect", py_box_intersect, METH_VARARGS,
         "box_intersect(a, b) -> (offset, size) of the intersection, or None when empty."),
    METH("meta_open_memory", dcpi_py_meta_open_memory, METH_VARARGS,
         "meta_open_memory(ctx, data) -> Meta of an encoded .metadata buffer."),
    METH("save", dcpi_py_save, KW,
         "save(ctx, state, path, *, overwrite=False, compress=False, flags=0, block_size=0, "
         "zstd_level=0, policy=0, kv=None, save_id=0): collective save (dcp_save)."),
    METH("async_save", dcpi_py_async_save, KW,
         "async_save(ctx, state, path, **save options) -> AsyncSave, once staged."),
    METH("load", dcpi_py_load, KW,
         "load(ctx, state, path, *, flags=0, read_dedup=0, reader_policy=0, "
         "max_inflight_bytes=0): collective load with resharding (dcp_load)."),
    METH("meta_open", dcpi_py_meta_open, METH_VARARGS,
         "meta_open(ctx, path) -> Meta: the committed .metadata, read on this rank."),
    METH("verify", dcpi_py_verify, METH_VARARGS, "verify(ctx, path) -> report dict."),
    METH("import_safetensors", dcpi_py_import_safetensors, KW,
         "import_safetensors(ctx, src, ckpt, *, link=False)."),
    METH("export_safetensors", dcpi_py_export_safetensors, KW,
         "export_safetensors(ctx, ckpt, outdir, *, max_shard_bytes=0)."),
    METH("set_phase_progress", dcpi_py_set_phase_progress, METH_VARARGS,
         "set_phase_progress(ctx, fn or None): call fn(phase, done, total) (phase 'save', "
         "'load', 'import', 'export' or 'verify'; bytes) as they progress on ctx."),
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "dcp._dcp",
    .m_doc = "Thin CPython binding of libdcp (include/dcp.h). Use the dcp package.",
    .m_size = -1,
    .m_methods = module_methods,
};

static const struct {
  const char *name;
  long value;
} constants[] = {
    {"BOOL", DCP_BOOL},
    {"U8", DCP_U8},
    {"I8", DCP_I8},
    {"I16", DCP_I16},
    {"U16", DCP_U16},
    {"I32", DCP_I32},
    {"U32", DCP_U32},
    {"I64", DCP_I64},
    {"U64", DCP_U64},
    {"F16", DCP_F16},
    {"BF16", DCP_BF16},
    {"F32", DCP_F32},
    {"F64", DCP_F64},
    {"F8_E4M3", DCP_F8_E4M3},
    {"F8_E5M2", DCP_F8_E5M2},
    {"F8_E8M0", DCP_F8_E8M0},
    {"C64", DCP_C64},
    {"SCOPE_REPLICATED", DCP_SCOPE_REPLICATED},
    {"SCOPE_PER_RANK", DCP_SCOPE_PER_RANK},
    {"POLICY_BALANCED", DCP_POLICY_BALANCED},
    {"POLICY_LOWEST_RANK", DCP_POLICY_LOWEST_RANK},
    {"SAVE_OVERWRITE", DCP_SAVE_OVERWRITE},
    {"SAVE_COMPRESS", DCP_SAVE_COMPRESS},
    {"SAVE_CHECK_REPLICAS", DCP_SAVE_CHECK_REPLICAS},
    {"CHECK_REPORT_ONLY", DCP_CHECK_REPORT_ONLY},
    {"LOAD_METADATA_PER_RANK", DCP_LOAD_METADATA_PER_RANK},
    {"LOAD_NO_PIPELINE", DCP_LOAD_NO_PIPELINE},
    {"READ_DEDUP_AUTO", DCP_READ_DEDUP_AUTO},
    {"READ_DEDUP_OFF", DCP_READ_DEDUP_OFF},
    {"READ_DEDUP_ON", DCP_READ_DEDUP_ON},
    {"OK", DCP_OK},
    {"EINVAL", DCP_EINVAL},
    {"ENOMEM", DCP_ENOMEM},
    {"EOVERFLOW", DCP_EOVERFLOW},
    {"ECORRUPT", DCP_ECORRUPT},
    {"EVERSION", DCP_EVERSION},
    {"EMISMATCH", DCP_EMISMATCH},
    {"EBOUNDS", DCP_EBOUNDS},
    {"EOVERLAP", DCP_EOVERLAP},
    {"EEXIST", DCP_EEXIST},
    {"ENOTFOUND", DCP_ENOTFOUND},
    {"ESCOPE", DCP_ESCOPE},
    {"ENAME", DCP_ENAME},
    {"EINCOMPLETE", DCP_EINCOMPLETE},
    {"EIO", DCP_EIO},
    {"ENOSPC", DCP_ENOSPC},
    {"ETIMEDOUT", DCP_ETIMEDOUT},
    {"EPEER", DCP_EPEER},
    {"EPLUGIN", DCP_EPLUGIN},
    {"EBUSY", DCP_EBUSY},
    {"ESTALE", DCP_ESTALE},
    {"EREPLICA", DCP_EREPLICA},
    {"MAX_NDIM", DCP_MAX_NDIM},
    {"MAX_NAME", DCP_MAX_NAME},
};

extern PyTypeObject dcpi_py_manager_type; /* manager.c */

static int add_type(PyObject *m, PyTypeObject *t, const char *name) {
  if (PyType_Ready(t) < 0) return -1;
  return PyModule_AddObjectRef(m, name, (PyObject *)t);
}

PyMODINIT_FUNC PyInit__dcp(void);
PyMODINIT_FUNC PyInit__dcp(void) {
  /* the extension was compiled against dcp.h: refuse another major version */
  if (dcp_version_number() / 10000 != DCP_VERSION_MAJOR) {
    PyErr_Format(PyExc_ImportError, "dcp._dcp was built for libdcp %d.x, the linked one is %s",
                 DCP_VERSION_MAJOR, dcp_version_string());
    return NULL;
  }
  PyObject *m = PyModule_Create(&module_def);
  if (!m) return NULL;
  int bad = dcpi_py_errors_init(m) || add_type(m, &dcpi_py_ctx_type, "Context") ||
            add_type(m, &dcpi_py_layout_type, "Layout") ||
            add_type(m, &dcpi_py_state_type, "State") || add_type(m, &dcpi_py_meta_type, "Meta") ||
            add_type(m, &dcpi_py_async_type, "AsyncSave") ||
            add_type(m, &dcpi_py_manager_type, "Manager");
  for (size_t i = 0; !bad && i < sizeof constants / sizeof constants[0]; i++)
    bad = PyModule_AddIntConstant(m, constants[i].name, constants[i].value) < 0;
  if (bad) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}

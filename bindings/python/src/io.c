/* io.c — the module functions that do I/O: save, async_save, load, verify,
 * safetensors import and export. Each releases the GIL around the library
 * call and marks the context busy meanwhile. */
#include "pydcp.h"

PyObject *dcpi_py_save(PyObject *module, PyObject *args, PyObject *kwargs) {
  (void)module;
  dcpi_py_save_args a;
  if (dcpi_py_save_args_parse(args, kwargs, &a)) {
    dcpi_py_save_args_free(&a);
    return NULL;
  }
  dcpi_py_ctx *c = a.ctx;
  dcp_status rc;
  dcpi_py_ctx_enter(c);
  Py_BEGIN_ALLOW_THREADS
  rc = dcp_save(c->ctx, a.state->st, PyBytes_AS_STRING(a.path_bytes), &a.opts);
  Py_END_ALLOW_THREADS
  dcpi_py_ctx_leave(c);
  dcpi_py_save_args_free(&a);
  if (rc) return dcpi_py_raise_ctx(c->ctx, rc);
  Py_RETURN_NONE;
}

PyObject *dcpi_py_async_save(PyObject *module, PyObject *args, PyObject *kwargs) {
  (void)module;
  dcpi_py_save_args a;
  if (dcpi_py_save_args_parse(args, kwargs, &a)) {
    dcpi_py_save_args_free(&a);
    return NULL;
  }
  dcpi_py_ctx *c = a.ctx;
  dcp_async *h = NULL;
  dcp_status rc;
  c->async_used = 1;
  dcpi_py_ctx_enter(c);
  dcpi_py_ctx_end_staging(c);
  Py_BEGIN_ALLOW_THREADS
  rc = dcp_async_save(c->ctx, a.state->st, PyBytes_AS_STRING(a.path_bytes), &a.opts, &h);
  Py_END_ALLOW_THREADS
  dcpi_py_ctx_leave(c);
  PyObject *r = rc ? dcpi_py_raise_ctx(c->ctx, rc)
                  : dcpi_py_async_new(c, h, a.path, (PyObject *)a.state);
  dcpi_py_save_args_free(&a);
  return r;
}

PyObject *dcpi_py_load(PyObject *module, PyObject *args, PyObject *kwargs) {
  (void)module;
  dcpi_py_load_args a;
  if (dcpi_py_load_args_parse(args, kwargs, &a)) {
    dcpi_py_load_args_free(&a);
    return NULL;
  }
  dcpi_py_ctx *c = a.ctx;
  dcp_status rc;
  dcpi_py_ctx_enter(c);
  dcpi_py_ctx_end_staging(c); /* a background staging must not copy what this load writes */
  Py_BEGIN_ALLOW_THREADS
  rc = dcp_load(c->ctx, a.state->st, PyBytes_AS_STRING(a.path_bytes), &a.opts);
  Py_END_ALLOW_THREADS
  dcpi_py_ctx_leave(c);
  dcpi_py_load_args_free(&a);
  if (rc) return dcpi_py_raise_ctx(c->ctx, rc);
  Py_RETURN_NONE;
}

/* verify(ctx, path) -> dict of the dcp_verify_report (problems 0 when the
 * checkpoint is sound); raises only when it could not be checked at all
 * (the report then goes with the error's message). */
PyObject *dcpi_py_verify(PyObject *module, PyObject *args) {
  (void)module;
  PyObject *ctx_obj, *path;
  if (!PyArg_ParseTuple(args, "OO&", &ctx_obj, PyUnicode_FSConverter, &path)) return NULL;
  dcpi_py_ctx *c = dcpi_py_ctx_usable(ctx_obj);
  if (!c) {
    Py_DECREF(path);
    return NULL;
  }
  dcp_verify_report r = {.struct_size = sizeof r};
  dcp_status rc;
  dcpi_py_ctx_enter(c);
  Py_BEGIN_ALLOW_THREADS
  rc = dcp_verify(c->ctx, PyBytes_AS_STRING(path), &r);
  Py_END_ALLOW_THREADS
  dcpi_py_ctx_leave(c);
  Py_DECREF(path);
  (void)rc; /* the outcome is in the report: first_status */
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:i,s:s}", "tensors",
                       (unsigned long long)r.tensors, "chunks", (unsigned long long)r.chunks,
                       "bytes_items", (unsigned long long)r.bytes_items, "blocks",
                       (unsigned long long)r.blocks, "bytes", (unsigned long long)r.bytes,
                       "problems", (unsigned long long)r.problems, "first_status",
                       (int)r.first_status, "first_problem", r.first_problem);
}

PyObject *dcpi_py_import_safetensors(PyObject *module, PyObject *args, PyObject *kwargs) {
  (void)module;
  static char *kw[] = {"ctx", "src", "ckpt", "link", NULL};
  PyObject *ctx_obj, *src, *ckpt;
  int link = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO&O&|$p", kw, &ctx_obj, PyUnicode_FSConverter,
                                   &src, PyUnicode_FSConverter, &ckpt, &link))
    return NULL;
  dcpi_py_ctx *c = dcpi_py_ctx_usable(ctx_obj);
  dcp_status rc = DCP_EINVAL;
  if (c) {
    dcpi_py_ctx_enter(c);
    Py_BEGIN_ALLOW_THREADS
    rc = dcp_import_safetensors(c->ctx, PyBytes_AS_STRING(src), PyBytes_AS_STRING(ckpt),
                                link ? DCP_IMPORT_LINK : 0u);
    Py_END_ALLOW_THREADS
    dcpi_py_ctx_leave(c);
  }
  Py_DECREF(src);
  Py_DECREF(ckpt);
  if (!c) return NULL;
  if (rc) return dcpi_py_raise_ctx(c->ctx, rc);
  Py_RETURN_NONE;
}

PyObject *dcpi_py_export_safetensors(PyObject *module, PyObject *args, PyObject *kwargs) {
  (void)module;
  static char *kw[] = {"ctx", "ckpt", "outdir", "max_shard_bytes", NULL};
  PyObject *ctx_obj, *ckpt, *outdir, *max_obj = NULL;
  uint64_t max_shard = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO&O&|$O", kw, &ctx_obj, PyUnicode_FSConverter,
                                   &ckpt, PyUnicode_FSConverter, &outdir, &max_obj))
    return NULL;
  if (dcpi_py_uint_arg(max_obj, "max_shard_bytes", INT64_MAX, &max_shard)) {
    Py_DECREF(ckpt);
    Py_DECREF(outdir);
    return NULL;
  }
  dcpi_py_ctx *c = dcpi_py_ctx_usable(ctx_obj);
  dcp_status rc = DCP_EINVAL;
  if (c) {
    dcpi_py_ctx_enter(c);
    Py_BEGIN_ALLOW_THREADS
    rc = dcp_export_safetensors(c->ctx, PyBytes_AS_STRING(ckpt), PyBytes_AS_STRING(outdir),
                                max_shard);
    Py_END_ALLOW_THREADS
    dcpi_py_ctx_leave(c);
  }
  Py_DECREF(ckpt);
  Py_DECREF(outdir);
  if (!c) return NULL;
  if (rc) return dcpi_py_raise_ctx(c->ctx, rc);
  Py_RETURN_NONE;
}

/* ctx.c — dcp.Context: a dcp_ctx with its rank, world, last error,
 * statistics and async-save configuration. Creating one may be collective
 * (file, gloo, mpi collectives) and so runs with the GIL released. */
#include "pydcp.h"

#include <stddef.h>
#include <stdlib.h>

dcpi_py_ctx *dcpi_py_ctx_usable(PyObject *obj) {
  if (!PyObject_TypeCheck(obj, &dcpi_py_ctx_type)) {
    PyErr_Format(PyExc_TypeError, "expected a dcp.Context, got %.100s", Py_TYPE(obj)->tp_name);
    return NULL;
  }
  dcpi_py_ctx *c = (dcpi_py_ctx *)obj;
  if (!c->ctx) return (dcpi_py_ctx *)dcpi_py_raise(DCP_EINVAL, "the context is closed");
  if (c->busy)
    return (dcpi_py_ctx *)dcpi_py_raise(
        DCP_EINVAL, "the context is in use by another thread (a save, load or wait is running)");
  return c;
}

void dcpi_py_ctx_enter(dcpi_py_ctx *c) { c->busy = 1; }
void dcpi_py_ctx_leave(dcpi_py_ctx *c) { c->busy = 0; }
void dcpi_py_ctx_hold(dcpi_py_ctx *c) { c->dependents++; }
void dcpi_py_ctx_release(dcpi_py_ctx *c) { c->dependents--; }

/* An optional str keyword as UTF-8 (NULL when None). Returns -1 on error. */
static int opt_str(PyObject *o, const char **out) {
  *out = NULL;
  if (!o || o == Py_None) return 0;
  if (!(*out = dcpi_py_utf8(o, "a Context() option"))) return -1;
  return 0;
}

/* A plain Context() (no world_size=) inside a job whose environment says
 * WORLD_SIZE > 1 would save as "rank 0 of 1" from every process into one
 * path: refused, naming the two ways out. Returns -1 with the error set. */
static int refuse_silent_world(PyObject *kwargs) {
  if (kwargs && PyDict_GetItemString(kwargs, "world_size")) return 0;
  const char *env = getenv("WORLD_SIZE");
  if (!env || !*env) return 0;
  char *end = NULL;
  long world = strtol(env, &end, 10);
  if (*end || world <= 1) return 0;
  dcpi_py_raisef(DCP_EINVAL,
                 "Context(): the environment says WORLD_SIZE=%ld, and a context without "
                 "world_size= would be rank 0 of 1 in every process; use "
                 "dcp.Context.from_env() (ranks from torchrun's RANK/WORLD_SIZE or the "
                 "torch.distributed process group), or pass rank= and world_size= "
                 "(world_size=1 for a deliberately local context)",
                 world);
  return -1;
}

static int ctx_init(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"rank",          "world_size",      "coll",       "coll_options",
                       "rendezvous",    "storage",         "storage_options",
                       "timeout_ms",    "plugin_path",     "lease_ms",   NULL};
  dcpi_py_ctx *c = (dcpi_py_ctx *)self;
  int rank = 0, world = 1;
  long long timeout_ms = 0, lease_ms = 0;
  PyObject *o[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
  PyObject *plugin_path = NULL;
  if (c->ctx) {
    dcpi_py_raise(DCP_EINVAL, "the context is already initialised");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$iiOOOOOLOL", kw, &rank, &world, &o[0],
                                   &o[1], &o[2], &o[3], &o[4], &timeout_ms, &plugin_path,
                                   &lease_ms))
    return -1;
  if (refuse_silent_world(kwargs)) return -1;
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.rank = rank;
  cfg.world_size = world;
  if (timeout_ms) cfg.timeout_ms = (int64_t)timeout_ms;
  cfg.lease_ms = (int64_t)lease_ms;
  if (opt_str(o[0], &cfg.coll) || opt_str(o[1], &cfg.coll_options) ||
      opt_str(o[2], &cfg.rendezvous) || opt_str(o[3], &cfg.storage) ||
      opt_str(o[4], &cfg.storage_options) || opt_str(plugin_path, &cfg.plugin_path))
    return -1;
  dcp_ctx *ctx = NULL;
  dcp_status rc;
  char msg[2048] = "";
  Py_BEGIN_ALLOW_THREADS
  rc = dcp_ctx_create(&cfg, &ctx);
  /* the message is per thread: copy it before another call on this one */
  if (rc) snprintf(msg, sizeof msg, "%s", dcp_ctx_create_error());
  Py_END_ALLOW_THREADS
  if (rc) {
    dcpi_py_raise(rc, msg);
    return -1;
  }
  c->ctx = ctx;
  return 0;
}

/* Free the C context: stop the async writer first (it waits for a pending
 * save), with the GIL released because that may take a while. */
static void ctx_free_c(dcpi_py_ctx *c) {
  dcp_ctx *ctx = c->ctx;
  c->ctx = NULL;
  if (!ctx) return;
  int async_used = c->async_used;
  Py_BEGIN_ALLOW_THREADS
  if (async_used) dcp_async_shutdown(ctx);
  dcp_ctx_free(ctx);
  Py_END_ALLOW_THREADS
}

static void ctx_dealloc(PyObject *self) {
  ctx_free_c((dcpi_py_ctx *)self);
  Py_CLEAR(((dcpi_py_ctx *)self)->progress);
  Py_CLEAR(((dcpi_py_ctx *)self)->phase_progress);
  Py_TYPE(self)->tp_free(self);
}

/* dcp_progress_fn: the operation runs with the GIL released in the thread
 * that called it, so take the GIL back for the Python callback. An
 * exception in it cannot stop the operation: it is reported as unraisable. */
static void progress_trampoline(void *arg, uint64_t done, uint64_t total) {
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *fn = ((dcpi_py_ctx *)arg)->progress;
  if (fn) {
    PyObject *r = PyObject_CallFunction(fn, "KK", (unsigned long long)done,
                                        (unsigned long long)total);
    if (!r) PyErr_WriteUnraisable(fn);
    Py_XDECREF(r);
  }
  PyGILState_Release(g);
}

static PyObject *ctx_set_progress(PyObject *self, PyObject *fn) {
  dcpi_py_ctx *c = dcpi_py_ctx_usable(self);
  if (!c) return NULL;
  if (fn != Py_None && !PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "set_progress needs a callable or None");
    return NULL;
  }
  Py_CLEAR(c->progress);
  if (fn != Py_None) c->progress = Py_NewRef(fn);
  dcp_ctx_set_progress(c->ctx, c->progress ? progress_trampoline : NULL, c);
  Py_RETURN_NONE;
}

static PyObject *ctx_close(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_ctx *c = (dcpi_py_ctx *)self;
  if (!c->ctx) Py_RETURN_NONE;
  if (c->busy) return dcpi_py_raise(DCP_EINVAL, "the context is in use by another thread");
  if (c->dependents)
    return dcpi_py_raisef(DCP_EINVAL,
                          "%zd states, metadata views or async handles still use the context",
                          c->dependents);
  ctx_free_c(c);
  Py_RETURN_NONE;
}

static PyObject *ctx_enter_cm(PyObject *self, PyObject *unused) {
  (void)unused;
  return Py_NewRef(self);
}

static PyObject *ctx_exit_cm(PyObject *self, PyObject *args) {
  (void)args;
  PyObject *r = ctx_close(self, NULL);
  if (!r) return NULL;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

static PyObject *ctx_last_error(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_ctx *c = (dcpi_py_ctx *)self;
  if (!c->ctx) return dcpi_py_raise(DCP_EINVAL, "the context is closed");
  return PyUnicode_FromString(dcp_ctx_last_error(c->ctx));
}

static PyObject *ctx_last_status(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_ctx *c = (dcpi_py_ctx *)self;
  if (!c->ctx) return dcpi_py_raise(DCP_EINVAL, "the context is closed");
  return PyLong_FromLong((long)dcp_ctx_last_status(c->ctx));
}

/* Add d[name] = value (stolen); returns -1 on failure. */
static int put(PyObject *d, const char *name, PyObject *value) {
  if (!value) return -1;
  int rc = PyDict_SetItemString(d, name, value);
  Py_DECREF(value);
  return rc;
}

#define F(name) {#name, offsetof(dcp_stats, name)}
static const struct {
  const char *name;
  size_t off;
} stat_doubles[] = {F(plan_s), F(write_s), F(commit_s), F(read_s), F(total_s)},
  stat_u64[] = {F(bytes_written),    F(write_ops),          F(bytes_read),
                F(read_ops),         F(sync_ops),           F(meta_ops),
                F(coll_bytes),       F(coll_ops),           F(items_written),
                F(data_bytes),       F(data_read_bytes),    F(read_payload_bytes),
                F(dedup_sent_bytes), F(dedup_recv_bytes),   F(dedup_groups),
                F(plan_coll_bytes),  F(mem_read_bytes),     F(mem_fallback_bytes),
                F(peer_recv_bytes)},
  stat_u32[] = {F(dedup_path), F(plan_cache_hit), F(mem_tier), F(save_plan_path)};
#undef F

static PyObject *ctx_stats(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_ctx *c = dcpi_py_ctx_usable(self);
  if (!c) return NULL;
  dcp_stats s = {.struct_size = sizeof s};
  dcp_status rc = dcp_ctx_stats(c->ctx, &s);
  if (rc) return dcpi_py_raise_ctx(c->ctx, rc);
  PyObject *d = PyDict_New();
  const char *base = (const char *)&s;
  int bad = !d;
  for (size_t i = 0; !bad && i < sizeof stat_doubles / sizeof stat_doubles[0]; i++)
    bad = put(d, stat_doubles[i].name,
              PyFloat_FromDouble(*(const double *)(base + stat_doubles[i].off))) < 0;
  for (size_t i = 0; !bad && i < sizeof stat_u64 / sizeof stat_u64[0]; i++)
    bad = put(d, stat_u64[i].name, PyLong_FromUnsignedLongLong(
                                       *(const uint64_t *)(base + stat_u64[i].off))) < 0;
  for (size_t i = 0; !bad && i < sizeof stat_u32 / sizeof stat_u32[0]; i++)
    bad = put(d, stat_u32[i].name,
              PyLong_FromUnsignedLong(*(const uint32_t *)(base + stat_u32[i].off))) < 0;
  if (bad) Py_CLEAR(d);
  return d;
}

static PyObject *ctx_set_coordination(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"coll", "rendezvous", "options", NULL};
  const char *coll, *rdv = NULL, *options = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|zz", kw, &coll, &rdv, &options)) return NULL;
  dcpi_py_ctx *c = dcpi_py_ctx_usable(self);
  if (!c) return NULL;
  dcp_status rc = dcp_async_set_coordination(c->ctx, coll, rdv, options);
  if (rc) return dcpi_py_raise_ctx(c->ctx, rc);
  Py_RETURN_NONE;
}

static PyObject *ctx_async_shutdown(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_ctx *c = dcpi_py_ctx_usable(self);
  if (!c) return NULL;
  dcpi_py_ctx_enter(c);
  Py_BEGIN_ALLOW_THREADS
  dcp_async_shutdown(c->ctx);
  Py_END_ALLOW_THREADS
  dcpi_py_ctx_leave(c);
  Py_RETURN_NONE;
}

static PyObject *ctx_get_rank(PyObject *self, void *closure) {
  (void)closure;
  dcpi_py_ctx *c = (dcpi_py_ctx *)self;
  if (!c->ctx) return dcpi_py_raise(DCP_EINVAL, "the context is closed");
  return PyLong_FromLong((long)dcp_ctx_rank(c->ctx));
}

static PyObject *ctx_get_world(PyObject *self, void *closure) {
  (void)closure;
  dcpi_py_ctx *c = (dcpi_py_ctx *)self;
  if (!c->ctx) return dcpi_py_raise(DCP_EINVAL, "the context is closed");
  return PyLong_FromLong((long)dcp_ctx_world_size(c->ctx));
}

static PyObject *ctx_get_closed(PyObject *self, void *closure) {
  (void)closure;
  return PyBool_FromLong(((dcpi_py_ctx *)self)->ctx == NULL);
}

/* Context.from_env(**options): implemented in Python (dcp/_env.py), where
 * torch.distributed and the launcher's variables are at hand. */
static PyObject *ctx_from_env(PyObject *cls, PyObject *args, PyObject *kwargs) {
  if (PyTuple_GET_SIZE(args)) {
    PyErr_SetString(PyExc_TypeError, "Context.from_env() takes keyword arguments only");
    return NULL;
  }
  PyObject *mod = PyImport_ImportModule("dcp._env");
  if (!mod) return NULL;
  PyObject *fn = PyObject_GetAttrString(mod, "from_env");
  Py_DECREF(mod);
  if (!fn) return NULL;
  PyObject *cargs = PyTuple_Pack(1, cls);
  PyObject *r = cargs ? PyObject_Call(fn, cargs, kwargs) : NULL;
  Py_XDECREF(cargs);
  Py_DECREF(fn);
  return r;
}

#define METH(name, fn, flags, doc) {name, (PyCFunction)(void (*)(void))(fn), flags, doc}
static PyMethodDef ctx_methods[] = {
    METH("close", ctx_close, METH_NOARGS,
         "Free the context (stopping its async writer). Refused while states, views "
         "or handles made from it are alive."),
    METH("__enter__", ctx_enter_cm, METH_NOARGS, NULL),
    METH("__exit__", ctx_exit_cm, METH_VARARGS, NULL),
    METH("last_error", ctx_last_error, METH_NOARGS,
         "The message of the last failing call on the context, or ''."),
    METH("last_status", ctx_last_status, METH_NOARGS,
         "The status of the last failing call on the context (0 when none failed)."),
    METH("stats", ctx_stats, METH_NOARGS,
         "What the last save, load or async wait did on this rank, as a dict of dcp_stats."),
    METH("set_async_coordination", ctx_set_coordination, METH_VARARGS | METH_KEYWORDS,
         "set_async_coordination(coll, rendezvous=None, options=None): how the async "
         "writers of the ranks coordinate ('file', 'gloo', 'none')."),
    METH("set_progress", ctx_set_progress, METH_O,
         "set_progress(fn or None): call fn(done, total) (bytes) during safetensors "
         "import/export and verify on this context."),
    METH("from_env", ctx_from_env, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
         "Context.from_env(**options): the context of this process in a torchrun "
         "(or torch.distributed) job: rank and world size from RANK/WORLD_SIZE or the "
         "initialised process group, the gloo collective with its rendezvous, and the "
         "async writers' coordination. See dcp._env.from_env."),
    METH("check_replicas", dcpi_py_ctx_check_replicas, METH_VARARGS | METH_KEYWORDS,
         "check_replicas(state, report_only=False): compare every rank's copy of each "
         "replicated box and bytes item (collective, dcp_check_replicas); returns the "
         "report as a dict, raises dcp.ReplicaError on a mismatch unless report_only."),
    METH("async_shutdown", ctx_async_shutdown, METH_NOARGS,
         "Wait for a pending async save and stop the writer process."),
    METH("async_prepare", dcpi_py_ctx_async_prepare, METH_VARARGS | METH_KEYWORDS,
         "async_prepare(state=None): start the writer, size and pre-fault the staging "
         "pool for state and open the writers' collective ahead of the first async "
         "save (every rank calls it)."),
    METH("set_async_staging", dcpi_py_ctx_set_async_staging, METH_O,
         "set_async_staging(background): True: async_save returns before the copy and "
         "the handle's fence() (or `with handle:`) waits for it; False: the default."),
    METH("set_memtier", dcpi_py_ctx_set_memtier, METH_VARARGS | METH_KEYWORDS,
         "set_memtier(keep=1, budget_bytes=0, linger_ms=0, job=None, replicas=0, "
         "peer_jump=0): the memory tier (docs/recovery.md): the async writer keeps the last "
         "`keep` saves in memory (and on `replicas` peers, rank + k*peer_jump) and outlives a "
         "crashed trainer; loads read a matching snapshot first. Same on every rank; call it "
         "before the first async save."),
    METH("memtier_stop", dcpi_py_ctx_memtier_stop, METH_NOARGS,
         "Have this job's and rank's writer on this host drop its snapshots and exit once "
         "it has no trainer."),
    {NULL, NULL, 0, NULL}};

static PyGetSetDef ctx_getset[] = {
    {"rank", ctx_get_rank, NULL, "This context's rank.", NULL},
    {"world_size", ctx_get_world, NULL, "The number of ranks.", NULL},
    {"closed", ctx_get_closed, NULL, "Whether close() was called.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject dcpi_py_ctx_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dcp.Context",
    .tp_basicsize = sizeof(dcpi_py_ctx),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Context(*, rank=0, world_size=1, coll=None, coll_options=None, "
              "rendezvous=None, storage=None, storage_options=None, timeout_ms=0, "
              "plugin_path=None, lease_ms=0): a libdcp context (dcp_ctx_create).",
    .tp_new = PyType_GenericNew,
    .tp_init = ctx_init,
    .tp_dealloc = ctx_dealloc,
    .tp_methods = ctx_methods,
    .tp_getset = ctx_getset,
};

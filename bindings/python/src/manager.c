/* manager.c — dcp._dcp.Manager: a thin wrapper of dcp_manager_* (dcp.h,
 * docs/manager.md). The Pythonic class is dcp.CheckpointManager
 * (dcp/manager.py). Every call that does I/O or talks to other ranks runs
 * with the GIL released and the context marked busy; the keep predicate
 * and the log callback re-take the GIL to call into Python. */
#include "pydcp.h"

typedef struct {
  PyObject_HEAD
  dcpi_py_ctx *owner;
  dcp_manager *m;  /* NULL once closed */
  PyObject *keep;  /* callable(step) -> bool, or NULL */
  PyObject *log;   /* callable(line), or NULL */
  int64_t *keep_steps;
  PyObject *cb_type, *cb_value, *cb_tb; /* what a callback raised (reported after the call) */
} dcpi_py_manager;

/* Run the statement (one call into libdcp that sets rc) with the context c
 * marked busy and the GIL released: the one way every method below calls
 * the manager. */
#define UNLOCKED(c, ...)       \
  do {                         \
    dcpi_py_ctx_enter(c);      \
    Py_BEGIN_ALLOW_THREADS     \
    __VA_ARGS__;               \
    Py_END_ALLOW_THREADS       \
    dcpi_py_ctx_leave(c);      \
  } while (0)

/* Keep the first exception a callback raised (the GIL held). */
static void keep_error(dcpi_py_manager *pm) {
  if (!PyErr_Occurred()) return;
  if (pm->cb_type) {
    PyErr_Clear();
    return;
  }
  PyErr_Fetch(&pm->cb_type, &pm->cb_value, &pm->cb_tb);
}

static int keep_cb(void *arg, int64_t step) {
  dcpi_py_manager *pm = arg;
  PyGILState_STATE g = PyGILState_Ensure();
  int keep = 1; /* a failing predicate keeps the step: the safe side */
  PyObject *r = PyObject_CallFunction(pm->keep, "L", (long long)step);
  if (r) {
    keep = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (keep < 0) keep = 1;
  }
  keep_error(pm);
  PyGILState_Release(g);
  return keep;
}

static void log_cb(void *arg, const char *line) {
  dcpi_py_manager *pm = arg;
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *r = PyObject_CallFunction(pm->log, "s", line);
  Py_XDECREF(r);
  keep_error(pm);
  PyGILState_Release(g);
}

/* Raise what a callback raised during the last call, if anything. */
static int callback_error(dcpi_py_manager *pm) {
  if (!pm->cb_type) return 0;
  PyErr_Restore(pm->cb_type, pm->cb_value, pm->cb_tb);
  pm->cb_type = pm->cb_value = pm->cb_tb = NULL;
  return -1;
}

/* Free the C manager; the context no longer counts it as a dependent (so
 * it may be closed), though the Python object keeps its reference. */
static void manager_close_c(dcpi_py_manager *pm) {
  if (!pm->m) return;
  dcp_manager *m = pm->m;
  pm->m = NULL;
  Py_BEGIN_ALLOW_THREADS
  dcp_manager_free(m);
  Py_END_ALLOW_THREADS
  if (pm->owner) dcpi_py_ctx_release(pm->owner);
}

static void manager_dealloc(PyObject *self) {
  dcpi_py_manager *pm = (dcpi_py_manager *)self;
  manager_close_c(pm);
  Py_XDECREF(pm->keep);
  Py_XDECREF(pm->log);
  Py_XDECREF(pm->cb_type);
  Py_XDECREF(pm->cb_value);
  Py_XDECREF(pm->cb_tb);
  PyMem_Free(pm->keep_steps);
  Py_XDECREF(pm->owner);
  Py_TYPE(self)->tp_free(self);
}

/* Manager(ctx, root, *, keep_last=0, keep_every=0, max_bytes=0,
 *         keep_steps=(), keep=None, read_only=False, auto_gc=True,
 *         keep_incomplete=False, quiet=False, log=None, defer_fence=False) */
static PyObject *manager_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  static char *names[] = {"ctx",     "root",      "keep_last", "keep_every", "max_bytes",
                          "keep_steps", "keep",   "read_only", "auto_gc",    "keep_incomplete",
                          "quiet",   "log",       "defer_fence", NULL};
  PyObject *ctx_obj, *root_obj, *keep_steps = NULL, *keep = Py_None, *log = Py_None;
  /* checked conversions: "I" and "K" wrap (keep_last=2**32+1 was 1) */
  long long keep_last = 0, keep_every = 0, max_bytes = 0;
  int read_only = 0, auto_gc = 1, keep_incomplete = 0, quiet = 0, defer_fence = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$LLLOOppppOp:Manager", names, &ctx_obj,
                                   &root_obj, &keep_last, &keep_every, &max_bytes, &keep_steps,
                                   &keep, &read_only, &auto_gc, &keep_incomplete, &quiet, &log,
                                   &defer_fence))
    return NULL;
  if (keep_last < 0 || keep_last > (long long)UINT32_MAX || keep_every < 0 || max_bytes < 0)
    return dcpi_py_raise(DCP_EINVAL, "Manager: keep_last (at most 2^32-1), keep_every and "
                                     "max_bytes must not be negative");
  dcpi_py_ctx *c = dcpi_py_ctx_usable(ctx_obj);
  if (!c) return NULL;
  if ((keep != Py_None && !PyCallable_Check(keep)) || (log != Py_None && !PyCallable_Check(log))) {
    PyErr_SetString(PyExc_TypeError, "keep and log must be callables or None");
    return NULL;
  }
  PyObject *root_bytes = NULL;
  if (!PyUnicode_FSConverter(root_obj, &root_bytes)) return NULL;
  dcpi_py_manager *pm = (dcpi_py_manager *)type->tp_alloc(type, 0);
  if (!pm) {
    Py_DECREF(root_bytes);
    return NULL;
  }
  dcp_manager_options o;
  dcp_manager_options_init(&o);
  o.keep_last = keep_last;
  o.keep_every = keep_every;
  o.max_bytes = max_bytes;
  o.flags = (read_only ? DCP_MANAGER_READ_ONLY : 0) | (auto_gc ? 0 : DCP_MANAGER_NO_AUTO_GC) |
            (keep_incomplete ? DCP_MANAGER_KEEP_INCOMPLETE : 0) | (quiet ? DCP_MANAGER_QUIET : 0) |
            (defer_fence ? DCP_MANAGER_DEFER_FENCE : 0);
  if (keep_steps && keep_steps != Py_None) {
    PyObject *seq = PySequence_Fast(keep_steps, "keep_steps must be a sequence of ints");
    if (!seq) goto fail;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    pm->keep_steps = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *pm->keep_steps);
    for (Py_ssize_t i = 0; pm->keep_steps && i < n; i++) {
      long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
      if (v == -1 && PyErr_Occurred()) {
        Py_DECREF(seq);
        goto fail;
      }
      pm->keep_steps[i] = (int64_t)v;
    }
    Py_DECREF(seq);
    if (!pm->keep_steps) {
      PyErr_NoMemory();
      goto fail;
    }
    o.keep_steps = pm->keep_steps;
    o.nkeep_steps = (size_t)n;
  }
  if (keep != Py_None) {
    pm->keep = Py_NewRef(keep);
    o.keep_fn = keep_cb;
    o.keep_arg = pm;
  }
  if (log != Py_None) {
    pm->log = Py_NewRef(log);
    o.log_fn = log_cb;
    o.log_arg = pm;
  }
  dcp_status rc;
  dcp_manager *m = NULL;
  UNLOCKED(c, rc = dcp_manager_open(c->ctx, PyBytes_AS_STRING(root_bytes), &o, &m));
  if (rc) {
    dcpi_py_raise_ctx(c->ctx, rc);
    goto fail;
  }
  pm->m = m;
  pm->owner = (dcpi_py_ctx *)Py_NewRef((PyObject *)c);
  dcpi_py_ctx_hold(c);
  Py_DECREF(root_bytes);
  if (callback_error(pm)) {
    Py_DECREF(pm);
    return NULL;
  }
  return (PyObject *)pm;
fail:
  Py_XDECREF(root_bytes);
  Py_DECREF(pm);
  return NULL;
}

/* The manager behind self, open, with its context usable. */
static dcpi_py_ctx *usable(dcpi_py_manager *pm) {
  if (!pm->m) return (dcpi_py_ctx *)dcpi_py_raise(DCP_EINVAL, "the manager is closed");
  return dcpi_py_ctx_usable((PyObject *)pm->owner);
}

/* After a call: a callback's exception first, then the status. */
static PyObject *result(dcpi_py_manager *pm, dcp_status rc, PyObject *ok) {
  if (callback_error(pm)) {
    Py_XDECREF(ok);
    return NULL;
  }
  if (rc) {
    Py_XDECREF(ok);
    return dcpi_py_raise_ctx(pm->owner->ctx, rc);
  }
  return ok;
}

/* save(step, state, **save options) and save_async(...) */
/* The save or load options of kw, parsed as dcp._dcp.save / load parse
 * them from (ctx, state, path): path names the step in their messages.
 * 0, or -1 with an exception set (nothing left to free). */
static int save_args(dcpi_py_ctx *c, PyObject *state, const char *path, PyObject *kw,
                     dcpi_py_save_args *a) {
  PyObject *t = Py_BuildValue("(OOs)", (PyObject *)c, state, path);
  int bad = !t || dcpi_py_save_args_parse(t, kw, a);
  if (t && bad) dcpi_py_save_args_free(a);
  Py_XDECREF(t);
  return bad ? -1 : 0;
}

/* The same for the load options. */
static int load_args(dcpi_py_ctx *c, PyObject *state, PyObject *kw, dcpi_py_load_args *a) {
  PyObject *t = Py_BuildValue("(OOs)", (PyObject *)c, state, "step");
  int bad = !t || dcpi_py_load_args_parse(t, kw, a);
  if (t && bad) dcpi_py_load_args_free(a);
  Py_XDECREF(t);
  return bad ? -1 : 0;
}

static PyObject *do_save(dcpi_py_manager *pm, PyObject *args, PyObject *kw, int async) {
  dcpi_py_ctx *c = usable(pm);
  if (!c) return NULL;
  long long step;
  PyObject *state;
  if (!PyArg_ParseTuple(args, "LO", &step, &state)) return NULL;
  char path[64];
  snprintf(path, sizeof path, "step-%lld", step);
  dcpi_py_save_args a;
  if (save_args(c, state, path, kw, &a)) return NULL;
  dcp_status rc;
  if (async) c->async_used = 1;
  UNLOCKED(c, rc = async ? dcp_manager_save_async(pm->m, (int64_t)step, a.state->st, &a.opts)
                        : dcp_manager_save(pm->m, (int64_t)step, a.state->st, &a.opts));
  dcpi_py_save_args_free(&a);
  return result(pm, rc, Py_NewRef(Py_None));
}

static PyObject *m_save(PyObject *self, PyObject *args, PyObject *kw) {
  return do_save((dcpi_py_manager *)self, args, kw, 0);
}

static PyObject *m_save_async(PyObject *self, PyObject *args, PyObject *kw) {
  return do_save((dcpi_py_manager *)self, args, kw, 1);
}

/* wait(timeout=None): seconds, None without limit */
static PyObject *m_wait(PyObject *self, PyObject *args, PyObject *kw) {
  dcpi_py_manager *pm = (dcpi_py_manager *)self;
  static char *names[] = {"timeout", NULL};
  PyObject *timeout = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:wait", names, &timeout)) return NULL;
  int64_t ms = -1;
  if (timeout != Py_None) {
    double t = PyFloat_AsDouble(timeout);
    if (t == -1.0 && PyErr_Occurred()) return NULL;
    ms = t <= 0 ? 0 : (int64_t)(t * 1000.0);
  }
  dcpi_py_ctx *c = usable(pm);
  if (!c) return NULL;
  dcp_status rc;
  UNLOCKED(c, rc = dcp_manager_wait(pm->m, ms));
  return result(pm, rc, Py_NewRef(Py_None));
}

static PyObject *m_fence(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_manager *pm = (dcpi_py_manager *)self;
  dcpi_py_ctx *c = usable(pm);
  if (!c) return NULL;
  dcp_status rc;
  UNLOCKED(c, rc = dcp_manager_fence(pm->m));
  return result(pm, rc, Py_NewRef(Py_None));
}

static PyObject *m_abort(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_manager *pm = (dcpi_py_manager *)self;
  dcpi_py_ctx *c = usable(pm);
  if (!c) return NULL;
  dcp_status rc;
  UNLOCKED(c, rc = dcp_manager_abort(pm->m));
  return result(pm, rc, Py_NewRef(Py_None));
}

/* Every step of m into *v (malloc'd, *n entries; the GIL not needed). */
static dcp_status list_steps(dcp_manager *m, dcp_step_info **v, size_t *n) {
  size_t cap = 0;
  *v = NULL;
  for (;;) { /* the root may grow between the calls */
    dcp_status rc = dcp_manager_list(m, *v, cap, n);
    if (rc || *n <= cap) return rc;
    free(*v);
    cap = *n + 8;
    if (!(*v = malloc(cap * sizeof **v))) return DCP_ENOMEM;
  }
}

/* steps() -> list of (step, state name, bytes, keep, note) */
static PyObject *m_steps(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_manager *pm = (dcpi_py_manager *)self;
  dcpi_py_ctx *c = usable(pm);
  if (!c) return NULL;
  dcp_step_info *v = NULL;
  size_t n = 0;
  dcp_status rc;
  UNLOCKED(c, rc = list_steps(pm->m, &v, &n));
  PyObject *list = rc ? NULL : PyList_New((Py_ssize_t)n);
  for (size_t i = 0; list && i < n; i++) {
    PyObject *t = Py_BuildValue("(LsKOs)", (long long)v[i].step, dcp_step_state_name(v[i].state),
                                (unsigned long long)v[i].bytes, v[i].keep ? Py_True : Py_False,
                                v[i].note);
    if (!t) Py_CLEAR(list);
    else PyList_SET_ITEM(list, (Py_ssize_t)i, t);
  }
  free(v);
  if (rc) return result(pm, rc, NULL);
  return result(pm, DCP_OK, list);
}

/* resume(verify=False) -> step, or None when no step is loadable */
static PyObject *m_resume(PyObject *self, PyObject *args, PyObject *kw) {
  dcpi_py_manager *pm = (dcpi_py_manager *)self;
  static char *names[] = {"verify", NULL};
  int verify = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|$p:resume", names, &verify)) return NULL;
  dcpi_py_ctx *c = usable(pm);
  if (!c) return NULL;
  int64_t step = -1;
  dcp_status rc;
  UNLOCKED(c, rc = dcp_manager_resume(pm->m, verify ? DCP_RESUME_VERIFY : 0, &step));
  if (rc == DCP_ENOTFOUND) return result(pm, DCP_OK, Py_NewRef(Py_None));
  return result(pm, rc, rc ? NULL : PyLong_FromLongLong((long long)step));
}

/* load(step, state, **load options) */
static PyObject *m_load(PyObject *self, PyObject *args, PyObject *kw) {
  dcpi_py_manager *pm = (dcpi_py_manager *)self;
  dcpi_py_ctx *c = usable(pm);
  if (!c) return NULL;
  long long step;
  PyObject *state;
  if (!PyArg_ParseTuple(args, "LO", &step, &state)) return NULL;
  dcpi_py_load_args a;
  if (load_args(c, state, kw, &a)) return NULL;
  dcp_status rc;
  dcpi_py_ctx_enter(c);
  dcpi_py_ctx_end_staging(c); /* as dcp.load: never under a background staging */
  dcpi_py_ctx_leave(c);
  UNLOCKED(c, rc = dcp_manager_load(pm->m, (int64_t)step, a.state->st, &a.opts));
  dcpi_py_load_args_free(&a);
  return result(pm, rc, Py_NewRef(Py_None));
}

static PyObject *report_dict(const dcp_manager_gc_report *r) {
  return Py_BuildValue("{s:i,s:s,s:K,s:K,s:K,s:K,s:O,s:s}", "status", (int)r->status, "code",
                       r->status ? dcp_strerror(r->status) : "ok", "deleted",
                       (unsigned long long)r->deleted, "kept", (unsigned long long)r->kept,
                       "failed", (unsigned long long)r->failed, "kept_bytes",
                       (unsigned long long)r->kept_bytes, "over_budget",
                       r->over_budget ? Py_True : Py_False, "message", r->message);
}

/* gc(dry_run=False) -> report dict; a failed deletion raises */
static PyObject *m_gc(PyObject *self, PyObject *args, PyObject *kw) {
  dcpi_py_manager *pm = (dcpi_py_manager *)self;
  static char *names[] = {"dry_run", NULL};
  int dry = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|$p:gc", names, &dry)) return NULL;
  dcpi_py_ctx *c = usable(pm);
  if (!c) return NULL;
  dcp_manager_gc_report r = {.struct_size = sizeof r};
  dcp_status rc;
  UNLOCKED(c, rc = dcp_manager_gc(pm->m, dry ? DCP_GC_DRY_RUN : 0, &r));
  return result(pm, rc, rc ? NULL : report_dict(&r));
}

static PyObject *m_gc_result(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_manager *pm = (dcpi_py_manager *)self;
  if (!pm->m) return dcpi_py_raise(DCP_EINVAL, "the manager is closed");
  dcp_manager_gc_report r = {.struct_size = sizeof r};
  dcp_manager_gc_result(pm->m, &r);
  return report_dict(&r);
}

static PyObject *m_step_path(PyObject *self, PyObject *arg) {
  dcpi_py_manager *pm = (dcpi_py_manager *)self;
  if (!pm->m) return dcpi_py_raise(DCP_EINVAL, "the manager is closed");
  long long step = PyLong_AsLongLong(arg);
  if (step == -1 && PyErr_Occurred()) return NULL;
  char buf[4200];
  dcp_status rc = dcp_manager_step_path(pm->m, (int64_t)step, buf, sizeof buf);
  if (rc) return dcpi_py_raisef(rc, "step %lld has no path", step);
  return PyUnicode_DecodeFSDefault(buf);
}

static PyObject *m_request_save(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_manager *pm = (dcpi_py_manager *)self;
  if (pm->m) dcp_manager_request_save(pm->m);
  Py_RETURN_NONE;
}

static PyObject *m_install_signal_handler(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_manager *pm = (dcpi_py_manager *)self;
  if (!pm->m) return dcpi_py_raise(DCP_EINVAL, "the manager is closed");
  return result(pm, dcp_manager_install_signal_handler(pm->m), Py_NewRef(Py_None));
}

static PyObject *m_should_save(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_manager *pm = (dcpi_py_manager *)self;
  dcpi_py_ctx *c = usable(pm);
  if (!c) return NULL;
  int go = 0;
  dcp_status rc;
  UNLOCKED(c, rc = dcp_manager_should_save(pm->m, &go));
  return result(pm, rc, rc ? NULL : PyBool_FromLong(go));
}

/* save_now(step, state, grace_ms, **save options) */
static PyObject *m_save_now(PyObject *self, PyObject *args, PyObject *kw) {
  dcpi_py_manager *pm = (dcpi_py_manager *)self;
  dcpi_py_ctx *c = usable(pm);
  if (!c) return NULL;
  long long step, grace;
  PyObject *state;
  if (!PyArg_ParseTuple(args, "LOL", &step, &state, &grace)) return NULL;
  dcpi_py_save_args a;
  if (save_args(c, state, "step", kw, &a)) return NULL;
  dcp_status rc;
  c->async_used = 1;
  UNLOCKED(c, rc = dcp_manager_save_now(pm->m, (int64_t)step, a.state->st, &a.opts,
                                        (int64_t)grace));
  dcpi_py_save_args_free(&a);
  return result(pm, rc, Py_NewRef(Py_None));
}

static PyObject *m_close(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_manager *pm = (dcpi_py_manager *)self;
  if (pm->m && pm->owner->busy)
    return dcpi_py_raise(DCP_EINVAL, "the manager's context is in use by another thread");
  manager_close_c(pm);
  Py_RETURN_NONE;
}

static PyObject *get_pending(PyObject *self, void *closure) {
  (void)closure;
  dcpi_py_manager *pm = (dcpi_py_manager *)self;
  int64_t s = pm->m ? dcp_manager_pending_step(pm->m) : -1;
  if (s < 0) Py_RETURN_NONE;
  return PyLong_FromLongLong((long long)s);
}

static PyObject *get_closed(PyObject *self, void *closure) {
  (void)closure;
  return PyBool_FromLong(((dcpi_py_manager *)self)->m == NULL);
}

#define METH(name, fn, flags, doc) {name, (PyCFunction)(void (*)(void))(fn), flags, doc}
#define KW (METH_VARARGS | METH_KEYWORDS)
static PyMethodDef manager_methods[] = {
    METH("save", m_save, KW, "save(step, state, **save options): durable on return."),
    METH("save_async", m_save_async, KW, "save_async(step, state, **save options): staged."),
    METH("wait", m_wait, KW, "wait(timeout=None): the pending async save, then latest/gc."),
    METH("fence", m_fence, METH_NOARGS, "fence(): wait until the pending async save is staged."),
    METH("abort", m_abort, METH_NOARGS, "abort(): give up the pending async save."),
    METH("steps", m_steps, METH_NOARGS, "steps() -> [(step, state, bytes, keep, note)]."),
    METH("resume", m_resume, KW, "resume(*, verify=False) -> newest loadable step or None."),
    METH("load", m_load, KW, "load(step, state, **load options)."),
    METH("gc", m_gc, KW, "gc(*, dry_run=False) -> report dict."),
    METH("gc_result", m_gc_result, METH_NOARGS, "The report of the last automatic gc."),
    METH("step_path", m_step_path, METH_O, "step_path(step) -> ROOT/step-N."),
    METH("request_save", m_request_save, METH_NOARGS, "Ask for a preemption save."),
    METH("install_signal_handler", m_install_signal_handler, METH_NOARGS,
         "SIGTERM/SIGUSR1 request a preemption save."),
    METH("should_save", m_should_save, METH_NOARGS, "Collective: take a preemption save now?"),
    METH("save_now", m_save_now, KW, "save_now(step, state, grace_ms, **save options)."),
    METH("close", m_close, METH_NOARGS, "Release the root (waits for a pending save)."),
    {NULL, NULL, 0, NULL}};

static PyGetSetDef manager_getset[] = {
    {"pending_step", get_pending, NULL, "step of the pending async save, or None", NULL},
    {"closed", get_closed, NULL, "whether close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject dcpi_py_manager_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dcp._dcp.Manager",
    .tp_basicsize = sizeof(dcpi_py_manager),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Manager(ctx, root, **policy): dcp_manager_* (use dcp.CheckpointManager).",
    .tp_new = manager_new,
    .tp_dealloc = manager_dealloc,
    .tp_methods = manager_methods,
    .tp_getset = manager_getset,
};

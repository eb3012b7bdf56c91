/* async.c — dcp.AsyncSave: the handle of a started async save. In blocking
 * staging (the default) it exists once the state is staged (the caller's
 * buffers may change); with background staging (ctx.set_async_staging(True))
 * fence() — or `with handle:` around the optimizer step — blocks until it
 * is, and the handle keeps the state alive until then. done() polls
 * whether it has persisted (or failed) without blocking, wait() blocks with
 * the GIL released and raises the save's error. The outcome and message of
 * the first wait are kept, so a later wait gives the same answer even after
 * other calls overwrote the context's last error. Also the context's
 * async_prepare() and set_async_staging(). */
#include "pydcp.h"

typedef struct {
  PyObject_HEAD
  dcpi_py_ctx *owner;
  dcp_async *h;
  PyObject *path;    /* str */
  PyObject *state;   /* the dcp.State staged, held until staging is over */
  int waited;        /* status and message are the outcome */
  dcp_status status;
  PyObject *message; /* str, once waited */
} dcpi_py_async;

/* Let the staged state go (the staging is over), and the context's pointer. */
static void drop_state(dcpi_py_async *a) {
  if (a->owner && a->owner->staging == (PyObject *)a) a->owner->staging = NULL;
  Py_CLEAR(a->state);
}

static void async_dealloc(PyObject *self) {
  dcpi_py_async *a = (dcpi_py_async *)self;
  if (a->h) {
    dcp_async *h = a->h;
    /* dcp_async_free waits for a save still running */
    Py_BEGIN_ALLOW_THREADS
    dcp_async_free(h);
    Py_END_ALLOW_THREADS
  }
  drop_state(a); /* after dcp_async_free: staging is over */
  Py_XDECREF(a->path);
  Py_XDECREF(a->message);
  if (a->owner) {
    dcpi_py_ctx_release(a->owner);
    Py_DECREF(a->owner);
  }
  Py_TYPE(self)->tp_free(self);
}

PyObject *dcpi_py_async_new(dcpi_py_ctx *c, dcp_async *h, PyObject *path, PyObject *state) {
  dcpi_py_async *a = PyObject_New(dcpi_py_async, &dcpi_py_async_type);
  if (!a) {
    dcp_async_free(h);
    return NULL;
  }
  a->h = h;
  a->path = Py_NewRef(path);
  a->state = Py_XNewRef(state);
  a->waited = 0;
  a->status = DCP_OK;
  a->message = NULL;
  a->owner = (dcpi_py_ctx *)Py_NewRef((PyObject *)c);
  dcpi_py_ctx_hold(c);
  if (state) c->staging = (PyObject *)a;
  return (PyObject *)a;
}

void dcpi_py_ctx_end_staging(dcpi_py_ctx *c) {
  dcpi_py_async *a = (dcpi_py_async *)c->staging;
  if (!a) return;
  dcp_async *h = a->h;
  Py_BEGIN_ALLOW_THREADS
  (void)dcp_async_fence(h); /* its failure is the save's: wait() raises it */
  Py_END_ALLOW_THREADS
  drop_state(a);
}

static PyObject *async_done(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_async *a = (dcpi_py_async *)self;
  if (a->waited) Py_RETURN_TRUE;
  int done = 0;
  dcp_status rc = dcp_async_test(a->h, &done);
  if (rc) return dcpi_py_raise(rc, "dcp_async_test failed");
  return PyBool_FromLong(done);
}

/* The outcome as None or the raised error. */
static PyObject *outcome(dcpi_py_async *a) {
  if (!a->status) Py_RETURN_NONE;
  return dcpi_py_raise(a->status, PyUnicode_AsUTF8(a->message));
}

/* Run dcp_async_wait_for(h, timeout_ms) (abort: dcp_async_abort) with the
 * GIL released. A finished save's outcome is kept; a timeout is raised
 * (dcp.TimedOutError) and leaves the save running. */
static PyObject *finish(dcpi_py_async *a, int64_t timeout_ms, int abort) {
  if (a->waited) return outcome(a);
  dcpi_py_ctx *c = dcpi_py_ctx_usable((PyObject *)a->owner);
  if (!c) return NULL;
  dcp_status rc;
  dcp_async *h = a->h;
  dcpi_py_ctx_enter(c);
  Py_BEGIN_ALLOW_THREADS
  rc = abort ? dcp_async_abort(h) : dcp_async_wait_for(h, timeout_ms);
  Py_END_ALLOW_THREADS
  dcpi_py_ctx_leave(c);
  if (rc == DCP_ETIMEDOUT && !abort) {
    int done = 0;
    dcp_async_test(h, &done);
    if (!done) return dcpi_py_raise(rc, dcp_ctx_last_error(c->ctx)); /* still running */
  }
  drop_state(a); /* a finished save's staging is over */
  if (!(a->message = PyUnicode_FromString(rc ? dcp_ctx_last_error(c->ctx) : ""))) return NULL;
  a->status = rc;
  a->waited = 1;
  return outcome(a);
}

static PyObject *async_wait(PyObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"timeout", NULL};
  PyObject *timeout = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:wait", names, &timeout)) return NULL;
  int64_t ms = -1;
  if (timeout != Py_None) {
    double secs = PyFloat_AsDouble(timeout);
    if (secs == -1.0 && PyErr_Occurred()) return NULL;
    if (!(secs >= 0)) {
      PyErr_SetString(PyExc_ValueError, "wait: timeout must be None or >= 0 seconds");
      return NULL;
    }
    ms = secs * 1000.0 > 9.0e15 ? INT64_MAX / 2 : (int64_t)(secs * 1000.0);
  }
  return finish((dcpi_py_async *)self, ms, 0);
}

static PyObject *async_abort(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_async *a = (dcpi_py_async *)self;
  PyObject *r = finish(a, -1, 1);
  if (r || !a->waited) return r;
  PyErr_Clear(); /* the outcome (an aborted save's DCP_EPEER) is wait()'s to raise */
  Py_RETURN_NONE;
}

/* dcp_async_fence with the GIL released; the state is let go after it
 * (the staging is over, failed or not). Returns self, or raises the
 * staging's error. */
static PyObject *async_fence(PyObject *self, PyObject *unused) {
  (void)unused;
  dcpi_py_async *a = (dcpi_py_async *)self;
  if (a->state) {
    dcpi_py_ctx *c = dcpi_py_ctx_usable((PyObject *)a->owner);
    if (!c) return NULL;
    dcp_status rc;
    dcp_async *h = a->h;
    dcpi_py_ctx_enter(c);
    Py_BEGIN_ALLOW_THREADS
    rc = dcp_async_fence(h);
    Py_END_ALLOW_THREADS
    dcpi_py_ctx_leave(c);
    drop_state(a);
    if (rc) return dcpi_py_raise_ctx(c->ctx, rc);
  }
  return Py_NewRef(self);
}

static PyObject *async_exit(PyObject *self, PyObject *args) {
  (void)self, (void)args;
  Py_RETURN_FALSE; /* exceptions of the with-block propagate */
}

static PyObject *async_get_status(PyObject *self, void *closure) {
  (void)closure;
  dcpi_py_async *a = (dcpi_py_async *)self;
  if (!a->waited) Py_RETURN_NONE;
  return PyLong_FromLong((long)a->status);
}

static PyObject *async_get_path(PyObject *self, void *closure) {
  (void)closure;
  return Py_NewRef(((dcpi_py_async *)self)->path);
}

#define METH(name, fn, flags, doc) {name, (PyCFunction)(void (*)(void))(fn), flags, doc}
static PyMethodDef async_methods[] = {
    METH("done", async_done, METH_NOARGS,
         "Whether the save has finished (persisted or failed); never blocks."),
    METH("wait", async_wait, METH_VARARGS | METH_KEYWORDS,
         "wait(timeout=None): block until the save has finished (at most timeout\n"
         "seconds: then dcp.TimedOutError, and the save goes on); raise its error\n"
         "(dcp.Error) if it failed."),
    METH("abort", async_abort, METH_NOARGS,
         "Give up on a save still persisting: its writer process is killed and\n"
         "nothing is committed; wait() then raises dcp.PeerError. A no-op once the\n"
         "save has finished."),
    METH("fence", async_fence, METH_NOARGS,
         "Block until the save is staged (its bytes copied, the job with the writer):\n"
         "the buffers may change from then on. Needed with background staging\n"
         "(Context.set_async_staging(True)) before the optimizer step; wait() implies\n"
         "it. Returns the handle; raises the staging's error (dcp.PeerError: the\n"
         "writer died). `with handle: optimizer.step()` fences on entry."),
    METH("__enter__", async_fence, METH_NOARGS, NULL),
    METH("__exit__", async_exit, METH_VARARGS, NULL),
    {NULL, NULL, 0, NULL}};

static PyGetSetDef async_getset[] = {
    {"status", async_get_status, NULL, "None until waited, then the dcp_status (0: persisted).",
     NULL},
    {"path", async_get_path, NULL, "The checkpoint directory.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject dcpi_py_async_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dcp.AsyncSave",
    .tp_basicsize = sizeof(dcpi_py_async),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The handle of an async save (from dcp.async_save): staged when it exists.",
    .tp_dealloc = async_dealloc,
    .tp_methods = async_methods,
    .tp_getset = async_getset,
};

/* ---- the context's async configuration --------------------------------- */

PyObject *dcpi_py_ctx_async_prepare(PyObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"state", NULL};
  PyObject *state_obj = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:async_prepare", names, &state_obj)) return NULL;
  dcpi_py_ctx *c = dcpi_py_ctx_usable(self);
  if (!c) return NULL;
  dcpi_py_state *s = NULL;
  if (state_obj != Py_None && !(s = dcpi_py_state_check(state_obj, c, 0))) return NULL;
  dcp_state *st = s ? s->st : NULL;
  dcp_status rc;
  c->async_used = 1;
  dcpi_py_ctx_enter(c);
  Py_BEGIN_ALLOW_THREADS
  rc = dcp_async_prepare(c->ctx, st);
  Py_END_ALLOW_THREADS
  dcpi_py_ctx_leave(c);
  if (rc) return dcpi_py_raise_ctx(c->ctx, rc);
  Py_RETURN_NONE;
}

PyObject *dcpi_py_ctx_set_async_staging(PyObject *self, PyObject *arg) {
  int background = PyObject_IsTrue(arg);
  if (background < 0) return NULL;
  dcpi_py_ctx *c = dcpi_py_ctx_usable(self);
  if (!c) return NULL;
  dcp_status rc;
  dcpi_py_ctx_enter(c);
  Py_BEGIN_ALLOW_THREADS
  rc = dcp_async_set_staging(c->ctx, background ? DCP_ASYNC_STAGE_BACKGROUND
                                                : DCP_ASYNC_STAGE_BLOCKING);
  Py_END_ALLOW_THREADS
  dcpi_py_ctx_leave(c);
  if (rc) return dcpi_py_raise_ctx(c->ctx, rc);
  Py_RETURN_NONE;
}

/* pydcp.h — internal declarations of the CPython extension dcp._dcp, a thin
 * wrapper over include/dcp.h. Every object type lives in its own file
 * (ctx.c, layout.c, state.c, meta.c, async.c); errors.c turns dcp_status
 * codes into dcp.Error subclasses; convert.c holds the argument converters.
 * Nothing here is exported: the module's only public symbol is PyInit__dcp. */
#ifndef PYDCP_H
#define PYDCP_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dcp.h>

/* ------------------------------------------------------------------------ */
/* Objects                                                                  */
/* ------------------------------------------------------------------------ */

/* dcp.Context: owns a dcp_ctx. `busy` is set while a call on the context
 * runs with the GIL released (save, load, wait, ...): another thread that
 * tries to use the context meanwhile gets dcp.InvalidError instead of a
 * data race. `dependents` counts the live states, metadata views and async
 * handles made from it (each holds a reference): close() refuses while any
 * is alive, because the C objects must be freed before the context. */
typedef struct {
  PyObject_HEAD
  dcp_ctx *ctx; /* NULL once closed */
  int busy;
  Py_ssize_t dependents;
  int async_used; /* an async save was started: shut the writer down at close */
  PyObject *progress; /* callable(done, total) for conversions and verify, or NULL */
  PyObject *phase_progress; /* callable(phase, done, total) (progress.c), or NULL */
  PyObject *staging; /* borrowed: the newest async handle still holding its staged state
                      * (the library may be copying from its buffers), or NULL */
} dcpi_py_ctx;

/* dcp.Layout: owns a dcp_layout plus copies of its arguments (for repr and
 * the properties). */
typedef struct {
  PyObject_HEAD
  dcp_layout *layout;
  PyObject *mesh_shape; /* tuple of int */
  PyObject *mesh_ranks; /* tuple of int */
  PyObject *tensor_map; /* tuple of int (bit masks) */
} dcpi_py_layout;

/* dcp.State: owns a dcp_state and the buffer views its chunks and bytes
 * items point into (released when the state is freed, so the memory stays
 * valid and unresizable for as long as the C state may read or write it).
 * Each view is allocated once and never moved: an exporter may keep
 * pointers into its own Py_buffer. */
typedef struct {
  PyObject_HEAD
  dcpi_py_ctx *owner;
  dcp_state *st;
  Py_buffer **views;
  size_t nviews, cap;
  PyObject *dtypes;   /* dict: tensor fqn -> dtype (int) */
  PyObject *readonly; /* name of the first item with a read-only buffer, or NULL */
} dcpi_py_state;

extern PyTypeObject dcpi_py_ctx_type;
extern PyTypeObject dcpi_py_layout_type;
extern PyTypeObject dcpi_py_state_type;
extern PyTypeObject dcpi_py_meta_type;
extern PyTypeObject dcpi_py_async_type;

/* ------------------------------------------------------------------------ */
/* Errors (errors.c)                                                        */
/* ------------------------------------------------------------------------ */

/* Create dcp.Error and one subclass per status code and add them to module.
 * Returns 0, or -1 with a Python exception set. */
int dcpi_py_errors_init(PyObject *module);

/* Raise the dcp.Error subclass of status with message msg (NULL or "":
 * dcp_strerror(status)). Sets the exception's .status, .code and .message.
 * Always returns NULL, for `return dcpi_py_raise(...)`. */
PyObject *dcpi_py_raise(dcp_status status, const char *msg);

/* dcpi_py_raise with the context's last-error text (dcp_ctx_last_error). */
PyObject *dcpi_py_raise_ctx(const dcp_ctx *ctx, dcp_status status);

/* dcpi_py_raise with a printf-style message. */
PyObject *dcpi_py_raisef(dcp_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------------ */
/* Context access (ctx.c)                                                   */
/* ------------------------------------------------------------------------ */

/* Check that obj is an open dcp.Context not in use by another thread.
 * Returns its dcpi_py_ctx, or NULL with dcp.InvalidError (or TypeError) set. */
dcpi_py_ctx *dcpi_py_ctx_usable(PyObject *obj);

/* Mark a usable context busy before releasing the GIL, and idle after. */
void dcpi_py_ctx_enter(dcpi_py_ctx *c);
void dcpi_py_ctx_leave(dcpi_py_ctx *c);

/* Context.check_replicas(state, report_only=False) -> dict (replica.c). */
PyObject *dcpi_py_ctx_check_replicas(PyObject *self, PyObject *args, PyObject *kwargs);

/* Context.set_memtier(...) and Context.memtier_stop() (memtier.c). */
PyObject *dcpi_py_ctx_set_memtier(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *dcpi_py_ctx_memtier_stop(PyObject *self, PyObject *unused);

/* A dependent object (state, view, handle) was created from / freed from c. */
void dcpi_py_ctx_hold(dcpi_py_ctx *c);
void dcpi_py_ctx_release(dcpi_py_ctx *c);

/* ------------------------------------------------------------------------ */
/* State access (state.c)                                                   */
/* ------------------------------------------------------------------------ */

/* The state behind obj, checked: a dcp.State of ctx c. With for_load, also
 * that every buffer of it is writable. Returns NULL with an exception set. */
dcpi_py_state *dcpi_py_state_check(PyObject *obj, const dcpi_py_ctx *c, int for_load);

/* ------------------------------------------------------------------------ */
/* Metadata views (meta.c)                                                  */
/* ------------------------------------------------------------------------ */

/* meta_open(ctx, path) -> dcp.Meta: dcp_meta_open with the GIL released. */
PyObject *dcpi_py_meta_open(PyObject *module, PyObject *args);

/* meta_open_memory(ctx, data) -> dcp.Meta of an encoded .metadata buffer
 * (dcp_meta_open_memory; read_tensor is not available on such a view). */
PyObject *dcpi_py_meta_open_memory(PyObject *module, PyObject *args);

/* ------------------------------------------------------------------------ */
/* Async handles (async.c)                                                  */
/* ------------------------------------------------------------------------ */

/* Wrap a started async save: the handle takes h and holds a reference to c
 * and, until its staging is over (fence, wait), to state (the dcp.State
 * staged). Returns a new reference, or NULL (then h has been freed). */
PyObject *dcpi_py_async_new(dcpi_py_ctx *c, dcp_async *h, PyObject *path, PyObject *state);

/* Wait for the staging of the async save c->staging names, if any, and let
 * its state go: called (with c marked busy) before the binding lets the
 * library write into buffers (a load) or start another async save, so that
 * a background staging never copies what a load of the same context wrote
 * into the buffers it is saving. A staging failure is left to the handle's
 * wait() to raise. Releases the GIL while it waits. */
void dcpi_py_ctx_end_staging(dcpi_py_ctx *c);

/* Context.async_prepare(state=None) and Context.set_async_staging(background)
 * (dcp_async_prepare, dcp_async_set_staging). */
PyObject *dcpi_py_ctx_async_prepare(PyObject *self, PyObject *args, PyObject *kw);
PyObject *dcpi_py_ctx_set_async_staging(PyObject *self, PyObject *arg);

/* ------------------------------------------------------------------------ */
/* Converters (convert.c)                                                   */
/* ------------------------------------------------------------------------ */

/* A sequence of at most cap ints into out[], its length into *n. `what`
 * names the argument in the error. Returns 0 or -1 with an exception set. */
int dcpi_py_i64_seq(PyObject *seq, int64_t *out, uint32_t cap, uint32_t *n, const char *what);

/* A tuple of n ints from v. New reference or NULL. */
PyObject *dcpi_py_i64_tuple(const int64_t *v, uint32_t n);

/* A box as (offset, size) tuples. New reference or NULL. */
PyObject *dcpi_py_box_tuple(const dcp_box *box);

/* The UTF-8 form of str obj (cached in obj), or NULL with an exception:
 * dcp.InvalidError naming `what` when it holds a NUL character (the C side
 * would see only the text before it: another name, silently) or a lone
 * surrogate (no UTF-8 form). */
const char *dcpi_py_utf8(PyObject *obj, const char *what);

/* An optional unsigned integer argument (o NULL: *out untouched) into *out,
 * checked to be an int in 0..max: InvalidError naming the argument
 * otherwise (PyArg's "I" and "K" formats wrap around: flags=2**32+1 was 1,
 * save_id=-1 was 2**64-1). Returns 0 or -1 with the exception set. */
int dcpi_py_uint_arg(PyObject *o, const char *name, uint64_t max, uint64_t *out);

/* A dtype given as an int code or a safetensors name ("F32"). Returns 0, or
 * -1 with dcp.InvalidError set. */
int dcpi_py_dtype(PyObject *obj, dcp_dtype *out);

/* Whether a buffer format (struct syntax) names the byte order that is not
 * this host's: '>' and '!' on a little-endian host, '<' on a big-endian
 * one. The C side reads and writes elements in the host's order, so such a
 * buffer's values would be saved (or loaded) byte-swapped. */
int dcpi_py_foreign_byte_order(const char *format);

/* A C-contiguous buffer of obj into *view: writable when the exporter
 * allows it (*readonly 0), else read-only (*readonly 1). Returns 0, or -1
 * with TypeError set (no buffer protocol, not C-contiguous). */
int dcpi_py_get_buffer(PyObject *obj, Py_buffer *view, int *readonly);

/* ------------------------------------------------------------------------ */
/* Save and load arguments (options.c)                                      */
/* ------------------------------------------------------------------------ */

/* The arguments of save and async_save: (ctx, state, path, *, overwrite=False,
 * compress=False, flags=0, block_size=0, zstd_level=0, policy=0, kv=None),
 * kv a mapping of str to str. */
typedef struct {
  dcpi_py_ctx *ctx;     /* borrowed */
  dcpi_py_state *state; /* borrowed */
  PyObject *path;       /* the path as given (str or bytes), borrowed */
  PyObject *path_bytes; /* file-system encoded, owned */
  dcp_save_options opts;
  PyObject *kv_keep; /* list of the UTF-8 strings the options point to, owned */
  const char **keys, **values;
} dcpi_py_save_args;

/* Parse and check the arguments (the state must belong to ctx). Returns 0,
 * or -1 with an exception set; call dcpi_py_save_args_free in both cases
 * (a is zeroed first). */
int dcpi_py_save_args_parse(PyObject *args, PyObject *kwargs, dcpi_py_save_args *a);
void dcpi_py_save_args_free(dcpi_py_save_args *a);

/* The arguments of load: (ctx, state, path, *, flags=0, read_dedup=0,
 * reader_policy=0, max_inflight_bytes=0). */
typedef struct {
  dcpi_py_ctx *ctx;
  dcpi_py_state *state;
  PyObject *path_bytes; /* owned */
  dcp_load_options opts;
} dcpi_py_load_args;

int dcpi_py_load_args_parse(PyObject *args, PyObject *kwargs, dcpi_py_load_args *a);
void dcpi_py_load_args_free(dcpi_py_load_args *a);

/* ------------------------------------------------------------------------ */
/* Module functions doing I/O (io.c)                                        */
/* ------------------------------------------------------------------------ */

PyObject *dcpi_py_save(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *dcpi_py_async_save(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *dcpi_py_load(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *dcpi_py_verify(PyObject *module, PyObject *args);
/* _dcp.set_phase_progress(ctx, fn or None) (progress.c). */
PyObject *dcpi_py_set_phase_progress(PyObject *module, PyObject *args);
PyObject *dcpi_py_import_safetensors(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *dcpi_py_export_safetensors(PyObject *module, PyObject *args, PyObject *kwargs);

#endif /* PYDCP_H */

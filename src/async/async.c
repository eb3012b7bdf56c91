/* async.c — dcp_async_*: the per-context writer state (attached to the
 * context, which holds it as an opaque pointer), staging into the pool and
 * job submission. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "async/async_int.h"
#include "model/state.h"
#include "writer/proto.h"

/* ---- the context's writer state ---------------------------------------- */

/* Wait until nothing is staging or pending, then join the background
 * staging thread that finished last (it only unlocks and returns after it
 * cleared w->staging). Caller holds w->mu, which is released meanwhile. */
void dcpi_async_wait_idle_locked(dcpi_async_writer *w) {
  for (;;) {
    while (w->pending || w->staging) pthread_cond_wait(&w->cv, &w->mu);
    if (!w->stager_joinable) return;
    pthread_t t = w->stager;
    w->stager_joinable = 0;
    pthread_mutex_unlock(&w->mu);
    pthread_join(t, NULL);
    pthread_mutex_lock(&w->mu);
  }
}

/* Drop one reference to w (the context's or a handle's); the last one
 * frees what is left of it, its lock and condition. Caller holds w->mu,
 * which this releases. */
static void writer_unref_unlock(dcpi_async_writer *w) {
  bool last = --w->refs == 0;
  pthread_mutex_unlock(&w->mu);
  if (!last) return;
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w);
}

/* Wait for a pending save, stop the writer, free the pool and drop the
 * context's reference: the release function the context calls
 * (dcp_ctx_free) or dcp_async_shutdown. Handles not freed yet keep w's
 * lock, condition and their outcome alive, so a wait, test, fence or free
 * after the shutdown (or after dcp_ctx_free) still answers; they no longer
 * touch the context. */
static void writer_release(dcpi_ctx_ext *ext) {
  dcpi_async_writer *w = (dcpi_async_writer *)ext;
  pthread_mutex_lock(&w->mu);
  dcpi_async_wait_idle_locked(w);
  int keep = w->keep && w->alive;
  pthread_mutex_unlock(&w->mu);
  /* a shutdown is no crash: the writer need not keep its snapshots for a
   * restart (docs/recovery.md). BYE reaches it however far it got with its
   * last keep (a STOP on its snapshot socket finds nobody before the first
   * keep has started the server, and the writer then lingered for its whole
   * linger time while dcp_async_shutdown waited for it); the STOP also ends
   * a lingering writer of an earlier trainer that ours has not replaced;
   * it goes first, while our writer still serves its socket (after BYE it
   * closes it, and a STOP then racing with that close would fail). */
  if (keep) {
    dcpi_err ignored;
    dcp_memtier_stop(w->ctx);
    dcpi_wp_send(w->sock, DCPI_WP_BYE, NULL, 0, -1, &ignored);
  }
  dcpi_writer_stop(w);
  dcpi_pool_free(&w->pool);
  free(w->coll), free(w->coll_options), free(w->rendezvous);
  w->coll = w->coll_options = w->rendezvous = NULL;
  pthread_mutex_lock(&w->mu);
  w->ctx = NULL; /* the context may be freed next */
  writer_unref_unlock(w);
}

static dcpi_async_writer *writer_new(dcp_ctx *ctx) {
  dcpi_async_writer *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->ext.release = writer_release;
  w->ctx = ctx;
  w->sock = -1;
  w->refs = 1; /* the context's */
  pthread_mutex_init(&w->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&w->cv, &ca);
  pthread_condattr_destroy(&ca);
  dcpi_pool_init(&w->pool);
  return w;
}

/* ctx's writer state, created and attached to ctx on first use (NULL: out
 * of memory). */
dcpi_async_writer *dcpi_async_writer_of(dcp_ctx *ctx) {
  dcpi_ctx_ext *e = dcpi_ctx_ext_get(ctx, DCPI_CTX_ASYNC);
  if (e) return (dcpi_async_writer *)e;
  dcpi_async_writer *w = writer_new(ctx);
  if (!w) return NULL;
  e = dcpi_ctx_ext_attach(ctx, DCPI_CTX_ASYNC, &w->ext);
  if (e != &w->ext) writer_release(&w->ext); /* another thread's came first */
  return (dcpi_async_writer *)e;
}

/* ctx's writer state if it has one, else NULL. */
static dcpi_async_writer *writer_find(dcp_ctx *ctx) {
  return (dcpi_async_writer *)dcpi_ctx_ext_get(ctx, DCPI_CTX_ASYNC);
}

void dcp_async_shutdown(dcp_ctx *ctx) {
  if (!ctx) return;
  dcpi_ctx_ext *e = dcpi_ctx_ext_detach(ctx, DCPI_CTX_ASYNC);
  if (e) e->release(e);
}

/* ---- configuration ---------------------------------------------------- */

/* Install one copy callback (at most one of plain and checked), once the
 * writer is idle. */
static dcp_status set_copy(dcp_ctx *ctx, dcp_async_copy_fn plain,
                           dcp_async_copy_checked_fn checked, void *arg) {
  if (!ctx) return DCP_EINVAL;
  dcpi_async_writer *w = dcpi_async_writer_of(ctx);
  if (!w) return DCP_ENOMEM;
  pthread_mutex_lock(&w->mu);
  dcpi_async_wait_idle_locked(w);
  w->copy = plain;
  w->copy_checked = checked;
  w->copy_arg = plain || checked ? arg : NULL;
  pthread_mutex_unlock(&w->mu);
  return DCP_OK;
}

dcp_status dcp_async_set_copy(dcp_ctx *ctx, dcp_async_copy_fn fn, void *arg) {
  return set_copy(ctx, fn, NULL, arg);
}

dcp_status dcp_async_set_copy_checked(dcp_ctx *ctx, dcp_async_copy_checked_fn fn, void *arg) {
  return set_copy(ctx, NULL, fn, arg);
}

dcp_status dcp_async_set_staging(dcp_ctx *ctx, dcp_async_staging mode) {
  if (!ctx || (mode != DCP_ASYNC_STAGE_BLOCKING && mode != DCP_ASYNC_STAGE_BACKGROUND)) {
    dcpi_err err;
    dcpi_err_clear(&err);
    dcpi_fail(&err, DCP_EINVAL, "dcp_async_set_staging: %s",
              ctx ? "mode is neither DCP_ASYNC_STAGE_BLOCKING nor DCP_ASYNC_STAGE_BACKGROUND"
                  : "NULL context");
    return dcpi_ctx_report(ctx, &err);
  }
  dcpi_async_writer *w = dcpi_async_writer_of(ctx);
  if (!w) return DCP_ENOMEM;
  pthread_mutex_lock(&w->mu);
  dcpi_async_wait_idle_locked(w);
  w->background = mode == DCP_ASYNC_STAGE_BACKGROUND;
  pthread_mutex_unlock(&w->mu);
  return DCP_OK;
}

static int dup_opt(char **dst, const char *src) {
  free(*dst);
  *dst = NULL;
  return !src || (*dst = strdup(src)) != NULL;
}

dcp_status dcp_async_set_coordination(dcp_ctx *ctx, const char *coll, const char *rendezvous,
                                      const char *coll_options) {
  if (!ctx || !coll || !coll[0]) return DCP_EINVAL;
  dcpi_async_writer *w = dcpi_async_writer_of(ctx);
  if (!w) return DCP_ENOMEM;
  pthread_mutex_lock(&w->mu);
  dcpi_async_wait_idle_locked(w);
  int ok = dup_opt(&w->coll, coll) && dup_opt(&w->rendezvous, rendezvous) &&
           dup_opt(&w->coll_options, coll_options ? coll_options : "job=dcpwriter");
  pthread_mutex_unlock(&w->mu);
  return ok ? DCP_OK : DCP_ENOMEM;
}

/* ---- accessors -------------------------------------------------------- */

#define ACCESSOR(type, name, expr)            \
  type name(dcp_ctx *ctx) {                   \
    dcpi_async_writer *w = writer_find(ctx);  \
    if (!w) return 0;                         \
    pthread_mutex_lock(&w->mu);               \
    type v = (expr);                          \
    pthread_mutex_unlock(&w->mu);             \
    return v;                                 \
  }

ACCESSOR(pid_t, dcpi_async_writer_pid, w->alive ? w->pid : 0)
ACCESSOR(uint64_t, dcpi_async_pool_creations, w->pool.creations)
ACCESSOR(uint64_t, dcpi_async_pool_growths, w->pool.growths)
ACCESSOR(uint64_t, dcpi_async_spawns, w->spawns)
ACCESSOR(uint64_t, dcpi_async_saves, w->saves)
ACCESSOR(uint64_t, dcpi_async_prepares, w->prepares)
ACCESSOR(uint64_t, dcpi_async_pool_size, (uint64_t)w->pool.size)

/* ---- handles ---------------------------------------------------------- */

dcp_status dcp_async_test(dcp_async *h, int *done) {
  if (!h || !done) return DCP_EINVAL;
  pthread_mutex_lock(&h->w->mu);
  *done = h->done && h->staged;
  pthread_mutex_unlock(&h->w->mu);
  return DCP_OK;
}

dcp_status dcp_async_fence(dcp_async *h) {
  if (!h) return DCP_EINVAL;
  dcpi_async_writer *w = h->w;
  dcpi_err err;
  dcpi_err_clear(&err);
  pthread_mutex_lock(&w->mu);
  while (!h->staged) pthread_cond_wait(&w->cv, &w->mu);
  if (h->stage_status) {
    err.code = h->stage_status;
    snprintf(err.msg, sizeof err.msg, "%s", h->msg);
  }
  dcp_ctx *ctx = w->ctx; /* NULL once the context let go of its writer */
  pthread_mutex_unlock(&w->mu);
  return err.code ? dcpi_ctx_report(ctx, &err) : DCP_OK;
}

/* The handle's outcome as the context's result and statistics. Caller
 * holds w->mu; h is done. */
static dcp_status report_locked(dcp_async *h, dcpi_err *err) {
  dcpi_async_writer *w = h->w;
  err->code = h->status;
  snprintf(err->msg, sizeof err->msg, "%s", h->msg);
  /* the persisting side's figures become the context's statistics */
  if (w->ctx) {
    w->ctx->stats = h->stats;
    w->ctx->stats.struct_size = sizeof w->ctx->stats;
  }
  return h->status;
}

/* Wait until h is done (its outcome is in and its staging is over: a wait
 * implies the fence) or the monotonic deadline passes (deadline_ns < 0: no
 * deadline). Caller holds w->mu. Returns whether h is done. */
static int wait_done_locked(dcp_async *h, int64_t deadline_ns) {
  struct timespec ts = {(time_t)(deadline_ns / 1000000000), (long)(deadline_ns % 1000000000)};
  while (!(h->done && h->staged)) {
    if (deadline_ns < 0)
      pthread_cond_wait(&h->w->cv, &h->w->mu);
    else if (pthread_cond_timedwait(&h->w->cv, &h->w->mu, &ts) == ETIMEDOUT)
      break;
  }
  return h->done && h->staged;
}

static int64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

dcp_status dcp_async_wait_for(dcp_async *h, int64_t timeout_ms) {
  if (!h) return DCP_EINVAL;
  dcpi_async_writer *w = h->w;
  int64_t deadline = -1;
  if (timeout_ms >= 0)
    deadline = monotonic_ns() + (timeout_ms > INT64_MAX / 2000000 ? INT64_MAX / 2
                                                                  : timeout_ms * 1000000);
  dcpi_err err;
  dcpi_err_clear(&err);
  pthread_mutex_lock(&w->mu);
  if (wait_done_locked(h, deadline))
    report_locked(h, &err);
  else
    dcpi_fail(&err, DCP_ETIMEDOUT,
              "async save still persisting after %lld ms (the writer, pid %d, goes on; "
              "wait again or dcp_async_abort)", (long long)timeout_ms, (int)w->pid);
  dcp_ctx *ctx = w->ctx; /* NULL once the context let go of its writer */
  pthread_mutex_unlock(&w->mu);
  return ctx ? dcpi_ctx_report(ctx, &err) : err.code;
}

dcp_status dcp_async_wait(dcp_async *h) { return dcp_async_wait_for(h, -1); }

dcp_status dcp_async_abort(dcp_async *h) {
  if (!h) return DCP_EINVAL;
  dcpi_async_writer *w = h->w;
  pthread_mutex_lock(&w->mu);
  int killed = !h->done && w->pending == h && w->alive && w->pid > 0;
  if (killed) {
    /* The join thread sees the stream end and finishes h with DCP_EPEER. */
    w->aborted = 1;
    kill(w->pid, SIGKILL);
  }
  pthread_mutex_unlock(&w->mu);
  dcp_status rc = dcp_async_wait(h);
  if (killed) dcpi_writer_stop(w); /* reap it now: no zombie until the next save */
  return rc;
}

void dcp_async_free(dcp_async *h) {
  if (!h) return;
  dcpi_async_writer *w = h->w;
  pthread_mutex_lock(&w->mu);
  while (!(h->done && h->staged)) pthread_cond_wait(&w->cv, &w->mu);
  writer_unref_unlock(w);
  free(h);
}

void dcpi_async_handle_ref(dcpi_async_writer *w) {
  pthread_mutex_lock(&w->mu);
  w->refs++;
  pthread_mutex_unlock(&w->mu);
}

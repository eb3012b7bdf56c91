/* stage.c — dcp_async_save: describe the state as a SAVE job, stage it into
 * the pool (here, or on a staging thread: background staging) and hand it
 * to the writer process; dcp_async_prepare: the writer, the pool and the
 * writers' collective ahead of the first save. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "async/async_int.h"
#include "core/plugin.h"
#include "runtime/files.h"
#include "runtime/options.h"
#include "runtime/plan_cache.h"
#include "runtime/replace.h"
#include "model/state.h"
#include "writer/proto.h"

#define STAGE_ALIGN 64u

static size_t align_up(size_t v) { return (v + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN; }

/* Pool offsets of every chunk and bytes item (64-byte aligned, in order)
 * into job (unless NULL), and the bytes needed into *total. */
static dcp_status place_items(const dcp_state *st, dcpi_wp_job *j, size_t *total,
                              dcpi_err *err) {
  size_t off = 0;
  for (size_t i = 0; i < st->nchunks; i++) {
    const dcpi_chunk_item *c = &st->chunks[i];
    if (j) j->chunks[i] = (dcpi_wp_chunk){c->tensor, c->box, off, (uint64_t)c->nbytes};
    if ((uint64_t)c->nbytes > SIZE_MAX - STAGE_ALIGN - off)
      return dcpi_fail(err, DCP_EOVERFLOW, "async save: state too large to stage");
    off = align_up(off + (size_t)c->nbytes);
  }
  for (size_t i = 0; i < st->nbytes; i++) {
    const dcpi_bytes_item *b = &st->bytes[i];
    if (j) j->bytes[i] = (dcpi_wp_bytes){b->key, (uint32_t)b->scope, off, b->len};
    if (b->len > SIZE_MAX - STAGE_ALIGN - off)
      return dcpi_fail(err, DCP_EOVERFLOW, "async save: state too large to stage");
    off = align_up(off + b->len);
  }
  *total = off;
  return DCP_OK;
}

/* The caller's buffer of every chunk, then of every bytes item, of st (in
 * job order), taken on the caller's thread: the staging thread reads the
 * buffers only, never the state, which may be freed or changed once
 * dcp_async_save returned. NULL when out of memory. */
static const void **item_sources(const dcp_state *st) {
  const void **src = malloc((st->nchunks + st->nbytes + 1) * sizeof *src);
  if (!src) return NULL;
  for (size_t i = 0; i < st->nchunks; i++) src[i] = st->chunks[i].data;
  for (size_t i = 0; i < st->nbytes; i++) src[st->nchunks + i] = st->bytes[i].data;
  return src;
}

/* Copy every item of job from its buffer (src, as item_sources) into the
 * pool at its offset (on the caller's thread, or the staging thread in
 * background mode: the copy callback is called there). Stops at the first
 * chunk whose checked copy callback fails: DCP_EIO naming it (by index and
 * size: the state, and so its names, may be gone in background mode). */
static dcp_status copy_items(dcpi_async_writer *w, const dcpi_wp_job *j, const void *const *src,
                             dcpi_err *err) {
  uint8_t *base = w->pool.base;
  for (size_t i = 0; i < j->nchunks; i++) {
    size_t n = (size_t)j->chunks[i].nbytes;
    if (!n) continue;
    int failed = 0;
    if (w->copy_checked)
      failed = w->copy_checked(w->copy_arg, base + j->chunks[i].offset, src[i], n);
    else if (w->copy)
      w->copy(w->copy_arg, base + j->chunks[i].offset, src[i], n);
    else
      dcpi_parallel_memcpy(base + j->chunks[i].offset, src[i], n);
    if (failed)
      return dcpi_fail(err, DCP_EIO, "async save: the copy callback failed (returned %d) on "
                       "chunk %zu of %zu (%zu bytes): nothing of this save is written", failed,
                       i, j->nchunks, n);
  }
  for (size_t i = 0; i < j->nbytes; i++)
    if (j->bytes[i].len)
      dcpi_parallel_memcpy(base + j->bytes[i].offset, src[j->nchunks + i],
                           (size_t)j->bytes[i].len);
  return DCP_OK;
}

/* The tensors of st, borrowed (fqn and layout pointers stay st's). A flat
 * shard goes as one only while it holds exactly its range: a chunk added
 * to it by hand makes it a hand-added tensor, which the writer must not
 * mark flat (nor, without its chunk counts, when they cannot be counted). */
static void describe_tensors(const dcp_state *st, dcpi_wp_job *j) {
  size_t *n = calloc(st->ntensors ? st->ntensors : 1, sizeof *n);
  for (size_t c = 0; n && c < st->nchunks; c++) n[st->chunks[c].tensor]++;
  for (size_t i = 0; i < st->ntensors; i++) {
    const dcpi_tensor_item *t = &st->tensors[i];
    bool flat = !t->layout && t->flat && n && n[i] == t->flat_parts;
    j->tensors[i].fqn = t->fqn;
    j->tensors[i].dtype = (uint32_t)t->dtype;
    j->tensors[i].ndim = t->ndim;
    memcpy(j->tensors[i].shape, t->shape, sizeof t->shape);
    j->tensors[i].layout = t->layout ? t->layout : flat ? t->flat : NULL;
    j->tensors[i].flat = flat;
    j->tensors[i].flat_dims = flat ? t->flat_dims : 0;
  }
  free(n);
}

/* The plugin path the writer searches: the context's, then the plugin
 * directory next to this libdcp (the writer may be linked elsewhere). */
static char *writer_plugin_path(const dcp_ctx *ctx) {
  char lib[1024];
  dcpi_lib_dir(lib, sizeof lib);
  const char *mine = ctx->plugin_path ? ctx->plugin_path : "";
  size_t n = strlen(mine) + strlen(lib) + 8;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s%s%s%s", mine, mine[0] && lib[0] ? ":" : "", lib, lib[0] ? "/dcp" : "");
  return p;
}

/* The context's storage plugin, looked up now if no save or load did yet
 * (the coordination names it: it must be the same from the first job on,
 * on every rank, or the writer would reopen its context). */
static dcp_status ensure_storage(dcp_ctx *ctx, dcpi_err *err) {
  if (ctx->storage) return DCP_OK;
  const void *table;
  dcp_status rc = dcpi_plugin_find(DCP_PLUGIN_STORAGE, "posix", ctx->plugin_path, &table, err);
  if (!rc) ctx->storage = table;
  return rc;
}

static dcp_status describe_coord(dcpi_async_writer *w, dcpi_wp_coord *c, dcpi_err *err) {
  dcp_ctx *ctx = w->ctx;
  if (!w->coll && ctx->world_size > 1)
    return dcpi_fail(err, DCP_EINVAL,
                     "async save on %d ranks: set the writers' coordination first "
                     "(dcp_async_set_coordination)", ctx->world_size);
  dcp_status rc = ensure_storage(ctx, err);
  if (rc) return rc;
  c->coll = w->coll ? w->coll : "single";
  c->coll_options = w->coll_options;
  c->rendezvous = w->rendezvous;
  c->rank = ctx->rank;
  c->world_size = ctx->world_size;
  c->timeout_ms = ctx->timeout_ms;
  c->lease_ms = ctx->lease_ms;
  c->storage = ctx->storage ? (char *)ctx->storage->name : NULL;
  c->storage_options = ctx->storage_options;
  if (!(c->plugin_path = writer_plugin_path(ctx)))
    return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  return DCP_OK;
}

/* Writers that do not coordinate ("none") cannot make a save's identity
 * together: the trainer's ranks agree on one here (rank 0 draws it, the
 * trainer's collective broadcasts it) unless the caller named the save.
 * A detached trainer has no collective: it must name it. */
static dcp_status name_uncoordinated_save(dcpi_async_writer *w, dcpi_wp_job *j, dcpi_err *err) {
  const dcp_ctx *ctx = w->ctx;
  if (!j->coord.coll || strcmp(j->coord.coll, "none") != 0 || ctx->world_size == 1 || j->save_id)
    return DCP_OK;
  if (!ctx->comm)
    return dcpi_fail(err, DCP_EINVAL,
                     "async save with coordination \"none\" on a rank without a collective: "
                     "set save options' save_id (the same on every rank of one save, e.g. the "
                     "step)");
  uint8_t id[16];
  if (ctx->rank == 0 && dcpi_save_id_random(id))
    return dcpi_fail(err, DCP_EIO, "no random bytes for the save's id");
  uint64_t v = 0;
  for (int i = 0; ctx->rank == 0 && i < 8; i++) v = v << 8 | id[i];
  dcp_plugin_err perr = {{0}};
  int rc = ctx->coll->bcast(ctx->comm, &v, sizeof v, 0, &perr);
  if (rc) { /* the plugin's code checked and its message prefixed as everywhere */
    dcpi_err pe;
    dcpi_err_clear(&pe);
    dcp_status code = dcpi_plugin_status(rc, &perr, ctx->coll->name, "bcast", &pe);
    return dcpi_fail(err, code, "async save: agreeing on the save's id: %s", pe.msg);
  }
  j->save_id = v ? v : 1;
  return DCP_OK;
}

/* What the directory holds as this save starts (docs/reliability.md): the
 * writer commits only over that, however late it gets to the job. Rank 0
 * of a coordinated save takes it; every rank of an uncoordinated one. */
static dcp_status take_base(dcpi_async_writer *w, const char *path, dcpi_wp_job *j,
                            dcpi_err *err) {
  dcp_ctx *ctx = w->ctx;
  bool none = w->coll && strcmp(w->coll, "none") == 0 && ctx->world_size > 1;
  if (!none && ctx->rank != 0) return DCP_OK;
  dcpi_rt rt = {.ctx = ctx, .path = path}; /* not an operation: ctx's statistics stay */
  dcpi_err_clear(&rt.err);
  dcpi_base b;
  memset(&b, 0, sizeof b);
  dcp_status rc = dcpi_rt_open_storage(&rt, DCP_STORAGE_AUX);
  if (rc == DCP_ENOTFOUND) rc = DCP_OK; /* no directory yet: nothing there */
  else if (!rc) rc = dcpi_base_peek(&rt, none ? ctx->rank : -1, &b, &rt.err);
  if (rc) dcpi_fail(err, rc, "async save: %s", rt.err.msg);
  if (rt.st) ctx->storage->close(rt.st);
  j->has_base = 1;
  j->base_committed = b.committed, j->base_len = b.len, j->base_head = b.head;
  j->base_rank_seq = b.rank_seq, j->base_parts_hash = b.parts_hash;
  return rc;
}

/* The job's options: the caller's, checked and completed the way dcp_save
 * does it, so a bad one is refused here, before anything is staged. */
static dcp_status describe_options(const dcp_save_options *in, dcpi_wp_job *j, dcpi_err *err) {
  dcp_save_options o;
  dcp_status rc = dcpi_save_options_effective(in, &o, err);
  if (rc) return rc;
  j->flags = o.flags;
  j->block_size = o.block_size;
  j->zstd_level = o.zstd_level;
  j->save_id = o.save_id;
  j->policy = (uint32_t)o.policy;
  j->nkv = o.nkv;
  j->kv_keys = (char **)o.kv_keys;
  j->kv_values = (char **)o.kv_values;
  return DCP_OK;
}

static void job_release(dcpi_wp_job *j) {
  free(j->cwd);
  free(j->tensors), free(j->chunks), free(j->bytes);
  free(j->coord.plugin_path);
}

/* Writers that do not coordinate have no collective to compare replicas
 * over: DCP_SAVE_CHECK_REPLICAS is refused here, before anything is
 * staged, as a detached rank's sync save refuses it (was: the writer's
 * save failed, so the trainer learnt it only from dcp_async_wait). */
static dcp_status check_replicas_coordinated(const dcpi_async_writer *w, const dcpi_wp_job *j,
                                             dcpi_err *err) {
  bool none = j->coord.coll && strcmp(j->coord.coll, "none") == 0 && w->ctx->world_size > 1;
  if (!none || !(j->flags & DCP_SAVE_CHECK_REPLICAS)) return DCP_OK;
  return dcpi_fail(err, DCP_EINVAL, "dcp_async_save: DCP_SAVE_CHECK_REPLICAS needs writers "
                   "that coordinate (this context's async coordination is \"none\")");
}

/* Describe st and ctx as a job and make the pool large enough for it
 * (the copy comes after: stage_run). */
static dcp_status prepare_job(dcpi_async_writer *w, dcp_state *st, const char *path,
                              const dcp_save_options *opts, dcpi_wp_job *j, dcpi_err *err) {
  size_t total = 0;
  j->path = (char *)path;
  /* the writer was spawned in another working directory, maybe: a
   * relative path must name the same directory there as here */
  j->cwd = getcwd(NULL, 0);
  j->ntensors = st->ntensors, j->nchunks = st->nchunks, j->nbytes = st->nbytes;
  j->tensors = calloc(st->ntensors + 1, sizeof *j->tensors);
  j->chunks = calloc(st->nchunks + 1, sizeof *j->chunks);
  j->bytes = calloc(st->nbytes + 1, sizeof *j->bytes);
  if (!j->tensors || !j->chunks || !j->bytes) return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  dcp_status rc = describe_options(opts, j, err);
  if (rc) return rc;
  describe_tensors(st, j);
  /* the base first: its look at the directory may load the storage
   * plugin, which the coordination then names (a writer keeps its context,
   * and its plan cache, while that stays the same) */
  rc = take_base(w, path, j, err);
  if (!rc) rc = describe_coord(w, &j->coord, err);
  if (!rc) rc = name_uncoordinated_save(w, j, err);
  if (!rc) rc = check_replicas_coordinated(w, j, err);
  if (!rc) rc = place_items(st, j, &total, err);
  if (!rc) rc = dcpi_pool_reserve(&w->pool, total, err);
  if (rc) return rc;
  j->pool_size = w->pool.size;
  return DCP_OK;
}

/* Claim the writer state for one save or prepare: wait for the previous
 * save (and its staging thread), then restart a writer that is gone. */
static dcp_status claim(dcpi_async_writer *w, dcpi_err *err) {
  pthread_mutex_lock(&w->mu);
  dcpi_async_wait_idle_locked(w);
  w->staging = 1;
  int alive = w->alive;
  pthread_mutex_unlock(&w->mu);
  if (alive) return DCP_OK;
  dcpi_writer_stop(w); /* reap a writer that died */
  return dcpi_writer_start(w, err);
}

static void unclaim(dcpi_async_writer *w) {
  pthread_mutex_lock(&w->mu);
  w->staging = 0;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* Whether w's saves are coordinated with other ranks' writers. */
static bool has_peers(const dcpi_async_writer *w) {
  return w->ctx->world_size > 1 && w->coll && strcmp(w->coll, "none") != 0;
}

/* Tell this rank's writer that the save was refused here (code, with
 * why's message) before anything was staged, so that the other ranks'
 * writers, in the save's first agreement or on their way there, fail at
 * once with it instead of waiting for this one until the deadline. Only a
 * coordinated save of several ranks has peers to tell. Best effort: the
 * caller's error stands whatever happens here. Caller has claimed w (its
 * writer runs); its DONE finishes no handle (no pending one has its seq). */
static void refuse_to_peers(dcpi_async_writer *w, const char *path, dcp_status code,
                            const dcpi_err *why) {
  if (!has_peers(w)) return;
  dcpi_wp_job j;
  memset(&j, 0, sizeof j);
  dcpi_err ignored;
  dcpi_err_clear(&ignored);
  j.seq = ++w->seq;
  j.path = (char *)(path ? path : "");
  j.cwd = getcwd(NULL, 0);
  j.refused = code;
  j.refused_msg = (char *)why->msg;
  uint8_t *p = NULL;
  size_t len = 0;
  if (!describe_coord(w, &j.coord, &ignored) && !dcpi_wp_job_encode(&j, &p, &len))
    dcpi_wp_send(w->sock, DCPI_WP_SAVE, p, len, -1, &ignored);
  free(p);
  free(j.cwd);
  free(j.coord.plugin_path);
}

/* One save's staging, owned by whoever runs it: the caller's thread
 * (blocking staging) or the staging thread (background staging). */
typedef struct stage_job {
  dcpi_async_writer *w;
  dcp_async *h;           /* pending since before the copy */
  const void **src;       /* the caller's buffers (item_sources): read until staged */
  dcpi_wp_job j;          /* the pool offsets of every item */
  uint8_t *payload;       /* the encoded SAVE */
  size_t len;
} stage_job;

static void stage_job_free(stage_job *sj) {
  job_release(&sj->j);
  free(sj->src);
  free(sj->payload);
  free(sj);
}

/* Copy the state into the pool and hand the job to the writer (plans of
 * sync saves the writer has not seen go first, so that this save can reuse
 * one). A writer that died meanwhile (the join thread finished h with
 * DCP_EPEER) gets nothing. A copy that failed hands the writer the job
 * refused instead, which it takes into the save's first agreement, so the
 * other ranks fail with it at once (the writer's DONE then finishes h).
 * Then h is staged: its outcome is the staging's, and a failed hand-off
 * finishes h too. Frees sj; returns the staging's status. */
static dcp_status stage_run(stage_job *sj) {
  dcpi_async_writer *w = sj->w;
  dcp_async *h = sj->h;
  dcpi_err err, copy_err;
  dcpi_err_clear(&err);
  dcpi_err_clear(&copy_err);
  dcp_status copied = copy_items(w, &sj->j, sj->src, &copy_err);
  pthread_mutex_lock(&w->mu);
  int gone = h->done; /* only the writer's death finishes a job not yet sent */
  pthread_mutex_unlock(&w->mu);
  dcp_status rc = gone ? DCP_EPEER : DCP_OK;
  if (!rc && copied && dcpi_wp_job_refuse(&sj->payload, &sj->len, copied, copy_err.msg))
    rc = dcpi_fail(&err, DCP_ENOMEM, "out of memory");
  if (!rc) rc = dcpi_wp_send_plans(w->sock, dcpi_ctx_plan_cache(w->ctx), &err);
  if (!rc) rc = dcpi_wp_send(w->sock, DCPI_WP_SAVE, sj->payload, sj->len, w->pool.fd, &err);
  stage_job_free(sj);
  pthread_mutex_lock(&w->mu);
  if (rc && !h->done) {
    h->status = rc;
    snprintf(h->msg, sizeof h->msg, "async save: handing the job to the writer: %.200s%s%.200s",
             err.msg, copied ? "; before that: " : "", copied ? copy_err.msg : "");
    h->done = 1;
  }
  if (rc && w->pending == h) w->pending = NULL;
  if (!rc && copied && !h->done) snprintf(h->msg, sizeof h->msg, "%s", copy_err.msg);
  h->stage_status = rc ? h->status : copied;
  h->staged = 1;
  w->saves += rc || copied ? 0u : 1u;
  w->staging = 0;
  rc = h->stage_status;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return rc;
}

static void *stage_main(void *arg) {
  stage_run(arg);
  return NULL;
}

/* Start sj: on a staging thread in background mode (joined by the next
 * claim or the release), else, or when no thread can be made, here.
 * Returns the staging's status (background: DCP_OK, the fence tells). */
static dcp_status stage_start(dcpi_async_writer *w, stage_job *sj) {
  pthread_mutex_lock(&w->mu);
  w->pending = sj->h; /* from before the copy: a writer dying meanwhile finishes h */
  int started = w->background && pthread_create(&w->stager, NULL, stage_main, sj) == 0;
  /* set under the lock the thread needs to finish, so no claim misses it */
  if (started) w->stager_joinable = 1;
  pthread_mutex_unlock(&w->mu);
  return started ? DCP_OK : stage_run(sj);
}

static dcp_status async_save(dcpi_async_writer *w, dcp_state *st, const char *path,
                             const dcp_save_options *opts, dcp_async *h, dcpi_err *err) {
  stage_job *sj = calloc(1, sizeof *sj);
  if (!sj) return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  dcp_status rc = claim(w, err);
  if (!rc && (rc = prepare_job(w, st, path, opts, &sj->j, err))) /* refused here */
    refuse_to_peers(w, path, rc, err);
  if (!rc && !(sj->src = item_sources(st))) rc = dcpi_fail(err, DCP_ENOMEM, "out of memory");
  if (!rc) {
    h->seq = sj->j.seq = ++w->seq;
    rc = dcpi_wp_job_encode(&sj->j, &sj->payload, &sj->len);
    if (rc) dcpi_fail(err, rc, "async save: cannot encode the job");
  }
  if (rc) {
    stage_job_free(sj);
    unclaim(w);
    return rc;
  }
  sj->w = w, sj->h = h;
  rc = stage_start(w, sj);
  if (rc) {
    pthread_mutex_lock(&w->mu);
    /* a refused job is still the writer's until its DONE (the peers'
     * agreement): the caller frees h, so it must be finished first */
    while (!h->done) pthread_cond_wait(&w->cv, &w->mu);
    err->code = rc;
    snprintf(err->msg, sizeof err->msg, "%s", h->msg);
    pthread_mutex_unlock(&w->mu);
  }
  return rc;
}

/* dcp_async_save's arguments are bad: DCP_EINVAL naming which, on ctx
 * (when there is one), and the other ranks' saves fail with it too (a
 * writer is started for that if need be: theirs cannot open their
 * collective without it). */
static dcp_status refuse_arguments(dcp_ctx *ctx, const dcp_state *st, const char *path,
                                   dcp_async **out) {
  dcpi_err err, ignored;
  dcpi_err_clear(&err);
  dcpi_fail(&err, DCP_EINVAL, "dcp_async_save: %s", !ctx ? "NULL context" :
            !st ? "NULL state" : !path || !path[0] ? "empty checkpoint path" :
            !out ? "NULL handle" : "the state belongs to another context");
  dcpi_async_writer *w = ctx && ctx->world_size > 1 ? dcpi_async_writer_of(ctx) : NULL;
  if (w && has_peers(w) && !claim(w, &ignored)) {
    refuse_to_peers(w, path, err.code, &err);
    unclaim(w);
  }
  return dcpi_ctx_report(ctx, &err);
}

dcp_status dcp_async_save(dcp_ctx *ctx, dcp_state *st, const char *path,
                          const dcp_save_options *opts, dcp_async **out) {
  dcpi_err err;
  dcpi_err_clear(&err);
  if (out) *out = NULL;
  if (!ctx || !st || !path || !path[0] || !out || st->ctx != ctx)
    return refuse_arguments(ctx, st, path, out);
  dcpi_async_writer *w = dcpi_async_writer_of(ctx);
  dcp_async *h = w ? calloc(1, sizeof *h) : NULL;
  if (!h) return dcpi_fail(&err, DCP_ENOMEM, "out of memory"), dcpi_ctx_report(ctx, &err);
  h->w = w;
  dcp_status rc = async_save(w, st, path, opts, h, &err);
  if (rc) {
    free(h);
    return dcpi_ctx_report(ctx, &err);
  }
  dcpi_async_handle_ref(w); /* h outlives a shutdown until dcp_async_free */
  *out = h;
  return DCP_OK;
}

/* ---- prepare ------------------------------------------------------------ */

dcp_status dcp_async_prepare(dcp_ctx *ctx, const dcp_state *st) {
  dcpi_err err;
  dcpi_err_clear(&err);
  if (!ctx || (st && st->ctx != ctx))
    return dcpi_fail(&err, DCP_EINVAL, "dcp_async_prepare: %s",
                     ctx ? "the state belongs to another context" : "NULL context"),
           dcpi_ctx_report(ctx, &err);
  dcpi_async_writer *w = dcpi_async_writer_of(ctx);
  if (!w) return dcpi_fail(&err, DCP_ENOMEM, "out of memory"), dcpi_ctx_report(ctx, &err);
  dcpi_wp_coord coord;
  memset(&coord, 0, sizeof coord);
  size_t total = 0;
  dcp_status rc = claim(w, &err);
  if (!rc) rc = describe_coord(w, &coord, &err);
  if (!rc && st) rc = place_items(st, NULL, &total, &err);
  if (!rc && st) rc = dcpi_pool_reserve(&w->pool, total, &err);
  uint8_t *p = NULL;
  size_t len = 0;
  if (!rc && (rc = dcpi_wp_open_encode(&coord, &p, &len)))
    dcpi_fail(&err, rc, "async prepare: cannot encode the writer's configuration");
  /* the writer opens its context (and so its collective) on its own */
  if (!rc) rc = dcpi_wp_send(w->sock, DCPI_WP_OPEN, p, len, -1, &err);
  free(p);
  free(coord.plugin_path);
  pthread_mutex_lock(&w->mu);
  w->prepares += rc ? 0u : 1u;
  pthread_mutex_unlock(&w->mu);
  unclaim(w);
  return rc ? dcpi_ctx_report(ctx, &err) : DCP_OK;
}

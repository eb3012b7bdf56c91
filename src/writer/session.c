/* session.c — the writer process's context and the state it rebuilds over
 * the staging pool (see session.h). */
#include "runtime/save.h"
#include "writer/session.h"

#include "core/ctx.h"
#include "model/state.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void dcpi_wsession_init(dcpi_wsession *s) { memset(s, 0, sizeof *s); }

static void coord_free(dcpi_wp_coord *c) {
  free(c->coll), free(c->coll_options), free(c->rendezvous);
  free(c->storage), free(c->storage_options), free(c->plugin_path);
  memset(c, 0, sizeof *c);
}

void dcpi_wsession_free(dcpi_wsession *s) {
  dcp_ctx_free(s->ctx);
  coord_free(&s->coord);
  s->ctx = NULL;
}

void dcpi_wsession_take_plan(dcpi_wsession *s, dcpi_plan_entry *e) {
  if (s->ctx) {
    dcpi_plan_cache_put(dcpi_ctx_plan_cache(s->ctx), e);
    return;
  }
  if (s->ninbox == DCPI_PLAN_CACHE_SLOTS) { /* keep the newest */
    dcpi_plan_entry_drop(s->inbox[0]);
    memmove(s->inbox, s->inbox + 1, (DCPI_PLAN_CACHE_SLOTS - 1) * sizeof *s->inbox);
    s->ninbox--;
  }
  s->inbox[s->ninbox++] = e;
}

/* Move the inbox into the (new) context's cache. */
static void empty_inbox(dcpi_wsession *s) {
  dcpi_plan_cache *c = dcpi_ctx_plan_cache(s->ctx);
  for (size_t i = 0; i < s->ninbox; i++) dcpi_plan_cache_put(c, s->inbox[i]);
  s->ninbox = 0;
}

dcp_status dcpi_wsession_share_plans(dcpi_wsession *s, int sock, dcpi_err *err) {
  return s->ctx ? dcpi_wp_send_plans(sock, dcpi_ctx_plan_cache(s->ctx), err) : DCP_OK;
}

void dcpi_wsession_end(dcpi_wsession *s) {
  dcpi_wsession_free(s);
  for (size_t i = 0; i < s->ninbox; i++) dcpi_plan_entry_drop(s->inbox[i]);
  s->ninbox = 0;
}

static int str_eq(const char *a, const char *b) {
  return (!a && !b) || (a && b && !strcmp(a, b));
}

static int coord_eq(const dcpi_wp_coord *a, const dcpi_wp_coord *b) {
  return str_eq(a->coll, b->coll) && str_eq(a->coll_options, b->coll_options) &&
         str_eq(a->rendezvous, b->rendezvous) && a->rank == b->rank &&
         a->world_size == b->world_size && a->timeout_ms == b->timeout_ms &&
         a->lease_ms == b->lease_ms &&
         str_eq(a->storage, b->storage) && str_eq(a->storage_options, b->storage_options) &&
         str_eq(a->plugin_path, b->plugin_path);
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static int coord_copy(dcpi_wp_coord *d, const dcpi_wp_coord *c) {
  *d = (dcpi_wp_coord){dup_or_null(c->coll), dup_or_null(c->coll_options),
                       dup_or_null(c->rendezvous), c->rank, c->world_size, c->timeout_ms, c->lease_ms,
                       dup_or_null(c->storage), dup_or_null(c->storage_options),
                       dup_or_null(c->plugin_path)};
  return (!c->coll || d->coll) && (!c->coll_options || d->coll_options) &&
         (!c->rendezvous || d->rendezvous) && (!c->storage || d->storage) &&
         (!c->storage_options || d->storage_options) && (!c->plugin_path || d->plugin_path);
}

/* A context for job's coordination config (the current one when equal). */
static dcp_status ensure_ctx(dcpi_wsession *s, const dcpi_wp_coord *c, dcpi_err *err) {
  if (s->ctx && coord_eq(&s->coord, c)) return DCP_OK;
  dcpi_wsession_free(s);
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.rank = c->rank;
  cfg.world_size = c->world_size;
  /* "none": no traffic between the writers; each commits its part and
   * dcp_load merges them (a detached context saves that way) */
  bool none = c->coll && strcmp(c->coll, "none") == 0;
  cfg.coll = none || (c->world_size > 1 && !c->coll) ? NULL : c->coll;
  if (none && c->world_size == 1) cfg.coll = "single";
  cfg.coll_options = c->coll_options;
  cfg.rendezvous = c->rendezvous;
  cfg.timeout_ms = c->timeout_ms;
  cfg.lease_ms = c->lease_ms;
  cfg.storage = c->storage;
  cfg.storage_options = c->storage_options;
  cfg.plugin_path = c->plugin_path && c->plugin_path[0] ? c->plugin_path : NULL;
  dcp_status rc = dcp_ctx_create(&cfg, &s->ctx);
  if (rc)
    return dcpi_fail(err, rc, "dcp-writer (rank %d): cannot open its context: %s", c->rank,
                     dcp_ctx_create_error());
  if (!coord_copy(&s->coord, c)) {
    dcpi_wsession_free(s);
    return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  }
  empty_inbox(s);
  return DCP_OK;
}

dcp_status dcpi_wsession_open(dcpi_wsession *s, const dcpi_wp_coord *c, dcpi_err *err) {
  return ensure_ctx(s, c, err);
}

/* For each tensor, the index of its first chunk in the job (SIZE_MAX:
 * none): for a tensor with a layout, the chunk dcp_state_add_sharded added
 * with it. NULL when out of memory. */
static size_t *first_chunks(const dcpi_wp_job *job) {
  size_t *first = malloc((job->ntensors + 1) * sizeof *first);
  if (!first) return NULL;
  for (size_t i = 0; i < job->ntensors; i++) first[i] = SIZE_MAX;
  for (size_t i = job->nchunks; i-- > 0;) first[job->chunks[i].tensor] = i;
  return first;
}

static void *pool_at(const uint8_t *base, uint64_t offset, uint64_t nbytes) {
  return nbytes ? (void *)(base + offset) : NULL;
}

/* Whether chunk c's pool range holds exactly its box's bytes (the state
 * reads numel(box) * dtype size bytes from it). */
static bool chunk_fits(const dcpi_wp_job *job, const dcpi_wp_chunk *c) {
  const dcpi_wp_tensor *t = &job->tensors[c->tensor];
  int64_t n;
  size_t es = dcp_dtype_size((dcp_dtype)t->dtype);
  if (c->box.ndim != t->ndim || dcp_box_numel(&c->box, &n) || es == 0) return false;
  return (uint64_t)n <= UINT64_MAX / es && (uint64_t)n * es == c->nbytes;
}

/* Declare tensor ti again; one with a layout takes its layout chunk along,
 * whose box must be the layout's box for this rank. */
static dcp_status add_tensor(dcp_state *st, const dcpi_wp_job *job, size_t ti,
                             const size_t *first, const uint8_t *base, int32_t rank) {
  const dcpi_wp_tensor *t = &job->tensors[ti];
  if (!t->layout || t->flat) /* a flat one's chunks come by hand, then mark_flat */
    return dcp_state_add_tensor(st, t->fqn, (dcp_dtype)t->dtype, t->ndim, t->shape);
  if (first[ti] == SIZE_MAX) return DCP_ECORRUPT; /* add_sharded always adds one */
  const dcpi_wp_chunk *c = &job->chunks[first[ti]];
  dcp_box want;
  if (dcp_layout_box(t->layout, t->shape, rank, &want) || want.ndim != c->box.ndim ||
      memcmp(want.offset, c->box.offset, want.ndim * sizeof *want.offset) ||
      memcmp(want.size, c->box.size, want.ndim * sizeof *want.size))
    return DCP_ECORRUPT;
  return dcp_state_add_sharded(st, t->fqn, (dcp_dtype)t->dtype, t->ndim, t->shape, t->layout,
                               pool_at(base, c->offset, c->nbytes));
}

/* The state of job over the mapping at base: the same items as the
 * trainer's state, layouts included (so "none" coordination dedups
 * replicated shards and the local plan, which is canonical, hashes to the
 * same plan-cache key). */
static dcp_status build_state(dcp_ctx *ctx, const dcpi_wp_job *job, const uint8_t *base,
                              dcp_state **out) {
  dcp_state *st = NULL;
  size_t *first = first_chunks(job);
  dcp_status rc = first ? dcp_state_create(ctx, &st) : DCP_ENOMEM;
  for (size_t i = 0; !rc && i < job->nchunks; i++)
    if (!chunk_fits(job, &job->chunks[i])) rc = DCP_ECORRUPT;
  for (size_t i = 0; !rc && i < job->ntensors; i++)
    rc = add_tensor(st, job, i, first, base, job->coord.rank);
  for (size_t i = 0; !rc && i < job->nchunks; i++) {
    const dcpi_wp_chunk *c = &job->chunks[i];
    const dcpi_wp_tensor *t = &job->tensors[c->tensor];
    if (t->layout && !t->flat && first[c->tensor] == i) continue; /* added above */
    rc = dcp_state_add_chunk(st, job->tensors[c->tensor].fqn, c->box.offset, c->box.size,
                            pool_at(base, c->offset, c->nbytes));
  }
  for (size_t i = 0; !rc && i < job->ntensors; i++) {
    const dcpi_wp_tensor *t = &job->tensors[i];
    if (t->layout && t->flat)
      rc = dcpi_state_mark_flat(st, t->fqn, t->layout, t->flat_dims, NULL) ? DCP_ECORRUPT : DCP_OK;
  }
  for (size_t i = 0; !rc && i < job->nbytes; i++) {
    const dcpi_wp_bytes *b = &job->bytes[i];
    rc = dcp_state_add_bytes(st, b->key, (dcp_scope)b->scope, pool_at(base, b->offset, b->len),
                            (size_t)b->len);
  }
  free(first);
  if (rc && st) dcp_state_free(st), st = NULL;
  *out = st;
  return rc;
}

static void job_options(const dcpi_wp_job *job, dcp_save_options *o) {
  dcp_save_options_init(o);
  o->flags = job->flags;
  o->block_size = job->block_size;
  o->zstd_level = job->zstd_level;
  o->save_id = job->save_id;
  o->policy = (dcp_policy)job->policy;
  o->nkv = job->nkv;
  o->kv_keys = (const char *const *)job->kv_keys;
  o->kv_values = (const char *const *)job->kv_values;
}

void dcpi_wsession_save(dcpi_wsession *s, const dcpi_wp_job *job, const uint8_t *base,
                        dcpi_err *err) {
  /* the trainer's working directory first: its relative paths (the
   * checkpoint's, a rendezvous) are relative to it, not to where the
   * writer was spawned (the trainer may have changed it since) */
  if (job->cwd && job->cwd[0] && chdir(job->cwd) != 0) {
    dcpi_fail(err, DCP_EIO, "dcp-writer (rank %d): cannot enter the trainer's working "
              "directory %s: %s", job->coord.rank, job->cwd, strerror(errno));
    return;
  }
  dcp_status rc = ensure_ctx(s, &job->coord, err);
  if (rc) return;
  if (job->refused) { /* the trainer's staging failed: nothing to save, tell the peers */
    rc = dcpi_save_refused(s->ctx, job->path, job->refused, job->refused_msg);
    dcpi_fail(err, rc, "%s", dcp_ctx_last_error(s->ctx));
    /* as the peers' writers do after their failed save (below): their
     * collective's close is a round this writer must take too */
    dcpi_wsession_free(s);
    return;
  }
  dcp_state *state = NULL;
  if ((rc = build_state(s->ctx, job, base, &state))) {
    /* Saving an empty state would write a wrong checkpoint: this writer
     * refuses the save instead, in its first agreement, so the peers' saves
     * fail at once with the reason (not at their deadline, nor on
     * mismatched collectives). */
    char why[400];
    snprintf(why, sizeof why, "dcp-writer (rank %d): rebuilding the state: %.300s",
             job->coord.rank, rc == DCP_ECORRUPT
                                  ? "a chunk's staged bytes do not match its box or layout"
                                  : dcp_ctx_last_error(s->ctx));
    dcpi_save_refused(s->ctx, job->path, rc, why);
    dcpi_fail(err, rc, "%s", why);
    dcpi_wsession_free(s);
    return;
  }
  dcp_save_options o;
  job_options(job, &o);
  dcpi_base started = {.committed = job->base_committed != 0, .len = job->base_len,
                       .head = job->base_head, .rank_seq = job->base_rank_seq,
                       .parts_hash = job->base_parts_hash};
  rc = dcpi_save_over(s->ctx, state, job->path, &o, job->has_base ? &started : NULL);
  dcp_state_free(state);
  if (rc) {
    dcpi_fail(err, rc, "%s", dcp_ctx_last_error(s->ctx));
    dcpi_wsession_free(s); /* a failed collective is broken: reopen next time */
  }
}

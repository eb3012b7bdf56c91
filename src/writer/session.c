/* session.c — the writer process's context and the state it rebuilds over
 * the staging pool (see session.h). */
#include "writer/session.h"

#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

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

static int str_eq(const char *a, const char *b) {
  return (!a && !b) || (a && b && !strcmp(a, b));
}

static int coord_eq(const dcpi_wp_coord *a, const dcpi_wp_coord *b) {
  return str_eq(a->coll, b->coll) && str_eq(a->coll_options, b->coll_options) &&
         str_eq(a->rendezvous, b->rendezvous) && a->rank == b->rank &&
         a->world_size == b->world_size && a->timeout_ms == b->timeout_ms &&
         str_eq(a->storage, b->storage) && str_eq(a->storage_options, b->storage_options) &&
         str_eq(a->plugin_path, b->plugin_path);
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static int coord_copy(dcpi_wp_coord *d, const dcpi_wp_coord *c) {
  *d = (dcpi_wp_coord){dup_or_null(c->coll), dup_or_null(c->coll_options),
                       dup_or_null(c->rendezvous), c->rank, c->world_size, c->timeout_ms,
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
  /* "none": no traffic between the writers; each commits <rank>.metadata
   * and dcp_load merges them (a detached context saves that way) */
  bool none = c->coll && strcmp(c->coll, "none") == 0;
  cfg.coll = none || (c->world_size > 1 && !c->coll) ? NULL : c->coll;
  if (none && c->world_size == 1) cfg.coll = "single";
  cfg.coll_options = c->coll_options;
  cfg.rendezvous = c->rendezvous;
  cfg.timeout_ms = c->timeout_ms;
  cfg.storage = c->storage;
  cfg.storage_options = c->storage_options;
  cfg.plugin_path = c->plugin_path && c->plugin_path[0] ? c->plugin_path : NULL;
  dcp_status st = dcp_ctx_create(&cfg, &s->ctx);
  if (st)
    return dcpi_fail(err, st, "dcp-writer (rank %d): cannot open its context: %s", c->rank,
                     dcp_ctx_create_error());
  if (!coord_copy(&s->coord, c)) {
    dcpi_wsession_free(s);
    return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  }
  return DCP_OK;
}

/* The state of job over the mapping at base. */
static dcp_status build_state(dcp_ctx *ctx, const dcpi_wp_job *job, const uint8_t *base,
                              dcp_state **out) {
  dcp_state *st;
  dcp_status s = dcp_state_create(ctx, &st);
  for (size_t i = 0; !s && i < job->ntensors; i++) {
    const dcpi_wp_tensor *t = &job->tensors[i];
    s = dcp_state_add_tensor(st, t->fqn, (dcp_dtype)t->dtype, t->ndim, t->shape);
  }
  for (size_t i = 0; !s && i < job->nchunks; i++) {
    const dcpi_wp_chunk *c = &job->chunks[i];
    void *data = c->nbytes ? (void *)(base + c->offset) : NULL;
    s = dcp_state_add_chunk(st, job->tensors[c->tensor].fqn, c->box.offset, c->box.size, data);
  }
  for (size_t i = 0; !s && i < job->nbytes; i++) {
    const dcpi_wp_bytes *b = &job->bytes[i];
    void *data = b->len ? (void *)(base + b->offset) : NULL;
    s = dcp_state_add_bytes(st, b->key, (dcp_scope)b->scope, data, (size_t)b->len);
  }
  if (s && st) dcp_state_free(st), st = NULL;
  *out = st;
  return s;
}

static void job_options(const dcpi_wp_job *job, dcp_save_options *o) {
  dcp_save_options_init(o);
  o->flags = job->flags;
  o->block_size = job->block_size;
  o->zstd_level = job->zstd_level;
  o->policy = (dcp_policy)job->policy;
  o->nkv = job->nkv;
  o->kv_keys = (const char *const *)job->kv_keys;
  o->kv_values = (const char *const *)job->kv_values;
}

void dcpi_wsession_save(dcpi_wsession *s, const dcpi_wp_job *job, const uint8_t *base,
                        dcpi_err *err) {
  dcp_status st = ensure_ctx(s, &job->coord, err);
  if (st) return;
  dcp_state *state = NULL;
  if ((st = build_state(s->ctx, job, base, &state))) {
    /* Every rank's writer must still take part in the save's collectives
     * for the others to learn of the failure: save an empty state would
     * write a wrong checkpoint, so the job fails here and the peers time
     * out (DCP_ETIMEDOUT/DCP_EPEER). */
    dcpi_fail(err, st, "dcp-writer (rank %d): rebuilding the state: %s", job->coord.rank,
              dcp_ctx_last_error(s->ctx));
    dcpi_wsession_free(s);
    return;
  }
  dcp_save_options o;
  job_options(job, &o);
  st = dcp_save(s->ctx, state, job->path, &o);
  dcp_state_free(state);
  if (st) {
    dcpi_fail(err, st, "%s", dcp_ctx_last_error(s->ctx));
    dcpi_wsession_free(s); /* a failed collective is broken: reopen next time */
  }
}

/* ctx.c — context lifetime: identity, the collective it opens, the storage
 * plugin it will open per checkpoint, its last-error slot and the states
 * higher layers attach to it; and dcp_state_create, the one model entry
 * point that needs the context's identity. */
#include "core/ctx.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/sized.h"
#include "core/plugin.h"
#include "model/state.h"

/* dcpi_ctx_report (base/err.c) writes the last error through a dcp_ctx
 * pointer it cannot see into: the slot must head the struct. */
_Static_assert(offsetof(struct dcp_ctx, last) == 0, "dcp_ctx must begin with its dcpi_err");

void dcp_ctx_config_init(dcp_ctx_config *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->rank = 0;
  cfg->world_size = 1;
  cfg->timeout_ms = DCPI_DEFAULT_TIMEOUT_MS;
}

/* The caller's config with every field it lacks, or leaves 0, at its
 * default (a caller compiled against an older, shorter dcp_ctx_config keeps
 * the defaults of the fields it does not know). world_size is the one
 * field where 0 is refused rather than defaulted (setup): a job that forgot
 * to set it must not become a silent world of one. False when in is too
 * short to hold rank and world_size. */
static bool effective_config(const dcp_ctx_config *in, dcp_ctx_config *out) {
  dcp_ctx_config_init(out);
  if (!dcpi_sized_merge(out, sizeof *out, in, DCPI_SIZE_THROUGH(dcp_ctx_config, world_size)))
    return false;
  if (!out->timeout_ms) out->timeout_ms = DCPI_DEFAULT_TIMEOUT_MS;
  return true; /* lease_ms: 0 is the default, resolved by the lease layer */
}

static dcp_status open_coll(dcp_ctx *ctx, const dcp_ctx_config *cfg, dcpi_err *err) {
  const char *name = cfg->coll ? cfg->coll : "single";
  if (!cfg->coll && cfg->world_size > 1) {
    /* A detached rank: it can build states and plans as rank `rank` of
     * world_size (tools, simulations), but save and load need a collective. */
    ctx->rank = cfg->rank;
    ctx->world_size = cfg->world_size;
    return DCP_OK;
  }
  const void *table;
  dcp_status rc = dcpi_plugin_find(DCP_PLUGIN_COLL, name, cfg->plugin_path, &table, err);
  if (rc) return rc;
  ctx->coll = table;
  dcp_coll_config cc = {.struct_size = sizeof cc, .rank = cfg->rank,
                        .world_size = cfg->world_size, .native = cfg->coll_native,
                        .rendezvous = cfg->rendezvous, .timeout_ms = cfg->timeout_ms,
                        .options = cfg->coll_options};
  dcp_plugin_err perr = {{0}};
  rc = dcpi_plugin_status(ctx->coll->open(&cc, &ctx->comm, &perr), &perr, name, "open", err);
  if (rc) {
    ctx->comm = NULL;
    return rc;
  }
  ctx->rank = ctx->coll->rank(ctx->comm);
  ctx->world_size = ctx->coll->size(ctx->comm);
  if (ctx->world_size < 1 || ctx->rank < 0 || ctx->rank >= ctx->world_size)
    return dcpi_fail(err, DCP_EPLUGIN, "%s: reports rank %d of %d", name, ctx->rank,
                     ctx->world_size);
  /* A world size set on purpose (above the default 1) that the collective
   * contradicts is a launch mistake: say so instead of saving a checkpoint
   * of another world than the one the caller meant. */
  if (cfg->world_size > 1 && cfg->world_size != ctx->world_size)
    return dcpi_fail(err, DCP_EINVAL,
                     "world_size %d was configured but the %s collective has %d ranks",
                     (int)cfg->world_size, name, (int)ctx->world_size);
  return DCP_OK;
}

static dcp_status find_storage(dcp_ctx *ctx, const dcp_ctx_config *cfg, dcpi_err *err) {
  const char *name = cfg->storage ? cfg->storage : "posix";
  const void *table;
  dcp_status rc = dcpi_plugin_find(DCP_PLUGIN_STORAGE, name, cfg->plugin_path, &table, err);
  if (rc) return rc;
  ctx->storage = table;
  if (cfg->storage_options && !(ctx->storage_options = strdup(cfg->storage_options)))
    return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  return DCP_OK;
}

/* The storage plugin is looked up lazily (first save or load) when the
 * caller did not name one, so pure planning and metadata work needs no
 * plugin on disk. */
static dcp_status setup(dcp_ctx *ctx, const dcp_ctx_config *cfg, dcpi_err *err) {
  if (cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size)
    return dcpi_fail(err, DCP_EINVAL, "rank %d is not in a world of %d", cfg->rank,
                     cfg->world_size);
  if (cfg->timeout_ms <= 0) /* 0 became the default in effective_config */
    return dcpi_fail(err, DCP_EINVAL, "timeout_ms must be >= 0 (0: the default), not %lld",
                     (long long)cfg->timeout_ms);
  ctx->timeout_ms = cfg->timeout_ms;
  if (cfg->lease_ms && (cfg->lease_ms < DCPI_LEASE_MS_MIN || cfg->lease_ms > DCPI_LEASE_MS_MAX))
    return dcpi_fail(err, DCP_EINVAL, "lease_ms %lld is outside %d..%d (or 0 for %d)",
                     (long long)cfg->lease_ms, DCPI_LEASE_MS_MIN, DCPI_LEASE_MS_MAX,
                     DCPI_DEFAULT_LEASE_MS);
  ctx->lease_ms = cfg->lease_ms ? cfg->lease_ms : DCPI_DEFAULT_LEASE_MS; /* 0: the default */
  if (cfg->plugin_path && !(ctx->plugin_path = strdup(cfg->plugin_path)))
    return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  dcp_status rc = open_coll(ctx, cfg, err);
  if (!rc && cfg->storage) rc = find_storage(ctx, cfg, err);
  return rc;
}

static _Thread_local char create_error[DCPI_ERR_MSG_MAX];

const char *dcp_ctx_create_error(void) { return create_error; }

dcp_status dcp_ctx_create(const dcp_ctx_config *cfg, dcp_ctx **out) {
  if (!out) return DCP_EINVAL;
  *out = NULL;
  dcp_ctx_config eff;
  if (!effective_config(cfg, &eff)) return DCP_EINVAL;
  dcp_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return DCP_ENOMEM;
  for (int i = 0; i < DCPI_CTX_NSLOTS; i++) atomic_init(&ctx->ext[i], NULL);
  dcpi_err err;
  dcpi_err_clear(&err);
  dcp_status rc = setup(ctx, &eff, &err);
  if (rc) {
    /* No context survives to carry the message, so it is kept for the
     * calling thread (dcp_ctx_create_error). */
    memcpy(create_error, err.msg, sizeof create_error);
    dcp_ctx_free(ctx);
    return rc;
  }
  create_error[0] = '\0';
  *out = ctx;
  return DCP_OK;
}

void dcp_ctx_free(dcp_ctx *ctx) {
  if (!ctx) return;
  /* The attached states, in slot order: the async writer (its process,
   * join thread and staging pool) before the plan cache it adds to. */
  for (int i = 0; i < DCPI_CTX_NSLOTS; i++) {
    dcpi_ctx_ext *e = dcpi_ctx_ext_detach(ctx, (dcpi_ctx_slot)i);
    if (e) e->release(e);
  }
  if (ctx->comm) ctx->coll->close(ctx->comm);
  free(ctx->storage_options);
  free(ctx->plugin_path);
  free(ctx);
}

int32_t dcp_ctx_rank(const dcp_ctx *ctx) { return ctx ? ctx->rank : -1; }

int32_t dcp_ctx_world_size(const dcp_ctx *ctx) { return ctx ? ctx->world_size : 0; }

const char *dcp_ctx_last_error(const dcp_ctx *ctx) { return ctx ? ctx->last.msg : ""; }

dcp_status dcp_ctx_last_status(const dcp_ctx *ctx) { return ctx ? ctx->last.code : DCP_EINVAL; }

dcp_status dcp_ctx_stats(const dcp_ctx *ctx, dcp_stats *out) {
  if (!ctx || !out) return DCP_EINVAL;
  return dcpi_sized_fill(out, &ctx->stats, sizeof ctx->stats) ? DCP_OK : DCP_EINVAL;
}

dcpi_ctx_ext *dcpi_ctx_ext_get(dcp_ctx *ctx, dcpi_ctx_slot slot) {
  return atomic_load_explicit(&ctx->ext[slot], memory_order_acquire);
}

dcpi_ctx_ext *dcpi_ctx_ext_attach(dcp_ctx *ctx, dcpi_ctx_slot slot, dcpi_ctx_ext *ext) {
  dcpi_ctx_ext *held = NULL;
  if (atomic_compare_exchange_strong_explicit(&ctx->ext[slot], &held, ext, memory_order_acq_rel,
                                              memory_order_acquire))
    return ext;
  return held;
}

dcpi_ctx_ext *dcpi_ctx_ext_detach(dcp_ctx *ctx, dcpi_ctx_slot slot) {
  return atomic_exchange_explicit(&ctx->ext[slot], NULL, memory_order_acq_rel);
}

dcp_status dcp_state_create(dcp_ctx *ctx, dcp_state **out) {
  if (!ctx || !out) return DCP_EINVAL;
  return dcpi_state_new(ctx, ctx->rank, ctx->world_size, out);
}

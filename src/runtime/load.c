/* load.c — dcp_load: read .metadata (once, then broadcast), plan every
 * destination chunk against the saved chunks by box intersection, read only
 * the blocks each overlap touches, verify them, and copy the overlap's
 * byte runs into place. Bytes items are matched by key and scope. Each
 * phase ends with an agreement, so every rank returns the same outcome. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/plugin.h"
#include "metadata/view.h"
#include "model/box.h"
#include "model/state.h"
#include "planner/load_plan.h"
#include "runtime/load_int.h"
#include "runtime/load_source.h"
#include "runtime/local_save.h"
#include "runtime/options.h"
#include "runtime/rt.h"

/* Read .metadata on this rank; without one, merge the parts of a save made
 * with no collective; with neither, "not committed". A part that vanished
 * under the merge (a newer save completed) leaves rt->data_file_gone set. */
static dcp_status read_metadata(dcpi_rt *rt, uint8_t **data, size_t *len) {
  dcpi_err probe;
  dcp_status rc = dcpi_rt_read_file(rt, DCPI_METADATA_NAME, data, len, &probe);
  if (rc == DCP_ENOTFOUND) rc = dcpi_merge_rank_metadata(rt, data, len, &probe);
  if (rc == DCP_ENOTFOUND && rt->data_file_gone) return dcpi_fail(&rt->err, rc, "%s", probe.msg);
  if (rc == DCP_ENOTFOUND)
    return dcpi_fail(&rt->err, DCP_EINCOMPLETE,
                     "%s has no committed %s: the checkpoint is incomplete or absent", rt->path,
                     DCPI_METADATA_NAME);
  if (rc) return dcpi_fail(&rt->err, rc, "%s", probe.msg);
  return DCP_OK;
}

/* Open a view of *data (read from storage), handing the buffer over to it
 * (no copy): *data is NULL afterwards unless the open failed. */
static dcp_status open_view(dcpi_rt *rt, uint8_t **data, size_t len, dcp_meta **out) {
  dcp_status rc = dcpi_meta_open_owned(rt->ctx, *data, len, out);
  if (rc) dcpi_fail(&rt->err, rc, "%s/%s: %s", rt->path, DCPI_METADATA_NAME, rt->ctx->last.msg);
  else *data = NULL;
  return rc;
}

/* With every rank reading .metadata itself: did they all read the same
 * bytes? A save that replaced the checkpoint between two ranks' reads would
 * otherwise have them load different checkpoints. *same false: start over. */
static dcp_status agree_same(dcpi_rt *rt, const uint8_t *data, size_t len, bool *same) {
  int64_t h = (int64_t)(XXH3_64bits(data, len) & INT64_MAX);
  int64_t v[2] = {h, -h}; /* min(h) == -min(-h): every rank has the same h */
  dcp_status rc = dcpi_rt_allreduce(rt, v, 2, DCP_REDUCE_MIN);
  *same = !rc && v[0] == -v[1];
  return rc;
}

/* Phase 1: every rank ends with a view of the same .metadata (whose
 * XXH3-64 goes to *hash). *replaced: ranks reading it themselves read
 * different ones (start over). */
static dcp_status fetch_metadata(dcpi_rt *rt, const dcp_load_options *o, dcp_meta **meta,
                                 uint64_t *hash, bool *replaced) {
  uint8_t *data = NULL;
  size_t len = 0;
  bool everyone = o->flags & DCP_LOAD_METADATA_PER_RANK;
  dcp_status rc = dcpi_rt_open_storage(rt, 0);
  if (!rc && (everyone || rt->ctx->rank == 0)) rc = read_metadata(rt, &data, &len);
  /* the two paths below take different collectives: the ranks agree on
   * the flag first (under MPI a mismatch was a fatal MPI_ERR_TRUNCATE) */
  if ((rc = dcpi_rt_agree_value(rt, rc, everyone, "DCP_LOAD_METADATA_PER_RANK flags"))) {
    int64_t gone = rt->data_file_gone; /* a part went under a rank's merge */
    if (rc == DCP_ENOTFOUND && !dcpi_rt_allreduce(rt, &gone, 1, DCP_REDUCE_MAX))
      *replaced = gone > 0;
    goto out;
  }
  if (everyone) {
    bool same = false;
    if ((rc = agree_same(rt, data, len, &same))) goto out;
    if (!same) {
      *replaced = true;
      rc = dcpi_fail(&rt->err, DCP_ENOTFOUND, "the ranks read different %s at %s (a save "
                    "replaced it meanwhile)", DCPI_METADATA_NAME, rt->path);
      goto out;
    }
  } else {
    uint64_t n = len;
    if ((rc = dcpi_rt_bcast(rt, &n, sizeof n, 0))) goto out;
    if (rt->ctx->rank != 0 && !(data = malloc(n ? (size_t)n : 1)))
      rc = dcpi_fail(&rt->err, DCP_ENOMEM, "out of memory for %llu bytes of metadata",
                    (unsigned long long)n);
    len = (size_t)n;
    /* a rank that could not allocate leaves the others to the deadline */
    if (!rc && (rc = dcpi_rt_bcast(rt, data, len, 0))) goto out;
  }
  if (!rc) *hash = XXH3_64bits(data, len);
  rc = dcpi_rt_agree(rt, rc ? rc : open_view(rt, &data, len, meta));
out:
  free(data);
  return rc;
}

/* ---- planning ----------------------------------------------------------- */

/* A chunk list is decoded (and its checksums verified) when first used,
 * not when the view opens: name the file in its failure. */
static dcp_status name_metadata(const char *path, dcp_status rc, dcpi_err *err) {
  char msg[DCPI_ERR_MSG_MAX];
  snprintf(msg, sizeof msg, "%s", err->msg);
  return dcpi_fail(err, rc, "%s/%s: %s", path, DCPI_METADATA_NAME, msg);
}

/* Fetch the saved chunk of every overlap of the plan (its skip window of
 * the metadata decoded and verified), so that damage there is found,
 * named, and agreed on before any rank reads. */
static dcp_status fetch_refs(dcpi_rt *rt, dcp_meta *m, const dcp_state *st,
                             const dcpi_load_plan *plan) {
  for (size_t i = 0; i < plan->noverlaps; i++) {
    const dcpi_overlap *ov = &plan->overlaps[i];
    size_t ti;
    dcp_chunk_info ci;
    dcp_status rc = dcp_meta_find_tensor(m, st->tensors[ov->tensor].fqn, &ti);
    if (!rc) rc = dcp_meta_chunk(m, ti, ov->saved_chunk, &ci);
    if (rc) {
      dcpi_fail(&rt->err, rc, "%s", rt->ctx->last.msg);
      return name_metadata(rt->path, rc, &rt->err);
    }
  }
  return DCP_OK;
}

/* The planner's view of a saved tensor, straight from the metadata view:
 * a derived grid or (version 4) FLAT form when the list is one (no boxes
 * decoded), else the boxes. */
typedef struct lookup_arg {
  dcp_meta *m;
  const char *path; /* the checkpoint, for messages */
  dcpi_grid grid; /* the last GRID tensor's (the planner holds one at a time) */
  dcpi_flat flat; /* the last FLAT tensor's (version 4) */
} lookup_arg;

static dcp_status lookup(void *arg, const char *fqn, size_t fqn_len, dcpi_saved_tensor *out,
                         dcpi_err *err) {
  (void)fqn_len;
  lookup_arg *la = arg;
  dcp_meta *m = la->m;
  size_t ti;
  dcp_tensor_info info;
  if (dcp_meta_find_tensor(m, fqn, &ti))
    return dcpi_fail(err, DCP_ENOTFOUND, "the checkpoint has no tensor '%s'", fqn);
  dcp_meta_tensor(m, ti, &info);
  const int64_t *off = NULL, *sz = NULL;
  bool grid = false, flat = false;
  dcp_status rc = info.chunk_count ? dcpi_meta_chunk_grid(m, ti, &la->grid, &grid, err) : DCP_OK;
  if (!rc && info.chunk_count && !grid) rc = dcpi_meta_chunk_flat(m, ti, &la->flat, &flat, err);
  if (!rc && info.chunk_count && !grid && !flat) rc = dcpi_meta_chunk_boxes(m, ti, &off, &sz, err);
  if (rc) return name_metadata(la->path, rc, err);
  *out = (dcpi_saved_tensor){.fqn = info.fqn, .dtype = info.dtype, .ndim = info.ndim,
                             .shape = dcpi_meta_tensor_shape(m, ti),
                             .nchunks = (size_t)info.chunk_count, .chunk_off = off,
                             .chunk_sz = sz, .chunk_id = NULL, .grid = grid ? &la->grid : NULL,
                             .flat = flat ? &la->flat : NULL};
  return DCP_OK;
}

/* ---- reading ------------------------------------------------------------ */

typedef struct bytes_sink {
  uint8_t *dest;
} bytes_sink;

static dcp_status copy_bytes(void *arg, uint64_t raw_off, const uint8_t *data, size_t len,
                             dcpi_err *err) {
  (void)err;
  memcpy(((bytes_sink *)arg)->dest + raw_off, data, len);
  return DCP_OK;
}

/* The saved bytes item for this rank's item b, checking scope and length. */
static dcp_status find_bytes(dcp_meta *m, const dcpi_bytes_item *b, int32_t rank, int32_t world,
                             dcp_bytes_info *out, dcpi_err *err) {
  bool any = false;
  for (size_t i = 0; i < dcp_meta_bytes_count(m); i++) {
    dcp_bytes_info bi;
    dcp_meta_bytes(m, i, &bi);
    if (strcmp(bi.key, b->key)) continue;
    any = true;
    if (bi.scope != b->scope)
      return dcpi_fail(err, DCP_ESCOPE, "bytes '%s' was saved %s, requested %s", b->key,
                       bi.scope == DCP_SCOPE_PER_RANK ? "PER_RANK" : "REPLICATED",
                       b->scope == DCP_SCOPE_PER_RANK ? "PER_RANK" : "REPLICATED");
    if (bi.scope == DCP_SCOPE_PER_RANK && dcp_meta_world_size(m) != world)
      return dcpi_fail(err, DCP_ESCOPE,
                       "bytes '%s' is PER_RANK, saved by a world of %d; this world has %d",
                       b->key, dcp_meta_world_size(m), world);
    if (bi.scope == DCP_SCOPE_PER_RANK && bi.rank != rank) continue;
    if (bi.ref.raw_length != b->len)
      return dcpi_fail(err, DCP_EMISMATCH, "bytes '%s' has %llu bytes saved, %zu requested",
                       b->key, (unsigned long long)bi.ref.raw_length, b->len);
    *out = bi;
    return DCP_OK;
  }
  return dcpi_fail(err, DCP_ENOTFOUND, any ? "bytes '%s' has no copy of rank %d"
                                           : "the checkpoint has no bytes item '%s'",
                   b->key, rank);
}

/* Read one found bytes item into its buffer. */
static dcp_status read_one_bytes(dcpi_block_reader *br, const dcpi_bytes_item *b,
                                 const char *file, const dcp_storage_ref *ref, dcpi_err *err) {
  char what[300];
  snprintf(what, sizeof what, "bytes '%.200s'", b->key);
  bytes_sink bs = {b->data};
  return dcpi_block_read(br, file, ref, 0, b->len, what, copy_bytes, &bs, err);
}

/* Find every bytes item first, so that the small ones adjacent in a data
 * file (typically all of them) are fetched together. */
static dcp_status read_bytes_items(dcpi_block_reader *br, dcp_meta *m, const dcp_state *st,
                                   int32_t world, dcpi_err *err) {
  size_t n = st->nbytes;
  dcp_bytes_info *found = malloc((n ? n : 1) * sizeof *found);
  dcpi_block_req *reqs = malloc((n ? n : 1) * sizeof *reqs);
  dcp_status rc = found && reqs ? DCP_OK : dcpi_fail(err, DCP_ENOMEM, "out of memory");
  for (size_t i = 0; !rc && i < n; i++) {
    const dcpi_bytes_item *b = &st->bytes[i];
    reqs[i] = (dcpi_block_req){NULL, &found[i].ref, 0, b->len};
    rc = find_bytes(m, b, st->rank, world, &found[i], err);
    if (!rc && b->len) rc = dcpi_load_file_of(m, &found[i].ref, &reqs[i].file, err);
  }
  size_t m_reqs = 0; /* the non-empty ones, packed to the front */
  for (size_t i = 0; !rc && i < n; i++)
    if (st->bytes[i].len) reqs[m_reqs++] = reqs[i];
  if (!rc && m_reqs > 1) rc = dcpi_block_prefetch(br, reqs, m_reqs, err);
  for (size_t i = 0, k = 0; !rc && i < n; i++)
    if (st->bytes[i].len) {
      rc = read_one_bytes(br, &st->bytes[i], reqs[k].file, reqs[k].ref, err);
      k++;
    }
  dcpi_block_prefetch_drop(br);
  free(found);
  free(reqs);
  return rc;
}

/* ---- driver ------------------------------------------------------------- */

/* Storage bytes read so far on this operation. */
static uint64_t storage_bytes_read(dcpi_rt *rt) {
  dcp_io_stats io;
  dcpi_storage_stats(rt->ctx->storage, rt->st, &io);
  return io.bytes_read;
}

/* Phase 3: read this rank's chunks (for itself and for its groups), run the
 * group broadcasts, then the bytes items. Local status. */
static dcp_status read_all(dcpi_rt *rt, dcp_meta *m, const dcp_state *st,
                           const dcpi_load_plan *plan, const dcpi_load_sched *sc,
                           const dcp_load_options *o, dcpi_block_reader *br) {
  dcp_stats *stats = &rt->ctx->stats;
  uint64_t io0 = storage_bytes_read(rt);
  dcpi_load_counts counts = {0};
  dcp_status rc = dcpi_load_exec(rt, m, st, plan, sc, br, !(o->flags & DCP_LOAD_NO_PIPELINE),
                     o->max_inflight_bytes, &counts);
  if (!rc) rc = read_bytes_items(br, m, st, rt->ctx->world_size, &rt->err);
  stats->data_read_bytes = storage_bytes_read(rt) - io0;
  stats->read_payload_bytes = counts.payload;
  stats->dedup_sent_bytes = counts.sent;
  stats->dedup_recv_bytes = counts.recv;
  if (!rc) stats->data_bytes = (uint64_t)plan->total_bytes;
  return rc;
}

/* This rank's snapshot in memory, when the context has a memory tier and
 * it holds this checkpoint (same committed metadata): br reads from it
 * first. Never fails: what became of it is in the statistics. */
static dcpi_load_source *open_source(dcpi_rt *rt, uint64_t meta_hash, dcpi_block_reader *br) {
  dcpi_load_tier *tier = (dcpi_load_tier *)dcpi_ctx_ext_get(rt->ctx, DCPI_CTX_TIER);
  dcpi_load_source *src = NULL;
  uint32_t state = DCP_MEMTIER_OFF;
  if (tier && br) tier->open(tier, rt, meta_hash, &src, &state);
  rt->ctx->stats.mem_tier = state;
  if (src) dcpi_block_reader_set_source(br, src);
  return src;
}

static void close_source(dcp_stats *stats, dcpi_load_source *src) {
  if (!src) return;
  stats->mem_read_bytes = atomic_load(&src->served);
  stats->mem_fallback_bytes = atomic_load(&src->rejected);
  src->close(src);
}

/* How often a load starts over when a data file vanished while it read:
 * a save replaced the checkpoint meanwhile (it removes the old files after
 * its commit), so the new .metadata names files that are there. */
#define DCPI_LOAD_ATTEMPTS 4

/* One attempt; *replaced: it failed because a data file it was reading
 * from vanished (agreed, so the same on every rank); *read_hash: the
 * XXH3-64 of the .metadata it read (0 when it read none). */
static dcp_status run(dcpi_rt *rt, dcp_state *st, const dcp_load_options *o, bool *replaced,
                      uint64_t *read_hash) {
  dcp_stats *stats = &rt->ctx->stats;
  dcp_meta *meta = NULL;
  dcpi_load_plan *plan = NULL;
  dcpi_load_sched sc = {0};
  dcpi_block_reader *br = NULL;
  double t = dcpi_now();
  uint64_t meta_hash = 0;
  dcp_status rc = fetch_metadata(rt, o, &meta, &meta_hash, replaced);
  *read_hash = rc ? 0 : meta_hash;
  if (!rc) {
    dcp_status ls = dcpi_load_plan_from_state(
        st, &(dcpi_saved_source){.lookup = lookup,
                                 .arg = &(lookup_arg){.m = meta, .path = rt->path}},
        &plan, &rt->err);
    if (!ls) ls = fetch_refs(rt, meta, st, plan);
    /* the block reader too, before anyone depends on this rank's reads */
    if (!ls) ls = dcpi_block_reader_create(rt, &br, &rt->err);
    rc = dcpi_rt_agree(rt, ls);
  }
  dcpi_load_source *src = rc ? NULL : open_source(rt, meta_hash, br);
  dcpi_saved_source saved = {.lookup = lookup, .arg = &(lookup_arg){.m = meta}};
  if (!rc) rc = dcpi_load_schedule(rt, meta, &saved, st, plan, o, &sc);
  stats->dedup_path = sc.path;
  stats->dedup_groups = sc.ngroups;
  stats->plan_s = dcpi_now() - t;
  t = dcpi_now();
  if (!rc) {
    rc = dcpi_rt_agree(rt, read_all(rt, meta, st, plan, &sc, o, br));
    /* which rank's data file went: ask them all (failures only) */
    int64_t gone = rt->data_file_gone;
    if (rc == DCP_ENOTFOUND && !dcpi_rt_allreduce(rt, &gone, 1, DCP_REDUCE_MAX))
      *replaced = gone > 0;
  }
  stats->read_s = dcpi_now() - t;
  close_source(stats, src);
  dcpi_block_reader_free(br);
  dcpi_load_sched_free(&sc);
  dcpi_load_plan_free(plan);
  dcp_meta_free(meta);
  return rc;
}

dcp_status dcp_load(dcp_ctx *ctx, dcp_state *st, const char *path,
                    const dcp_load_options *opts) {
  if (!ctx) return DCP_EINVAL;
  dcpi_rt rt;
  dcpi_rt_begin(&rt, ctx, path);
  dcp_load_options o;
  dcp_status rc = DCP_OK;
  if (!ctx->comm) {
    dcpi_fail(&rt.err, DCP_EINVAL, "load: this context has no collective (a detached rank of a "
              "world of %d): set coll in its config", ctx->world_size);
    return dcpi_rt_end(&rt);
  }
  if (!st || st->ctx != ctx)
    rc = dcpi_fail(&rt.err, DCP_EINVAL, "load: the state is NULL or from another context");
  else if (!path || !*path)
    rc = dcpi_fail(&rt.err, DCP_EINVAL, "load: empty checkpoint path");
  else
    rc = dcpi_load_options_effective(opts, &o, &rt.err);
  if (rc) { /* fetch_metadata's first agreement, which the other ranks are in */
    dcpi_rt_agree_value(&rt, rc, 0, "DCP_LOAD_METADATA_PER_RANK flags");
    return dcpi_rt_end(&rt);
  }
  bool replaced = false;
  uint64_t hash = 0, before = 0;
  for (int attempt = 1; run(&rt, st, &o, &replaced, &hash) && replaced; attempt++) {
    if (attempt > 1 && hash && hash == before) {
      /* A save that replaces a checkpoint commits its .metadata before it
       * removes the old files, so a file gone under the same .metadata
       * twice was not replaced: the checkpoint is damaged (a data file
       * deleted or lost, a .metadata copied without its files). */
      char last[DCPI_ERR_MSG_MAX / 2];
      memcpy(last, rt.err.msg, sizeof last - 1);
      last[sizeof last - 1] = '\0';
      dcpi_fail(&rt.err, DCP_EINCOMPLETE, "load: a data file that the checkpoint at %s names is "
                "missing, and its %s did not change (damaged or incompletely copied; dcp verify "
                "lists what is missing): %.200s", path, DCPI_METADATA_NAME, last);
      break;
    }
    before = hash;
    if (attempt == DCPI_LOAD_ATTEMPTS) {
      char last[DCPI_ERR_MSG_MAX / 2];
      memcpy(last, rt.err.msg, sizeof last - 1); /* it is about to be overwritten */
      last[sizeof last - 1] = '\0';
      dcpi_fail(&rt.err, DCP_ESTALE, "load: the checkpoint at %s was replaced %d times while "
                "it was read (a save overwrites it in a loop?); last: %.200s", path, attempt, last);
      break;
    }
    replaced = false;
    rt.data_file_gone = 0;
    dcpi_err_clear(&rt.err);
  }
  return dcpi_rt_end(&rt);
}

dcp_status dcp_meta_open(dcp_ctx *ctx, const char *path, dcp_meta **out) {
  if (!ctx || !out) return DCP_EINVAL;
  *out = NULL;
  /* not an operation of the context (its statistics stay), and not
   * collective: just this rank's storage */
  dcpi_rt rt = {.ctx = ctx, .path = path};
  dcpi_err_clear(&rt.err);
  uint8_t *data = NULL;
  size_t len = 0;
  dcp_status rc = path && *path ? dcpi_rt_open_storage(&rt, 0)
                               : dcpi_fail(&rt.err, DCP_EINVAL, "empty checkpoint path");
  if (!rc) rc = read_metadata(&rt, &data, &len);
  if (!rc) rc = open_view(&rt, &data, len, out);
  free(data);
  if (rt.st) ctx->storage->close(rt.st);
  return dcpi_ctx_report(ctx, &rt.err);
}

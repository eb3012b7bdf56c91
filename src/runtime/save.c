/* save.c — dcp_save: a collective, synchronous save in four phases, each
 * closed by an agreement so that a failure on any rank reaches every rank:
 *
 *   prepare  open storage; rank 0 takes the directory's lease, records
 *            the checkpoint there (refused unless overwriting) and makes
 *            the save's identity, which every rank learns; build and
 *            encode this rank's local plan
 *   plan     gather local plans at rank 0, which builds the global plan
 *            (validation, dedup, balancing) and scatters assignments
 *   write    every rank streams what it was assigned into its own data
 *            file (checksummed blocks), then syncs it
 *   commit   write results reach rank 0, which checks that its lease
 *            and the checkpoint it started over still hold, writes
 *            .metadata atomically, then removes every other save's files
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/wire.h"
#include "core/progress.h"
#include "model/state.h"
#include "planner/save_plan.h"
#include <xxhash.h>

#include "runtime/commit.h"
#include "runtime/files.h"
#include "runtime/lease.h"
#include "runtime/local_save.h"
#include "runtime/options.h"
#include "runtime/plan_cache.h"
#include "runtime/plan_persist.h"
#include "runtime/replace.h"
#include "runtime/replica_check.h"
#include "runtime/rt.h"
#include "runtime/save.h"
#include "runtime/save_layout.h"
#include "runtime/save_layout_bytes.h"

typedef struct save_job {
  dcpi_rt *rt;
  dcp_state *st;
  dcp_save_options opts;
  dcpi_local_plan *lp;
  uint8_t *plan_enc; /* this rank's encoded local plan */
  size_t plan_len;
  dcpi_global_plan *gp; /* rank 0 only: owned, or the cache entry's */
  bool gp_owned;
  dcpi_plan_entry *entry; /* the cache entry used or made (a reference) */
  uint8_t *all_plans;     /* rank 0, after the gather: every rank's plan */
  size_t *plan_lens;
  dcpi_plan_key key;    /* of this rank's local plan */
  int64_t generation;   /* of the global plan (rank 0 makes it) */
  uint8_t *assignment;  /* what this rank writes (from rank 0) */
  size_t assignment_len;
  dcpi_block_writer *writer; /* this rank's data file, once it has one */
  uint64_t file_length;      /* of that file, once closed */
  dcpi_wbuf results;         /* where each piece went (to rank 0) */
  dcpi_identity ident;       /* this save's (rank 0 makes it, every rank learns it) */
  dcpi_base base;            /* rank 0: what the directory held at the start */
  const dcpi_base *expected; /* rank 0: what it held when an async save started */
  dcpi_lease *lease;         /* rank 0: the directory's, while the save runs */
  bool counting;             /* a first walk of the assignment: sizes only */
  uint64_t prog_done, prog_total; /* DCP_PHASE_SAVE_WRITE progress */
  bool per_rank;              /* the per-rank planning path (save_layout.h) */
  dcpi_layout_set *ls;        /* rank 0 on it: every layout, for the commit */
  dcpi_layout_write *writes;  /* on it: what this rank writes */
  size_t nwrites;
  uint8_t *bytes_writes;      /* on it: per bytes item of the state, written here */
  bool any_bytes;             /* on it: some rank has a bytes item */
} save_job;

static void job_free(save_job *j) {
  if (j->writer) dcpi_block_writer_close(j->writer, false, NULL);
  dcpi_lease_release(j->lease);
  dcpi_local_plan_free(j->lp);
  free(j->plan_enc);
  if (j->gp_owned) dcpi_global_plan_free(j->gp);
  if (j->entry) dcpi_plan_cache_release(dcpi_ctx_plan_cache(j->rt->ctx), j->entry);
  free(j->all_plans);
  free(j->plan_lens);
  free(j->assignment);
  dcpi_wbuf_free(&j->results);
  dcpi_layout_set_free(j->ls);
  free(j->writes);
  free(j->bytes_writes);
}

/* ---- prepare ------------------------------------------------------------ */

/* Rank 0: take the directory's lease, then record what the directory
 * holds (refused unless overwriting) and make the save's identity. An
 * in-place overwrite un-commits the old checkpoint later (remove_in_place),
 * once nothing can refuse the save any more. */
static dcp_status claim_directory(save_job *j, dcpi_err *err) {
  dcpi_rt *rt = j->rt;
  dcp_status rc = dcpi_lease_acquire(rt, DCPI_COORD_LEASE, rt->ctx->lease_ms, &j->lease, err);
  if (!rc) rc = dcpi_base_read(rt, &j->base, err);
  if (rc) return rc;
  if (j->expected && !dcpi_base_same(j->expected, &j->base))
    return dcpi_fail(err, DCP_ESTALE,
                     "the checkpoint at %s changed after this async save started (another "
                     "save committed there meanwhile); this older save is not committed",
                     rt->path);
  bool overwrite = j->opts.flags & DCP_SAVE_OVERWRITE;
  if (j->base.committed && !overwrite)
    return dcpi_fail(err, DCP_EEXIST,
                     "a committed checkpoint exists at %s (set DCP_SAVE_OVERWRITE to replace it)",
                     rt->path);
  if (!j->base.committed && j->base.parts && !overwrite)
    return dcpi_fail(err, DCP_EEXIST,
                     "a checkpoint saved without a collective is at %s (set "
                     "DCP_SAVE_OVERWRITE to replace it)", rt->path);
  if ((rc = dcpi_save_id_random(j->ident.id)))
    return dcpi_fail(err, rc, "no random bytes for the save's id");
  j->ident.generation = j->base.generation + 1;
  return DCP_OK;
}

/* Rank 0, for DCP_SAVE_OVERWRITE | DCP_SAVE_IN_PLACE: un-commit and remove
 * the old checkpoint. Only after the plan and the replica check: a save that
 * a bad plan or a replica mismatch refuses must leave the old checkpoint as
 * it was (the directory's lease keeps other savers out meanwhile). */
static dcp_status remove_in_place(save_job *j) {
  dcpi_rt *rt = j->rt;
  uint32_t both = DCP_SAVE_OVERWRITE | DCP_SAVE_IN_PLACE;
  if (rt->ctx->rank != 0 || (j->opts.flags & both) != both) return DCP_OK;
  dcp_status rc = dcpi_base_remove(rt, &rt->err);
  return rc ? rc : dcpi_base_read(rt, &j->base, &rt->err);
}

static dcp_status prepare(save_job *j) {
  dcpi_rt *rt = j->rt;
  dcpi_err *err = &rt->err;
  dcpi_save_opts so;
  dcpi_save_opts_init(&so);
  so.policy = j->opts.policy == DCP_POLICY_LOWEST_RANK ? DCPI_BALANCE_LOWEST_RANK
                                                       : DCPI_BALANCE_LEAST_LOADED;
  so.block_size = j->opts.block_size;
  so.flags = j->opts.flags & DCP_SAVE_COMPRESS;
  dcp_status rc = dcpi_rt_open_storage(rt, DCP_STORAGE_CREATE);
  if (!rc && rt->ctx->rank == 0) rc = claim_directory(j, err);
  if (!rc) rc = dcpi_local_plan_from_state(j->st, &so, &j->lp, err);
  if (!rc) rc = dcpi_local_plan_encode(j->lp, &j->plan_enc, &j->plan_len, err);
  if (!rc) rc = dcpi_plan_hash(j->lp, &j->key, err);
  return rc;
}

/* Every rank learns the identity rank 0 made (its files are named after it). */
static dcp_status learn_identity(save_job *j) {
  uint8_t msg[24];
  memcpy(msg, j->ident.id, 16);
  for (int i = 0; i < 8; i++) msg[16 + i] = (uint8_t)(j->ident.generation >> (8 * i));
  dcp_status rc = dcpi_rt_bcast(j->rt, msg, sizeof msg, 0);
  if (rc) return rc;
  memcpy(j->ident.id, msg, 16);
  j->ident.generation = 0;
  for (int i = 0; i < 8; i++) j->ident.generation |= (uint64_t)msg[16 + i] << (8 * i);
  dcpi_tag_of(j->ident.id, j->ident.tag);
  return DCP_OK;
}

/* ---- plan cache --------------------------------------------------------- */

/* One tiny agreement: did every rank find its plan key in its cache, all
 * under the same generation? Then that generation's global plan holds
 * unchanged and the gather/scatter of plans is skipped. Rank 0 needs the
 * entry's plans (it rebuilds the global plan from them when the entry came
 * from the writer process); a failure to do so is rank 0's own, into
 * *local, for the agreement that closes the plan phase. */
static dcp_status try_cache(save_job *j, bool *hit, dcp_status *local) {
  dcpi_rt *rt = j->rt;
  dcpi_plan_cache *cache = dcpi_ctx_plan_cache(rt->ctx); /* NULL: a miss */
  dcpi_plan_entry *e = dcpi_plan_cache_get(cache, j->key);
  if (e && rt->ctx->rank == 0 && e->world != rt->ctx->world_size) {
    dcpi_plan_cache_release(cache, e); /* not from a save coordinated here */
    e = NULL;
  }
  /* MIN over {-miss, gen, -gen}: any miss shows as -1, and min(gen) ==
   * -min(-gen) == max(gen) says every rank holds the same generation. */
  int64_t v[3] = {e ? 0 : -1, e ? e->generation : 0, e ? -e->generation : 0};
  dcp_status rc = dcpi_rt_allreduce(rt, v, 3, DCP_REDUCE_MIN);
  *hit = !rc && v[0] == 0 && v[1] == -v[2] && v[1] > 0;
  if (!*hit) {
    dcpi_plan_cache_release(cache, e);
    return rc;
  }
  j->entry = e;
  if (!(j->assignment = malloc(e->assignment_len ? e->assignment_len : 1))) {
    *local = dcpi_fail(&rt->err, DCP_ENOMEM, "out of memory");
    return DCP_OK;
  }
  memcpy(j->assignment, e->assignment, e->assignment_len);
  j->assignment_len = e->assignment_len;
  if (rt->ctx->rank == 0 && !(j->gp = dcpi_plan_entry_global(cache, e, &rt->err)))
    *local = rt->err.code ? rt->err.code : DCP_ENOMEM;
  return DCP_OK;
}

/* After a planned save: every rank learns the generation and caches its
 * part; rank 0 also every rank's plan and the global plan, which the job
 * keeps using for the commit (through its reference to the entry). */
static dcp_status remember_plan(save_job *j) {
  dcpi_rt *rt = j->rt;
  dcp_status rc = dcpi_rt_bcast(rt, &j->generation, sizeof j->generation, 0);
  if (rc) return rc;
  uint8_t *copy = malloc(j->assignment_len ? j->assignment_len : 1);
  if (!copy) return DCP_OK; /* the cache is an optimisation, never an error */
  memcpy(copy, j->assignment, j->assignment_len);
  int32_t world = j->all_plans ? rt->ctx->world_size : 0;
  dcpi_plan_entry *e = dcpi_plan_entry_new(j->key, j->generation, copy, j->assignment_len,
                                           world, j->all_plans, j->plan_lens, NULL);
  j->all_plans = NULL, j->plan_lens = NULL; /* the entry's now (or freed) */
  if (!e) return DCP_OK;
  if (j->gp_owned) e->gp = j->gp, j->gp_owned = false; /* e is not shared yet */
  e->refs++; /* the job's reference; the other one goes to the cache */
  j->entry = e;
  dcpi_plan_cache_put(dcpi_ctx_plan_cache(rt->ctx), e);
  return DCP_OK;
}

/* ---- plan --------------------------------------------------------------- */

/* The local chunk (or bytes) index that holder `rank` has of an item. */
static uint32_t holder_index(const int32_t *holders, const uint32_t *idx, uint32_t n,
                             int32_t rank) {
  for (uint32_t k = 0; k < n; k++)
    if (holders[k] == rank) return idx[k];
  return UINT32_MAX; /* unreachable: owners are holders */
}

/* Rank 0: per rank, what it writes: for each item its global index, then
 * local chunk index * 2 + piece flag, and for a piece of a split item its
 * byte offset and length in that chunk; then (global, local) per bytes item. */
dcp_status dcpi_save_encode_assignments(const dcpi_global_plan *gp, int32_t world,
                                        dcpi_wbuf *out, dcpi_err *err) {
  for (int32_t r = 0; r < world; r++) {
    const uint32_t *items, *bytes;
    size_t n = dcpi_global_plan_rank_items(gp, r, &items);
    dcpi_w_varint(&out[r], n);
    for (size_t k = 0; k < n; k++) {
      dcpi_gp_item it;
      dcpi_global_plan_item(gp, items[k], &it);
      dcpi_w_varint(&out[r], items[k]);
      uint64_t local = holder_index(it.holders, it.holder_chunks, it.nholders, r);
      dcpi_w_varint(&out[r], local << 1 | it.piece);
      if (it.piece) {
        dcpi_w_varint(&out[r], it.piece_offset);
        dcpi_w_varint(&out[r], (uint64_t)it.nbytes);
      }
    }
    n = dcpi_global_plan_rank_bytes(gp, r, &bytes);
    dcpi_w_varint(&out[r], n);
    for (size_t k = 0; k < n; k++) {
      dcpi_gp_bytes b;
      dcpi_global_plan_bytes(gp, bytes[k], &b);
      dcpi_w_varint(&out[r], bytes[k]);
      dcpi_w_varint(&out[r], holder_index(b.holders, b.holder_items, b.nholders, r));
    }
    if (out[r].status) return dcpi_fail(err, out[r].status, "out of memory for assignments");
  }
  return DCP_OK;
}

static dcp_status plan(save_job *j) {
  dcpi_rt *rt = j->rt;
  int32_t world = rt->ctx->world_size;
  uint8_t *all = NULL;
  size_t *lens = NULL;
  dcp_status rc = dcpi_rt_gather_bytes(rt, j->plan_enc, j->plan_len, 0, &all, &lens);
  if (rc) return rc;
  dcpi_wbuf *msgs = NULL;
  if (rt->ctx->rank == 0) {
    size_t total = 0;
    for (int32_t r = 0; r < world; r++) total += lens[r];
    /* the generation names this set of plans: 63 bits, never 0 */
    j->generation = (int64_t)(XXH3_64bits(all, total) & INT64_MAX) | 1;
    rc = dcpi_global_plan_from_encoded(all, lens, world, &j->gp, &rt->err);
    j->gp_owned = j->gp != NULL;
    if (!rc && !(msgs = calloc((size_t)world, sizeof *msgs)))
      rc = dcpi_fail(&rt->err, DCP_ENOMEM, "out of memory");
    if (!rc) rc = dcpi_save_encode_assignments(j->gp, world, msgs, &rt->err);
  }
  /* rank 0 keeps every rank's plan for the cache entry */
  if (rt->ctx->rank == 0) j->all_plans = all, j->plan_lens = lens;
  else free(all), free(lens);
  if ((rc = dcpi_rt_agree(rt, rc))) goto out;
  const uint8_t **bufs = NULL;
  size_t *blens = NULL;
  if (msgs) {
    bufs = malloc((size_t)world * sizeof *bufs);
    blens = malloc((size_t)world * sizeof *blens);
    for (int32_t r = 0; bufs && blens && r < world; r++) bufs[r] = msgs[r].data, blens[r] = msgs[r].len;
  }
  rc = dcpi_rt_scatter_bytes(rt, bufs, blens, 0, &j->assignment, &j->assignment_len);
  free(bufs);
  free(blens);
out:
  for (int32_t r = 0; msgs && r < world; r++) dcpi_wbuf_free(&msgs[r]);
  free(msgs);
  return rc;
}

/* ---- plan: the per-rank path --------------------------------------------- */

/* May this save skip the plan gather? Only when every rank's state is
 * made of layout tensors and bytes items (save_layout.h) and no replica
 * check is asked for; the same all-reduce tells whether any rank has a
 * bytes item (else no bytes plan is scattered). */
static dcp_status choose_path(save_job *j) {
  int64_t v[2] = {dcpi_save_layout_eligible(j->st, j->lp) &&
                      !(j->opts.flags & DCP_SAVE_CHECK_REPLICAS),
                  j->st->nbytes ? -1 : 0};
  dcp_status rc = dcpi_rt_allreduce(j->rt, v, 2, DCP_REDUCE_MIN);
  j->per_rank = !rc && v[0] == 1;
  j->any_bytes = !rc && v[1] < 0;
  return rc;
}

/* Rank 0 sends each rank which of its bytes items it writes (and whether
 * the offers were accepted at all: the agreement after says why not). */
static dcp_status scatter_bytes_plan(save_job *j, bool *accepted) {
  dcpi_rt *rt = j->rt;
  int32_t world = rt->ctx->world_size;
  dcpi_wbuf all = {0};
  size_t *at = NULL, *lens = NULL;
  const uint8_t **bufs = NULL;
  if (rt->ctx->rank == 0) {
    at = malloc((size_t)world * sizeof *at), lens = malloc((size_t)world * sizeof *lens);
    bufs = malloc((size_t)world * sizeof *bufs);
    for (int32_t r = 0; at && lens && bufs && r < world; r++) {
      at[r] = all.len;
      dcpi_layout_set_assignment(j->ls, r, &all);
      lens[r] = all.len - at[r];
    }
    if (!at || !lens || !bufs || all.status) {
      free(at), free(lens), free(bufs), dcpi_wbuf_free(&all);
      return dcpi_fail(&rt->err, DCP_ENOMEM, "out of memory for the bytes items' plan");
    }
    for (int32_t r = 0; r < world; r++) bufs[r] = all.data + at[r];
  }
  uint8_t *mine = NULL;
  size_t len = 0;
  dcp_status rc = dcpi_rt_scatter_bytes(rt, bufs, lens, 0, &mine, &len);
  free(at), free(lens), free(bufs), dcpi_wbuf_free(&all);
  if (!rc)
    rc = dcpi_lbytes_parse_assignment(mine, len, j->st->nbytes, accepted, &j->bytes_writes,
                                      &rt->err);
  free(mine);
  return rc;
}

/* The offers (a digest per mesh, the bytes items) gathered at rank 0,
 * which checks that the members of every mesh agree and chooses who
 * writes each replicated bytes item; every rank computes its own writes.
 * Closed by an agreement: a disagreement fails the save on every rank
 * before any write. */
static dcp_status plan_per_rank(save_job *j) {
  dcpi_rt *rt = j->rt;
  const dcpi_save_opts *so = dcpi_local_plan_opts(j->lp);
  dcpi_wbuf offer = {0};
  dcpi_save_layout_offer(j->st, so, &offer);
  dcp_status local = offer.status ? dcpi_fail(&rt->err, offer.status, "out of memory") : DCP_OK;
  uint8_t *all = NULL;
  size_t *lens = NULL;
  dcp_status rc = dcpi_rt_gather_bytes(rt, offer.data, offer.len, 0, &all, &lens);
  dcpi_wbuf_free(&offer);
  if (rc) return rc;
  if (!local && rt->ctx->rank == 0)
    local = dcpi_layout_set_build(all, lens, rt->ctx->world_size, so, &j->ls, &rt->err);
  free(all);
  free(lens);
  bool accepted = true; /* without bytes items, a refusal reaches the others by the agreement */
  if (j->any_bytes && (rc = scatter_bytes_plan(j, &accepted))) return rc;
  if (!accepted && !local) local = DCP_EPEER; /* rank 0 refused: its error wins the agreement */
  dcpi_layout_tensor *lt = local ? NULL : dcpi_save_layout_tensors(j->st);
  if (!local && !lt) local = dcpi_fail(&rt->err, DCP_ENOMEM, "out of memory");
  if (!local)
    local = dcpi_layout_plan_rank(lt, j->st->ntensors, rt->ctx->world_size, rt->ctx->rank, so,
                                  &j->writes, &j->nwrites, &rt->err);
  free(lt);
  return dcpi_rt_agree(rt, local);
}

/* ---- write -------------------------------------------------------------- */

/* Write one assigned piece (a chunk or bytes item; row_bytes: the bytes of
 * a chunk's row, which its blocks align to, 0 for bytes) and record its
 * ref. The data file is created with the first piece: a rank with nothing
 * to write creates none. */
static dcp_status write_piece(save_job *j, uint8_t kind, uint64_t gidx, const void *data,
                              uint64_t len, uint64_t row_bytes, const dcpi_tensor_item *t,
                              dcpi_err *err) {
  dcpi_rt *rt = j->rt;
  if (j->counting) {
    j->prog_total += len;
    return DCP_OK;
  }
  if (!j->writer) {
    char name[DCPI_NAME_MAX];
    dcpi_name_data(name, rt->ctx->rank, 0, j->ident.tag);
    dcp_status rc = dcpi_block_writer_open(rt, name, j->opts.block_size,
                                          j->opts.flags & DCP_SAVE_COMPRESS,
                                          j->opts.zstd_level, &j->writer, err);
    if (rc) return rc;
  }
  dcpi_ref ref;
  dcp_status rc = dcpi_block_writer_put_rows(j->writer, data, len, row_bytes, &ref, err);
  if (rc) return rc;
  if (t) dcpi_commit_put_piece(&j->results, t->fqn, t->fqn_len, gidx, &ref);
  else dcpi_commit_put_result(&j->results, kind, gidx, &ref);
  dcpi_ref_free(&ref);
  rt->ctx->stats.items_written++;
  rt->ctx->stats.data_bytes += len;
  j->prog_done += len;
  dcpi_progress(rt->ctx, DCP_PHASE_SAVE_WRITE, j->prog_done, j->prog_total);
  return j->results.status ? dcpi_fail(err, j->results.status, "out of memory") : DCP_OK;
}

/* Walk the assignment from rank 0 (checked anyway: it crossed a wire). */
static dcp_status write_assigned(save_job *j, dcpi_rbuf *r, dcpi_err *err) {
  const dcp_state *st = j->st;
  uint64_t n, g, local;
  if (!dcpi_r_varint(r, &n)) return dcpi_fail(err, DCP_ECORRUPT, "malformed assignment");
  for (uint64_t k = 0; k < n; k++) {
    dcpi_lp_chunk_view cv;
    uint64_t off = 0, len = 0;
    if (!dcpi_r_varint(r, &g) || !dcpi_r_varint(r, &local) ||
        ((local & 1) && (!dcpi_r_varint(r, &off) || !dcpi_r_varint(r, &len))) ||
        dcpi_local_plan_chunk(j->lp, (size_t)(local >> 1), &cv))
      return dcpi_fail(err, DCP_ECORRUPT, "malformed assignment (chunk %llu)",
                       (unsigned long long)k);
    const dcpi_chunk_item *c = &st->chunks[cv.source];
    if (!(local & 1)) len = (uint64_t)c->nbytes; /* the whole chunk */
    if (off > (uint64_t)c->nbytes || len > (uint64_t)c->nbytes - off)
      return dcpi_fail(err, DCP_ECORRUPT, "malformed assignment (piece %llu+%llu of a "
                       "%lld-byte chunk)", (unsigned long long)off, (unsigned long long)len,
                       (long long)c->nbytes);
    const uint8_t *data = c->data ? (const uint8_t *)c->data + off : NULL;
    dcp_status rc =
        write_piece(j, DCPI_RESULT_CHUNK, g, data, len, dcpi_chunk_row_bytes(c), NULL, err);
    if (rc) return rc;
  }
  if (!dcpi_r_varint(r, &n)) return dcpi_fail(err, DCP_ECORRUPT, "malformed assignment");
  for (uint64_t k = 0; k < n; k++) {
    dcpi_lp_bytes_view bv;
    if (!dcpi_r_varint(r, &g) || !dcpi_r_varint(r, &local) ||
        dcpi_local_plan_bytes(j->lp, (size_t)local, &bv))
      return dcpi_fail(err, DCP_ECORRUPT, "malformed assignment (bytes %llu)",
                       (unsigned long long)k);
    const dcpi_bytes_item *b = &st->bytes[bv.source];
    dcp_status rc = write_piece(j, DCPI_RESULT_BYTES, g, b->data, b->len, 0, NULL, err);
    if (rc) return rc;
  }
  return DCP_OK;
}

/* Whether write w of tensor ti (ndim dims) lies in chunk c: c is ti's
 * and has the write's box (a split piece: but for its first dimension,
 * which the split cuts). */
static bool write_in_chunk(const dcpi_layout_write *w, uint32_t ti, uint32_t ndim,
                           const dcpi_chunk_item *c) {
  if (c->tensor != ti || w->piece_offset > (uint64_t)c->nbytes ||
      (uint64_t)w->nbytes > (uint64_t)c->nbytes - w->piece_offset)
    return false;
  for (uint32_t d = w->npieces > 1 ? 1 : 0; d < ndim; d++)
    if (c->box.offset[d] != w->box[d] || c->box.size[d] != w->box[ndim + d]) return false;
  return true;
}

/* The per-rank path: write the pieces this rank computed. A layout
 * tensor's chunks are its own here (dcpi_save_layout_eligible), added one
 * after the other: one for a sharded tensor, the range's boxes for a flat
 * one; a write names its chunk by `part`. */
static dcp_status write_layout_pieces(save_job *j, dcpi_err *err) {
  const dcp_state *st = j->st;
  size_t *first = malloc((st->ntensors ? st->ntensors : 1) * sizeof *first);
  if (!first) return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  for (size_t t = 0; t < st->ntensors; t++) first[t] = SIZE_MAX;
  for (size_t i = st->nchunks; i-- > 0;) first[st->chunks[i].tensor] = i;
  dcp_status rc = DCP_OK;
  for (size_t k = 0; !rc && k < j->nwrites; k++) {
    const dcpi_layout_write *w = &j->writes[k];
    const dcpi_tensor_item *t = &st->tensors[w->tensor];
    size_t at = first[w->tensor];
    const dcpi_chunk_item *c =
        at != SIZE_MAX && w->part < st->nchunks - at ? &st->chunks[at + w->part] : NULL;
    if (!c || !write_in_chunk(w, w->tensor, t->ndim, c)) {
      rc = dcpi_fail(err, DCP_EINVAL, "tensor '%s': its chunk is not its layout's box", t->fqn);
      break;
    }
    const uint8_t *data = c->data ? (const uint8_t *)c->data + w->piece_offset : NULL;
    uint64_t key = dcpi_layout_piece_key(t->ndim, t->shape, w->box);
    rc = write_piece(j, DCPI_RESULT_PIECE, key, data, (uint64_t)w->nbytes,
                     dcpi_chunk_row_bytes(c), t, err);
  }
  free(first);
  /* bytes items: named by their index in the state, as the offer listed them */
  for (size_t i = 0; !rc && i < st->nbytes; i++)
    if (j->bytes_writes && j->bytes_writes[i])
      rc = write_piece(j, DCPI_RESULT_BYTES, i, st->bytes[i].data, st->bytes[i].len, 0, NULL, err);
  return rc;
}

static dcp_status write_all(save_job *j, dcpi_rbuf *r, dcpi_err *err) {
  return j->per_rank ? write_layout_pieces(j, err) : write_assigned(j, r, err);
}

static bool rt_has_progress(const save_job *j) {
  return j->rt->ctx->phase_progress != NULL;
}

static dcp_status write_data(save_job *j) {
  dcpi_err *err = &j->rt->err;
  dcpi_rbuf r = {j->assignment, j->assignment_len, 0};
  dcp_status rc = DCP_OK;
  if (rt_has_progress(j)) { /* the total first, for the progress reports */
    dcpi_rbuf sizes = r;
    j->counting = true;
    rc = write_all(j, &sizes, err);
    j->counting = false;
  }
  if (!rc) rc = write_all(j, &r, err);
  if (!j->writer) return rc;
  j->file_length = dcpi_block_writer_length(j->writer);
  dcp_status c = dcpi_block_writer_close(j->writer, rc == DCP_OK, rc ? NULL : err);
  j->writer = NULL;
  /* the new file's directory entry is durable before rank 0 can commit:
   * rank 0's directory sync after the commit may not cover it (sharedfs
   * keeps files in fan-out subdirectories) */
  if (!rc && !c) c = dcpi_rt_sync_dir(j->rt, err);
  return rc ? rc : c;
}

/* ---- driver ------------------------------------------------------------- */

static dcp_status run(save_job *j) {
  dcpi_rt *rt = j->rt;
  dcp_stats *stats = &rt->ctx->stats;
  double t = dcpi_now();
  uint64_t coll0 = stats->coll_bytes;
  bool hit = false;
  dcp_status local = DCP_OK;
  /* the same path on every rank: a rank saving elsewhere would leave its
   * data file out of the committed checkpoint (a save that returned OK) */
  int64_t where = (int64_t)(XXH3_64bits(rt->path, strlen(rt->path)) >> 1);
  dcp_status rc = dcpi_rt_agree_value(rt, prepare(j), where, "checkpoint paths");
  if (!rc) rc = learn_identity(j);
  if (!rc) rc = choose_path(j);
  /* a restarted job: its plan may be the one recorded in the directory */
  bool seeded = !rc && !j->per_rank && dcpi_plan_file_seed(rt, j->key, j->plan_enc, j->plan_len);
  if (!rc && j->per_rank) rc = plan_per_rank(j);
  if (!rc && !j->per_rank) rc = try_cache(j, &hit, &local);
  if (!rc && !j->per_rank && !hit) rc = plan(j);
  if (!rc && !j->per_rank && !hit) rc = remember_plan(j);
  /* the replica check is collective: every rank must want it */
  if (!rc) rc = dcpi_rt_agree_value(rt, local, !!(j->opts.flags & DCP_SAVE_CHECK_REPLICAS),
                                    "DCP_SAVE_CHECK_REPLICAS flags");
  if (!rc && (j->opts.flags & DCP_SAVE_CHECK_REPLICAS)) /* before anything is written */
    rc = dcpi_replica_check(rt, j->st, j->lp, j->gp, false, NULL);
  if (!rc) rc = dcpi_rt_agree(rt, remove_in_place(j));
  stats->plan_s = dcpi_now() - t;
  stats->plan_cache_hit = hit;
  stats->save_plan_path = j->per_rank;
  stats->plan_coll_bytes = stats->coll_bytes - coll0;
  if (rc) return rc;
  t = dcpi_now();
  rc = dcpi_rt_agree(rt, write_data(j));
  stats->write_s = dcpi_now() - t;
  if (rc) return rc;
  t = dcpi_now();
  dcpi_wbuf replicas = {0};
  for (size_t b = 0; b < j->st->nbytes; b++) { /* every holder's copy, for rank 0 to compare */
    const dcpi_bytes_item *it = &j->st->bytes[b];
    if (it->scope == DCP_SCOPE_REPLICATED)
      dcpi_commit_put_replica(&replicas, it->key, it->key_len, XXH3_64bits(it->data, it->len));
  }
  dcpi_wbuf layouts = {0};
  dcpi_commit_put_layouts(&layouts, j->st);
  dcpi_commit_args ca = {.gp = j->gp, .ls = j->ls, .opts = &j->opts, .results = &j->results,
                         .replicas = &replicas, .layouts = j->per_rank ? NULL : &layouts,
                         .file_length = j->file_length, .ident = &j->ident,
                         .base = &j->base, .lease = j->lease};
  rc = dcpi_commit(rt, &ca);
  dcpi_wbuf_free(&replicas);
  dcpi_wbuf_free(&layouts);
  /* the plan, for a restarted job's first save (unless it came from there) */
  if (!rc && rt->ctx->rank == 0 && !j->per_rank && !(seeded && hit))
    dcpi_plan_file_write(rt, j->entry);
  stats->commit_s = dcpi_now() - t;
  return rc;
}

dcp_status dcp_save(dcp_ctx *ctx, dcp_state *st, const char *path,
                    const dcp_save_options *opts) {
  return dcpi_save_over(ctx, st, path, opts, NULL);
}

dcp_status dcpi_save_refused(dcp_ctx *ctx, const char *path, dcp_status code, const char *msg) {
  if (!ctx) return DCP_EINVAL;
  dcpi_rt rt;
  dcpi_rt_begin(&rt, ctx, path);
  dcpi_fail(&rt.err, code ? code : DCP_EINVAL, "%s", msg && msg[0] ? msg : dcp_strerror(code));
  if (ctx->comm) dcpi_rt_agree_value(&rt, rt.err.code, 0, "checkpoint paths"); /* as run's */
  return dcpi_rt_end(&rt);
}

dcp_status dcpi_save_over(dcp_ctx *ctx, dcp_state *st, const char *path,
                          const dcp_save_options *opts, const dcpi_base *expected) {
  if (!ctx) return DCP_EINVAL;
  dcpi_rt rt;
  dcpi_rt_begin(&rt, ctx, path);
  save_job j = {.rt = &rt, .st = st, .expected = expected};
  dcp_status rc = DCP_OK;
  if (!st || st->ctx != ctx)
    rc = dcpi_fail(&rt.err, DCP_EINVAL, "save: the state is NULL or from another context");
  else if (!path || !*path)
    rc = dcpi_fail(&rt.err, DCP_EINVAL, "save: empty checkpoint path");
  else
    rc = dcpi_save_options_effective(opts, &j.opts, &rt.err);
  if (!ctx->comm) {
    /* a detached rank: the "none" coordination, <rank>.metadata */
    if (!rc && (j.opts.flags & DCP_SAVE_CHECK_REPLICAS))
      dcpi_fail(&rt.err, DCP_EINVAL, "save: DCP_SAVE_CHECK_REPLICAS needs a collective");
    else if (!rc) dcpi_local_save(&rt, st, &j.opts, expected);
    return dcpi_rt_end(&rt);
  }
  /* Bad arguments on one rank still go through an agreement, so the other
   * ranks fail too instead of waiting for this one: run's first one, so
   * the collectives match (a plain dcpi_rt_agree sent 8 bytes where the
   * others' sent 24: the file collective reported mismatched arguments
   * instead of the reason, MPI would abort) */
  rc = rc ? dcpi_rt_agree_value(&rt, rc, 0, "checkpoint paths") : run(&j);
  (void)rc;
  job_free(&j);
  return dcpi_rt_end(&rt);
}

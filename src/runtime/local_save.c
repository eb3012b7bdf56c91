/* local_save.c — the "none" coordination: a save by a rank that has no
 * collective (a detached rank of a world of more than one, e.g. a writer
 * process told not to talk to its peers). It writes its own data file and
 * its own part of the checkpoint (parts.h), with no cross-rank traffic at
 * all; dcp_load merges the parts of the newest save that every rank of
 * its world has committed (merge.c).
 *
 * Without communication the ranks cannot make a save's identity together,
 * so the caller names the save (dcp_save_options.save_id, the same on every
 * rank): parts with the same id and world are one save. A rank keeps its
 * part of the newest complete save until a newer one is complete, so a
 * rank that dies before its turn leaves the previous checkpoint loadable.
 *
 * There is no global dedup, except where layouts make it free: a chunk
 * added with a layout is written by one member of its replica group only,
 * chosen from the fqn so that every rank picks the same one and the writes
 * spread over the replicas. Chunks added by hand are written by every rank
 * that holds them (the merge keeps one copy after checking that the copies
 * agree), and so are REPLICATED bytes items. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/strmap.h"
#include "metadata/meta.h"
#include "model/layout.h"
#include "model/state.h"
#include "runtime/files.h"
#include "runtime/lease.h"
#include "runtime/local_save.h"
#include "runtime/parts.h"
#include "runtime/replace.h"

/* Whether this rank writes chunk c: yes, unless its tensor came with a
 * layout and another member of its replica group is the designated one.
 * Members outside the world (a mesh may name more ranks than saved) are
 * not candidates: nobody would write for them. */
static bool writes_chunk(const dcp_state *st, const dcpi_chunk_item *c) {
  const dcpi_tensor_item *t = &st->tensors[c->tensor];
  if (!t->layout) return true;
  size_t n = 0;
  if (dcp_layout_replica_group(t->layout, st->rank, NULL, 0, &n) || n <= 1) return true;
  int32_t *group = malloc(n * sizeof *group);
  if (!group || dcp_layout_replica_group(t->layout, st->rank, group, n, &n)) {
    free(group);
    return true; /* when in doubt, write: the merge drops duplicates */
  }
  size_t live = 0;
  for (size_t k = 0; k < n; k++)
    if (group[k] >= 0 && group[k] < st->world_size) group[live++] = group[k];
  int32_t writer = live ? group[dcpi_hash_bytes(t->fqn, t->fqn_len) % live] : st->rank;
  free(group);
  return writer == st->rank;
}

/* One rank's save of its part. */
typedef struct part_job {
  dcpi_rt *rt;
  const dcp_state *st;
  const dcp_save_options *o;
  dcpi_identity ident;      /* generation: the part's seq on this rank */
  char data[DCPI_NAME_MAX]; /* the part's data file */
  char part[DCPI_NAME_MAX]; /* the part itself */
  dcpi_lease *lease;
  const dcpi_base *expected;
} part_job;

/* A committed coordinated checkpoint cannot be replaced without
 * coordination; this rank's committed part is refused unless overwriting.
 * Sets the new part's seq (one past this rank's newest). */
static dcp_status guard(part_job *j, dcpi_err *err) {
  dcpi_rt *rt = j->rt;
  uint64_t size;
  dcpi_err probe;
  if (dcpi_rt_file_size(rt, DCPI_METADATA_NAME, &size, &probe) == DCP_OK)
    return dcpi_fail(err, DCP_EEXIST,
                     "a coordinated checkpoint is committed at %s; a save without a "
                     "collective cannot replace it safely (remove it or save elsewhere)",
                     rt->path);
  dcpi_parts p;
  dcp_status rc = dcpi_parts_scan(rt, &p, err);
  if (rc) return rc;
  uint64_t newest = dcpi_parts_max_seq(&p, j->st->rank);
  char legacy[DCPI_NAME_MAX];
  snprintf(legacy, sizeof legacy, DCPI_RANK_METADATA_FMT, (int)j->st->rank);
  bool mine = newest || (p.legacy && dcpi_rt_file_size(rt, legacy, &size, &probe) == DCP_OK);
  dcpi_parts_free(&p);
  if (j->expected && j->expected->rank_seq != newest)
    return dcpi_fail(err, DCP_ESTALE,
                     "rank %d committed another part at %s after this async save started "
                     "(part %llu, then %llu); this older save is not committed",
                     (int)j->st->rank, rt->path, (unsigned long long)j->expected->rank_seq,
                     (unsigned long long)newest);
  if (mine && !(j->o->flags & DCP_SAVE_OVERWRITE))
    return dcpi_fail(err, DCP_EEXIST,
                     "rank %d's part of a checkpoint is committed at %s (set "
                     "DCP_SAVE_OVERWRITE to replace it)", (int)j->st->rank, rt->path);
  j->ident.generation = newest + 1;
  return DCP_OK;
}

/* Write st's pieces into the rank's data file, recording them in md. */
static dcp_status write_pieces(part_job *j, dcpi_md *md, const uint32_t *tid, dcpi_err *err) {
  dcpi_rt *rt = j->rt;
  const dcp_state *st = j->st;
  const dcp_save_options *o = j->o;
  const char *name = j->data;
  dcpi_block_writer *w = NULL;
  uint32_t file = 0;
  dcp_status rc = DCP_OK;
  for (size_t i = 0; !rc && i < st->nchunks + st->nbytes; i++) {
    const dcpi_chunk_item *c = i < st->nchunks ? &st->chunks[i] : NULL;
    const dcpi_bytes_item *b = c ? NULL : &st->bytes[i - st->nchunks];
    if (c && (c->nbytes == 0 || !writes_chunk(st, c))) continue;
    if (!w && !(rc = dcpi_md_add_file(md, name, &file, err)))
      rc = dcpi_block_writer_open(rt, name, o->block_size, o->flags & DCP_SAVE_COMPRESS,
                                 o->zstd_level, &w, err);
    dcpi_ref ref = {0};
    if (!rc)
      rc = dcpi_block_writer_put_rows(w, c ? c->data : b->data, c ? (uint64_t)c->nbytes : b->len,
                                     c ? dcpi_chunk_row_bytes(c) : 0, &ref, err);
    dcp_storage_ref sr = {.file = file, .codec = ref.codec, .block_size = ref.block_size,
                          .offset = ref.offset, .stored_length = ref.stored_length,
                          .raw_length = ref.raw_length, .block_count = ref.block_count,
                          .block_checksums = ref.checksums, .block_stored_lengths = ref.stored_lens};
    if (!rc && c) rc = dcpi_md_add_chunk(md, tid[c->tensor], c->box.offset, c->box.size, &sr, err);
    if (!rc && b)
      rc = dcpi_md_add_bytes(md, b->key, b->scope, b->scope == DCP_SCOPE_PER_RANK ? st->rank : -1,
                            &sr, err);
    if (!rc) rt->ctx->stats.items_written++, rt->ctx->stats.data_bytes += sr.raw_length;
    dcpi_ref_free(&ref);
  }
  if (w) {
    dcp_status l = dcpi_md_set_file_length(md, file, dcpi_block_writer_length(w), err);
    dcp_status c = dcpi_block_writer_close(w, rc == DCP_OK, rc ? NULL : err);
    if (!rc) rc = l;
    if (!rc) rc = c;
    /* the data file's directory entry is durable before <rank>.metadata
     * names it */
    if (!rc) rc = dcpi_rt_sync_dir(rt, err);
  }
  return rc;
}

static dcp_status build_and_write(part_job *j, dcpi_err *err) {
  dcpi_rt *rt = j->rt;
  const dcp_state *st = j->st;
  const dcp_save_options *o = j->o;
  dcpi_md *md;
  dcp_status rc = dcpi_md_create(&md);
  if (rc) return dcpi_fail(err, rc, "out of memory for metadata");
  uint32_t *tid = malloc((st->ntensors ? st->ntensors : 1) * sizeof *tid);
  if (!tid) rc = dcpi_fail(err, DCP_ENOMEM, "out of memory");
  if (!rc) rc = dcpi_md_set_world(md, st->world_size, err);
  if (!rc) rc = dcpi_md_set_identity(md, j->ident.id, j->ident.generation, st->rank, err);
  for (size_t t = 0; !rc && t < st->ntensors; t++)
    rc = dcpi_md_add_tensor(md, st->tensors[t].fqn, st->tensors[t].dtype, st->tensors[t].ndim,
                           st->tensors[t].shape, -1, NULL, &tid[t], err);
  for (size_t k = 0; !rc && k < o->nkv; k++) rc = dcpi_md_add_kv(md, o->kv_keys[k], o->kv_values[k], err);
  double t0 = dcpi_now();
  if (!rc) rc = write_pieces(j, md, tid, err);
  rt->ctx->stats.write_s = dcpi_now() - t0;
  void *enc = NULL;
  size_t len = 0;
  t0 = dcpi_now();
  if (!rc) rc = dcpi_md_encode(md, &enc, &len, err);
  char tmp[DCPI_NAME_MAX + 8];
  snprintf(tmp, sizeof tmp, "%s.tmp", j->part);
  if (!rc) rc = dcpi_lease_check(j->lease, err);
  uint64_t size;
  dcpi_err probe;
  if (!rc && dcpi_rt_file_size(rt, DCPI_METADATA_NAME, &size, &probe) == DCP_OK)
    rc = dcpi_fail(err, DCP_ESTALE,
                  "a coordinated checkpoint was committed at %s while rank %d's part was "
                  "written; the part is not committed", rt->path, (int)st->rank);
  if (!rc) rc = dcpi_rt_write_file_atomic(rt, j->part, tmp, enc, len, err);
  rt->ctx->stats.commit_s = dcpi_now() - t0;
  free(enc);
  free(tid);
  dcpi_md_free(md);
  return rc;
}

/* Remove a part (first: it un-commits) and then its data file. */
static void remove_part(dcpi_rt *rt, const dcpi_part *pt) {
  char name[DCPI_NAME_MAX];
  dcpi_err ignored;
  dcpi_name_part(name, pt->rank, pt->world, pt->seq, pt->tag);
  dcpi_rt_remove(rt, name, &ignored);
  dcpi_name_data(name, pt->rank, pt->seq, pt->tag);
  dcpi_rt_remove(rt, name, &ignored);
}

/* This rank's files of 0.2 (<rank>.metadata, data-<rank>.dcp, temporaries). */
static void remove_legacy(dcpi_rt *rt, int32_t rank) {
  char name[DCPI_NAME_MAX];
  dcpi_err ignored;
  snprintf(name, sizeof name, DCPI_RANK_METADATA_FMT, (int)rank);
  dcpi_rt_remove(rt, name, &ignored);
  snprintf(name, sizeof name, DCPI_RANK_METADATA_FMT ".tmp", (int)rank);
  dcpi_rt_remove(rt, name, &ignored);
  snprintf(name, sizeof name, DCPI_DATA_FILE_FMT, (int)rank);
  dcpi_rt_remove(rt, name, &ignored);
}

/* This rank's files a listing finds that belong to neither of two parts
 * (seq, tag): parts, their data files and temporaries (of a part whose
 * write died, or an older part under a reused save_id). */
typedef struct sweep {
  int32_t rank;
  uint64_t seq[2];
  const char *tag[2];
  char **names;
  size_t n, cap;
} sweep;

static int sweep_collect(void *arg, const char *name) {
  sweep *sw = arg;
  dcpi_file_name fn;
  dcpi_file_kind k = dcpi_name_parse(name, &fn);
  bool mine = (k == DCPI_FILE_PART || k == DCPI_FILE_TMP || (k == DCPI_FILE_DATA && fn.seq)) &&
              fn.rank == sw->rank && fn.seq;
  for (int i = 0; mine && i < 2; i++)
    if (sw->tag[i] && fn.seq == sw->seq[i] && strcmp(fn.tag, sw->tag[i]) == 0) mine = false;
  if (!mine) return 0;
  if (DCPI_RESERVE(sw->names, sw->cap, sw->n + 1)) return DCP_ENOMEM;
  return (sw->names[sw->n] = strdup(name)) ? (sw->n++, 0) : DCP_ENOMEM;
}

static void sweep_own(dcpi_rt *rt, sweep *sw) {
  dcpi_err ignored;
  if (dcpi_rt_list(rt, sweep_collect, sw, &ignored) == DCP_OK)
    for (size_t i = 0; i < sw->n; i++) dcpi_rt_remove(rt, sw->names[i], &ignored);
  for (size_t i = 0; i < sw->n; i++) free(sw->names[i]);
  free(sw->names);
}

/* After this rank committed its part: keep its new part and its part of
 * the newest complete save; remove its other files. Rank 0 also removes
 * every part of saves older than the newest complete one (those of ranks
 * that no longer exist, after a smaller world saved). Best effort. */
static void clean_up(part_job *j) {
  dcpi_rt *rt = j->rt;
  int32_t rank = j->st->rank;
  dcpi_parts p;
  dcpi_err ignored;
  if (dcpi_parts_scan(rt, &p, &ignored)) return;
  const dcpi_part_save *keep = dcpi_parts_newest_complete(&p, rank);
  const dcpi_part *kept = keep ? dcpi_parts_of_rank(keep, rank) : NULL;
  sweep sw = {.rank = rank, .seq = {j->ident.generation, kept ? kept->seq : 0},
              .tag = {j->ident.tag, kept ? kept->tag : NULL}};
  sweep_own(rt, &sw);
  for (size_t i = 0; i < p.nsaves; i++) {
    const dcpi_part_save *sv = &p.saves[i];
    if (sv == keep) continue;
    const dcpi_part *mine = dcpi_parts_of_rank(sv, rank);
    /* rank 0 orders saves by its own parts: one it took part in before
     * the newest complete one is superseded on every rank */
    if (rank == 0 && kept && mine && mine->seq < kept->seq)
      for (size_t k = 0; k < sv->n; k++)
        if (sv->parts[k].rank != rank) remove_part(rt, &sv->parts[k]);
  }
  if (keep) remove_legacy(rt, rank);
  dcpi_parts_free(&p);
}

/* Remove every file of this rank's earlier parts before an in-place
 * overwrite (the checkpoint is not loadable until every rank saved). */
static dcp_status remove_own(part_job *j, dcpi_err *err) {
  dcpi_parts p;
  dcp_status rc = dcpi_parts_scan(j->rt, &p, err);
  if (rc) return rc;
  for (size_t i = 0; i < p.nall; i++)
    if (p.all[i].rank == j->st->rank) remove_part(j->rt, &p.all[i]);
  dcpi_parts_free(&p);
  remove_legacy(j->rt, j->st->rank);
  return dcpi_rt_sync_dir(j->rt, err);
}

dcp_status dcpi_local_save(dcpi_rt *rt, const dcp_state *st, const dcp_save_options *o,
                           const dcpi_base *expected) {
  dcpi_err *err = &rt->err;
  part_job j = {.rt = rt, .st = st, .o = o, .expected = expected};
  if (!o->save_id)
    return dcpi_fail(err, DCP_EINVAL,
                     "a save without a collective (rank %d of %d) needs save options' save_id: "
                     "the same on every rank of one save, different between saves (e.g. the "
                     "step), so that a load never mixes the ranks' parts of two saves",
                     (int)st->rank, (int)st->world_size);
  dcpi_save_id_of_tag(o->save_id, st->world_size, j.ident.id);
  dcpi_tag_of(j.ident.id, j.ident.tag);
  char lease[DCPI_NAME_MAX];
  dcpi_name_rank_lease(lease, st->rank);
  dcp_status rc = dcpi_rt_open_storage(rt, DCP_STORAGE_CREATE);
  if (!rc) rc = dcpi_lease_acquire(rt, lease, rt->ctx->lease_ms, &j.lease, err);
  if (!rc) rc = guard(&j, err);
  if (!rc && (o->flags & DCP_SAVE_OVERWRITE) && (o->flags & DCP_SAVE_IN_PLACE))
    rc = remove_own(&j, err);
  dcpi_name_data(j.data, st->rank, j.ident.generation, j.ident.tag);
  dcpi_name_part(j.part, st->rank, st->world_size, j.ident.generation, j.ident.tag);
  if (!rc) rc = build_and_write(&j, err);
  if (!rc) clean_up(&j);
  dcpi_lease_release(j.lease);
  return rc;
}

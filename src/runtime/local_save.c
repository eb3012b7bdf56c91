/* local_save.c — the "none" coordination: a save by a rank that has no
 * collective (a detached rank of a world of more than one, e.g. a writer
 * process told not to talk to its peers). It writes its own data file and
 * its own metadata, `<rank>.metadata`, with no cross-rank traffic at all;
 * dcp_load merges the per-rank metadata of a world (merge.c).
 *
 * Without communication there is no global dedup, except where layouts
 * make it free: a chunk added with a layout is written by one member of its
 * replica group only, chosen from the fqn so that every rank picks the same
 * one and the writes spread over the replicas. Chunks added by hand are
 * written by every rank that holds them (the merge keeps one copy), and so
 * are REPLICATED bytes items. A rank's metadata is committed atomically,
 * but there is no commit of the whole: the checkpoint is complete when
 * every rank of the world has committed its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strmap.h"
#include "metadata/meta.h"
#include "model/layout.h"
#include "model/state.h"
#include "runtime/commit.h"
#include "runtime/local_save.h"

/* Whether this rank writes chunk c: yes, unless its tensor came with a
 * layout and another member of its replica group is the designated one. */
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
  int32_t writer = group[dcpi_hash_bytes(t->fqn, t->fqn_len) % n];
  free(group);
  return writer == st->rank;
}

/* A committed <rank>.metadata is refused (or removed first when
 * overwriting); a coordinated checkpoint here cannot be replaced safely
 * without coordination, so it is always refused. */
static dcp_status guard(dcpi_rt *rt, const char *own, bool overwrite, dcpi_err *err) {
  uint64_t size;
  dcpi_err probe;
  if (dcpi_rt_file_size(rt, DCPI_METADATA_NAME, &size, &probe) == DCP_OK)
    return dcpi_fail(err, DCP_EEXIST,
                     "a coordinated checkpoint is committed at %s; a save without a "
                     "collective cannot replace it safely (remove it or save elsewhere)",
                     rt->path);
  dcp_status s = dcpi_rt_file_size(rt, own, &size, &probe);
  if (s == DCP_ENOTFOUND) return DCP_OK;
  if (s) return dcpi_fail(err, s, "%s", probe.msg);
  if (!overwrite)
    return dcpi_fail(err, DCP_EEXIST,
                     "%s is committed at %s (set DCP_SAVE_OVERWRITE to replace it)", own,
                     rt->path);
  if ((s = dcpi_rt_remove(rt, own, err))) return s;
  return dcpi_rt_sync_dir(rt, err);
}

/* Write st's pieces into the rank's data file, recording them in md. */
static dcp_status write_pieces(dcpi_rt *rt, const dcp_state *st, const dcp_save_options *o,
                               dcpi_md *md, const uint32_t *tid, dcpi_err *err) {
  char name[64];
  snprintf(name, sizeof name, DCPI_DATA_FILE_FMT, st->rank);
  dcpi_block_writer *w = NULL;
  uint32_t file = 0;
  dcp_status s = DCP_OK;
  for (size_t i = 0; !s && i < st->nchunks + st->nbytes; i++) {
    const dcpi_chunk_item *c = i < st->nchunks ? &st->chunks[i] : NULL;
    const dcpi_bytes_item *b = c ? NULL : &st->bytes[i - st->nchunks];
    if (c && (c->nbytes == 0 || !writes_chunk(st, c))) continue;
    if (!w && !(s = dcpi_md_add_file(md, name, &file, err)))
      s = dcpi_block_writer_open(rt, name, o->block_size, o->flags & DCP_SAVE_COMPRESS,
                                 o->zstd_level, &w, err);
    dcpi_ref ref = {0};
    if (!s) s = dcpi_block_writer_put(w, c ? c->data : b->data, c ? (uint64_t)c->nbytes : b->len,
                                      &ref, err);
    dcp_storage_ref sr = {.file = file, .codec = ref.codec, .block_size = ref.block_size,
                          .offset = ref.offset, .stored_length = ref.stored_length,
                          .raw_length = ref.raw_length, .block_count = ref.block_count,
                          .block_checksums = ref.checksums, .block_stored_lengths = ref.stored_lens};
    if (!s && c) s = dcpi_md_add_chunk(md, tid[c->tensor], c->box.offset, c->box.size, &sr, err);
    if (!s && b)
      s = dcpi_md_add_bytes(md, b->key, b->scope, b->scope == DCP_SCOPE_PER_RANK ? st->rank : -1,
                            &sr, err);
    if (!s) rt->ctx->stats.items_written++, rt->ctx->stats.data_bytes += sr.raw_length;
    dcpi_ref_free(&ref);
  }
  if (w) {
    dcp_status c = dcpi_block_writer_close(w, s == DCP_OK, s ? NULL : err);
    if (!s) s = c;
    /* the data file's directory entry is durable before <rank>.metadata
     * names it */
    if (!s) s = dcpi_rt_sync_dir(rt, err);
  }
  return s;
}

static dcp_status build_and_write(dcpi_rt *rt, const dcp_state *st, const dcp_save_options *o,
                                  const char *own, dcpi_err *err) {
  dcpi_md *md;
  dcp_status s = dcpi_md_create(&md);
  if (s) return dcpi_fail(err, s, "out of memory for metadata");
  uint32_t *tid = malloc((st->ntensors ? st->ntensors : 1) * sizeof *tid);
  if (!tid) s = dcpi_fail(err, DCP_ENOMEM, "out of memory");
  if (!s) s = dcpi_md_set_world(md, st->world_size, err);
  for (size_t t = 0; !s && t < st->ntensors; t++)
    s = dcpi_md_add_tensor(md, st->tensors[t].fqn, st->tensors[t].dtype, st->tensors[t].ndim,
                           st->tensors[t].shape, -1, NULL, &tid[t], err);
  for (size_t k = 0; !s && k < o->nkv; k++) s = dcpi_md_add_kv(md, o->kv_keys[k], o->kv_values[k], err);
  double t0 = dcpi_now();
  if (!s) s = write_pieces(rt, st, o, md, tid, err);
  rt->ctx->stats.write_s = dcpi_now() - t0;
  void *enc = NULL;
  size_t len = 0;
  t0 = dcpi_now();
  if (!s) s = dcpi_md_encode(md, &enc, &len, err);
  char tmp[96];
  snprintf(tmp, sizeof tmp, "%s.tmp", own);
  if (!s) s = dcpi_rt_write_file_atomic(rt, own, tmp, enc, len, err);
  rt->ctx->stats.commit_s = dcpi_now() - t0;
  free(enc);
  free(tid);
  dcpi_md_free(md);
  return s;
}

dcp_status dcpi_local_save(dcpi_rt *rt, const dcp_state *st, const dcp_save_options *o) {
  char own[64];
  snprintf(own, sizeof own, DCPI_RANK_METADATA_FMT, st->rank);
  dcp_status s = dcpi_rt_open_storage(rt, DCP_STORAGE_CREATE);
  if (!s) s = guard(rt, own, o->flags & DCP_SAVE_OVERWRITE, &rt->err);
  if (!s) s = build_and_write(rt, st, o, own, &rt->err);
  return s;
}

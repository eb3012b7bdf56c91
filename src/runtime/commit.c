/* commit.c — from write results to a committed .metadata. */
#include "runtime/commit.h"
#include "metadata/codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metadata/meta.h"

void dcpi_commit_put_result(dcpi_wbuf *out, uint8_t kind, uint64_t gidx, const dcpi_ref *ref) {
  dcpi_w_u8(out, kind);
  dcpi_w_varint(out, gidx);
  dcpi_w_varint(out, ref->offset);
  dcpi_w_varint(out, ref->stored_length);
  dcpi_w_varint(out, ref->raw_length);
  dcpi_w_u8(out, (uint8_t)ref->codec);
  dcpi_w_varint(out, ref->block_size);
  dcpi_w_varint(out, ref->block_count);
  for (uint64_t b = 0; b < ref->block_count; b++) dcpi_w_u64(out, ref->checksums[b]);
  if (dcpi_codec_zstd(ref->codec))
    for (uint64_t b = 0; b < ref->block_count; b++) dcpi_w_varint(out, ref->stored_lens[b]);
}

/* One decoded result; its arrays point into scratch vectors. */
typedef struct result {
  uint8_t kind;
  uint64_t gidx;
  dcp_storage_ref ref;
} result;

typedef struct scratch {
  uint64_t *cks, *lens;
  size_t cap;
} scratch;

/* Decode the next result of rank `rank` (a peer's message: trust nothing). */
static dcp_status next_result(dcpi_rbuf *r, int32_t rank, scratch *sc, result *out,
                              dcpi_err *err) {
  uint64_t v[6];
  uint8_t codec;
  if (!dcpi_r_u8(r, &out->kind) || !dcpi_r_varint(r, &out->gidx) || !dcpi_r_varint(r, &v[0]) ||
      !dcpi_r_varint(r, &v[1]) || !dcpi_r_varint(r, &v[2]) || !dcpi_r_u8(r, &codec) ||
      !dcpi_r_varint(r, &v[3]) || !dcpi_r_varint(r, &v[4]) || !dcpi_codec_known(codec) ||
      v[3] == 0 || v[3] > UINT32_MAX || v[4] > dcpi_r_left(r) / 8)
    return dcpi_fail(err, DCP_ECORRUPT, "malformed write results from rank %d", rank);
  size_t n = (size_t)v[4];
  if (n > sc->cap) {
    uint64_t *c = realloc(sc->cks, n * sizeof *c), *l = c ? realloc(sc->lens, n * sizeof *l) : NULL;
    if (c) sc->cks = c;
    if (l) sc->lens = l;
    if (!c || !l) return dcpi_fail(err, DCP_ENOMEM, "out of memory for write results");
    sc->cap = n;
  }
  for (size_t b = 0; b < n; b++)
    if (!dcpi_r_u64(r, &sc->cks[b]))
      return dcpi_fail(err, DCP_ECORRUPT, "malformed write results from rank %d", rank);
  for (size_t b = 0; dcpi_codec_zstd(codec) && b < n; b++)
    if (!dcpi_r_varint(r, &sc->lens[b]))
      return dcpi_fail(err, DCP_ECORRUPT, "malformed write results from rank %d", rank);
  out->ref = (dcp_storage_ref){.codec = (dcp_codec)codec, .block_size = (uint32_t)v[3],
                               .offset = v[0], .stored_length = v[1], .raw_length = v[2],
                               .block_count = n, .block_checksums = sc->cks,
                               .block_stored_lengths = dcpi_codec_zstd(codec) ? sc->lens : NULL};
  return DCP_OK;
}

/* Record one rank's results in md: its data file, and every piece. */
static dcp_status add_rank(dcpi_md *md, const dcpi_global_plan *gp, int32_t rank,
                           const uint8_t *msg, size_t len, uint8_t *seen_items,
                           uint8_t *seen_bytes, scratch *sc, dcpi_err *err) {
  if (!len) return DCP_OK;
  char name[64];
  snprintf(name, sizeof name, DCPI_DATA_FILE_FMT, rank);
  uint32_t file;
  dcp_status s = dcpi_md_add_file(md, name, &file, err);
  dcpi_rbuf r = {msg, len, 0};
  while (!s && dcpi_r_left(&r)) {
    result res;
    if ((s = next_result(&r, rank, sc, &res, err))) break;
    res.ref.file = file;
    if (res.kind == DCPI_RESULT_CHUNK && res.gidx < dcpi_global_plan_item_count(gp) &&
        !seen_items[res.gidx]) {
      dcpi_gp_item it;
      dcpi_global_plan_item(gp, (size_t)res.gidx, &it);
      seen_items[res.gidx] = 1;
      s = dcpi_md_add_chunk(md, it.tensor, it.offset, it.size, &res.ref, err);
    } else if (res.kind == DCPI_RESULT_BYTES && res.gidx < dcpi_global_plan_bytes_count(gp) &&
               !seen_bytes[res.gidx]) {
      dcpi_gp_bytes b;
      dcpi_global_plan_bytes(gp, (size_t)res.gidx, &b);
      seen_bytes[res.gidx] = 1;
      s = dcpi_md_add_bytes(md, b.key, b.scope, b.rank, &res.ref, err);
    } else {
      s = dcpi_fail(err, DCP_ECORRUPT, "rank %d reported an unknown or repeated piece", rank);
    }
  }
  return s;
}

static dcp_status check_all_written(const uint8_t *seen, size_t n, const char *what,
                                    dcpi_err *err) {
  for (size_t i = 0; i < n; i++)
    if (!seen[i]) return dcpi_fail(err, DCP_EPEER, "%s %zu of the plan was not written", what, i);
  return DCP_OK;
}

/* Rank 0: the metadata of this save. */
static dcp_status build(dcpi_md *md, const dcpi_global_plan *gp, const dcp_save_options *opts,
                        const uint8_t *all, const size_t *lens, int32_t world, dcpi_err *err) {
  dcp_status s = dcpi_md_set_world(md, world, err);
  size_t nt = dcpi_global_plan_tensor_count(gp);
  for (size_t t = 0; t < nt && !s; t++) {
    dcpi_gp_tensor gt;
    dcpi_global_plan_tensor(gp, t, &gt);
    s = dcpi_md_add_tensor(md, gt.fqn, gt.dtype, gt.ndim, gt.shape, -1, NULL, NULL, err);
  }
  for (size_t k = 0; k < opts->nkv && !s; k++)
    s = dcpi_md_add_kv(md, opts->kv_keys[k], opts->kv_values[k], err);
  size_t ni = dcpi_global_plan_item_count(gp), nb = dcpi_global_plan_bytes_count(gp);
  uint8_t *seen_items = calloc(ni ? ni : 1, 1), *seen_bytes = calloc(nb ? nb : 1, 1);
  scratch sc = {0};
  if (!s && (!seen_items || !seen_bytes)) s = dcpi_fail(err, DCP_ENOMEM, "out of memory");
  size_t at = 0;
  for (int32_t r = 0; r < world && !s; at += lens[r], r++)
    s = add_rank(md, gp, r, all + at, lens[r], seen_items, seen_bytes, &sc, err);
  if (!s) s = check_all_written(seen_items, ni, "write item", err);
  if (!s) s = check_all_written(seen_bytes, nb, "bytes item", err);
  free(seen_items), free(seen_bytes), free(sc.cks), free(sc.lens);
  return s;
}

/* Files a save makes and may leave behind when it fails: data files and
 * the metadata temporary. */
static bool is_ours(const char *name) {
  int rank, end = 0;
  if (strcmp(name, DCPI_METADATA_TMP) == 0) return true;
  if (sscanf(name, "%d.metadata%n", &rank, &end) == 1 && name[end] == '\0' && rank >= 0)
    return true; /* per-rank metadata of an earlier uncoordinated save */
  end = 0;
  return sscanf(name, "data-%d.dcp%n", &rank, &end) == 1 && name[end] == '\0' && rank >= 0;
}

typedef struct cleanup {
  char **names;
  size_t n, cap;
} cleanup;

static int collect(void *arg, const char *name) {
  cleanup *c = arg;
  if (!is_ours(name)) return 0;
  if (c->n == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 16;
    char **p = realloc(c->names, cap * sizeof *p);
    if (!p) return DCP_ENOMEM;
    c->names = p, c->cap = cap;
  }
  return (c->names[c->n] = strdup(name)) ? (c->n++, 0) : DCP_ENOMEM;
}

/* Rank 0, after the commit: remove data files the new metadata does not
 * reference (from earlier saves that failed). Best effort: the checkpoint
 * is already committed, so a failure here is not an error of the save. */
static void remove_leftovers(dcpi_rt *rt, const size_t *lens, int32_t world) {
  cleanup c = {0};
  dcpi_err ignored;
  if (dcpi_rt_list(rt, collect, &c, &ignored) == DCP_OK)
    for (size_t i = 0; i < c.n; i++) {
      int rank = -1;
      bool keep = strncmp(c.names[i], "data-", 5) == 0 &&
                  sscanf(c.names[i], "data-%d.dcp", &rank) == 1 && rank < world && lens[rank];
      if (!keep) dcpi_rt_remove(rt, c.names[i], &ignored);
    }
  for (size_t i = 0; i < c.n; i++) free(c.names[i]);
  free(c.names);
}

static dcp_status write_metadata(dcpi_rt *rt, const dcpi_global_plan *gp,
                                 const dcp_save_options *opts, const uint8_t *all,
                                 const size_t *lens) {
  dcpi_md *md;
  void *enc = NULL;
  size_t enc_len = 0;
  dcp_status s = dcpi_md_create(&md);
  if (s) return dcpi_fail(&rt->err, s, "out of memory for metadata");
  s = build(md, gp, opts, all, lens, rt->ctx->world_size, &rt->err);
  if (!s) s = dcpi_md_encode(md, &enc, &enc_len, &rt->err);
  dcpi_md_free(md);
  if (!s)
    s = dcpi_rt_write_file_atomic(rt, DCPI_METADATA_NAME, DCPI_METADATA_TMP, enc, enc_len,
                                  &rt->err);
  free(enc);
  if (!s) remove_leftovers(rt, lens, rt->ctx->world_size);
  return s;
}

dcp_status dcpi_commit(dcpi_rt *rt, const dcpi_global_plan *gp, const dcp_save_options *opts,
                       const dcpi_wbuf *results) {
  uint8_t *all = NULL;
  size_t *lens = NULL;
  if (results->status)
    return dcpi_rt_agree(rt, dcpi_fail(&rt->err, results->status, "out of memory"));
  dcp_status s = dcpi_rt_gather_bytes(rt, results->data, results->len, 0, &all, &lens);
  if (s) return s;
  if (rt->ctx->rank == 0) s = write_metadata(rt, gp, opts, all, lens);
  free(all);
  free(lens);
  return dcpi_rt_agree(rt, s);
}

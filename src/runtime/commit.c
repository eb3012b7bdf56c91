/* commit.c — from write results to a committed .metadata. */
#include "runtime/commit.h"
#include "metadata/codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/strmap.h"
#include "metadata/meta.h"
#include "runtime/replace.h"
#include "runtime/save_layout.h"

static void put_ref(dcpi_wbuf *out, uint64_t gidx, const dcpi_ref *ref) {
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

void dcpi_commit_put_result(dcpi_wbuf *out, uint8_t kind, uint64_t gidx, const dcpi_ref *ref) {
  dcpi_w_u8(out, kind);
  put_ref(out, gidx, ref);
}

void dcpi_commit_put_piece(dcpi_wbuf *out, const char *fqn, size_t fqn_len, uint64_t key,
                           const dcpi_ref *ref) {
  dcpi_w_u8(out, DCPI_RESULT_PIECE);
  dcpi_w_varint(out, fqn_len);
  dcpi_w_bytes(out, fqn, fqn_len);
  put_ref(out, key, ref);
}

void dcpi_commit_put_replica(dcpi_wbuf *out, const char *key, size_t key_len, uint64_t hash) {
  dcpi_w_u8(out, DCPI_RESULT_REPLICA);
  dcpi_w_varint(out, key_len);
  dcpi_w_bytes(out, key, key_len);
  dcpi_w_u64(out, hash);
}

/* Rank 0: the first copy seen of every REPLICATED bytes item. */
typedef struct replica {
  uint64_t hash;
  int32_t rank;
} replica;

typedef struct replicas {
  dcpi_strmap first; /* key → index into copies; keys point into the messages */
  replica *copies;
  size_t n, cap;
} replicas;

static void replicas_free(replicas *rp) {
  dcpi_strmap_free(&rp->first);
  free(rp->copies);
}

/* Record rank's copy of the item named by the next record of r (its kind
 * byte read); a copy that differs from the first is DCP_ESCOPE. */
static dcp_status add_replica(replicas *rp, dcpi_rbuf *r, int32_t rank, dcpi_err *err) {
  uint64_t len, hash;
  if (!dcpi_r_varint(r, &len) || len > dcpi_r_left(r) || len == 0)
    return dcpi_fail(err, DCP_ECORRUPT, "malformed write results from rank %d", rank);
  const char *key = (const char *)r->p + r->pos;
  r->pos += (size_t)len;
  if (!dcpi_r_u64(r, &hash))
    return dcpi_fail(err, DCP_ECORRUPT, "malformed write results from rank %d", rank);
  uint32_t at;
  if (dcpi_strmap_get(&rp->first, key, (size_t)len, &at)) {
    if (rp->copies[at].hash == hash) return DCP_OK;
    return dcpi_fail(err, DCP_ESCOPE,
                     "replicated bytes item '%.*s' differs between rank %d and rank %d: a "
                     "REPLICATED item must be the same on every rank that saves it (this save "
                     "is not committed)", (int)(len > 200 ? 200 : len), key, (int)rp->copies[at].rank,
                     (int)rank);
  }
  if (DCPI_RESERVE(rp->copies, rp->cap, rp->n + 1) ||
      dcpi_strmap_put(&rp->first, key, (size_t)len, (uint32_t)rp->n, NULL) < 0)
    return dcpi_fail(err, DCP_ENOMEM, "out of memory for replicated items");
  rp->copies[rp->n++] = (replica){hash, rank};
  return DCP_OK;
}

/* One decoded result; its arrays point into scratch vectors. */
typedef struct result {
  uint8_t kind;
  const char *fqn; /* DCPI_RESULT_PIECE: into the message */
  size_t fqn_len;
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
  if (!dcpi_r_u8(r, &out->kind))
    return dcpi_fail(err, DCP_ECORRUPT, "malformed write results from rank %d", rank);
  if (out->kind == DCPI_RESULT_PIECE) {
    if (!dcpi_r_varint(r, &v[0]) || v[0] == 0 || v[0] > DCP_MAX_NAME || v[0] > dcpi_r_left(r))
      return dcpi_fail(err, DCP_ECORRUPT, "malformed write results from rank %d", rank);
    out->fqn = (const char *)r->p + r->pos, out->fqn_len = (size_t)v[0];
    r->pos += (size_t)v[0];
  }
  if (!dcpi_r_varint(r, &out->gidx) || !dcpi_r_varint(r, &v[0]) ||
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
static dcp_status add_rank(dcpi_md *md, const dcpi_commit_args *a, int32_t world, int32_t rank,
                           const uint8_t *msg, size_t len, uint8_t *seen_items,
                           uint8_t *seen_bytes, scratch *sc, replicas *rp, dcpi_err *err) {
  const dcpi_global_plan *gp = a->gp;
  const char *tag = a->ident->tag;
  dcpi_rbuf r = {msg, len, 0};
  uint64_t file_length;
  uint8_t kind;
  if (!dcpi_r_varint(&r, &file_length))
    return dcpi_fail(err, DCP_ECORRUPT, "malformed write results from rank %d", rank);
  dcp_status rc = DCP_OK;
  /* the copies of replicated items this rank holds come first, then the
   * layouts it sends */
  while (!rc && dcpi_r_left(&r) && r.p[r.pos] == DCPI_RESULT_REPLICA) {
    dcpi_r_u8(&r, &kind);
    rc = add_replica(rp, &r, rank, err);
  }
  while (!rc && dcpi_r_left(&r) && r.p[r.pos] == DCPI_RESULT_LAYOUT) {
    dcpi_r_u8(&r, &kind);
    rc = dcpi_commit_take_layout(md, &r, rank, world, err);
  }
  if (rc || !dcpi_r_left(&r)) return rc; /* wrote nothing: no data file */
  char name[DCPI_NAME_MAX];
  dcpi_name_data(name, rank, 0, tag);
  uint32_t file;
  rc = dcpi_md_add_file(md, name, &file, err);
  if (!rc) rc = dcpi_md_set_file_length(md, file, file_length, err);
  while (!rc && dcpi_r_left(&r)) {
    result res;
    if ((rc = next_result(&r, rank, sc, &res, err))) break;
    res.ref.file = file;
    if (a->ls && res.kind == DCPI_RESULT_PIECE) {
      rc = dcpi_layout_set_take(a->ls, md, rank, res.fqn, res.fqn_len, res.gidx, &res.ref, err);
    } else if (a->ls && res.kind == DCPI_RESULT_BYTES) {
      rc = dcpi_layout_set_take_bytes(a->ls, md, rank, res.gidx, &res.ref, err);
    } else if (!gp) {
      rc = dcpi_fail(err, DCP_ECORRUPT, "rank %d reported an unknown or repeated piece", rank);
    } else if (res.kind == DCPI_RESULT_CHUNK && res.gidx < dcpi_global_plan_item_count(gp) &&
        !seen_items[res.gidx]) {
      dcpi_gp_item it;
      dcpi_global_plan_item(gp, (size_t)res.gidx, &it);
      seen_items[res.gidx] = 1;
      rc = dcpi_md_add_chunk(md, it.tensor, it.offset, it.size, &res.ref, err);
    } else if (res.kind == DCPI_RESULT_BYTES && res.gidx < dcpi_global_plan_bytes_count(gp) &&
               !seen_bytes[res.gidx]) {
      dcpi_gp_bytes b;
      dcpi_global_plan_bytes(gp, (size_t)res.gidx, &b);
      seen_bytes[res.gidx] = 1;
      rc = dcpi_md_add_bytes(md, b.key, b.scope, b.rank, &res.ref, err);
    } else {
      rc = dcpi_fail(err, DCP_ECORRUPT, "rank %d reported an unknown or repeated piece", rank);
    }
  }
  return rc;
}

static dcp_status check_all_written(const uint8_t *seen, size_t n, const char *what,
                                    dcpi_err *err) {
  for (size_t i = 0; i < n; i++)
    if (!seen[i]) return dcpi_fail(err, DCP_EPEER, "%s %zu of the plan was not written", what, i);
  return DCP_OK;
}

/* Rank 0: the metadata of this save. */
static dcp_status build(dcpi_md *md, const dcpi_commit_args *a, const uint8_t *all,
                        const size_t *lens, int32_t world, dcpi_err *err) {
  const dcpi_global_plan *gp = a->gp;
  const dcp_save_options *opts = a->opts;
  dcp_status rc = dcpi_md_set_world(md, world, err);
  if (!rc) rc = dcpi_md_set_identity(md, a->ident->id, a->ident->generation, -1, err);
  size_t nt = gp ? dcpi_global_plan_tensor_count(gp) : 0;
  if (!rc && a->ls) rc = dcpi_layout_set_add_tensors(a->ls, md, err);
  for (size_t t = 0; t < nt && !rc; t++) {
    dcpi_gp_tensor gt;
    dcpi_global_plan_tensor(gp, t, &gt);
    uint32_t tid = 0;
    rc = dcpi_md_add_tensor(md, gt.fqn, gt.dtype, gt.ndim, gt.shape, -1, NULL, &tid, err);
    /* its chunks are the plan's items: room for them at once */
    if (!rc) rc = dcpi_md_reserve_chunks(md, tid, gt.nitems, err);
  }
  for (size_t k = 0; k < opts->nkv && !rc; k++)
    rc = dcpi_md_add_kv(md, opts->kv_keys[k], opts->kv_values[k], err);
  size_t ni = gp ? dcpi_global_plan_item_count(gp) : 0;
  size_t nb = gp ? dcpi_global_plan_bytes_count(gp) : 0;
  uint8_t *seen_items = calloc(ni ? ni : 1, 1), *seen_bytes = calloc(nb ? nb : 1, 1);
  scratch sc = {0};
  replicas rp = {0};
  if (!rc && (!seen_items || !seen_bytes)) rc = dcpi_fail(err, DCP_ENOMEM, "out of memory");
  size_t at = 0;
  for (int32_t r = 0; r < world && !rc; at += lens[r], r++)
    rc = add_rank(md, a, world, r, all + at, lens[r], seen_items, seen_bytes, &sc, &rp, err);
  replicas_free(&rp);
  if (!rc) rc = check_all_written(seen_items, ni, "write item", err);
  if (!rc) rc = check_all_written(seen_bytes, nb, "bytes item", err);
  if (!rc && a->ls) rc = dcpi_layout_set_complete(a->ls, err);
  free(seen_items), free(seen_bytes), free(sc.cks), free(sc.lens);
  return rc;
}

/* Rank 0: may this save commit? Only while it holds the directory's lease
 * and the directory still holds the checkpoint the save started over. */
static dcp_status may_commit(dcpi_rt *rt, const dcpi_commit_args *a) {
  dcp_status rc = dcpi_lease_check(a->lease, &rt->err);
  return rc ? rc : dcpi_base_unchanged(rt, a->base, &rt->err);
}

static dcp_status write_metadata(dcpi_rt *rt, const dcpi_commit_args *a, const uint8_t *all,
                                 const size_t *lens) {
  dcpi_md *md;
  void *enc = NULL;
  size_t enc_len = 0;
  dcp_status rc = dcpi_md_create(&md);
  if (rc) return dcpi_fail(&rt->err, rc, "out of memory for metadata");
  rc = build(md, a, all, lens, rt->ctx->world_size, &rt->err);
  if (!rc) rc = dcpi_md_encode(md, &enc, &enc_len, &rt->err);
  dcpi_md_free(md);
  if (!rc) rc = may_commit(rt, a);
  char tmp[DCPI_NAME_MAX];
  dcpi_name_metadata_tmp(tmp, a->ident->tag);
  if (!rc) rc = dcpi_rt_write_file_atomic(rt, DCPI_METADATA_NAME, tmp, enc, enc_len, &rt->err);
  free(enc);
  if (!rc) dcpi_remove_other_saves(rt, a->ident->tag);
  return rc;
}

dcp_status dcpi_commit(dcpi_rt *rt, const dcpi_commit_args *a) {
  uint8_t *all = NULL;
  size_t *lens = NULL;
  dcpi_wbuf msg = {0};
  dcpi_w_varint(&msg, a->file_length);
  dcpi_w_bytes(&msg, a->replicas->data, a->replicas->len);
  if (a->layouts) dcpi_w_bytes(&msg, a->layouts->data, a->layouts->len);
  dcpi_w_bytes(&msg, a->results->data, a->results->len);
  dcp_status status = a->results->status                 ? a->results->status
                      : a->replicas->status               ? a->replicas->status
                      : a->layouts && a->layouts->status ? a->layouts->status
                                                          : msg.status;
  if (status) {
    dcpi_wbuf_free(&msg);
    return dcpi_rt_agree(rt, dcpi_fail(&rt->err, status, "out of memory"));
  }
  dcp_status rc = dcpi_rt_gather_bytes(rt, msg.data, msg.len, 0, &all, &lens);
  dcpi_wbuf_free(&msg);
  if (rc) return rc;
  if (rt->ctx->rank == 0) rc = write_metadata(rt, a, all, lens);
  free(all);
  free(lens);
  return dcpi_rt_agree(rt, rc);
}

/* merge.c — one metadata from the parts of a save made without a
 * collective (local_save.c, parts.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/strmap.h"
#include "metadata/meta.h"
#include "metadata/view.h"
#include "runtime/files.h"
#include "runtime/local_save.h"
#include "runtime/parts.h"

typedef struct tensor_form {
  dcp_dtype dtype;
  uint32_t ndim;
  int64_t shape[DCP_MAX_NDIM];
} tensor_form;

/* What the first copy of a replicated chunk or REPLICATED bytes item looked
 * like, so a later rank's copy can be compared with it without reading any
 * data. */
typedef struct rep_sig {
  int32_t rank;
  uint64_t raw_length;
  uint32_t block_size;
  dcp_codec codec;
  uint64_t checksums; /* hash of the block checksums */
} rep_sig;

typedef struct merger {
  dcpi_md *md;
  tensor_form *forms; /* by merged tensor id */
  size_t nforms, forms_cap;
  dcpi_strmap tensors; /* fqn → merged tensor id */
  dcpi_strmap seen;    /* chunk (tensor id + box) → index into sigs */
  char **keys;         /* owned key bytes behind `seen` */
  size_t nkeys, keys_cap;
  dcpi_strmap reps;    /* replicated bytes key → index into sigs */
  rep_sig *sigs;
  size_t nsigs, sigs_cap;
  dcpi_err *err;
} merger;

static void merger_free(merger *g) {
  dcpi_md_free(g->md);
  free(g->forms);
  dcpi_strmap_free(&g->tensors);
  dcpi_strmap_free(&g->seen);
  dcpi_strmap_free(&g->reps);
  free(g->sigs);
  for (size_t i = 0; i < g->nkeys; i++) free(g->keys[i]);
  free(g->keys);
}

/* A copy of key owned by the merger (the maps borrow their keys). */
static const char *own(merger *g, const void *key, size_t len) {
  char *copy = malloc(len ? len : 1);
  if (!copy || DCPI_RESERVE(g->keys, g->keys_cap, g->nkeys + 1)) {
    free(copy);
    return NULL;
  }
  memcpy(copy, key, len);
  return g->keys[g->nkeys++] = copy;
}

/* The signature of a stored copy as rank r saved it: what two copies of
 * one value must share (their block checksums, at the same coding). */
static rep_sig ref_signature(const dcp_storage_ref *ref, int32_t r) {
  size_t n = (size_t)ref->block_count;
  uint64_t h = n ? dcpi_hash_bytes(ref->block_checksums, n * sizeof(uint64_t)) : 0;
  return (rep_sig){r, ref->raw_length, ref->block_size, ref->codec, h};
}

/* Whether two copies are known to differ. Copies stored with another block
 * size or codec cannot be compared from their checksums; a job saves every
 * rank with the same options, so that does not happen within one save. */
static bool sigs_differ(const rep_sig *a, const rep_sig *b) {
  return a->raw_length != b->raw_length ||
         (a->block_size == b->block_size && a->codec == b->codec && a->checksums != b->checksums);
}

/* Record sig under key: 0 for the first copy, else 1 with *first set to
 * the first copy's signature; < 0 on error. */
static int seen_before(merger *g, dcpi_strmap *map, const void *key, size_t len,
                       const rep_sig *sig, const rep_sig **first) {
  uint32_t v;
  if (dcpi_strmap_get(map, key, len, &v)) {
    *first = &g->sigs[v];
    return 1;
  }
  const char *k = own(g, key, len);
  if (!k || DCPI_RESERVE(g->sigs, g->sigs_cap, g->nsigs + 1) ||
      dcpi_strmap_put(map, k, len, (uint32_t)g->nsigs, NULL) < 0)
    return DCP_ENOMEM;
  g->sigs[g->nsigs++] = *sig;
  return 0;
}

static dcp_status read_named(dcpi_rt *rt, const char *name, dcp_meta **out, dcpi_err *err) {
  uint8_t *data = NULL;
  size_t len = 0;
  dcp_status rc = dcpi_rt_read_file(rt, name, &data, &len, err);
  if (!rc && (rc = dcp_meta_open_memory(rt->ctx, data, len, out)))
    dcpi_fail(err, rc, "%s/%s: %s", rt->path, name, dcp_ctx_last_error(rt->ctx));
  /* a merge reads every list of the part: check the whole file first, as
   * opening it did before format version 4 */
  dcpi_err whole;
  if (!rc && (rc = dcpi_meta_check_whole(*out, &whole))) {
    dcpi_fail(err, rc, "%s/%s: %s", rt->path, name, whole.msg);
    dcp_meta_free(*out);
    *out = NULL;
  }
  free(data);
  return rc;
}

/* The merged id of tensor ti of rank r's view, adding it on first sight;
 * every rank must describe it alike. */
static dcp_status merged_tensor(merger *g, dcp_meta *m, size_t ti, int32_t r, uint32_t *tid) {
  dcp_tensor_info info;
  dcp_meta_tensor(m, ti, &info);
  size_t len = strlen(info.fqn);
  if (dcpi_strmap_get(&g->tensors, info.fqn, len, tid)) {
    const tensor_form *f = &g->forms[*tid];
    if (f->dtype != info.dtype || f->ndim != info.ndim ||
        memcmp(f->shape, info.shape, info.ndim * sizeof *info.shape))
      return dcpi_fail(g->err, DCP_ECORRUPT,
                       "rank %d's metadata disagrees with an earlier rank on tensor '%s' "
                       "(dtype or shape)", r, info.fqn);
    return DCP_OK;
  }
  dcp_status rc = dcpi_md_add_tensor(g->md, info.fqn, info.dtype, info.ndim, info.shape, -1, NULL,
                                    tid, g->err);
  if (rc) return rc;
  const char *key = own(g, info.fqn, len);
  if (!key || DCPI_RESERVE(g->forms, g->forms_cap, (size_t)*tid + 1) ||
      dcpi_strmap_put(&g->tensors, key, len, *tid, NULL) < 0)
    return dcpi_fail(g->err, DCP_ENOMEM, "out of memory");
  tensor_form *f = &g->forms[*tid];
  *f = (tensor_form){.dtype = info.dtype, .ndim = info.ndim};
  memcpy(f->shape, info.shape, info.ndim * sizeof *info.shape);
  if (*tid >= g->nforms) g->nforms = (size_t)*tid + 1;
  return DCP_OK;
}

static dcp_status add_chunks(merger *g, dcp_meta *m, int32_t r, const uint32_t *file_map) {
  for (size_t ti = 0; ti < dcp_meta_tensor_count(m); ti++) {
    uint32_t tid;
    dcp_status s = merged_tensor(g, m, ti, r, &tid);
    dcp_tensor_info info;
    dcp_meta_tensor(m, ti, &info);
    for (uint64_t c = 0; !s && c < info.chunk_count; c++) {
      dcp_chunk_info ci;
      if ((s = dcp_meta_chunk(m, ti, (size_t)c, &ci)))
        return dcpi_fail(g->err, s, "rank %d's metadata, tensor '%s': chunk list unreadable", r,
                         info.fqn);
      int64_t key[1 + 2 * DCP_MAX_NDIM] = {tid};
      memcpy(key + 1, ci.box.offset, info.ndim * sizeof(int64_t));
      memcpy(key + 1 + info.ndim, ci.box.size, info.ndim * sizeof(int64_t));
      rep_sig sig = ref_signature(&ci.ref, r);
      const rep_sig *first = NULL;
      int rc = seen_before(g, &g->seen, key, (1 + 2 * (size_t)info.ndim) * sizeof(int64_t), &sig,
                           &first);
      if (rc < 0) return dcpi_fail(g->err, DCP_ENOMEM, "out of memory");
      if (rc && sigs_differ(first, &sig))
        return dcpi_fail(g->err, DCP_EMISMATCH,
                         "tensor '%s': the copies of one chunk saved by rank %d and rank %d "
                         "differ (replicas must hold the same values; keeping either would be "
                         "a silent choice)", info.fqn, (int)first->rank, (int)r);
      if (rc) continue; /* a replica another rank wrote too */
      ci.ref.file = file_map[ci.ref.file];
      s = dcpi_md_add_chunk(g->md, tid, ci.box.offset, ci.box.size, &ci.ref, g->err);
    }
    if (s) return s;
  }
  return DCP_OK;
}

/* 1 when rank r's copy of the REPLICATED item bi is one a rank before it
 * already contributed (and is then dropped), 0 for the first copy, < 0 on
 * error. Copies must agree: a different length, or different block
 * checksums at the same coding, is DCP_ESCOPE — the ranks did not hold
 * one value, and keeping either would be a silent choice. */
static int replicated_seen(merger *g, const dcp_bytes_info *bi, int32_t r) {
  rep_sig now = ref_signature(&bi->ref, r);
  const rep_sig *first = NULL;
  int rc = seen_before(g, &g->reps, bi->key, strlen(bi->key), &now, &first);
  if (rc < 0) return dcpi_fail(g->err, DCP_ENOMEM, "out of memory");
  if (rc && sigs_differ(first, &now))
    return dcpi_fail(g->err, DCP_ESCOPE,
                     "replicated bytes item '%s' differs between rank %d's metadata and rank "
                     "%d's (%llu and %llu bytes%s): a REPLICATED item must be the same on "
                     "every rank that saves it", bi->key, (int)first->rank, (int)r,
                     (unsigned long long)first->raw_length, (unsigned long long)now.raw_length,
                     first->raw_length == now.raw_length ? ", different contents" : "");
  return rc;
}

static dcp_status add_bytes(merger *g, dcp_meta *m, int32_t r, const uint32_t *file_map) {
  for (size_t i = 0; i < dcp_meta_bytes_count(m); i++) {
    dcp_bytes_info bi;
    dcp_meta_bytes(m, i, &bi);
    if (bi.scope == DCP_SCOPE_PER_RANK && bi.rank != r)
      return dcpi_fail(g->err, DCP_ECORRUPT,
                       "rank %d's metadata holds per-rank bytes item '%s' of rank %d (a rank's "
                       "metadata may only hold its own)", (int)r, bi.key, (int)bi.rank);
    if (bi.scope == DCP_SCOPE_REPLICATED) {
      int rc = replicated_seen(g, &bi, r);
      if (rc < 0) return (dcp_status)rc;
      if (rc) continue;
    }
    bi.ref.file = file_map[bi.ref.file];
    dcp_status s = dcpi_md_add_bytes(g->md, bi.key, bi.scope, bi.rank, &bi.ref, g->err);
    if (s == DCP_ESCOPE)
      return dcpi_fail(g->err, s, "bytes item '%s' is REPLICATED in one rank's metadata and "
                       "PER_RANK in another's (rank %d's)", bi.key, (int)r);
    if (s) return s;
  }
  return DCP_OK;
}

/* Add rank r's data file names; a name another rank's metadata already
 * claimed means two ranks' files describe the same data (a copied or
 * duplicated <rank>.metadata). */
static dcp_status add_files(merger *g, dcp_meta *m, int32_t r, uint32_t *file_map) {
  for (size_t f = 0; f < dcp_meta_file_count(m); f++) {
    const char *name;
    dcp_meta_file(m, f, &name);
    uint64_t length = 0;
    dcp_status rc = dcpi_md_add_file(g->md, name, &file_map[f], g->err);
    if (!rc && dcp_meta_file_length(m, f, &length) == DCP_OK)
      rc = dcpi_md_set_file_length(g->md, file_map[f], length, g->err);
    if (rc == DCP_EEXIST)
      return dcpi_fail(g->err, DCP_ECORRUPT,
                       "rank %d's metadata names data file '%s', which an earlier rank's "
                       "metadata names too (a duplicated or copied <rank>.metadata?)", (int)r,
                       name);
    if (rc) return rc;
  }
  return DCP_OK;
}

/* Fold rank r's view into the merged metadata. */
static dcp_status add_rank(merger *g, dcp_meta *m, int32_t r, int32_t world) {
  if (dcp_meta_world_size(m) != world)
    return dcpi_fail(g->err, DCP_ECORRUPT,
                     "rank %d's metadata names a world of %d, rank 0's %d (per-rank metadata "
                     "of different saves are mixed)", r, dcp_meta_world_size(m), world);
  size_t nf = dcp_meta_file_count(m);
  uint32_t *file_map = malloc((nf ? nf : 1) * sizeof *file_map);
  if (!file_map) return dcpi_fail(g->err, DCP_ENOMEM, "out of memory");
  dcp_status rc = add_files(g, m, r, file_map);
  if (!rc) rc = add_chunks(g, m, r, file_map);
  if (!rc) rc = add_bytes(g, m, r, file_map);
  for (size_t k = 0; !rc && r == 0 && k < dcp_meta_kv_count(m); k++) {
    const char *key, *value;
    dcp_meta_kv(m, k, &key, &value);
    rc = dcpi_md_add_kv(g->md, key, value, g->err);
  }
  free(file_map);
  return rc;
}

/* ---- 0.2 per-rank metadata (<rank>.metadata) ----------------------------- */

static dcp_status read_legacy(dcpi_rt *rt, int32_t rank, dcp_meta **out, dcpi_err *err) {
  char name[DCPI_NAME_MAX];
  snprintf(name, sizeof name, DCPI_RANK_METADATA_FMT, rank);
  return read_named(rt, name, out, err);
}

/* Fail when <world>.metadata exists: a rank outside the world rank 0's
 * metadata names has committed, so the files come from saves of different
 * worlds and no merge of them is the checkpoint anyone saved. */
static dcp_status check_no_extra(dcpi_rt *rt, int32_t world, dcpi_err *err) {
  char name[64];
  uint64_t size;
  dcpi_err probe;
  snprintf(name, sizeof name, DCPI_RANK_METADATA_FMT, world);
  dcp_status rc = dcpi_rt_file_size(rt, name, &size, &probe);
  if (rc == DCP_ENOTFOUND) return DCP_OK;
  if (rc) return dcpi_fail(err, rc, "%s", probe.msg);
  return dcpi_fail(err, DCP_ECORRUPT,
                   "%s holds %s, but rank 0's metadata names a world of %d: per-rank metadata "
                   "of saves with different world sizes are mixed (remove the stale files)",
                   rt->path, name, world);
}

/* Fail with the ranks (a few) whose metadata is missing, if any. The scan
 * stops at the ninth missing rank: a hostile or damaged 0.metadata may
 * name a world of 2^31-1, and probing every rank of it would take hours. */
static dcp_status check_complete(dcpi_rt *rt, int32_t world, dcpi_err *err) {
  char missing[256] = "";
  int32_t n = 0;
  for (int32_t r = 1; r < world && n <= 8; r++) {
    char name[64];
    uint64_t size;
    dcpi_err probe;
    snprintf(name, sizeof name, DCPI_RANK_METADATA_FMT, r);
    dcp_status rc = dcpi_rt_file_size(rt, name, &size, &probe);
    if (rc && rc != DCP_ENOTFOUND) return dcpi_fail(err, rc, "%s", probe.msg);
    if (rc == DCP_ENOTFOUND && n++ < 8)
      snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%d", n > 1 ? ", " : "",
               r);
  }
  if (!n) return check_no_extra(rt, world, err);
  return dcpi_fail(err, DCP_EINCOMPLETE,
                   "%s holds per-rank metadata of a world of %d, but %s%d rank(s) have not "
                   "committed (%s%s): the checkpoint is incomplete",
                   rt->path, world, n > 8 ? "at least " : "", n, missing, n > 8 ? ", ..." : "");
}

static dcp_status merge_legacy(dcpi_rt *rt, uint8_t **data, size_t *len, dcpi_err *err) {
  merger g = {.err = err};
  dcp_meta *m0 = NULL;
  dcp_status rc = read_legacy(rt, 0, &m0, err);
  if (rc) return rc;
  int32_t world = dcp_meta_world_size(m0);
  rc = check_complete(rt, world, err);
  if (!rc && (rc = dcpi_md_create(&g.md))) dcpi_fail(err, rc, "out of memory");
  if (!rc) rc = dcpi_md_set_world(g.md, world, err);
  if (!rc) rc = add_rank(&g, m0, 0, world);
  dcp_meta_free(m0);
  for (int32_t r = 1; !rc && r < world; r++) {
    dcp_meta *m;
    if ((rc = read_legacy(rt, r, &m, err))) break;
    rc = add_rank(&g, m, r, world);
    dcp_meta_free(m);
  }
  void *enc = NULL;
  if (!rc) rc = dcpi_md_encode(g.md, &enc, len, err);
  merger_free(&g);
  *data = enc;
  return rc;
}

/* ---- parts ------------------------------------------------------------- */

/* Fail unless m is, by its save section, the part pt's name says. */
static dcp_status check_part(const dcpi_rt *rt, dcp_meta *m, const dcpi_part *pt,
                             const char *name, dcpi_err *err) {
  dcp_save_identity id;
  char tag[DCPI_TAG_LEN + 1] = "";
  if (dcp_meta_identity(m, &id) == DCP_OK) dcpi_tag_of(id.id, tag);
  if (dcp_meta_world_size(m) != pt->world || id.part_rank != pt->rank ||
      id.generation != pt->seq || strcmp(tag, pt->tag) != 0)
    return dcpi_fail(err, DCP_ECORRUPT,
                     "%s/%s is not the part its name says (it records rank %d of a world of "
                     "%d, save %s, generation %llu): a renamed or copied part", rt->path, name,
                     (int)id.part_rank, (int)dcp_meta_world_size(m), tag[0] ? tag : "none",
                     (unsigned long long)id.generation);
  return DCP_OK;
}

/* Why nothing loads: the newest save's missing ranks (a few). */
static dcp_status incomplete(dcpi_rt *rt, const dcpi_parts *p, dcpi_err *err) {
  const dcpi_part_save *sv = NULL;
  uint64_t best = 0;
  for (size_t i = 0; i < p->nsaves; i++)
    for (size_t k = 0; k < p->saves[i].n; k++)
      if (p->saves[i].parts[k].seq >= best) best = p->saves[i].parts[k].seq, sv = &p->saves[i];
  char missing[160] = "";
  int32_t n = 0, world = sv->parts[0].world;
  for (int32_t r = 0; r < world && n <= 8; r++)
    if (!dcpi_parts_of_rank(sv, r) && n++ < 8)
      snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%d",
               n > 1 ? ", " : "", (int)r);
  return dcpi_fail(err, DCP_EINCOMPLETE,
                   "%s holds no complete checkpoint: no save without a collective has been "
                   "committed by every rank of its world: the newest, save %s of a world of "
                   "%d, lacks the parts of %d rank(s) (%s%s)", rt->path, sv->parts[0].tag,
                   (int)world, (int)(world - (int32_t)sv->n), missing, n > 8 ? ", ..." : "");
}

static dcp_status merge_parts(dcpi_rt *rt, const dcpi_part_save *sv, uint8_t **data, size_t *len,
                              dcpi_err *err) {
  merger g = {.err = err};
  int32_t world = sv->parts[0].world;
  dcp_status rc = dcpi_md_create(&g.md);
  if (rc) dcpi_fail(err, rc, "out of memory");
  if (!rc) rc = dcpi_md_set_world(g.md, world, err);
  for (size_t k = 0; !rc && k < sv->n; k++) {
    const dcpi_part *pt = &sv->parts[k];
    char name[DCPI_NAME_MAX];
    dcpi_name_part(name, pt->rank, pt->world, pt->seq, pt->tag);
    dcp_meta *m = NULL;
    rc = read_named(rt, name, &m, err);
    if (rc == DCP_ENOTFOUND) /* removed since the listing: a newer save completed */
      rt->data_file_gone = 1;
    if (!rc) rc = check_part(rt, m, pt, name, err);
    dcp_save_identity id;
    if (!rc && k == 0 && dcp_meta_identity(m, &id) == DCP_OK) /* the merged view is rank 0's save */
      rc = dcpi_md_set_identity(g.md, id.id, id.generation, -1, err);
    if (!rc) rc = add_rank(&g, m, pt->rank, world);
    dcp_meta_free(m);
  }
  void *enc = NULL;
  if (!rc) rc = dcpi_md_encode(g.md, &enc, len, err);
  merger_free(&g);
  *data = enc;
  return rc;
}

dcp_status dcpi_merge_rank_metadata(dcpi_rt *rt, uint8_t **data, size_t *len, dcpi_err *err) {
  dcpi_parts p;
  *data = NULL;
  dcp_status rc = dcpi_parts_scan(rt, &p, err);
  if (rc) return rc;
  const dcpi_part_save *sv = dcpi_parts_newest_complete(&p, 0);
  if (sv) rc = merge_parts(rt, sv, data, len, err);
  else if (p.legacy) rc = merge_legacy(rt, data, len, err);
  else if (p.nsaves) rc = incomplete(rt, &p, err);
  else rc = dcpi_fail(err, DCP_ENOTFOUND, "%s holds no checkpoint", rt->path);
  dcpi_parts_free(&p);
  return rc;
}

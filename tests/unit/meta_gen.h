/* meta_gen.h — random metadata models for the metadata codec tests.
 *
 * A g_model is the expected content (what was added); g_build adds it to a
 * dcpi_md, optionally in a shuffled order. Header-only (static inline) so
 * each test_meta_*.c can include it without a shared library. */
#ifndef DCP_TEST_META_GEN_H
#define DCP_TEST_META_GEN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "base/wire.h"
#include "metadata/format.h"
#include "metadata/meta.h"
#include "meta_reseal.h"
#include "testutil.h"

#define G_MAXT 24 /* tensors */
#define G_MAXC 81 /* chunks per tensor (3^4 grid) */
#define G_MAXB 16 /* bytes items */
#define G_MAXK 8  /* key/values */
#define G_MAXF 6  /* files */
#define G_MAXM 3  /* meshes */
#define G_MAXBLK 4 /* blocks per ref */

typedef struct g_ref {
  dcp_storage_ref ref; /* arrays point at cks / lens below */
  uint64_t cks[G_MAXBLK], lens[G_MAXBLK];
} g_ref;

typedef struct g_chunk {
  int64_t off[4], size[4];
  g_ref r;
} g_chunk;

typedef struct g_tensor {
  char fqn[40];
  dcp_dtype dt;
  uint32_t ndim;
  int64_t shape[4];
  int32_t mesh;
  uint32_t map[4];
  size_t nchunks;
  g_chunk chunks[G_MAXC];
} g_tensor;

typedef struct g_bytes {
  char key[24];
  dcp_scope scope;
  int32_t rank;
  g_ref r;
} g_bytes;

typedef struct g_model {
  int32_t world;
  size_t nfiles;
  char files[G_MAXF][32];
  size_t nmeshes;
  uint32_t mesh_ndim[G_MAXM];
  int64_t mesh_shape[G_MAXM][3];
  int32_t mesh_ranks[G_MAXM][27];
  size_t nt;
  g_tensor t[G_MAXT];
  size_t nb;
  g_bytes b[G_MAXB];
  size_t nk;
  char kkey[G_MAXK][24], kval[G_MAXK][40];
} g_model;

/* Fill r with a consistent random ref of raw bytes into one of nfiles. */
static inline void g_make_ref(tu_rng *rng, g_ref *r, uint64_t raw, size_t nfiles) {
  dcp_storage_ref *f = &r->ref;
  memset(f, 0, sizeof *f);
  f->file = (uint32_t)tu_rng_range(rng, 0, (int64_t)nfiles - 1);
  static const dcp_codec codecs[3] = {DCP_CODEC_NONE, DCP_CODEC_ZSTD, DCP_CODEC_ZSTD_CHECKED};
  f->codec = codecs[tu_rng_range(rng, 0, 2)];
  uint64_t nb = (uint64_t)tu_rng_range(rng, 1, G_MAXBLK);
  f->block_size = raw ? (uint32_t)((raw + nb - 1) / nb) : (uint32_t)tu_rng_range(rng, 1, 64);
  if (tu_rng_range(rng, 0, 3) == 0) f->block_size = (uint32_t)tu_rng_range(rng, 1, 1 << 20);
  if (f->block_size < raw / G_MAXBLK + 1 && raw) f->block_size = (uint32_t)(raw / G_MAXBLK + 1);
  f->raw_length = raw;
  f->block_count = raw ? (raw - 1) / f->block_size + 1 : 0;
  f->offset = (uint64_t)tu_rng_range(rng, 0, tu_rng_range(rng, 0, 1) ? 1000 : (1ll << 40));
  uint64_t stored = 0;
  for (uint64_t b = 0; b < f->block_count; b++) {
    uint64_t braw = b + 1 < f->block_count ? f->block_size : raw - b * f->block_size;
    r->cks[b] = tu_rng_next(rng);
    r->lens[b] = (uint64_t)tu_rng_range(rng, 1, (int64_t)braw);
    stored += f->codec != DCP_CODEC_NONE ? r->lens[b] : braw;
  }
  f->stored_length = stored;
  f->block_checksums = r->cks;
  f->block_stored_lengths = f->codec != DCP_CODEC_NONE ? r->lens : NULL;
}

/* Random meshes over a world of 64 ranks. */
static inline void g_make_meshes(tu_rng *rng, g_model *m) {
  m->world = 64;
  m->nmeshes = (size_t)tu_rng_range(rng, 0, G_MAXM);
  for (size_t i = 0; i < m->nmeshes; i++) {
    m->mesh_ndim[i] = (uint32_t)tu_rng_range(rng, 1, 3);
    int64_t n = 1;
    for (uint32_t d = 0; d < m->mesh_ndim[i]; d++) {
      m->mesh_shape[i][d] = tu_rng_range(rng, 1, 3);
      n *= m->mesh_shape[i][d];
    }
    int64_t start = tu_rng_range(rng, 0, 63);
    for (int64_t r = 0; r < n; r++) m->mesh_ranks[i][r] = (int32_t)((start + r * 7) % 64);
  }
}

/* A random tensor_map for tensor t over mesh t->mesh. */
static inline void g_make_map(tu_rng *rng, const g_model *m, g_tensor *t) {
  uint32_t used = 0;
  for (uint32_t d = 0; d < t->ndim; d++) {
    uint32_t md = (uint32_t)tu_rng_range(rng, 0, m->mesh_ndim[t->mesh] - 1);
    uint32_t bit = 1u << md;
    t->map[d] = (tu_rng_range(rng, 0, 1) && !(used & bit)) ? bit : 0;
    used |= t->map[d];
  }
}

/* Chunks of t: a random grid split (ceil-divided), each non-empty cell kept
 * with probability 3/4. */
static inline void g_make_chunks(tu_rng *rng, const g_model *m, g_tensor *t) {
  int64_t parts[4], cell[4] = {0, 0, 0, 0}, total = 1;
  for (uint32_t d = 0; d < t->ndim; d++) {
    parts[d] = tu_rng_range(rng, 1, 3);
    total *= parts[d];
  }
  t->nchunks = 0;
  for (int64_t i = 0; i < total; i++) {
    int64_t rem = i, numel = 1;
    g_chunk *c = &t->chunks[t->nchunks];
    memset(c, 0, sizeof *c);
    for (uint32_t d = t->ndim; d-- > 0;) {
      cell[d] = rem % parts[d];
      rem /= parts[d];
      int64_t step = (t->shape[d] + parts[d] - 1) / parts[d];
      int64_t lo = cell[d] * step, hi = (cell[d] + 1) * step;
      if (lo > t->shape[d]) lo = t->shape[d];
      if (hi > t->shape[d]) hi = t->shape[d];
      c->off[d] = lo;
      c->size[d] = hi - lo;
      numel *= hi - lo;
    }
    if (numel == 0 || tu_rng_range(rng, 0, 3) == 0) continue;
    g_make_ref(rng, &c->r, (uint64_t)numel * dcp_dtype_size(t->dt), m->nfiles);
    t->nchunks++;
  }
}

/* One random tensor (index i keeps fqns distinct). */
static inline void g_make_tensor(tu_rng *rng, g_model *m, size_t i) {
  g_tensor *t = &m->t[i];
  snprintf(t->fqn, sizeof t->fqn, "layer.%d.w%zu", (int)tu_rng_range(rng, 0, 99), i);
  t->dt = (dcp_dtype)tu_rng_range(rng, 1, DCP_DTYPE_END_ - 1);
  t->ndim = (uint32_t)tu_rng_range(rng, 0, 4);
  for (uint32_t d = 0; d < t->ndim; d++)
    t->shape[d] = tu_rng_range(rng, 0, 9) == 0 ? 0 : tu_rng_range(rng, 1, 6);
  t->mesh = m->nmeshes && tu_rng_range(rng, 0, 1) ? (int32_t)tu_rng_range(rng, 0, (int64_t)m->nmeshes - 1) : -1;
  if (t->mesh >= 0) g_make_map(rng, m, t);
  g_make_chunks(rng, m, t);
}

/* A random model with up to max_t tensors. */
static inline void g_make_model(tu_rng *rng, g_model *m, size_t max_t) {
  memset(m, 0, sizeof *m);
  g_make_meshes(rng, m);
  m->nfiles = (size_t)tu_rng_range(rng, 1, G_MAXF);
  for (size_t f = 0; f < m->nfiles; f++) snprintf(m->files[f], sizeof m->files[f], "rank%zu.data", f);
  m->nt = (size_t)tu_rng_range(rng, 0, (int64_t)max_t);
  for (size_t i = 0; i < m->nt; i++) g_make_tensor(rng, m, i);
  m->nb = (size_t)tu_rng_range(rng, 0, G_MAXB);
  for (size_t i = 0; i < m->nb; i++) {
    g_bytes *b = &m->b[i];
    /* A few keys, several ranks each, so (key, rank) ordering is exercised. */
    int key = (int)(i % 4);
    snprintf(b->key, sizeof b->key, "state.%d", key);
    b->scope = key % 2 ? DCP_SCOPE_PER_RANK : DCP_SCOPE_REPLICATED;
    if (b->scope == DCP_SCOPE_REPLICATED && i >= 4) snprintf(b->key, sizeof b->key, "rep.%u", (unsigned)(i % 100000));
    b->rank = b->scope == DCP_SCOPE_PER_RANK ? (int32_t)(i * 3 % 64) : -1;
    g_make_ref(rng, &b->r, (uint64_t)tu_rng_range(rng, 0, 300), m->nfiles);
  }
  m->nk = (size_t)tu_rng_range(rng, 0, G_MAXK);
  for (size_t i = 0; i < m->nk; i++) {
    snprintf(m->kkey[i], sizeof m->kkey[i], "key%zu", (i * 5) % G_MAXK + 10 * i);
    snprintf(m->kval[i], sizeof m->kval[i], "%s", i % 3 ? "value" : "");
    if (i % 3 == 2) snprintf(m->kval[i], sizeof m->kval[i], "v%llu", (unsigned long long)tu_rng_next(rng));
  }
}

/* A permutation of 0..n-1 into p: identity, or shuffled when rng != NULL. */
static inline void g_perm(tu_rng *rng, size_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = i;
  if (!rng) return;
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)tu_rng_range(rng, 0, (int64_t)i - 1), x = p[i - 1];
    p[i - 1] = p[j];
    p[j] = x;
  }
}

/* Add every tensor's chunks, all tensors interleaved in (shuffled) order. */
static inline void g_add_chunks(tu_rng *shuffle, const g_model *m, dcpi_md *md, const uint32_t *tid) {
  size_t total = 0, k = 0;
  for (size_t t = 0; t < m->nt; t++) total += m->t[t].nchunks;
  size_t *all = malloc((total + 1) * sizeof *all), *p = malloc((total + 1) * sizeof *p);
  assert_non_null(all);
  assert_non_null(p);
  for (size_t t = 0; t < m->nt; t++)
    for (size_t c = 0; c < m->t[t].nchunks; c++) all[k++] = t * G_MAXC + c;
  g_perm(shuffle, p, total);
  dcpi_err err;
  for (size_t i = 0; i < total; i++) {
    size_t t = all[p[i]] / G_MAXC, c = all[p[i]] % G_MAXC;
    const g_chunk *ch = &m->t[t].chunks[c];
    dcp_status rc = dcpi_md_add_chunk(md, tid[t], ch->off, ch->size, &ch->r.ref, &err);
    if (rc != DCP_OK) fprintf(stderr, "add_chunk: %s\n", err.msg);
    assert_int_equal(rc, DCP_OK);
  }
  free(all);
  free(p);
}

/* Build m into a new builder; shuffle (may be NULL) permutes every add order
 * that must not matter. */
static inline dcpi_md *g_build(const g_model *m, tu_rng *shuffle) {
  dcpi_md *md = NULL;
  dcpi_err err;
  size_t p[G_MAXT > G_MAXB ? G_MAXT : G_MAXB];
  uint32_t tid[G_MAXT];
  assert_int_equal(dcpi_md_create(&md), DCP_OK);
  assert_int_equal(dcpi_md_set_world(md, m->world, &err), DCP_OK);
  for (size_t f = 0; f < m->nfiles; f++) assert_int_equal(dcpi_md_add_file(md, m->files[f], NULL, &err), DCP_OK);
  for (size_t i = 0; i < m->nmeshes; i++)
    assert_int_equal(dcpi_md_add_mesh(md, m->mesh_ndim[i], m->mesh_shape[i], m->mesh_ranks[i], NULL, &err), DCP_OK);
  g_perm(shuffle, p, m->nt);
  for (size_t i = 0; i < m->nt; i++) {
    const g_tensor *t = &m->t[p[i]];
    dcp_status rc = dcpi_md_add_tensor(md, t->fqn, t->dt, t->ndim, t->shape, t->mesh,
                                      t->mesh >= 0 ? t->map : NULL, &tid[p[i]], &err);
    if (rc != DCP_OK) fprintf(stderr, "add_tensor: %s\n", err.msg);
    assert_int_equal(rc, DCP_OK);
  }
  g_add_chunks(shuffle, m, md, tid);
  g_perm(shuffle, p, m->nb);
  for (size_t i = 0; i < m->nb; i++) {
    const g_bytes *b = &m->b[p[i]];
    dcp_status rc = dcpi_md_add_bytes(md, b->key, b->scope, b->rank, &b->r.ref, &err);
    if (rc != DCP_OK) fprintf(stderr, "add_bytes: %s\n", err.msg);
    assert_int_equal(rc, DCP_OK);
  }
  g_perm(shuffle, p, m->nk);
  for (size_t i = 0; i < m->nk; i++) assert_int_equal(dcpi_md_add_kv(md, m->kkey[p[i]], m->kval[p[i]], &err), DCP_OK);
  return md;
}

/* Encode m (in the given add order) into a malloc'd buffer. */
static inline void *g_encode(const g_model *m, tu_rng *shuffle, size_t *len) {
  dcpi_md *md = g_build(m, shuffle);
  void *buf = NULL;
  dcpi_err err;
  dcp_status rc = dcpi_md_encode(md, &buf, len, &err);
  if (rc != DCP_OK) fprintf(stderr, "encode: %s\n", err.msg);
  assert_int_equal(rc, DCP_OK);
  dcpi_md_free(md);
  return buf;
}

/* Recompute every section checksum and the trailer, so tampering reaches
 * the structural checks (tests/support/meta_reseal.c). */
static inline void g_reseal(uint8_t *p, size_t len) { tu_meta_reseal(p, len); }

/* Where a flip at byte `at` of a version 4 file must be caught: in a chunk
 * list it is caught when that list is first used (its own checksums), in
 * the trailer or the chunks section's checksum in the directory only by
 * the whole-file check (nothing else reads them), anywhere else at open. */
typedef enum { G_AT_OPEN, G_AT_ACCESS, G_BY_WHOLE } g_catch;
static inline g_catch g_where_caught(const uint8_t *buf, size_t len, size_t at) {
  const uint8_t *chunks = buf + DCPI_HEADER_SIZE + (DCPI_SEC_CHUNKS - 1) * DCPI_DIRENT_SIZE;
  uint64_t off = dcpi_get_u64(chunks + 8), n = dcpi_get_u64(chunks + 16);
  size_t cks = (size_t)(chunks - buf) + 24;
  if (at >= off && at < off + n) return G_AT_ACCESS;
  if (at >= len - DCPI_TRAILER_SIZE || (at >= cks && at < cks + 8)) return G_BY_WHOLE;
  return G_AT_OPEN;
}

#endif

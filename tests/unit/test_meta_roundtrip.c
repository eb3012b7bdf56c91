/* test_meta_roundtrip.c — metadata encode → dcp_meta view: every field comes
 * back as added, the encoding is deterministic, and lookups work. */
#include "meta_gen.h"
#include "metadata/view.h"

/* Compare a decoded ref with the expected one, field by field. */
static void check_ref(const dcp_storage_ref *got, const dcp_storage_ref *want) {
  assert_int_equal(got->file, want->file);
  assert_int_equal(got->codec, want->codec);
  assert_int_equal(got->block_size, want->block_size);
  assert_int_equal(got->offset, want->offset);
  assert_int_equal(got->stored_length, want->stored_length);
  assert_int_equal(got->raw_length, want->raw_length);
  assert_int_equal(got->block_count, want->block_count);
  for (uint64_t b = 0; b < want->block_count; b++)
    assert_int_equal(got->block_checksums[b], want->block_checksums[b]);
  if (want->codec != DCP_CODEC_NONE) {
    for (uint64_t b = 0; b < want->block_count; b++)
      assert_int_equal(got->block_stored_lengths[b], want->block_stored_lengths[b]);
  } else {
    assert_null(got->block_stored_lengths);
  }
}

/* The model's tensor named fqn, or NULL. */
static const g_tensor *find_model_tensor(const g_model *m, const char *fqn) {
  for (size_t i = 0; i < m->nt; i++)
    if (strcmp(m->t[i].fqn, fqn) == 0) return &m->t[i];
  return NULL;
}

/* The model chunk of t whose box is b, or NULL. */
static const g_chunk *find_model_chunk(const g_tensor *t, const dcp_box *b) {
  for (size_t c = 0; c < t->nchunks; c++)
    if (memcmp(t->chunks[c].off, b->offset, t->ndim * sizeof(int64_t)) == 0 &&
        memcmp(t->chunks[c].size, b->size, t->ndim * sizeof(int64_t)) == 0)
      return &t->chunks[c];
  return NULL;
}

/* Check tensor i of the view (and all its chunks, in sorted order) against m. */
static void check_tensor(dcp_meta *v, const g_model *m, size_t i) {
  dcp_tensor_info ti;
  assert_int_equal(dcp_meta_tensor(v, i, &ti), DCP_OK);
  const g_tensor *t = find_model_tensor(m, ti.fqn);
  assert_non_null(t);
  assert_int_equal(ti.dtype, t->dt);
  assert_int_equal(ti.ndim, t->ndim);
  for (uint32_t d = 0; d < t->ndim; d++) assert_int_equal(ti.shape[d], t->shape[d]);
  uint32_t map[DCP_MAX_NDIM];
  assert_int_equal(dcpi_meta_tensor_layout(v, i, map), t->mesh);
  if (t->mesh >= 0)
    for (uint32_t d = 0; d < t->ndim; d++) assert_int_equal(map[d], t->map[d]);
  assert_int_equal(ti.chunk_count, t->nchunks);
  dcp_chunk_info prev;
  for (size_t c = 0; c < t->nchunks; c++) {
    dcp_chunk_info ci;
    assert_int_equal(dcp_meta_chunk(v, i, c, &ci), DCP_OK);
    assert_int_equal(ci.box.ndim, t->ndim);
    const g_chunk *want = find_model_chunk(t, &ci.box);
    assert_non_null(want);
    check_ref(&ci.ref, &want->r.ref);
    if (c > 0) { /* sorted by offset, lexicographic */
      int cmp = 0;
      for (uint32_t d = 0; d < t->ndim && !cmp; d++)
        cmp = (prev.box.offset[d] > ci.box.offset[d]) - (prev.box.offset[d] < ci.box.offset[d]);
      assert_true(cmp < 0);
    }
    prev = ci;
  }
  dcp_chunk_info ci;
  assert_int_equal(dcp_meta_chunk(v, i, t->nchunks, &ci), DCP_ENOTFOUND);
}

/* The model's bytes item (key, rank), or NULL. */
static const g_bytes *find_model_bytes(const g_model *m, const char *key, int32_t rank) {
  for (size_t i = 0; i < m->nb; i++)
    if (strcmp(m->b[i].key, key) == 0 && m->b[i].rank == rank) return &m->b[i];
  return NULL;
}

/* Check bytes items, files, meshes and key/values of the view against m. */
static void check_tables(dcp_meta *v, const g_model *m) {
  assert_int_equal(dcp_meta_world_size(v), m->world);
  assert_int_equal(dcp_meta_format_version(v), DCPI_FORMAT_VERSION);
  assert_int_equal(dcp_meta_bytes_count(v), m->nb);
  for (size_t i = 0; i < m->nb; i++) {
    dcp_bytes_info bi;
    assert_int_equal(dcp_meta_bytes(v, i, &bi), DCP_OK);
    const g_bytes *b = find_model_bytes(m, bi.key, bi.rank);
    assert_non_null(b);
    assert_int_equal(bi.scope, b->scope);
    check_ref(&bi.ref, &b->r.ref);
  }
  assert_int_equal(dcp_meta_file_count(v), m->nfiles);
  for (size_t f = 0; f < m->nfiles; f++) {
    const char *name;
    assert_int_equal(dcp_meta_file(v, f, &name), DCP_OK);
    assert_string_equal(name, m->files[f]);
  }
  assert_int_equal(dcpi_meta_mesh_count(v), m->nmeshes);
  for (size_t i = 0; i < m->nmeshes; i++) {
    dcpi_mesh_info mi;
    assert_int_equal(dcpi_meta_mesh(v, i, &mi), DCP_OK);
    assert_int_equal(mi.ndim, m->mesh_ndim[i]);
    int64_t n = 1;
    for (uint32_t d = 0; d < mi.ndim; d++) {
      assert_int_equal(mi.shape[d], m->mesh_shape[i][d]);
      n *= mi.shape[d];
    }
    for (int64_t r = 0; r < n; r++) assert_int_equal(mi.ranks[r], m->mesh_ranks[i][r]);
  }
  assert_int_equal(dcp_meta_kv_count(v), m->nk);
  for (size_t i = 0; i < m->nk; i++) {
    const char *k, *val;
    assert_int_equal(dcp_meta_kv(v, i, &k, &val), DCP_OK);
    size_t j = 0;
    while (j < m->nk && strcmp(m->kkey[j], k) != 0) j++;
    assert_true(j < m->nk);
    assert_string_equal(val, m->kval[j]);
  }
}

/* Random models round-trip through encode and the view. */
static void test_roundtrip_random(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(0x6d657461));
  g_model *m = malloc(sizeof *m);
  assert_non_null(m);
  for (int iter = 0; iter < 200; iter++) {
    g_make_model(&rng, m, G_MAXT);
    size_t len;
    void *buf = g_encode(m, NULL, &len);
    dcp_ctx *ctx;
    assert_int_equal(dcp_ctx_create(NULL, &ctx), DCP_OK);
    dcp_meta *v = NULL;
    dcp_status rc = dcp_meta_open_memory(ctx, buf, len, &v);
    if (rc != DCP_OK) fprintf(stderr, "open: %s\n", dcp_ctx_last_error(ctx));
    assert_int_equal(rc, DCP_OK);
    memset(buf, 0xee, len); /* the view holds its own copy */
    free(buf);
    assert_int_equal(dcp_meta_tensor_count(v), m->nt);
    for (size_t i = 0; i < m->nt; i++) check_tensor(v, m, i);
    check_tables(v, m);
    dcp_meta_free(v);
    dcp_ctx_free(ctx);
  }
  free(m);
}

/* The same content added in different orders encodes to identical bytes. */
static void test_deterministic(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(0x6d657461) + 1);
  g_model *m = malloc(sizeof *m);
  assert_non_null(m);
  for (int iter = 0; iter < 50; iter++) {
    g_make_model(&rng, m, G_MAXT);
    size_t la, lb;
    void *a = g_encode(m, NULL, &la);
    void *b = g_encode(m, &rng, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a);
    free(b);
  }
  free(m);
}

/* find_tensor finds every present fqn at its sorted index, and nothing else. */
static void test_find_tensor(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(0x6d657461) + 2);
  g_model *m = malloc(sizeof *m);
  assert_non_null(m);
  g_make_model(&rng, m, G_MAXT);
  m->nt = G_MAXT;
  for (size_t i = 0; i < m->nt; i++) g_make_tensor(&rng, m, i);
  size_t len, idx;
  void *buf = g_encode(m, NULL, &len);
  dcp_meta *v;
  assert_int_equal(dcp_meta_open_memory(NULL, buf, len, &v), DCP_OK);
  for (size_t i = 0; i < m->nt; i++) {
    assert_int_equal(dcp_meta_find_tensor(v, m->t[i].fqn, &idx), DCP_OK);
    dcp_tensor_info ti;
    assert_int_equal(dcp_meta_tensor(v, idx, &ti), DCP_OK);
    assert_string_equal(ti.fqn, m->t[i].fqn);
    if (idx > 0) {
      dcp_tensor_info pi;
      assert_int_equal(dcp_meta_tensor(v, idx - 1, &pi), DCP_OK);
      assert_true(strcmp(pi.fqn, ti.fqn) < 0);
    }
  }
  const char *absent[] = {"", "layer", "layer.0.w", "zzz", "layer.1.w0x", "\x7f"};
  for (size_t i = 0; i < sizeof absent / sizeof *absent; i++)
    assert_int_equal(dcp_meta_find_tensor(v, absent[i], &idx), DCP_ENOTFOUND);
  dcp_tensor_info ti;
  assert_int_equal(dcp_meta_tensor(v, m->nt, &ti), DCP_ENOTFOUND);
  assert_int_equal(dcp_meta_find_tensor(v, NULL, &idx), DCP_EINVAL);
  dcp_meta_free(v);
  free(buf);
  free(m);
}

/* An empty builder encodes and opens into an empty view. */
static void test_empty(void **state) {
  (void)state;
  dcpi_md *md;
  void *buf;
  size_t len;
  assert_int_equal(dcpi_md_create(&md), DCP_OK);
  assert_int_equal(dcpi_md_encode(md, &buf, &len, NULL), DCP_OK);
  dcp_meta *v;
  assert_int_equal(dcp_meta_open_memory(NULL, buf, len, &v), DCP_OK);
  assert_int_equal(dcp_meta_tensor_count(v), 0);
  assert_int_equal(dcp_meta_world_size(v), 1);
  size_t idx;
  assert_int_equal(dcp_meta_find_tensor(v, "x", &idx), DCP_ENOTFOUND);
  dcp_meta_free(v);
  free(buf);
  dcpi_md_free(md);
  dcp_meta_free(NULL);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip_random),
      cmocka_unit_test(test_deterministic),
      cmocka_unit_test(test_find_tensor),
      cmocka_unit_test(test_empty),
  };
  return TU_RUN(tests, NULL, NULL);
}

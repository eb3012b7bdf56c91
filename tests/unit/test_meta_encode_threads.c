/* test_meta_encode_threads.c — the encoder's chunk lists are encoded on
 * several threads at scale (md_encode.c): the bytes, and the error a bad
 * builder reports, must not depend on how many threads ran. */
#include "meta_gen.h"

#define NT 700 /* tensors: more than one batch of the encoder's (256) */

/* Encode md on `threads` threads; asserts success. */
static void *encode_on(const dcpi_md *md, unsigned threads, size_t *len) {
  void *buf = NULL;
  dcpi_err err;
  dcp_status rc = dcpi_md_encode_threads(md, threads, &buf, len, &err);
  if (rc != DCP_OK) fprintf(stderr, "encode on %u threads: %s\n", threads, err.msg);
  assert_int_equal(rc, DCP_OK);
  return buf;
}

/* md encodes to the same bytes on 1, 2, 3 and 8 threads and as
 * dcpi_md_encode chooses; returns that encoding. */
static void *same_on_any_threads(const dcpi_md *md, size_t *len) {
  void *one = encode_on(md, 1, len);
  const unsigned counts[] = {2, 3, 8, 0};
  for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
    size_t n;
    void *other = encode_on(md, counts[k], &n);
    assert_int_equal(n, *len);
    assert_memory_equal(other, one, n);
    free(other);
  }
  return one;
}

/* Random models (a few tensors each, every kind of list and ref). */
static void test_random_models(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(0x74687264));
  for (int i = 0; i < 200; i++) {
    g_model *m = malloc(sizeof *m);
    assert_non_null(m);
    g_make_model(&rng, m, G_MAXT);
    dcpi_md *md = g_build(m, &rng);
    size_t len;
    free(same_on_any_threads(md, &len));
    dcpi_md_free(md);
    free(m);
  }
}

/* NT tensors added in a shuffled order, so each batch of the encoder holds
 * tensors of several sizes: "t.0000".."t.0699", 1-d of (i % 9 + 1) chunks
 * of 4 f32 elements, every third 2-d as a 2 x (i % 5 + 1) grid, every
 * seventh chunk of two zstd blocks. dup_a / dup_b (-1: none) get one chunk
 * twice. */
static dcpi_md *many_tensors(int dup_a, int dup_b) {
  dcpi_md *md;
  dcpi_err err;
  assert_int_equal(dcpi_md_create(&md), DCP_OK);
  assert_int_equal(dcpi_md_set_world(md, 4, &err), DCP_OK);
  assert_int_equal(dcpi_md_add_file(md, "data", NULL, &err), DCP_OK);
  size_t order[NT];
  tu_rng rng;
  tu_rng_seed(&rng, 0x6d616e79);
  g_perm(&rng, order, NT);
  uint64_t offset = 0, cks[2] = {11, 12}, lens[2] = {9, 7};
  for (size_t k = 0; k < NT; k++) {
    int i = (int)order[k];
    char fqn[16];
    snprintf(fqn, sizeof fqn, "t.%04d", i);
    bool grid = i % 3 == 0;
    int64_t rows = grid ? 2 : i % 9 + 1, cols = grid ? i % 5 + 1 : 1;
    const int64_t shape[2] = {rows * 4, cols * 4};
    uint32_t tid;
    assert_int_equal(dcpi_md_add_tensor(md, fqn, DCP_F32, grid ? 2 : 1, shape, -1, NULL, &tid, &err),
                     DCP_OK);
    for (int64_t c = 0; c < rows * cols; c++) {
      const int64_t off[2] = {c / cols * 4, c % cols * 4}, size[2] = {4, 4};
      uint64_t raw = grid ? 64 : 16;
      dcp_storage_ref r = {.file = 0, .codec = DCP_CODEC_NONE, .block_size = 1 << 20,
                           .offset = offset, .stored_length = raw, .raw_length = raw,
                           .block_count = 1, .block_checksums = cks};
      if (grid && (i + c) % 7 == 0)
        r.codec = DCP_CODEC_ZSTD, r.block_size = 32, r.block_count = 2, r.stored_length = 16,
        r.block_stored_lengths = lens;
      assert_int_equal(dcpi_md_add_chunk(md, tid, off, size, &r, &err), DCP_OK);
      if (c == 0 && (i == dup_a || i == dup_b))
        assert_int_equal(dcpi_md_add_chunk(md, tid, off, size, &r, &err), DCP_OK);
      offset += r.stored_length;
    }
  }
  return md;
}

/* Several batches: the same bytes on any count, and they decode to every
 * tensor with its chunks in order. */
static void test_many_tensors(void **state) {
  (void)state;
  dcpi_md *md = many_tensors(-1, -1);
  size_t len;
  void *buf = same_on_any_threads(md, &len);
  dcp_meta *v;
  assert_int_equal(dcp_meta_open_memory(NULL, buf, len, &v), DCP_OK);
  assert_int_equal(dcp_meta_tensor_count(v), NT);
  for (size_t t = 0; t < NT; t++) {
    dcp_tensor_info ti;
    assert_int_equal(dcp_meta_tensor(v, t, &ti), DCP_OK);
    char want[16];
    snprintf(want, sizeof want, "t.%04zu", t);
    assert_string_equal(ti.fqn, want);
    bool grid = t % 3 == 0;
    assert_int_equal(ti.chunk_count, grid ? 2 * (t % 5 + 1) : t % 9 + 1);
    for (size_t c = 0; c < ti.chunk_count; c++) {
      dcp_chunk_info ci;
      assert_int_equal(dcp_meta_chunk(v, t, c, &ci), DCP_OK);
      size_t cols = grid ? t % 5 + 1 : 1;
      assert_int_equal(ci.box.offset[0], (int64_t)(c / cols) * 4);
      if (grid) assert_int_equal(ci.box.offset[1], (int64_t)(c % cols) * 4);
      assert_int_equal(ci.ref.codec, grid && (t + c) % 7 == 0 ? DCP_CODEC_ZSTD : DCP_CODEC_NONE);
    }
  }
  dcp_meta_free(v);
  free(buf);
  dcpi_md_free(md);
}

/* Two tensors with a repeated box: every count reports the one first in
 * fqn order (not the one added first, nor whichever thread failed first),
 * and returns no buffer. */
static void test_first_error_in_fqn_order(void **state) {
  (void)state;
  dcpi_md *md = many_tensors(200, 123);
  const unsigned counts[] = {1, 2, 6, 0};
  for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
    void *buf = (void *)1;
    size_t len = 1;
    dcpi_err err;
    dcpi_err_clear(&err);
    assert_int_equal(dcpi_md_encode_threads(md, counts[k], &buf, &len, &err), DCP_EEXIST);
    assert_int_equal(err.code, DCP_EEXIST);
    assert_non_null(strstr(err.msg, "'t.0123'"));
    assert_null(buf);
    assert_int_equal(len, 0);
  }
  dcpi_md_free(md);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_models),
      cmocka_unit_test(test_many_tensors),
      cmocka_unit_test(test_first_error_in_fqn_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_meta_compact.c — the encoding of a regular sharding stays compact:
 * at most 32 bytes per chunk on average (format.md, "Compactness"). */
#include "meta_gen.h"

/* Encode ntensors tensors of shape rows x cols (BF16), each split into
 * `writers` chunks: by rows (grid 0) or on a writers/4 x 4 grid (grid 1).
 * Writer w stores its chunk of every tensor in file w, contiguously, one
 * block per chunk. Returns the encoded bytes per chunk. */
static double bytes_per_chunk(int ntensors, int writers, int grid) {
  dcpi_md *md;
  dcpi_err err;
  assert_int_equal(dcpi_md_create(&md), DCP_OK);
  assert_int_equal(dcpi_md_set_world(md, writers, &err), DCP_OK);
  char name[64];
  for (int w = 0; w < writers; w++) {
    snprintf(name, sizeof name, "__%d_0.distcp", w);
    assert_int_equal(dcpi_md_add_file(md, name, NULL, &err), DCP_OK);
  }
  const int64_t shape[2] = {8000, 4096};
  int rows = grid ? writers / 4 : writers, cols = grid ? 4 : 1;
  int64_t step[2] = {shape[0] / rows, shape[1] / cols};
  uint64_t *file_end = calloc((size_t)writers, sizeof *file_end);
  tu_rng rng;
  tu_rng_seed(&rng, 99);
  for (int t = 0; t < ntensors; t++) {
    uint32_t tid;
    snprintf(name, sizeof name, "model.layers.%d.mlp.up_proj.weight", t);
    assert_int_equal(dcpi_md_add_tensor(md, name, DCP_BF16, 2, shape, -1, NULL, &tid, &err), DCP_OK);
    for (int w = 0; w < writers; w++) {
      int64_t off[2] = {(w / cols) * step[0], (w % cols) * step[1]};
      uint64_t cks = tu_rng_next(&rng);
      dcp_storage_ref ref = {.file = (uint32_t)w, .codec = DCP_CODEC_NONE,
                             .block_size = 64u << 20, .offset = file_end[w],
                             .raw_length = (uint64_t)(step[0] * step[1] * 2),
                             .block_count = 1, .block_checksums = &cks};
      ref.stored_length = ref.raw_length;
      file_end[w] += ref.stored_length;
      assert_int_equal(dcpi_md_add_chunk(md, tid, off, step, &ref, &err), DCP_OK);
    }
  }
  void *buf;
  size_t len;
  assert_int_equal(dcpi_md_encode(md, &buf, &len, &err), DCP_OK);
  double per = (double)len / ((double)ntensors * writers);
  printf("# %d tensors x %d chunks (%s): %zu bytes, %.2f bytes/chunk\n", ntensors, writers,
         grid ? "2-D grid" : "row split", len, per);
  dcp_meta *v;
  assert_int_equal(dcp_meta_open_memory(NULL, buf, len, &v), DCP_OK);
  dcp_chunk_info ci;
  assert_int_equal(dcp_meta_chunk(v, dcp_meta_tensor_count(v) - 1, (size_t)writers - 1, &ci), DCP_OK);
  assert_int_equal(ci.ref.file, (uint32_t)writers - 1);
  dcp_meta_free(v);
  free(buf);
  free(file_end);
  dcpi_md_free(md);
  return per;
}

/* 1000 tensors x 80 chunks of 2-D boxes, one block each. */
static void test_compact_regular(void **state) {
  (void)state;
  assert_true(bytes_per_chunk(1000, 80, 0) <= 32.0);
  assert_true(bytes_per_chunk(1000, 80, 1) <= 32.0);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_compact_regular),
  };
  return TU_RUN(tests, NULL, NULL);
}

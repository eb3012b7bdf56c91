/* test_block_granules.c — a save cuts each chunk into blocks aligned to
 * its rows (dcpi_block_size_for), so a resharded load reads only the rows it
 * needs: the block size rule itself (bounds, row alignment, exact cuts), and
 * on one rank a load of a row band that straddles saved chunks, whose bytes
 * read from storage (the .metadata included) stay within 5% of the bytes it
 * needs — a count, not a timing. */
#include "testutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/rt.h"

#define MIB (1u << 20)

/* Every block is a whole number of rows, within [GRANULE_MIN, max], and
 * small items or rows larger than max keep max. */
static void test_rule(void **state) {
  (void)state;
  uint32_t max = 4 * MIB;
  /* small items: one block, the default size */
  assert_int_equal(dcpi_block_size_for(100, 4, max), max);
  assert_int_equal(dcpi_block_size_for(DCPI_GRANULE_MIN, 64, max), max);
  /* a save with blocks no larger than a granule keeps them */
  assert_int_equal(dcpi_block_size_for(1 * MIB, 256, 4096), 4096);
  /* a row larger than a block: max-sized blocks as before */
  assert_int_equal(dcpi_block_size_for(64 * MIB, 8 * MIB, max), max);
  /* the demo's qkv chunk: 384 rows of 1 KiB, 16 blocks of 24 rows */
  assert_int_equal(dcpi_block_size_for(384 * 1024, 1024, max), 24 * 1024);
  /* a large chunk: 4 MiB blocks, as before */
  assert_int_equal(dcpi_block_size_for(256 * MIB, 4096, max), max);
  static const struct {
    uint64_t rows, row;
  } cases[] = {{100, 1000}, {300, 200}, {1 << 20, 4}, {1000, 4096}, {7, 1 << 20},
               {12345, 96}, {4096, 2048}, {999983, 2}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    uint64_t len = cases[k].rows * cases[k].row;
    uint32_t bs = dcpi_block_size_for(len, cases[k].row, max);
    if (bs == max) continue;
    assert_int_equal(bs % cases[k].row, 0);
    assert_true(bs >= DCPI_GRANULE_MIN && bs <= max);
    assert_true(bs < len);
    /* checksums cost at most 8 bytes per granule */
    assert_true((len + bs - 1) / bs * 8 <= len / 2048 + 8);
  }
  /* rows that divide: halves and quarters start on a block */
  uint32_t bs = dcpi_block_size_for(1000ull * 4096, 4096, max);
  assert_int_equal((500ull * 4096) % bs, 0);
  assert_int_equal((250ull * 4096) % bs, 0);
}

enum { ROWS = 1024, COLS = 256, BANDS = 4 };

static float value(int64_t i, int64_t j) { return (float)(i * COLS + j); }

/* Saved as four row bands of 256 KiB (TP4 on rows), loaded as rows
 * [128, 640) (a band of a TP2 that starts mid-chunk): 512 KiB needed from
 * three chunks, two of them in part. With one block per chunk it read
 * 768 KiB (1.5x); with row-aligned granules, the rows it needs. */
static void reshard_reads_what_it_needs(uint32_t save_flags) {
  char dir[PATH_MAX], plugins[PATH_MAX], ckpt[PATH_MAX + 8];
  dcp_ctx *ctx = tu_scratch_ctx("dcp-granules", dir, sizeof dir, plugins, sizeof plugins);
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
  float *w = malloc((size_t)ROWS * COLS * sizeof *w);
  assert_non_null(w);
  for (int64_t i = 0; i < ROWS; i++)
    for (int64_t j = 0; j < COLS; j++) w[i * COLS + j] = value(i, j);
  dcp_state *st;
  int64_t shape[2] = {ROWS, COLS}, band = ROWS / BANDS;
  assert_int_equal(dcp_state_create(ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), DCP_OK);
  for (int64_t b = 0; b < BANDS; b++) {
    int64_t off[2] = {b * band, 0}, sz[2] = {band, COLS};
    assert_int_equal(dcp_state_add_chunk(st, "w", off, sz, w + b * band * COLS), DCP_OK);
  }
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.flags = save_flags;
  assert_int_equal(dcp_save(ctx, st, ckpt, &so), DCP_OK);
  dcp_stats saved = {.struct_size = sizeof saved};
  dcp_ctx_stats(ctx, &saved);
  dcp_state_free(st);

  int64_t r0 = 128, nrows = 512;
  float *part = calloc((size_t)nrows * COLS, sizeof *part);
  assert_non_null(part);
  assert_int_equal(dcp_state_create(ctx, &st), DCP_OK);
  int64_t off[2] = {r0, 0}, sz[2] = {nrows, COLS};
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", off, sz, part), DCP_OK);
  assert_int_equal(dcp_load(ctx, st, ckpt, NULL), DCP_OK);
  for (int64_t i = 0; i < nrows; i++)
    for (int64_t j = 0; j < COLS; j++) assert_true(part[i * COLS + j] == value(r0 + i, j));
  dcp_stats s = {.struct_size = sizeof s};
  dcp_ctx_stats(ctx, &s);
  uint64_t need = (uint64_t)nrows * COLS * sizeof(float);
  if (save_flags & DCP_SAVE_COMPRESS) {
    /* stored blocks (zstd frames) of the band's rows: about need's share
     * of what was written, never whole chunks */
    double share = (double)need / ((double)ROWS * COLS * sizeof(float));
    double stored = (double)saved.bytes_written;
    print_message("compressed: read %llu of %llu stored (%.2f of the share)\n",
                  (unsigned long long)s.data_read_bytes, (unsigned long long)saved.bytes_written,
                  (double)s.data_read_bytes / (share * stored));
    assert_true(s.data_read_bytes < (uint64_t)stored);
    assert_true((double)s.data_read_bytes <= 1.15 * share * stored);
  } else {
    assert_int_equal(s.data_read_bytes, need); /* the band's rows, block-aligned */
    assert_true((double)s.bytes_read <= 1.05 * (double)need);
  }
  dcp_state_free(st);
  free(part);
  free(w);
  dcp_ctx_free(ctx);
  tu_remove_tree(dir);
}

static void test_reshard_reads_what_it_needs(void **state) {
  (void)state;
  reshard_reads_what_it_needs(0);
}

/* The same with every block a zstd frame: granules are cut before
 * compression, so the load still decodes only the band's blocks, and every
 * element is exact. */
static void test_reshard_compressed(void **state) {
  (void)state;
  reshard_reads_what_it_needs(DCP_SAVE_COMPRESS);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rule),
      cmocka_unit_test(test_reshard_reads_what_it_needs),
      cmocka_unit_test(test_reshard_compressed),
  };
  return TU_RUN(tests, NULL, NULL);
}

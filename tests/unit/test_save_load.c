/* dcp_save / dcp_load on one rank with the posix storage plugin: round
 * trips (raw and zstd), resharded reads of sub-boxes that touch only their
 * blocks, the commit rules (refuse, overwrite, incomplete), corruption
 * detection, mismatch errors, and cleanup of a failed save's leftovers. */
#include "testutil.h"
#include "ckpt_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

typedef tu_fixture fixture;

static int setup(void **state) { return tu_fixture_setup(state, "dcp-test"); }

static int teardown(void **state) { return tu_fixture_teardown(state); }

/* A 2-D F32 tensor "w" of rows x cols with w[i][j] = i*1000 + j, saved as
 * two row bands; a BF16 vector "b"; bytes "step". */
enum { ROWS = 300, COLS = 50 };

static float w_value(int64_t i, int64_t j) { return (float)(i * 1000 + j); }

static dcp_state *make_saved_state(fixture *f, float *w, uint16_t *b, uint64_t *step) {
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  for (int64_t i = 0; i < ROWS; i++)
    for (int64_t j = 0; j < COLS; j++) w[i * COLS + j] = w_value(i, j);
  for (int k = 0; k < 33; k++) b[k] = (uint16_t)(0x3f00 + k);
  *step = 1234;
  int64_t shape[2] = {ROWS, COLS}, bshape[1] = {33};
  int64_t o1[2] = {0, 0}, s1[2] = {120, COLS}, o2[2] = {120, 0}, s2[2] = {ROWS - 120, COLS};
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", o1, s1, w), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", o2, s2, w + 120 * COLS), DCP_OK);
  int64_t zero[1] = {0};
  assert_int_equal(dcp_state_add_tensor(st, "b", DCP_BF16, 1, bshape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "b", zero, bshape, b), DCP_OK);
  assert_int_equal(dcp_state_add_bytes(st, "step", DCP_SCOPE_REPLICATED, step, 8), DCP_OK);
  return st;
}

static dcp_status save_default(fixture *f, uint32_t flags) {
  static float w[ROWS * COLS];
  static uint16_t b[33];
  static uint64_t step;
  dcp_state *st = make_saved_state(f, w, b, &step);
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.flags = flags;
  o.block_size = 4096; /* many blocks, so partial reads are visible */
  dcp_status rc = dcp_save(f->ctx, st, f->ckpt, &o);
  dcp_state_free(st);
  return rc;
}

static uint64_t file_size(const fixture *f, const char *name) {
  char p[PATH_MAX + 64];
  struct stat sb;
  snprintf(p, sizeof p, "%s/%s", f->ckpt, name);
  return stat(p, &sb) ? 0 : (uint64_t)sb.st_size;
}

/* The size of rank 0's data file (0 when there is none). */
static uint64_t data_file_size(const fixture *f) {
  char p[PATH_MAX + 64];
  struct stat sb;
  return ck_data_file(f->ckpt, 0, p, sizeof p) && !stat(p, &sb) ? (uint64_t)sb.st_size : 0;
}

/* Compressed blocks are written with ZSTD_CHECKED: each checksum is the
 * xxh3 of the block's bytes as they lie in the data file. */
static void check_stored_checksums(const fixture *f) {
  dcp_meta *m;
  assert_int_equal(dcp_meta_open(f->ctx, f->ckpt, &m), DCP_OK);
  size_t ti;
  assert_int_equal(dcp_meta_find_tensor(m, "w", &ti), DCP_OK);
  dcp_chunk_info ci;
  assert_int_equal(dcp_meta_chunk(m, ti, 0, &ci), DCP_OK);
  assert_int_equal(ci.ref.codec, DCP_CODEC_ZSTD_CHECKED);
  assert_true(ci.ref.stored_length < ci.ref.raw_length); /* really compressed */
  char path[PATH_MAX + 32];
  assert_true(ck_data_file(f->ckpt, 0, path, sizeof path));
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  uint64_t at = ci.ref.offset;
  for (uint64_t b = 0; b < ci.ref.block_count; b++) {
    size_t n = (size_t)ci.ref.block_stored_lengths[b];
    uint8_t *blk = malloc(n);
    assert_int_equal(fseek(fp, (long)at, SEEK_SET), 0);
    assert_int_equal(fread(blk, 1, n, fp), n);
    assert_true(XXH3_64bits(blk, n) == ci.ref.block_checksums[b]);
    free(blk);
    at += n;
  }
  fclose(fp);
  dcp_meta_free(m);
}

static void roundtrip(void **state, uint32_t flags) {
  fixture *f = *state;
  assert_int_equal(save_default(f, flags), DCP_OK);
  dcp_stats st = {.struct_size = sizeof st};
  assert_int_equal(dcp_ctx_stats(f->ctx, &st), DCP_OK);
  uint64_t model = ROWS * COLS * 4 + 33 * 2 + 8;
  assert_int_equal(st.data_bytes, model);
  assert_int_equal(st.items_written, 4);
  uint64_t data = data_file_size(f), meta = file_size(f, ".metadata");
  assert_true(meta > 0);
  if (flags & DCP_SAVE_COMPRESS) {
    assert_true(data < model); /* the values compress */
    check_stored_checksums(f);
  }
  else
    assert_int_equal(data, model); /* bytes on disk = model bytes */
  /* + the plan rank 0 records for a restarted job (.plan) */
  assert_int_equal(st.bytes_written, data + meta + file_size(f, ".plan"));

  /* load into another sharding: column halves */
  static float left[ROWS * 25], right[ROWS * 25];
  uint16_t b[33] = {0};
  uint64_t step = 0;
  dcp_state *ld;
  assert_int_equal(dcp_state_create(f->ctx, &ld), DCP_OK);
  int64_t shape[2] = {ROWS, COLS}, bshape[1] = {33}, zero[1] = {0};
  int64_t ol[2] = {0, 0}, or_[2] = {0, 25}, sz[2] = {ROWS, 25};
  assert_int_equal(dcp_state_add_tensor(ld, "w", DCP_F32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(ld, "w", ol, sz, left), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(ld, "w", or_, sz, right), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(ld, "b", DCP_BF16, 1, bshape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(ld, "b", zero, bshape, b), DCP_OK);
  assert_int_equal(dcp_state_add_bytes(ld, "step", DCP_SCOPE_REPLICATED, &step, 8), DCP_OK);
  dcp_status rc = dcp_load(f->ctx, ld, f->ckpt, NULL);
  if (rc) fprintf(stderr, "%s\n", dcp_ctx_last_error(f->ctx));
  assert_int_equal(rc, DCP_OK);
  for (int64_t i = 0; i < ROWS; i++)
    for (int64_t j = 0; j < 25; j++) {
      assert_true(left[i * 25 + j] == w_value(i, j));
      assert_true(right[i * 25 + j] == w_value(i, j + 25));
    }
  for (int k = 0; k < 33; k++) assert_int_equal(b[k], 0x3f00 + k);
  assert_int_equal(step, 1234);
  dcp_state_free(ld);
}

static void test_roundtrip_raw(void **state) { roundtrip(state, 0); }
static void test_roundtrip_zstd(void **state) { roundtrip(state, DCP_SAVE_COMPRESS); }

/* A small box reads only the blocks it touches, not the whole chunk. */
static void test_partial_read(void **state) {
  fixture *f = *state;
  assert_int_equal(save_default(f, 0), DCP_OK);
  float part[2 * 3];
  dcp_state *ld;
  assert_int_equal(dcp_state_create(f->ctx, &ld), DCP_OK);
  int64_t shape[2] = {ROWS, COLS}, off[2] = {200, 10}, sz[2] = {2, 3};
  assert_int_equal(dcp_state_add_tensor(ld, "w", DCP_F32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(ld, "w", off, sz, part), DCP_OK);
  assert_int_equal(dcp_load(f->ctx, ld, f->ckpt, NULL), DCP_OK);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) assert_true(part[i * 3 + j] == w_value(200 + i, 10 + j));
  dcp_stats st = {.struct_size = sizeof st};
  dcp_ctx_stats(f->ctx, &st);
  uint64_t meta = file_size(f, ".metadata");
  /* two rows of 200 bytes lie within at most two 4 KiB blocks */
  assert_true(st.bytes_read <= meta + 2 * 4096);
  dcp_state_free(ld);
}

/* Saved pieces adjacent in one data file are fetched in one read when a
 * destination chunk needs them all. */
static void test_coalesced_reads(void **state) {
  fixture *f = *state;
  enum { BANDS = 10 };
  static float w[ROWS * COLS];
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  for (int64_t i = 0; i < ROWS * COLS; i++) w[i] = (float)i;
  int64_t shape[2] = {ROWS, COLS}, rows = ROWS / BANDS;
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), DCP_OK);
  for (int64_t b = 0; b < BANDS; b++) {
    int64_t off[2] = {b * rows, 0}, sz[2] = {rows, COLS};
    assert_int_equal(dcp_state_add_chunk(st, "w", off, sz, w + b * rows * COLS), DCP_OK);
  }
  uint64_t small[3] = {11, 22, 33};
  assert_int_equal(dcp_state_add_bytes(st, "a", DCP_SCOPE_REPLICATED, &small[0], 8), DCP_OK);
  assert_int_equal(dcp_state_add_bytes(st, "b", DCP_SCOPE_REPLICATED, &small[1], 8), DCP_OK);
  assert_int_equal(dcp_state_add_bytes(st, "c", DCP_SCOPE_PER_RANK, &small[2], 8), DCP_OK);
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.block_size = 4096;
  assert_int_equal(dcp_save(f->ctx, st, f->ckpt, &o), DCP_OK);
  dcp_state_free(st);
  memset(small, 0, sizeof small);
  static float all[ROWS * COLS];
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  int64_t zero[2] = {0, 0};
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", zero, shape, all), DCP_OK);
  assert_int_equal(dcp_state_add_bytes(st, "c", DCP_SCOPE_PER_RANK, &small[2], 8), DCP_OK);
  assert_int_equal(dcp_state_add_bytes(st, "b", DCP_SCOPE_REPLICATED, &small[1], 8), DCP_OK);
  assert_int_equal(dcp_state_add_bytes(st, "a", DCP_SCOPE_REPLICATED, &small[0], 8), DCP_OK);
  assert_int_equal(dcp_load(f->ctx, st, f->ckpt, NULL), DCP_OK);
  for (int64_t i = 0; i < ROWS * COLS; i++) assert_true(all[i] == (float)i);
  assert_true(small[0] == 11 && small[1] == 22 && small[2] == 33);
  dcp_stats stats = {.struct_size = sizeof stats};
  dcp_ctx_stats(f->ctx, &stats);
  /* one read of .metadata, one of the ten bands (6000 bytes each), one of
   * the three bytes items */
  assert_int_equal(stats.read_ops, 3);
  assert_int_equal(stats.data_read_bytes, ROWS * COLS * 4 + 24);
  dcp_state_free(st);
}

/* A second save of the same geometry reuses the global plan (no gather or
 * scatter of plans) but writes the current data; a change of shape or of
 * options misses. */
/* 0 means the default in save options: block_size 0 saves in 4 MiB blocks
 * (what an item without rows gets; a chunk's blocks are row-aligned granules
 * no larger, dcpi_block_size_for). */
static void test_zero_means_default(void **state) {
  fixture *f = *state;
  static float w[ROWS * COLS];
  static uint16_t b[33];
  static uint64_t step;
  dcp_state *st = make_saved_state(f, w, b, &step);
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.block_size = 0, o.zstd_level = 0;
  assert_int_equal(dcp_save(f->ctx, st, f->ckpt, &o), DCP_OK);
  dcp_state_free(st);
  dcp_meta *m;
  size_t ti;
  dcp_chunk_info ci;
  assert_int_equal(dcp_meta_open(f->ctx, f->ckpt, &m), DCP_OK);
  assert_int_equal(dcp_meta_find_tensor(m, "w", &ti), DCP_OK);
  assert_int_equal(dcp_meta_chunk(m, ti, 0, &ci), DCP_OK);
  assert_true(ci.ref.block_size <= 4u << 20);
  assert_int_equal(ci.ref.block_size % (COLS * 4), 0);
  dcp_bytes_info bi;
  assert_int_equal(dcp_meta_bytes(m, 0, &bi), DCP_OK); /* "step", the only one */
  assert_int_equal(bi.ref.block_size, 4u << 20);
  dcp_meta_free(m);
}

static void test_plan_cache(void **state) {
  fixture *f = *state;
  static float w[ROWS * COLS];
  static uint16_t b[33];
  static uint64_t step;
  dcp_state *st = make_saved_state(f, w, b, &step);
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.flags = DCP_SAVE_OVERWRITE;
  dcp_stats s1 = {.struct_size = sizeof s1}, s2 = s1, s3 = s1;
  assert_int_equal(dcp_save(f->ctx, st, f->ckpt, &o), DCP_OK);
  dcp_ctx_stats(f->ctx, &s1);
  assert_int_equal(s1.plan_cache_hit, 0);
  w[5] = -1.5f; /* new data, same geometry */
  step = 77;
  assert_int_equal(dcp_save(f->ctx, st, f->ckpt, &o), DCP_OK);
  dcp_ctx_stats(f->ctx, &s2);
  assert_int_equal(s2.plan_cache_hit, 1);
  assert_true(s2.plan_coll_bytes < s1.plan_coll_bytes);
  o.block_size = 8192; /* options are part of the key */
  assert_int_equal(dcp_save(f->ctx, st, f->ckpt, &o), DCP_OK);
  dcp_ctx_stats(f->ctx, &s3);
  assert_int_equal(s3.plan_cache_hit, 0);
  dcp_state_free(st);
  /* what was written is the data of the last save */
  static float back[ROWS * COLS];
  uint64_t step_back = 0;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  int64_t shape[2] = {ROWS, COLS}, zero[2] = {0, 0};
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", zero, shape, back), DCP_OK);
  assert_int_equal(dcp_state_add_bytes(st, "step", DCP_SCOPE_REPLICATED, &step_back, 8), DCP_OK);
  assert_int_equal(dcp_load(f->ctx, st, f->ckpt, NULL), DCP_OK);
  assert_true(back[5] == -1.5f && back[6] == w_value(0, 6));
  assert_int_equal(step_back, 77);
  dcp_state_free(st);
  /* another shape misses */
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  int64_t other[2] = {ROWS, COLS - 1}, sz[2] = {ROWS, COLS - 1};
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 2, other), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", zero, sz, back), DCP_OK);
  o.block_size = 8192;
  assert_int_equal(dcp_save(f->ctx, st, f->ckpt, &o), DCP_OK);
  dcp_ctx_stats(f->ctx, &s3);
  assert_int_equal(s3.plan_cache_hit, 0);
  dcp_state_free(st);
}

/* Detached ranks (no collective) save without any coordination: each
 * commits <rank>.metadata; a load merges them once every rank has. */
static dcp_ctx *detached(fixture *f, int32_t rank, int32_t world) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.rank = rank, cfg.world_size = world, cfg.plugin_path = f->plugins;
  dcp_ctx *ctx;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_OK);
  return ctx;
}

static dcp_status save_rank(dcp_ctx *ctx, const char *path, float *half, float *b, uint64_t *rng,
                            uint32_t flags, uint64_t save_id) {
  int32_t rank = dcp_ctx_rank(ctx);
  dcp_state *st;
  assert_int_equal(dcp_state_create(ctx, &st), DCP_OK);
  int64_t shape[2] = {ROWS, COLS}, off[2] = {rank * ROWS / 2, 0}, sz[2] = {ROWS / 2, COLS};
  int64_t bshape[1] = {COLS}, zero[1] = {0}, mesh[1] = {2};
  uint32_t map[1] = {0}; /* replicated over both ranks */
  dcp_layout *l;
  assert_int_equal(dcp_layout_create(ctx, 1, mesh, NULL, 1, map, &l), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", off, sz, half), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "b.by_hand", DCP_F32, 1, bshape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "b.by_hand", zero, bshape, b), DCP_OK);
  assert_int_equal(dcp_state_add_sharded(st, "b.layout", DCP_F32, 1, bshape, l, b), DCP_OK);
  assert_int_equal(dcp_state_add_bytes(st, "rng", DCP_SCOPE_PER_RANK, rng, 8), DCP_OK);
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.flags = flags;
  o.save_id = save_id;
  dcp_status rc = dcp_save(ctx, st, path, &o);
  dcp_state_free(st);
  dcp_layout_free(l);
  return rc;
}

/* Flip one bit of the stored bytes of the copy of b.by_hand that rank r's
 * part records (the merged view keeps only one of the two). */
static void flip_rank_copy(const fixture *f, int r) {
  char p[PATH_MAX + 64], prefix[32], part[256];
  snprintf(prefix, sizeof prefix, "%d-of-", r);
  assert_int_equal(ck_find(f->ckpt, prefix, ".metadata", part, sizeof part), 1);
  snprintf(p, sizeof p, "%s/%s", f->ckpt, part);
  FILE *fp = fopen(p, "rb");
  assert_non_null(fp);
  static uint8_t buf[1 << 16];
  size_t len = fread(buf, 1, sizeof buf, fp);
  fclose(fp);
  dcp_meta *m;
  assert_int_equal(dcp_meta_open_memory(f->ctx, buf, len, &m), DCP_OK);
  size_t ti;
  dcp_chunk_info ci;
  const char *file;
  assert_int_equal(dcp_meta_find_tensor(m, "b.by_hand", &ti), DCP_OK);
  assert_int_equal(dcp_meta_chunk(m, ti, 0, &ci), DCP_OK);
  assert_int_equal(dcp_meta_file(m, ci.ref.file, &file), DCP_OK);
  snprintf(p, sizeof p, "%s/%s", f->ckpt, file);
  int fd = open(p, O_RDWR);
  uint8_t byte;
  assert_int_equal(pread(fd, &byte, 1, (off_t)ci.ref.offset + 3), 1);
  byte ^= 0x10;
  assert_int_equal(pwrite(fd, &byte, 1, (off_t)ci.ref.offset + 3), 1);
  close(fd);
  dcp_meta_free(m);
}

/* dcp_verify of an uncoordinated checkpoint reads every copy, also those
 * the merged view (and so a load) never uses. */
static void check_verify_reads_every_copy(const fixture *f) {
  dcp_verify_report rep = {.struct_size = sizeof rep};
  assert_int_equal(dcp_verify(f->ctx, f->ckpt, &rep), DCP_OK);
  assert_int_equal(rep.chunks, 2 + 1 + 1 + 1); /* w halves, b.by_hand twice, b.layout */
  for (int r = 0; r < 2; r++) {
    flip_rank_copy(f, r);
    assert_int_equal(dcp_verify(f->ctx, f->ckpt, &rep), DCP_ECORRUPT);
    assert_non_null(strstr(rep.first_problem, "b.by_hand"));
    flip_rank_copy(f, r); /* and back */
  }
  assert_int_equal(dcp_verify(f->ctx, f->ckpt, &rep), DCP_OK);
}

static void test_uncoordinated(void **state) {
  fixture *f = *state;
  static float w[ROWS * COLS], b[COLS];
  for (int64_t i = 0; i < ROWS * COLS; i++) w[i] = (float)i;
  for (int64_t j = 0; j < COLS; j++) b[j] = (float)-j;
  uint64_t rng[2] = {1000, 1001};
  dcp_ctx *r0 = detached(f, 0, 2), *r1 = detached(f, 1, 2);
  assert_int_equal(save_rank(r0, f->ckpt, w, b, &rng[0], 0, 1), DCP_OK);
  dcp_stats s0 = {.struct_size = sizeof s0}, s1 = s0;
  dcp_ctx_stats(r0, &s0);
  /* rank 1 has not committed yet: a load refuses and names it */
  static float all[ROWS * COLS], bb[COLS], bl[COLS];
  dcp_state *ld;
  int64_t shape[2] = {ROWS, COLS}, zero2[2] = {0, 0}, bshape[1] = {COLS}, zero[1] = {0};
  assert_int_equal(dcp_state_create(f->ctx, &ld), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(ld, "w", DCP_F32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(ld, "w", zero2, shape, all), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(ld, "b.by_hand", DCP_F32, 1, bshape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(ld, "b.by_hand", zero, bshape, bb), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(ld, "b.layout", DCP_F32, 1, bshape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(ld, "b.layout", zero, bshape, bl), DCP_OK);
  assert_int_equal(dcp_load(f->ctx, ld, f->ckpt, NULL), DCP_EINCOMPLETE);
  assert_non_null(strstr(dcp_ctx_last_error(f->ctx), "(1)"));
  assert_int_equal(save_rank(r1, f->ckpt, w + ROWS / 2 * COLS, b, &rng[1], 0, 1), DCP_OK);
  dcp_ctx_stats(r1, &s1);
  /* the layout-replicated vector is written by one rank only; the one
   * added by hand by both (the merge keeps one) */
  assert_int_equal(s0.items_written + s1.items_written, 2 + 2 + 1 + 2);
  assert_int_equal(dcp_load(f->ctx, ld, f->ckpt, NULL), DCP_OK);
  for (int64_t i = 0; i < ROWS * COLS; i++) assert_true(all[i] == (float)i);
  for (int64_t j = 0; j < COLS; j++) assert_true(bb[j] == (float)-j && bl[j] == (float)-j);
  check_verify_reads_every_copy(f);
  dcp_meta *m;
  assert_int_equal(dcp_meta_open(f->ctx, f->ckpt, &m), DCP_OK);
  assert_int_equal(dcp_meta_world_size(m), 2);
  assert_int_equal(dcp_meta_file_count(m), 2);
  assert_int_equal(dcp_meta_bytes_count(m), 2); /* rng of rank 0 and of rank 1 */
  dcp_meta_free(m);
  /* per-rank bytes need the saving world: this world of one cannot take them */
  uint64_t mine = 0;
  assert_int_equal(dcp_state_add_bytes(ld, "rng", DCP_SCOPE_PER_RANK, &mine, 8), DCP_OK);
  assert_int_equal(dcp_load(f->ctx, ld, f->ckpt, NULL), DCP_ESCOPE);
  dcp_state_free(ld);
  /* committed ranks are not overwritten unless asked */
  assert_int_equal(save_rank(r0, f->ckpt, w, b, &rng[0], 0, 2), DCP_EEXIST);
  assert_int_equal(save_rank(r0, f->ckpt, w, b, &rng[0], DCP_SAVE_OVERWRITE, 2), DCP_OK);
  /* without a save_id nothing says which parts belong together */
  assert_int_equal(save_rank(r0, f->ckpt, w, b, &rng[0], DCP_SAVE_OVERWRITE, 0), DCP_EINVAL);
  assert_non_null(strstr(dcp_ctx_last_error(r0), "save_id"));
  /* a coordinated save replaces an uncoordinated checkpoint only when asked,
   * and then leaves no per-rank metadata behind */
  assert_int_equal(save_default(f, 0), DCP_EEXIST);
  assert_int_equal(save_default(f, DCP_SAVE_OVERWRITE), DCP_OK);
  assert_int_equal(ck_parts_of_rank(f->ckpt, 0), 0);
  assert_int_equal(ck_parts_of_rank(f->ckpt, 1), 0);
  assert_int_equal(ck_find(f->ckpt, "data-", ".dcp", NULL, 0), 1); /* the new save's only */
  dcp_ctx_free(r0);
  dcp_ctx_free(r1);
}

static void test_commit_rules(void **state) {
  fixture *f = *state;
  dcp_state *ld;
  assert_int_equal(dcp_state_create(f->ctx, &ld), DCP_OK);
  assert_int_equal(dcp_load(f->ctx, ld, f->ckpt, NULL), DCP_ENOTFOUND); /* no directory */
  assert_int_equal(save_default(f, 0), DCP_OK);
  assert_int_equal(save_default(f, 0), DCP_EEXIST);
  assert_non_null(strstr(dcp_ctx_last_error(f->ctx), "DCP_SAVE_OVERWRITE"));
  /* a failed save's leftovers, and the metadata removed = not committed */
  char p[PATH_MAX + 64];
  snprintf(p, sizeof p, "%s/data-00007.dcp", f->ckpt);
  FILE *junk = fopen(p, "w");
  fputs("junk", junk);
  fclose(junk);
  assert_int_equal(save_default(f, DCP_SAVE_OVERWRITE), DCP_OK);
  assert_int_equal(file_size(f, "data-00007.dcp"), 0); /* cleaned up */
  assert_int_equal(access(p, F_OK), -1);
  snprintf(p, sizeof p, "%s/.metadata", f->ckpt);
  assert_int_equal(unlink(p), 0);
  assert_int_equal(dcp_load(f->ctx, ld, f->ckpt, NULL), DCP_EINCOMPLETE);
  assert_non_null(strstr(dcp_ctx_last_error(f->ctx), "incomplete"));
  dcp_state_free(ld);
}

/* Load the whole of "w" into scratch memory; the load's status. */
static dcp_status load_whole_w(fixture *f) {
  static float all[ROWS * COLS];
  dcp_state *ld;
  assert_int_equal(dcp_state_create(f->ctx, &ld), DCP_OK);
  int64_t shape[2] = {ROWS, COLS}, off[2] = {0, 0};
  assert_int_equal(dcp_state_add_tensor(ld, "w", DCP_F32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(ld, "w", off, shape, all), DCP_OK);
  dcp_status rc = dcp_load(f->ctx, ld, f->ckpt, NULL);
  dcp_state_free(ld);
  return rc;
}

/* Flip one byte of the data file: the load names the tensor and box. */
static void test_corrupt_block(void **state) {
  fixture *f = *state;
  assert_int_equal(save_default(f, 0), DCP_OK);
  char p[PATH_MAX + 64];
  assert_true(ck_data_file(f->ckpt, 0, p, sizeof p));
  int fd = open(p, O_RDWR);
  assert_true(fd >= 0);
  uint8_t byte;
  off_t at = 130 * COLS * 4 + 17; /* inside the second row band of "w" */
  assert_int_equal(pread(fd, &byte, 1, at), 1);
  byte ^= 0x10;
  assert_int_equal(pwrite(fd, &byte, 1, at), 1);
  close(fd);
  assert_int_equal(load_whole_w(f), DCP_ECORRUPT);
  const char *msg = dcp_ctx_last_error(f->ctx);
  assert_non_null(strstr(msg, "'w'"));
  assert_non_null(strstr(msg, "[120:300, 0:50]"));
  assert_non_null(strstr(msg, "data-00000."));
}

/* A data file deleted from a committed checkpoint: the same .metadata is
 * read again, so the load fails DCP_EINCOMPLETE naming the file at its
 * second attempt, instead of taking it for a save that replaced the
 * checkpoint (DCP_ESTALE after four attempts). */
static void test_missing_data_file(void **state) {
  fixture *f = *state;
  assert_int_equal(save_default(f, 0), DCP_OK);
  char p[PATH_MAX + 64];
  assert_true(ck_data_file(f->ckpt, 0, p, sizeof p));
  assert_int_equal(unlink(p), 0);
  assert_int_equal(load_whole_w(f), DCP_EINCOMPLETE);
  const char *msg = dcp_ctx_last_error(f->ctx);
  assert_non_null(strstr(msg, "is missing"));
  assert_non_null(strstr(msg, "data-00000."));
  assert_null(strstr(msg, "replaced"));
}

static void test_mismatches(void **state) {
  fixture *f = *state;
  assert_int_equal(save_default(f, 0), DCP_OK);
  float buf[ROWS * COLS];
  int64_t shape[2] = {ROWS, COLS}, other[2] = {ROWS, COLS + 1}, off[2] = {0, 0};
  struct { const char *fqn; dcp_dtype dt; const int64_t *shape; dcp_status want; } cases[] = {
      {"nope", DCP_F32, shape, DCP_ENOTFOUND},
      {"w", DCP_F16, shape, DCP_EMISMATCH},
      {"w", DCP_F32, other, DCP_EMISMATCH},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dcp_state *ld;
    assert_int_equal(dcp_state_create(f->ctx, &ld), DCP_OK);
    int64_t sz[2] = {1, 1};
    assert_int_equal(dcp_state_add_tensor(ld, cases[i].fqn, cases[i].dt, 2, cases[i].shape), DCP_OK);
    assert_int_equal(dcp_state_add_chunk(ld, cases[i].fqn, off, sz, buf), DCP_OK);
    assert_int_equal(dcp_load(f->ctx, ld, f->ckpt, NULL), cases[i].want);
    assert_non_null(strstr(dcp_ctx_last_error(f->ctx), cases[i].fqn));
    dcp_state_free(ld);
  }
  uint64_t wide[2];
  struct { const char *key; dcp_scope scope; size_t len; dcp_status want; } bcases[] = {
      {"step", DCP_SCOPE_REPLICATED, 16, DCP_EMISMATCH},
      {"step", DCP_SCOPE_PER_RANK, 8, DCP_ESCOPE},
      {"epoch", DCP_SCOPE_REPLICATED, 8, DCP_ENOTFOUND},
  };
  for (size_t i = 0; i < sizeof bcases / sizeof bcases[0]; i++) {
    dcp_state *ld;
    assert_int_equal(dcp_state_create(f->ctx, &ld), DCP_OK);
    assert_int_equal(dcp_state_add_bytes(ld, bcases[i].key, bcases[i].scope, wide, bcases[i].len),
                     DCP_OK);
    assert_int_equal(dcp_load(f->ctx, ld, f->ckpt, NULL), bcases[i].want);
    assert_non_null(strstr(dcp_ctx_last_error(f->ctx), bcases[i].key));
    dcp_state_free(ld);
  }
}

static void test_meta_open(void **state) {
  fixture *f = *state;
  dcp_meta *m;
  assert_int_equal(dcp_meta_open(f->ctx, f->ckpt, &m), DCP_ENOTFOUND);
  assert_int_equal(save_default(f, 0), DCP_OK);
  assert_int_equal(dcp_meta_open(f->ctx, f->ckpt, &m), DCP_OK);
  assert_int_equal(dcp_meta_tensor_count(m), 2);
  assert_int_equal(dcp_meta_world_size(m), 1);
  assert_int_equal(dcp_meta_file_count(m), 1);
  size_t ti;
  assert_int_equal(dcp_meta_find_tensor(m, "w", &ti), DCP_OK);
  dcp_tensor_info info;
  assert_int_equal(dcp_meta_tensor(m, ti, &info), DCP_OK);
  assert_int_equal(info.chunk_count, 2);
  dcp_chunk_info ci;
  assert_int_equal(dcp_meta_chunk(m, ti, 1, &ci), DCP_OK);
  assert_int_equal(ci.box.offset[0], 120);
  assert_int_equal(ci.ref.raw_length, (ROWS - 120) * COLS * 4);
  assert_int_equal(ci.ref.block_count, ((ROWS - 120) * COLS * 4 + 4095) / 4096);
  dcp_meta_free(m);
}

/* Without a storage name the default ("posix") is looked up at the first
 * save, on the context's plugin_path too. */
static void test_default_storage(void **state) {
  fixture *f = *state;
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.plugin_path = f->plugins;
  dcp_ctx *ctx;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_OK);
  dcp_state *st;
  assert_int_equal(dcp_state_create(ctx, &st), DCP_OK);
  uint32_t v = 7;
  assert_int_equal(dcp_state_add_bytes(st, "v", DCP_SCOPE_REPLICATED, &v, sizeof v), DCP_OK);
  assert_int_equal(dcp_save(ctx, st, f->ckpt, NULL), DCP_OK);
  v = 0;
  assert_int_equal(dcp_load(ctx, st, f->ckpt, NULL), DCP_OK);
  assert_int_equal(v, 7);
  dcp_state_free(st);
  dcp_ctx_free(ctx);
}

static void test_plugin_not_found(void **state) {
  fixture *f = *state;
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.storage = "nosuchstore";
  cfg.plugin_path = f->plugins;
  dcp_ctx *ctx;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_EPLUGIN);
  assert_null(ctx);
  assert_non_null(strstr(dcp_ctx_create_error(), "dcp-storage-nosuchstore.so"));
  assert_non_null(strstr(dcp_ctx_create_error(), f->plugins));
  cfg.storage = NULL;
  cfg.world_size = 2;
  cfg.coll = "nosuchcoll";
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_EPLUGIN);
  assert_non_null(strstr(dcp_ctx_create_error(), "dcp-coll-nosuchcoll.so"));
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_roundtrip_raw, setup, teardown),
      cmocka_unit_test_setup_teardown(test_roundtrip_zstd, setup, teardown),
      cmocka_unit_test_setup_teardown(test_partial_read, setup, teardown),
      cmocka_unit_test_setup_teardown(test_coalesced_reads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_plan_cache, setup, teardown),
      cmocka_unit_test_setup_teardown(test_uncoordinated, setup, teardown),
      cmocka_unit_test_setup_teardown(test_commit_rules, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corrupt_block, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_data_file, setup, teardown),
      cmocka_unit_test_setup_teardown(test_zero_means_default, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mismatches, setup, teardown),
      cmocka_unit_test_setup_teardown(test_meta_open, setup, teardown),
      cmocka_unit_test_setup_teardown(test_default_storage, setup, teardown),
      cmocka_unit_test_setup_teardown(test_plugin_not_found, setup, teardown),
  };
  return TU_RUN(tests, NULL, NULL);
}

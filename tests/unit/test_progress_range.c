/* Phase progress (dcp_ctx_set_phase_progress) of dcp_save, dcp_load, the
 * export and verify, and ranged tensor reads (dcp_read_tensor_range, the
 * window assembly the export and `dcp diff` stream through) against the
 * row-major image, over chunkings that split rows, columns and both. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fixture {
  dcp_ctx *ctx;
  char dir[256];
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  char plugins[512];
  f->ctx = tu_scratch_ctx("dcp-prog", f->dir, sizeof f->dir, plugins, sizeof plugins);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  dcp_ctx_free(f->ctx);
  tu_remove_tree(f->dir);
  free(f);
  return 0;
}

/* Every report, in order. */
typedef struct report {
  dcp_phase phase;
  uint64_t done, total;
} report;

typedef struct prog_log {
  report r[4096];
  size_t n;
} log_t;

static void record(void *arg, dcp_phase phase, uint64_t done, uint64_t total) {
  log_t *l = arg;
  if (l->n < sizeof l->r / sizeof l->r[0]) l->r[l->n++] = (report){phase, done, total};
}

/* The reports of phase: done never goes back, total never changes, the
 * last has done == total == want. Returns how many there were. */
static size_t check_phase(const log_t *l, dcp_phase phase, uint64_t want) {
  size_t n = 0;
  uint64_t last = 0;
  for (size_t i = 0; i < l->n; i++) {
    if (l->r[i].phase != phase) continue;
    assert_true(l->r[i].done >= last);
    assert_true(l->r[i].done <= l->r[i].total);
    assert_int_equal(l->r[i].total, want);
    last = l->r[i].done;
    n++;
  }
  assert_true(n > 0);
  assert_int_equal(last, want);
  return n;
}

enum { R = 37, C = 53 }; /* odd sizes: windows and rows never line up */

static float image(int64_t r, int64_t c) { return (float)(r * 1000 + c); }

/* Tensor "w" [R, C] F32 in 6 chunks: rows [0, 20) split in 3 column bands,
 * rows [20, 37) in 2 column bands and, below, nothing else. Plus bytes. */
static void save_w(fixture *f, const char *name, log_t *l, uint64_t *bytes) {
  static const int64_t cuts[][4] = {{0, 20, 0, 10},  {0, 20, 10, 31}, {0, 20, 31, C},
                                    {20, R, 0, 40},  {20, R, 40, C}};
  char path[512];
  snprintf(path, sizeof path, "%s/%s", f->dir, name);
  dcp_state *st;
  int64_t shape[2] = {R, C};
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), DCP_OK);
  float *parts[5];
  for (int k = 0; k < 5; k++) {
    int64_t r0 = cuts[k][0], r1 = cuts[k][1], c0 = cuts[k][2], c1 = cuts[k][3];
    parts[k] = malloc((size_t)((r1 - r0) * (c1 - c0)) * sizeof(float));
    for (int64_t r = r0; r < r1; r++)
      for (int64_t c = c0; c < c1; c++) parts[k][(r - r0) * (c1 - c0) + (c - c0)] = image(r, c);
    int64_t off[2] = {r0, c0}, size[2] = {r1 - r0, c1 - c0};
    assert_int_equal(dcp_state_add_chunk(st, "w", off, size, parts[k]), DCP_OK);
  }
  char step[8] = "step-42";
  assert_int_equal(dcp_state_add_bytes(st, "step", DCP_SCOPE_REPLICATED, step, sizeof step),
                   DCP_OK);
  dcp_ctx_set_phase_progress(f->ctx, record, l);
  assert_int_equal(dcp_save(f->ctx, st, path, NULL), DCP_OK);
  dcp_ctx_set_phase_progress(f->ctx, NULL, NULL);
  *bytes = R * C * sizeof(float) + sizeof step;
  for (int k = 0; k < 5; k++) free(parts[k]);
  dcp_state_free(st);
}

static void test_save_load_export_verify_report(void **state) {
  fixture *f = *state;
  log_t *l = calloc(1, sizeof *l);
  uint64_t saved;
  save_w(f, "ck", l, &saved);
  assert_true(check_phase(l, DCP_PHASE_SAVE_WRITE, saved) >= 6); /* one per piece */
  char path[512], out[512];
  snprintf(path, sizeof path, "%s/ck", f->dir);
  snprintf(out, sizeof out, "%s/st", f->dir);

  /* load: rows [5, 30) as one chunk, reading across all five saved ones */
  l->n = 0;
  dcp_state *st;
  float *buf = calloc(25 * C, sizeof *buf);
  int64_t shape[2] = {R, C}, off[2] = {5, 0}, size[2] = {25, C};
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", off, size, buf), DCP_OK);
  dcp_ctx_set_phase_progress(f->ctx, record, l);
  assert_int_equal(dcp_load(f->ctx, st, path, NULL), DCP_OK);
  check_phase(l, DCP_PHASE_LOAD_READ, 25 * C * sizeof(float));
  for (int64_t r = 5; r < 30; r++)
    for (int64_t c = 0; c < C; c++) assert_true(buf[(r - 5) * C + c] == image(r, c));

  l->n = 0;
  assert_int_equal(dcp_export_safetensors(f->ctx, path, out, 0), DCP_OK);
  check_phase(l, DCP_PHASE_EXPORT, R * C * sizeof(float));
  l->n = 0;
  dcp_verify_report rep = {.struct_size = sizeof rep};
  assert_int_equal(dcp_verify(f->ctx, path, &rep), DCP_OK);
  check_phase(l, DCP_PHASE_VERIFY, saved);
  for (size_t i = 0; i < l->n; i++) assert_int_equal(l->r[i].phase, DCP_PHASE_VERIFY);

  /* switched off: nothing more */
  dcp_ctx_set_phase_progress(f->ctx, NULL, NULL);
  l->n = 0;
  assert_int_equal(dcp_verify(f->ctx, path, &rep), DCP_OK);
  assert_int_equal(l->n, 0);
  assert_string_equal(dcp_phase_name(DCP_PHASE_SAVE_WRITE), "save");
  assert_string_equal(dcp_phase_name(DCP_PHASE_LOAD_READ), "load");
  assert_string_equal(dcp_phase_name((dcp_phase)99), "unknown");
  dcp_ctx_set_phase_progress(NULL, record, l); /* a no-op */
  dcp_state_free(st);
  free(buf);
  free(l);
}

/* Property: any window of the tensor's bytes equals the same bytes of its
 * row-major image, whatever chunks it spans and wherever it starts (also
 * in the middle of an element). Out-of-range windows are DCP_EINVAL. */
static void test_ranges_match_the_image(void **state) {
  fixture *f = *state;
  log_t *l = calloc(1, sizeof *l);
  uint64_t saved;
  save_w(f, "rk", l, &saved);
  char path[512];
  snprintf(path, sizeof path, "%s/rk", f->dir);
  dcp_meta *m;
  assert_int_equal(dcp_meta_open(f->ctx, path, &m), DCP_OK);
  size_t total = R * C * sizeof(float);
  float *img = malloc(total);
  for (int64_t r = 0; r < R; r++)
    for (int64_t c = 0; c < C; c++) img[r * C + c] = image(r, c);
  uint8_t *got = malloc(total);
  assert_int_equal(dcp_read_tensor_range(f->ctx, path, m, 0, 0, got, total), DCP_OK);
  assert_memory_equal(got, img, total);
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(17));
  for (int i = 0; i < 300; i++) {
    size_t off = (size_t)tu_rng_range(&rng, 0, (int64_t)total);
    size_t len = (size_t)tu_rng_range(&rng, 0, (int64_t)(total - off));
    memset(got, 0xEE, total);
    assert_int_equal(dcp_read_tensor_range(f->ctx, path, m, 0, off, got, len), DCP_OK);
    assert_memory_equal(got, (const uint8_t *)img + off, len);
    assert_int_equal(got[len], 0xEE); /* nothing written past the window */
  }
  assert_int_equal(dcp_read_tensor_range(f->ctx, path, m, 0, total, got, 0), DCP_OK);
  assert_int_equal(dcp_read_tensor_range(f->ctx, path, m, 0, total - 3, got, 4), DCP_EINVAL);
  assert_non_null(strstr(dcp_ctx_last_error(f->ctx), "lies outside"));
  assert_int_equal(dcp_read_tensor_range(f->ctx, path, m, 0, UINT64_MAX, got, 1), DCP_EINVAL);
  assert_int_equal(dcp_read_tensor_range(f->ctx, path, m, 7, 0, got, 1), DCP_ENOTFOUND);
  assert_int_equal(dcp_read_tensor_range(f->ctx, path, NULL, 0, 0, got, 1), DCP_EINVAL);
  dcp_meta_free(m);
  free(img);
  free(got);
  free(l);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_save_load_export_verify_report, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ranges_match_the_image, setup, teardown),
  };
  return TU_RUN(tests, NULL, NULL);
}

/* test_flat.c — dcp_flat_to_boxes covers exactly the flat range, in
 * row-major order, with at most 2*ndim-1 boxes, element by element against
 * the region's row-major enumeration; and its errors. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MAXOUT (2 * DCP_MAX_NDIM - 1)

/* Global coordinates of the i-th element of region reg (row-major). */
static void region_point(const dcp_box *reg, int64_t i, int64_t *p) {
  for (uint32_t d = reg->ndim; d-- > 0;) {
    p[d] = reg->offset[d] + i % reg->size[d];
    i /= reg->size[d];
  }
}

static void check_range(const dcp_box *reg, int64_t begin, int64_t count) {
  dcp_box out[MAXOUT];
  size_t n = 99;
  uint32_t nd = reg->ndim;
  assert_int_equal(dcp_flat_to_boxes(reg, begin, count, out, MAXOUT, &n), DCP_OK);
  size_t limit = nd ? 2 * (size_t)nd - 1 : 1;
  assert_true(n <= limit);
  if (count == 0) assert_int_equal(n, 0);
  /* walk the boxes in order, each row-major, beside the region's order */
  int64_t next = begin, p[DCP_MAX_NDIM], q[DCP_MAX_NDIM];
  for (size_t b = 0; b < n; b++) {
    int64_t numel;
    assert_int_equal(out[b].ndim, nd);
    assert_int_equal(dcp_box_numel(&out[b], &numel), DCP_OK);
    assert_true(numel > 0);
    for (int64_t i = 0; i < numel; i++, next++) {
      assert_true(next < begin + count);
      int64_t rest = i;
      for (uint32_t d = nd; d-- > 0;) {
        p[d] = out[b].offset[d] + rest % out[b].size[d];
        rest /= out[b].size[d];
      }
      region_point(reg, next, q);
      assert_memory_equal(p, q, nd * sizeof *p);
    }
  }
  assert_int_equal(next, begin + count);
}

/* Random regions (sub-boxes of a random tensor) and random ranges. */
static void test_random(void **state) {
  (void)state;
  tu_rng r;
  tu_rng_seed(&r, tu_seed(2));
  for (int it = 0; it < 6000; it++) {
    uint32_t nd = (uint32_t)tu_rng_range(&r, 0, 5);
    dcp_box reg = {.ndim = nd};
    for (uint32_t d = 0; d < nd; d++) {
      int64_t ext = tu_rng_range(&r, 0, 5);
      reg.offset[d] = tu_rng_range(&r, 0, ext);
      reg.size[d] = tu_rng_range(&r, 0, ext - reg.offset[d]);
      if (it % 3 == 0) reg.offset[d] = 0, reg.size[d] = ext; /* a whole tensor */
    }
    int64_t numel;
    assert_int_equal(dcp_box_numel(&reg, &numel), DCP_OK);
    int64_t begin = tu_rng_range(&r, 0, numel);
    int64_t count = tu_rng_range(&r, 0, numel - begin);
    if (it % 7 == 0) begin = 0, count = numel;
    check_range(&reg, begin, count);
  }
}

/* The worst case is reached: a range cutting mid-row at both ends of a
 * 3-d region needs 5 boxes. */
static void test_worst_case(void **state) {
  (void)state;
  dcp_box reg = {.ndim = 3, .offset = {1, 2, 3}, .size = {4, 3, 5}}, out[MAXOUT];
  size_t n;
  assert_int_equal(dcp_flat_to_boxes(&reg, 1, 58, out, 5, &n), DCP_OK);
  assert_int_equal(n, 5);
  check_range(&reg, 1, 58);
}

static void test_errors(void **state) {
  (void)state;
  dcp_box reg = {.ndim = 2, .size = {3, 4}}, out[MAXOUT];
  size_t n;
  assert_int_equal(dcp_flat_to_boxes(&reg, 5, 8, out, MAXOUT, &n), DCP_EBOUNDS);
  assert_int_equal(dcp_flat_to_boxes(&reg, 13, 0, out, MAXOUT, &n), DCP_EBOUNDS);
  assert_int_equal(dcp_flat_to_boxes(&reg, 12, 0, out, MAXOUT, &n), DCP_OK);
  assert_int_equal(n, 0);
  assert_int_equal(dcp_flat_to_boxes(&reg, 0, 12, out, 2, &n), DCP_EINVAL); /* cap < 3 */
  assert_int_equal(dcp_flat_to_boxes(&reg, 0, 12, out, 3, &n), DCP_OK);
  assert_int_equal(dcp_flat_to_boxes(&reg, -1, 2, out, MAXOUT, &n), DCP_EINVAL);
  assert_int_equal(dcp_flat_to_boxes(&reg, 0, -2, out, MAXOUT, &n), DCP_EINVAL);
  assert_int_equal(dcp_flat_to_boxes(&reg, INT64_MAX, 1, out, MAXOUT, &n), DCP_EOVERFLOW);
  assert_int_equal(dcp_flat_to_boxes(NULL, 0, 1, out, MAXOUT, &n), DCP_EINVAL);
  assert_int_equal(dcp_flat_to_boxes(&reg, 0, 1, NULL, MAXOUT, &n), DCP_EINVAL);
  assert_int_equal(dcp_flat_to_boxes(&reg, 0, 1, out, MAXOUT, NULL), DCP_EINVAL);
  dcp_box big = {.ndim = 2, .size = {INT64_C(1) << 40, INT64_C(1) << 40}};
  assert_int_equal(dcp_flat_to_boxes(&big, 0, 1, out, MAXOUT, &n), DCP_EOVERFLOW);
  dcp_box bad = {.ndim = 1, .offset = {-1}, .size = {3}};
  assert_int_equal(dcp_flat_to_boxes(&bad, 0, 1, out, MAXOUT, &n), DCP_EINVAL);
  dcp_box scalar = {.ndim = 0};
  assert_int_equal(dcp_flat_to_boxes(&scalar, 0, 1, out, 1, &n), DCP_OK);
  assert_int_equal(n, 1);
  assert_int_equal(dcp_flat_to_boxes(&scalar, 0, 2, out, 1, &n), DCP_EBOUNDS);
  assert_int_equal(dcp_flat_to_boxes(&scalar, 0, 1, out, 0, &n), DCP_EINVAL);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random),
      cmocka_unit_test(test_worst_case),
      cmocka_unit_test(test_errors),
  };
  return TU_RUN(tests, NULL, NULL);
}

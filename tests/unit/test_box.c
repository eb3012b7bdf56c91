/* test_box.c — dcp_box_intersect and dcp_box_numel against brute-force
 * element sets on random boxes, plus overflow and invalid input. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define GRID 10 /* every coordinate of the random boxes lies in [0, GRID) */

static dcp_box random_box(tu_rng *r, uint32_t nd) {
  dcp_box b = {.ndim = nd};
  for (uint32_t d = 0; d < nd; d++) {
    b.offset[d] = tu_rng_range(r, 0, 6);
    b.size[d] = tu_rng_range(r, 0, GRID - b.offset[d] - 1 < 4 ? GRID - b.offset[d] - 1 : 4);
  }
  return b;
}

/* Visit every point of [0, GRID)^nd; f returns its contribution. */
static int64_t count_points(uint32_t nd, const dcp_box *a, const dcp_box *b, const dcp_box *o,
                            int mode) {
  int64_t p[4] = {0}, total = 1, n = 0;
  for (uint32_t d = 0; d < nd; d++) total *= GRID;
  for (int64_t i = 0; i < total; i++) {
    int64_t rest = i;
    for (uint32_t d = nd; d-- > 0;) p[d] = rest % GRID, rest /= GRID;
    int ia = tu_box_contains(a, p), ib = b ? tu_box_contains(b, p) : 1;
    if (mode == 0) n += ia;                                /* |a| */
    if (mode == 1) n += ia && ib;                          /* |a ∩ b| */
    if (mode == 2) n += (ia && ib) != tu_box_contains(o, p); /* disagreements */
  }
  return n;
}

static void test_random_intersect(void **state) {
  (void)state;
  tu_rng r;
  tu_rng_seed(&r, tu_seed(1));
  for (int it = 0; it < 5000; it++) {
    uint32_t nd = (uint32_t)tu_rng_range(&r, 0, 4);
    dcp_box a = random_box(&r, nd), b = random_box(&r, nd), o;
    int64_t na, ni;
    assert_int_equal(dcp_box_numel(&a, &na), DCP_OK);
    assert_int_equal(na, count_points(nd, &a, NULL, NULL, 0));
    int rc = dcp_box_intersect(&a, &b, &o);
    int64_t both = count_points(nd, &a, &b, NULL, 1);
    assert_int_equal(rc, both > 0 ? 1 : 0);
    assert_int_equal(o.ndim, nd);
    assert_int_equal(dcp_box_numel(&o, &ni), DCP_OK);
    if (rc == 1) {
      assert_int_equal(ni, both);
      assert_int_equal(count_points(nd, &a, &b, &o, 2), 0);
    } else {
      assert_int_equal(ni, 0);
      for (uint32_t d = 0; d < nd; d++) { /* zero size exactly where they miss */
        int miss = a.offset[d] + a.size[d] <= b.offset[d] ||
                   b.offset[d] + b.size[d] <= a.offset[d] || !a.size[d] || !b.size[d];
        if (miss) assert_int_equal(o.size[d], 0);
      }
    }
    /* symmetric, and out may alias an input */
    dcp_box o2, c = a;
    assert_int_equal(dcp_box_intersect(&b, &a, &o2), rc);
    assert_int_equal(dcp_box_intersect(&c, &b, &c), rc);
    if (rc == 1) {
      assert_memory_equal(o2.offset, o.offset, nd * sizeof(int64_t));
      assert_memory_equal(c.size, o.size, nd * sizeof(int64_t));
    }
  }
}

static void test_scalar(void **state) {
  (void)state;
  dcp_box a = {.ndim = 0}, o;
  int64_t n = -1;
  assert_int_equal(dcp_box_numel(&a, &n), DCP_OK);
  assert_int_equal(n, 1);
  assert_int_equal(dcp_box_intersect(&a, &a, &o), 1);
}

static void test_overflow_invalid(void **state) {
  (void)state;
  dcp_box a = {.ndim = 2, .offset = {0, 0}, .size = {INT64_C(1) << 32, INT64_C(1) << 32}}, o;
  int64_t n;
  assert_int_equal(dcp_box_numel(&a, &n), DCP_EOVERFLOW);
  a.size[1] = INT64_C(1) << 30; /* 2^62 fits */
  assert_int_equal(dcp_box_numel(&a, &n), DCP_OK);
  assert_int_equal(n, INT64_C(1) << 62);
  a.offset[0] = INT64_MAX, a.size[0] = 1; /* offset+size overflows */
  assert_int_equal(dcp_box_numel(&a, &n), DCP_EOVERFLOW);
  assert_int_equal(dcp_box_intersect(&a, &a, &o), DCP_EINVAL);
  a.offset[0] = INT64_MAX, a.size[0] = 0; /* ends exactly at INT64_MAX: fine */
  assert_int_equal(dcp_box_numel(&a, &n), DCP_OK);
  assert_int_equal(n, 0);
  dcp_box b = {.ndim = 1, .offset = {-1}, .size = {2}};
  assert_int_equal(dcp_box_numel(&b, &n), DCP_EINVAL);
  b.offset[0] = 0, b.size[0] = -2;
  assert_int_equal(dcp_box_numel(&b, &n), DCP_EINVAL);
  assert_int_equal(dcp_box_intersect(&b, &b, &o), DCP_EINVAL);
  b.size[0] = 2;
  dcp_box c = {.ndim = 2, .size = {1, 1}};
  assert_int_equal(dcp_box_intersect(&b, &c, &o), DCP_EINVAL); /* ndim differs */
  assert_int_equal(dcp_box_intersect(&b, &b, NULL), DCP_EINVAL);
  assert_int_equal(dcp_box_intersect(NULL, &b, &o), DCP_EINVAL);
  c.ndim = DCP_MAX_NDIM + 1;
  assert_int_equal(dcp_box_numel(&c, &n), DCP_EINVAL);
  assert_int_equal(dcp_box_numel(NULL, &n), DCP_EINVAL);
  assert_int_equal(dcp_box_numel(&b, NULL), DCP_EINVAL);
  dcp_box full = {.ndim = DCP_MAX_NDIM};
  for (int d = 0; d < DCP_MAX_NDIM; d++) full.size[d] = 2;
  assert_int_equal(dcp_box_numel(&full, &n), DCP_OK);
  assert_int_equal(n, 1 << DCP_MAX_NDIM);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_intersect),
      cmocka_unit_test(test_scalar),
      cmocka_unit_test(test_overflow_invalid),
  };
  return TU_RUN(tests, NULL, NULL);
}

/* test_box_index.c — the box index answers exactly what a brute-force scan
 * does, on random box sets (overlapping or not, sorted or not, with empty
 * boxes) and random queries. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "model/box.h"
#include "planner/box_index.h"

/* Brute force: chunks sharing an element with the query, ascending. */
static size_t brute(uint32_t nd, size_t n, const int64_t *off, const int64_t *sz,
                    const int64_t *qo, const int64_t *qs, uint32_t *out) {
  size_t k = 0;
  if (dcpi_box_is_empty(nd, qs)) return 0;
  for (size_t i = 0; i < n; i++)
    if (!dcpi_box_is_empty(nd, sz + i * nd) &&
        dcpi_boxes_overlap(nd, off + i * nd, sz + i * nd, qo, qs))
      out[k++] = (uint32_t)i;
  return k;
}

static void random_box(tu_rng *r, uint32_t nd, const int64_t *ext, int64_t *o, int64_t *s) {
  for (uint32_t d = 0; d < nd; d++) {
    o[d] = tu_rng_range(r, 0, ext[d]);
    s[d] = tu_rng_range(r, 0, ext[d] - o[d]);
  }
}

/* A non-overlapping partition of [0, ext) by a random grid per dimension. */
static size_t grid_boxes(tu_rng *r, uint32_t nd, const int64_t *ext, int64_t *off,
                         int64_t *sz, size_t cap) {
  int64_t cuts[4][8], ncut[4], idx[4] = {0};
  size_t n = 1;
  for (uint32_t d = 0; d < nd; d++) {
    ncut[d] = tu_rng_range(r, 1, 4);
    cuts[d][0] = 0;
    for (int64_t c = 1; c < ncut[d]; c++)
      cuts[d][c] = tu_rng_range(r, cuts[d][c - 1], ext[d]);
    cuts[d][ncut[d]] = ext[d];
    n *= (size_t)ncut[d];
  }
  assert_true(n <= cap);
  for (size_t i = 0; i < n; i++) {
    for (uint32_t d = 0; d < nd; d++) {
      off[i * nd + d] = cuts[d][idx[d]];
      sz[i * nd + d] = cuts[d][idx[d] + 1] - cuts[d][idx[d]];
    }
    for (uint32_t d = nd; d-- > 0;) {
      if (++idx[d] < ncut[d]) break;
      idx[d] = 0;
    }
  }
  return n;
}

/* Fisher-Yates shuffle of whole boxes. */
static void shuffle_boxes(tu_rng *r, uint32_t nd, size_t n, int64_t *off, int64_t *sz) {
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)tu_rng_range(r, 0, (int64_t)i - 1);
    for (uint32_t d = 0; d < nd; d++) {
      int64_t t, u;
      t = off[(i - 1) * nd + d], off[(i - 1) * nd + d] = off[j * nd + d], off[j * nd + d] = t;
      u = sz[(i - 1) * nd + d], sz[(i - 1) * nd + d] = sz[j * nd + d], sz[j * nd + d] = u;
    }
  }
}

static void check_set(tu_rng *r, uint32_t nd, const int64_t *ext, size_t n, const int64_t *off,
                      const int64_t *sz, int nq) {
  dcpi_box_index ix;
  assert_int_equal(dcpi_box_index_build(&ix, nd, n, off, sz, NULL), DCP_OK);
  uint32_t *hits = NULL, want[512];
  size_t cap = 0, nh;
  for (int q = 0; q < nq; q++) {
    int64_t qo[4], qs[4];
    random_box(r, nd, ext, qo, qs);
    if (q == 0)
      for (uint32_t d = 0; d < nd; d++) qo[d] = 0, qs[d] = ext[d]; /* the whole tensor */
    assert_int_equal(dcpi_box_index_query(&ix, qo, qs, &hits, &cap, &nh), DCP_OK);
    size_t nw = brute(nd, n, off, sz, qo, qs, want);
    assert_int_equal(nh, nw);
    if (nw) assert_memory_equal(hits, want, nw * sizeof *want);
  }
  free(hits);
  dcpi_box_index_free(&ix);
}

/* Random (overlapping, empty-containing) box sets. */
static void test_random_sets(void **state) {
  (void)state;
  tu_rng r;
  tu_rng_seed(&r, tu_seed(11));
  int64_t off[512 * 4], sz[512 * 4];
  for (int it = 0; it < 3000; it++) {
    uint32_t nd = (uint32_t)tu_rng_range(&r, 0, 4);
    int64_t ext[4];
    for (uint32_t d = 0; d < nd; d++) ext[d] = tu_rng_range(&r, 0, 12);
    size_t n = (size_t)tu_rng_range(&r, 0, it % 10 == 0 ? 500 : 40);
    for (size_t i = 0; i < n; i++) random_box(&r, nd, ext, off + i * nd, sz + i * nd);
    check_set(&r, nd, ext, n, off, sz, 20);
  }
}

/* Partitions (the save planner's case), in sorted and shuffled order. */
static void test_partitions(void **state) {
  (void)state;
  tu_rng r;
  tu_rng_seed(&r, tu_seed(12));
  int64_t off[256 * 4], sz[256 * 4];
  for (int it = 0; it < 3000; it++) {
    uint32_t nd = (uint32_t)tu_rng_range(&r, 1, 4);
    int64_t ext[4];
    for (uint32_t d = 0; d < nd; d++) ext[d] = tu_rng_range(&r, 0, 20);
    size_t n = grid_boxes(&r, nd, ext, off, sz, 256);
    if (it % 2) shuffle_boxes(&r, nd, n, off, sz);
    check_set(&r, nd, ext, n, off, sz, 30);
  }
}

/* Thin chunks along one dim and a long one before them: the walk must not
 * stop early at an entry whose own end is short. */
static void test_running_max(void **state) {
  (void)state;
  /* 1-d: [0,100) then [10,11), [20,21): a query [50,60) hits only chunk 0 */
  int64_t off[] = {0, 10, 20}, sz[] = {100, 1, 1};
  dcpi_box_index ix;
  assert_int_equal(dcpi_box_index_build(&ix, 1, 3, off, sz, NULL), DCP_OK);
  uint32_t *hits = NULL;
  size_t cap = 0, nh;
  int64_t qo = 50, qs = 10;
  assert_int_equal(dcpi_box_index_query(&ix, &qo, &qs, &hits, &cap, &nh), DCP_OK);
  assert_int_equal(nh, 1);
  assert_int_equal(hits[0], 0);
  qo = 10, qs = 11; /* [10,21) */
  assert_int_equal(dcpi_box_index_query(&ix, &qo, &qs, &hits, &cap, &nh), DCP_OK);
  assert_int_equal(nh, 3);
  qs = 0;
  assert_int_equal(dcpi_box_index_query(&ix, &qo, &qs, &hits, &cap, &nh), DCP_OK);
  assert_int_equal(nh, 0);
  free(hits);
  dcpi_box_index_free(&ix);
}

static void test_errors(void **state) {
  (void)state;
  dcpi_box_index ix;
  dcpi_err err;
  int64_t a[1] = {0};
  assert_int_equal(dcpi_box_index_build(&ix, DCP_MAX_NDIM + 1, 1, a, a, &err), DCP_EINVAL);
  assert_int_equal(dcpi_box_index_build(&ix, 1, 1, NULL, a, &err), DCP_EINVAL);
  dcpi_box_index_free(&ix);
  /* empty set: every query misses */
  assert_int_equal(dcpi_box_index_build(&ix, 1, 0, NULL, NULL, &err), DCP_OK);
  uint32_t *hits = NULL;
  size_t cap = 0, nh = 7;
  int64_t qo = 0, qs = 5;
  assert_int_equal(dcpi_box_index_query(&ix, &qo, &qs, &hits, &cap, &nh), DCP_OK);
  assert_int_equal(nh, 0);
  dcpi_box_index_free(&ix);
  dcpi_box_index_free(NULL);
  free(hits);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_sets),
      cmocka_unit_test(test_partitions),
      cmocka_unit_test(test_running_max),
      cmocka_unit_test(test_errors),
  };
  return TU_RUN(tests, NULL, NULL);
}

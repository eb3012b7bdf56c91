/* test_balance.c — the greedy write/read balancer (planner/balance.h). */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "planner/balance.h"

static void test_single_holders_and_ties(void **state) {
  (void)state;
  static const int32_t h0[] = {0}, h2[] = {2}, h012[] = {0, 1, 2};
  dcpi_balance_item items[] = {
      {.bytes = 10, .key = 0, .nholders = 1, .holders = h0},
      {.bytes = 10, .key = 1, .nholders = 1, .holders = h2},
      {.bytes = 5, .key = 2, .nholders = 3, .holders = h012}, /* all at 10,0,10 → 1 */
      {.bytes = 5, .key = 3, .nholders = 3, .holders = h012}, /* 10,5,10 → 1 */
      {.bytes = 5, .key = 4, .nholders = 3, .holders = h012}, /* 10,10,10 tie → 0 */
  };
  int32_t owner[5];
  int64_t load[3];
  dcpi_err err;
  assert_int_equal(dcpi_balance(items, 5, 3, DCPI_BALANCE_LEAST_LOADED, owner, load, &err), DCP_OK);
  assert_int_equal(owner[0], 0);
  assert_int_equal(owner[1], 2);
  assert_int_equal(owner[2], 1);
  assert_int_equal(owner[3], 1);
  assert_int_equal(owner[4], 0);
  assert_int_equal(load[0], 15);
  assert_int_equal(load[1], 10);
  assert_int_equal(load[2], 10);
}

/* Fewer holders first, then larger bytes, then smaller key — whatever the
 * input order. */
static void test_processing_order(void **state) {
  (void)state;
  static const int32_t h01[] = {0, 1}, h012[] = {0, 1, 2};
  dcpi_balance_item items[] = {
      {.bytes = 1, .key = 9, .nholders = 3, .holders = h012},
      {.bytes = 4, .key = 5, .nholders = 2, .holders = h01},
      {.bytes = 7, .key = 6, .nholders = 2, .holders = h01},
      {.bytes = 4, .key = 1, .nholders = 2, .holders = h01},
  };
  int32_t owner[4];
  int64_t load[3];
  assert_int_equal(dcpi_balance(items, 4, 3, DCPI_BALANCE_LEAST_LOADED, owner, load, NULL), DCP_OK);
  /* order: 7(k6)→0, 4(k1)→1, 4(k5)→1 (0 has 7 > 4), then the 3-holder → 2 */
  assert_int_equal(owner[2], 0);
  assert_int_equal(owner[3], 1);
  assert_int_equal(owner[1], 1);
  assert_int_equal(owner[0], 2);
  assert_int_equal(load[0], 7);
  assert_int_equal(load[1], 8);
  assert_int_equal(load[2], 1);
}

static void test_lowest_rank(void **state) {
  (void)state;
  static const int32_t a[] = {1, 3}, b[] = {2, 3};
  dcpi_balance_item items[] = {{100, 0, 2, a}, {100, 1, 2, a}, {5, 2, 2, b}};
  int32_t owner[3];
  int64_t load[4];
  assert_int_equal(dcpi_balance(items, 3, 4, DCPI_BALANCE_LOWEST_RANK, owner, load, NULL), DCP_OK);
  assert_int_equal(owner[0], 1);
  assert_int_equal(owner[1], 1);
  assert_int_equal(owner[2], 2);
  assert_int_equal(load[0], 0);
  assert_int_equal(load[1], 200);
  assert_int_equal(load[2], 5);
  assert_int_equal(load[3], 0);
}

static void test_errors(void **state) {
  (void)state;
  static const int32_t bad_order[] = {2, 1}, dup[] = {1, 1}, out[] = {0, 4}, ok[] = {0, 1};
  int32_t owner[1];
  dcpi_err err;
  dcpi_balance_item it = {1, 0, 0, ok};
  assert_int_equal(dcpi_balance(&it, 1, 4, 0, owner, NULL, &err), DCP_EINVAL);
  it = (dcpi_balance_item){1, 0, 2, bad_order};
  assert_int_equal(dcpi_balance(&it, 1, 4, 0, owner, NULL, &err), DCP_EINVAL);
  it.holders = dup;
  assert_int_equal(dcpi_balance(&it, 1, 4, 0, owner, NULL, &err), DCP_EINVAL);
  it.holders = out;
  assert_int_equal(dcpi_balance(&it, 1, 4, 0, owner, NULL, &err), DCP_EINVAL);
  it = (dcpi_balance_item){-1, 0, 2, ok};
  assert_int_equal(dcpi_balance(&it, 1, 4, 0, owner, NULL, &err), DCP_EINVAL);
  it = (dcpi_balance_item){1, 0, 2, NULL};
  assert_int_equal(dcpi_balance(&it, 1, 4, 0, owner, NULL, &err), DCP_EINVAL);
  it = (dcpi_balance_item){1, 0, 2, ok};
  assert_int_equal(dcpi_balance(&it, 1, 0, 0, owner, NULL, &err), DCP_EINVAL);
  /* loads that overflow int64 are refused, not wrapped */
  dcpi_balance_item two[] = {{INT64_MAX, 0, 1, ok}, {1, 1, 1, ok}};
  int32_t o2[2];
  assert_int_equal(dcpi_balance(two, 2, 4, 0, o2, NULL, &err), DCP_EOVERFLOW);
  int64_t base[4] = {0, -1, 0, 0};
  assert_int_equal(dcpi_balance_from(&it, 1, 4, 0, base, owner, NULL, &err), DCP_EINVAL);
  assert_int_equal(dcpi_balance(NULL, 0, 4, 0, NULL, NULL, &err), DCP_OK);
}

/* Random items: every owner is a holder, loads add up, the greedy bound
 * holds, and balance_from(base) equals balance with base as fixed items. */
static void test_random(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(11));
  for (int round = 0; round < 50; round++) {
    int32_t w = (int32_t)tu_rng_range(&rng, 1, 12);
    size_t n = (size_t)tu_rng_range(&rng, 0, 80);
    dcpi_balance_item *items = calloc(n + (size_t)w, sizeof *items);
    int32_t *hold = calloc((n + (size_t)w) * (size_t)w, sizeof *hold);
    int32_t *owner = calloc(n + (size_t)w, sizeof *owner), *owner2 = calloc(n + 1, sizeof *owner2);
    int64_t *load = calloc((size_t)w, sizeof *load), *load2 = calloc((size_t)w, sizeof *load2);
    int64_t *base = calloc((size_t)w, sizeof *base);
    for (size_t i = 0; i < n; i++) {
      int32_t *h = hold + i * (size_t)w;
      uint32_t nh = 0;
      for (int32_t r = 0; r < w; r++)
        if (tu_rng_range(&rng, 0, 2) == 0) h[nh++] = r;
      if (!nh) h[nh++] = (int32_t)tu_rng_range(&rng, 0, w - 1);
      items[i] = (dcpi_balance_item){tu_rng_range(&rng, 0, 1000), i, nh, h};
    }
    /* base loads, also as fixed single-holder items appended at the end */
    for (int32_t r = 0; r < w; r++) {
      base[r] = tu_rng_range(&rng, 0, 3000);
      int32_t *h = hold + (n + (size_t)r) * (size_t)w;
      h[0] = r;
      items[n + (size_t)r] = (dcpi_balance_item){base[r], n + (size_t)r, 1, h};
    }
    assert_int_equal(dcpi_balance(items, n + (size_t)w, w, 0, owner, load, NULL), DCP_OK);
    assert_int_equal(dcpi_balance_from(items, n, w, 0, base, owner2, load2, NULL), DCP_OK);
    assert_memory_equal(owner, owner2, n * sizeof *owner);
    assert_memory_equal(load, load2, (size_t)w * sizeof *load);
    int64_t sum = 0, total = 0;
    for (int32_t r = 0; r < w; r++) sum += load[r];
    for (size_t i = 0; i < n + (size_t)w; i++) {
      total += items[i].bytes;
      int found = 0;
      for (uint32_t k = 0; k < items[i].nholders; k++) found |= items[i].holders[k] == owner[i];
      assert_true(found);
    }
    assert_int_equal(sum, total);
    /* greedy bound for the last multi-holder item x of each rank r: at its
     * turn r was the least loaded holder, so load(r) <= load(h) + bytes(x).
     * The last in processing order is the one with the largest
     * (nholders, -bytes, key) tuple. */
    for (int32_t r = 0; r < w; r++) {
      const dcpi_balance_item *x = NULL;
      for (size_t i = 0; i < n; i++) {
        const dcpi_balance_item *it = &items[i];
        if (owner[i] != r || it->nholders < 2) continue;
        if (!x || it->nholders > x->nholders ||
            (it->nholders == x->nholders &&
             (it->bytes < x->bytes || (it->bytes == x->bytes && it->key > x->key))))
          x = it;
      }
      if (!x) continue;
      for (uint32_t k = 0; k < x->nholders; k++)
        assert_true(load[r] <= load[x->holders[k]] + x->bytes);
    }
    /* LOWEST_RANK: always the first holder */
    assert_int_equal(dcpi_balance(items, n, w, DCPI_BALANCE_LOWEST_RANK, owner, NULL, NULL), DCP_OK);
    for (size_t i = 0; i < n; i++) assert_int_equal(owner[i], items[i].holders[0]);
    free(items), free(hold), free(owner), free(owner2), free(load), free(load2), free(base);
  }
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_single_holders_and_ties),
      cmocka_unit_test(test_processing_order),
      cmocka_unit_test(test_lowest_rank),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_random),
  };
  return TU_RUN(tests, NULL, NULL);
}

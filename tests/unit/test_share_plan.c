/* Partial-overlap sharing (dcpi_share_plan_build, src/planner/read_groups.c):
 * over random needs (ranks wanting granule ranges of a few saved chunks),
 * every need is served exactly once, by its own rank's read or by its
 * group's reader, whose read covers it; the bytes read per saved chunk are
 * exactly the union of the ranges needed; the reader is one of the
 * group's ranks (on a best host when hosts are given, the lowest under
 * LOWEST_RANK); loads add up; the result does not depend on input order.
 * Plus the TP2 -> TP4 column case and malformed input. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "planner/read_groups.h"

#define W 12
#define CHUNKS 5
#define GRAN 24 /* granules per saved chunk */
#define BS 64   /* bytes per granule */
#define MAXN 200

typedef struct needs {
  dcpi_share_need v[MAXN];
  size_t n;
  int world;
  uint64_t hosts[W];
  int64_t base[W];
} needs;

static void random_needs(tu_rng *r, needs *q) {
  q->world = (int)tu_rng_range(r, 1, W);
  q->n = 0;
  int64_t nhosts = tu_rng_range(r, 1, q->world);
  for (int k = 0; k < q->world; k++) {
    q->hosts[k] = 7 + (uint64_t)tu_rng_range(r, 0, nhosts - 1);
    q->base[k] = tu_rng_range(r, 0, 5) * BS;
  }
  size_t want = (size_t)tu_rng_range(r, 0, 60);
  uint32_t seq[W] = {0};
  for (size_t i = 0; i < want; i++) {
    int32_t rank = (int32_t)tu_rng_range(r, 0, q->world - 1);
    int64_t a = tu_rng_range(r, 0, GRAN - 1), b = tu_rng_range(r, a + 1, GRAN);
    uint64_t key = (uint64_t)tu_rng_range(r, 0, CHUNKS - 1);
    q->v[q->n++] = (dcpi_share_need){rank, seq[rank]++, key * 0x9E3779B97F4A7C15ull, key,
                                     a * BS, b * BS, tu_rng_range(r, 0, (b - a) * BS)};
  }
}

/* Bytes in the union of the needs' ranges, per saved chunk, granule by
 * granule. */
static int64_t union_bytes(const needs *q) {
  unsigned char used[CHUNKS][GRAN];
  memset(used, 0, sizeof used);
  for (size_t i = 0; i < q->n; i++)
    for (int64_t g = q->v[i].lo / BS; g < q->v[i].hi / BS; g++) used[q->v[i].key_lo][g] = 1;
  int64_t t = 0;
  for (int c = 0; c < CHUNKS; c++)
    for (int g = 0; g < GRAN; g++) t += used[c][g] * BS;
  return t;
}

/* Whether rank x is on a host holding the most of group grp's ranks. */
static int on_best_host(const dcpi_share_plan *p, const dcpi_share_group *grp,
                        const uint64_t *hosts, int32_t x) {
  int32_t ranks[MAXN];
  uint32_t nr = 0;
  for (size_t k = 0; k < grp->count; k++) {
    int32_t r = p->needs[grp->first + k].rank;
    uint32_t j = 0;
    while (j < nr && ranks[j] != r) j++;
    if (j == nr) ranks[nr++] = r;
  }
  uint32_t best = 0, mine = 0;
  for (uint32_t i = 0; i < nr; i++) {
    uint32_t c = 0;
    for (uint32_t j = 0; j < nr; j++) c += hosts[ranks[j]] == hosts[ranks[i]];
    if (c > best) best = c;
    if (ranks[i] == x) mine = c;
  }
  return mine == best;
}

/* The properties of the top comment for one plan of q. */
static void check_plan(const needs *q, const dcpi_share_plan *p, const uint64_t *hosts,
                       dcpi_balance_policy pol) {
  assert_int_equal(p->nneeds, q->n);
  int64_t read = 0, load[W] = {0};
  unsigned char seen[MAXN] = {0};
  for (size_t i = 0; i < p->nneeds; i++) { /* a permutation of the input */
    const dcpi_share_need *x = &p->needs[i];
    size_t j = 0;
    while (j < q->n && (q->v[j].rank != x->rank || q->v[j].seq != x->seq)) j++;
    assert_true(j < q->n && !seen[j]);
    seen[j] = 1;
    assert_memory_equal(&q->v[j], x, sizeof *x);
    if (p->group_of[i] < 0) read += x->hi - x->lo; /* its rank reads it alone */
  }
  for (size_t g = 0; g < p->ngroups; g++) {
    const dcpi_share_group *grp = &p->groups[g];
    int reader_has_need = 0;
    int32_t lowest = INT32_MAX;
    assert_true(grp->count >= 2);
    for (size_t k = grp->first; k < grp->first + grp->count; k++) {
      const dcpi_share_need *x = &p->needs[k];
      assert_int_equal(p->group_of[k], (int64_t)g);
      assert_true(x->key_hi == grp->key_hi && x->key_lo == grp->key_lo);
      assert_true(x->lo >= grp->lo && x->hi <= grp->hi); /* served by the one read */
      reader_has_need |= x->rank == grp->reader;
      if (x->rank < lowest) lowest = x->rank;
    }
    assert_true(reader_has_need);
    if (hosts) assert_true(on_best_host(p, grp, hosts, grp->reader));
    if (pol == DCPI_BALANCE_LOWEST_RANK && !hosts) assert_int_equal(grp->reader, lowest);
    read += grp->hi - grp->lo;
    load[grp->reader] += grp->hi - grp->lo;
  }
  /* needs outside a group overlap no other need of their chunk */
  for (size_t i = 0; i < p->nneeds; i++)
    for (size_t j = 0; j < p->nneeds; j++) {
      const dcpi_share_need *a = &p->needs[i], *b = &p->needs[j];
      if (i == j || a->key_lo != b->key_lo || a->lo >= b->hi || b->lo >= a->hi) continue;
      assert_true(p->group_of[i] >= 0 && p->group_of[i] == p->group_of[j]);
    }
  assert_int_equal(read, union_bytes(q));
  for (int r = 0; r < q->world; r++) assert_int_equal(p->load[r], q->base[r] + load[r]);
}

static void same_plan(const dcpi_share_plan *a, const dcpi_share_plan *b) {
  assert_int_equal(a->nneeds, b->nneeds);
  assert_int_equal(a->ngroups, b->ngroups);
  if (a->nneeds) {
    assert_memory_equal(a->needs, b->needs, a->nneeds * sizeof *a->needs);
    assert_memory_equal(a->group_of, b->group_of, a->nneeds * sizeof *a->group_of);
  }
  if (a->ngroups) assert_memory_equal(a->groups, b->groups, a->ngroups * sizeof *a->groups);
}

static void test_random(void **state) {
  (void)state;
  tu_rng r;
  tu_rng_seed(&r, tu_seed(15));
  for (int trial = 0; trial < 400; trial++) {
    needs q;
    random_needs(&r, &q);
    for (int pol = 0; pol < 2; pol++)
      for (int h = 0; h < 2; h++) {
        const uint64_t *hosts = h ? q.hosts : NULL;
        dcpi_share_plan *p = NULL, *p2 = NULL;
        assert_int_equal(dcpi_share_plan_build(q.v, q.n, q.world, (dcpi_balance_policy)pol,
                                               q.base, hosts, &p, NULL), DCP_OK);
        check_plan(&q, p, hosts, (dcpi_balance_policy)pol);
        needs s = q; /* the same needs in another order: the same plan */
        for (size_t i = s.n; i > 1; i--) {
          size_t j = (size_t)tu_rng_range(&r, 0, (int64_t)i - 1);
          dcpi_share_need t = s.v[i - 1];
          s.v[i - 1] = s.v[j], s.v[j] = t;
        }
        assert_int_equal(dcpi_share_plan_build(s.v, s.n, s.world, (dcpi_balance_policy)pol,
                                               s.base, hosts, &p2, NULL), DCP_OK);
        same_plan(p, p2);
        dcpi_share_plan_free(p);
        dcpi_share_plan_free(p2);
      }
  }
}

/* TP2 -> TP4 on dim 1: ranks 2c and 2c+1 each need half of every row of
 * saved chunk c, so both read all of it: one group per chunk, read once,
 * by different ranks. */
static void test_columns(void **state) {
  (void)state;
  dcpi_share_need v[4];
  for (int r = 0; r < 4; r++)
    v[r] = (dcpi_share_need){r, 0, 1, (uint64_t)(r / 2), 0, 8 * BS, 4 * BS};
  dcpi_share_plan *p = NULL;
  assert_int_equal(dcpi_share_plan_build(v, 4, 4, DCPI_BALANCE_LEAST_LOADED, NULL, NULL, &p, NULL),
                   DCP_OK);
  assert_int_equal(p->ngroups, 2);
  assert_int_equal(p->groups[0].nranks, 2);
  assert_int_equal(p->groups[0].hi - p->groups[0].lo, 8 * BS);
  assert_true(p->groups[0].reader == 0 || p->groups[0].reader == 1);
  assert_true(p->groups[1].reader == 2 || p->groups[1].reader == 3);
  int64_t total = 0;
  for (int r = 0; r < 4; r++) total += p->load[r];
  assert_int_equal(total, 16 * BS); /* was 32 * BS: every rank read its chunk whole */
  dcpi_share_plan_free(p);
  /* ranges that only touch (row sharding) are not shared */
  v[0] = (dcpi_share_need){0, 0, 1, 0, 0, 4 * BS, 4 * BS};
  v[1] = (dcpi_share_need){1, 0, 1, 0, 4 * BS, 8 * BS, 4 * BS};
  assert_int_equal(dcpi_share_plan_build(v, 2, 2, DCPI_BALANCE_LEAST_LOADED, NULL, NULL, &p, NULL),
                   DCP_OK);
  assert_int_equal(p->ngroups, 0);
  assert_true(p->group_of[0] == -1 && p->group_of[1] == -1);
  dcpi_share_plan_free(p);
}

static void test_malformed(void **state) {
  (void)state;
  dcpi_share_plan *p = (dcpi_share_plan *)1;
  dcpi_share_need ok = {1, 3, 0, 0, 0, BS, 1};
  dcpi_share_need bad[][2] = {
      {ok, {1, 3, 0, 1, 0, BS, 1}},  /* (rank, seq) twice */
      {ok, {2, 0, 0, 0, 0, BS, 1}},  /* rank out of range */
      {ok, {0, 0, 0, 0, BS, BS, 1}}, /* empty range */
      {ok, {0, 0, 0, 0, -BS, 0, 1}}, /* negative offset */
      {ok, {0, 0, 0, 0, 0, BS, -1}}, /* negative bytes */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dcpi_err err;
    dcpi_err_clear(&err);
    assert_int_equal(dcpi_share_plan_build(bad[i], 2, 2, DCPI_BALANCE_LEAST_LOADED, NULL, NULL,
                                           &p, &err), DCP_EINVAL);
    assert_null(p);
    assert_true(strstr(err.msg, "share plan") != NULL);
  }
  int64_t neg[2] = {0, -1};
  assert_int_equal(dcpi_share_plan_build(bad[0], 1, 2, DCPI_BALANCE_LEAST_LOADED, neg, NULL, &p,
                                         NULL), DCP_EINVAL); /* a negative base */
  assert_int_equal(dcpi_share_plan_build(NULL, 1, 2, DCPI_BALANCE_LEAST_LOADED, NULL, NULL, &p,
                                         NULL), DCP_EINVAL);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random),
      cmocka_unit_test(test_columns),
      cmocka_unit_test(test_malformed),
  };
  return TU_RUN(tests, NULL, NULL);
}

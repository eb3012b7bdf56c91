/* Read dedup's host preference (dcpi_read_groups_prefer_hosts,
 * src/planner/read_groups.c): a group's reader is a member on a host that
 * holds the most of its members, the balancer chooses among those, and
 * with one host (or one member per host) nothing changes. Property tests
 * over random groups and host maps, plus fixed cases. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "planner/read_groups.h"

#define W 12
#define KEYS 40

/* Requests: rank r asks for key k when want[r][k]; key k is box [k, k+1)
 * of "t" with 100 + 37 k bytes. */
typedef struct reqs {
  int64_t off[KEYS], one[1];
  dcpi_read_key keys[W][KEYS];
  dcpi_rank_requests req[W];
} reqs;

static void make(reqs *q, unsigned char want[W][KEYS], int world) {
  q->one[0] = 1;
  for (int k = 0; k < KEYS; k++) q->off[k] = k;
  for (int r = 0; r < world; r++) {
    size_t n = 0;
    for (int k = 0; k < KEYS; k++)
      if (want[r][k])
        q->keys[r][n++] = (dcpi_read_key){"t", 1, &q->off[k], q->one, 100 + 37 * (int64_t)k};
    q->req[r] = (dcpi_rank_requests){r, n, q->keys[r]};
  }
}

static dcpi_read_groups *build(reqs *q, int world, const uint64_t *hosts,
                               dcpi_balance_policy pol) {
  dcpi_read_groups *g = NULL;
  assert_int_equal(dcpi_read_groups_build(q->req, (size_t)world, world, pol, &g, NULL), DCP_OK);
  if (hosts) assert_int_equal(dcpi_read_groups_prefer_hosts(g, hosts, pol, NULL), DCP_OK);
  return g;
}

/* The reader is a member on a best host; the per-rank lists and the loads
 * agree with the readers. */
static void check_groups(const dcpi_read_groups *g, const uint64_t *hosts, int world) {
  int64_t load[W] = {0};
  for (size_t i = 0; i < g->ngroups; i++) {
    const dcpi_read_group *grp = &g->groups[i];
    uint32_t best = 0, mine = 0;
    int member = 0;
    for (uint32_t a = 0; a < grp->nmembers; a++) {
      uint32_t c = 0;
      for (uint32_t b = 0; b < grp->nmembers; b++) c += hosts[grp->members[b]] == hosts[grp->members[a]];
      if (c > best) best = c;
      if (grp->members[a] == grp->reader) member = 1, mine = c;
    }
    assert_true(member);
    assert_int_equal(mine, best);
    load[grp->reader] += grp->bytes;
  }
  for (int r = 0; r < world; r++) {
    dcpi_rank_reads rr;
    assert_int_equal(dcpi_read_groups_rank(g, r, &rr), DCP_OK);
    assert_int_equal(rr.bytes_read, load[r]);
    for (size_t i = 0; i < rr.nreads; i++) assert_int_equal(g->groups[rr.reads[i]].reader, r);
    for (size_t i = 0; i < rr.nrecvs; i++) assert_int_not_equal(g->groups[rr.recvs[i]].reader, r);
  }
}

static int same_readers(const dcpi_read_groups *a, const dcpi_read_groups *b) {
  if (a->ngroups != b->ngroups) return 0;
  for (size_t i = 0; i < a->ngroups; i++)
    if (a->groups[i].reader != b->groups[i].reader) return 0;
  return 1;
}

/* Random requests and host maps, both policies: the property above, the
 * same answer for requests given in another rank order, and no change
 * with one host or a host per rank. */
static void test_random(void **state) {
  (void)state;
  srand(18);
  static unsigned char want[W][KEYS];
  for (int iter = 0; iter < 300; iter++) {
    int world = 2 + rand() % (W - 1), nhosts = 1 + rand() % world;
    dcpi_balance_policy pol = iter % 2 ? DCPI_BALANCE_LOWEST_RANK : DCPI_BALANCE_LEAST_LOADED;
    uint64_t hosts[W], one[W], each[W];
    for (int r = 0; r < world; r++) {
      hosts[r] = 1000 + (uint64_t)(rand() % nhosts);
      one[r] = 7;
      each[r] = 50 + (uint64_t)r;
    }
    memset(want, 0, sizeof want);
    for (int r = 0; r < world; r++)
      for (int k = 0; k < KEYS; k++) want[r][k] = rand() % 3 == 0;
    reqs q;
    make(&q, want, world);
    dcpi_read_groups *blind = build(&q, world, NULL, pol);
    dcpi_read_groups *g = build(&q, world, hosts, pol);
    check_groups(g, hosts, world);
    /* another arrival order of the ranks' requests */
    reqs q2 = q;
    for (int r = 0; r < world; r++) q2.req[r] = q.req[world - 1 - r];
    dcpi_read_groups *g2 = build(&q2, world, hosts, pol);
    assert_true(same_readers(g, g2));
    dcpi_read_groups *g1 = build(&q, world, one, pol), *ge = build(&q, world, each, pol);
    assert_true(same_readers(blind, g1));
    assert_true(same_readers(blind, ge));
    dcpi_read_groups_free(blind);
    dcpi_read_groups_free(g);
    dcpi_read_groups_free(g2);
    dcpi_read_groups_free(g1);
    dcpi_read_groups_free(ge);
  }
}

/* Two hosts of two ranks (0, 1 | 2, 3): a group of ranks 0, 1, 2 is read
 * on host A, one of 1, 2, 3 on host B, one of all four anywhere (a tie),
 * even when the balancer alone would have put them elsewhere. */
static void test_two_hosts(void **state) {
  (void)state;
  static unsigned char want[W][KEYS];
  memset(want, 0, sizeof want);
  int g012[] = {0, 1, 2}, g123[] = {1, 2, 3};
  for (int k = 0; k < 10; k++) { /* ten of each, so that balancing spreads them */
    for (int i = 0; i < 3; i++) want[g012[i]][k] = 1, want[g123[i]][10 + k] = 1;
    for (int r = 0; r < 4; r++) want[r][20 + k] = 1;
  }
  reqs q;
  make(&q, want, 4);
  uint64_t hosts[4] = {5, 5, 9, 9};
  for (int p = 0; p < 2; p++) {
    dcpi_read_groups *g = build(&q, 4, hosts, (dcpi_balance_policy)p);
    check_groups(g, hosts, 4);
    for (size_t i = 0; i < g->ngroups; i++) {
      int k = (int)g->groups[i].offset[0];
      if (k < 10) assert_true(g->groups[i].reader <= 1);
      else if (k < 20) assert_true(g->groups[i].reader >= 2);
    }
    dcpi_read_groups_free(g);
  }
  dcpi_read_groups *g = build(&q, 4, NULL, DCPI_BALANCE_LOWEST_RANK);
  assert_int_equal(dcpi_read_groups_prefer_hosts(NULL, hosts, 0, NULL), DCP_EINVAL);
  assert_int_equal(dcpi_read_groups_prefer_hosts(g, NULL, 0, NULL), DCP_EINVAL);
  dcpi_read_groups_free(g);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random),
      cmocka_unit_test(test_two_hosts),
  };
  return TU_RUN(tests, NULL, NULL);
}

/* test_read_groups.c — read dedup: each requested (fqn, box) is read once by
 * one of the ranks that asked for it, readers balance bytes (the greedy's
 * list-scheduling property), LOWEST_RANK picks the lowest member, arrival
 * order never matters, and groups agree with layout replica groups. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "model/layout.h"
#include "planner/read_groups.h"

#define MAXK 64   /* distinct keys in the pool */
#define MAXR 48   /* ranks */

static const char *NAMES[] = {"layers.1.w", "layers.0.w", "emb", "layers.0.b", "head"};

typedef struct pool {
  size_t n;
  dcpi_read_key key[MAXK];
  int64_t off[MAXK][3], sz[MAXK][3];
} pool;

/* Distinct keys: random fqn, random box (ndim fixed per fqn), bytes from
 * the box volume and a per-fqn element size. */
static void make_pool(tu_rng *r, pool *p) {
  p->n = 0;
  size_t want = (size_t)tu_rng_range(r, 1, MAXK);
  for (size_t tries = 0; p->n < want && tries < 10 * MAXK; tries++) {
    int f = (int)tu_rng_range(r, 0, 4);
    uint32_t nd = (uint32_t)(f % 3);
    dcpi_read_key k = {NAMES[f], nd, p->off[p->n], p->sz[p->n], 0};
    int64_t numel = 1;
    for (uint32_t d = 0; d < nd; d++) {
      p->off[p->n][d] = tu_rng_range(r, 0, 3);
      p->sz[p->n][d] = tu_rng_range(r, 1, 4);
      numel *= p->sz[p->n][d];
    }
    k.bytes = numel * (f + 1) * 100;
    int dup = 0;
    for (size_t i = 0; i < p->n && !dup; i++)
      dup = !strcmp(p->key[i].fqn, k.fqn) && !memcmp(p->off[i], p->off[p->n], nd * 8) &&
            !memcmp(p->sz[i], p->sz[p->n], nd * 8);
    if (!dup) p->key[p->n++] = k;
  }
}

typedef struct asks {
  int32_t world;
  size_t nranks;
  int want[MAXR][MAXK]; /* brute-force membership */
  dcpi_rank_requests req[MAXR];
  dcpi_read_key keys[MAXR][2 * MAXK];
} asks;

/* Each present rank asks for a random subset, in random order, sometimes
 * twice; the rank list arrives in random order. */
static void make_asks(tu_rng *r, const pool *p, asks *a) {
  memset(a, 0, sizeof *a);
  a->world = (int32_t)tu_rng_range(r, 1, MAXR);
  for (int32_t rk = 0; rk < a->world; rk++) {
    if (tu_rng_range(r, 0, 5) == 0) continue; /* absent */
    dcpi_rank_requests *q = &a->req[a->nranks++];
    q->rank = rk;
    q->keys = a->keys[rk];
    int density = (int)tu_rng_range(r, 1, 4);
    for (size_t k = 0; k < p->n; k++)
      if (tu_rng_range(r, 0, density) == 0) {
        a->want[rk][k] = 1;
        a->keys[rk][q->nkeys++] = p->key[k];
        if (tu_rng_range(r, 0, 9) == 0) a->keys[rk][q->nkeys++] = p->key[k];
      }
  }
}

static void shuffle_asks(tu_rng *r, asks *a) {
  for (size_t i = a->nranks; i > 1; i--) {
    size_t j = (size_t)tu_rng_range(r, 0, (int64_t)i - 1);
    dcpi_rank_requests t = a->req[i - 1];
    a->req[i - 1] = a->req[j], a->req[j] = t;
  }
  for (size_t i = 0; i < a->nranks; i++) {
    dcpi_read_key *k = a->keys[a->req[i].rank];
    for (size_t m = a->req[i].nkeys; m > 1; m--) {
      size_t j = (size_t)tu_rng_range(r, 0, (int64_t)m - 1);
      dcpi_read_key t = k[m - 1];
      k[m - 1] = k[j], k[j] = t;
    }
  }
}

static int key_equal(const dcpi_read_group *g, const dcpi_read_key *k) {
  return !strcmp(g->fqn, k->fqn) && g->ndim == k->ndim &&
         !memcmp(g->offset, k->offset, k->ndim * 8) && !memcmp(g->size, k->size, k->ndim * 8);
}

/* Every requested key is one group whose members are exactly its askers;
 * loads add up; the per-rank view matches. */
static void check_groups(const pool *p, const asks *a, const dcpi_read_groups *g) {
  int64_t load[MAXR] = {0};
  size_t requested = 0;
  for (size_t k = 0; k < p->n; k++) {
    int32_t members[MAXR];
    uint32_t nm = 0;
    for (int32_t rk = 0; rk < a->world; rk++)
      if (a->want[rk][k]) members[nm++] = rk;
    size_t found = 0, gi = 0;
    for (size_t i = 0; i < g->ngroups; i++)
      if (key_equal(&g->groups[i], &p->key[k])) found++, gi = i;
    assert_int_equal(found, nm ? 1 : 0);
    if (!nm) continue;
    requested++;
    const dcpi_read_group *grp = &g->groups[gi];
    assert_int_equal(grp->nmembers, nm);
    assert_memory_equal(grp->members, members, nm * sizeof *members);
    assert_int_equal(grp->bytes, p->key[k].bytes);
    int in = 0;
    for (uint32_t m = 0; m < nm; m++) in |= members[m] == grp->reader;
    assert_true(in);
    load[grp->reader] += grp->bytes;
  }
  assert_int_equal(g->ngroups, requested);
  for (size_t i = 1; i < g->ngroups; i++) /* canonical order: fqn first */
    assert_true(strcmp(g->groups[i - 1].fqn, g->groups[i].fqn) <= 0);
  for (int32_t rk = 0; rk < a->world; rk++) {
    dcpi_rank_reads v;
    assert_int_equal(dcpi_read_groups_rank(g, rk, &v), DCP_OK);
    assert_int_equal(v.bytes_read, load[rk]);
    assert_int_equal(g->load[rk], load[rk]);
    int64_t sum = 0;
    for (size_t i = 0; i < v.nreads; i++) {
      assert_int_equal(g->groups[v.reads[i]].reader, rk);
      sum += g->groups[v.reads[i]].bytes;
    }
    assert_int_equal(sum, load[rk]);
    size_t member_of = 0;
    for (size_t i = 0; i < g->ngroups; i++)
      for (uint32_t m = 0; m < g->groups[i].nmembers; m++) member_of += g->groups[i].members[m] == rk;
    assert_int_equal(v.nreads + v.nrecvs, member_of);
    for (size_t i = 0; i < v.nrecvs; i++) assert_int_not_equal(g->groups[v.recvs[i]].reader, rk);
  }
}

/* Processing order of the balancer for multi-member groups: (fewest
 * members, largest bytes, group id). */
static const dcpi_read_group *G_SORT;
static int cmp_proc(const void *pa, const void *pb) {
  size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
  const dcpi_read_group *x = &G_SORT[a], *y = &G_SORT[b];
  if (x->nmembers != y->nmembers) return x->nmembers < y->nmembers ? -1 : 1;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  return (a > b) - (a < b);
}

/* For each rank r, x the last multi-member group it was given in processing
 * order: load(r) <= min over members h of x of load(h) + bytes(x). */
static void check_balance(const dcpi_read_groups *g) {
  size_t order[MAXK], n = 0;
  for (size_t i = 0; i < g->ngroups; i++)
    if (g->groups[i].nmembers > 1) order[n++] = i;
  G_SORT = g->groups;
  qsort(order, n, sizeof *order, cmp_proc);
  for (int32_t rk = 0; rk < g->world_size; rk++) {
    const dcpi_read_group *x = NULL;
    for (size_t k = 0; k < n; k++)
      if (g->groups[order[k]].reader == rk) x = &g->groups[order[k]];
    if (!x) continue;
    for (uint32_t m = 0; m < x->nmembers; m++)
      assert_true(g->load[rk] <= g->load[x->members[m]] + x->bytes);
  }
}

static void assert_same(const dcpi_read_groups *a, const dcpi_read_groups *b) {
  assert_int_equal(a->ngroups, b->ngroups);
  for (size_t i = 0; i < a->ngroups; i++) {
    const dcpi_read_group *x = &a->groups[i], *y = &b->groups[i];
    assert_true(!strcmp(x->fqn, y->fqn) && x->ndim == y->ndim);
    if (x->ndim) assert_memory_equal(x->offset, y->offset, x->ndim * 8);
    if (x->ndim) assert_memory_equal(x->size, y->size, x->ndim * 8);
    assert_int_equal(x->reader, y->reader);
    assert_int_equal(x->nmembers, y->nmembers);
    assert_memory_equal(x->members, y->members, x->nmembers * sizeof *x->members);
  }
  assert_memory_equal(a->load, b->load, (size_t)a->world_size * sizeof *a->load);
}

static void test_random(void **state) {
  (void)state;
  tu_rng r;
  tu_rng_seed(&r, tu_seed(31));
  pool p;
  asks *a = malloc(sizeof *a);
  for (int it = 0; it < 2000; it++) {
    make_pool(&r, &p);
    make_asks(&r, &p, a);
    dcpi_read_groups *g, *h, *low;
    dcpi_err err;
    assert_int_equal(dcpi_read_groups_build(a->req, a->nranks, a->world,
                                            DCPI_BALANCE_LEAST_LOADED, &g, &err), DCP_OK);
    check_groups(&p, a, g);
    check_balance(g);
    assert_int_equal(dcpi_read_groups_build(a->req, a->nranks, a->world,
                                            DCPI_BALANCE_LOWEST_RANK, &low, &err), DCP_OK);
    check_groups(&p, a, low);
    for (size_t i = 0; i < low->ngroups; i++)
      assert_int_equal(low->groups[i].reader, low->groups[i].members[0]);
    shuffle_asks(&r, a);
    assert_int_equal(dcpi_read_groups_build(a->req, a->nranks, a->world,
                                            DCPI_BALANCE_LEAST_LOADED, &h, &err), DCP_OK);
    assert_same(g, h);
    dcpi_read_groups_free(g);
    dcpi_read_groups_free(h);
    dcpi_read_groups_free(low);
  }
  free(a);
}

/* Equal replicas split their reads: 4 ranks, 4 equal groups all shared by
 * everyone → one each, not all on rank 0. */
static void test_spreads_reads(void **state) {
  (void)state;
  int64_t off[4] = {0, 1, 2, 3}, sz = 1;
  dcpi_read_key keys[4];
  for (int k = 0; k < 4; k++) keys[k] = (dcpi_read_key){"w", 1, &off[k], &sz, 64};
  dcpi_rank_requests req[4];
  for (int rk = 0; rk < 4; rk++) req[rk] = (dcpi_rank_requests){3 - rk, 4, keys};
  dcpi_read_groups *g;
  assert_int_equal(dcpi_read_groups_build(req, 4, 4, DCPI_BALANCE_LEAST_LOADED, &g, NULL), DCP_OK);
  assert_int_equal(g->ngroups, 4);
  for (int rk = 0; rk < 4; rk++) {
    assert_int_equal(g->load[rk], 64);
    dcpi_rank_reads v;
    assert_int_equal(dcpi_read_groups_rank(g, rk, &v), DCP_OK);
    assert_int_equal(v.nreads, 1);
    assert_int_equal(v.nrecvs, 3);
  }
  dcpi_rank_reads v;
  assert_int_equal(dcpi_read_groups_rank(g, 4, &v), DCP_ENOTFOUND);
  assert_int_equal(dcpi_read_groups_rank(NULL, 0, &v), DCP_EINVAL);
  dcpi_read_groups_free(g);
}

/* Groups from one exchange of keys equal the layout's replica groups:
 * DP x TP mesh with a custom rank order, tensor sharded over TP. */
static void test_layout_agrees(void **state) {
  (void)state;
  tu_rng r;
  tu_rng_seed(&r, tu_seed(32));
  for (int it = 0; it < 200; it++) {
    int64_t mesh[2] = {tu_rng_range(&r, 1, 6), tu_rng_range(&r, 1, 6)}; /* DP, TP */
    int32_t n = (int32_t)(mesh[0] * mesh[1]), ranks[36];
    for (int32_t i = 0; i < n; i++) ranks[i] = i;
    for (int32_t i = n; i > 1; i--) {
      int32_t j = (int32_t)tu_rng_range(&r, 0, i - 1), t = ranks[i - 1];
      ranks[i - 1] = ranks[j], ranks[j] = t;
    }
    uint32_t map[2] = {0, 0};
    map[tu_rng_range(&r, 0, 1)] = 2; /* TP shards one tensor dim */
    int64_t shape[2] = {tu_rng_range(&r, mesh[1], 3 * mesh[1]), tu_rng_range(&r, mesh[1], 20)};
    dcp_layout *l;
    assert_int_equal(dcpi_layout_create(2, mesh, ranks, 2, map, &l, NULL), DCP_OK);
    dcp_box box[36];
    dcpi_read_key keys[36];
    dcpi_rank_requests req[36];
    size_t nreq = 0;
    for (int32_t rk = 0; rk < n; rk++) {
      assert_int_equal(dcp_layout_box(l, shape, rk, &box[rk]), DCP_OK);
      int64_t numel;
      dcp_box_numel(&box[rk], &numel);
      if (!numel) continue; /* empty shards request nothing */
      keys[rk] = (dcpi_read_key){"w", 2, box[rk].offset, box[rk].size, numel * 2};
      req[nreq++] = (dcpi_rank_requests){rk, 1, &keys[rk]};
    }
    dcpi_read_groups *g;
    assert_int_equal(dcpi_read_groups_build(req, nreq, n, DCPI_BALANCE_LEAST_LOADED, &g, NULL),
                     DCP_OK);
    for (size_t q = 0; q < nreq; q++) {
      int32_t rk = req[q].rank, grp[36];
      size_t cnt;
      assert_int_equal(dcp_layout_replica_group(l, rk, grp, 36, &cnt), DCP_OK);
      dcpi_rank_reads v;
      assert_int_equal(dcpi_read_groups_rank(g, rk, &v), DCP_OK);
      assert_int_equal(v.nreads + v.nrecvs, 1);
      const dcpi_read_group *x = &g->groups[v.nreads ? v.reads[0] : v.recvs[0]];
      assert_int_equal(x->nmembers, cnt);
      assert_memory_equal(x->members, grp, cnt * sizeof *grp);
    }
    dcpi_read_groups_free(g);
    dcp_layout_free(l);
  }
}

static void test_errors(void **state) {
  (void)state;
  int64_t off = 0, sz = 4;
  dcpi_read_key k = {"w", 1, &off, &sz, 8}, k2 = {"w", 1, &off, &sz, 16};
  dcpi_rank_requests req[2] = {{0, 1, &k}, {0, 1, &k}};
  dcpi_read_groups *g = (dcpi_read_groups *)1;
  dcpi_err err;
  assert_int_equal(dcpi_read_groups_build(req, 2, 2, 0, &g, &err), DCP_EINVAL); /* repeated */
  assert_null(g);
  req[1].rank = 2;
  assert_int_equal(dcpi_read_groups_build(req, 2, 2, 0, &g, &err), DCP_EINVAL); /* range */
  req[1].rank = 1;
  req[1].keys = &k2;
  assert_int_equal(dcpi_read_groups_build(req, 2, 2, 0, &g, &err), DCP_EMISMATCH);
  assert_non_null(strstr(err.msg, "'w'"));
  k2.bytes = -1;
  assert_int_equal(dcpi_read_groups_build(req, 2, 2, 0, &g, &err), DCP_EINVAL);
  k2.bytes = 8, k2.fqn = NULL;
  assert_int_equal(dcpi_read_groups_build(req, 2, 2, 0, &g, &err), DCP_EINVAL);
  assert_int_equal(dcpi_read_groups_build(req, 2, 0, 0, &g, &err), DCP_EINVAL);
  assert_int_equal(dcpi_read_groups_build(NULL, 0, 3, 0, &g, &err), DCP_OK); /* nobody asks */
  assert_int_equal(g->ngroups, 0);
  dcpi_read_groups_free(g);
  dcpi_read_groups_free(NULL);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random), cmocka_unit_test(test_spreads_reads),
      cmocka_unit_test(test_layout_agrees), cmocka_unit_test(test_errors),
  };
  return TU_RUN(tests, NULL, NULL);
}

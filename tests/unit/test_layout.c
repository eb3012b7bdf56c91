/* test_layout.c — dcp_layout_box and dcp_layout_replica_group against a
 * brute-force reference on random meshes and tensor_maps (several mesh dims
 * on one tensor dim, uneven extents, custom rank orders); every replica's
 * boxes tile the tensor exactly once; and the layout errors. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MAXN 81 /* ranks: 4 mesh dims of extent <= 3 */

typedef struct mesh {
  uint32_t nd, tnd;
  int64_t shape[4];
  int64_t n;
  int32_t ranks[MAXN];
  uint32_t map[4];
  int64_t tshape[4];
} mesh;

static void random_mesh(tu_rng *r, mesh *m) {
  memset(m, 0, sizeof *m);
  m->nd = (uint32_t)tu_rng_range(r, 1, 4);
  m->tnd = (uint32_t)tu_rng_range(r, 0, 3);
  m->n = 1;
  for (uint32_t k = 0; k < m->nd; k++) m->n *= (m->shape[k] = tu_rng_range(r, 1, 3));
  for (int64_t i = 0; i < m->n; i++) m->ranks[i] = (int32_t)(3 * i + 1); /* gaps */
  for (int64_t i = m->n; i > 1; i--) {                                  /* custom order */
    int64_t j = tu_rng_range(r, 0, i - 1);
    int32_t t = m->ranks[i - 1];
    m->ranks[i - 1] = m->ranks[j], m->ranks[j] = t;
  }
  for (uint32_t k = 0; k < m->nd; k++) { /* each mesh dim shards one tensor dim or none */
    int64_t d = tu_rng_range(r, -1, (int64_t)m->tnd - 1);
    if (d >= 0) m->map[d] |= 1u << k;
  }
  for (uint32_t d = 0; d < m->tnd; d++) m->tshape[d] = tu_rng_range(r, 0, 10);
}

static void coords_of(const mesh *m, int64_t pos, int64_t *c) {
  for (uint32_t k = m->nd; k-- > 0;) c[k] = pos % m->shape[k], pos /= m->shape[k];
}

/* Reference box, straight from the documented rule: shard index combines
 * the mapped mesh coordinates in mesh order (lower dim more significant);
 * shard i of n covers [min(i*c, E), min((i+1)*c, E)) with c = ceil(E/n). */
static void ref_box(const mesh *m, int64_t pos, dcp_box *b) {
  int64_t c[4];
  coords_of(m, pos, c);
  b->ndim = m->tnd;
  for (uint32_t d = 0; d < m->tnd; d++) {
    int64_t idx = 0, n = 1, e = m->tshape[d];
    for (uint32_t k = 0; k < m->nd; k++)
      if (m->map[d] >> k & 1) idx = idx * m->shape[k] + c[k], n *= m->shape[k];
    int64_t ch = (e + n - 1) / n, lo = idx * ch < e ? idx * ch : e;
    int64_t hi = (idx + 1) * ch < e ? (idx + 1) * ch : e;
    b->offset[d] = lo, b->size[d] = hi - lo;
  }
}

static int boxes_equal(const dcp_box *a, const dcp_box *b) {
  return a->ndim == b->ndim && !memcmp(a->offset, b->offset, a->ndim * 8) &&
         !memcmp(a->size, b->size, a->ndim * 8);
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static void check_mesh(const mesh *m) {
  dcp_layout *l;
  assert_int_equal(dcp_layout_create(NULL, m->nd, m->shape, m->ranks, m->tnd, m->map, &l), DCP_OK);
  uint32_t used = 0;
  for (uint32_t d = 0; d < m->tnd; d++) used |= m->map[d];
  dcp_box box[MAXN];
  for (int64_t p = 0; p < m->n; p++) {
    dcp_box want;
    ref_box(m, p, &want);
    assert_int_equal(dcp_layout_box(l, m->tshape, m->ranks[p], &box[p]), DCP_OK);
    assert_true(boxes_equal(&box[p], &want));
  }
  /* replica group = ranks with the same coordinates on every used mesh dim */
  for (int64_t p = 0; p < m->n; p++) {
    int32_t want[MAXN], got[MAXN];
    size_t nw = 0, cnt;
    int64_t cp[4], cq[4];
    coords_of(m, p, cp);
    for (int64_t q = 0; q < m->n; q++) {
      coords_of(m, q, cq);
      int same = 1;
      for (uint32_t k = 0; k < m->nd; k++)
        if ((used >> k & 1) && cp[k] != cq[k]) same = 0;
      if (same) {
        want[nw++] = m->ranks[q];
        assert_true(boxes_equal(&box[p], &box[q])); /* replicas hold the same box */
      } else {
        int64_t numel;
        dcp_box_numel(&box[q], &numel);
        if (numel) assert_false(boxes_equal(&box[p], &box[q]));
      }
    }
    qsort(want, nw, sizeof *want, cmp_i32);
    assert_int_equal(dcp_layout_replica_group(l, m->ranks[p], NULL, 0, &cnt), DCP_OK);
    assert_int_equal(cnt, nw);
    assert_int_equal(dcp_layout_replica_group(l, m->ranks[p], got, MAXN, &cnt), DCP_OK);
    assert_memory_equal(got, want, nw * sizeof *got);
    int32_t few[1] = {-5};
    assert_int_equal(dcp_layout_replica_group(l, m->ranks[p], few, 1, &cnt), DCP_OK);
    assert_int_equal(few[0], want[0]);
  }
  /* each replica (fixed coordinates on the replicating dims) tiles the
   * tensor exactly once */
  int64_t numel = 1, pt[4];
  for (uint32_t d = 0; d < m->tnd; d++) numel *= m->tshape[d];
  for (int64_t p = 0; p < m->n; p++) {
    int64_t cp[4], cq[4];
    coords_of(m, p, cp);
    int first = 1; /* only check for the replica's first member position */
    for (uint32_t k = 0; k < m->nd; k++)
      if ((used >> k & 1) && cp[k] != 0) first = 0;
    if (!first) continue;
    for (int64_t e = 0; e < numel; e++) {
      int64_t rest = e, cover = 0;
      for (uint32_t d = m->tnd; d-- > 0;) pt[d] = rest % m->tshape[d], rest /= m->tshape[d];
      for (int64_t q = 0; q < m->n; q++) {
        coords_of(m, q, cq);
        int same = 1;
        for (uint32_t k = 0; k < m->nd; k++)
          if (!(used >> k & 1) && cp[k] != cq[k]) same = 0;
        if (same) cover += tu_box_contains(&box[q], pt);
      }
      assert_int_equal(cover, 1);
    }
  }
  dcp_layout_free(l);
}

static void test_random(void **state) {
  (void)state;
  tu_rng r;
  tu_rng_seed(&r, tu_seed(3));
  mesh m;
  for (int it = 0; it < 3000; it++) {
    random_mesh(&r, &m);
    check_mesh(&m);
  }
}

/* A known uneven case: 10 over 4 shards → 3,3,3,1; 2 over 4 → 1,1,0,0. */
static void test_uneven(void **state) {
  (void)state;
  int64_t ms[2] = {2, 2}, shape[1] = {10};
  uint32_t map[1] = {3}; /* both mesh dims on dim 0: index = c0*2 + c1 */
  dcp_layout *l;
  dcp_box b;
  assert_int_equal(dcp_layout_create(NULL, 2, ms, NULL, 1, map, &l), DCP_OK);
  int64_t want_off[4] = {0, 3, 6, 9}, want_sz[4] = {3, 3, 3, 1};
  for (int32_t rk = 0; rk < 4; rk++) {
    assert_int_equal(dcp_layout_box(l, shape, rk, &b), DCP_OK);
    assert_int_equal(b.offset[0], want_off[rk]);
    assert_int_equal(b.size[0], want_sz[rk]);
  }
  shape[0] = 2;
  assert_int_equal(dcp_layout_box(l, shape, 3, &b), DCP_OK);
  assert_int_equal(b.offset[0], 2);
  assert_int_equal(b.size[0], 0);
  dcp_layout_free(l);
}

static void test_errors(void **state) {
  (void)state;
  dcp_ctx *ctx;
  assert_int_equal(dcp_ctx_create(NULL, &ctx), DCP_OK);
  dcp_layout *l = NULL;
  int64_t ms[2] = {2, 2}, shape[2] = {4, 4};
  int32_t dup[4] = {0, 1, 1, 3}, neg[4] = {0, 1, -2, 3};
  uint32_t map[2] = {1, 2}, bad[2] = {4, 0}, reuse[2] = {1, 3};
  assert_int_equal(dcp_layout_create(ctx, 2, ms, dup, 2, map, &l), DCP_EINVAL);
  assert_non_null(strstr(dcp_ctx_last_error(ctx), "twice"));
  assert_null(l);
  assert_int_equal(dcp_layout_create(ctx, 2, ms, neg, 2, map, &l), DCP_EINVAL);
  assert_int_equal(dcp_layout_create(ctx, 2, ms, NULL, 2, bad, &l), DCP_EINVAL);
  assert_int_equal(dcp_layout_create(ctx, 2, ms, NULL, 2, reuse, &l), DCP_EINVAL);
  assert_int_equal(dcp_layout_create(ctx, 0, ms, NULL, 2, map, &l), DCP_EINVAL);
  int64_t zero[2] = {2, 0};
  assert_int_equal(dcp_layout_create(ctx, 2, zero, NULL, 2, map, &l), DCP_EINVAL);
  assert_int_equal(dcp_layout_create(ctx, 2, ms, NULL, 2, NULL, &l), DCP_EINVAL);
  int64_t huge[2] = {INT64_C(1) << 20, INT64_C(1) << 20};
  assert_int_equal(dcp_layout_create(ctx, 2, huge, NULL, 2, map, &l), DCP_EOVERFLOW);
  assert_int_equal(dcp_layout_create(ctx, 2, ms, NULL, 2, map, &l), DCP_OK);
  dcp_box b;
  size_t cnt;
  int32_t out[4];
  assert_int_equal(dcp_layout_box(l, shape, 4, &b), DCP_ENOTFOUND);
  assert_int_equal(dcp_layout_box(l, shape, -1, &b), DCP_ENOTFOUND);
  assert_int_equal(dcp_layout_replica_group(l, 7, out, 4, &cnt), DCP_ENOTFOUND);
  assert_int_equal(dcp_layout_replica_group(l, 0, NULL, 4, &cnt), DCP_EINVAL);
  assert_int_equal(dcp_layout_replica_group(l, 0, out, 4, NULL), DCP_EINVAL);
  int64_t negshape[2] = {4, -1};
  assert_int_equal(dcp_layout_box(l, negshape, 0, &b), DCP_EINVAL);
  assert_int_equal(dcp_layout_box(NULL, shape, 0, &b), DCP_EINVAL);
  dcp_layout_free(l);
  dcp_layout_free(NULL);
  dcp_ctx_free(ctx);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random),
      cmocka_unit_test(test_uneven),
      cmocka_unit_test(test_errors),
  };
  return TU_RUN(tests, NULL, NULL);
}

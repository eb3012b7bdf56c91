/* test_save_plan_errors.c — every validation error of the global save plan
 * and of local plan building: the status, and a message that names the
 * fqn (or key), the ranks and the values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "planner/save_plan.h"

#define W 4

typedef struct fixture {
  dcpi_local_plan *p[W];
  uint32_t idx[W][8];
  int n;
} fixture;

static void fx_init(fixture *f, int n) {
  memset(f, 0, sizeof *f);
  f->n = n;
  for (int r = 0; r < n; r++)
    assert_int_equal(dcpi_local_plan_create(r, n, NULL, &f->p[r], NULL), DCP_OK);
}

/* Declare tensor slot s on rank r. */
static void fx_tensor(fixture *f, int r, int s, const char *fqn, dcp_dtype dt, uint32_t ndim,
                      const int64_t *shape) {
  dcpi_err err;
  assert_int_equal(dcpi_local_plan_add_tensor(f->p[r], fqn, dt, ndim, shape, &f->idx[r][s], &err),
                   DCP_OK);
}

static void fx_chunk(fixture *f, int r, int s, const int64_t *off, const int64_t *sz) {
  assert_int_equal(dcpi_local_plan_add_chunk(f->p[r], f->idx[r][s], off, sz, NULL), DCP_OK);
}

/* The 1-d tensor `fqn` of extent ext with box [o, o+z) on rank r. */
static void fx_1d(fixture *f, int r, int s, const char *fqn, int64_t ext, int64_t o, int64_t z) {
  fx_tensor(f, r, s, fqn, DCP_F32, 1, &ext);
  fx_chunk(f, r, s, &o, &z);
}

static void fx_finish(fixture *f) {
  for (int r = 0; r < f->n; r++) {
    dcpi_err err;
    dcp_status rc = dcpi_local_plan_finish(f->p[r], &err);
    if (rc) fail_msg("finish rank %d: %s", r, err.msg);
  }
}

static void fx_free(fixture *f) {
  for (int r = 0; r < f->n; r++) dcpi_local_plan_free(f->p[r]);
}

/* Build, expect `code`, and every NULL-terminated needle in the message. */
static void expect(fixture *f, dcp_status code, ...) {
  dcpi_global_plan *gp = (dcpi_global_plan *)&gp;
  dcpi_err err;
  dcpi_err_clear(&err);
  dcp_status rc =
      dcpi_global_plan_build((const dcpi_local_plan *const *)f->p, (size_t)f->n, NULL, &gp, &err);
  if (rc != code) fail_msg("expected %d, got %d: %s", code, rc, err.msg);
  assert_null(gp);
  va_list ap;
  va_start(ap, code);
  for (const char *s; (s = va_arg(ap, const char *));)
    if (!strstr(err.msg, s)) fail_msg("message '%s' lacks '%s'", err.msg, s);
  va_end(ap);
  fx_free(f);
}

static void test_dtype_mismatch(void **state) {
  (void)state;
  fixture f;
  fx_init(&f, 2);
  int64_t shape[1] = {4};
  fx_tensor(&f, 0, 0, "enc.w", DCP_F32, 1, shape);
  fx_tensor(&f, 1, 0, "enc.w", DCP_BF16, 1, shape);
  fx_finish(&f);
  expect(&f, DCP_EMISMATCH, "'enc.w'", "F32", "BF16", "rank 0", "rank 1", NULL);
}

static void test_shape_mismatch(void **state) {
  (void)state;
  fixture f;
  fx_init(&f, 3);
  int64_t a[2] = {4, 8}, b[2] = {4, 9}, c[1] = {32};
  fx_tensor(&f, 0, 0, "enc.w", DCP_F32, 2, a);
  fx_tensor(&f, 1, 0, "enc.w", DCP_F32, 2, a);
  fx_tensor(&f, 2, 0, "enc.w", DCP_F32, 2, b);
  fx_finish(&f);
  expect(&f, DCP_EMISMATCH, "'enc.w'", "[4, 8]", "[4, 9]", "rank 0", "rank 2", NULL);
  fx_init(&f, 2); /* different ndim */
  fx_tensor(&f, 0, 0, "x", DCP_F32, 2, a);
  fx_tensor(&f, 1, 0, "x", DCP_F32, 1, c);
  fx_finish(&f);
  expect(&f, DCP_EMISMATCH, "'x'", "[4, 8]", "[32]", NULL);
}

static void test_tensor_vs_bytes(void **state) {
  (void)state;
  fixture f;
  fx_init(&f, 2);
  int64_t shape[1] = {4};
  fx_tensor(&f, 0, 0, "step", DCP_I64, 1, shape);
  assert_int_equal(dcpi_local_plan_add_bytes(f.p[1], "step", DCP_SCOPE_REPLICATED, 8, NULL), DCP_OK);
  fx_finish(&f);
  expect(&f, DCP_EMISMATCH, "'step'", "tensor on rank 0", "bytes item on rank 1", NULL);
}

static void test_bounds(void **state) {
  (void)state;
  fixture f;
  fx_init(&f, 2);
  fx_1d(&f, 0, 0, "w", 8, 0, 4);
  fx_1d(&f, 1, 0, "w", 8, 4, 5);
  fx_finish(&f);
  expect(&f, DCP_EBOUNDS, "'w'", "rank 1", "[4:9]", "ends at 9", "[8]", NULL);
  fx_init(&f, 2); /* negative offset */
  fx_1d(&f, 0, 0, "w", 8, 0, 8);
  fx_1d(&f, 1, 0, "w", 8, -2, 2);
  fx_finish(&f);
  expect(&f, DCP_EBOUNDS, "'w'", "rank 1", "offset -2", NULL);
  fx_init(&f, 1); /* negative size */
  fx_1d(&f, 0, 0, "w", 8, 1, -1);
  fx_finish(&f);
  expect(&f, DCP_EBOUNDS, "'w'", "rank 0", "size -1", NULL);
  fx_init(&f, 1); /* 2-d, second dim out of bounds */
  int64_t shape[2] = {4, 4}, off[2] = {0, 2}, sz[2] = {4, 3};
  fx_tensor(&f, 0, 0, "m", DCP_U8, 2, shape);
  fx_chunk(&f, 0, 0, off, sz);
  fx_finish(&f);
  expect(&f, DCP_EBOUNDS, "'m'", "dim 1", "[0:4, 2:5]", NULL);
}

static void test_overflow(void **state) {
  (void)state;
  fixture f;
  fx_init(&f, 1);
  fx_1d(&f, 0, 0, "w", 8, INT64_MAX - 1, 5);
  fx_finish(&f);
  expect(&f, DCP_EOVERFLOW, "'w'", "rank 0", "overflows", NULL);
  /* two tensors that are each fine but together exceed int64 bytes */
  fx_init(&f, 1);
  int64_t big = INT64_MAX / 2 + 1;
  fx_tensor(&f, 0, 0, "a", DCP_U8, 1, &big);
  fx_tensor(&f, 0, 1, "b", DCP_U8, 1, &big);
  fx_finish(&f);
  expect(&f, DCP_EOVERFLOW, "model size", "'b'", NULL);
  /* a shape whose byte size overflows is refused when declared */
  dcpi_local_plan *lp;
  dcpi_err err;
  assert_int_equal(dcpi_local_plan_create(0, 1, NULL, &lp, NULL), DCP_OK);
  int64_t huge[2] = {INT64_MAX / 2, 3};
  assert_int_equal(dcpi_local_plan_add_tensor(lp, "h", DCP_U8, 2, huge, NULL, &err), DCP_EOVERFLOW);
  dcpi_local_plan_free(lp);
}

static void test_overlap(void **state) {
  (void)state;
  fixture f;
  fx_init(&f, 2); /* partial overlap across ranks */
  fx_1d(&f, 0, 0, "w", 8, 0, 5);
  fx_1d(&f, 1, 0, "w", 8, 3, 5);
  fx_finish(&f);
  expect(&f, DCP_EOVERLAP, "'w'", "[0:5] on rank 0", "[3:8] on rank 1", NULL);
  fx_init(&f, 2); /* same offset, different size */
  fx_1d(&f, 0, 0, "w", 8, 0, 8);
  fx_1d(&f, 1, 0, "w", 8, 0, 4);
  fx_finish(&f);
  expect(&f, DCP_EOVERLAP, "'w'", "[0:4] on rank 1", "[0:8] on rank 0", NULL);
  fx_init(&f, 1); /* two chunks of one rank */
  int64_t o[2] = {0, 2}, z[2] = {3, 3}, e = 8;
  fx_tensor(&f, 0, 0, "w", DCP_F32, 1, &e);
  fx_chunk(&f, 0, 0, &o[0], &z[0]);
  fx_chunk(&f, 0, 0, &o[1], &z[1]);
  fx_finish(&f);
  expect(&f, DCP_EOVERLAP, "'w'", "[0:3]", "[2:5]", NULL);
  /* 2-d: boxes that overlap in dim 0 but not dim 1 are fine; a box that
   * overlaps one of them in both is found */
  fx_init(&f, 3);
  int64_t shape[2] = {4, 6};
  int64_t off[3][2] = {{0, 0}, {0, 3}, {2, 2}}, sz[3][2] = {{4, 3}, {4, 3}, {1, 2}};
  for (int r = 0; r < 3; r++) {
    fx_tensor(&f, r, 0, "m", DCP_F32, 2, shape);
    fx_chunk(&f, r, 0, off[r], sz[r]);
  }
  fx_finish(&f);
  expect(&f, DCP_EOVERLAP, "'m'", "rank 2", "[2:3, 2:4]", NULL);
}

/* Hundreds of column strips: the sweep must still find the one overlap
 * (and not need a pairwise loop to do it). */
static void test_overlap_many_strips(void **state) {
  (void)state;
  enum { N = 512 };
  dcpi_local_plan *p[N];
  for (int r = 0; r < N; r++) {
    int64_t shape[2] = {8, 2 * N}, off[2] = {0, 2 * r}, sz[2] = {8, 2};
    if (r == 300) off[1] = 601; /* overlaps rank 300's neighbour, rank 301 */
    uint32_t t;
    assert_int_equal(dcpi_local_plan_create(r, N, NULL, &p[r], NULL), DCP_OK);
    assert_int_equal(dcpi_local_plan_add_tensor(p[r], "emb", DCP_BF16, 2, shape, &t, NULL), DCP_OK);
    assert_int_equal(dcpi_local_plan_add_chunk(p[r], t, off, sz, NULL), DCP_OK);
    assert_int_equal(dcpi_local_plan_finish(p[r], NULL), DCP_OK);
  }
  dcpi_global_plan *gp;
  dcpi_err err;
  assert_int_equal(dcpi_global_plan_build((const dcpi_local_plan *const *)p, N, NULL, &gp, &err),
                   DCP_EOVERLAP);
  assert_non_null(strstr(err.msg, "'emb'"));
  assert_non_null(strstr(err.msg, "rank 300"));
  assert_non_null(strstr(err.msg, "rank 301"));
  for (int r = 0; r < N; r++) dcpi_local_plan_free(p[r]);
}

static void test_incomplete(void **state) {
  (void)state;
  fixture f;
  fx_init(&f, 2);
  fx_1d(&f, 0, 0, "w", 8, 0, 3);
  fx_1d(&f, 1, 0, "w", 8, 5, 3);
  fx_finish(&f);
  expect(&f, DCP_EINCOMPLETE, "'w'", "6 of 8", NULL);
  fx_init(&f, 1); /* declared, never given a chunk */
  int64_t e = 3;
  fx_tensor(&f, 0, 0, "lonely", DCP_F32, 1, &e);
  fx_finish(&f);
  expect(&f, DCP_EINCOMPLETE, "'lonely'", "0 of 3", NULL);
}

static void test_bytes_scope(void **state) {
  (void)state;
  fixture f;
  fx_init(&f, 3);
  for (int r = 0; r < 3; r++)
    assert_int_equal(dcpi_local_plan_add_bytes(f.p[r], "rng", DCP_SCOPE_REPLICATED, r == 2 ? 16 : 8, NULL),
                     DCP_OK);
  fx_finish(&f);
  expect(&f, DCP_ESCOPE, "'rng'", "length 8 on rank 0", "16 on rank 2", NULL);
  fx_init(&f, 2);
  assert_int_equal(dcpi_local_plan_add_bytes(f.p[0], "rng", DCP_SCOPE_REPLICATED, 8, NULL), DCP_OK);
  assert_int_equal(dcpi_local_plan_add_bytes(f.p[1], "rng", DCP_SCOPE_PER_RANK, 8, NULL), DCP_OK);
  fx_finish(&f);
  expect(&f, DCP_ESCOPE, "'rng'", "REPLICATED on rank 0", "PER_RANK on rank 1", NULL);
  /* per-rank lengths may differ */
  fx_init(&f, 2);
  assert_int_equal(dcpi_local_plan_add_bytes(f.p[0], "rng", DCP_SCOPE_PER_RANK, 8, NULL), DCP_OK);
  assert_int_equal(dcpi_local_plan_add_bytes(f.p[1], "rng", DCP_SCOPE_PER_RANK, 9, NULL), DCP_OK);
  fx_finish(&f);
  dcpi_global_plan *gp;
  assert_int_equal(dcpi_global_plan_build((const dcpi_local_plan *const *)f.p, 2, NULL, &gp, NULL), DCP_OK);
  assert_int_equal(dcpi_global_plan_rank_load(gp, 1), 9);
  dcpi_global_plan_free(gp);
  fx_free(&f);
}

static void test_plan_set(void **state) {
  (void)state;
  dcpi_local_plan *a, *b, *c;
  dcpi_global_plan *gp;
  dcpi_err err;
  assert_int_equal(dcpi_local_plan_create(0, 2, NULL, &a, NULL), DCP_OK);
  assert_int_equal(dcpi_local_plan_create(1, 3, NULL, &b, NULL), DCP_OK);
  assert_int_equal(dcpi_local_plan_create(1, 2, NULL, &c, NULL), DCP_OK);
  const dcpi_local_plan *set[2] = {a, c};
  assert_int_equal(dcpi_global_plan_build(set, 2, NULL, &gp, &err), DCP_EINVAL); /* unfinished */
  assert_non_null(strstr(err.msg, "not finished"));
  dcpi_local_plan_finish(a, NULL), dcpi_local_plan_finish(b, NULL), dcpi_local_plan_finish(c, NULL);
  set[1] = b;
  assert_int_equal(dcpi_global_plan_build(set, 2, NULL, &gp, &err), DCP_EINVAL);
  assert_non_null(strstr(err.msg, "world size 3"));
  set[0] = c, set[1] = a;
  assert_int_equal(dcpi_global_plan_build(set, 2, NULL, &gp, &err), DCP_EINVAL);
  assert_non_null(strstr(err.msg, "plans[0] is the plan of rank 1"));
  set[0] = a, set[1] = c;
  dcpi_save_opts o;
  dcpi_save_opts_init(&o);
  o.block_size = 7;
  assert_int_equal(dcpi_global_plan_build(set, 2, &o, &gp, &err), DCP_EINVAL);
  assert_non_null(strstr(err.msg, "other options"));
  assert_int_equal(dcpi_global_plan_build(set, 0, NULL, &gp, &err), DCP_EINVAL);
  assert_int_equal(dcpi_global_plan_build(set, 2, NULL, NULL, &err), DCP_EINVAL);
  assert_int_equal(dcpi_global_plan_build(set, 2, NULL, &gp, &err), DCP_OK);
  assert_int_equal(dcpi_global_plan_item_count(gp), 0);
  dcpi_global_plan_free(gp);
  dcpi_local_plan_free(a), dcpi_local_plan_free(b), dcpi_local_plan_free(c);
}

static void test_local_errors(void **state) {
  (void)state;
  dcpi_local_plan *lp;
  dcpi_err err;
  dcpi_save_opts o;
  dcpi_save_opts_init(&o);
  assert_int_equal(dcpi_local_plan_create(2, 2, NULL, &lp, &err), DCP_EINVAL);
  o.block_size = 0;
  assert_int_equal(dcpi_local_plan_create(0, 2, &o, &lp, &err), DCP_EINVAL);
  assert_int_equal(dcpi_local_plan_create(0, 2, NULL, &lp, &err), DCP_OK);
  int64_t e = 4, off = 0, sz = 4;
  uint32_t t;
  assert_int_equal(dcpi_local_plan_add_tensor(lp, "", DCP_F32, 1, &e, &t, &err), DCP_ENAME);
  assert_int_equal(dcpi_local_plan_add_tensor(lp, "a\nb", DCP_F32, 1, &e, &t, &err), DCP_ENAME);
  assert_int_equal(dcpi_local_plan_add_tensor(lp, "w", DCP_DTYPE_INVALID, 1, &e, &t, &err), DCP_EINVAL);
  assert_int_equal(dcpi_local_plan_add_tensor(lp, "w", DCP_F32, 17, &e, &t, &err), DCP_EINVAL);
  assert_int_equal(dcpi_local_plan_add_tensor(lp, "w", DCP_F32, 1, &e, &t, &err), DCP_OK);
  assert_int_equal(dcpi_local_plan_add_chunk(lp, t + 1, &off, &sz, &err), DCP_ENOTFOUND);
  assert_int_equal(dcpi_local_plan_add_chunk(lp, t, NULL, &sz, &err), DCP_EINVAL);
  assert_int_equal(dcpi_local_plan_add_bytes(lp, "b", (dcp_scope)7, 1, &err), DCP_EINVAL);
  assert_int_equal(dcpi_local_plan_add_bytes(lp, "b", DCP_SCOPE_PER_RANK, -1, &err), DCP_EINVAL);
  assert_int_equal(dcpi_local_plan_add_chunk(lp, t, &off, &sz, &err), DCP_OK);
  assert_int_equal(dcpi_local_plan_add_chunk(lp, t, &off, &sz, &err), DCP_OK);
  assert_int_equal(dcpi_local_plan_finish(lp, &err), DCP_EEXIST); /* same box twice */
  assert_non_null(strstr(err.msg, "[0:4]"));
  dcpi_local_plan_free(lp);
  assert_int_equal(dcpi_local_plan_create(0, 1, NULL, &lp, &err), DCP_OK);
  assert_int_equal(dcpi_local_plan_add_tensor(lp, "w", DCP_F32, 1, &e, &t, &err), DCP_OK);
  assert_int_equal(dcpi_local_plan_add_bytes(lp, "w", DCP_SCOPE_PER_RANK, 1, &err), DCP_OK);
  assert_int_equal(dcpi_local_plan_finish(lp, &err), DCP_EEXIST); /* shared namespace */
  assert_non_null(strstr(err.msg, "'w'"));
  dcpi_local_plan_free(lp);
  assert_int_equal(dcpi_local_plan_create(0, 1, NULL, &lp, &err), DCP_OK);
  assert_int_equal(dcpi_local_plan_add_tensor(lp, "w", DCP_F32, 1, &e, &t, &err), DCP_OK);
  assert_int_equal(dcpi_local_plan_add_tensor(lp, "w", DCP_F32, 1, &e, &t, &err), DCP_OK);
  assert_int_equal(dcpi_local_plan_finish(lp, &err), DCP_EEXIST);
  dcpi_local_plan_free(lp);
  assert_int_equal(dcpi_local_plan_create(0, 1, NULL, &lp, &err), DCP_OK);
  assert_int_equal(dcpi_local_plan_finish(lp, &err), DCP_OK);
  assert_int_equal(dcpi_local_plan_add_tensor(lp, "w", DCP_F32, 1, &e, &t, &err), DCP_EINVAL);
  assert_int_equal(dcpi_local_plan_finish(lp, &err), DCP_EINVAL);
  dcpi_local_plan_free(lp);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dtype_mismatch),   cmocka_unit_test(test_shape_mismatch),
      cmocka_unit_test(test_tensor_vs_bytes),  cmocka_unit_test(test_bounds),
      cmocka_unit_test(test_overflow),         cmocka_unit_test(test_overlap),
      cmocka_unit_test(test_overlap_many_strips), cmocka_unit_test(test_incomplete),
      cmocka_unit_test(test_bytes_scope),      cmocka_unit_test(test_plan_set),
      cmocka_unit_test(test_local_errors),
  };
  return TU_RUN(tests, NULL, NULL);
}

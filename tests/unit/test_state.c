/* dcp_state: name rules, tensor/chunk/flat/sharded/flat-sharded/bytes items and their
 * errors; a failed call leaves the state unchanged. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "model/state.h"

typedef struct fixture {
  dcp_ctx *ctx;
  dcp_state *st;
} fixture;

static int setup_rank(void **state, int32_t rank, int32_t world) {
  fixture *f = calloc(1, sizeof *f);
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.rank = rank;
  cfg.world_size = world;
  assert_int_equal(dcp_ctx_create(&cfg, &f->ctx), DCP_OK);
  assert_int_equal(dcp_state_create(f->ctx, &f->st), DCP_OK);
  *state = f;
  return 0;
}

static int setup(void **state) { return setup_rank(state, 0, 1); }
static int setup_rank5(void **state) { return setup_rank(state, 5, 8); }

static int teardown(void **state) {
  fixture *f = *state;
  dcp_state_free(f->st);
  dcp_ctx_free(f->ctx);
  free(f);
  return 0;
}

static void test_names(void **state) {
  fixture *f = *state;
  int64_t shape[1] = {2};
  assert_int_equal(dcp_state_add_tensor(f->st, "", DCP_F32, 1, shape), DCP_ENAME);
  assert_int_equal(dcp_state_add_tensor(f->st, NULL, DCP_F32, 1, shape), DCP_ENAME);
  assert_int_equal(dcp_state_add_tensor(f->st, "a\tb", DCP_F32, 1, shape), DCP_ENAME);
  assert_non_null(strstr(dcp_ctx_last_error(f->ctx), "control character"));
  assert_int_equal(dcp_state_add_tensor(f->st, "a\x7f", DCP_F32, 1, shape), DCP_ENAME);
  assert_int_equal(dcp_state_add_tensor(f->st, "bad\xc3(", DCP_F32, 1, shape), DCP_ENAME);
  assert_int_equal(dcp_state_add_tensor(f->st, "overlong\xc0\xaf", DCP_F32, 1, shape), DCP_ENAME);
  assert_int_equal(dcp_state_add_tensor(f->st, "surrogate\xed\xa0\x80", DCP_F32, 1, shape),
                   DCP_ENAME);
  char *huge = malloc(DCP_MAX_NAME + 2);
  memset(huge, 'x', DCP_MAX_NAME + 1);
  huge[DCP_MAX_NAME + 1] = '\0';
  assert_int_equal(dcp_state_add_tensor(f->st, huge, DCP_F32, 1, shape), DCP_ENAME);
  huge[DCP_MAX_NAME] = '\0'; /* exactly the limit is fine */
  assert_int_equal(dcp_state_add_tensor(f->st, huge, DCP_F32, 1, shape), DCP_OK);
  free(huge);
  /* Path-like fqns are refused (tests/unit/test_hostile_names.c has the
   * rest); non-ASCII UTF-8 is fine. */
  assert_int_equal(dcp_state_add_tensor(f->st, "params/../dense/kernel", DCP_F32, 1, shape),
                   DCP_ENAME);
  assert_int_equal(dcp_state_add_tensor(f->st, "层.权重", DCP_F32, 1, shape), DCP_OK);
  assert_int_equal(dcp_state_tensor_count(f->st), 2);
}

static void test_tensor_errors(void **state) {
  fixture *f = *state;
  int64_t shape[2] = {3, 4}, neg[2] = {3, -1}, big[2] = {INT64_MAX / 2, 3};
  assert_int_equal(dcp_state_add_tensor(f->st, "w", DCP_DTYPE_INVALID, 2, shape), DCP_EINVAL);
  assert_int_equal(dcp_state_add_tensor(f->st, "w", DCP_F32, DCP_MAX_NDIM + 1, shape), DCP_EINVAL);
  assert_int_equal(dcp_state_add_tensor(f->st, "w", DCP_F32, 2, neg), DCP_EINVAL);
  assert_int_equal(dcp_state_add_tensor(f->st, "w", DCP_U8, 2, big), DCP_EOVERFLOW);
  int64_t bytes_big[1] = {INT64_MAX / 4};
  assert_int_equal(dcp_state_add_tensor(f->st, "w", DCP_F64, 1, bytes_big), DCP_EOVERFLOW);
  assert_int_equal(dcp_state_tensor_count(f->st), 0);
  assert_int_equal(dcp_state_add_tensor(f->st, "w", DCP_F32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(f->st, "w", DCP_F16, 2, shape), DCP_EEXIST);
  char blob[4];
  assert_int_equal(dcp_state_add_bytes(f->st, "w", DCP_SCOPE_REPLICATED, blob, 4), DCP_EEXIST);
  assert_int_equal(dcp_state_add_tensor(f->st, "scalar", DCP_F32, 0, NULL), DCP_OK);
}

static void test_chunks(void **state) {
  fixture *f = *state;
  int64_t shape[2] = {4, 6};
  float data[24];
  assert_int_equal(dcp_state_add_tensor(f->st, "w", DCP_F32, 2, shape), DCP_OK);
  int64_t o1[2] = {0, 0}, s1[2] = {2, 6}, o2[2] = {2, 0}, s2[2] = {2, 3};
  assert_int_equal(dcp_state_add_chunk(f->st, "nope", o1, s1, data), DCP_ENOTFOUND);
  assert_int_equal(dcp_state_add_chunk(f->st, "w", o1, s1, data), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(f->st, "w", o2, s2, data + 12), DCP_OK);
  int64_t o3[2] = {1, 2}, s3[2] = {2, 2};
  assert_int_equal(dcp_state_add_chunk(f->st, "w", o3, s3, data), DCP_EOVERLAP);
  assert_non_null(strstr(dcp_ctx_last_error(f->ctx), "[1:3, 2:4]"));
  int64_t o4[2] = {3, 3}, s4[2] = {2, 3};
  assert_int_equal(dcp_state_add_chunk(f->st, "w", o4, s4, data), DCP_EBOUNDS);
  /* empty boxes overlap nothing, but the same one twice is refused here,
   * not later by the save's plan (DCP_EEXIST); another empty one is fine */
  int64_t oe[2] = {1, 6}, se[2] = {2, 0}, oe2[2] = {2, 6};
  assert_int_equal(dcp_state_add_chunk(f->st, "w", oe, se, NULL), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(f->st, "w", oe, se, NULL), DCP_EOVERLAP);
  assert_int_equal(dcp_state_add_chunk(f->st, "w", oe2, se, NULL), DCP_OK);
  int64_t o5[2] = {-1, 3}, s5[2] = {1, 3};
  assert_int_equal(dcp_state_add_chunk(f->st, "w", o5, s5, data), DCP_EINVAL);
  int64_t o6[2] = {INT64_MAX, 0}, s6[2] = {1, 1};
  assert_int_equal(dcp_state_add_chunk(f->st, "w", o6, s6, data), DCP_EOVERFLOW);
  int64_t o7[2] = {2, 3}, s7[2] = {2, 3};
  assert_int_equal(dcp_state_add_chunk(f->st, "w", o7, s7, NULL), DCP_EINVAL);
  int64_t s8[2] = {0, 3}; /* empty chunks may have no data */
  assert_int_equal(dcp_state_add_chunk(f->st, "w", o7, s8, NULL), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(f->st, "w", o7, s7, data + 18), DCP_OK);
  assert_int_equal(f->st->nchunks, 6);
  assert_int_equal(f->st->chunks[1].nbytes, 2 * 3 * 4);
  assert_ptr_equal(f->st->chunks[5].data, data + 18);
  char blob[2];
  assert_int_equal(dcp_state_add_bytes(f->st, "step", DCP_SCOPE_REPLICATED, blob, 2), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(f->st, "step", o1, s1, data), DCP_ENOTFOUND);
}

static void test_flat(void **state) {
  fixture *f = *state;
  int64_t shape[2] = {4, 5};
  float buf[20];
  assert_int_equal(dcp_state_add_tensor(f->st, "flat", DCP_F32, 2, shape), DCP_OK);
  /* elements 3..13 of a 4x5 tensor: row 0 cols 3-4, row 1 whole, row 2 cols 0-2 */
  assert_int_equal(dcp_state_add_flat(f->st, "flat", NULL, 3, 10, buf), DCP_OK);
  assert_int_equal(f->st->nchunks, 3);
  const dcpi_chunk_item *c = f->st->chunks;
  assert_int_equal(c[0].box.offset[0], 0);
  assert_int_equal(c[0].box.offset[1], 3);
  assert_int_equal(c[0].box.size[1], 2);
  assert_ptr_equal(c[0].data, buf);
  assert_int_equal(c[1].box.offset[0], 1);
  assert_int_equal(c[1].box.size[1], 5);
  assert_ptr_equal(c[1].data, buf + 2);
  assert_int_equal(c[2].box.offset[0], 2);
  assert_int_equal(c[2].box.size[1], 3);
  assert_ptr_equal(c[2].data, buf + 7);
  /* overlapping a range already added fails and adds nothing */
  assert_int_equal(dcp_state_add_flat(f->st, "flat", NULL, 12, 4, buf), DCP_EOVERLAP);
  assert_int_equal(f->st->nchunks, 3);
  assert_int_equal(dcp_state_add_flat(f->st, "flat", NULL, 15, 6, buf), DCP_EBOUNDS);
  /* a flat range of a sub-region (a TP shard): cols 2..4 of rows 2..3 */
  dcp_box region = {.ndim = 2, .offset = {2, 2}, .size = {2, 3}};
  assert_int_equal(dcp_state_add_flat(f->st, "flat", &region, 1, 4, buf), DCP_OK);
  assert_int_equal(f->st->nchunks, 5);
  assert_int_equal(f->st->chunks[3].box.offset[0], 2);
  assert_int_equal(f->st->chunks[3].box.offset[1], 3);
  assert_int_equal(f->st->chunks[3].box.size[1], 2);
  assert_int_equal(f->st->chunks[4].box.offset[0], 3);
  assert_int_equal(f->st->chunks[4].box.offset[1], 2);
  assert_int_equal(f->st->chunks[4].box.size[1], 2);
  assert_ptr_equal(f->st->chunks[4].data, buf + 2);
  dcp_box wrong = {.ndim = 1, .offset = {0}, .size = {4}};
  assert_int_equal(dcp_state_add_flat(f->st, "flat", &wrong, 0, 1, buf), DCP_EINVAL);
}

static void test_sharded(void **state) {
  fixture *f = *state; /* rank 5 of 8 */
  int64_t mesh[2] = {2, 4}; /* DP2 x TP4 */
  uint32_t map[2] = {0, 1u << 1}; /* dim 1 sharded by TP */
  dcp_layout *l;
  assert_int_equal(dcp_layout_create(f->ctx, 2, mesh, NULL, 2, map, &l), DCP_OK);
  int64_t shape[2] = {3, 10};
  float data[9];
  assert_int_equal(dcp_state_add_sharded(f->st, "w", DCP_F32, 2, shape, l, data), DCP_OK);
  /* rank 5 = mesh (1, 1): TP index 1 of ceil(10/4)=3 → cols 3..6 */
  const dcpi_chunk_item *c = &f->st->chunks[0];
  assert_int_equal(c->box.offset[1], 3);
  assert_int_equal(c->box.size[1], 3);
  assert_int_equal(c->box.size[0], 3);
  assert_non_null(f->st->tensors[0].layout);
  /* a failing call declares nothing */
  assert_int_equal(dcp_state_add_sharded(f->st, "v", DCP_F32, 2, shape, l, NULL), DCP_EINVAL);
  assert_int_equal(dcp_state_add_sharded(f->st, "v", DCP_F32, 1, shape, l, data), DCP_EINVAL);
  assert_int_equal(dcp_state_add_sharded(f->st, "w", DCP_F32, 2, shape, l, data), DCP_EEXIST);
  assert_int_equal(dcp_state_tensor_count(f->st), 1);
  assert_int_equal(dcp_state_add_tensor(f->st, "v", DCP_F32, 2, shape), DCP_OK);
  int32_t ranks[4] = {0, 1, 2, 3};
  int64_t small[1] = {4};
  dcp_layout *other;
  uint32_t map1[1] = {1};
  assert_int_equal(dcp_layout_create(f->ctx, 1, small, ranks, 1, map1, &other), DCP_OK);
  assert_int_equal(dcp_state_add_sharded(f->st, "u", DCP_F32, 1, shape, other, data),
                   DCP_ENOTFOUND);
  dcp_layout_free(other);
  dcp_layout_free(l);
}

/* Expect chunk k of the state: box (o0, o1) + (s0, s1) at data + at. */
static void expect_chunk(const fixture *f, size_t k, int64_t o0, int64_t o1, int64_t s0,
                         int64_t s1, const void *at) {
  const dcpi_chunk_item *c = &f->st->chunks[k];
  assert_int_equal(c->box.offset[0], o0);
  assert_int_equal(c->box.offset[1], o1);
  assert_int_equal(c->box.size[0], s0);
  assert_int_equal(c->box.size[1], s1);
  assert_ptr_equal(c->data, at);
}

static void test_flat_sharded(void **state) {
  fixture *f = *state; /* rank 5 of 8: mesh (1, 2) of DP2 x TP3 */
  int64_t mesh[2] = {2, 3}, shape[2] = {5, 4};
  uint32_t none[2] = {0, 0}, tp0[2] = {1u << 1, 0};
  dcp_layout *rep, *tp;
  assert_int_equal(dcp_layout_create(f->ctx, 2, mesh, NULL, 2, none, &rep), DCP_OK);
  assert_int_equal(dcp_layout_create(f->ctx, 2, mesh, NULL, 2, tp0, &tp), DCP_OK);
  dcp_box cell;
  int64_t begin, count;
  /* cut over TP only (replicated over DP): range 2 of 3 of 20 = [14, 20) */
  assert_int_equal(dcp_layout_flat_range(rep, shape, 2, 5, &cell, &begin, &count), DCP_OK);
  assert_int_equal(cell.size[0] * cell.size[1], 20);
  assert_int_equal(begin, 14);
  assert_int_equal(count, 6);
  float data[10];
  assert_int_equal(dcp_state_add_flat_sharded(f->st, "a", DCP_F32, 2, shape, rep, 2, data), DCP_OK);
  assert_int_equal(f->st->nchunks, 2); /* row 3 from column 2, then row 4 */
  expect_chunk(f, 0, 3, 2, 1, 2, data);
  expect_chunk(f, 1, 4, 0, 1, 4, data + 2);
  assert_null(f->st->tensors[0].layout); /* paths that do not know flat see hand chunks */
  assert_non_null(f->st->tensors[0].flat);
  /* flat dims 0: every dim that shards nothing (DP and TP): of [6, 4], range
   * 5 of 6 = [20, 24), row 5 */
  int64_t shape6[2] = {6, 4};
  assert_int_equal(dcp_state_add_flat_sharded(f->st, "b", DCP_F32, 2, shape6, rep, 0, data), DCP_OK);
  expect_chunk(f, 2, 5, 0, 1, 4, data);
  assert_int_equal(f->st->tensors[1].flat_dims, 3);
  /* TP cells (rows [4, 5)) cut over DP: range 1 of 2 of 4 = [2, 4) */
  assert_int_equal(dcp_layout_flat_range(tp, shape, 0, 5, &cell, &begin, &count), DCP_OK);
  assert_int_equal(cell.offset[0], 4);
  assert_int_equal(begin, 2);
  assert_int_equal(count, 2);
  assert_int_equal(dcp_state_add_flat_sharded(f->st, "c", DCP_F32, 2, shape, tp, 1, data), DCP_OK);
  expect_chunk(f, 3, 4, 2, 1, 2, data);
  /* a failing call declares nothing */
  assert_int_equal(dcp_state_add_flat_sharded(f->st, "v", DCP_F32, 2, shape, tp, 2, data),
                   DCP_EINVAL); /* TP shards it: cannot cut over TP too */
  assert_int_equal(dcp_state_add_flat_sharded(f->st, "v", DCP_F32, 2, shape, tp, 4, data),
                   DCP_EINVAL); /* no mesh dim 2 */
  assert_int_equal(dcp_state_add_flat_sharded(f->st, "v", DCP_F32, 2, shape, tp, 1, NULL),
                   DCP_EINVAL);
  assert_int_equal(dcp_state_add_flat_sharded(f->st, "v", DCP_F32, 1, shape, tp, 1, data),
                   DCP_EINVAL);
  assert_int_equal(dcp_state_add_flat_sharded(f->st, "a", DCP_F32, 2, shape, tp, 1, data),
                   DCP_EEXIST);
  assert_int_equal(dcp_layout_flat_range(tp, shape, 2, 5, &cell, &begin, &count), DCP_EINVAL);
  assert_int_equal(dcp_layout_flat_range(tp, shape, 0, 6, &cell, &begin, &count), DCP_ENOTFOUND);
  int64_t huge[2] = {INT64_MAX, 2};
  assert_int_equal(dcp_layout_flat_range(tp, huge, 0, 5, &cell, &begin, &count), DCP_EOVERFLOW);
  assert_int_equal(dcp_state_tensor_count(f->st), 3);
  assert_int_equal(f->st->nchunks, 4);
  /* an empty range adds a tensor with no chunk (NULL data is fine) */
  int64_t tiny[2] = {1, 1};
  assert_int_equal(dcp_state_add_flat_sharded(f->st, "e", DCP_F32, 2, tiny, rep, 0, NULL), DCP_OK);
  assert_int_equal(f->st->nchunks, 4);
  assert_int_equal(f->st->tensors[3].flat_parts, 0);
  dcp_layout_free(rep);
  dcp_layout_free(tp);
}

static void test_bytes(void **state) {
  fixture *f = *state;
  char blob[8] = "rngstat";
  assert_int_equal(dcp_state_add_bytes(f->st, "rng", DCP_SCOPE_PER_RANK, blob, 8), DCP_OK);
  assert_int_equal(dcp_state_add_bytes(f->st, "step", DCP_SCOPE_REPLICATED, blob, 4), DCP_OK);
  assert_int_equal(dcp_state_add_bytes(f->st, "rng", DCP_SCOPE_REPLICATED, blob, 8), DCP_EEXIST);
  assert_int_equal(dcp_state_add_bytes(f->st, "x", (dcp_scope)7, blob, 8), DCP_EINVAL);
  assert_int_equal(dcp_state_add_bytes(f->st, "x", DCP_SCOPE_PER_RANK, NULL, 8), DCP_EINVAL);
  assert_int_equal(dcp_state_add_bytes(f->st, "empty", DCP_SCOPE_PER_RANK, NULL, 0), DCP_OK);
  int64_t shape[1] = {1};
  assert_int_equal(dcp_state_add_tensor(f->st, "step", DCP_F32, 1, shape), DCP_EEXIST);
  assert_int_equal(dcp_state_bytes_count(f->st), 3);
  assert_int_equal(f->st->bytes[0].scope, DCP_SCOPE_PER_RANK);
  assert_ptr_equal(f->st->bytes[0].data, blob);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_names, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tensor_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_chunks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_flat, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sharded, setup_rank5, teardown),
      cmocka_unit_test_setup_teardown(test_flat_sharded, setup_rank5, teardown),
      cmocka_unit_test_setup_teardown(test_bytes, setup, teardown),
  };
  return TU_RUN(tests, NULL, NULL);
}

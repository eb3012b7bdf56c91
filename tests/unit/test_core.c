/* Context, status codes, version and dtypes. */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

#include <stddef.h>

#include "core/ctx.h"

static void test_version(void **state) {
  (void)state;
  assert_int_equal(dcp_version_number(), DCP_VERSION_NUMBER);
  char expect[32];
  snprintf(expect, sizeof expect, "%d.%d.%d", DCP_VERSION_MAJOR, DCP_VERSION_MINOR,
           DCP_VERSION_PATCH);
  assert_string_equal(dcp_version_string(), expect);
}

static void test_strerror_names_every_code(void **state) {
  (void)state;
  const char *seen[32] = {0};
  for (int s = 0; s >= DCP_EREPLICA; s--) {
    const char *msg = dcp_strerror((dcp_status)s);
    assert_non_null(msg);
    assert_string_not_equal(msg, "unknown status");
    for (int k = 0; k < -s; k++) assert_string_not_equal(seen[k], msg); /* distinct */
    seen[-s] = msg;
    assert_int_equal(dcp_is_error((dcp_status)s), s < 0);
  }
  assert_string_equal(dcp_strerror((dcp_status)-999), "unknown status");
  assert_string_equal(dcp_strerror((dcp_status)5), "unknown status");
}

static void test_ctx_config(void **state) {
  (void)state;
  dcp_ctx *ctx = (dcp_ctx *)0x1;
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  assert_int_equal(cfg.struct_size, sizeof cfg);
  assert_int_equal(cfg.world_size, 1);
  cfg.world_size = 4;
  cfg.rank = 4;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_EINVAL);
  assert_null(ctx);
  cfg.rank = -1;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_EINVAL);
  cfg.rank = 3;
  cfg.struct_size = 4; /* a caller from the future with a broken size */
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_EINVAL);
  cfg.struct_size = sizeof cfg;
  /* without a collective: a detached rank 3 of 4 (plans, no save/load) */
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_OK);
  assert_int_equal(dcp_ctx_rank(ctx), 3);
  assert_int_equal(dcp_ctx_world_size(ctx), 4);
  dcp_state *st;
  assert_int_equal(dcp_state_create(ctx, &st), DCP_OK);
  /* (it saves without coordination: test_save_load.c test_uncoordinated) */
  assert_int_equal(dcp_load(ctx, st, "/nonexistent/never-read", NULL), DCP_EINVAL);
  assert_non_null(strstr(dcp_ctx_last_error(ctx), "collective"));
  dcp_state_free(st);
  dcp_ctx_free(ctx);
  cfg.timeout_ms = 0; /* 0 means the default */
  cfg.world_size = 1;
  cfg.rank = 0;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_OK);
  dcp_ctx_free(ctx);
  cfg.timeout_ms = -1;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_EINVAL);
  assert_non_null(strstr(dcp_ctx_create_error(), "timeout_ms"));
  cfg.timeout_ms = 1000;
  int64_t bad_leases[] = {-1, 49, 24LL * 3600 * 1000 + 1};
  for (int i = 0; i < 3; i++) { /* 0 is the default; outside 50 ms .. a day is refused */
    cfg.lease_ms = bad_leases[i];
    assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_EINVAL);
    assert_non_null(strstr(dcp_ctx_create_error(), "lease_ms"));
  }
  cfg.lease_ms = 0;
  /* a caller built against the 0.1 config (rank and world only) */
  cfg.struct_size = offsetof(dcp_ctx_config, world_size) + sizeof cfg.world_size;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_OK);
  assert_string_equal(dcp_ctx_create_error(), "");
  assert_int_equal(dcp_ctx_rank(ctx), 0);
  assert_int_equal(dcp_ctx_world_size(ctx), 1);
  assert_string_equal(dcp_ctx_last_error(ctx), "");
  assert_int_equal(dcp_ctx_last_status(ctx), DCP_OK);
  dcp_ctx_free(ctx);
  dcp_ctx_free(NULL);
  assert_int_equal(dcp_ctx_create(NULL, NULL), DCP_EINVAL);
}

/* A world size the caller set that the collective contradicts is refused
 * with a reason (the single-process collective has one rank; the MPI case
 * is in tests/multirank/mpi_coll.c, check_ctx_world). */
static void test_ctx_world_mismatch(void **state) {
  (void)state;
  dcp_ctx *ctx = (dcp_ctx *)0x1;
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.coll = "single";
  cfg.world_size = 3;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_EINVAL);
  assert_null(ctx);
  assert_non_null(strstr(dcp_ctx_create_error(), "world of one rank"));
  cfg.world_size = 1; /* the default: the collective decides */
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_OK);
  dcp_ctx_free(ctx);
}

static void test_ctx_keeps_last_error(void **state) {
  (void)state;
  dcp_ctx *ctx;
  assert_int_equal(dcp_ctx_create(NULL, &ctx), DCP_OK);
  dcp_state *st;
  assert_int_equal(dcp_state_create(ctx, &st), DCP_OK);
  int64_t shape[1] = {4};
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 1, shape), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 1, shape), DCP_EEXIST);
  assert_int_equal(dcp_ctx_last_status(ctx), DCP_EEXIST);
  assert_non_null(strstr(dcp_ctx_last_error(ctx), "'w'"));
  /* a later success leaves the last error in place (it is the last failure) */
  assert_int_equal(dcp_state_add_tensor(st, "v", DCP_F32, 1, shape), DCP_OK);
  assert_int_equal(dcp_ctx_last_status(ctx), DCP_EEXIST);
  dcp_state_free(st);
  dcp_ctx_free(ctx);
}

static void test_dtypes(void **state) {
  (void)state;
  static const struct { dcp_dtype dt; const char *name; size_t size; } want[] = {
      {DCP_BOOL, "BOOL", 1}, {DCP_U8, "U8", 1},       {DCP_I8, "I8", 1},
      {DCP_I16, "I16", 2},   {DCP_U16, "U16", 2},     {DCP_I32, "I32", 4},
      {DCP_U32, "U32", 4},   {DCP_I64, "I64", 8},     {DCP_U64, "U64", 8},
      {DCP_F16, "F16", 2},   {DCP_BF16, "BF16", 2},   {DCP_F32, "F32", 4},
      {DCP_F64, "F64", 8},   {DCP_F8_E4M3, "F8_E4M3", 1}, {DCP_F8_E5M2, "F8_E5M2", 1},
      {DCP_F8_E8M0, "F8_E8M0", 1}, {DCP_C64, "C64", 8}};
  size_t n = sizeof want / sizeof want[0];
  assert_int_equal(n, DCP_DTYPE_END_ - 1);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(dcp_dtype_size(want[i].dt), want[i].size);
    assert_string_equal(dcp_dtype_name(want[i].dt), want[i].name);
    assert_int_equal(dcp_dtype_from_name(want[i].name), want[i].dt);
  }
  assert_int_equal(dcp_dtype_size(DCP_DTYPE_INVALID), 0);
  assert_int_equal(dcp_dtype_size(DCP_DTYPE_END_), 0);
  assert_int_equal(dcp_dtype_size((dcp_dtype)-3), 0);
  assert_null(dcp_dtype_name(DCP_DTYPE_END_));
  assert_int_equal(dcp_dtype_from_name("bf16"), DCP_DTYPE_INVALID);
  assert_int_equal(dcp_dtype_from_name(NULL), DCP_DTYPE_INVALID);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_version),
      cmocka_unit_test(test_strerror_names_every_code),
      cmocka_unit_test(test_ctx_config),
      cmocka_unit_test(test_ctx_world_mismatch),
      cmocka_unit_test(test_ctx_keeps_last_error),
      cmocka_unit_test(test_dtypes),
  };
  return TU_RUN(tests, NULL, NULL);
}

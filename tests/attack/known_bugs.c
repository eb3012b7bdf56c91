/* known_bugs — attack tests that fail on bugs found in files other helpers
 * own; each is registered DISABLED in CMakeLists.txt (with the reason) until
 * the owner fixes it. Run one by name: known_bugs PATTERN. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "at_gen.h"
#include "ckpt_files.h"
#include "testutil.h"

/* Load all of m from dir, the status (and its message on stderr). */
static dcp_status load_model(dcp_ctx *ctx, const at_model *m, const char *dir) {
  int wrong;
  dcp_status rc = at_load_all(ctx, m, 1, dir, &wrong);
  fprintf(stderr, "load: %s: %s\n", dcp_strerror(rc), dcp_ctx_last_error(ctx));
  assert_false(wrong);
  return rc;
}

/* A committed checkpoint whose data file is gone (deleted by hand, lost),
 * and a .metadata copied from another checkpoint (its files are not
 * there): nothing replaced the checkpoint, the same .metadata is read at
 * every attempt, so the load must say the file is missing
 * (DCP_EINCOMPLETE, as dcp_verify does, or DCP_ENOTFOUND) — not start over
 * 4 times and return DCP_ESTALE "replaced 4 times while it was read (a save
 * overwrites it in a loop?)". */
static void test_missing_data_file(void **state) {
  tu_fixture *f = *state;
  at_model m;
  at_model_gen(&m, 5);
  assert_int_equal(at_save(f->ctx, &m, 1, 0, f->ckpt, NULL), DCP_OK);
  char p[PATH_MAX + 64];
  assert_true(ck_data_file(f->ckpt, 0, p, sizeof p));
  assert_int_equal(unlink(p), 0);
  assert_int_equal(dcp_verify(f->ctx, f->ckpt, NULL), DCP_EINCOMPLETE);
  dcp_status rc = load_model(f->ctx, &m, f->ckpt);
  assert_true(rc == DCP_EINCOMPLETE || rc == DCP_ENOTFOUND);
}

/* An empty tensor (a zero extent) whose other extents are huge: the state
 * accepts shape [2^63-1, 0, 1] of F64 (0 elements, 0 bytes), so the save
 * must too; the metadata builder multiplies the element size by the
 * extents one at a time and fails it with DCP_EOVERFLOW "byte size
 * overflows int64" before it meets the 0. (The state's own check has the
 * same order dependence the other way: [0, M, M] is accepted and saves,
 * [M, M, 0] is DCP_EOVERFLOW at dcp_state_add_tensor.) */
static void test_empty_huge_extent(void **state) {
  tu_fixture *f = *state;
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  int64_t sh[3] = {INT64_MAX, 0, 1}, off[3] = {0, 0, 0};
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F64, 3, sh), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", off, sh, NULL), DCP_OK);
  int64_t last[3] = {INT64_MAX, INT64_MAX, 0}; /* the zero last: as empty */
  assert_int_equal(dcp_state_add_tensor(st, "z", DCP_F64, 3, last), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "z", off, last, NULL), DCP_OK);
  dcp_status rc = dcp_save(f->ctx, st, f->ckpt, NULL);
  fprintf(stderr, "save: %s: %s\n", dcp_strerror(rc), dcp_ctx_last_error(f->ctx));
  assert_int_equal(rc, DCP_OK);
  rc = dcp_load(f->ctx, st, f->ckpt, NULL);
  fprintf(stderr, "load: %s: %s\n", dcp_strerror(rc), dcp_ctx_last_error(f->ctx));
  assert_int_equal(rc, DCP_OK);
  dcp_state_free(st);
}

static int setup(void **state) { return tu_fixture_setup(state, "dcp-attack-known"); }

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_missing_data_file, setup, tu_fixture_teardown),
      cmocka_unit_test_setup_teardown(test_empty_huge_extent, setup, tu_fixture_teardown),
  };
  return TU_RUN(tests, NULL, NULL);
}

/* test_attack_manager — a manager's root tampered with by hand: the newest
 * step deleted, `latest` naming a step that is gone or holding garbage, a
 * step directory that is a link to a checkpoint outside the root, a step
 * that is a plain file, a newer step with a corrupt .metadata, a step-07
 * alias, a step directory holding another step's checkpoint. Resume picks
 * the newest loadable step and loads it byte for byte; saves and
 * retention go on; nothing outside the root (nor a foreign or corrupt
 * step) is ever touched. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "at_gen.h"
#include "testutil.h"

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...) {
  char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  assert_int_equal(system(cmd), 0);
}

static dcp_manager *open_mgr(dcp_ctx *ctx, const char *root, uint32_t keep_last) {
  dcp_manager_options o;
  dcp_manager_options_init(&o);
  o.keep_last = keep_last;
  o.flags = DCP_MANAGER_QUIET;
  dcp_manager *m = NULL;
  dcp_status rc = dcp_manager_open(ctx, root, &o, &m);
  if (rc) fprintf(stderr, "manager_open: %s\n", dcp_ctx_last_error(ctx));
  assert_int_equal(rc, DCP_OK);
  return m;
}

/* The state of step `step` (the model of seed 500 + step): saving holds
 * all of it, loading another decomposition (0xEE-filled buffers). */
static dcp_state *step_state(dcp_ctx *ctx, int64_t step, int saving, at_model *mod,
                             at_bufs **b) {
  at_model_gen(mod, 500 + (uint64_t)step);
  dcp_state *st;
  assert_int_equal(at_state_new(ctx, mod, 1, 0, saving, saving ? 1 : 2, AT_ITEMS | AT_PER_RANK,
                                &st, b),
                   DCP_OK);
  return st;
}

static void save_step(dcp_ctx *ctx, dcp_manager *m, int64_t step) {
  at_model mod;
  at_bufs *b;
  dcp_state *st = step_state(ctx, step, 1, &mod, &b);
  dcp_status rc = dcp_manager_save(m, step, st, NULL);
  if (rc) fprintf(stderr, "save step %lld: %s\n", (long long)step, dcp_ctx_last_error(ctx));
  assert_int_equal(rc, DCP_OK);
  at_state_free(st, b);
}

/* Load step `step` and check every byte. */
static void load_step(dcp_ctx *ctx, dcp_manager *m, int64_t step) {
  at_model mod;
  at_bufs *b;
  dcp_state *st = step_state(ctx, step, 0, &mod, &b);
  assert_int_equal(dcp_manager_load(m, step, st, NULL), DCP_OK);
  assert_int_equal(at_verify(&mod, b, 0), 0);
  at_state_free(st, b);
}

static int exists(const char *root, const char *name) {
  char p[PATH_MAX + 64];
  struct stat s;
  snprintf(p, sizeof p, "%s/%s", root, name);
  return lstat(p, &s) == 0;
}

static void test_tampered_root(void **state) {
  tu_fixture *f = *state;
  char root[PATH_MAX + 16], outside[PATH_MAX + 16];
  snprintf(root, sizeof root, "%s/root", f->dir);
  snprintf(outside, sizeof outside, "%s/outside", f->dir);
  dcp_manager *m = open_mgr(f->ctx, root, 0);
  for (int64_t s = 1; s <= 6; s++) save_step(f->ctx, m, s);
  dcp_manager_free(m);
  /* by hand: the newest step gone, latest garbage, step 7 a link to a copy
   * of step 5 outside, step 8 a plain file, step 9 corrupt, step-010 an
   * alias, step 11 holding step 4's checkpoint (another dcp.step) */
  sh("rm -rf '%s/step-6' && printf 'step-999\\n../../etc' > '%s/latest'", root, root);
  sh("cp -a '%s/step-5' '%s' && ln -s '%s' '%s/step-7'", root, outside, outside, root);
  sh("echo x > '%s/step-8' && cp -a '%s/step-5' '%s/step-9'", root, root, root);
  sh("printf 'garbage' | dd of='%s/step-9/.metadata' bs=1 seek=40 conv=notrunc 2>/dev/null", root);
  sh("cp -a '%s/step-5' '%s/step-010' && cp -a '%s/step-4' '%s/step-11'", root, root, root, root);
  sh("cd '%s' && find . -type f | sort | xargs md5sum > '%s.sum'", outside, outside);
  m = open_mgr(f->ctx, root, 2);
  size_t n = 0;
  dcp_step_info info[16];
  assert_int_equal(dcp_manager_list(m, info, 16, &n), DCP_OK);
  for (size_t i = 0; i < n; i++)
    fprintf(stderr, "step %lld: %s %s\n", (long long)info[i].step,
            dcp_step_state_name(info[i].state), info[i].note);
  int64_t step = -1;
  dcp_status rc = dcp_manager_resume(m, DCP_RESUME_VERIFY, &step);
  assert_int_equal(rc, DCP_OK);
  assert_int_equal(step, 5);
  load_step(f->ctx, m, step);
  /* a step not newer than the newest committed one is refused */
  save_step(f->ctx, m, 12); /* keep_last 2: 5 and 12 stay, 1..4 go */
  save_step(f->ctx, m, 13); /* then 5 goes */
  assert_int_equal(dcp_manager_resume(m, 0, &step), DCP_OK);
  assert_int_equal(step, 13);
  load_step(f->ctx, m, 13);
  load_step(f->ctx, m, 12);
  dcp_manager_free(m);
  assert_false(exists(root, "step-5"));
  assert_false(exists(root, "step-1"));
  assert_true(exists(root, "step-7"));   /* foreign: never touched */
  assert_true(exists(root, "step-8"));
  assert_true(exists(root, "step-9/.metadata")); /* corrupt: left for inspection */
  assert_true(exists(root, "step-010"));
  assert_true(exists(root, "step-11/.metadata")); /* another step's record */
  sh("cd '%s' && find . -type f | sort | xargs md5sum | cmp - '%s.sum'", outside, outside);
}

static int setup(void **state) { return tu_fixture_setup(state, "dcp-attack-mgr"); }

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_tampered_root, setup, tu_fixture_teardown),
  };
  return TU_RUN(tests, NULL, NULL);
}

/* test_plan_persist.c — the plan a save records next to its checkpoint
 * (.plan): a restarted job (a context whose plan cache is empty) saving the
 * same geometry over the same path makes its first save with the one
 * agreement of a cache hit — the collective bytes of a hit, fewer than a
 * gather's — and writes the current data; a different state, a file of
 * another world and a tampered file all fall back to the full gather, and
 * every save still loads back exactly. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "runtime/plan_cache.h"
#include "runtime/plan_persist.h"

enum { ROWS = 64, COLS = 32 };

typedef struct model {
  float w[ROWS * COLS];
  float v[ROWS];
  uint64_t step;
} model;

static int setup(void **state) { return tu_fixture_setup(state, "dcp-planfile"); }
static int teardown(void **state) { return tu_fixture_teardown(state); }

/* "w" as two row bands, "v" whole, bytes "step"; extra adds tensor "x". */
static dcp_state *make_state(tu_fixture *f, model *m, bool extra) {
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  int64_t shape[2] = {ROWS, COLS}, half[2] = {ROWS / 2, COLS}, o1[2] = {0, 0},
          o2[2] = {ROWS / 2, 0}, vs[1] = {ROWS}, z[1] = {0};
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", o1, half, m->w), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", o2, half, m->w + ROWS / 2 * COLS), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "v", DCP_F32, 1, vs), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "v", z, vs, m->v), DCP_OK);
  if (extra) {
    assert_int_equal(dcp_state_add_tensor(st, "x", DCP_F32, 1, vs), DCP_OK);
    assert_int_equal(dcp_state_add_chunk(st, "x", z, vs, m->v), DCP_OK);
  }
  assert_int_equal(dcp_state_add_bytes(st, "step", DCP_SCOPE_REPLICATED, &m->step, 8), DCP_OK);
  return st;
}

static void fill(model *m, float base) {
  for (int i = 0; i < ROWS * COLS; i++) m->w[i] = base + (float)i;
  for (int i = 0; i < ROWS; i++) m->v[i] = base - (float)i;
  m->step = (uint64_t)base;
}

/* Save m, returning the save's stats. */
static dcp_stats save(tu_fixture *f, model *m, bool extra) {
  dcp_state *st = make_state(f, m, extra);
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.flags = DCP_SAVE_OVERWRITE;
  dcp_status rc = dcp_save(f->ctx, st, f->ckpt, &o);
  if (rc) fprintf(stderr, "%s\n", dcp_ctx_last_error(f->ctx));
  assert_int_equal(rc, DCP_OK);
  dcp_stats stats = {.struct_size = sizeof stats};
  dcp_ctx_stats(f->ctx, &stats);
  dcp_state_free(st);
  return stats;
}

/* The checkpoint holds exactly m. */
static void check_load(tu_fixture *f, const model *m, bool extra) {
  model *got = calloc(1, sizeof *got);
  assert_non_null(got);
  dcp_state *st = make_state(f, got, extra);
  assert_int_equal(dcp_load(f->ctx, st, f->ckpt, NULL), DCP_OK);
  assert_memory_equal(got->w, m->w, sizeof m->w);
  assert_memory_equal(got->v, m->v, sizeof m->v);
  assert_int_equal(got->step, m->step);
  dcp_state_free(st);
  free(got);
}

/* A restart: the context forgets every plan it made. */
static void restart(tu_fixture *f) {
  dcpi_plan_cache *c = dcpi_ctx_plan_cache(f->ctx);
  assert_non_null(c);
  dcpi_plan_cache_clear(c);
  dcpi_plan_cache_init(c);
}

static uint8_t *read_plan_file(tu_fixture *f, size_t *len) {
  char p[sizeof f->ckpt + 16];
  snprintf(p, sizeof p, "%s/%s", f->ckpt, DCPI_PLAN_FILE_NAME);
  FILE *fp = fopen(p, "rb");
  assert_non_null(fp);
  static uint8_t buf[1 << 16];
  *len = fread(buf, 1, sizeof buf, fp);
  fclose(fp);
  assert_true(*len > 16 && *len < sizeof buf);
  uint8_t *out = malloc(*len);
  assert_non_null(out);
  memcpy(out, buf, *len);
  return out;
}

static void write_plan_file(tu_fixture *f, const uint8_t *data, size_t len) {
  char p[sizeof f->ckpt + 16];
  snprintf(p, sizeof p, "%s/%s", f->ckpt, DCPI_PLAN_FILE_NAME);
  FILE *fp = fopen(p, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(data, 1, len, fp), len);
  fclose(fp);
}

/* Same geometry after a restart: a hit, with the collective bytes of an
 * in-memory hit, fewer than the gather's; the new data is what loads. */
static void test_restart_hits(void **state) {
  tu_fixture *f = *state;
  static model m;
  fill(&m, 1000);
  dcp_stats first = save(f, &m, false);
  assert_int_equal(first.plan_cache_hit, 0);
  dcp_stats again = save(f, &m, false); /* in memory */
  assert_int_equal(again.plan_cache_hit, 1);
  restart(f);
  fill(&m, 2000);
  dcp_stats restarted = save(f, &m, false);
  assert_int_equal(restarted.plan_cache_hit, 1);
  assert_int_equal(restarted.plan_coll_bytes, again.plan_coll_bytes);
  assert_true(restarted.plan_coll_bytes < first.plan_coll_bytes);
  print_message("plan collective bytes: gather %llu, restarted job's first save %llu\n",
                (unsigned long long)first.plan_coll_bytes,
                (unsigned long long)restarted.plan_coll_bytes);
  check_load(f, &m, false);
  /* and the restarted job's next save hits in memory */
  fill(&m, 3000);
  assert_int_equal(save(f, &m, false).plan_cache_hit, 1);
  check_load(f, &m, false);
}

/* Another state (a tensor more) after a restart: the recorded plan is not
 * this save's; the full gather, and the checkpoint is the new state's. */
static void test_other_state_gathers(void **state) {
  tu_fixture *f = *state;
  static model m;
  fill(&m, 1000);
  dcp_stats first = save(f, &m, false);
  restart(f);
  fill(&m, 4000);
  dcp_stats other = save(f, &m, true);
  assert_int_equal(other.plan_cache_hit, 0);
  assert_true(other.plan_coll_bytes >= first.plan_coll_bytes);
  check_load(f, &m, true);
}

/* A file recorded by a world of 2 (this rank's plan in slot 0, so only the
 * world tells) is refused: the pure check says why, the save gathers. */
static void test_other_world_gathers(void **state) {
  tu_fixture *f = *state;
  static model m;
  fill(&m, 1000);
  save(f, &m, false);
  size_t len;
  uint8_t *file = read_plan_file(f, &len);
  dcpi_plan_entry *e = NULL;
  dcpi_err err;
  dcpi_err_clear(&err);
  assert_int_equal(dcpi_plan_entry_decode(file + 8, len - 16, &e, &err), DCP_OK);
  assert_int_equal(e->world, 1);
  size_t pl = e->plan_lens[0];
  uint8_t *plans2 = malloc(2 * pl);
  size_t *lens2 = malloc(2 * sizeof *lens2);
  assert_true(plans2 && lens2);
  memcpy(plans2, e->plans, pl), memcpy(plans2 + pl, e->plans, pl);
  lens2[0] = lens2[1] = pl;
  uint8_t *asg = malloc(e->assignment_len + 1);
  memcpy(asg, e->assignment, e->assignment_len);
  dcpi_plan_entry *two = dcpi_plan_entry_new(e->key, e->generation, asg, e->assignment_len, 2,
                                             plans2, lens2, NULL);
  assert_non_null(two);
  dcpi_wbuf w = {0};
  dcpi_plan_file_encode(two, &w);
  assert_int_equal(w.status, DCP_OK);
  /* the pure check: this rank's plan, another world */
  dcpi_err_clear(&err);
  assert_null(dcpi_plan_file_accept(w.data, w.len, 0, 1, e->key, e->plans, pl, &err));
  assert_int_equal(err.code, DCP_EMISMATCH);
  /* and the original file passes it */
  dcpi_plan_entry *ok = dcpi_plan_file_accept(file, len, 0, 1, e->key, e->plans, pl, &err);
  assert_non_null(ok);
  dcpi_plan_entry_drop(ok);
  write_plan_file(f, w.data, w.len);
  restart(f);
  fill(&m, 5000);
  assert_int_equal(save(f, &m, false).plan_cache_hit, 0);
  check_load(f, &m, false);
  dcpi_wbuf_free(&w);
  dcpi_plan_entry_drop(two);
  dcpi_plan_entry_drop(e);
  free(file);
}

/* Tampered files: a flipped bit (the checksum), and a changed plan byte
 * with the checksum made good again (the slot check) — both gather. */
static void test_tampered_gathers(void **state) {
  tu_fixture *f = *state;
  static model m;
  fill(&m, 1000);
  save(f, &m, false);
  size_t len;
  uint8_t *file = read_plan_file(f, &len);
  for (int pass = 0; pass < 2; pass++) {
    uint8_t *bad = malloc(len);
    assert_non_null(bad);
    memcpy(bad, file, len);
    bad[len - 12] ^= 0x10; /* in the last plan's bytes */
    if (pass == 1) {
      uint64_t sum = XXH3_64bits(bad, len - 8);
      for (int i = 0; i < 8; i++) bad[len - 8 + i] = (uint8_t)(sum >> (8 * i));
    }
    write_plan_file(f, bad, len);
    free(bad);
    restart(f);
    fill(&m, 6000 + (float)pass);
    assert_int_equal(save(f, &m, false).plan_cache_hit, 0);
    check_load(f, &m, false);
    /* that save wrote the file anew: a restart hits again */
    restart(f);
    fill(&m, 7000 + (float)pass);
    assert_int_equal(save(f, &m, false).plan_cache_hit, 1);
    check_load(f, &m, false);
  }
  free(file);
}

/* A manager's steps: each save goes into a new step directory, which has
 * no .plan yet; the root keeps its newest durable step's, and a restarted
 * job's first save into the next step finds it there — a hit with the
 * collective bytes of an in-memory hit — and loads back exactly. A root
 * .plan of another state is refused like any other. */
static void test_manager_new_step_hits(void **state) {
  tu_fixture *f = *state;
  static model m;
  dcp_manager *mg = NULL;
  assert_int_equal(dcp_manager_open(f->ctx, f->ckpt, NULL, &mg), DCP_OK);
  fill(&m, 100);
  dcp_state *st = make_state(f, &m, false);
  assert_int_equal(dcp_manager_save(mg, 1, st, NULL), DCP_OK);
  dcp_stats first = {.struct_size = sizeof first};
  dcp_ctx_stats(f->ctx, &first);
  assert_int_equal(first.plan_cache_hit, 0);
  assert_int_equal(dcp_manager_save(mg, 2, st, NULL), DCP_OK);
  dcp_stats again = {.struct_size = sizeof again};
  dcp_ctx_stats(f->ctx, &again);
  assert_int_equal(again.plan_cache_hit, 1);
  dcp_manager_free(mg);
  char p[sizeof f->ckpt + 16];
  snprintf(p, sizeof p, "%s/%s", f->ckpt, DCPI_PLAN_FILE_NAME);
  FILE *fp = fopen(p, "rb");
  assert_non_null(fp); /* the root's copy */
  fclose(fp);

  restart(f);
  assert_int_equal(dcp_manager_open(f->ctx, f->ckpt, NULL, &mg), DCP_OK);
  fill(&m, 300);
  assert_int_equal(dcp_manager_save(mg, 3, st, NULL), DCP_OK);
  dcp_stats restarted = {.struct_size = sizeof restarted};
  dcp_ctx_stats(f->ctx, &restarted);
  assert_int_equal(restarted.plan_cache_hit, 1);
  assert_int_equal(restarted.plan_coll_bytes, again.plan_coll_bytes);
  assert_true(restarted.plan_coll_bytes < first.plan_coll_bytes);
  print_message("manager restart, first save into a new step: plan collective bytes %llu "
                "(a gather: %llu)\n", (unsigned long long)restarted.plan_coll_bytes,
                (unsigned long long)first.plan_coll_bytes);
  model *got = calloc(1, sizeof *got);
  assert_non_null(got);
  dcp_state *gs = make_state(f, got, false);
  assert_int_equal(dcp_manager_load(mg, 3, gs, NULL), DCP_OK);
  assert_memory_equal(got->w, m.w, sizeof m.w);
  assert_memory_equal(got->v, m.v, sizeof m.v);
  dcp_state_free(gs);
  free(got);

  /* another state after a restart: the root's plan is not its plan */
  restart(f);
  dcp_state *other = make_state(f, &m, true);
  assert_int_equal(dcp_manager_save(mg, 4, other, NULL), DCP_OK);
  dcp_stats changed = {.struct_size = sizeof changed};
  dcp_ctx_stats(f->ctx, &changed);
  assert_int_equal(changed.plan_cache_hit, 0);
  dcp_state_free(other);
  dcp_manager_free(mg);
  dcp_state_free(st);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_restart_hits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_other_state_gathers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_other_world_gathers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tampered_gathers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_manager_new_step_hits, setup, teardown),
  };
  return TU_RUN(tests, NULL, NULL);
}

/* test_attack_reshard — odd geometries saved by worlds 1, 3, 5 and 7 and
 * loaded by one rank with another decomposition, byte for byte.
 *
 * Each seed builds a model (at_gen.h: every dtype, 0-d, size-0, size-1 and
 * prime extents, one long dimension with tiny others) and saves it: in a
 * world of 1 coordinated; in worlds of 3, 5, 7 as every detached rank's
 * uncoordinated part (the merge on load), each rank holding its tensors
 * through a permuted-mesh layout, an uneven flat range, irregular row
 * pieces with replicas, or the whole tensor on some ranks only. A world-1
 * context then loads random sub-boxes and flat ranges into buffers
 * pre-filled with 0xEE and checks every byte, and dcp_verify checks the
 * checkpoint. $DCP_TEST_SEED replays one seed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_gen.h"
#include "testutil.h"

#define SEEDS 12

/* A detached rank `rank` of `world` (no collective: uncoordinated save). */
static dcp_ctx *detached(const tu_fixture *f, int32_t world, int32_t rank) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.world_size = world;
  cfg.rank = rank;
  cfg.storage = "posix";
  cfg.plugin_path = f->plugins;
  dcp_ctx *c = NULL;
  assert_int_equal(dcp_ctx_create(&cfg, &c), DCP_OK);
  return c;
}

/* Save the model of m as `world` ranks at f->ckpt (coordinated when 1). */
static void save_world(const tu_fixture *f, const at_model *m, int32_t world, uint64_t salt) {
  for (int32_t r = 0; r < world; r++) {
    dcp_ctx *c = world == 1 ? f->ctx : detached(f, world, r);
    dcp_state *st;
    at_bufs *b;
    assert_int_equal(at_state_new(c, m, world, r, 1, salt, AT_ITEMS | AT_PER_RANK, &st, &b),
                     DCP_OK);
    dcp_save_options o;
    dcp_save_options_init(&o);
    o.save_id = m->seed + 1;
    o.block_size = (uint32_t)(4096 + (m->seed % 3) * 907); /* small, odd blocks */
    if (m->seed % 2) o.flags |= DCP_SAVE_COMPRESS;
    dcp_status rc = dcp_save(c, st, f->ckpt, &o);
    if (rc) fprintf(stderr, "seed %llu world %d rank %d: save: %s\n", (unsigned long long)m->seed,
                    world, r, dcp_ctx_last_error(c));
    assert_int_equal(rc, DCP_OK);
    at_state_free(st, b);
    if (c != f->ctx) dcp_ctx_free(c);
  }
}

/* Load with a world-1 decomposition of salt and check every byte. */
static void load_check(const tu_fixture *f, const at_model *m, int32_t saved_world,
                       uint64_t salt) {
  dcp_state *st;
  at_bufs *b;
  assert_int_equal(at_state_new(f->ctx, m, 1, 0, 0, salt,
                                AT_ITEMS | (saved_world == 1 ? AT_PER_RANK : 0), &st, &b),
                   DCP_OK);
  dcp_status rc = dcp_load(f->ctx, st, f->ckpt, NULL);
  if (rc) fprintf(stderr, "seed %llu world %d: load: %s\n", (unsigned long long)m->seed,
                  saved_world, dcp_ctx_last_error(f->ctx));
  assert_int_equal(rc, DCP_OK);
  assert_int_equal(at_verify(m, b, 0), 0);
  for (size_t i = 0; i < b->n; i++) /* the check itself sees a wrong byte */
    if (b->b[i].len) {
      b->b[i].p[b->b[i].len / 2] ^= 1;
      fprintf(stderr, "(expected, a byte flipped on purpose) ");
      assert_int_equal(at_verify(m, b, 0), -1);
      break;
    }
  at_state_free(st, b);
}

static void test_reshard_worlds(void **state) {
  tu_fixture *f = *state;
  uint64_t base = tu_seed(1), nseeds = getenv("DCP_TEST_SEED") ? 1 : SEEDS;
  static const int32_t worlds[] = {1, 3, 5, 7};
  for (uint64_t s = base; s < base + nseeds; s++)
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
      at_model m;
      at_model_gen(&m, s * 10 + w);
      tu_remove_tree(f->ckpt);
      save_world(f, &m, worlds[w], 1);
      dcp_verify_report rep = {.struct_size = sizeof rep};
      dcp_status rc = dcp_verify(f->ctx, f->ckpt, &rep);
      if (rc) fprintf(stderr, "seed %llu: verify: %s\n", (unsigned long long)m.seed,
                      rep.first_problem);
      assert_int_equal(rc, DCP_OK);
      for (uint64_t salt = 2; salt < 5; salt++) load_check(f, &m, worlds[w], salt);
    }
}

/* A PER_RANK bytes item saved by a world of 3 (or 5) and loaded by a
 * world of 1: DCP_ESCOPE, never rank 0's bytes passed off as this
 * world's. */
static void test_per_rank_other_world(void **state) {
  tu_fixture *f = *state;
  for (int32_t w = 3; w <= 5; w += 2) {
    at_model m;
    at_model_gen(&m, 4000 + (uint64_t)w);
    tu_remove_tree(f->ckpt);
    save_world(f, &m, w, 1);
    dcp_state *st;
    at_bufs *b;
    assert_int_equal(at_state_new(f->ctx, &m, 1, 0, 0, 2, AT_ITEMS | AT_PER_RANK, &st, &b),
                     DCP_OK);
    assert_int_equal(dcp_load(f->ctx, st, f->ckpt, NULL), DCP_ESCOPE);
    at_state_free(st, b);
  }
}

/* Scribble over every buffer of b (the trainer's next step). */
static void scribble(at_bufs *b) {
  for (size_t i = 0; i < b->n; i++) memset(b->b[i].p, 0x5A, b->b[i].len);
}

/* Async saves of odd models (empty chunks, 0-length bytes items, 0-d
 * tensors, every dtype), blocking and background staging: the buffers are
 * overwritten as soon as the save returns (blocking) or its fence returns
 * (background), and the checkpoint must hold the bytes of the call. */
static void test_async_mutate(void **state) {
  tu_fixture *f = *state;
  uint64_t base = tu_seed(1), nseeds = getenv("DCP_TEST_SEED") ? 1 : 6;
  for (uint64_t s = base; s < base + nseeds; s++) {
    int bg = (int)(s % 2);
    assert_int_equal(dcp_async_set_staging(f->ctx, bg ? DCP_ASYNC_STAGE_BACKGROUND
                                                       : DCP_ASYNC_STAGE_BLOCKING), DCP_OK);
    at_model m;
    at_model_gen(&m, s * 31 + 7);
    tu_remove_tree(f->ckpt);
    dcp_state *st;
    at_bufs *b;
    assert_int_equal(at_state_new(f->ctx, &m, 1, 0, 1, 1, AT_ITEMS | AT_PER_RANK, &st, &b),
                     DCP_OK);
    dcp_async *h = NULL;
    dcp_status rc = dcp_async_save(f->ctx, st, f->ckpt, NULL, &h);
    if (rc) fprintf(stderr, "async_save: %s\n", dcp_ctx_last_error(f->ctx));
    assert_int_equal(rc, DCP_OK);
    if (bg) assert_int_equal(dcp_async_fence(h), DCP_OK);
    scribble(b);
    at_state_free(st, b);
    rc = dcp_async_wait(h);
    if (rc) fprintf(stderr, "async wait: %s\n", dcp_ctx_last_error(f->ctx));
    assert_int_equal(rc, DCP_OK);
    dcp_async_free(h);
    for (uint64_t salt = 2; salt < 4; salt++) load_check(f, &m, 1, salt);
  }
  dcp_async_shutdown(f->ctx);
}

/* Export of an odd model (saved by 5 uncoordinated ranks) to safetensors
 * (one file, or shards of at most 1 byte: a file per tensor), imported
 * back (copied, then linked): the tensors load byte for byte. */
static void test_export_import(void **state) {
  tu_fixture *f = *state;
  uint64_t base = tu_seed(1), nseeds = getenv("DCP_TEST_SEED") ? 1 : 6;
  char st_dir[PATH_MAX + 16], st_file[PATH_MAX + 48], back[PATH_MAX + 16];
  char st_index[PATH_MAX + 64];
  snprintf(st_dir, sizeof st_dir, "%s/st", f->dir);
  snprintf(st_file, sizeof st_file, "%s/model.safetensors", st_dir);
  snprintf(st_index, sizeof st_index, "%s/model.safetensors.index.json", st_dir);
  snprintf(back, sizeof back, "%s/back", f->dir);
  for (uint64_t s = base; s < base + nseeds; s++) {
    at_model m;
    at_model_gen(&m, s * 53 + 3);
    m.rep_len = 0;
    tu_remove_tree(f->ckpt);
    tu_remove_tree(st_dir);
    tu_remove_tree(back);
    save_world(f, &m, 5, 1);
    /* odd seeds: shards of at most 1 byte (each tensor its own file, empty
     * ones too), imported back through the index */
    int sharded = (int)(s % 2);
    dcp_status rc = dcp_export_safetensors(f->ctx, f->ckpt, st_dir, sharded ? 1 : 0);
    if (rc) fprintf(stderr, "seed %llu: export: %s\n", (unsigned long long)m.seed,
                    dcp_ctx_last_error(f->ctx));
    assert_int_equal(rc, DCP_OK);
    for (int link = 0; link < 2; link++) {
      const char *to = link ? st_dir : back;
      rc = dcp_import_safetensors(f->ctx, sharded ? st_index : st_file, to,
                                  link ? DCP_IMPORT_LINK : 0);
      if (rc) fprintf(stderr, "seed %llu: import%s: %s\n", (unsigned long long)m.seed,
                      link ? " --link" : "", dcp_ctx_last_error(f->ctx));
      assert_int_equal(rc, DCP_OK);
      dcp_state *st;
      at_bufs *b;
      assert_int_equal(at_state_new(f->ctx, &m, 1, 0, 0, 3 + (uint64_t)link, 0, &st, &b), DCP_OK);
      rc = dcp_load(f->ctx, st, to, NULL);
      if (rc) fprintf(stderr, "seed %llu: load of the import: %s\n", (unsigned long long)m.seed,
                      dcp_ctx_last_error(f->ctx));
      assert_int_equal(rc, DCP_OK);
      assert_int_equal(at_verify(&m, b, 0), 0);
      at_state_free(st, b);
    }
  }
}

static int setup(void **state) { return tu_fixture_setup(state, "dcp-attack"); }

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_reshard_worlds, setup, tu_fixture_teardown),
      cmocka_unit_test_setup_teardown(test_per_rank_other_world, setup, tu_fixture_teardown),
      cmocka_unit_test_setup_teardown(test_async_mutate, setup, tu_fixture_teardown),
      cmocka_unit_test_setup_teardown(test_export_import, setup, tu_fixture_teardown),
  };
  return TU_RUN(tests, NULL, NULL);
}

/* test_attack_concurrent — two processes overwrite one checkpoint in a loop
 * (two jobs, each its own context: model A and model B of the same
 * geometry, other bytes) while a third loads it in a loop. Every save
 * returns DCP_OK, DCP_EBUSY (the other holds the lease) or DCP_ESTALE
 * (the other committed first); every load returns DCP_OK with all of A or
 * all of B (never a mix, never other bytes) or DCP_ESTALE, and with
 * DCP_SAVE_IN_PLACE also DCP_EINCOMPLETE / DCP_ENOTFOUND (no checkpoint
 * while one is rewritten). Also: dcp_ctx_free right after an async save
 * returns: the save completes and loads. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "at_gen.h"
#include "testutil.h"

#define SAVES_PER_WRITER 25 /* committed saves each */

static dcp_ctx *new_ctx(const tu_fixture *f) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.storage = "posix";
  cfg.plugin_path = f->plugins;
  cfg.lease_ms = 300; /* a killed holder's lease is broken within ~0.5 s */
  dcp_ctx *c = NULL;
  if (dcp_ctx_create(&cfg, &c)) return NULL;
  return c;
}

/* One save of m (world 1) with flags; returns its status. */
static dcp_status save_once(dcp_ctx *c, const at_model *m, const char *dir, uint32_t flags) {
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.flags = flags;
  o.block_size = 4096;
  return at_save(c, m, 1, 0, dir, &o);
}

/* A writer process: overwrites of m until SAVES_PER_WRITER of them
 * committed (or 40 times as many tries), with a short random pause after
 * each; exit 0 when every status was an allowed one. */
static void writer(const tu_fixture *f, const at_model *m, uint32_t flags) {
  dcp_ctx *c = new_ctx(f);
  if (!c) _exit(2);
  int ok = 0, busy = 0, stale = 0;
  unsigned seed = (unsigned)m->seed;
  for (int i = 0; ok < SAVES_PER_WRITER && i < 40 * SAVES_PER_WRITER; i++) {
    dcp_status rc = save_once(c, m, f->ckpt, DCP_SAVE_OVERWRITE | flags);
    ok += rc == DCP_OK, busy += rc == DCP_EBUSY, stale += rc == DCP_ESTALE;
    usleep((useconds_t)(rand_r(&seed) % 3000)); /* let the other one in */
    if (rc && rc != DCP_EBUSY && rc != DCP_ESTALE) {
      fprintf(stderr, "writer %llu: save: %s: %s\n", (unsigned long long)m->seed,
              dcp_strerror(rc), dcp_ctx_last_error(c));
      _exit(1);
    }
  }
  fprintf(stderr, "writer %llu: %d saved, %d busy, %d stale\n", (unsigned long long)m->seed, ok,
          busy, stale);
  dcp_ctx_free(c);
  _exit(0);
}

/* Models A and B: the same geometry and per-rank length, other bytes. */
static void two_models(at_model *a, at_model *b) {
  at_model_gen(a, 200);
  *b = *a;
  b->seed = 250;
}

/* Save a at f->ckpt, then fork the two writers (of a and of b). */
static dcp_ctx *start_writers(tu_fixture *f, const at_model *a, const at_model *b,
                              uint32_t flags) {
  dcp_ctx *c0 = new_ctx(f);
  assert_non_null(c0);
  assert_int_equal(save_once(c0, a, f->ckpt, 0), DCP_OK);
  if (fork() == 0) writer(f, a, flags);
  if (fork() == 0) writer(f, b, flags);
  return c0;
}

/* Reap the writers that ended; *running counts those left, *bad is set
 * when one failed. */
static void reap_writers(int *running, int *bad) {
  int status;
  while (*running > 0 && waitpid(-1, &status, WNOHANG) > 0) {
    (*running)--;
    if (!WIFEXITED(status) || WEXITSTATUS(status)) *bad = fprintf(stderr, "a writer failed\n");
  }
}

/* Load everything; 'A', 'B', or 0 with *rc set (a failed load), or 'X' (a
 * load that returned DCP_OK with bytes of neither). */
static int load_which(dcp_ctx *c, const at_model *a, const at_model *b, const char *dir,
                      dcp_status *rc) {
  dcp_state *st;
  at_bufs *x;
  assert_int_equal(at_state_new(c, a, 1, 0, 0, 1, AT_ITEMS | AT_PER_RANK, &st, &x), DCP_OK);
  *rc = dcp_load(c, st, dir, NULL);
  int which = 0;
  if (*rc == DCP_OK) {
    at_quiet = 1;
    which = at_verify(a, x, 0) == 0 ? 'A' : at_verify(b, x, 0) == 0 ? 'B' : 'X';
    at_quiet = 0;
  }
  at_state_free(st, x);
  return which;
}

static void race(tu_fixture *f, uint32_t flags) {
  at_model a, b;
  two_models(&a, &b);
  dcp_ctx *c0 = start_writers(f, &a, &b, flags);
  int loads[4] = {0}, running = 2, bad = 0;
  while (running > 0) {
    dcp_status rc;
    int w = load_which(f->ctx, &a, &b, f->ckpt, &rc);
    loads[w == 'A' ? 0 : w == 'B' ? 1 : w == 'X' ? 3 : 2]++;
    if (w == 'X') bad = fprintf(stderr, "a load returned DCP_OK with bytes of neither save\n");
    int allowed = rc == DCP_OK || rc == DCP_ESTALE ||
                  ((flags & DCP_SAVE_IN_PLACE) && (rc == DCP_EINCOMPLETE || rc == DCP_ENOTFOUND));
    if (!allowed)
      bad = fprintf(stderr, "load: %s: %s\n", dcp_strerror(rc), dcp_ctx_last_error(f->ctx));
    reap_writers(&running, &bad);
  }
  fprintf(stderr, "flags %u: loads of A %d, of B %d, failed %d, mixed %d\n", flags, loads[0],
          loads[1], loads[2], loads[3]);
  assert_int_equal(bad, 0);
  dcp_status rc;
  int w = load_which(f->ctx, &a, &b, f->ckpt, &rc); /* quiet now: one of them */
  assert_int_equal(rc, DCP_OK);
  assert_true(w == 'A' || w == 'B');
  dcp_ctx_free(c0);
}

static void test_overwrite_race(void **state) { race(*state, 0); }
static void test_overwrite_race_in_place(void **state) { race(*state, DCP_SAVE_IN_PLACE); }

/* dcp_meta_open in a tight loop while two writers overwrite: .metadata is
 * always there (renamed over, never removed), so every open succeeds. It
 * used to fail with DCP_ECORRUPT "file .metadata ends at N, wanted M
 * bytes" when the rename fell between the size and the read. */
static void test_meta_open_race(void **state) {
  tu_fixture *f = *state;
  at_model a, b;
  two_models(&a, &b);
  b.rep_len = a.rep_len + 17; /* another .metadata length */
  dcp_ctx *c0 = start_writers(f, &a, &b, 0);
  int running = 2, bad = 0, opens = 0;
  while (running > 0) {
    dcp_meta *m = NULL;
    dcp_status rc = dcp_meta_open(f->ctx, f->ckpt, &m);
    opens++;
    if (rc) bad = fprintf(stderr, "meta_open: %s: %s\n", dcp_strerror(rc), dcp_ctx_last_error(f->ctx));
    dcp_meta_free(m);
    reap_writers(&running, &bad);
  }
  fprintf(stderr, "%d opens\n", opens);
  assert_int_equal(bad, 0);
  dcp_ctx_free(c0);
}

/* A writer SIGKILLed at a random moment of an overwrite (writing, syncing,
 * committing, removing the old files), 60 times: the directory then loads
 * as all of the old save or all of the new one (with DCP_SAVE_IN_PLACE
 * also: nothing committed), and the next save (the dead holder's lease is
 * broken at once on this host) commits. */
static void test_kill_mid_overwrite(void **state) {
  tu_fixture *f = *state;
  at_model a, b;
  two_models(&a, &b);
  dcp_ctx *c0 = new_ctx(f);
  assert_non_null(c0);
  assert_int_equal(save_once(c0, &a, f->ckpt, 0), DCP_OK);
  unsigned seed = 7;
  int seen[2] = {0, 0};
  /* how long a child's save takes, unkilled (the median of 3): the kills
   * land in [0, 1.5 x) */
  long spans[3];
  for (int k = 0; k < 3; k++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t p0 = fork();
    if (p0 == 0) {
      dcp_ctx *c = new_ctx(f);
      _exit(c && save_once(c, &a, f->ckpt, DCP_SAVE_OVERWRITE) == DCP_OK ? 0 : 1);
    }
    int st0;
    assert_int_equal(waitpid(p0, &st0, 0), p0);
    assert_true(WIFEXITED(st0) && WEXITSTATUS(st0) == 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    spans[k] = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
  }
  long lo = spans[0] < spans[1] ? spans[0] : spans[1], hi = spans[0] ^ spans[1] ^ lo;
  long span_us = (spans[2] < lo ? lo : spans[2] > hi ? hi : spans[2]) * 3 / 2 + 1;
  for (int trial = 0; trial < 60; trial++) {
    const at_model *next = trial % 2 ? &a : &b;
    assert_int_equal(save_once(c0, trial % 2 ? &b : &a, f->ckpt, DCP_SAVE_OVERWRITE), DCP_OK);
    pid_t p = fork();
    if (p == 0) {
      dcp_ctx *c = new_ctx(f);
      _exit(c && save_once(c, next, f->ckpt, DCP_SAVE_OVERWRITE | (trial % 3 == 2 ? DCP_SAVE_IN_PLACE : 0)) == DCP_OK ? 0 : 1);
    }
    usleep((useconds_t)(rand_r(&seed) % (unsigned)span_us));
    kill(p, SIGKILL);
    int status;
    assert_int_equal(waitpid(p, &status, 0), p);
    dcp_status rc;
    int w = load_which(f->ctx, &a, &b, f->ckpt, &rc);
    if (rc == DCP_EINCOMPLETE && trial % 3 == 2) { /* killed between un-commit and commit */
      continue;
    }
    if (rc) fprintf(stderr, "trial %d: load: %s: %s\n", trial, dcp_strerror(rc), dcp_ctx_last_error(f->ctx));
    assert_int_equal(rc, DCP_OK);
    assert_true(w == 'A' || w == 'B');
    seen[w == (trial % 2 ? 'A' : 'B')]++; /* [1]: the killed save had committed */
  }
  fprintf(stderr, "kills within %ld us: %d before the commit, %d after\n", span_us, seen[0],
          seen[1]);
  assert_int_equal(save_once(c0, &b, f->ckpt, DCP_SAVE_OVERWRITE), DCP_OK);
  assert_int_equal(dcp_verify(f->ctx, f->ckpt, NULL), DCP_OK);
  dcp_ctx_free(c0);
}

/* dcp_ctx_free right after dcp_async_save returned (no wait): the free
 * waits for the writer, and the checkpoint is complete. */
static void test_free_during_async(void **state) {
  tu_fixture *f = *state;
  at_model m;
  at_model_gen(&m, 300);
  dcp_ctx *c = new_ctx(f);
  assert_non_null(c);
  dcp_state *st;
  at_bufs *b;
  assert_int_equal(at_state_new(c, &m, 1, 0, 1, 1, AT_ITEMS | AT_PER_RANK, &st, &b), DCP_OK);
  dcp_async *h = NULL;
  assert_int_equal(dcp_async_save(c, st, f->ckpt, NULL, &h), DCP_OK);
  at_state_free(st, b);
  dcp_async_free(h);
  dcp_ctx_free(c);
  int wrong;
  assert_int_equal(at_load_all(f->ctx, &m, 1, f->ckpt, &wrong), DCP_OK);
  assert_false(wrong);
}

static int setup(void **state) { return tu_fixture_setup(state, "dcp-attack-race"); }

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_overwrite_race, setup, tu_fixture_teardown),
      cmocka_unit_test_setup_teardown(test_overwrite_race_in_place, setup, tu_fixture_teardown),
      cmocka_unit_test_setup_teardown(test_meta_open_race, setup, tu_fixture_teardown),
      cmocka_unit_test_setup_teardown(test_kill_mid_overwrite, setup, tu_fixture_teardown),
      cmocka_unit_test_setup_teardown(test_free_during_async, setup, tu_fixture_teardown),
  };
  return TU_RUN(tests, NULL, NULL);
}

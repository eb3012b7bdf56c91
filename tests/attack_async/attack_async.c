/* attack_async — attacks on the async writer, its handles, the recorded
 * save plan (.plan) and the memory tier: each mode tries to make a save
 * commit something wrong, a load return wrong values, or a call hang or
 * touch freed memory. One world of one rank per mode:
 *
 *   attack_async after-shutdown --dir D   handles outlive the writer: wait,
 *                 test, fence and free after dcp_async_shutdown and after
 *                 dcp_ctx_free answer the save's outcome (run under
 *                 valgrind where there is one: a use of freed memory fails)
 *   attack_async back-to-back --dir D     six async saves called back to
 *                 back while the writer sleeps 200 ms per job: none is
 *                 dropped, each handle reports its own save, each
 *                 checkpoint (and five overwrites of one path) loads exact
 *   attack_async plan-planted --dir D     .plan files planted next to the
 *                 checkpoint and in its parent: another geometry's (valid
 *                 checksum), this geometry's with a forged assignment that
 *                 writes nothing, another world's, garbage: never a save
 *                 that misses data, every load exact
 *   attack_async plan-special --dir D     .plan as a symbolic link, a FIFO,
 *                 a directory, a 3 GiB sparse file: the save neither hangs
 *                 nor reads it, and loads exact
 *   attack_async plan-opts --dir D        one state saved with other block
 *                 sizes and compression in turn: no save replays another's
 *                 layout (each records its own block size and codec)
 *   attack_async memtier-overwrite --dir D   a kept snapshot, then the path
 *                 overwritten by another job's save (also in place): the
 *                 load serves the new values, never the snapshot's
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "async/async_int.h"
#include "async_kit.h"
#include "base/wire.h"
#include "dcp.h"
#include "rank_check.h"
#include "runtime/plan_cache.h"
#include "runtime/plan_persist.h"

#define ROWS 64
#define COLS 96
#define NB 24

/* A model: "w" [ROWS, COLS] f32 (rows [row0, row0+rows) of it held here)
 * and the bytes item "rng"; every value a function of (gen, index). */
typedef struct model {
  int64_t row0, rows;
  float w[ROWS * COLS];
  uint8_t rng[NB];
} model;

static float w_at(int gen, int64_t i) { return (float)(gen * 100000 + i); }

static void fill(model *m, int gen) {
  for (int64_t i = 0; i < m->rows * COLS; i++) m->w[i] = w_at(gen, m->row0 * COLS + i);
  for (int i = 0; i < NB; i++) m->rng[i] = (uint8_t)(gen * 7 + i);
}

/* A state of m on ctx: "w" (its rows) and "rng". */
static dcp_state *state_of(dcp_ctx *ctx, model *m) {
  dcp_state *st;
  OK(dcp_state_create(ctx, &st), ctx);
  ak_rows_add(ctx, st, ROWS, COLS, m->row0, m->rows, m->w, NULL, 0);
  OK(dcp_state_add_bytes(st, "rng", DCP_SCOPE_REPLICATED, m->rng, NB), ctx);
  return st;
}

/* Load path into a whole-tensor state on ctx and check every element of
 * generation gen. */
static void load_check(dcp_ctx *ctx, const char *path, int gen) {
  model *m = calloc(1, sizeof *m);
  CHECK(m);
  m->rows = ROWS;
  dcp_state *st = state_of(ctx, m);
  OK(dcp_load(ctx, st, path, NULL), ctx);
  for (int64_t i = 0; i < ROWS * COLS; i++)
    CHECK(m->w[i] == w_at(gen, i), "%s: w[%" PRId64 "] = %g, generation %d has %g", path, i,
          (double)m->w[i], gen, (double)w_at(gen, i));
  for (int i = 0; i < NB; i++) CHECK(m->rng[i] == (uint8_t)(gen * 7 + i), "%s: rng[%d]", path, i);
  dcp_state_free(st);
  free(m);
}

/* A world of one, no memory tier. */
static dcp_ctx *open_one(const ak_args *a) {
  ak_args one = *a;
  one.rdv = NULL;
  return ak_open_ctx(&one);
}

static model *new_model(int gen) {
  model *m = calloc(1, sizeof *m);
  CHECK(m);
  m->rows = ROWS;
  fill(m, gen);
  return m;
}

/* ---- after-shutdown --------------------------------------------------------- */

static void check_finished(dcp_async *h, dcp_status want) {
  int done = 0;
  OK(dcp_async_test(h, &done), NULL);
  CHECK(done, "a handle whose writer was released is not done");
  CHECK(dcp_async_wait(h) == want, "wait after the release");
  CHECK(dcp_async_wait(h) == want, "a second wait");
  CHECK(dcp_async_wait_for(h, 0) == want, "a wait_for after the release");
  CHECK(dcp_async_fence(h) == DCP_OK, "fence after the release");
  CHECK(dcp_async_fence(h) == DCP_OK, "a second fence");
  CHECK(dcp_async_abort(h) == want, "abort of a finished save");
}

static int run_after_shutdown(const ak_args *a) {
  char p1[600], p2[600], p3[600];
  snprintf(p1, sizeof p1, "%s/one", a->dir);
  snprintf(p2, sizeof p2, "%s/two", a->dir);
  snprintf(p3, sizeof p3, "%s/three", a->dir);
  model *m = new_model(1);
  dcp_ctx *ctx = open_one(a);
  dcp_state *st = state_of(ctx, m);
  dcp_async *h1, *h2, *bad;
  OK(dcp_async_save(ctx, st, p1, NULL, &h1), ctx);
  dcp_async_shutdown(ctx); /* waits for the save, reaps the writer */
  check_finished(h1, DCP_OK);
  dcp_async_free(h1);
  /* a failing save (p1 is committed, no overwrite), then the context goes
   * before its handle */
  OK(dcp_async_save(ctx, st, p1, NULL, &bad), ctx);
  fill(m, 2);
  OK(dcp_async_save(ctx, st, p2, NULL, &h2), ctx); /* waits for `bad` first */
  /* background staging: the context freed right after the call */
  OK(dcp_async_set_staging(ctx, DCP_ASYNC_STAGE_BACKGROUND), ctx);
  dcp_async *h3;
  fill(m, 3);
  OK(dcp_async_save(ctx, st, p3, NULL, &h3), ctx);
  OK(dcp_async_fence(h3), ctx);
  dcp_state_free(st);
  dcp_ctx_free(ctx);
  check_finished(bad, DCP_EEXIST);
  check_finished(h2, DCP_OK);
  check_finished(h3, DCP_OK);
  dcp_async_free(h2);
  dcp_async_free(bad);
  dcp_async_free(h3);
  ctx = open_one(a);
  load_check(ctx, p1, 1);
  load_check(ctx, p2, 2);
  load_check(ctx, p3, 3);
  dcp_ctx_free(ctx);
  free(m);
  printf("after-shutdown: handles answer after the shutdown and after dcp_ctx_free\n");
  return 0;
}

/* ---- back-to-back ------------------------------------------------------------ */

#define NSAVES 6

static int run_back_to_back(const ak_args *a) {
  setenv("DCP_WRITER_DELAY_MS", "200", 1); /* the writer is slower than the calls */
  model *m = new_model(0);
  dcp_ctx *ctx = open_one(a);
  dcp_state *st = state_of(ctx, m);
  dcp_async *h[NSAVES], *o[NSAVES];
  char p[NSAVES][600], same[600];
  snprintf(same, sizeof same, "%s/same", a->dir);
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.flags = DCP_SAVE_OVERWRITE;
  for (int i = 0; i < NSAVES; i++) {
    snprintf(p[i], sizeof p[i], "%s/s%d", a->dir, i);
    fill(m, 10 + i);
    OK(dcp_async_save(ctx, st, p[i], NULL, &h[i]), ctx);
    fill(m, 99); /* mutated right after the call: staged bytes are the saved ones */
    fill(m, 20 + i);
    OK(dcp_async_save(ctx, st, same, &so, &o[i]), ctx);
    fill(m, 98);
  }
  for (int i = 0; i < NSAVES; i++) {
    OK(dcp_async_wait(h[i]), ctx);
    OK(dcp_async_wait(o[i]), ctx);
    dcp_async_free(h[i]);
    dcp_async_free(o[i]);
  }
  CHECK(dcpi_async_saves(ctx) == 2 * NSAVES, "%" PRIu64 " saves reached the writer",
        dcpi_async_saves(ctx));
  unsetenv("DCP_WRITER_DELAY_MS");
  for (int i = 0; i < NSAVES; i++) load_check(ctx, p[i], 10 + i);
  load_check(ctx, same, 20 + NSAVES - 1);
  dcp_state_free(st);
  dcp_ctx_free(ctx);
  free(m);
  printf("back-to-back: %d saves, none dropped, each exact\n", 2 * NSAVES);
  return 0;
}

/* ---- main ---------------------------------------------------------------------- */

typedef struct mode {
  const char *name;
  int (*run)(const ak_args *a);
} mode;

int main(int argc, char **argv) {
  ak_args a;
  ak_parse(argc, argv, &a);
  g_rank = 0;
  static const mode modes[] = {{"after-shutdown", run_after_shutdown},
                               {"back-to-back", run_back_to_back}};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
    if (!strcmp(a.mode, modes[i].name)) return modes[i].run(&a);
  fprintf(stderr, "attack_async: unknown mode '%s'\n", a.mode);
  return 2;
}

/* async_stage — background staging, the fence and dcp_async_prepare
 * (docs/async.md, "Background staging" and "Prepare"), one scenario per
 * mode:
 *
 *   async_stage background --dir D [--rendezvous R]   (1 rank, or N under
 *                 dcp_launch) prepare, then background saves: the copy runs
 *                 after dcp_async_save returned (a gated copy callback
 *                 proves it), the buffers are overwritten right after the
 *                 fence (first save) or the wait without a fence (second),
 *                 and each checkpoint holds, element by element, the values
 *                 of before; one writer spawn, one pool creation, no growth
 *   async_stage fence-only --dir D   the fence returns while the writer
 *                 (SIGSTOPped) has not even read the job: it waits for the
 *                 staging only
 *   async_stage stage-fault --dir D  the writer dies during background
 *                 staging: the fence returns DCP_EPEER, so does the wait
 *                 (also a wait without a fence), nothing hangs, the
 *                 previous checkpoint still loads, the next save spawns a
 *                 new writer and commits
 *   async_stage prepare --dir D      dcp_async_prepare's contract: bad
 *                 arguments, a NULL state (writer only), the pool sized for
 *                 the state, a larger state grows it
 *   async_stage open-codec --dir D   the writer protocol's OPEN frame:
 *                 round trip, every truncation, a trailing byte
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "async/async_int.h"
#include "async_kit.h"
#include "writer/proto.h"
#include "dcp.h"
#include "rank_check.h"

#define ROWS 96
#define COLS 257
#define BIG ((size_t)65 << 20) /* over the parallel-copy threshold (1 rank) */

/* This rank's rows of "w" (f32) and, on a single rank, a large "big" (u8),
 * plus a per-rank bytes item; values are a function of (generation, global
 * index), so a load is checked element by element. */
typedef struct model {
  int rank, world;
  int64_t rows, row0;
  float *w;
  uint8_t *big;
  uint64_t step;
} model;

/* exact in a float: gen < 500 and i < ROWS * COLS < 32768 */
static float w_at(uint32_t gen, int64_t i) { return (float)((int64_t)gen * 32768 + i); }

/* "big" of generation gen: a 64 KiB pattern of gen, each copy's first byte
 * marked with its block number (filled and compared with memcpy/memcmp, so
 * that the 65 MiB stay cheap under ThreadSanitizer) */
static void big_fill(uint8_t *b, uint32_t gen) {
  uint8_t blk[65536];
  for (size_t j = 0; j < sizeof blk; j++) blk[j] = (uint8_t)(j * 131 + gen * 7 + (j >> 12));
  for (size_t off = 0; off < BIG; off += sizeof blk) {
    size_t n = BIG - off < sizeof blk ? BIG - off : sizeof blk;
    memcpy(b + off, blk, n);
    b[off] = (uint8_t)((off >> 16) ^ gen);
  }
}

static void model_alloc(model *m, int rank, int world, int big) {
  memset(m, 0, sizeof *m);
  m->rank = rank, m->world = world;
  ak_rows_alloc(rank, world, ROWS, COLS, big ? BIG : 0, &m->row0, &m->rows, &m->w, &m->big);
}

static void model_fill(model *m, uint32_t gen) {
  for (int64_t i = 0; i < m->rows * COLS; i++) m->w[i] = w_at(gen, m->row0 * COLS + i);
  if (m->big) big_fill(m->big, gen);
  m->step = gen;
}

static void model_free(model *m) {
  free(m->w);
  free(m->big);
}

static dcp_state *model_state(dcp_ctx *ctx, model *m) {
  dcp_state *st;
  OK(dcp_state_create(ctx, &st), ctx);
  ak_rows_add(ctx, st, ROWS, COLS, m->row0, m->rows, m->w, m->big, BIG);
  OK(dcp_state_add_bytes(st, "step", DCP_SCOPE_PER_RANK, &m->step, sizeof m->step), ctx);
  return st;
}

/* Load path and check every element against generation gen. */
static void check_gen(dcp_ctx *ctx, const char *path, int rank, int world, int big,
                      uint32_t gen) {
  model got;
  model_alloc(&got, rank, world, big);
  model_fill(&got, 400); /* no generation a test saves */
  dcp_state *st = model_state(ctx, &got);
  OK(dcp_load(ctx, st, path, NULL), ctx);
  dcp_state_free(st);
  for (int64_t i = 0; i < got.rows * COLS; i++)
    CHECK(got.w[i] == w_at(gen, got.row0 * COLS + i),
          "%s: w[%lld] is %g, want %g (generation %u): not the values staged", path,
          (long long)i, (double)got.w[i], (double)w_at(gen, got.row0 * COLS + i), gen);
  if (big) {
    uint8_t *want = malloc(BIG);
    CHECK(want, "out of memory");
    big_fill(want, gen);
    if (memcmp(want, got.big, BIG)) {
      size_t i = 0;
      while (want[i] == got.big[i]) i++;
      CHECK(0, "%s: big[%zu] is %u, want %u (generation %u)", path, i, got.big[i], want[i],
            gen);
    }
    free(want);
  }
  CHECK(got.step == gen, "%s: step %llu, want %u", path, (unsigned long long)got.step, gen);
  model_free(&got);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* ---- background ---------------------------------------------------------- */

/* The gated copy: the first call waits (up to 30 s) for the gate, which
 * the test opens once dcp_async_save has returned; a copy made before the
 * return would time out. */
static atomic_int g_gate_open, g_gate_timed_out, g_copies;

static void gated_copy(void *arg, void *dst, const void *src, size_t len) {
  (void)arg;
  for (int i = 0; i < 30000 && !atomic_load(&g_gate_open); i++) sleep_ms(1);
  if (!atomic_load(&g_gate_open)) atomic_store(&g_gate_timed_out, 1);
  atomic_fetch_add(&g_copies, 1);
  memcpy(dst, src, len);
}

static int mode_background(const ak_args *a) {
  dcp_ctx *ctx = ak_open_ctx(a);
  int rank = g_rank = dcp_ctx_rank(ctx), world = dcp_ctx_world_size(ctx);
  int big = world == 1;
  model m;
  model_alloc(&m, rank, world, big);
  model_fill(&m, 1);
  dcp_state *st = model_state(ctx, &m);
  char p1[4096], p2[4096];
  snprintf(p1, sizeof p1, "%s/bg1", a->dir);
  snprintf(p2, sizeof p2, "%s/bg2", a->dir);

  OK(dcp_async_set_staging(ctx, DCP_ASYNC_STAGE_BACKGROUND), ctx);
  OK(dcp_async_prepare(ctx, st), ctx);
  CHECK(dcpi_async_spawns(ctx) == 1 && dcpi_async_writer_pid(ctx) > 0,
        "prepare started no writer");
  CHECK(dcpi_async_pool_creations(ctx) == 1 && dcpi_async_prepares(ctx) == 1,
        "prepare made no pool");

  /* save 1: staged in the background (the gate), overwritten after the fence */
  OK(dcp_async_set_copy(ctx, gated_copy, NULL), ctx);
  dcp_async *h;
  OK(dcp_async_save(ctx, st, p1, NULL, &h), ctx);
  atomic_store(&g_gate_open, 1); /* the copy could not start before this */
  OK(dcp_async_fence(h), ctx);
  OK(dcp_async_fence(h), ctx); /* again: the same answer */
  CHECK(!atomic_load(&g_gate_timed_out),
        "the copy ran before dcp_async_save returned (staging was not in the background)");
  CHECK(atomic_load(&g_copies) >= 1, "the copy callback was not called");
  model_fill(&m, 2); /* the optimizer step */
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);

  /* save 2: no fence; the wait implies it; overwritten after the wait */
  OK(dcp_async_set_copy(ctx, NULL, NULL), ctx);
  OK(dcp_async_save(ctx, st, p2, NULL, &h), ctx);
  int done = 0;
  OK(dcp_async_test(h, &done), ctx);
  OK(dcp_async_wait(h), ctx);
  OK(dcp_async_test(h, &done), ctx);
  CHECK(done == 1, "waited, yet not done");
  model_fill(&m, 3);
  dcp_async_free(h);

  /* save 3: freed without a wait or a fence (dcp_async_free waits), then
   * the buffers change */
  OK(dcp_async_save(ctx, st, p2, &(dcp_save_options){.struct_size = sizeof(dcp_save_options),
                                                     .flags = DCP_SAVE_OVERWRITE}, &h), ctx);
  dcp_async_free(h);
  model_fill(&m, 4);
  dcp_async_shutdown(ctx); /* every writer done: the peers' parts too */

  check_gen(ctx, p1, rank, world, big, 1);
  check_gen(ctx, p2, rank, world, big, 3);
  dcp_state_free(st);
  model_free(&m);
  dcp_ctx_free(ctx);
  return 0;
}

/* Counters checked before shutdown (shutdown frees the writer state). */
static int mode_counts(const ak_args *a) {
  dcp_ctx *ctx = ak_open_ctx(a);
  int rank = g_rank = dcp_ctx_rank(ctx), world = dcp_ctx_world_size(ctx);
  model m;
  model_alloc(&m, rank, world, 0);
  model_fill(&m, 5);
  dcp_state *st = model_state(ctx, &m);
  char p[4096];
  snprintf(p, sizeof p, "%s/counts", a->dir);
  OK(dcp_async_set_staging(ctx, DCP_ASYNC_STAGE_BACKGROUND), ctx);
  OK(dcp_async_prepare(ctx, st), ctx);
  uint64_t pool = dcpi_async_pool_size(ctx);
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.flags = DCP_SAVE_OVERWRITE;
  for (uint32_t g = 5; g < 8; g++) {
    dcp_async *h;
    OK(dcp_async_save(ctx, st, p, &so, &h), ctx);
    OK(dcp_async_fence(h), ctx);
    model_fill(&m, g + 1);
    OK(dcp_async_wait(h), ctx);
    dcp_async_free(h);
  }
  CHECK(dcpi_async_spawns(ctx) == 1, "%llu writer spawns for one context",
        (unsigned long long)dcpi_async_spawns(ctx));
  CHECK(dcpi_async_pool_creations(ctx) == 1 && dcpi_async_pool_growths(ctx) == 0 &&
            dcpi_async_pool_size(ctx) == pool,
        "the prepared pool was not reused: %llu creations, %llu growths",
        (unsigned long long)dcpi_async_pool_creations(ctx),
        (unsigned long long)dcpi_async_pool_growths(ctx));
  CHECK(dcpi_async_saves(ctx) == 3, "saves %llu", (unsigned long long)dcpi_async_saves(ctx));
  dcp_async_shutdown(ctx);
  check_gen(ctx, p, rank, world, 0, 7);
  dcp_state_free(st);
  model_free(&m);
  dcp_ctx_free(ctx);
  return 0;
}

/* ---- fence-only ---------------------------------------------------------- */

static int mode_fence_only(const ak_args *a) {
  dcp_ctx *ctx = ak_open_ctx(a);
  g_rank = 0;
  model m;
  model_alloc(&m, 0, 1, 0);
  model_fill(&m, 11);
  dcp_state *st = model_state(ctx, &m);
  char p[4096];
  snprintf(p, sizeof p, "%s/fence", a->dir);
  OK(dcp_async_set_staging(ctx, DCP_ASYNC_STAGE_BACKGROUND), ctx);
  OK(dcp_async_prepare(ctx, st), ctx);
  pid_t wpid = dcpi_async_writer_pid(ctx);
  CHECK(wpid > 0, "no writer after prepare");
  /* the job (a small frame) waits in the socket while the writer is stopped */
  CHECK(kill(wpid, SIGSTOP) == 0, "SIGSTOP");
  dcp_async *h;
  OK(dcp_async_save(ctx, st, p, NULL, &h), ctx);
  OK(dcp_async_fence(h), ctx);
  int done = 1;
  OK(dcp_async_test(h, &done), ctx);
  CHECK(done == 0, "the save finished while its writer was stopped");
  CHECK(dcp_async_wait_for(h, 0) == DCP_ETIMEDOUT, "wait_for(0) on a stopped writer");
  model_fill(&m, 12);
  CHECK(kill(wpid, SIGCONT) == 0, "SIGCONT");
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
  dcp_async_shutdown(ctx);
  check_gen(ctx, p, 0, 1, 0, 11);
  dcp_state_free(st);
  model_free(&m);
  dcp_ctx_free(ctx);
  return 0;
}

/* ---- stage-fault --------------------------------------------------------- */

static dcp_ctx *g_fault_ctx;

/* Kill the writer, wait until the join thread has seen it go, then copy. */
static void killing_copy(void *arg, void *dst, const void *src, size_t len) {
  (void)arg;
  pid_t pid = dcpi_async_writer_pid(g_fault_ctx);
  if (pid > 0) kill(pid, SIGKILL);
  for (int i = 0; i < 30000 && dcpi_async_writer_pid(g_fault_ctx) > 0; i++) sleep_ms(1);
  memcpy(dst, src, len);
}

static int committed(const char *dir) {
  char p[4200];
  struct stat sb;
  snprintf(p, sizeof p, "%s/.metadata", dir);
  return stat(p, &sb) == 0;
}

static int mode_stage_fault(const ak_args *a) {
  dcp_ctx *ctx = g_fault_ctx = ak_open_ctx(a);
  g_rank = 0;
  model m;
  model_alloc(&m, 0, 1, 0);
  model_fill(&m, 21);
  dcp_state *st = model_state(ctx, &m);
  char p[4096];
  snprintf(p, sizeof p, "%s/fault", a->dir);
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.flags = DCP_SAVE_OVERWRITE;
  OK(dcp_async_set_staging(ctx, DCP_ASYNC_STAGE_BACKGROUND), ctx);
  dcp_async *h;
  OK(dcp_async_save(ctx, st, p, &so, &h), ctx); /* generation 21 commits */
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);

  /* the writer dies during staging: the fence reports it, the wait too */
  model_fill(&m, 22);
  OK(dcp_async_set_copy(ctx, killing_copy, NULL), ctx);
  OK(dcp_async_save(ctx, st, p, &so, &h), ctx);
  dcp_status rc = dcp_async_fence(h);
  CHECK(rc == DCP_EPEER, "fence after the writer died during staging: %s (%s)", dcp_strerror(rc),
        dcp_ctx_last_error(ctx));
  CHECK(strstr(dcp_ctx_last_error(ctx), "ended") != NULL, "fence's message: %s",
        dcp_ctx_last_error(ctx));
  rc = dcp_async_wait(h);
  CHECK(rc == DCP_EPEER, "wait after a failed staging: %s", dcp_strerror(rc));
  dcp_async_free(h);

  /* the same without a fence: the wait alone returns the error */
  OK(dcp_async_save(ctx, st, p, &so, &h), ctx);
  rc = dcp_async_wait(h);
  CHECK(rc == DCP_EPEER, "wait (no fence) after the writer died during staging: %s",
        dcp_strerror(rc));
  dcp_async_free(h);
  CHECK(committed(p), "the previous checkpoint went away");
  check_gen(ctx, p, 0, 1, 0, 21);

  /* the next save spawns a new writer and commits */
  OK(dcp_async_set_copy(ctx, NULL, NULL), ctx);
  model_fill(&m, 23);
  OK(dcp_async_save(ctx, st, p, &so, &h), ctx);
  OK(dcp_async_fence(h), ctx);
  model_fill(&m, 24);
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
  CHECK(dcpi_async_spawns(ctx) == 3, "%llu spawns (1, then one for each save after a kill)",
        (unsigned long long)dcpi_async_spawns(ctx));
  dcp_async_shutdown(ctx);
  check_gen(ctx, p, 0, 1, 0, 23);
  dcp_state_free(st);
  model_free(&m);
  dcp_ctx_free(ctx);
  return 0;
}

/* ---- prepare ------------------------------------------------------------- */

static int mode_prepare(const ak_args *a) {
  dcp_ctx *ctx = ak_open_ctx(a), *other = ak_open_ctx(a);
  g_rank = 0;
  model m, m2;
  model_alloc(&m, 0, 1, 0);
  model_fill(&m, 31);
  dcp_state *st = model_state(ctx, &m), *foreign = model_state(other, &m);
  CHECK(dcp_async_prepare(NULL, st) == DCP_EINVAL, "prepare(NULL ctx)");
  CHECK(dcp_async_prepare(ctx, foreign) == DCP_EINVAL, "prepare with another context's state");
  CHECK(strstr(dcp_ctx_last_error(ctx), "another context"), "message: %s",
        dcp_ctx_last_error(ctx));
  CHECK(dcp_async_set_staging(ctx, (dcp_async_staging)7) == DCP_EINVAL, "staging mode 7");
  CHECK(dcp_async_fence(NULL) == DCP_EINVAL, "fence(NULL)");

  OK(dcp_async_prepare(ctx, NULL), ctx); /* the writer only */
  CHECK(dcpi_async_spawns(ctx) == 1 && dcpi_async_pool_creations(ctx) == 0,
        "prepare(NULL state): %llu spawns, %llu pools",
        (unsigned long long)dcpi_async_spawns(ctx),
        (unsigned long long)dcpi_async_pool_creations(ctx));
  OK(dcp_async_prepare(ctx, st), ctx);
  uint64_t need = (uint64_t)(m.rows * COLS) * sizeof(float);
  CHECK(dcpi_async_spawns(ctx) == 1 && dcpi_async_pool_creations(ctx) == 1 &&
            dcpi_async_pool_size(ctx) >= need,
        "prepare(state): pool of %llu bytes for %llu",
        (unsigned long long)dcpi_async_pool_size(ctx), (unsigned long long)need);

  /* blocking staging (the default) after a prepare: no growth, no spawn */
  char p[4096];
  snprintf(p, sizeof p, "%s/prep", a->dir);
  dcp_async *h;
  OK(dcp_async_save(ctx, st, p, NULL, &h), ctx);
  OK(dcp_async_fence(h), ctx); /* staged already: returns at once */
  model_fill(&m, 32);
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
  CHECK(dcpi_async_spawns(ctx) == 1 && dcpi_async_pool_growths(ctx) == 0,
        "after prepare the save spawned (%llu) or grew the pool (%llu)",
        (unsigned long long)dcpi_async_spawns(ctx),
        (unsigned long long)dcpi_async_pool_growths(ctx));

  /* a larger state prepared: the pool grows once, up front */
  model_alloc(&m2, 0, 1, 1);
  model_fill(&m2, 33);
  dcp_state *st2 = model_state(ctx, &m2);
  OK(dcp_async_prepare(ctx, st2), ctx);
  CHECK(dcpi_async_pool_growths(ctx) == 1 && dcpi_async_pool_size(ctx) >= BIG,
        "prepare of a larger state: %llu growths, %llu bytes",
        (unsigned long long)dcpi_async_pool_growths(ctx),
        (unsigned long long)dcpi_async_pool_size(ctx));
  char p2[4096];
  snprintf(p2, sizeof p2, "%s/prep-big", a->dir);
  OK(dcp_async_save(ctx, st2, p2, NULL, &h), ctx);
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
  CHECK(dcpi_async_pool_growths(ctx) == 1, "the save grew the prepared pool again");
  dcp_async_shutdown(ctx);
  check_gen(ctx, p, 0, 1, 0, 31);
  check_gen(ctx, p2, 0, 1, 1, 33);
  dcp_state_free(st);
  dcp_state_free(st2);
  dcp_state_free(foreign);
  model_free(&m);
  model_free(&m2);
  dcp_ctx_free(other);
  dcp_ctx_free(ctx);
  return 0;
}

/* ---- the OPEN frame ------------------------------------------------------ */

/* OPEN round-trips its coordination config; every truncation and a
 * trailing byte are DCP_ECORRUPT, never a crash or a partial config. */
static int mode_open_codec(void) {
  g_rank = 0;
  dcpi_wp_coord c = {"file", "job=dcpwriter", "/shared/rdv", 3, 8, 60000, 30000, "posix",
                     NULL, "/opt/dcp/lib"};
  uint8_t *p;
  size_t len;
  CHECK(dcpi_wp_open_encode(&c, &p, &len) == DCP_OK, "encode");
  dcpi_wp_coord d;
  dcpi_err err;
  dcpi_err_clear(&err);
  CHECK(dcpi_wp_open_decode(p, len, &d, &err) == DCP_OK, "decode: %s", err.msg);
  CHECK(!strcmp(d.coll, "file") && !strcmp(d.coll_options, "job=dcpwriter") &&
            !strcmp(d.rendezvous, "/shared/rdv") && d.rank == 3 && d.world_size == 8 &&
            d.timeout_ms == 60000 && d.lease_ms == 30000 && !strcmp(d.storage, "posix") &&
            d.storage_options == NULL && !strcmp(d.plugin_path, "/opt/dcp/lib"),
        "OPEN did not round-trip");
  dcpi_wp_coord_free(&d);
  for (size_t n = 0; n < len; n++) {
    dcpi_err_clear(&err);
    CHECK(dcpi_wp_open_decode(p, n, &d, &err) == DCP_ECORRUPT, "OPEN cut at %zu of %zu", n,
          len);
    dcpi_wp_coord_free(&d);
  }
  uint8_t *q = malloc(len + 1);
  CHECK(q, "out of memory");
  memcpy(q, p, len);
  q[len] = 0;
  CHECK(dcpi_wp_open_decode(q, len + 1, &d, &err) == DCP_ECORRUPT, "trailing byte accepted");
  dcpi_wp_coord_free(&d);
  free(q);
  free(p);
  return 0;
}

int main(int argc, char **argv) {
  ak_args a;
  ak_parse(argc, argv, &a);
  if (!strcmp(a.mode, "background")) return mode_background(&a);
  if (!strcmp(a.mode, "counts")) return mode_counts(&a);
  if (!strcmp(a.mode, "fence-only")) return mode_fence_only(&a);
  if (!strcmp(a.mode, "stage-fault")) return mode_stage_fault(&a);
  if (!strcmp(a.mode, "prepare")) return mode_prepare(&a);
  if (!strcmp(a.mode, "open-codec")) return mode_open_codec();
  fprintf(stderr, "async_stage: unknown mode '%s'\n", a.mode);
  return 2;
}

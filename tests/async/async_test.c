/* async_test — async save scenarios (docs/async.md), one per mode:
 *
 *   async_test basic        --dir D [--rendezvous R]   (1 rank, or N under
 *                            dcp_launch with the file collective)
 *   async_test kill-trainer --dir D   a forked trainer async-saves and
 *                            SIGKILLs itself; the writer still commits
 *   async_test kill-writer  --dir D   the writer killed mid-save: wait
 *                            fails, the previous checkpoint loads, the
 *                            next save respawns a writer
 *   async_test notfound     --dir D   DCP_WRITER names nothing
 *   async_test orphan       --dir D [--lease-ms MS]  a forked trainer
 *                            async-saves step 5 over step 4 and dies; the
 *                            restarted job saves step 6; whether the
 *                            orphaned writer gets to its job before
 *                            (DCP_WRITER_DELAY_MS 0) or after that save
 *                            (800), or stalls holding the lease (SIGSTOP),
 *                            the directory ends as step 6
 *   async_test trainers-die --dir D --rendezvous R  (N ranks) ranks 1..
 *                            exit right after staging: the save commits,
 *                            rank 0's next one fails with DCP_EPEER
 *   async_test writer-refuses --dir D --rendezvous R  (N ranks) rank 1's
 *                            writer cannot rebuild its first job's state:
 *                            every rank fails at once, nothing commits,
 *                            the next save does
 *   async_test kill-peer-writer  --dir D --rendezvous R --timeout-ms T
 *   async_test stall-peer-writer --dir D --rendezvous R --timeout-ms T
 *                            (N ranks under dcp_launch) the last rank's
 *                            writer dies (SIGKILL) or stalls (SIGSTOP)
 *                            mid-save: every other rank's wait fails
 *                            within the deadline plus a margin
 *
 * Every checkpoint is loaded back and compared byte for byte. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "async/async_int.h"
#include "async_kit.h"
#include "ckpt_files.h"
#include "dcp.h"
#include "rank_check.h"


#define ROWS 64
#define COLS 33
#define BIG ((size_t)65 << 20) /* over the parallel-copy threshold */

/* This rank's buffers: its rows of "w" (float), all of "rep" (i64,
 * replicated), a replicated and a per-rank bytes item, and on one rank a
 * large "big" tensor. */
typedef struct model {
  int rank, world;
  float *w;
  int64_t rows, row0;
  int64_t rep[100];
  char cfg[40], rng[24];
  uint8_t *big; /* NULL unless single-rank */
} model;

static void model_alloc(model *m, int rank, int world, int big) {
  memset(m, 0, sizeof *m);
  m->rank = rank, m->world = world;
  ak_rows_alloc(rank, world, ROWS, COLS, big ? BIG : 0, &m->row0, &m->rows, &m->w, &m->big);
}

static void model_fill(model *m, uint32_t gen) {
  for (int64_t i = 0; i < m->rows * COLS; i++) m->w[i] = (float)(gen * 100000 + m->row0 * COLS + i);
  for (int i = 0; i < 100; i++) m->rep[i] = (int64_t)gen * 7 + i;
  memset(m->cfg, 0, sizeof m->cfg);
  memset(m->rng, 0, sizeof m->rng);
  snprintf(m->cfg, sizeof m->cfg, "config generation %u", gen);
  snprintf(m->rng, sizeof m->rng, "rng r%d g%u", m->rank, gen);
  if (m->big)
    for (size_t i = 0; i < BIG; i += 4093) m->big[i] = (uint8_t)(i * 31 + gen);
}

static void model_free(model *m) {
  free(m->w);
  free(m->big);
}

static dcp_state *model_state(dcp_ctx *ctx, model *m) {
  dcp_state *st;
  OK(dcp_state_create(ctx, &st), ctx);
  ak_rows_add(ctx, st, ROWS, COLS, m->row0, m->rows, m->w, m->big, BIG);
  int64_t rshape[1] = {100}, roff[1] = {0};
  OK(dcp_state_add_tensor(st, "rep", DCP_I64, 1, rshape), ctx);
  OK(dcp_state_add_chunk(st, "rep", roff, rshape, m->rep), ctx);
  OK(dcp_state_add_bytes(st, "cfg", DCP_SCOPE_REPLICATED, m->cfg, sizeof m->cfg), ctx);
  OK(dcp_state_add_bytes(st, "rng", DCP_SCOPE_PER_RANK, m->rng, sizeof m->rng), ctx);
  return st;
}

/* Load path into fresh buffers and compare with a model filled with gen. */
static void check_load(dcp_ctx *ctx, const char *path, int rank, int world, int big,
                       uint32_t gen) {
  model want, got;
  model_alloc(&want, rank, world, big);
  model_alloc(&got, rank, world, big);
  model_fill(&want, gen);
  dcp_state *st = model_state(ctx, &got);
  OK(dcp_load(ctx, st, path, NULL), ctx);
  dcp_state_free(st);
  CHECK(!memcmp(want.w, got.w, (size_t)(want.rows * COLS) * sizeof *want.w), "w differs in %s",
        path);
  CHECK(!memcmp(want.rep, got.rep, sizeof want.rep), "rep differs in %s", path);
  CHECK(!memcmp(want.cfg, got.cfg, sizeof want.cfg), "cfg differs in %s", path);
  CHECK(!memcmp(want.rng, got.rng, sizeof want.rng), "rng differs in %s", path);
  CHECK(!big || !memcmp(want.big, got.big, BIG), "big differs in %s", path);
  model_free(&want);
  model_free(&got);
}

typedef ak_args args;

static dcp_ctx *open_ctx(const args *a, int *rank, int *world) {
  dcp_ctx *ctx = ak_open_ctx(a);
  *rank = g_rank = dcp_ctx_rank(ctx);
  *world = dcp_ctx_world_size(ctx);
  return ctx;
}

static void path_of(char *buf, size_t cap, const args *a, const char *name) {
  snprintf(buf, cap, "%s/%s", a->dir, name);
}

static int g_copies;

static void counting_copy(void *arg, void *dst, const void *src, size_t len) {
  (*(int *)arg)++;
  memcpy(dst, src, len);
}

/* Save gen through m's state, then overwrite m with junk at once (the
 * checkpoint must hold the staged values). Returns the handle. */
static dcp_async *save_then_mutate(dcp_ctx *ctx, model *m, const char *path, uint32_t gen) {
  model_fill(m, gen);
  dcp_state *st = model_state(ctx, m);
  dcp_async *h;
  OK(dcp_async_save(ctx, st, path, NULL, &h), ctx);
  dcp_state_free(st);
  model_fill(m, 999);
  return h;
}

/* With "none" coordination every writer commits its part on its own:
 * before loading, wait (bounded) until all ranks of the world have. */
static void wait_rank_metadata(const char *path, int world) {
  for (int tries = 0; tries < 3000; tries++) {
    int all = 1;
    for (int r = 0; r < world && all; r++) all = ck_parts_of_rank(path, r) > 0;
    if (all) return;
    nanosleep(&(struct timespec){0, 10000000}, NULL);
  }
  CHECK(0, "not every rank committed %s within 30 s", path);
}

static int mode_basic(const args *a) {
  int rank, world;
  dcp_ctx *ctx = open_ctx(a, &rank, &world);
  int big = world == 1;
  model m;
  model_alloc(&m, rank, world, big);
  char p1[512], p2[512];
  path_of(p1, sizeof p1, a, "one");
  path_of(p2, sizeof p2, a, "two");
  dcp_async *h1 = save_then_mutate(ctx, &m, p1, 1);
  int done = 0;
  OK(dcp_async_test(h1, &done), ctx);
  OK(dcp_async_wait(h1), ctx);
  dcp_stats st1 = {.struct_size = sizeof st1};
  dcp_ctx_stats(ctx, &st1); /* the writer's figures of the save */
  CHECK(st1.plan_cache_hit == 0 && st1.items_written > 0 && st1.data_bytes > 0,
        "first async save stats: hit %u, items %llu", st1.plan_cache_hit,
        (unsigned long long)st1.items_written);
  OK(dcp_async_test(h1, &done), ctx);
  CHECK(done == 1, "test after wait says not done");
  dcp_async_free(h1);
  OK(dcp_async_set_copy(ctx, counting_copy, &g_copies), ctx);
  dcp_async *h2 = save_then_mutate(ctx, &m, p2, 2);
  OK(dcp_async_wait(h2), ctx);
  dcp_async_free(h2);
  /* same geometry: the writer reused its cached global plan */
  dcp_stats st2 = {.struct_size = sizeof st2};
  dcp_ctx_stats(ctx, &st2);
  int coordinated = !a->writer_coll || strcmp(a->writer_coll, "none") != 0;
  CHECK(!coordinated || st2.plan_cache_hit == 1, "second async save missed the plan cache");
  CHECK(world == 1 || !coordinated || st2.plan_coll_bytes < st1.plan_coll_bytes,
        "plan-phase collective bytes %llu on the hit, %llu on the miss",
        (unsigned long long)st2.plan_coll_bytes, (unsigned long long)st1.plan_coll_bytes);
  CHECK(g_copies == (big ? 3 : 2), "copy callback ran %d times", g_copies);
  CHECK(dcpi_async_pool_creations(ctx) == 1, "pool created %llu times",
        (unsigned long long)dcpi_async_pool_creations(ctx));
  CHECK(dcpi_async_pool_growths(ctx) == 0, "pool grew");
  CHECK(dcpi_async_spawns(ctx) == 1 && dcpi_async_saves(ctx) == 2, "spawns %llu saves %llu",
        (unsigned long long)dcpi_async_spawns(ctx), (unsigned long long)dcpi_async_saves(ctx));
  { /* bad options are refused before anything is staged or sent */
    dcp_state *bad = model_state(ctx, &m);
    dcp_save_options o;
    dcp_save_options_init(&o);
    o.block_size = 100;
    dcp_async *hb = NULL;
    int copies = g_copies;
    CHECK(dcp_async_save(ctx, bad, p2, &o, &hb) == DCP_EINVAL && !hb,
          "a block_size of 100 was not refused by dcp_async_save");
    CHECK(strstr(dcp_ctx_last_error(ctx), "block_size"), "no block_size in '%s'",
          dcp_ctx_last_error(ctx));
    CHECK(g_copies == copies && dcpi_async_saves(ctx) == 2, "the refused save staged or ran");
    dcp_state_free(bad);
  }
  if (!coordinated) { /* a rank's wait covers its own part only */
    wait_rank_metadata(p1, world);
    wait_rank_metadata(p2, world);
  }
  check_load(ctx, p1, rank, world, big, 1);
  check_load(ctx, p2, rank, world, big, 2);
  pid_t pid = dcpi_async_writer_pid(ctx);
  dcp_async_shutdown(ctx);
  CHECK(pid > 0 && kill(pid, 0) != 0, "writer %d still there after shutdown", (int)pid);
  model_free(&m);
  dcp_ctx_free(ctx);
  return 0;
}

static int committed(const char *path) {
  char md[600];
  snprintf(md, sizeof md, "%s/.metadata", path);
  struct stat sb;
  return stat(md, &sb) == 0;
}

static int mode_kill_trainer(const args *a) {
  char p[512];
  path_of(p, sizeof p, a, "orphan");
  pid_t child = fork();
  CHECK(child >= 0, "fork");
  if (child == 0) {
    setenv("DCP_WRITER_DELAY_MS", "500", 1); /* commit after the trainer died */
    int rank, world;
    dcp_ctx *ctx = open_ctx(a, &rank, &world);
    model m;
    model_alloc(&m, 0, 1, 1);
    dcp_async *h = save_then_mutate(ctx, &m, p, 5);
    (void)h;
    raise(SIGKILL);
    _exit(3);
  }
  int status;
  CHECK(waitpid(child, &status, 0) == child && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
        "the trainer did not die of SIGKILL (status %d)", status);
  for (int i = 0; i < 1200 && !committed(p); i++) nanosleep(&(struct timespec){0, 50000000}, NULL);
  CHECK(committed(p), "no committed .metadata at %s after 60 s", p);
  int rank, world;
  dcp_ctx *ctx = open_ctx(a, &rank, &world);
  check_load(ctx, p, 0, 1, 1, 5);
  dcp_ctx_free(ctx);
  return 0;
}

/* Seconds on a monotonic clock. */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* 1 when process pid ends within a second: a SIGKILL sent to it is on
 * its way. */
static int dead(pid_t pid) { return ak_gone_within(pid, 1000); }

/* The context of a mode that needs several ranks, this rank's model, and
 * the paths (cap bytes each) of its two saves, n1 and n2 in the test's
 * directory. */
static dcp_ctx *open_multi(const args *a, const char *mode, int *rank, int *world, model *m,
                           char *p1, const char *n1, char *p2, const char *n2, size_t cap) {
  dcp_ctx *ctx = open_ctx(a, rank, world);
  CHECK(*world > 1, "%s needs several ranks", mode);
  model_alloc(m, *rank, *world, 0);
  path_of(p1, cap, a, n1), path_of(p2, cap, a, n2);
  return ctx;
}

/* Several ranks: the last rank's writer dies (sig SIGKILL) or stalls
 * (SIGSTOP) mid-save. Its peers' writers must give up by their deadline (no
 * hang), every rank's wait returns an error, nothing is committed, and the
 * previous checkpoint still loads. A stalled writer's own trainer waits
 * with the same deadline (dcp_async_wait_for: DCP_ETIMEDOUT), then gives up
 * on the save (dcp_async_abort kills the writer: nothing lingers). */
static int peer_writer_fault(const args *a, int sig) {
  setenv("DCP_WRITER_DELAY_MS", "500", 1);
  int rank, world;
  model m;
  char p1[512], p2[512];
  dcp_ctx *ctx = open_multi(a, sig == SIGKILL ? "kill-peer-writer" : "stall-peer-writer", &rank,
                            &world, &m, p1, "good", p2, "killed", sizeof p1);
  dcp_async *h = save_then_mutate(ctx, &m, p1, 1);
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
  double t0 = now_s();
  h = save_then_mutate(ctx, &m, p2, 2);
  if (rank == world - 1) {
    pid_t pid = dcpi_async_writer_pid(ctx);
    CHECK(pid > 0 && kill(pid, sig) == 0, "cannot signal the writer %d", (int)pid);
  }
  int own_stalled = sig == SIGSTOP && rank == world - 1;
  dcp_status rc = own_stalled ? dcp_async_wait_for(h, a->timeout_ms) : dcp_async_wait(h);
  if (own_stalled) {
    CHECK(rc == DCP_ETIMEDOUT, "wait_for on a stalled writer: %s", dcp_strerror(rc));
    pid_t pid = dcpi_async_writer_pid(ctx);
    CHECK(dcp_async_abort(h) == DCP_EPEER, "abort of the stalled save did not fail it");
    CHECK(dead(pid), "the stalled writer %d is still there after the abort", (int)pid);
  }
  double took = now_s() - t0, limit = (double)a->timeout_ms / 1e3 + 0.5 + 5.0;
  CHECK(rc != DCP_OK, "rank %d: the save with a dead writer succeeded", rank);
  CHECK(took < limit, "rank %d: wait took %.1f s, more than the deadline allows (%.1f s)", rank,
        took, limit);
  dcp_async_free(h);
  CHECK(!committed(p2), "the save with a dead writer committed");
  /* the trainers share the deadline with their writers: let the rank whose
   * writer died (its wait returns at once) reach the load no earlier than
   * the others, whose waits end at the deadline */
  double until = (double)a->timeout_ms / 1e3 + 1.0;
  while (now_s() - t0 < until) nanosleep(&(struct timespec){0, 20000000}, NULL);
  check_load(ctx, p1, rank, world, 0, 1);
  if (rank == 0)
    printf("%s-peer-writer: every rank's wait failed within %.1f s (deadline %ld ms): %s\n",
           sig == SIGKILL ? "kill" : "stall", took, a->timeout_ms, dcp_ctx_last_error(ctx));
  dcp_async_shutdown(ctx);
  model_free(&m);
  dcp_ctx_free(ctx);
  return 0;
}

/* DCP_WRITER_FAULT=rebuild-once:1 (tools/writer/main.c): rank 1's writer
 * cannot rebuild its first job's state. Every rank's wait fails with that
 * writer's reason (it refuses in the save's first agreement) well before
 * the deadline, nothing is committed, and the next save through the same
 * writers commits and loads back. */
static int mode_writer_refuses(const args *a) {
  setenv("DCP_WRITER_FAULT", "rebuild-once:1", 1); /* before the writer is spawned */
  int rank, world;
  model m;
  char p1[512], p2[512];
  dcp_ctx *ctx = open_multi(a, "writer-refuses", &rank, &world, &m, p1, "refused", p2, "after",
                            sizeof p1);
  double t0 = now_s();
  dcp_async *h = save_then_mutate(ctx, &m, p1, 1);
  dcp_status rc = dcp_async_wait(h);
  double took = now_s() - t0;
  CHECK(rc == DCP_ECORRUPT, "rank %d: the refused save returned %s: %s", rank, dcp_strerror(rc),
        dcp_ctx_last_error(ctx));
  CHECK(strstr(dcp_ctx_last_error(ctx), "dcp-writer (rank 1)") &&
            strstr(dcp_ctx_last_error(ctx), "rebuilding the state"),
        "rank %d: the reason does not name the refusing writer: '%s'", rank,
        dcp_ctx_last_error(ctx));
  CHECK(took < (double)a->timeout_ms / 2e3, "rank %d: the refusal took %.1f s (deadline %ld ms)",
        rank, took, a->timeout_ms);
  dcp_async_free(h);
  CHECK(!committed(p1), "the refused save committed");
  h = save_then_mutate(ctx, &m, p2, 2);
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
  check_load(ctx, p2, rank, world, 0, 2);
  dcp_state *st = model_state(ctx, &m);
  CHECK(dcp_load(ctx, st, p1, NULL) != DCP_OK, "the refused save loads");
  dcp_state_free(st);
  if (rank == 0) printf("writer-refuses: every rank failed in %.2f s: %s\n", took,
                        dcp_ctx_last_error(ctx));
  dcp_async_shutdown(ctx);
  model_free(&m);
  dcp_ctx_free(ctx);
  return 0;
}

/* Ranks 1.. async-save and exit at once (staged: the job is their
 * writers'); rank 0 waits. Their writers still take part: the save
 * commits, and a load by one rank gets every value. Rank 0's next async
 * save then fails at once with DCP_EPEER naming a rank whose writer left
 * (was: DCP_EINVAL "ranks called different collectives"). */
static int mode_trainers_die(const args *a) {
  int rank, world;
  model m;
  char p1[512], p2[512];
  dcp_ctx *ctx = open_multi(a, "trainers-die", &rank, &world, &m, p1, "orphaned", p2, "alone",
                            sizeof p1);
  dcp_async *h = save_then_mutate(ctx, &m, p1, 1);
  if (rank != 0) _exit(0); /* no wait, no free, no shutdown: the process is gone */
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
  CHECK(committed(p1), "the save whose other trainers exited did not commit");
  { /* every row, read back by one rank: the dead ranks' rows too */
    dcp_ctx *one;
    dcp_ctx_config cfg;
    dcp_ctx_config_init(&cfg);
    OK(dcp_ctx_create(&cfg, &one), NULL);
    model want, got;
    model_alloc(&want, 0, 1, 0), model_alloc(&got, 0, 1, 0);
    model_fill(&want, 1);
    dcp_state *st;
    OK(dcp_state_create(one, &st), one);
    ak_rows_add(one, st, ROWS, COLS, got.row0, got.rows, got.w, NULL, 0);
    OK(dcp_load(one, st, p1, NULL), one);
    CHECK(!memcmp(want.w, got.w, (size_t)(ROWS * COLS) * sizeof *want.w),
          "rows of %s differ when loaded by one rank", p1);
    dcp_state_free(st);
    model_free(&want), model_free(&got);
    dcp_ctx_free(one);
  }
  double t0 = now_s();
  h = save_then_mutate(ctx, &m, p2, 2);
  dcp_status rc = dcp_async_wait(h);
  CHECK(rc == DCP_EPEER && strstr(dcp_ctx_last_error(ctx), "closed its collective"),
        "a save with the other writers gone returned %s: %s", dcp_strerror(rc),
        dcp_ctx_last_error(ctx));
  CHECK(now_s() - t0 < (double)a->timeout_ms / 2e3, "it took %.1f s to fail", now_s() - t0);
  dcp_async_free(h);
  CHECK(!committed(p2), "a save of one rank of %d committed", world);
  printf("trainers-die: committed with %d trainers gone; then: %s\n", world - 1,
         dcp_ctx_last_error(ctx));
  dcp_async_shutdown(ctx);
  model_free(&m);
  dcp_ctx_free(ctx);
  return 0;
}

/* Write pid to path (a line). */
static void write_pid(const char *path, pid_t pid) {
  FILE *f = fopen(path, "w");
  CHECK(f && fprintf(f, "%d\n", (int)pid) > 0 && fclose(f) == 0, "cannot write %s", path);
}

/* The pid in the lease file of directory p, 0 when there is none. */
static int lease_pid(const char *p) {
  char path[600], line[600] = "";
  snprintf(path, sizeof path, "%s/.lock", p);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  if (!fgets(line, sizeof line, f)) line[0] = '\0';
  fclose(f);
  const char *at = strstr(line, " pid=");
  return at ? atoi(at + 5) : 0;
}

/* One orphan round: the writer waits delay_ms before its job; with stall,
 * it is stopped (SIGSTOP) as soon as it holds the directory's lease, until
 * the restarted job's save has broken that lease and committed. */
static int orphan_round(const args *a, const char *p, const char *delay_ms, int stall) {
  char pidfile[600];
  snprintf(pidfile, sizeof pidfile, "%s.writer", p);
  int rank, world;
  dcp_ctx *ctx = open_ctx(a, &rank, &world);
  model m;
  model_alloc(&m, 0, 1, 1);
  model_fill(&m, 4);
  dcp_state *st = model_state(ctx, &m);
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.flags = DCP_SAVE_OVERWRITE;
  OK(dcp_save(ctx, st, p, &o), ctx); /* step 4, committed */
  dcp_state_free(st);
  pid_t child = fork();
  CHECK(child >= 0, "fork");
  if (child == 0) { /* the trainer that dies after its async save returned */
    setenv("DCP_WRITER_DELAY_MS", delay_ms, 1);
    dcp_ctx *tc = open_ctx(a, &rank, &world);
    model tm;
    model_alloc(&tm, 0, 1, 1);
    dcp_async *h = save_then_mutate(tc, &tm, p, 5);
    (void)h;
    write_pid(pidfile, dcpi_async_writer_pid(tc));
    raise(SIGKILL);
    _exit(3);
  }
  int status;
  CHECK(waitpid(child, &status, 0) == child && WIFSIGNALED(status), "the trainer did not die");
  FILE *f = fopen(pidfile, "r");
  int writer = 0;
  CHECK(f && fscanf(f, "%d", &writer) == 1 && writer > 0, "no writer pid in %s", pidfile);
  fclose(f);
  if (stall) {
    /* a loaded machine may not run this loop while the quick save holds
     * the lease: a writer gone by then is a round to try again */
    for (double until = now_s() + 30;
         lease_pid(p) != writer && kill(writer, 0) == 0 && now_s() < until;)
      nanosleep(&(struct timespec){0, 200000}, NULL);
    if (kill(writer, SIGSTOP) != 0 || lease_pid(p) != writer) { /* over before it stopped */
      kill(writer, SIGCONT);
      model_free(&m);
      dcp_ctx_free(ctx);
      return 0;
    }
  }
  /* the restarted job saves step 6: while the orphan holds the directory
   * it is told so (DCP_EBUSY), and it tries again */
  model_fill(&m, 6);
  st = model_state(ctx, &m);
  dcp_status rc = DCP_EBUSY;
  int busy = 0;
  for (double until = now_s() + 60; rc == DCP_EBUSY && now_s() < until; busy++) {
    rc = dcp_save(ctx, st, p, &o);
    if (rc == DCP_EBUSY) nanosleep(&(struct timespec){0, 20000000}, NULL);
  }
  OK(rc, ctx);
  dcp_state_free(st);
  CHECK(!stall || busy > 1, "the restarted save never met the stalled orphan's lease");
  if (stall) kill(writer, SIGCONT); /* it finds its lease lost, commits nothing */
  /* the orphan finishes (committing nothing over step 6) and goes */
  for (double until = now_s() + 60; kill(writer, 0) == 0 && now_s() < until;)
    nanosleep(&(struct timespec){0, 20000000}, NULL);
  CHECK(kill(writer, 0) != 0, "the orphaned writer %d is still there after 60 s", writer);
  check_load(ctx, p, 0, 1, 1, 6);
  printf("orphan (writer delay %s ms%s): step 6 kept; the restarted save met the orphan's "
         "lease %d time(s)\n", delay_ms, stall ? ", stopped" : "", busy - 1);
  model_free(&m);
  dcp_ctx_free(ctx);
  return 1;
}

static int mode_orphan(const args *a) {
  char p[512];
  path_of(p, sizeof p, a, "orphan-late");
  orphan_round(a, p, "800", 0); /* the writer starts after step 6 committed */
  path_of(p, sizeof p, a, "orphan-quick");
  orphan_round(a, p, "0", 0); /* the writer may finish first: step 6 replaces it */
  int stalled = 0; /* stalled while it holds the lease (a quick save may be
                      over before the stop lands: try again) */
  for (int round = 0; round < 10 && !stalled; round++) {
    char name[32];
    snprintf(name, sizeof name, "orphan-stalled-%d", round);
    path_of(p, sizeof p, a, name);
    stalled = orphan_round(a, p, "300", 1);
  }
  CHECK(stalled, "no orphaned writer was stopped while it held the lease in 10 rounds");
  return 0;
}

static int mode_kill_writer(const args *a) {
  setenv("DCP_WRITER_DELAY_MS", "1500", 1);
  int rank, world;
  dcp_ctx *ctx = open_ctx(a, &rank, &world);
  model m;
  model_alloc(&m, 0, 1, 0);
  char p1[512], p2[512], p3[512];
  path_of(p1, sizeof p1, a, "good"), path_of(p2, sizeof p2, a, "killed");
  path_of(p3, sizeof p3, a, "after");
  dcp_async *h = save_then_mutate(ctx, &m, p1, 1);
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
  h = save_then_mutate(ctx, &m, p2, 2);
  pid_t pid = dcpi_async_writer_pid(ctx);
  CHECK(pid > 0 && kill(pid, SIGKILL) == 0, "cannot kill the writer %d", (int)pid);
  dcp_status rc = dcp_async_wait(h);
  CHECK(rc == DCP_EPEER, "wait after the writer died: %s", dcp_strerror(rc));
  CHECK(strstr(dcp_ctx_last_error(ctx), "writer"), "message: %s", dcp_ctx_last_error(ctx));
  dcp_async_free(h);
  CHECK(!committed(p2), "the killed save committed");
  check_load(ctx, p1, 0, 1, 0, 1);
  h = save_then_mutate(ctx, &m, p3, 3);
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
  CHECK(dcpi_async_spawns(ctx) == 2, "writer spawned %llu times",
        (unsigned long long)dcpi_async_spawns(ctx));
  check_load(ctx, p3, 0, 1, 0, 3);
  dcp_async_shutdown(ctx);
  model_free(&m);
  dcp_ctx_free(ctx);
  return 0;
}

static int mode_notfound(const args *a) {
  setenv("DCP_WRITER", "/nonexistent/dcp-writer", 1);
  int rank, world;
  dcp_ctx *ctx = open_ctx(a, &rank, &world);
  model m;
  model_alloc(&m, 0, 1, 0);
  model_fill(&m, 1);
  dcp_state *st = model_state(ctx, &m);
  dcp_async *h = NULL;
  char p[512];
  path_of(p, sizeof p, a, "never");
  dcp_status rc = dcp_async_save(ctx, st, p, NULL, &h);
  CHECK(rc == DCP_ENOTFOUND && !h, "async save without a writer: %s", dcp_strerror(rc));
  CHECK(strstr(dcp_ctx_last_error(ctx), "/nonexistent/dcp-writer"), "message: %s",
        dcp_ctx_last_error(ctx));
  dcp_state_free(st);
  dcp_async_shutdown(ctx);
  model_free(&m);
  dcp_ctx_free(ctx);
  return 0;
}

int main(int argc, char **argv) {
  args a;
  ak_parse(argc, argv, &a);
  if (!strcmp(a.mode, "basic")) return mode_basic(&a);
  if (!strcmp(a.mode, "kill-peer-writer")) return peer_writer_fault(&a, SIGKILL);
  if (!strcmp(a.mode, "stall-peer-writer")) return peer_writer_fault(&a, SIGSTOP);
  if (!strcmp(a.mode, "kill-trainer")) return mode_kill_trainer(&a);
  if (!strcmp(a.mode, "kill-writer")) return mode_kill_writer(&a);
  if (!strcmp(a.mode, "notfound")) return mode_notfound(&a);
  if (!strcmp(a.mode, "writer-refuses")) return mode_writer_refuses(&a);
  if (!strcmp(a.mode, "trainers-die")) return mode_trainers_die(&a);
  if (!strcmp(a.mode, "orphan")) return mode_orphan(&a);
  CHECK(0, "unknown mode %s", a.mode);
  return 2;
}

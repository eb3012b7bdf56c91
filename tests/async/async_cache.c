/* async_cache — async saves that share state with the trainer:
 *
 *   async_cache share  --dir D [--rendezvous R] [--writer-coll C] [--trainer-coll mpi]
 *       one plan cache for sync and async saves: a plan made by a sync save
 *       serves the next async save of that geometry (the writer plans
 *       nothing), and a plan made by the writer serves the next sync save
 *       (the trainer plans nothing)
 *   async_cache layout --dir D --rendezvous R   (4 ranks, writers "none")
 *       layouts reach the writer: a shard replicated over data-parallel
 *       ranks is written once in all, not once per replica
 *   async_cache flat --dir D --rendezvous R   (4 ranks, writers coordinated)
 *       a state of layout tensors (sharded, and a ZeRO flat shard over dp
 *       via dcp_state_add_flat_sharded) and bytes items reaches the writer
 *       whole: its save plans per rank (save_plan_path 1), writes the model
 *       once, and loads back resharded; then the same with rank 0 also
 *       holding rank 1's range of "m" by hand (a chunk added to a flat
 *       tensor: the writer gets it as hand-added chunks, and the save takes
 *       the gather)
 *   async_cache deadline --dir D   (1 rank)
 *       dcp_async_wait_for gives up at its deadline while the save goes on;
 *       dcp_async_abort kills the writer, commits nothing, and the next save
 *       gets a new writer
 *
 * Every checkpoint is loaded back and compared byte for byte. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "async/async_int.h"
#include "ckpt_files.h"
#include "async_kit.h"
#include "dcp.h"
#include "rank_check.h"

typedef ak_args args;

static dcp_ctx *open_ctx(const args *a) {
  dcp_ctx *ctx = ak_open_ctx(a);
  g_rank = dcp_ctx_rank(ctx);
  return ctx;
}

static void path_of(char *buf, size_t cap, const args *a, const char *name) {
  snprintf(buf, cap, "%s/%s", a->dir, name);
}

static dcp_stats stats_of(dcp_ctx *ctx) {
  dcp_stats s = {.struct_size = sizeof s};
  dcp_ctx_stats(ctx, &s);
  return s;
}

/* ---- share -------------------------------------------------------------- */

#define ROWS 48
#define COLS 16

/* This rank's rows of "w" (filled from gen), and with `extra` a second,
 * replicated tensor: two geometries, hence two plan keys. */
typedef struct model {
  int64_t row0, rows;
  float w[ROWS * COLS];
  int32_t extra[64];
} model;

static void model_fill(model *m, int rank, int world, uint32_t gen) {
  int64_t per = (ROWS + world - 1) / world;
  m->row0 = per * rank < ROWS ? per * rank : ROWS;
  m->rows = m->row0 + per < ROWS ? per : ROWS - m->row0;
  for (int64_t i = 0; i < m->rows * COLS; i++) m->w[i] = (float)(gen * 10000 + m->row0 * COLS + i);
  for (int i = 0; i < 64; i++) m->extra[i] = (int32_t)(gen * 100 + (uint32_t)i);
}

static dcp_state *model_state(dcp_ctx *ctx, model *m, int extra) {
  dcp_state *st;
  OK(dcp_state_create(ctx, &st), ctx);
  int64_t shape[2] = {ROWS, COLS}, off[2] = {m->row0, 0}, size[2] = {m->rows, COLS};
  OK(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), ctx);
  OK(dcp_state_add_chunk(st, "w", off, size, m->w), ctx);
  if (extra) {
    int64_t es[1] = {64}, eo[1] = {0};
    OK(dcp_state_add_tensor(st, "extra", DCP_I32, 1, es), ctx);
    OK(dcp_state_add_chunk(st, "extra", eo, es, m->extra), ctx);
  }
  return st;
}

static void check_load(dcp_ctx *ctx, const char *path, int extra, uint32_t gen) {
  int rank = dcp_ctx_rank(ctx), world = dcp_ctx_world_size(ctx);
  model want, got;
  model_fill(&want, rank, world, gen);
  memset(&got, 0, sizeof got);
  got.row0 = want.row0, got.rows = want.rows;
  dcp_state *st = model_state(ctx, &got, extra);
  OK(dcp_load(ctx, st, path, NULL), ctx);
  dcp_state_free(st);
  CHECK(!memcmp(want.w, got.w, (size_t)(want.rows * COLS) * sizeof *want.w), "w differs in %s",
        path);
  CHECK(!extra || !memcmp(want.extra, got.extra, sizeof want.extra), "extra differs in %s",
        path);
}

static void sync_save(dcp_ctx *ctx, const char *path, int extra, uint32_t gen) {
  model m;
  model_fill(&m, dcp_ctx_rank(ctx), dcp_ctx_world_size(ctx), gen);
  dcp_state *st = model_state(ctx, &m, extra);
  OK(dcp_save(ctx, st, path, NULL), ctx);
  dcp_state_free(st);
}

/* An async save, waited for; the model is overwritten at once after the
 * call returns (the staged copy is what must persist). */
static void async_save(dcp_ctx *ctx, const char *path, int extra, uint32_t gen) {
  model m;
  model_fill(&m, dcp_ctx_rank(ctx), dcp_ctx_world_size(ctx), gen);
  dcp_state *st = model_state(ctx, &m, extra);
  dcp_async *h;
  OK(dcp_async_save(ctx, st, path, NULL, &h), ctx);
  dcp_state_free(st);
  memset(&m, 0xee, sizeof m);
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
}

/* A save of a geometry the other side planned: a cache hit, with fewer
 * plan-phase collective bytes than the miss that made the plan. */
static void expect_hit(const dcp_stats *hit, const dcp_stats *miss, int world, const char *what) {
  CHECK(hit->plan_cache_hit == 1, "%s planned again: the plan did not travel", what);
  CHECK(world == 1 || hit->plan_coll_bytes < miss->plan_coll_bytes,
        "%s: plan-phase collective bytes %llu on the hit, %llu on the miss", what,
        (unsigned long long)hit->plan_coll_bytes, (unsigned long long)miss->plan_coll_bytes);
}

static int mode_share(const args *a) {
  dcp_ctx *ctx = open_ctx(a);
  int world = dcp_ctx_world_size(ctx);
  char p[4][512];
  const char *names[4] = {"sync1", "async1", "async2", "sync2"};
  for (int i = 0; i < 4; i++) path_of(p[i], sizeof p[i], a, names[i]);

  sync_save(ctx, p[0], 0, 1); /* the trainer plans geometry A */
  dcp_stats s0 = stats_of(ctx);
  CHECK(s0.plan_cache_hit == 0, "the first sync save hit the plan cache");
  async_save(ctx, p[1], 0, 2); /* the writer gets A's plan with the job */
  dcp_stats s1 = stats_of(ctx);
  expect_hit(&s1, &s0, world, "async save after a sync save (trainer -> writer)");

  async_save(ctx, p[2], 1, 3); /* geometry B: the writer plans it */
  dcp_stats s2 = stats_of(ctx);
  CHECK(s2.plan_cache_hit == 0, "a new geometry hit the plan cache");
  sync_save(ctx, p[3], 1, 4); /* the trainer got B's plan back with the DONE */
  dcp_stats s3 = stats_of(ctx);
  expect_hit(&s3, &s2, world, "sync save after an async save (writer -> trainer)");

  check_load(ctx, p[0], 0, 1);
  check_load(ctx, p[1], 0, 2);
  check_load(ctx, p[2], 1, 3);
  check_load(ctx, p[3], 1, 4);
  CHECK(dcpi_async_spawns(ctx) == 1, "writer spawned %llu times",
        (unsigned long long)dcpi_async_spawns(ctx));
  if (g_rank == 0)
    printf("share: writer hit on the trainer's plan (plan bytes %llu vs %llu), trainer hit on "
           "the writer's (%llu vs %llu)\n",
           (unsigned long long)s1.plan_coll_bytes, (unsigned long long)s0.plan_coll_bytes,
           (unsigned long long)s3.plan_coll_bytes, (unsigned long long)s2.plan_coll_bytes);
  dcp_async_shutdown(ctx);
  dcp_ctx_free(ctx);
  return 0;
}

/* ---- layout ------------------------------------------------------------- */

#define LROWS 32
#define LCOLS 8

/* w[LROWS][LCOLS], element (r, c) = gen * 1000 + r * LCOLS + c. */
static float w_at(uint32_t gen, int64_t r, int64_t c) { return (float)(gen * 1000 + r * LCOLS + c); }

/* Wait (bounded) until every rank's file `name` exists under dir (fmt
 * NULL: every rank's part of an uncoordinated save). */
static void wait_all(const char *dir, const char *fmt, int world) {
  for (int tries = 0; tries < 3000; tries++) {
    int all = 1;
    for (int r = 0; r < world && all; r++) {
      char f[700], name[64];
      struct stat sb;
      if (!fmt) {
        all = ck_parts_of_rank(dir, r) > 0;
        continue;
      }
      snprintf(name, sizeof name, fmt, r);
      snprintf(f, sizeof f, "%s/%s", dir, name);
      all = stat(f, &sb) == 0;
    }
    if (all) return;
    nanosleep(&(struct timespec){0, 10000000}, NULL);
  }
  CHECK(0, "not every rank wrote %s within 30 s", fmt ? fmt : "its part");
}

static uint64_t read_u64_file(const char *path) {
  FILE *f = fopen(path, "r");
  unsigned long long v = 0;
  CHECK(f && fscanf(f, "%llu", &v) == 1, "cannot read %s", path);
  fclose(f);
  return v;
}

static void write_u64_file(const char *dir, int rank, uint64_t v) {
  char tmp[700], fin[700];
  snprintf(tmp, sizeof tmp, "%s/bytes.%d.tmp", dir, rank);
  snprintf(fin, sizeof fin, "%s/bytes.%d", dir, rank);
  FILE *f = fopen(tmp, "w");
  CHECK(f && fprintf(f, "%llu\n", (unsigned long long)v) > 0 && fclose(f) == 0, "write %s", tmp);
  CHECK(rename(tmp, fin) == 0, "rename %s", tmp);
}

/* A layout over 4 ranks: mesh [dp 2, tp 2] sharding rows over tp (rows
 * replicated over dp), or [tp 4]. */
static dcp_layout *make_layout(dcp_ctx *ctx, int tp) {
  int64_t mesh2[2] = {4 / tp, tp}, mesh1[1] = {4};
  uint32_t map2[2] = {1u << 1, 0}, map1[2] = {1u << 0, 0};
  dcp_layout *l;
  if (tp == 2) OK(dcp_layout_create(ctx, 2, mesh2, NULL, 2, map2, &l), ctx);
  else OK(dcp_layout_create(ctx, 1, mesh1, NULL, 2, map1, &l), ctx);
  return l;
}

/* This rank's shard of w under layout l, filled from gen, in *buf. */
static dcp_state *layout_state(dcp_ctx *ctx, const dcp_layout *l, uint32_t gen, float **buf) {
  int64_t shape[2] = {LROWS, LCOLS};
  dcp_box b;
  OK(dcp_layout_box(l, shape, dcp_ctx_rank(ctx), &b), ctx);
  *buf = calloc((size_t)(b.size[0] * b.size[1]) + 1, sizeof **buf);
  CHECK(*buf, "out of memory");
  for (int64_t r = 0; r < b.size[0]; r++)
    for (int64_t c = 0; c < b.size[1]; c++)
      (*buf)[r * b.size[1] + c] = gen ? w_at(gen, b.offset[0] + r, c) : 0.0f;
  dcp_state *st;
  OK(dcp_state_create(ctx, &st), ctx);
  OK(dcp_state_add_sharded(st, "w", DCP_F32, 2, shape, l, *buf), ctx);
  return st;
}

static int mode_layout(const args *a) {
  dcp_ctx *ctx = open_ctx(a);
  int world = dcp_ctx_world_size(ctx), rank = dcp_ctx_rank(ctx);
  CHECK(world == 4, "layout needs 4 ranks");
  char p[512];
  path_of(p, sizeof p, a, "dp2tp2");
  dcp_layout *l2 = make_layout(ctx, 2), *l4 = make_layout(ctx, 4);
  float *buf;
  dcp_state *st = layout_state(ctx, l2, 7, &buf);
  dcp_async *h;
  OK(dcp_async_save(ctx, st, p, NULL, &h), ctx);
  dcp_state_free(st);
  free(buf);
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
  write_u64_file(a->dir, rank, stats_of(ctx).data_bytes);
  wait_all(p, NULL, world); /* "none": each rank commits its own part */
  wait_all(a->dir, "bytes.%d", world);
  uint64_t total = 0;
  for (int r = 0; r < world; r++) {
    char f[700];
    snprintf(f, sizeof f, "%s/bytes.%d", a->dir, r);
    total += read_u64_file(f);
  }
  uint64_t model_bytes = (uint64_t)LROWS * LCOLS * sizeof(float);
  CHECK(total == model_bytes, "the writers wrote %llu tensor bytes in all for a %llu-byte "
        "model (the dp replicas were not deduplicated: layouts lost on the way?)",
        (unsigned long long)total, (unsigned long long)model_bytes);
  /* load resharded to tp 4 */
  st = layout_state(ctx, l4, 0, &buf);
  OK(dcp_load(ctx, st, p, NULL), ctx);
  dcp_box b;
  int64_t shape[2] = {LROWS, LCOLS};
  OK(dcp_layout_box(l4, shape, rank, &b), ctx);
  for (int64_t r = 0; r < b.size[0]; r++)
    for (int64_t c = 0; c < LCOLS; c++)
      CHECK(buf[r * LCOLS + c] == w_at(7, b.offset[0] + r, c), "w[%lld][%lld] = %g",
            (long long)(b.offset[0] + r), (long long)c, (double)buf[r * LCOLS + c]);
  dcp_state_free(st);
  free(buf);
  if (rank == 0)
    printf("layout: %llu tensor bytes written for a %llu-byte model replicated twice\n",
           (unsigned long long)total, (unsigned long long)model_bytes);
  dcp_layout_free(l2), dcp_layout_free(l4);
  dcp_async_shutdown(ctx);
  dcp_ctx_free(ctx);
  return 0;
}

/* ---- flat ---------------------------------------------------------------- */

/* "w" sharded and "m" (element = w's + 0.5) flat-sharded over dp, both on
 * the [dp 2, tp 2] mesh with rows over tp; "step" REPLICATED, "rng"
 * PER_RANK. */
/* Rank 1's range of "m" (element = w's + 0.5) into a new buffer, added to
 * st by hand. */
static float *add_rank1_range(dcp_ctx *ctx, dcp_state *st, const dcp_layout *l) {
  int64_t shape[2] = {LROWS, LCOLS}, begin, count;
  dcp_box cell, boxes[3];
  size_t nb;
  OK(dcp_layout_flat_range(l, shape, 1, 1, &cell, &begin, &count), ctx);
  OK(dcp_flat_to_boxes(&cell, begin, count, boxes, 3, &nb), ctx);
  float *buf = calloc((size_t)count + 1, sizeof *buf), *p = buf;
  CHECK(buf, "out of memory");
  for (size_t k = 0; k < nb; k++) {
    for (int64_t r = 0; r < boxes[k].size[0]; r++)
      for (int64_t c = 0; c < boxes[k].size[1]; c++)
        p[r * boxes[k].size[1] + c] = w_at(7, boxes[k].offset[0] + r, boxes[k].offset[1] + c) + 0.5f;
    OK(dcp_state_add_chunk(st, "m", boxes[k].offset, boxes[k].size, p), ctx);
    p += boxes[k].size[0] * boxes[k].size[1];
  }
  return buf;
}

static void run_flat(dcp_ctx *ctx, const args *a, int extra) {
  int rank = dcp_ctx_rank(ctx);
  char p[512];
  path_of(p, sizeof p, a, extra ? "flat-extra" : "flat");
  dcp_layout *l2 = make_layout(ctx, 2), *l4 = make_layout(ctx, 4);
  float *wbuf;
  dcp_state *st = layout_state(ctx, l2, 7, &wbuf);
  int64_t shape[2] = {LROWS, LCOLS}, begin, count;
  dcp_box cell;
  OK(dcp_layout_flat_range(l2, shape, 1, rank, &cell, &begin, &count), ctx);
  float *mbuf = calloc((size_t)count + 1, sizeof *mbuf);
  CHECK(mbuf, "out of memory");
  for (int64_t e = 0; e < count; e++) { /* element begin + e of the cell, row-major */
    int64_t at = begin + e, r = cell.offset[0] + at / LCOLS, c = at % LCOLS;
    mbuf[e] = w_at(7, r, c) + 0.5f;
  }
  OK(dcp_state_add_flat_sharded(st, "m", DCP_F32, 2, shape, l2, 1, mbuf), ctx);
  float *xbuf = extra && rank == 0 ? add_rank1_range(ctx, st, l2) : NULL;
  uint64_t step = 42, rng = 100 + (uint64_t)rank;
  OK(dcp_state_add_bytes(st, "step", DCP_SCOPE_REPLICATED, &step, sizeof step), ctx);
  OK(dcp_state_add_bytes(st, "rng", DCP_SCOPE_PER_RANK, &rng, sizeof rng), ctx);
  dcp_async *h;
  OK(dcp_async_save(ctx, st, p, NULL, &h), ctx);
  dcp_state_free(st);
  free(wbuf), free(mbuf), free(xbuf);
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
  dcp_stats s = stats_of(ctx);
  CHECK(s.save_plan_path == (extra ? 0u : 1u), "the writer's save took path %u (extra %d)",
        s.save_plan_path, extra);
  /* load both resharded to tp 4, and the bytes back */
  st = layout_state(ctx, l4, 0, &wbuf);
  dcp_box b;
  OK(dcp_layout_box(l4, shape, rank, &b), ctx);
  mbuf = calloc((size_t)(b.size[0] * LCOLS) + 1, sizeof *mbuf);
  CHECK(mbuf, "out of memory");
  OK(dcp_state_add_sharded(st, "m", DCP_F32, 2, shape, l4, mbuf), ctx);
  uint64_t step2 = 0, rng2 = 0;
  OK(dcp_state_add_bytes(st, "step", DCP_SCOPE_REPLICATED, &step2, sizeof step2), ctx);
  OK(dcp_state_add_bytes(st, "rng", DCP_SCOPE_PER_RANK, &rng2, sizeof rng2), ctx);
  OK(dcp_load(ctx, st, p, NULL), ctx);
  for (int64_t r = 0; r < b.size[0]; r++)
    for (int64_t c = 0; c < LCOLS; c++) {
      float want = w_at(7, b.offset[0] + r, c);
      CHECK(wbuf[r * LCOLS + c] == want && mbuf[r * LCOLS + c] == want + 0.5f,
            "row %lld col %lld: w %g m %g", (long long)(b.offset[0] + r), (long long)c,
            (double)wbuf[r * LCOLS + c], (double)mbuf[r * LCOLS + c]);
    }
  CHECK(step2 == 42 && rng2 == 100 + (uint64_t)rank, "bytes: step %llu rng %llu",
        (unsigned long long)step2, (unsigned long long)rng2);
  dcp_state_free(st);
  free(wbuf), free(mbuf);
  if (rank == 0)
    printf("flat%s: saved by the writers (plan path %u), loaded at tp 4\n",
           extra ? " with a hand-added chunk" : "", s.save_plan_path);
  dcp_layout_free(l2), dcp_layout_free(l4);
}

static int mode_flat(const args *a) {
  dcp_ctx *ctx = open_ctx(a);
  CHECK(dcp_ctx_world_size(ctx) == 4, "flat needs 4 ranks");
  run_flat(ctx, a, 0);
  run_flat(ctx, a, 1);
  dcp_async_shutdown(ctx);
  dcp_ctx_free(ctx);
  return 0;
}

/* ---- deadline ----------------------------------------------------------- */

static int committed(const char *path) {
  char md[600];
  struct stat sb;
  snprintf(md, sizeof md, "%s/.metadata", path);
  return stat(md, &sb) == 0;
}

static int mode_deadline(const args *a) {
  setenv("DCP_WRITER_DELAY_MS", "3000", 1); /* each job starts 3 s late */
  dcp_ctx *ctx = open_ctx(a);
  char p1[512], p2[512];
  path_of(p1, sizeof p1, a, "aborted");
  path_of(p2, sizeof p2, a, "after");
  model m;
  model_fill(&m, 0, 1, 1);
  dcp_state *st = model_state(ctx, &m, 0);
  dcp_async *h;
  OK(dcp_async_save(ctx, st, p1, NULL, &h), ctx);
  dcp_status rc = dcp_async_wait_for(h, 200);
  CHECK(rc == DCP_ETIMEDOUT, "wait_for(200 ms) on a 3 s save: %s", dcp_strerror(rc));
  CHECK(strstr(dcp_ctx_last_error(ctx), "still persisting"), "message: %s",
        dcp_ctx_last_error(ctx));
  int done = 1;
  OK(dcp_async_test(h, &done), ctx);
  CHECK(done == 0, "the save finished during a 200 ms wait");
  rc = dcp_async_wait_for(h, 0);
  CHECK(rc == DCP_ETIMEDOUT, "a polling wait_for: %s", dcp_strerror(rc));
  pid_t pid = dcpi_async_writer_pid(ctx);
  rc = dcp_async_abort(h);
  CHECK(rc == DCP_EPEER, "abort: %s", dcp_strerror(rc));
  CHECK(strstr(dcp_ctx_last_error(ctx), "aborted"), "message: %s", dcp_ctx_last_error(ctx));
  OK(dcp_async_test(h, &done), ctx);
  CHECK(done == 1, "not done after abort");
  CHECK(dcp_async_abort(h) == DCP_EPEER, "a second abort changed the outcome");
  dcp_async_free(h);
  CHECK(!committed(p1), "the aborted save committed");
  CHECK(pid > 0, "no writer pid");
  /* killed and reaped by the abort: not even a zombie is left */
  CHECK(kill(pid, 0) == -1 && errno == ESRCH, "writer %d still exists after the abort",
        (int)pid);

  setenv("DCP_WRITER_DELAY_MS", "0", 1); /* the next writer, spawned now, is quick */
  model_fill(&m, 0, 1, 2);
  OK(dcp_async_save(ctx, st, p2, NULL, &h), ctx);
  OK(dcp_async_wait_for(h, 60000), ctx);
  OK(dcp_async_wait_for(h, 0), ctx); /* done: a polling wait returns the outcome */
  OK(dcp_async_abort(h), ctx);       /* too late to abort: the outcome stands */
  dcp_async_free(h);
  dcp_state_free(st);
  CHECK(dcpi_async_spawns(ctx) == 2, "writer spawned %llu times",
        (unsigned long long)dcpi_async_spawns(ctx));
  check_load(ctx, p2, 0, 2);
  printf("deadline: wait_for timed out, abort killed writer %d, the next save committed\n",
         (int)pid);
  dcp_async_shutdown(ctx);
  dcp_ctx_free(ctx);
  return 0;
}

int main(int argc, char **argv) {
  args a;
  ak_parse(argc, argv, &a);
  if (!strcmp(a.mode, "share")) return mode_share(&a);
  if (!strcmp(a.mode, "layout")) return mode_layout(&a);
  if (!strcmp(a.mode, "flat")) return mode_flat(&a);
  if (!strcmp(a.mode, "deadline")) return mode_deadline(&a);
  CHECK(0, "unknown mode %s", a.mode);
  return 2;
}

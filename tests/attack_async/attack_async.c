/* attack_async — attacks on the async writer, its handles, the recorded
 * save plan (.plan) and the memory tier: each mode tries to make a save
 * commit something wrong, a load return wrong values, or a call hang or
 * touch freed memory. One world of one rank per mode (plan-w2: two):
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
 *                 load serves the new values, never the snapshot's; a data
 *                 file edited after the snapshot: exact values still
 *   attack_async async-over-parts --dir D   an async save with
 *                 DCP_SAVE_OVERWRITE into a directory holding one rank's part
 *                 of a crashed uncoordinated save commits (as a sync one)
 *   dcp_launch 2 T attack_async plan-w2 --dir D --rendezvous R   two ranks:
 *                 a recorded plan hits on both; a .plan whose slot matches
 *                 one rank only (the other's from another geometry) is a
 *                 miss on both, every load exact
 *   dcp_launch 2 T attack_async peer-kill --dir D --rendezvous R   keep
 *                 mode with one replica: rank 1's writer is SIGKILLed right
 *                 after the save (while it keeps and replicates); a fresh
 *                 trainer of the job restores exact values every round
 *   attack_async chdir --dir D   the trainer changes its working directory
 *                 after its writer started: a relative async save lands in
 *                 the trainer's directory, as a sync one would
 *   attack_async kill-loop --dir D   16 rounds: a trainer async-saves a new
 *                 generation over one path and is SIGKILLed at a random
 *                 moment, its writer too in half of them (a quarter in keep
 *                 mode, restored from memory): the path always loads whole
 *                 as the old or the new generation, never a mix, and
 *                 verifies
 *   attack_async bad-requests --dir D   NULL and empty arguments, an unknown
 *                 flag, a path that is a file or under one: errors, never a
 *                 crash; the same writer then saves a state with an empty
 *                 tensor and an empty bytes item, exact
 *   attack_async shutdown-linger --dir D   keep mode with a 10-minute
 *                 linger: dcp_async_shutdown (and dcp_ctx_free) right after
 *                 the first kept save returns at once and the writer is
 *                 gone, though its snapshot server had not started yet
 *   attack_async copy-fail --dir D   a checked copy callback fails on chunk
 *                 1 of 2, in background then blocking staging: the fence,
 *                 the wait (the blocking save itself) return DCP_EIO naming
 *                 the chunk, nothing commits, the next save is exact
 *   dcp_launch 2 T attack_async refuse-w2 --dir D --rendezvous R   rank 1
 *                 refuses: an empty path to dcp_save and dcp_load, a
 *                 failed staging copy of an async save, an empty path and
 *                 an unknown flag to dcp_async_save: both ranks fail at
 *                 once with rank 1's code and reason, nothing commits, the
 *                 contexts then save and load
 *   attack_async background-free --dir D   background staging, the state
 *                 freed right after dcp_async_save returned (its buffers
 *                 kept until the fence): the staging thread never reads
 *                 the freed state (valgrind), the checkpoint is exact
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
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
#include "runtime/rt.h"

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

/* An async save of st over path (DCP_SAVE_OVERWRITE), waited for. */
static void async_overwrite(dcp_ctx *ctx, dcp_state *st, const char *path) {
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.flags = DCP_SAVE_OVERWRITE;
  dcp_async *h;
  OK(dcp_async_save(ctx, st, path, &so, &h), ctx);
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
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


/* ---- the recorded plan (.plan) ------------------------------------------------- */

/* The bytes of file path (malloc'd) and their length; exits when absent. */
static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  CHECK(f, "open %s: %s", path, strerror(errno));
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
  CHECK(buf && fread(buf, 1, (size_t)n, f) == (size_t)n, "read %s", path);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

static void spit(const char *path, const void *data, size_t len) {
  unlink(path);
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(data, 1, len, f) == len && fclose(f) == 0, "write %s", path);
}

/* Plant bytes as DIR/.plan and as its parent's .plan. */
static void plant(const char *dir, const char *parent, const void *data, size_t len) {
  char p[700];
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/.plan", dir);
  spit(p, data, len);
  snprintf(p, sizeof p, "%s/.plan", parent);
  spit(p, data, len);
}

/* The .plan file bytes of entry e (a valid file: magic, entry, checksum). */
static uint8_t *plan_file_of(const dcpi_plan_entry *e, size_t *len) {
  dcpi_wbuf w = {0};
  dcpi_plan_file_encode(e, &w);
  CHECK(!w.status, "encode a .plan");
  *len = w.len;
  return w.data;
}

/* The entry recorded in the .plan at path (exits unless it decodes). */
static dcpi_plan_entry *entry_of(const char *ckpt) {
  char p[700];
  snprintf(p, sizeof p, "%s/.plan", ckpt);
  size_t len;
  uint8_t *f = slurp(p, &len);
  CHECK(len > 16, "%s is %zu bytes", p, len);
  dcpi_plan_entry *e = NULL;
  dcpi_err err;
  CHECK(dcpi_plan_entry_decode(f + 8, len - 16, &e, &err) == DCP_OK, "decode %s: %s", p, err.msg);
  free(f);
  return e;
}

/* Save m (gen) to path on a fresh context (nothing cached: it reads what
 * was planted), then load and check it; returns whether the plan hit. */
static int fresh_save_check(const ak_args *a, model *m, int gen, const char *path,
                            const dcp_save_options *so) {
  dcp_ctx *ctx = open_one(a);
  fill(m, gen);
  dcp_state *st = state_of(ctx, m);
  OK(dcp_save(ctx, st, path, so), ctx);
  dcp_stats s = {.struct_size = sizeof s};
  OK(dcp_ctx_stats(ctx, &s), ctx);
  dcp_verify_report rep = {.struct_size = sizeof rep};
  OK(dcp_verify(ctx, path, &rep), ctx);
  dcp_state_free(st);
  load_check(ctx, path, gen);
  dcp_ctx_free(ctx);
  return s.plan_cache_hit;
}

static int run_plan_planted(const ak_args *a) {
  char real[600], other[600], target[700];
  snprintf(real, sizeof real, "%s/real", a->dir);
  snprintf(other, sizeof other, "%s/other", a->dir);
  model *m = new_model(1);
  /* this geometry's recorded plan, and another geometry's (rows 0..31 only) */
  CHECK(fresh_save_check(a, m, 1, real, NULL) == 0, "the first save hit");
  model *half = new_model(2); /* the same tensor in two chunks of half the rows */
  dcp_ctx *ctx = open_one(a);
  dcp_state *st;
  int64_t shape[2] = {ROWS, COLS}, off0[2] = {0, 0}, off1[2] = {ROWS / 2, 0};
  int64_t size[2] = {ROWS / 2, COLS};
  OK(dcp_state_create(ctx, &st), ctx);
  OK(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), ctx);
  OK(dcp_state_add_chunk(st, "w", off0, size, half->w), ctx);
  OK(dcp_state_add_chunk(st, "w", off1, size, half->w + ROWS / 2 * COLS), ctx);
  OK(dcp_state_add_bytes(st, "rng", DCP_SCOPE_REPLICATED, half->rng, NB), ctx);
  OK(dcp_save(ctx, st, other, NULL), ctx);
  load_check(ctx, other, 2);
  dcp_state_free(st);
  dcp_ctx_free(ctx);
  dcpi_plan_entry *mine = entry_of(real), *theirs = entry_of(other);
  size_t len;
  uint8_t *f;

  /* 1. another geometry's valid .plan: a miss, the save plans for itself */
  f = plan_file_of(theirs, &len);
  snprintf(target, sizeof target, "%s/t1", a->dir);
  plant(target, a->dir, f, len);
  free(f);
  CHECK(fresh_save_check(a, m, 3, target, NULL) == 0, "another geometry's .plan hit");

  /* 2. this geometry's plan with a forged assignment that writes nothing
   * (and a forged generation): used, but the assignment is rebuilt */
  uint8_t none[2] = {0, 0};
  dcpi_plan_entry forged = *mine;
  forged.assignment = none;
  forged.assignment_len = sizeof none;
  forged.generation = 12345;
  f = plan_file_of(&forged, &len);
  snprintf(target, sizeof target, "%s/t2", a->dir);
  plant(target, a->dir, f, len);
  free(f);
  CHECK(fresh_save_check(a, m, 4, target, NULL) == 1, "this geometry's .plan did not hit");

  /* 3. the slot holds this plan, but the file claims a world of two */
  dcpi_plan_entry w2 = *mine;
  size_t lens[2] = {mine->plan_lens[0], mine->plan_lens[0]};
  uint8_t *both = malloc(2 * lens[0]);
  CHECK(both);
  memcpy(both, mine->plans, lens[0]);
  memcpy(both + lens[0], mine->plans, lens[0]);
  w2.world = 2, w2.plans = both, w2.plan_lens = lens;
  f = plan_file_of(&w2, &len);
  snprintf(target, sizeof target, "%s/t3", a->dir);
  plant(target, a->dir, f, len);
  free(f);
  free(both);
  CHECK(fresh_save_check(a, m, 5, target, NULL) == 0, "a world-of-two .plan hit");

  /* 4. the right plan with one byte of the plan flipped and the checksum
   * made valid again: the slot no longer matches */
  dcpi_plan_entry flip = *mine;
  uint8_t *copy = malloc(mine->plan_lens[0]);
  CHECK(copy);
  memcpy(copy, mine->plans, mine->plan_lens[0]);
  copy[mine->plan_lens[0] / 2] ^= 0x40;
  flip.plans = copy;
  f = plan_file_of(&flip, &len);
  snprintf(target, sizeof target, "%s/t4", a->dir);
  plant(target, a->dir, f, len);
  free(f);
  free(copy);
  CHECK(fresh_save_check(a, m, 6, target, NULL) == 0, "a tampered .plan hit");

  /* 5. garbage with the magic and a valid checksum, and a truncated file */
  uint8_t junk[64];
  memcpy(junk, "DCPPLAN1", 8);
  for (size_t i = 8; i < sizeof junk - 8; i++) junk[i] = (uint8_t)(i * 37);
  dcpi_put_u64(junk + sizeof junk - 8, XXH3_64bits(junk, sizeof junk - 8));
  snprintf(target, sizeof target, "%s/t5", a->dir);
  plant(target, a->dir, junk, sizeof junk);
  CHECK(fresh_save_check(a, m, 7, target, NULL) == 0, "garbage hit");
  snprintf(target, sizeof target, "%s/t6", a->dir);
  plant(target, a->dir, junk, 5);
  CHECK(fresh_save_check(a, m, 8, target, NULL) == 0, "a truncated .plan hit");

  /* 6. overwriting a checkpoint whose own .plan is another geometry's */
  f = plan_file_of(theirs, &len);
  snprintf(target, sizeof target, "%s/.plan", real);
  spit(target, f, len);
  free(f);
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.flags = DCP_SAVE_OVERWRITE;
  CHECK(fresh_save_check(a, m, 9, real, &so) == 0, "an overwrite replayed another geometry");
  dcpi_plan_entry_drop(mine);
  dcpi_plan_entry_drop(theirs);
  free(m);
  free(half);
  printf("plan-planted: no planted .plan made a save miss data; every load exact\n");
  return 0;
}

/* Whether the process's peak resident memory stays under mib MiB. */
static long peak_rss_mib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) kb = atol(line + 6);
  if (f) fclose(f);
  return kb / 1024;
}

static int run_plan_special(const ak_args *a) {
  alarm(240); /* a save that blocks on a FIFO fails the test instead of hanging it */
  char real[600], target[700], p[800];
  snprintf(real, sizeof real, "%s/real", a->dir);
  model *m = new_model(1);
  CHECK(fresh_save_check(a, m, 1, real, NULL) == 0, "the first save hit");
  snprintf(p, sizeof p, "%s/.plan", real);
  /* a symbolic link to a valid .plan, in the directory and the parent */
  for (int where = 0; where < 2; where++) {
    snprintf(target, sizeof target, "%s/link%d", a->dir, where);
    mkdir(target, 0755);
    char link[800];
    snprintf(link, sizeof link, "%s/.plan", where ? a->dir : target);
    CHECK(symlink(p, link) == 0, "symlink %s", link);
    fresh_save_check(a, m, 2 + where, target, NULL); /* hit or not: exact */
    unlink(link);
  }
  /* a FIFO nobody writes: opening it must not block the save */
  snprintf(target, sizeof target, "%s/fifo", a->dir);
  mkdir(target, 0755);
  snprintf(p, sizeof p, "%s/.plan", target);
  CHECK(mkfifo(p, 0644) == 0, "mkfifo %s", p);
  CHECK(fresh_save_check(a, m, 4, target, NULL) == 0, "a FIFO hit");
  /* a directory named .plan */
  snprintf(target, sizeof target, "%s/dir", a->dir);
  mkdir(target, 0755);
  snprintf(p, sizeof p, "%s/.plan", target);
  CHECK(mkdir(p, 0755) == 0, "mkdir %s", p);
  CHECK(fresh_save_check(a, m, 5, target, NULL) == 0, "a directory hit");
  /* a 3 GiB sparse file: never read whole (peak memory stays small) */
  snprintf(target, sizeof target, "%s/huge", a->dir);
  mkdir(target, 0755);
  snprintf(p, sizeof p, "%s/.plan", target);
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0 && ftruncate(fd, (off_t)3 << 30) == 0, "a sparse %s", p);
  close(fd);
  CHECK(fresh_save_check(a, m, 6, target, NULL) == 0, "a huge .plan hit");
  long peak = peak_rss_mib();
  CHECK(peak >= 0 && peak < 1024, "peak memory %ld MiB: the huge .plan was read", peak);
  unlink(p); /* 3 GiB of nothing, but a listing would show it */
  free(m);
  printf("plan-special: link, FIFO, directory and huge .plan: no hang, peak %ld MiB, exact\n",
         peak);
  return 0;
}

/* ---- one state, other block sizes and codecs ------------------------------------ */

/* Block size, codec and block count of w's first chunk at path. */
static void layout_of(dcp_ctx *ctx, const char *path, uint32_t *bs, int *codec, uint64_t *n) {
  dcp_meta *meta;
  OK(dcp_meta_open(ctx, path, &meta), ctx);
  size_t t;
  OK(dcp_meta_find_tensor(meta, "w", &t), ctx);
  dcp_chunk_info ci;
  OK(dcp_meta_chunk(meta, t, 0, &ci), ctx);
  *bs = ci.ref.block_size, *codec = (int)ci.ref.codec, *n = ci.ref.block_count;
  dcp_meta_free(meta);
}

static int run_plan_opts(const ak_args *a) {
  static const uint32_t sizes[] = {4096, 65536, 4096, 1u << 20};
  static const uint32_t flags[] = {0, 0, DCP_SAVE_COMPRESS, DCP_SAVE_COMPRESS};
  enum { N = 4 };
  model *m = new_model(1);
  dcp_ctx *ctx = open_one(a); /* one context: its cache sees every save */
  dcp_state *st = state_of(ctx, m);
  for (int round = 0; round < 2 * N; round++) {
    int k = round % N, gen = 10 + round;
    char p[600], ref[600];
    snprintf(p, sizeof p, "%s/r%d", a->dir, round);
    snprintf(ref, sizeof ref, "%s/ref%d", a->dir, round);
    dcp_save_options so;
    dcp_save_options_init(&so);
    so.block_size = sizes[k];
    so.flags = flags[k];
    fill(m, gen);
    if (round & 1) { /* async: the writer's cache, fed by the trainer's */
      dcp_async *h;
      OK(dcp_async_save(ctx, st, p, &so, &h), ctx);
      OK(dcp_async_wait(h), ctx);
      dcp_async_free(h);
    } else {
      OK(dcp_save(ctx, st, p, &so), ctx);
    }
    /* the same save from a context that never planned anything */
    fresh_save_check(a, m, gen, ref, &so);
    uint32_t bs, rbs;
    int codec, rcodec;
    uint64_t n, rn;
    layout_of(ctx, p, &bs, &codec, &n);
    layout_of(ctx, ref, &rbs, &rcodec, &rn);
    CHECK(bs == rbs && codec == rcodec && n == rn,
          "round %d (block size %u, flags %u): block size %u codec %d blocks %" PRIu64
          ", a fresh save has %u %d %" PRIu64, round, sizes[k], flags[k], bs, codec, n, rbs,
          rcodec, rn);
    CHECK(bs <= sizes[k], "round %d: block size %u over the %u asked", round, bs, sizes[k]);
    CHECK((codec != DCP_CODEC_NONE) == (flags[k] != 0), "round %d: codec %d", round, codec);
    load_check(ctx, p, gen);
  }
  dcp_state_free(st);
  dcp_ctx_free(ctx);
  free(m);
  printf("plan-opts: %d saves, each with its own block size and codec\n", 2 * N);
  return 0;
}

/* ---- the memory tier under an overwrite ----------------------------------------- */

/* ctx's memory tier: keep snapshots of job, replicas on the next ranks,
 * lingering linger_ms. */
static void set_tier(dcp_ctx *ctx, uint32_t keep, uint32_t replicas, int64_t linger_ms,
                     const char *job) {
  dcp_memtier_options o;
  dcp_memtier_options_init(&o);
  o.keep = keep;
  o.replicas = replicas;
  o.peer_jump = 1;
  o.linger_ms = linger_ms;
  o.job = job;
  OK(dcp_memtier_set(ctx, &o), ctx);
}

/* A world of one whose writer keeps its saves in memory (job "attack"). */
static dcp_ctx *open_kept(const ak_args *a) {
  dcp_ctx *ctx = open_one(a);
  set_tier(ctx, 2, 0, 30000, "attack");
  return ctx;
}

/* Until this rank's writer holds a snapshot of path's committed metadata. */
static void wait_kept(dcp_ctx *ctx, const char *path) {
  char p[700];
  snprintf(p, sizeof p, "%s/.metadata", path);
  size_t len;
  uint8_t *md = slurp(p, &len);
  uint64_t h = XXH3_64bits(md, len);
  free(md);
  for (int i = 0; i < 600; i++) {
    dcpi_snap_reply r;
    int fd;
    if (dcpi_memtier_get(ctx, "attack", path, 0, h, &r, &fd) == DCP_MEMTIER_USED) {
      close(fd);
      dcpi_snap_reply_free(&r);
      return;
    }
    usleep(50000);
  }
  CHECK(0, "the writer holds no snapshot of %s after 30 s", path);
}

/* Load path on ctx: generation gen, and where the bytes came from. */
static void load_from(dcp_ctx *ctx, const char *path, int gen, uint32_t tier) {
  load_check(ctx, path, gen);
  dcp_stats s = {.struct_size = sizeof s};
  OK(dcp_ctx_stats(ctx, &s), ctx);
  CHECK(s.mem_tier == tier, "%s: mem_tier %u, expected %u", path, s.mem_tier, tier);
}

static int run_memtier_overwrite(const ak_args *a) {
  char p[600];
  snprintf(p, sizeof p, "%s/ckpt", a->dir);
  model *m = new_model(1);
  dcp_ctx *kept = open_kept(a);
  dcp_state *st = state_of(kept, m);
  dcp_async *h;
  OK(dcp_async_save(kept, st, p, NULL, &h), kept);
  OK(dcp_async_wait(h), kept);
  dcp_async_free(h);
  wait_kept(kept, p);
  load_from(kept, p, 1, DCP_MEMTIER_USED);
  /* another job overwrites the path: a copy, then in place */
  static const uint32_t how[] = {DCP_SAVE_OVERWRITE, DCP_SAVE_OVERWRITE | DCP_SAVE_IN_PLACE};
  for (int k = 0; k < 2; k++) {
    dcp_save_options so;
    dcp_save_options_init(&so);
    so.flags = how[k];
    dcp_ctx *other = open_one(a);
    fill(m, 2 + k);
    dcp_state *ost = state_of(other, m);
    OK(dcp_save(other, ost, p, &so), other);
    dcp_state_free(ost);
    dcp_ctx_free(other);
    load_from(kept, p, 2 + k, DCP_MEMTIER_STALE);
  }
  /* kept again, then the other job's save is removed by hand and the kept
   * one's .metadata put back: the snapshot matches and serves exact bytes */
  fill(m, 5);
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.flags = DCP_SAVE_OVERWRITE;
  OK(dcp_async_save(kept, st, p, &so, &h), kept);
  OK(dcp_async_wait(h), kept);
  dcp_async_free(h);
  wait_kept(kept, p);
  load_from(kept, p, 5, DCP_MEMTIER_USED);
  /* a data file edited on disk after the snapshot: the load never mixes
   * the edit with memory (the metadata still describes the kept bytes) */
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "for f in %s/data-*.dcp; do printf 'XXXX' | dd of=$f bs=1 seek=100 "
           "conv=notrunc status=none; done", p);
  CHECK(system(cmd) == 0, "edit the data file");
  load_from(kept, p, 5, DCP_MEMTIER_USED);
  dcp_state_free(st);
  OK(dcp_memtier_stop(kept), kept);
  dcp_ctx_free(kept);
  free(m);
  printf("memtier-overwrite: overwritten twice (STALE, new values), kept again (USED)\n");
  return 0;
}


/* ---- background staging: the state freed right after the call -------------------- */

static atomic_int g_gate; /* the copy callback waits for it */

static void gated_copy(void *arg, void *dst, const void *src, size_t len) {
  (void)arg;
  while (!atomic_load(&g_gate)) usleep(1000);
  memcpy(dst, src, len);
}

static int run_background_free(const ak_args *a) {
  char p[600];
  snprintf(p, sizeof p, "%s/ckpt", a->dir);
  model *m = new_model(1);
  dcp_ctx *ctx = open_one(a);
  OK(dcp_async_set_staging(ctx, DCP_ASYNC_STAGE_BACKGROUND), ctx);
  OK(dcp_async_set_copy(ctx, gated_copy, NULL), ctx);
  for (int round = 0; round < 2; round++) {
    fill(m, 1 + round);
    dcp_state *st = state_of(ctx, m);
    dcp_async *h;
    dcp_save_options so;
    dcp_save_options_init(&so);
    so.flags = DCP_SAVE_OVERWRITE;
    atomic_store(&g_gate, 0);
    OK(dcp_async_save(ctx, st, p, &so, &h), ctx);
    /* the copy cannot have begun: the state goes, its buffers stay */
    dcp_state_free(st);
    atomic_store(&g_gate, 1);
    OK(dcp_async_fence(h), ctx);
    fill(m, 50); /* the buffers change after the fence */
    OK(dcp_async_wait(h), ctx);
    dcp_async_free(h);
    load_check(ctx, p, 1 + round);
  }
  dcp_ctx_free(ctx);
  free(m);
  printf("background-free: the state freed before the staging copy; saves exact\n");
  return 0;
}


/* ---- an async save over a crashed uncoordinated save's part ---------------------- */

static int run_async_over_parts(const ak_args *a) {
  char p[600];
  snprintf(p, sizeof p, "%s/ckpt", a->dir);
  /* rank 0 of a world of two, detached, commits its part; rank 1 never does */
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.rank = 0;
  cfg.world_size = 2;
  dcp_ctx *half;
  CHECK(dcp_ctx_create(&cfg, &half) == DCP_OK, "detached ctx: %s", dcp_ctx_create_error());
  model *m = new_model(1);
  m->rows = ROWS / 2;
  fill(m, 1);
  dcp_state *st = state_of(half, m);
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.save_id = 42;
  OK(dcp_save(half, st, p, &so), half);
  dcp_state_free(st);
  dcp_ctx_free(half);
  /* a coordinated async save told to overwrite it commits */
  m->rows = ROWS;
  fill(m, 2);
  dcp_ctx *ctx = open_one(a);
  st = state_of(ctx, m);
  async_overwrite(ctx, st, p);
  load_check(ctx, p, 2);
  dcp_state_free(st);
  dcp_ctx_free(ctx);
  free(m);
  printf("async-over-parts: an async overwrite of a crashed uncoordinated part commits\n");
  return 0;
}


/* ---- SIGKILL anywhere: old or new checkpoint, never a mix ------------------------- */

/* The generation every element of path holds (-1: a mix, or no checkpoint
 * that loads). */
static int generation_at(dcp_ctx *ctx, const char *path) {
  model *m = calloc(1, sizeof *m);
  CHECK(m);
  m->rows = ROWS;
  dcp_state *st = state_of(ctx, m);
  int gen = -1;
  if (dcp_load(ctx, st, path, NULL) == DCP_OK) {
    gen = (int)(m->w[0] / 100000);
    for (int64_t i = 0; i < ROWS * COLS && gen >= 0; i++)
      if (m->w[i] != w_at(gen, i)) gen = -1;
    for (int i = 0; i < NB && gen >= 0; i++)
      if (m->rng[i] != (uint8_t)(gen * 7 + i)) gen = -1;
  }
  dcp_state_free(st);
  free(m);
  return gen;
}

/* The doomed trainer of round `gen`: an async save of gen over path (kept
 * in memory when keep), its writer's pid down the pipe, then SIGKILL after
 * kill_us. */
static void doomed_trainer(const ak_args *a, const char *path, int gen, int keep, long kill_us,
                           int pipe_w) {
  dcp_ctx *ctx = keep ? open_kept(a) : open_one(a);
  model *m = new_model(gen);
  dcp_state *st = state_of(ctx, m);
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.flags = DCP_SAVE_OVERWRITE;
  dcp_async *h;
  OK(dcp_async_save(ctx, st, path, &so, &h), ctx);
  int wpid = (int)dcpi_async_writer_pid(ctx);
  CHECK(write(pipe_w, &wpid, sizeof wpid) == (ssize_t)sizeof wpid, "pipe");
  usleep((useconds_t)kill_us);
  raise(SIGKILL);
}

/* Reap pid (an orphaned writer, reparented to this subreaper) within ms
 * milliseconds: 1 when it ended. A writer that died is reaped at once, so
 * its pid never lingers as a zombie that looks like a live lease holder. */
static int reaped_within(pid_t pid, long ms) {
  for (long waited = 0; waited <= ms; waited += 10) {
    pid_t r = waitpid(pid, NULL, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return 1;
    usleep(10000);
  }
  return 0;
}

static int run_kill_loop(const ak_args *a) {
  /* the doomed trainers' writers become this process's children */
  CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0, "PR_SET_CHILD_SUBREAPER");
  char p[600];
  snprintf(p, sizeof p, "%s/ckpt", a->dir);
  unsigned seed = 7;
  int committed = -1, rounds = 16, news = 0;
  for (int round = 0; round < rounds; round++) {
    int gen = round + 1, keep = round % 4 == 3;
    long kill_us = (long)(rand_r(&seed) % 40000);
    long writer_kill_us = round % 2 ? (long)(rand_r(&seed) % 60000) : -1;
    setenv("DCP_WRITER_DELAY_MS", round % 3 ? "0" : "20", 1);
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    pid_t child = fork();
    CHECK(child >= 0, "fork");
    if (child == 0) {
      close(fds[0]);
      doomed_trainer(a, p, gen, keep, kill_us, fds[1]);
    }
    close(fds[1]);
    int wpid = 0, status;
    CHECK(read(fds[0], &wpid, sizeof wpid) == (ssize_t)sizeof wpid, "round %d: no writer pid",
          round);
    close(fds[0]);
    if (writer_kill_us >= 0) { /* the writer dies too, anywhere */
      usleep((useconds_t)writer_kill_us);
      kill(wpid, SIGKILL);
    }
    CHECK(waitpid(child, &status, 0) == child, "round %d: reap the trainer", round);
    unsetenv("DCP_WRITER_DELAY_MS");
    dcp_ctx *ctx = keep ? open_kept(a) : open_one(a);
    if (keep) { /* the kept writer lingers: load once from it, then stop it */
      int g = generation_at(ctx, p);
      CHECK(g == committed || g == gen, "round %d (kept): generation %d, expected %d or %d",
            round, g, committed, gen);
      dcp_memtier_stop(ctx);
    }
    CHECK(reaped_within(wpid, 60000), "round %d: the writer %d never ended", round, wpid);
    int g = generation_at(ctx, p);
    CHECK(g == committed || g == gen, "round %d: the checkpoint holds generation %d, expected %d "
          "(old) or %d (new)", round, g, committed, gen);
    if (g >= 0) {
      dcp_verify_report rep = {.struct_size = sizeof rep};
      OK(dcp_verify(ctx, p, &rep), ctx);
    }
    news += g == gen;
    committed = g;
    dcp_ctx_free(ctx);
  }
  printf("kill-loop: %d rounds, %d committed the new save, never a mix\n", rounds, news);
  return 0;
}


/* ---- two ranks, a .plan that matches one rank's slot only ------------------------ */

static int g_world = 1, g_sub; /* plan-w2: the world, and the next rendezvous */

/* A fresh context of this rank (nothing cached), in a rendezvous of its
 * own (each generation of contexts its own subdirectory). */
static dcp_ctx *open_fresh(const ak_args *a) {
  char rdv[700];
  snprintf(rdv, sizeof rdv, "%s/sub%d", a->rdv, g_sub++);
  mkdir(rdv, 0755);
  ak_args b = *a;
  b.rdv = rdv;
  return ak_open_ctx(&b);
}

/* Every rank waits until rank 0 gets here (a broadcast on ctx). */
static void sync_ranks(dcp_ctx *ctx) {
  dcpi_rt rt = {.ctx = ctx, .path = "."};
  dcpi_err_clear(&rt.err);
  int64_t v = 0;
  OK(dcpi_rt_bcast(&rt, &v, sizeof v, 0), ctx);
}

/* This rank's rows of "w" as one chunk or, split, two. */
static dcp_state *rank_state(dcp_ctx *ctx, model *m, int split) {
  dcp_state *st;
  int64_t shape[2] = {ROWS, COLS}, half = m->rows / 2;
  OK(dcp_state_create(ctx, &st), ctx);
  OK(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), ctx);
  int64_t off0[2] = {m->row0, 0}, size0[2] = {split ? half : m->rows, COLS};
  OK(dcp_state_add_chunk(st, "w", off0, size0, m->w), ctx);
  if (split) {
    int64_t off1[2] = {m->row0 + half, 0}, size1[2] = {m->rows - half, COLS};
    OK(dcp_state_add_chunk(st, "w", off1, size1, m->w + half * COLS), ctx);
  }
  OK(dcp_state_add_bytes(st, "rng", DCP_SCOPE_REPLICATED, m->rng, NB), ctx);
  return st;
}

/* Save gen (one chunk per rank) to path on fresh contexts; returns the
 * plan-cache hit; the whole tensor loads exact. */
static int w2_save(const ak_args *a, model *m, int gen, const char *path, int split) {
  dcp_ctx *ctx = open_fresh(a);
  fill(m, gen);
  dcp_state *st = rank_state(ctx, m, split);
  OK(dcp_save(ctx, st, path, NULL), ctx);
  dcp_stats s = {.struct_size = sizeof s};
  OK(dcp_ctx_stats(ctx, &s), ctx);
  dcp_state_free(st);
  load_check(ctx, path, gen);
  dcp_ctx_free(ctx);
  return s.plan_cache_hit;
}

static int run_plan_w2(const ak_args *a) {
  const char *r = getenv("DCP_TEST_RANK"), *w = getenv("DCP_TEST_WORLD");
  CHECK(r && w && a->rdv, "plan-w2 runs under dcp_launch with --rendezvous");
  g_rank = atoi(r), g_world = atoi(w);
  CHECK(g_world == 2, "plan-w2 needs 2 ranks");
  mkdir(a->rdv, 0755);
  model *m = new_model(1);
  m->rows = ROWS / 2;
  m->row0 = g_rank * m->rows;
  char real[600], other[600], t[700];
  snprintf(real, sizeof real, "%s/real", a->dir);
  snprintf(other, sizeof other, "%s/other", a->dir);
  CHECK(w2_save(a, m, 1, real, 0) == 0, "the first save hit");
  CHECK(w2_save(a, m, 2, other, 1) == 0, "the split save hit");
  /* a restarted job's save with the recorded plan: a hit on both ranks */
  snprintf(t, sizeof t, "%s/again", a->dir);
  dcp_ctx *ctx = open_fresh(a);
  if (g_rank == 0) {
    mkdir(t, 0755);
    char from[700], to[800];
    snprintf(from, sizeof from, "%s/.plan", real);
    snprintf(to, sizeof to, "%s/.plan", t);
    size_t len;
    uint8_t *f = slurp(from, &len);
    spit(to, f, len);
    free(f);
  }
  sync_ranks(ctx);
  dcp_ctx_free(ctx);
  CHECK(w2_save(a, m, 3, t, 0) == 1, "the recorded plan did not hit");
  /* files whose slot matches on one rank only: the other rank's slot from
   * the split geometry, then the other way round */
  for (int odd = 0; odd < 2; odd++) {
    snprintf(t, sizeof t, "%s/mixed%d", a->dir, odd);
    ctx = open_fresh(a);
    if (g_rank == 0) {
      dcpi_plan_entry *mine = entry_of(real), *theirs = entry_of(other);
      CHECK(mine->world == 2 && theirs->world == 2, "recorded worlds");
      size_t lens[2] = {odd ? theirs->plan_lens[0] : mine->plan_lens[0],
                        odd ? mine->plan_lens[1] : theirs->plan_lens[1]};
      uint8_t *both = malloc(lens[0] + lens[1]);
      CHECK(both);
      memcpy(both, odd ? theirs->plans : mine->plans, lens[0]);
      memcpy(both + lens[0], (odd ? mine->plans : theirs->plans) +
                                 (odd ? mine->plan_lens[0] : theirs->plan_lens[0]), lens[1]);
      dcpi_plan_entry mixed = *mine;
      mixed.plans = both, mixed.plan_lens = lens;
      size_t len;
      uint8_t *f = plan_file_of(&mixed, &len);
      plant(t, a->dir, f, len);
      free(f);
      free(both);
      dcpi_plan_entry_drop(mine);
      dcpi_plan_entry_drop(theirs);
    }
    sync_ranks(ctx);
    dcp_ctx_free(ctx);
    CHECK(w2_save(a, m, 4 + odd, t, 0) == 0, "a .plan matching rank %d only hit", odd ? 1 : 0);
  }
  free(m);
  printf("plan-w2 (rank %d): a .plan that matches one rank's slot is a miss on both\n", g_rank);
  return 0;
}


/* ---- bad requests to the writer ---------------------------------------------------- */

/* An async save of st to path: the outcome of the call, or of its wait. */
static dcp_status async_outcome(dcp_ctx *ctx, dcp_state *st, const char *path,
                                const dcp_save_options *so) {
  dcp_async *h = NULL;
  dcp_status rc = dcp_async_save(ctx, st, path, so, &h);
  if (rc) return rc;
  rc = dcp_async_wait(h);
  dcp_async_free(h);
  return rc;
}

static int run_bad_requests(const ak_args *a) {
  model *m = new_model(1);
  dcp_ctx *ctx = open_one(a);
  dcp_state *st = state_of(ctx, m);
  char p[700], file[700];
  snprintf(file, sizeof file, "%s/a-file", a->dir);
  spit(file, "x", 1);
  dcp_async *h = (dcp_async *)1;
  CHECK(dcp_async_save(ctx, st, "", NULL, &h) == DCP_EINVAL && !h, "empty path");
  CHECK(dcp_async_save(ctx, NULL, file, NULL, &h) == DCP_EINVAL, "NULL state");
  CHECK(dcp_async_save(ctx, st, file, NULL, NULL) == DCP_EINVAL, "NULL handle");
  CHECK(dcp_async_wait(NULL) == DCP_EINVAL && dcp_async_fence(NULL) == DCP_EINVAL &&
        dcp_async_abort(NULL) == DCP_EINVAL && dcp_async_wait_for(NULL, 0) == DCP_EINVAL,
        "NULL handles");
  dcp_async_free(NULL);
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.block_size = 0;
  so.flags = 0x40000000u; /* no such flag */
  snprintf(p, sizeof p, "%s/flag", a->dir);
  CHECK(async_outcome(ctx, st, p, &so) != DCP_OK, "an unknown flag was accepted");
  /* a path that is a file, and one under a file: refused, the writer lives on */
  CHECK(async_outcome(ctx, st, file, NULL) != DCP_OK, "saved into a file");
  snprintf(p, sizeof p, "%s/a-file/under", a->dir);
  CHECK(async_outcome(ctx, st, p, NULL) != DCP_OK, "saved under a file");
  /* an empty tensor and an empty bytes item beside the rest */
  int64_t zero[1] = {0}, zoff[1] = {0};
  OK(dcp_state_add_tensor(st, "empty", DCP_F32, 1, zero), ctx);
  OK(dcp_state_add_chunk(st, "empty", zoff, zero, m->w), ctx);
  OK(dcp_state_add_bytes(st, "nothing", DCP_SCOPE_REPLICATED, m->rng, 0), ctx);
  snprintf(p, sizeof p, "%s/ok", a->dir);
  OK(async_outcome(ctx, st, p, NULL), ctx);
  CHECK(dcpi_async_spawns(ctx) == 1, "%" PRIu64 " writers spawned: a refused job killed one",
        dcpi_async_spawns(ctx));
  dcp_state_free(st);
  load_check(ctx, p, 1);
  dcp_ctx_free(ctx);
  free(m);
  printf("bad-requests: refused with errors, the writer serves the next save\n");
  return 0;
}


/* ---- a clean shutdown right after a kept save --------------------------------------- */

#define LINGER_BIG ((size_t)96 << 20) /* its keep takes a while to read back */

static int run_shutdown_linger(const ak_args *a) {
  alarm(200); /* a shutdown that waits out the 10-minute linger fails the test */
  char p[600];
  snprintf(p, sizeof p, "%s/ckpt", a->dir);
  uint8_t *big = malloc(LINGER_BIG);
  CHECK(big);
  memset(big, 0x5a, LINGER_BIG);
  for (int round = 0; round < 2; round++) {
    dcp_ctx *ctx = open_one(a);
    set_tier(ctx, 1, 0, 600000, "attack-linger");
    dcp_state *st;
    int64_t shape[1] = {(int64_t)LINGER_BIG}, off[1] = {0};
    OK(dcp_state_create(ctx, &st), ctx);
    OK(dcp_state_add_tensor(st, "big", DCP_U8, 1, shape), ctx);
    OK(dcp_state_add_chunk(st, "big", off, shape, big), ctx);
    async_overwrite(ctx, st, p);
    pid_t wpid = dcpi_async_writer_pid(ctx);
    /* at once: the writer is still reading its snapshot back */
    if (round == 0) dcp_async_shutdown(ctx);
    dcp_state_free(st);
    dcp_ctx_free(ctx); /* round 1: the release through dcp_ctx_free */
    CHECK(wpid > 0 && kill(wpid, 0) != 0, "round %d: the writer %d outlived the shutdown",
          round, (int)wpid);
  }
  free(big);
  printf("shutdown-linger: a clean shutdown right after a kept save does not linger\n");
  return 0;
}


/* ---- two ranks: a writer killed during peer replication ------------------------------- */

/* ctx's memory tier: keep 1, one replica on the next rank, job "attack-peer". */
static void set_peer_tier(dcp_ctx *ctx) { set_tier(ctx, 1, 1, 30000, "attack-peer"); }

/* Both ranks of run_peer_kill meet: each creates <rdv>/meet<round>.<rank>
 * and waits (up to 60 s) for the other's. */
static void file_barrier(const ak_args *a, int round) {
  char mine[700], theirs[700];
  snprintf(mine, sizeof mine, "%s/meet%d.%d", a->rdv, round, g_rank);
  snprintf(theirs, sizeof theirs, "%s/meet%d.%d", a->rdv, round, 1 - g_rank);
  FILE *f = fopen(mine, "w");
  CHECK(f != NULL, "cannot create %s", mine);
  fclose(f);
  for (int i = 0; i < 6000 && access(theirs, F_OK) != 0; i++) usleep(10000);
  CHECK(access(theirs, F_OK) == 0, "rank %d never reached round %d's end", 1 - g_rank, round);
}

static int run_peer_kill(const ak_args *a) {
  const char *r = getenv("DCP_TEST_RANK"), *w = getenv("DCP_TEST_WORLD");
  CHECK(r && w && a->rdv && atoi(w) == 2, "peer-kill runs on 2 ranks under dcp_launch");
  g_rank = atoi(r), g_world = 2;
  mkdir(a->rdv, 0755);
  char p[600];
  snprintf(p, sizeof p, "%s/ckpt", a->dir);
  model *m = new_model(1);
  m->rows = ROWS / 2;
  m->row0 = g_rank * m->rows;
  for (int round = 0; round < 3; round++) {
    dcp_ctx *ctx = open_fresh(a);
    set_peer_tier(ctx);
    fill(m, 1 + round);
    dcp_state *st = rank_state(ctx, m, 0);
    async_overwrite(ctx, st, p);
    pid_t wpid = dcpi_async_writer_pid(ctx);
    /* rank 1's writer dies while it keeps and replicates (round 2: later) */
    if (g_rank == 1) {
      if (round == 2) usleep(200000);
      kill(wpid, SIGKILL);
    }
    sync_ranks(ctx);
    /* a fresh trainer of the same job loads: memory, a peer's copy or
     * storage, exact every time */
    dcp_ctx *fresh = open_fresh(a);
    set_peer_tier(fresh);
    load_check(fresh, p, 1 + round);
    dcp_stats s = {.struct_size = sizeof s};
    OK(dcp_ctx_stats(fresh, &s), fresh);
    CHECK(g_rank == 0 || s.mem_tier != DCP_MEMTIER_USED, "rank 1 used a dead writer's memory");
    dcp_memtier_stop(fresh);
    dcp_ctx_free(fresh);
    dcp_state_free(st);
    dcp_ctx_free(ctx); /* rank 0's writer gives up on its dead peer by the timeout */
    /* ...or not, when its replication was done before the kill: the ranks
     * reach the next round's rendezvous up to a timeout apart, and the
     * later one would find the earlier one gone. Meet first, through the
     * file system, with a deadline of their own. */
    if (round < 2) file_barrier(a, round);
  }
  free(m);
  printf("peer-kill (rank %d): a writer killed while replicating: every restore exact\n",
         g_rank);
  return 0;
}


/* ---- a staging copy that fails ------------------------------------------------------ */

/* The checked copy callback: copies, but returns 5 on call number fail_at
 * (counting from 0) without copying; fail_at < 0 never fails. */
typedef struct failing_copy {
  atomic_int calls;
  int fail_at;
} failing_copy;

static int copy_or_fail(void *arg, void *dst, const void *src, size_t len) {
  failing_copy *fc = arg;
  if (atomic_fetch_add(&fc->calls, 1) == fc->fail_at) return 5;
  memcpy(dst, src, len);
  return 0;
}

/* Whether path holds a committed checkpoint. */
static int committed(const char *path) {
  char m[700];
  snprintf(m, sizeof m, "%s/.metadata", path);
  return access(m, F_OK) == 0;
}

/* After a refused save of path: nothing there to load, then the next
 * async save of st (gen) on ctx commits and loads exact. */
static void after_refusal(dcp_ctx *ctx, model *m, dcp_state *st, const char *path, int gen,
                          failing_copy *fc) {
  CHECK(!committed(path), "a save whose staging copy failed committed %s", path);
  dcp_status rc = dcp_load(ctx, st, path, NULL); /* no directory, or one without .metadata */
  CHECK(rc == DCP_ENOTFOUND || rc == DCP_EINCOMPLETE, "load of a refused save: %s (%s)",
        dcp_strerror(rc), dcp_ctx_last_error(ctx));
  fc->fail_at = -1;
  fill(m, gen);
  dcp_async *h;
  OK(dcp_async_save(ctx, st, path, NULL, &h), ctx);
  OK(dcp_async_fence(h), ctx);
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
  if (g_world == 1) load_check(ctx, path, gen);
}

/* Expect rc to be the copy's DCP_EIO, its message naming chunk 1. */
static void check_copy_failure(dcp_ctx *ctx, dcp_status rc, const char *call) {
  const char *msg = dcp_ctx_last_error(ctx);
  CHECK(rc == DCP_EIO && strstr(msg, "copy callback failed (returned 5) on chunk 1 of 2"),
        "%s after a failed staging copy: %s (%s), want DCP_EIO naming chunk 1", call,
        dcp_strerror(rc), msg);
}

/* Background, then blocking staging: chunk 0 copies, chunk 1's copy fails. */
static int run_copy_fail(const ak_args *a) {
  model *m = new_model(1);
  dcp_ctx *ctx = open_one(a);
  failing_copy fc = {0, 1};
  OK(dcp_async_set_copy_checked(ctx, copy_or_fail, &fc), ctx);
  dcp_state *st = rank_state(ctx, m, 1); /* two chunks */
  char p[600];
  snprintf(p, sizeof p, "%s/bg", a->dir);
  OK(dcp_async_set_staging(ctx, DCP_ASYNC_STAGE_BACKGROUND), ctx);
  dcp_async *h;
  OK(dcp_async_save(ctx, st, p, NULL, &h), ctx);
  check_copy_failure(ctx, dcp_async_fence(h), "dcp_async_fence");
  check_copy_failure(ctx, dcp_async_wait(h), "dcp_async_wait");
  int done = 0;
  OK(dcp_async_test(h, &done), ctx);
  CHECK(done, "a refused save is not done");
  dcp_async_free(h);
  after_refusal(ctx, m, st, p, 2, &fc);
  snprintf(p, sizeof p, "%s/blocking", a->dir);
  OK(dcp_async_set_staging(ctx, DCP_ASYNC_STAGE_BLOCKING), ctx);
  atomic_store(&fc.calls, 0);
  fc.fail_at = 1;
  h = (dcp_async *)1;
  check_copy_failure(ctx, dcp_async_save(ctx, st, p, NULL, &h), "dcp_async_save (blocking)");
  CHECK(h == NULL, "a refused blocking save returned a handle");
  after_refusal(ctx, m, st, p, 3, &fc);
  dcp_state_free(st);
  dcp_ctx_free(ctx);
  free(m);
  printf("copy-fail: a failed staging copy fails fence, wait (and a blocking save) with "
         "DCP_EIO, commits nothing; the next save is exact\n");
  return 0;
}

/* ---- one rank refuses: two ranks -------------------------------------------------- */

/* Round `round` of refuse-w2: a sync save, then a load, where rank 1
 * passes an empty path. Both ranks must fail with rank 1's DCP_EINVAL and
 * reason (carried by the first agreement), not with a collective's
 * mismatch or at the deadline; nothing commits; the same context then
 * saves and loads. */
static void refuse_sync(const ak_args *a, model *m, int round) {
  char p[600];
  snprintf(p, sizeof p, "%s/sync%d", a->dir, round);
  dcp_ctx *ctx = open_fresh(a);
  dcp_state *st = rank_state(ctx, m, 0);
  dcp_status rc = dcp_save(ctx, st, g_rank == 1 ? "" : p, NULL);
  printf("refuse-w2 (rank %d) sync: %s: %s\n", g_rank, dcp_strerror(rc), dcp_ctx_last_error(ctx));
  CHECK(rc == DCP_EINVAL && strstr(dcp_ctx_last_error(ctx), "empty checkpoint path"),
        "sync save with rank 1's empty path: %s (%s), want DCP_EINVAL naming the path",
        dcp_strerror(rc), dcp_ctx_last_error(ctx));
  CHECK(!committed(p), "a save that one rank refused committed");
  OK(dcp_save(ctx, st, p, NULL), ctx);
  /* a load where rank 1 passes an empty path, the same way */
  rc = dcp_load(ctx, st, g_rank == 1 ? "" : p, NULL);
  CHECK(rc == DCP_EINVAL && strstr(dcp_ctx_last_error(ctx), "empty checkpoint path"),
        "load with rank 1's empty path: %s (%s), want DCP_EINVAL naming the path",
        dcp_strerror(rc), dcp_ctx_last_error(ctx));
  OK(dcp_load(ctx, st, p, NULL), ctx);
  dcp_state_free(st);
  dcp_ctx_free(ctx);
}

/* refuse-w2's async round: background staging where rank 1's copy of its
 * chunk 1 fails (its chunk 0 copied). Rank 1's fence and wait return its
 * DCP_EIO; rank 0's wait returns the same code and reason, "rank 1: ...",
 * through the writers' first agreement (a peer that never heard of it
 * would fail at the deadline with DCP_ETIMEDOUT or DCP_EPEER); nothing
 * commits; the next async save on both contexts commits and loads exact. */
static void refuse_async(const ak_args *a, model *m) {
  char p[600];
  snprintf(p, sizeof p, "%s/async", a->dir);
  dcp_ctx *ctx = open_fresh(a);
  failing_copy fc = {0, g_rank == 1 ? 1 : -1};
  OK(dcp_async_set_copy_checked(ctx, copy_or_fail, &fc), ctx);
  OK(dcp_async_set_staging(ctx, DCP_ASYNC_STAGE_BACKGROUND), ctx);
  dcp_state *st = rank_state(ctx, m, 1);
  dcp_async *h;
  OK(dcp_async_save(ctx, st, p, NULL, &h), ctx);
  if (g_rank == 1) check_copy_failure(ctx, dcp_async_fence(h), "dcp_async_fence");
  else OK(dcp_async_fence(h), ctx);
  dcp_status rc = dcp_async_wait(h);
  printf("refuse-w2 (rank %d) async: %s: %s\n", g_rank, dcp_strerror(rc),
         dcp_ctx_last_error(ctx));
  check_copy_failure(ctx, rc, "dcp_async_wait");
  CHECK(g_rank == 1 || strstr(dcp_ctx_last_error(ctx), "rank 1: "), "rank 0's message does not "
        "name rank 1: %s", dcp_ctx_last_error(ctx));
  dcp_async_free(h);
  sync_ranks(ctx); /* both have seen the outcome before anyone looks at p */
  after_refusal(ctx, m, st, p, 2, &fc);
  load_check(ctx, p, 2);
  dcp_state_free(st);
  dcp_ctx_free(ctx);
}

/* refuse-w2's last rounds: rank 1's dcp_async_save refuses at the call
 * (an empty path; then an unknown flag, refused after the writer state is
 * claimed) and returns no handle; rank 0's save, handed to its writer,
 * fails with rank 1's DCP_EINVAL and reason through the writers' first
 * agreement (without it, at the deadline); nothing commits; the next
 * async save on both commits and loads exact. */
static void refuse_async_args(const ak_args *a, model *m, int bad_flag) {
  char p[600];
  snprintf(p, sizeof p, "%s/args%d", a->dir, bad_flag);
  dcp_ctx *ctx = open_fresh(a);
  failing_copy fc = {0, -1};
  OK(dcp_async_set_copy_checked(ctx, copy_or_fail, &fc), ctx);
  dcp_state *st = rank_state(ctx, m, 1);
  dcp_save_options so;
  dcp_save_options_init(&so);
  if (bad_flag && g_rank == 1) so.flags = 0x40000000u; /* no such flag */
  const char *want = bad_flag ? "flag" : "empty checkpoint path";
  dcp_async *h = NULL;
  dcp_status rc = dcp_async_save(ctx, st, !bad_flag && g_rank == 1 ? "" : p, &so, &h);
  if (g_rank == 0) {
    OK(rc, ctx);
    rc = dcp_async_wait(h);
    dcp_async_free(h);
  }
  printf("refuse-w2 (rank %d) async %s: %s: %s\n", g_rank, want, dcp_strerror(rc),
         dcp_ctx_last_error(ctx));
  CHECK(rc == DCP_EINVAL && strstr(dcp_ctx_last_error(ctx), want) && (g_rank == 1 || h),
        "async save with rank 1's %s: %s (%s), want DCP_EINVAL naming it", want,
        dcp_strerror(rc), dcp_ctx_last_error(ctx));
  CHECK(g_rank == 1 || strstr(dcp_ctx_last_error(ctx), "rank 1: "), "rank 0's message does not "
        "name rank 1: %s", dcp_ctx_last_error(ctx));
  sync_ranks(ctx);
  after_refusal(ctx, m, st, p, 3 + bad_flag, &fc);
  load_check(ctx, p, 3 + bad_flag);
  dcp_state_free(st);
  dcp_ctx_free(ctx);
}

static int run_refuse_w2(const ak_args *a) {
  const char *r = getenv("DCP_TEST_RANK"), *w = getenv("DCP_TEST_WORLD");
  CHECK(r && w && a->rdv && atoi(w) == 2, "refuse-w2 runs on 2 ranks under dcp_launch");
  g_rank = atoi(r), g_world = 2;
  mkdir(a->rdv, 0755);
  model *m = new_model(1);
  m->rows = ROWS / 2;
  m->row0 = g_rank * m->rows;
  refuse_sync(a, m, 0);
  refuse_async(a, m);
  refuse_async_args(a, m, 0);
  refuse_async_args(a, m, 1);
  free(m);
  printf("refuse-w2 (rank %d): one rank's refusal fails every rank with its code\n", g_rank);
  return 0;
}

/* ---- the trainer changes its working directory ---------------------------------------- */

static int run_chdir(const ak_args *a) {
  char one[4200], two[4200], abs_dir[PATH_MAX];
  CHECK(realpath(a->dir, abs_dir), "realpath %s", a->dir);
  snprintf(one, sizeof one, "%s/one", abs_dir);
  snprintf(two, sizeof two, "%s/two", abs_dir);
  mkdir(one, 0755);
  mkdir(two, 0755);
  CHECK(chdir(one) == 0, "chdir %s", one);
  model *m = new_model(1);
  dcp_ctx *ctx = open_one(a);
  OK(dcp_async_prepare(ctx, NULL), ctx); /* the writer starts in one/ */
  CHECK(chdir(two) == 0, "chdir %s", two);
  dcp_state *st = state_of(ctx, m);
  dcp_async *h;
  OK(dcp_async_save(ctx, st, "ckpt", NULL, &h), ctx); /* relative: two/ckpt */
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
  char there[4300];
  snprintf(there, sizeof there, "%s/ckpt/.metadata", two);
  CHECK(access(there, F_OK) == 0, "the async save of 'ckpt' is not in the trainer's working "
        "directory %s (the writer's is %s)", two, one);
  load_check(ctx, "ckpt", 1);
  dcp_state_free(st);
  dcp_ctx_free(ctx);
  free(m);
  printf("chdir: a relative async save lands in the trainer's working directory\n");
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
                               {"back-to-back", run_back_to_back},
                               {"plan-planted", run_plan_planted},
                               {"plan-special", run_plan_special},
                               {"plan-opts", run_plan_opts},
                               {"memtier-overwrite", run_memtier_overwrite},
                               {"background-free", run_background_free},
                               {"async-over-parts", run_async_over_parts},
                               {"kill-loop", run_kill_loop},
                               {"plan-w2", run_plan_w2},
                               {"bad-requests", run_bad_requests},
                               {"shutdown-linger", run_shutdown_linger},
                               {"peer-kill", run_peer_kill},
                               {"refuse-w2", run_refuse_w2},
                               {"copy-fail", run_copy_fail},
                               {"chdir", run_chdir}};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
    if (!strcmp(a.mode, modes[i].name)) return modes[i].run(&a);
  fprintf(stderr, "attack_async: unknown mode '%s'\n", a.mode);
  return 2;
}

/* A rank that stalls past the deadline, under mpirun (dcp-coll-mpi.so).
 *
 *   mpi_late PLUGIN.so late       the last rank sleeps while the others run
 *                                 one op per communicator and time out;
 *                                 then it runs the same ops (its peers'
 *                                 abandoned requests match them)
 *   mpi_late PLUGIN.so stall DIR  the plugin initialises MPI (through a
 *                                 context); the last rank sleeps for good
 *                                 while the others save into DIR
 *   mpi_late PLUGIN.so slow DIR   likewise, but the last rank first comes
 *                                 late to the save (its first collective
 *                                 completes the one its peers abandoned),
 *                                 then stalls for good
 *
 * late: every survivor's call returns by the deadline; right after it
 * returns the survivor overwrites every buffer it passed with a canary, as
 * a caller that frees or reuses its memory would, and closes the
 * communicator (which must return at once). When the late rank wakes up,
 * every one of its calls must succeed — so its messages really reach its
 * peers — and its peers' canaries must be intact afterwards (nothing is
 * written into caller memory after a call returned), and what it received
 * from them must be their data, not the canary (nothing is read from caller
 * memory after a call returned either). Messages are 1 MiB + 3 bytes, past
 * the eager limits, so that MPI moves them when they are matched.
 *
 * stall, slow: each survivor's dcp_save fails with DCP_ETIMEDOUT or
 * DCP_EPEER by the deadline plus a margin; in slow mode it then drives MPI
 * until the late rank has come and stalled, so that nothing it abandoned is
 * pending any more. dcp_ctx_free must return within a second either way
 * (the plugin must not call MPI_Finalize, which would wait for the stalled
 * rank forever); the survivor then writes DIR.nohang.<rank> = "error ..."
 * (tests/integration/nohang.sh checks the reports, the job's end, and that
 * the stalled rank, whose pid is in DIR.stalled, is gone), waits (bounded)
 * for the other survivors' reports and exits without finalising: mpirun
 * ends the job.
 *
 * A failed check in late mode aborts the job (MPI_Abort); in stall mode it
 * exits 1 without a report. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A failed CHECK (rank_check.h, through coll_testkit.h) fails the job, or
 * with MPI not initialised by us, the rank (fail_now). */
static int g_rank = -1;
#define CHECK_RANK g_rank
#define CHECK_FAIL() fail_now()
#include "coll_testkit.h"
#include "dcp.h"
#include "dcp_plugin.h"

#define LEN (MIB + 3)      /* one message, past the eager limits */
#define TIMEOUT_MS 400
#define MARGIN_MS 1000      /* a timed-out call returns within deadline + this */
#define CANARY 0xA5
#define NOPS 9

static const dcp_coll_plugin *P;
static int g_abort_on_fail;

/* Ends the job (late mode) or this rank (stall mode). */
static void fail_now(void) {
  if (g_abort_on_fail) MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

/* ------------------------------------------------------------------------ */
/* late                                                                     */
/* ------------------------------------------------------------------------ */

/* One op of the late scenario: what a rank passes and what it checks. */
typedef struct late_op {
  unsigned char *send, *recv; /* LEN (recv: LEN * world) bytes each */
  size_t lens[64];
} late_op;

/* Seed of rank r's bytes in op i. */
static unsigned seed_of(int op, int r) { return (unsigned)(1000 + 10 * op + r); }

/* Runs op i on c: every rank passes LEN bytes of its own, roots and
 * receivers LEN (or LEN * world) bytes to receive into. */
static int run_op(int i, dcp_comm *c, late_op *o, int rank, int world, dcp_plugin_err *err) {
  int late = world - 1;
  int32_t all[64];
  for (int r = 0; r < world; r++) all[r] = r, o->lens[r] = LEN;
  switch (i) {
    case 0: /* bcast from the late rank: survivors receive */
      return P->bcast(c, rank == late ? o->send : o->recv, LEN, late, err);
    case 1: /* bcast from rank 0: the late rank receives */
      return P->bcast(c, rank == 0 ? o->send : o->recv, LEN, 0, err);
    case 2:
      return P->allgather(c, o->send, LEN, o->recv, err);
    case 3: { /* allreduce of LEN / 8 values, summed */
      memcpy(o->recv, o->send, LEN);
      return P->allreduce_i64(c, (int64_t *)(void *)o->recv, LEN / 8, DCP_REDUCE_SUM, err);
    }
    case 4: /* gatherv to rank 0: it receives from the late rank */
      return P->gatherv(c, o->send, LEN, o->recv, o->lens, 0, err);
    case 5: /* gatherv to the late rank: survivors send */
      return P->gatherv(c, o->send, LEN, o->recv, o->lens, late, err);
    case 6: /* scatterv from the late rank: survivors receive */
      return P->scatterv(c, o->send, o->lens, o->recv, LEN, late, err);
    case 7: /* scatterv from rank 0: it sends to the late rank */
      return P->scatterv(c, o->send, o->lens, o->recv, LEN, 0, err);
    default: /* group_bcast over everyone from the late rank */
      return P->group_bcast(c, all, (size_t)world, rank == late ? o->send : o->recv, LEN, late,
                            err);
  }
}

/* What each rank sends in op i: for the scatters, the root's whole send
 * buffer holds every destination's part (seed of the destination). */
static void fill_send(int i, late_op *o, int rank, int world) {
  if (i == 6 || i == 7) {
    for (int r = 0; r < world; r++) ctk_fill(o->send + (size_t)r * LEN, LEN, seed_of(i, r));
  } else {
    ctk_fill(o->send, LEN, seed_of(i, rank));
  }
}

/* 1 when the n int64 values at got are the wrapping sums of what every
 * rank contributed to the allreduce (op 3). */
static int sums_match(const unsigned char *got, size_t n, int world) {
  unsigned char *one = malloc(n * 8);
  uint64_t *acc = calloc(n, 8);
  int ok = one && acc;
  for (int r = 0; ok && r < world; r++) {
    ctk_fill(one, n * 8, seed_of(3, r));
    for (size_t i = 0; i < n; i++) {
      uint64_t v;
      memcpy(&v, one + 8 * i, 8);
      acc[i] += v;
    }
  }
  ok = ok && memcmp(acc, got, n * 8) == 0;
  free(one);
  free(acc);
  return ok;
}

/* The late rank's check of what it received in op i (only the ops where
 * it receives from a survivor). */
static void check_late_received(int i, const late_op *o, int world) {
  int late = world - 1;
  if (i == 3) CHECK(sums_match(o->recv, LEN / 8, world));
  if (i == 1) CHECK(ctk_matches(o->recv, LEN, seed_of(1, 0)));
  if (i == 2)
    for (int r = 0; r < world; r++) CHECK(ctk_matches(o->recv + (size_t)r * LEN, LEN, seed_of(2, r)));
  if (i == 5)
    for (int r = 0; r < world; r++) CHECK(ctk_matches(o->recv + (size_t)r * LEN, LEN, seed_of(5, r)));
  if (i == 7) CHECK(ctk_matches(o->recv, LEN, seed_of(7, late)));
}

/* 1 when all n bytes at p are the canary. */
static int all_canary(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != CANARY) return 0;
  return 1;
}

/* A survivor: each op times out (or succeeds, where this rank's part did
 * not involve the late rank), returns in time, and closes at once; its
 * buffers are then overwritten with the canary. */
static void survivor_ops(dcp_comm **cs, late_op *ops, int rank, int world) {
  for (int i = 0; i < NOPS; i++) {
    dcp_plugin_err err = {{0}};
    fill_send(i, &ops[i], rank, world);
    double t0 = ctk_now_ms();
    int rc = run_op(i, cs[i], &ops[i], rank, world, &err);
    double el = ctk_now_ms() - t0;
    memset(ops[i].send, CANARY, LEN * (size_t)world);
    memset(ops[i].recv, CANARY, LEN * (size_t)world);
    if (rc != DCP_OK && rc != DCP_ETIMEDOUT)
      fprintf(stderr, "rank %d: op %d = %d (%s)\n", rank, i, rc, err.msg);
    CHECK(rc == DCP_OK || rc == DCP_ETIMEDOUT);
    CHECK(el < TIMEOUT_MS + MARGIN_MS);
    t0 = ctk_now_ms();
    P->close(cs[i]);
    CHECK(ctk_now_ms() - t0 < MARGIN_MS);
  }
}

/* The late rank: wakes after every survivor has given up, then runs the
 * same ops, which must all succeed. */
static void late_ops(dcp_comm **cs, late_op *ops, int rank, int world) {
  ctk_sleep_ms(NOPS * (TIMEOUT_MS + 200) + 1500);
  for (int i = 0; i < NOPS; i++) {
    dcp_plugin_err err = {{0}};
    fill_send(i, &ops[i], rank, world);
    int rc = run_op(i, cs[i], &ops[i], rank, world, &err);
    if (rc != DCP_OK) fprintf(stderr, "rank %d: late op %d = %d (%s)\n", rank, i, rc, err.msg);
    CHECK(rc == DCP_OK);
    check_late_received(i, &ops[i], world);
    P->close(cs[i]);
  }
}

/* Drives MPI's progress for ms milliseconds (the late messages land
 * meanwhile). */
static void progress_for(long ms) {
  double end = ctk_now_ms() + (double)ms;
  while (ctk_now_ms() < end) {
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    ctk_sleep_ms(1);
  }
}

static int run_late(void) {
  int rank, world, provided;
  MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  g_rank = rank;
  g_abort_on_fail = 1;
  CHECK(world >= 2 && world <= 64);
  dcp_comm *cs[NOPS];
  late_op ops[NOPS];
  for (int i = 0; i < NOPS; i++) {
    dcp_plugin_err err = {{0}};
    /* one round per op: a late peer can only complete the round its
     * peers gave up in, not the rounds they never started */
    dcp_coll_config cfg = {.struct_size = sizeof cfg, .timeout_ms = TIMEOUT_MS};
    CHECK(P->open(&cfg, &cs[i], &err) == DCP_OK);
    ops[i].send = malloc(LEN * (size_t)world);
    ops[i].recv = malloc(LEN * (size_t)world);
    CHECK(ops[i].send && ops[i].recv);
  }
  if (rank == world - 1) late_ops(cs, ops, rank, world);
  else survivor_ops(cs, ops, rank, world);
  MPI_Barrier(MPI_COMM_WORLD); /* the late rank is done */
  progress_for(300);
  for (int i = 0; rank != world - 1 && i < NOPS; i++) {
    if (!all_canary(ops[i].send, LEN * (size_t)world) || !all_canary(ops[i].recv, LEN * (size_t)world))
      fprintf(stderr, "rank %d: op %d: the caller's memory changed after the call returned\n",
              rank, i);
    CHECK(all_canary(ops[i].send, LEN * (size_t)world));
    CHECK(all_canary(ops[i].recv, LEN * (size_t)world));
  }
  for (int i = 0; i < NOPS; i++) free(ops[i].send), free(ops[i].recv);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  if (rank == 0) printf("late: %d ops abandoned by the survivors, completed late, no caller memory touched\n", NOPS);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* stall                                                                    */
/* ------------------------------------------------------------------------ */

/* Writes text to path atomically. */
static void write_report(const char *path, const char *text) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  CHECK(f);
  fputs(text, f);
  CHECK(fclose(f) == 0 && rename(tmp, path) == 0);
}

/* Waits (bounded) for every survivor's report. */
static void wait_reports(const char *dir, int world) {
  double t0 = ctk_now_ms();
  for (int r = 0; r < world - 1; r++) {
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s.nohang.%d", dir, r);
    while (stat(path, &st) != 0 && ctk_now_ms() - t0 < 10000) ctk_sleep_ms(10);
  }
}

/* A context over the mpi collective found next to plugin_file. */
static dcp_ctx *stall_ctx(const char *plugin_file) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", plugin_file);
  char *slash = strrchr(dir, '/');
  CHECK(slash);
  *slash = '\0';
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.coll = "mpi";
  cfg.plugin_path = dir;
  cfg.timeout_ms = TIMEOUT_MS * 2;
  dcp_ctx *ctx = NULL;
  if (dcp_ctx_create(&cfg, &ctx) != DCP_OK) fprintf(stderr, "%s\n", dcp_ctx_create_error());
  CHECK(ctx);
  return ctx;
}

/* The stalled rank: in slow mode it first joins the save late (which then
 * fails), then it stops for good; mpirun kills it. */
static int stalled_rank(dcp_ctx *ctx, int slow, const char *dir) {
  char path[4200], text[64];
  if (slow) {
    ctk_sleep_ms(3 * TIMEOUT_MS + 500); /* past the survivors' deadline */
    dcp_state *st = NULL;
    int64_t step = 7;
    CHECK(dcp_state_create(ctx, &st) == DCP_OK);
    CHECK(dcp_state_add_bytes(st, "step", DCP_SCOPE_REPLICATED, &step, sizeof step) == DCP_OK);
    CHECK(dcp_save(ctx, st, dir, NULL) != DCP_OK);
  }
  snprintf(path, sizeof path, "%s.stalled", dir);
  snprintf(text, sizeof text, "%d\n", (int)getpid());
  write_report(path, text);
  ctk_sleep_ms(120000);
  return 1;
}

static int run_stall(const char *plugin_file, const char *dir, int slow) {
  int init = 1;
  MPI_Initialized(&init);
  CHECK(!init); /* the plugin must initialise MPI itself */
  dcp_ctx *ctx = stall_ctx(plugin_file);
  int rank = dcp_ctx_rank(ctx), world = dcp_ctx_world_size(ctx);
  g_rank = rank;
  char path[4200], text[256];
  if (rank == world - 1) return stalled_rank(ctx, slow, dir);
  dcp_state *st = NULL;
  int64_t step = 7;
  CHECK(dcp_state_create(ctx, &st) == DCP_OK);
  CHECK(dcp_state_add_bytes(st, "step", DCP_SCOPE_REPLICATED, &step, sizeof step) == DCP_OK);
  double t0 = ctk_now_ms();
  dcp_status rc = dcp_save(ctx, st, dir, NULL);
  double took = ctk_now_ms() - t0;
  fprintf(stderr, "rank %d: save gave %s after %.0f ms: %s\n", rank, dcp_strerror(rc), took,
          dcp_ctx_last_error(ctx));
  CHECK(rc == DCP_ETIMEDOUT || rc == DCP_EPEER);
  CHECK(took < 2 * TIMEOUT_MS + 5000);
  dcp_state_free(st);
  if (slow) { /* until the late rank has come and stopped: nothing stays pending */
    struct stat sb;
    snprintf(path, sizeof path, "%s.stalled", dir);
    double w0 = ctk_now_ms();
    while (stat(path, &sb) != 0 && ctk_now_ms() - w0 < 15000) progress_for(10);
    progress_for(200);
  }
  t0 = ctk_now_ms();
  dcp_ctx_free(ctx);
  double freed = ctk_now_ms() - t0;
  fprintf(stderr, "rank %d: dcp_ctx_free returned after %.0f ms\n", rank, freed);
  CHECK(freed < 1000);
  snprintf(path, sizeof path, "%s.nohang.%d", dir, rank);
  snprintf(text, sizeof text, "error %d %.3f free %.3f\n", (int)rc, took / 1e3, freed / 1e3);
  write_report(path, text);
  wait_reports(dir, world);
  return 0; /* without MPI_Finalize: mpirun ends the job */
}

int main(int argc, char **argv) {
  if (argc < 3 || !(P = ctk_load_path(argv[1]))) {
    fprintf(stderr, "usage: %s PLUGIN.so late | stall DIR | slow DIR\n", argv[0]);
    return 2;
  }
  if (strcmp(argv[2], "late") == 0 && argc == 3) return run_late();
  if (strcmp(argv[2], "stall") == 0 && argc == 4) return run_stall(argv[1], argv[3], 0);
  if (strcmp(argv[2], "slow") == 0 && argc == 4) return run_stall(argv[1], argv[3], 1);
  return 2;
}

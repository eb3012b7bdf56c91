/* async-bench — how long dcp_async_save stops the trainer, against the
 * machine's own limit for staging the same bytes (memcpy into pre-faulted
 * memory), measured in the same run; next to the time to persisted and to a
 * sync dcp_save of the same state. Prints figures, asserts none.
 *
 *   mpirun -np 4 async-bench [--coll mpi|file] [--writer-coll file|gloo]
 *          [--rendezvous DIR] [--dir DIR] [--mib M] [--tensors N] [--reps R]
 *   dcp_launch 4 600 async-bench --coll file ...
 *
 * The state: per rank M MiB (default 256) in N (default 8) f32 tensors of
 * global shape [world * rows, 1024], sharded on dim 0 (rank r owns rows
 * [r*rows, (r+1)*rows)), plus an 8-byte per-rank bytes item.
 *
 * Phases (each rank times its own part; phases separated by barriers, the
 * barrier being a dcp_save of an 8-byte state, as in dcp-bench):
 *   memcpy     R times: every rank at once copies its bytes tensor by tensor
 *              into one destination buffer whose pages were all touched
 *              first (the pool of an async save is pre-faulted the same way);
 *   async      R async saves into DIR/async (DCP_SAVE_OVERWRITE): blocking =
 *              until dcp_async_save returns, persisted = until dcp_async_wait
 *              returns. The first one also spawns the writer and creates the
 *              pool; each is waited for before the next, so the later ones
 *              measure staging alone (the writer is idle when they start);
 *   sync       R dcp_save of the same state into DIR/sync-ckpt;
 *   background R async saves with DCP_ASYNC_STAGE_BACKGROUND: dcp_async_save,
 *              then "compute" (a sleep of --compute-ms, default 3x the
 *              median memcpy: the next step's forward and backward, which
 *              only read the buffers; a sleep, as on an accelerator the
 *              host CPU is free meanwhile), then dcp_async_fence, then the
 *              buffers change (the optimizer step). The trainer-visible
 *              stop is the time in dcp_async_save plus the time in the
 *              fence;
 *   first      F (--first-reps, default 3) times: the writer stopped
 *              (dcp_async_shutdown), then the first async save of the
 *              context (writer spawn, pool creation, staging): blocking;
 *   prepared   F times: the writer stopped, dcp_async_prepare, a pause
 *              (compute), then the first async save: blocking.
 * Ratios are against the median memcpy of the same run; rank 0 prints them
 * also as "RATIO|key|median|min|max|n|target|what" lines (min and max over
 * the repetitions) for tools/dev.sh bench.
 * Per-rank times go to rank 0 through small files DIR/rec.<rank>. A figure
 * "max over ranks" is, per repetition, the slowest rank; the median is over
 * the repetitions. Persisted and sync times are latest end - earliest start.
 */
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dcp.h"

#define MAXREP 32
#define COLS 1024

static int g_rank;

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "async-bench rank %d: ", g_rank);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts); /* one machine, one clock for all ranks */
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct opts {
  const char *coll, *wcoll, *rdv, *dir;
  int mib, ntensors, reps, first_reps, compute_ms;
} opts;

static void usage(void) {
  fprintf(stderr, "usage: async-bench [--coll mpi|file] [--writer-coll file|gloo] "
                  "[--rendezvous DIR]\n                   [--dir DIR] [--mib M] [--tensors N] "
                  "[--reps R] [--first-reps F] [--compute-ms MS]\n");
  exit(2);
}

static opts parse(int argc, char **argv) {
  opts o = {.coll = "mpi", .wcoll = "file", .dir = "/var/tmp/dcp-async-bench", .mib = 256,
            .ntensors = 8, .reps = 5, .first_reps = 3, .compute_ms = -1};
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) usage();
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--coll")) o.coll = v;
    else if (!strcmp(k, "--writer-coll")) o.wcoll = v;
    else if (!strcmp(k, "--rendezvous")) o.rdv = v;
    else if (!strcmp(k, "--dir")) o.dir = v;
    else if (!strcmp(k, "--mib")) o.mib = atoi(v);
    else if (!strcmp(k, "--tensors")) o.ntensors = atoi(v);
    else if (!strcmp(k, "--reps")) o.reps = atoi(v);
    else if (!strcmp(k, "--first-reps")) o.first_reps = atoi(v);
    else if (!strcmp(k, "--compute-ms")) o.compute_ms = atoi(v);
    else usage();
  }
  if (o.mib < 1 || o.ntensors < 1 || o.reps < 2 || o.reps > MAXREP || o.first_reps < 1 ||
      o.first_reps > MAXREP)
    usage();
  return o;
}

static void pause_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void check(dcp_ctx *ctx, dcp_status rc, const char *what) {
  if (rc) die("%s: %s: %s", what, dcp_strerror(rc), dcp_ctx_last_error(ctx));
}

static void mkdir_p(const char *p) {
  if (mkdir(p, 0777) && errno != EEXIST) die("mkdir %s: %s", p, strerror(errno));
}

static void rm_tree(const char *p) {
  DIR *d = opendir(p);
  if (!d) {
    unlink(p);
    return;
  }
  struct dirent *e;
  char sub[4352];
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(sub, sizeof sub, "%s/%s", p, e->d_name);
      rm_tree(sub);
    }
  closedir(d);
  rmdir(p);
}

/* Barrier: dcp_save finishes with an allgather of every rank's status, so
 * no rank returns before all entered. Only ever called between timings. */
static dcp_state *g_bar_st;
static char g_bar_path[4200];
static void barrier(dcp_ctx *ctx) {
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.flags = DCP_SAVE_OVERWRITE;
  check(ctx, dcp_save(ctx, g_bar_st, g_bar_path, &so), "barrier");
}

/* What a rank measured; rank 0 reads every rank's from a file. */
typedef struct rec {
  double cp[MAXREP];                       /* memcpy s */
  double a0[MAXREP], a1[MAXREP], a2[MAXREP]; /* async: start, returned, persisted */
  double s0[MAXREP], s1[MAXREP];             /* sync save: start, end */
  double bstop[MAXREP];                      /* background: in save + in fence */
  double bsave[MAXREP], bfence[MAXREP];      /* its two parts */
  double first[MAXREP], prepared[MAXREP];    /* first save blocking, without / with prepare */
  double compute_s;                          /* the pause of the background phase */
} rec;

static double median(const double *v, int n) {
  double x[MAXREP];
  memcpy(x, v, (size_t)n * sizeof *x);
  for (int i = 1; i < n; i++)
    for (int k = i; k > 0 && x[k] < x[k - 1]; k--) {
      double t = x[k];
      x[k] = x[k - 1], x[k - 1] = t;
    }
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

typedef enum { F_MEMCPY, F_BLOCK, F_PERSIST, F_SYNC } figure;

/* Figure f of repetition k: the slowest rank's duration (memcpy, blocking)
 * or latest end - earliest start (persisted, sync). */
static double fig(const rec *all, int world, figure f, int k) {
  double lo = 1e300, hi = 0, mx = 0;
  for (int r = 0; r < world; r++) {
    const rec *x = &all[r];
    double d = f == F_MEMCPY ? x->cp[k] : x->a1[k] - x->a0[k];
    mx = d > mx ? d : mx;
    double b = f == F_SYNC ? x->s0[k] : x->a0[k], e = f == F_SYNC ? x->s1[k] : x->a2[k];
    lo = b < lo ? b : lo;
    hi = e > hi ? e : hi;
  }
  return f == F_MEMCPY || f == F_BLOCK ? mx : hi - lo;
}

/* Median over repetitions [from, reps) of figure f; *worst gets the max. */
static double med_fig(const rec *all, int world, figure f, int from, int reps, double *worst) {
  double v[MAXREP];
  *worst = 0;
  for (int k = from; k < reps; k++) {
    v[k - from] = fig(all, world, f, k);
    *worst = v[k - from] > *worst ? v[k - from] : *worst;
  }
  return median(v, reps - from);
}

/* The median over steady repetitions of one rank's blocking / memcpy. */
static double rank_ratio(const rec *x, int reps) {
  double b[MAXREP];
  for (int k = 1; k < reps; k++) b[k - 1] = x->a1[k] - x->a0[k];
  return median(b, reps - 1) / median(x->cp, reps);
}

static void report(const opts *o, const rec *all, int world, uint64_t bytes) {
  int R = o->reps;
  double w, cp = med_fig(all, world, F_MEMCPY, 0, R, &w);
  double blk1 = fig(all, world, F_BLOCK, 0), per1 = fig(all, world, F_PERSIST, 0);
  double wblk, blk = med_fig(all, world, F_BLOCK, 1, R, &wblk);
  double wper, per = med_fig(all, world, F_PERSIST, 1, R, &wper);
  double wsy, sy = med_fig(all, world, F_SYNC, 0, R, &wsy);
  printf("\nper repetition (s; memcpy and blocking: slowest rank; persisted, sync: "
         "latest end - earliest start)\n%-4s %9s %9s %9s %9s\n",
         "rep", "memcpy", "blocking", "persisted", "sync");
  for (int k = 0; k < R; k++)
    printf("%-4d %9.4f %9.4f %9.3f %9.3f%s\n", k + 1, fig(all, world, F_MEMCPY, k),
           fig(all, world, F_BLOCK, k), fig(all, world, F_PERSIST, k), fig(all, world, F_SYNC, k),
           k == 0 ? "   (first async: writer spawn + pool creation)" : "");
  printf("\nper-rank median blocking / median memcpy (steady):");
  for (int r = 0; r < world; r++) printf(" r%d %.2f", r, rank_ratio(&all[r], R));
  printf("\n\n%-34s %10.1f MiB (%llu B, %d tensors)\n", "bytes per rank", (double)bytes / 1048576.0,
         (unsigned long long)bytes, o->ntensors);
  printf("%-34s %10.4f s  (%.2f GiB/s per rank)\n", "memcpy, pre-faulted (median)", cp,
         (double)bytes / cp / 1073741824.0);
  printf("%-34s %10.4f s  (%.2fx memcpy)\n", "first async blocking (spawn+pool)", blk1, blk1 / cp);
  printf("%-34s %10.4f s  (max %.4f s)\n", "steady async blocking (median)", blk, wblk);
  printf("%-34s %10.2f    (target <= 1.2)\n", "  ratio blocking / memcpy", blk / cp);
  printf("%-34s %10.3f s  (first %.3f s, max %.3f s)\n", "async persisted (steady median)", per,
         per1, wper);
  printf("%-34s %10.3f s  (max %.3f s)\n", "sync dcp_save (median)", sy, wsy);
  printf("%-34s %10.1f x\n", "  sync save / steady blocking", sy / blk);
}

/* The slowest rank's value of repetition k of field v (an array in rec). */
static double slowest(const rec *all, int world, size_t off, int k) {
  double mx = 0;
  for (int r = 0; r < world; r++) {
    const double *v = (const double *)((const char *)&all[r] + off);
    mx = v[k] > mx ? v[k] : mx;
  }
  return mx;
}

/* Median, min and max over n repetitions of the slowest rank's field / base. */
static void spread(const rec *all, int world, size_t off, int n, double base, double out[3]) {
  double v[MAXREP];
  out[1] = 1e300, out[2] = 0;
  for (int k = 0; k < n; k++) {
    v[k] = slowest(all, world, off, k) / base;
    out[1] = v[k] < out[1] ? v[k] : out[1];
    out[2] = v[k] > out[2] ? v[k] : out[2];
  }
  out[0] = median(v, n);
}

static void ratio_line(const char *key, const double r[3], int n, const char *target,
                       const char *what) {
  printf("RATIO|%s|%.3f|%.3f|%.3f|%d|%s|%s\n", key, r[0], r[1], r[2], n, target, what);
}

static void report_more(const opts *o, const rec *all, int world) {
  int R = o->reps, F = o->first_reps;
  double w, cp = med_fig(all, world, F_MEMCPY, 0, R, &w);
  double bs[3], sv[3], fe[3], fi[3], pr[3], st[3];
  spread(all, world, offsetof(rec, bstop), R, cp, bs);
  spread(all, world, offsetof(rec, bsave), R, cp, sv);
  spread(all, world, offsetof(rec, bfence), R, cp, fe);
  spread(all, world, offsetof(rec, first), F, cp, fi);
  spread(all, world, offsetof(rec, prepared), F, cp, pr);
  double v[MAXREP];
  st[1] = 1e300, st[2] = 0;
  for (int k = 1; k < R; k++) {
    v[k - 1] = fig(all, world, F_BLOCK, k) / cp;
    st[1] = v[k - 1] < st[1] ? v[k - 1] : st[1];
    st[2] = v[k - 1] > st[2] ? v[k - 1] : st[2];
  }
  st[0] = median(v, R - 1);
  printf("\nbackground staging (compute %.3f s between save and fence), ratios to memcpy "
         "(median, min-max over %d repetitions, slowest rank):\n", all[0].compute_s, R);
  printf("%-34s %10.3f    (%.3f-%.3f; in save %.3f, in fence %.3f)\n",
         "  trainer-visible stop / memcpy", bs[0], bs[1], bs[2], sv[0], fe[0]);
  printf("first async save blocking / memcpy (%d repetitions, writer stopped before each):\n", F);
  printf("%-34s %10.3f    (%.3f-%.3f)\n", "  without prepare", fi[0], fi[1], fi[2]);
  printf("%-34s %10.3f    (%.3f-%.3f)\n", "  after dcp_async_prepare", pr[0], pr[1], pr[2]);
  printf("\n");
  ratio_line("async.steady", st, R - 1, "<= 1.0", "steady async blocking / memcpy");
  ratio_line("async.background", bs, R, "<= 0.1",
             "trainer-visible stop, background staging / memcpy");
  ratio_line("async.first", fi, F, "-", "first async save blocking / memcpy, no prepare");
  ratio_line("async.first_prepared", pr, F, "<= 1.2",
             "first async save blocking / memcpy, after prepare");
}

int main(int argc, char **argv) {
  opts o = parse(argc, argv);
  mkdir_p(o.dir);
  char rdv[4200];
  snprintf(rdv, sizeof rdv, "%s/rdv", o.dir);
  if (o.rdv) snprintf(rdv, sizeof rdv, "%s", o.rdv);
  mkdir_p(rdv);

  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.coll = o.coll;
  cfg.timeout_ms = 600000;
  if (!strcmp(o.coll, "file")) {
    const char *r = getenv("DCP_TEST_RANK"), *w = getenv("DCP_TEST_WORLD");
    if (!r || !w) die("--coll file needs DCP_TEST_RANK/DCP_TEST_WORLD (run under dcp_launch)");
    cfg.rank = atoi(r), cfg.world_size = atoi(w), cfg.rendezvous = rdv;
  }
  dcp_ctx *ctx;
  dcp_status rc = dcp_ctx_create(&cfg, &ctx);
  if (rc) die("dcp_ctx_create (%s): %s: %s", o.coll, dcp_strerror(rc), dcp_ctx_create_error());
  int world = dcp_ctx_world_size(ctx), rank = dcp_ctx_rank(ctx);
  g_rank = rank;
  if (world > 1) check(ctx, dcp_async_set_coordination(ctx, o.wcoll, rdv, NULL), "coordination");

  uint64_t tok = (uint64_t)rank;
  snprintf(g_bar_path, sizeof g_bar_path, "%s/barrier", o.dir);
  check(ctx, dcp_state_create(ctx, &g_bar_st), "state");
  check(ctx, dcp_state_add_bytes(g_bar_st, "t", DCP_SCOPE_PER_RANK, &tok, sizeof tok), "bytes");

  /* the state: N row-sharded f32 tensors, filled with noise */
  int64_t rows = ((int64_t)o.mib << 20) / o.ntensors / (COLS * 4);
  if (rows < 1) die("--mib %d too small for %d tensors", o.mib, o.ntensors);
  size_t tbytes = (size_t)rows * COLS * 4, total = tbytes * (size_t)o.ntensors;
  dcp_state *st;
  check(ctx, dcp_state_create(ctx, &st), "state");
  uint8_t **src = calloc((size_t)o.ntensors, sizeof *src);
  uint64_t step = 100;
  if (!src) die("out of memory");
  for (int t = 0; t < o.ntensors; t++) {
    char fqn[64];
    snprintf(fqn, sizeof fqn, "layers.%d.weight", t);
    int64_t shape[2] = {rows * world, COLS}, off[2] = {rows * rank, 0}, size[2] = {rows, COLS};
    if (!(src[t] = malloc(tbytes))) die("out of memory");
    uint64_t z = 0x9E3779B97F4A7C15ull * (uint64_t)(rank * 131 + t + 1);
    for (size_t i = 0; i + 8 <= tbytes; i += 8) { /* xorshift noise, every page touched */
      z ^= z << 13, z ^= z >> 7, z ^= z << 17;
      memcpy(src[t] + i, &z, 8);
    }
    check(ctx, dcp_state_add_tensor(st, fqn, DCP_F32, 2, shape), "add_tensor");
    check(ctx, dcp_state_add_chunk(st, fqn, off, size, src[t]), "add_chunk");
  }
  check(ctx, dcp_state_add_bytes(st, "step", DCP_SCOPE_PER_RANK, &step, sizeof step), "bytes");
  uint8_t *dst = malloc(total);
  if (!dst) die("out of memory");
  memset(dst, 0x5A, total); /* pre-fault every page */

  if (rank == 0) {
    printf("async-bench: libdcp %s, %d ranks, trainer coll %s, writer coll %s, dir %s, "
           "%d repetitions, %.1f MiB per rank\n",
           dcp_version_string(), world, o.coll, world > 1 ? o.wcoll : "single", o.dir, o.reps,
           (double)total / 1048576.0);
    fflush(stdout);
  }

  rec *me = calloc(1, sizeof *me);
  if (!me) die("out of memory");
  for (int k = 0; k < o.reps; k++) {
    barrier(ctx);
    double t0 = now();
    for (int t = 0; t < o.ntensors; t++) memcpy(dst + (size_t)t * tbytes, src[t], tbytes);
    me->cp[k] = now() - t0;
  }
  free(dst); /* so the async pool does not compete with it for memory */

  char apath[4200], spath[4200];
  snprintf(apath, sizeof apath, "%s/async-ckpt", o.dir);
  snprintf(spath, sizeof spath, "%s/sync-ckpt", o.dir);
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.flags = DCP_SAVE_OVERWRITE;
  for (int k = 0; k < o.reps; k++) {
    barrier(ctx);
    dcp_async *h;
    step++;
    me->a0[k] = now();
    check(ctx, dcp_async_save(ctx, st, apath, &so, &h), "dcp_async_save");
    me->a1[k] = now();
    src[0][0] ^= 1; /* the caller may mutate right away */
    rc = dcp_async_wait(h);
    me->a2[k] = now();
    check(ctx, rc, "dcp_async_wait");
    dcp_async_free(h);
  }
  for (int k = 0; k < o.reps; k++) {
    barrier(ctx);
    me->s0[k] = now();
    check(ctx, dcp_save(ctx, st, spath, &so), "dcp_save");
    me->s1[k] = now();
  }

  /* background staging: save, compute (reads only), fence, optimizer step */
  double cp_med = median(me->cp, o.reps);
  me->compute_s = o.compute_ms >= 0 ? o.compute_ms / 1000.0 : 3 * cp_med;
  check(ctx, dcp_async_set_staging(ctx, DCP_ASYNC_STAGE_BACKGROUND), "set_staging");
  for (int k = 0; k < o.reps; k++) {
    barrier(ctx);
    dcp_async *h;
    double t0 = now();
    check(ctx, dcp_async_save(ctx, st, apath, &so, &h), "dcp_async_save (background)");
    double t1 = now();
    pause_s(me->compute_s);
    double t2 = now();
    check(ctx, dcp_async_fence(h), "dcp_async_fence");
    double t3 = now();
    src[0][0] ^= 1; /* the optimizer step */
    check(ctx, dcp_async_wait(h), "dcp_async_wait (background)");
    dcp_async_free(h);
    me->bsave[k] = t1 - t0, me->bfence[k] = t3 - t2, me->bstop[k] = me->bsave[k] + me->bfence[k];
  }
  check(ctx, dcp_async_set_staging(ctx, DCP_ASYNC_STAGE_BLOCKING), "set_staging");

  /* the first save of a context, with and without prepare */
  for (int k = 0; k < 2 * o.first_reps; k++) {
    int prep = k >= o.first_reps;
    dcp_async_shutdown(ctx); /* the next save (or prepare) starts afresh */
    if (world > 1) check(ctx, dcp_async_set_coordination(ctx, o.wcoll, rdv, NULL), "coordination");
    barrier(ctx);
    if (prep) {
      check(ctx, dcp_async_prepare(ctx, st), "dcp_async_prepare");
      pause_s(1.0); /* training goes on; the writers open their collective */
      barrier(ctx);
    }
    dcp_async *h;
    double t0 = now();
    check(ctx, dcp_async_save(ctx, st, apath, &so, &h), "dcp_async_save (first)");
    double t1 = now();
    check(ctx, dcp_async_wait(h), "dcp_async_wait (first)");
    dcp_async_free(h);
    (prep ? me->prepared : me->first)[k % o.first_reps] = t1 - t0;
  }

  char rp[4300];
  snprintf(rp, sizeof rp, "%s/rec.%d", o.dir, rank);
  FILE *f = fopen(rp, "wb");
  if (!f || fwrite(me, sizeof *me, 1, f) != 1 || fclose(f)) die("write %s", rp);
  barrier(ctx);
  if (rank == 0) {
    rec *all = calloc((size_t)world, sizeof *all);
    if (!all) die("out of memory");
    for (int r = 0; r < world; r++) {
      snprintf(rp, sizeof rp, "%s/rec.%d", o.dir, r);
      f = fopen(rp, "rb");
      if (!f || fread(&all[r], sizeof *all, 1, f) != 1) die("read %s", rp);
      fclose(f);
      unlink(rp);
    }
    report(&o, all, world, total);
    report_more(&o, all, world);
    free(all);
  }
  barrier(ctx); /* rank 0 has read every record before the others clean up */
  dcp_async_shutdown(ctx);
  dcp_state_free(st);
  dcp_state_free(g_bar_st);
  for (int t = 0; t < o.ntensors; t++) free(src[t]);
  free(src);
  free(me);
  dcp_ctx_free(ctx);
  if (rank == 0) {
    rm_tree(apath), rm_tree(spath), rm_tree(g_bar_path);
    if (!o.rdv) rmdir(rdv); /* only when empty */
  }
  return 0;
}

/* load-dedup — cold dcp_load of a replicated layout with read dedup off and
 * on, and with the read/broadcast pipeline on and off. Run it under mpirun
 * (the mpi collective; it needs several ranks):
 *
 *   mpirun -np 4 --oversubscribe --allow-run-as-root --mca btl self,vader \
 *       build/bench/load-dedup [--dir DIR] [--mib 512] [--tp T] [--load-tp T]
 *       [--reps 3] [--inflight-mib 256] [--keep] [--coll gloo --coll-options OPTS]
 *
 * or, with --coll gloo (or file), as ranks that find their rank and world
 * in DCP_TEST_RANK / DCP_TEST_WORLD (or RANK / WORLD_SIZE): that is how
 * bench/hosts-dedup.sh runs it on several network "hosts" with limited
 * links.
 *
 * The model: on a [DP, TP] mesh (DP = world / TP), 8 large fp32 tensors of
 * 4 KiB rows sharded over TP on dim 0 (90 % of the bytes), 64 small ones of
 * the same kind (packed into >= 1 MiB broadcasts) and 16 vectors replicated
 * on every rank; every byte is replicated DP times. It is saved once, then
 * loaded cold (every rank evicts the checkpoint's pages with
 * posix_fadvise(DONTNEED), then a barrier) in three configurations, round
 * robin, --reps times each:
 *
 *   off        read_dedup OFF: every rank reads everything it loads
 *   pipeline   read dedup, a reader thread reading ahead of the broadcasts
 *   no-pipe    read dedup, DCP_LOAD_NO_PIPELINE: read everything, then
 *              broadcast
 *   blind      as pipeline, but with the collective's host ids hidden: one
 *              reader per group wherever the balancer puts it, instead of
 *              on the host of most of the group's members (the same as
 *              pipeline when the collective cannot tell hosts apart, or
 *              all ranks share a host)
 *
 * For each it prints the median time (latest rank), the storage bytes read
 * summed over ranks and their ratio to the model bytes, max/mean of the
 * bytes read per rank, the broadcast bytes, and the model bytes per second.
 * A sample of every loaded chunk is checked. Prints figures; asserts
 * nothing about them. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/ctx.h"
#include "dcp.h"

#define NBIG 8
#define NSMALL 64
#define NVEC 16
#define ROW 1024 /* fp32 elements per row: 4 KiB */
#define NT (NBIG + NSMALL + NVEC)
#define NC 4 /* configurations: off, pipeline, no-pipe, blind */

static int g_rank;

#define DIE(...)                                   \
  do {                                             \
    fprintf(stderr, "load-dedup rank %d: ", g_rank); \
    fprintf(stderr, __VA_ARGS__);                  \
    fprintf(stderr, "\n");                         \
    exit(1);                                       \
  } while (0)

typedef struct tensor {
  char fqn[64];
  int64_t shape[2];
  uint32_t ndim;
  uint32_t map[2];
} tensor;

static tensor T[NT];

static void define_model(int64_t mib, int32_t tp) {
  int64_t total = mib << 20, rows_big = total * 9 / 10 / NBIG / (ROW * 4);
  int64_t rows_small = total / 10 / NSMALL / (ROW * 4);
  rows_big = (rows_big / tp) * tp;
  if (rows_big < tp) rows_big = tp;
  if (rows_small < 1) rows_small = 1;
  for (int i = 0; i < NT; i++) {
    tensor *t = &T[i];
    if (i < NBIG + NSMALL) {
      snprintf(t->fqn, sizeof t->fqn, "%s.%d.weight", i < NBIG ? "big" : "small", i);
      t->ndim = 2;
      t->shape[0] = i < NBIG ? rows_big : rows_small;
      t->shape[1] = ROW;
      t->map[0] = 2; /* TP (mesh dim 1) on dim 0, replicated over DP */
      t->map[1] = 0;
    } else {
      snprintf(t->fqn, sizeof t->fqn, "vec.%d", i);
      t->ndim = 1;
      t->shape[0] = ROW;
      t->map[0] = 0; /* replicated everywhere */
    }
  }
}

static float value(int t, int64_t linear) { return (float)((linear * 31 + t * 7) % 1000003); }

typedef struct rank_state {
  dcp_state *st;
  dcp_layout *layouts[NT];
  float *data[NT];
  dcp_box box[NT];
  int64_t bytes;
} rank_state;

static void build(dcp_ctx *ctx, rank_state *r, int32_t tp, int fill) {
  int32_t world = dcp_ctx_world_size(ctx), rank = dcp_ctx_rank(ctx);
  int64_t mesh[2] = {world / tp, tp};
  memset(r, 0, sizeof *r);
  if (dcp_state_create(ctx, &r->st)) DIE("state");
  for (int i = 0; i < NT; i++) {
    tensor *t = &T[i];
    if (dcp_layout_create(ctx, 2, mesh, NULL, t->ndim, t->map, &r->layouts[i])) DIE("layout");
    if (dcp_layout_box(r->layouts[i], t->shape, rank, &r->box[i])) DIE("box");
    int64_t n = 1;
    for (uint32_t d = 0; d < t->ndim; d++) n *= r->box[i].size[d];
    r->data[i] = malloc(n ? (size_t)n * 4 : 4);
    r->bytes += n * 4;
    int64_t first = r->box[i].offset[0] * (t->ndim == 2 ? ROW : 1);
    for (int64_t e = 0; e < n; e++) r->data[i][e] = fill ? value(i, first + e) : -1.0f;
    if (dcp_state_add_sharded(r->st, t->fqn, DCP_F32, t->ndim, t->shape, r->layouts[i],
                              r->data[i]))
      DIE("add_sharded: %s", dcp_ctx_last_error(ctx));
  }
}

static int64_t check(const rank_state *r) {
  int64_t bad = 0;
  for (int i = 0; i < NT; i++) {
    int64_t n = 1;
    for (uint32_t d = 0; d < T[i].ndim; d++) n *= r->box[i].size[d];
    int64_t first = r->box[i].offset[0] * (T[i].ndim == 2 ? ROW : 1);
    for (int64_t e = 0; e < n; e += n / 61 + 1) bad += r->data[i][e] != value(i, first + e);
    if (n) bad += r->data[i][n - 1] != value(i, first + n - 1);
  }
  return bad;
}

static void free_state(rank_state *r) {
  for (int i = 0; i < NT; i++) {
    free(r->data[i]);
    dcp_layout_free(r->layouts[i]);
  }
  dcp_state_free(r->st);
}

/* ---- the collective, directly (this bench links the static core) ------- */

static void barrier(dcp_ctx *ctx) {
  dcp_plugin_err e = {{0}};
  if (ctx->coll->barrier(ctx->comm, &e)) DIE("barrier: %s", e.msg);
}

static void allreduce(dcp_ctx *ctx, int64_t *v, size_t n, uint32_t op) {
  dcp_plugin_err e = {{0}};
  if (ctx->coll->allreduce_i64(ctx->comm, v, n, op, &e)) DIE("allreduce: %s", e.msg);
}

/* Evict the checkpoint's pages from the page cache (every rank, then a
 * barrier): the next load reads from the device. */
static void evict(dcp_ctx *ctx, const char *ckpt, int32_t world) {
  char path[PATH_MAX + 32];
  for (int32_t r = -1; r < world; r++) {
    if (r < 0)
      snprintf(path, sizeof path, "%s/.metadata", ckpt);
    else
      snprintf(path, sizeof path, "%s/data-%05d.dcp", ckpt, r);
    int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
  barrier(ctx);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct result {
  double secs;
  int64_t read, read_max, payload_max, payload, sent, groups;
  uint32_t path;
  int64_t bad;
} result;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  const char *dir = "/var/tmp/dcp-load-dedup";
  int64_t mib = 512, inflight_mib = 256;
  int32_t tp = 0, load_tp = 0, reps = 3, keep = 0;
  const char *coll = "mpi", *coll_options = NULL;
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
    if (!strcmp(k, "--dir")) dir = v, i++;
    else if (!strcmp(k, "--mib")) mib = atoll(v), i++;
    else if (!strcmp(k, "--tp")) tp = atoi(v), i++;
    else if (!strcmp(k, "--load-tp")) load_tp = atoi(v), i++;
    else if (!strcmp(k, "--reps")) reps = atoi(v), i++;
    else if (!strcmp(k, "--inflight-mib")) inflight_mib = atoll(v), i++;
    else if (!strcmp(k, "--keep")) keep = 1;
    else if (!strcmp(k, "--coll")) coll = v, i++;
    else if (!strcmp(k, "--coll-options")) coll_options = v, i++;
    else {
      fprintf(stderr, "load-dedup: unknown argument %s\n", k);
      return 2;
    }
  }
  char plugins[PATH_MAX], exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = '\0';
  snprintf(plugins, sizeof plugins, "%s/../lib/dcp", dirname(exe));
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.coll = coll;
  cfg.coll_options = coll_options;
  cfg.plugin_path = plugins;
  if (strcmp(coll, "mpi")) { /* ranks started by a script */
    const char *r = getenv("DCP_TEST_RANK"), *w = getenv("DCP_TEST_WORLD");
    if (!r || !w) r = getenv("RANK"), w = getenv("WORLD_SIZE");
    if (!r || !w) DIE("--coll %s needs DCP_TEST_RANK/DCP_TEST_WORLD or RANK/WORLD_SIZE", coll);
    cfg.rank = atoi(r);
    cfg.world_size = atoi(w);
  }
  dcp_ctx *ctx;
  if (dcp_ctx_create(&cfg, &ctx)) DIE("ctx: %s", dcp_ctx_create_error());
  g_rank = dcp_ctx_rank(ctx);
  int32_t world = dcp_ctx_world_size(ctx);
  if (!tp) tp = world % 2 == 0 && world >= 4 ? 2 : 1;
  if (!load_tp) load_tp = tp;
  if (world % tp || world % load_tp) DIE("world %d not divisible by tp %d / %d", world, tp, load_tp);
  define_model(mib, tp);
  char ckpt[PATH_MAX];
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);

  rank_state s;
  build(ctx, &s, tp, 1);
  int64_t model = 0;
  for (int i = 0; i < NT; i++) model += T[i].shape[0] * (T[i].ndim == 2 ? ROW : 1) * 4;
  if (g_rank == 0) {
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (system(cmd)) DIE("mkdir %s", dir);
  }
  barrier(ctx);
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.flags = DCP_SAVE_OVERWRITE;
  double t0 = now_s();
  if (dcp_save(ctx, s.st, ckpt, &so)) DIE("save: %s", dcp_ctx_last_error(ctx));
  double save_s = now_s() - t0;
  free_state(&s);
  if (g_rank == 0)
    printf("load-dedup: %d ranks, save [DP %d, TP %d], load [DP %d, TP %d], model %.1f MiB "
           "(%d tensors, every byte replicated %dx in the load), saved in %.2f s, in %s\n",
           world, world / tp, tp, world / load_tp, load_tp, (double)model / (1 << 20), NT,
           world / load_tp, save_s, dir);

  static const char *names[NC] = {"off", "pipeline", "no-pipe", "blind"};
  const dcp_coll_plugin *real = ctx->coll;
  dcp_coll_plugin blind = *real; /* the same table without host ids */
  if (DCP_HAS_FIELD(real, dcp_coll_plugin, host_id)) blind.host_id = NULL;
  result *res = calloc((size_t)reps * NC, sizeof *res);
  for (int rep = 0; rep < reps; rep++)
    for (int c = 0; c < NC; c++) {
      rank_state l;
      build(ctx, &l, load_tp, 0);
      dcp_load_options lo;
      dcp_load_options_init(&lo);
      /* ON: on one host AUTO would read for itself (the page cache dedups) */
      lo.read_dedup = c == 0 ? DCP_READ_DEDUP_OFF : DCP_READ_DEDUP_ON;
      if (c == 2) lo.flags |= DCP_LOAD_NO_PIPELINE;
      ctx->coll = c == 3 ? &blind : real;
      lo.max_inflight_bytes = (uint64_t)inflight_mib << 20;
      evict(ctx, ckpt, world);
      t0 = now_s();
      if (dcp_load(ctx, l.st, ckpt, &lo)) DIE("load: %s", dcp_ctx_last_error(ctx));
      double took = now_s() - t0;
      dcp_stats st = {.struct_size = sizeof st};
      dcp_ctx_stats(ctx, &st);
      int64_t bad = check(&l);
      int64_t sums[5] = {(int64_t)st.data_read_bytes, (int64_t)st.read_payload_bytes,
                         (int64_t)st.dedup_sent_bytes, (int64_t)st.dedup_groups, bad};
      int64_t maxs[3] = {(int64_t)(took * 1e9), (int64_t)st.data_read_bytes,
                         (int64_t)st.read_payload_bytes};
      allreduce(ctx, sums, 5, DCP_REDUCE_SUM);
      allreduce(ctx, maxs, 3, DCP_REDUCE_MAX);
      ctx->coll = real;
      res[rep * NC + c] = (result){(double)maxs[0] * 1e-9, sums[0], maxs[1], maxs[2], sums[1],
                                  sums[2], sums[3], st.dedup_path, sums[4]};
      free_state(&l);
    }
  if (g_rank == 0) {
    printf("%-9s %9s %9s %12s %8s %10s %10s %9s %6s %s\n", "config", "median s", "min s",
           "bytes read", "x model", "max/mean", "bcast", "MiB/s", "path", "(per rep s)");
    for (int c = 0; c < NC; c++) {
      double t[64];
      int k = reps < 64 ? reps : 64;
      for (int i = 0; i < k; i++) t[i] = res[i * NC + c].secs;
      qsort(t, (size_t)k, sizeof *t, cmp_double);
      const result *r = &res[c]; /* volumes are the same every repetition */
      int64_t bad = 0;
      for (int i = 0; i < reps; i++) bad += res[i * NC + c].bad;
      double mean = (double)r->read / world;
      printf("%-9s %9.3f %9.3f %9.1f MiB %7.3fx %10.3f %6.1f MiB %9.0f %6u (", names[c], t[k / 2],
             t[0], (double)r->read / (1 << 20), (double)r->read / (double)model,
             mean > 0 ? (double)r->read_max / mean : 0.0, (double)r->sent / (1 << 20),
             (double)model / (1 << 20) / t[k / 2], r->path);
      for (int i = 0; i < reps; i++) printf("%s%.3f", i ? " " : "", res[i * NC + c].secs);
      printf(")%s\n", bad ? "  WRONG VALUES" : "");
    }
    const result *on = &res[1], *off = &res[0];
    double t_off[64], t_on[64], t_np[64], t_bl[64];
    int k = reps < 64 ? reps : 64;
    for (int i = 0; i < k; i++)
      t_off[i] = res[i * NC].secs, t_on[i] = res[i * NC + 1].secs,
      t_np[i] = res[i * NC + 2].secs, t_bl[i] = res[i * NC + 3].secs;
    qsort(t_off, (size_t)k, sizeof *t_off, cmp_double);
    qsort(t_on, (size_t)k, sizeof *t_on, cmp_double);
    qsort(t_np, (size_t)k, sizeof *t_np, cmp_double);
    qsort(t_bl, (size_t)k, sizeof *t_bl, cmp_double);
    printf("dedup: %.2fx fewer bytes read (%.1f groups per rank), %.2fx faster than off; pipeline: "
           "%.2fx faster than read-then-broadcast (median %.3f s vs %.3f s)\n",
           (double)off->read / (double)on->read, (double)on->groups / world,
           t_off[k / 2] / t_on[k / 2], t_np[k / 2] / t_on[k / 2], t_on[k / 2], t_np[k / 2]);
    printf("hosts: readers on the host of most members %.2fx faster than host-blind readers "
           "(median %.3f s vs %.3f s; 1.00 expected when the collective gives no host ids or "
           "every rank is on one host)\n",
           t_bl[k / 2] / t_on[k / 2], t_on[k / 2], t_bl[k / 2]);
  }
  free(res);
  barrier(ctx);
  if (g_rank == 0 && !keep) {
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ckpt);
    if (system(cmd)) fprintf(stderr, "load-dedup: could not remove %s\n", ckpt);
  }
  dcp_ctx_free(ctx);
  return 0;
}

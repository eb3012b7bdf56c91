/* dcp-bench — save and load bandwidth of libdcp against the disk it writes
 * to, measured in the same run, in the same directory, with the same number
 * of writers and the same bytes. It prints figures and ratios and asserts
 * nothing about them (a load that returns wrong values is still an error).
 *
 *   mpirun -np 4 dcp-bench [--coll mpi|file] [--rendezvous DIR]
 *          [--layers L] [--hidden H] [--tp T] [--load-tp T] [--dtype bf16|f32]
 *          [--dir DIR] [--compress] [--small] [--io-mib M] [--repeat R] [--keep]
 *          [--dedup auto|off|on]
 *
 * The state is a GPT-like stack of L layers on a [DP, TP] mesh (DP =
 * world / T): per layer qkv [3H,H] and fc1 [4H,H] sharded on dim 0 by TP,
 * proj [H,H] and fc2 [H,4H] sharded on dim 1 by TP, and six [H] vectors
 * (norm weights and biases, row-parallel biases) replicated on every rank.
 * Values are plausible small floats with random sign and mantissa (so zstd
 * finds only the little entropy real weights leave it), a pure function of
 * (tensor, global element index), so a load into another layout can be
 * checked.
 *
 * Phases, in order, each separated by a barrier (see bench_barrier), the
 * whole sequence repeated R times (default 3; a virtual disk's speed drifts
 * by tens of percent from one second to the next, so the report gives every
 * repetition and the median):
 *   disk write  every rank writes model_bytes / N into its own file in DIR
 *               with write(2)s of --io-mib MiB, then fsync, then
 *               posix_fadvise(DONTNEED) (evicts the now clean pages);
 *   disk read   page cache dropped (drop_caches when permitted, fadvise
 *               always), every rank reads its file back with large reads;
 *   save        dcp_save of the state into DIR/ckpt (DCP_SAVE_OVERWRITE);
 *   load        checkpoint files evicted the same way, then dcp_load into
 *               another TP degree (T/2, else 2T, else T), a sample of the
 *               values checked;
 *   load same   evicted again, dcp_load into the save layout (no
 *               resharding), sample checked.
 *
 * Timing: every rank records CLOCK_REALTIME (one machine, one clock) just
 * before and after its part of a phase; a phase's time is the latest end
 * minus the earliest start over all ranks, so skew in the barrier's release
 * can only lengthen it, never hide work. Bandwidth is model bytes (payload)
 * over that time, for the disk baseline and for dcp alike. The per-rank
 * records go through small files DIR/times.<rank> that rank 0 reads after a
 * final barrier. dcp_ctx_stats (plan/write/commit/read, bytes) is reported
 * for rank 0 and as the max (times) or sum (bytes) over ranks.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "dcp.h"

#define TMPFS_MAGIC_ 0x01021994L
#define RAMFS_MAGIC_ 0x858458f6L
#define GIB (1024.0 * 1024.0 * 1024.0)
#define MIB (1024.0 * 1024.0)

static int g_rank = 0;

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "dcp-bench rank %d: ", g_rank);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of this process (all threads, user + system) so far. */
static double cpu_now(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru)) return 0;
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* Bytes this process (all threads) caused to be read from the block
 * device so far (/proc/self/io read_bytes): what a load fetched from disk,
 * page cache hits excluded. 0 where the kernel does not say. */
static uint64_t device_read_now(void) {
  FILE *f = fopen("/proc/self/io", "r");
  if (!f) return 0;
  char line[128];
  unsigned long long v = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "read_bytes: %llu", &v) == 1) break;
  fclose(f);
  return v;
}

static uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* ---- arguments ---------------------------------------------------------- */

typedef struct args {
  const char *coll, *rendezvous, *dir;
  int layers, hidden, tp, load_tp, compress, keep, repeat;
  dcp_read_dedup dedup; /* the loads' read_dedup (--dedup) */
  dcp_dtype dtype;
  size_t io_bytes;
} args;

static void usage(void) {
  fprintf(stderr,
          "usage: dcp-bench [--coll mpi|file] [--rendezvous DIR] [--layers L] [--hidden H]\n"
          "                 [--tp T] [--load-tp T] [--dtype bf16|f32] [--dir DIR]\n"
          "                 [--compress] [--small] [--io-mib M] [--repeat R] [--keep]\n"
          "                 [--dedup auto|off|on]\n");
  exit(2);
}

static args parse(int argc, char **argv) {
  args a = {.coll = "mpi", .dir = "/var/tmp/dcp-bench", .layers = 4, .hidden = 4096,
            .dtype = DCP_BF16, .io_bytes = 16u << 20, .repeat = 3};
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i];
    int has = i + 1 < argc;
    const char *v = has ? argv[i + 1] : NULL;
    if (!strcmp(k, "--compress")) a.compress = 1;
    else if (!strcmp(k, "--keep")) a.keep = 1;
    else if (!strcmp(k, "--small")) a.layers = 2, a.hidden = 1024;
    else if (!has) usage();
    else if (!strcmp(k, "--coll")) a.coll = v, i++;
    else if (!strcmp(k, "--rendezvous")) a.rendezvous = v, i++;
    else if (!strcmp(k, "--dir")) a.dir = v, i++;
    else if (!strcmp(k, "--layers")) a.layers = atoi(v), i++;
    else if (!strcmp(k, "--hidden")) a.hidden = atoi(v), i++;
    else if (!strcmp(k, "--tp")) a.tp = atoi(v), i++;
    else if (!strcmp(k, "--load-tp")) a.load_tp = atoi(v), i++;
    else if (!strcmp(k, "--repeat")) a.repeat = atoi(v), i++;
    else if (!strcmp(k, "--io-mib")) a.io_bytes = (size_t)atoi(v) << 20, i++;
    else if (!strcmp(k, "--dedup")) {
      if (!strcmp(v, "auto")) a.dedup = DCP_READ_DEDUP_AUTO;
      else if (!strcmp(v, "off")) a.dedup = DCP_READ_DEDUP_OFF;
      else if (!strcmp(v, "on")) a.dedup = DCP_READ_DEDUP_ON;
      else usage();
      i++;
    } else if (!strcmp(k, "--dtype")) {
      if (!strcmp(v, "bf16")) a.dtype = DCP_BF16;
      else if (!strcmp(v, "f32")) a.dtype = DCP_F32;
      else usage();
      i++;
    } else usage();
  }
  if (a.layers < 1 || a.hidden < 1 || a.tp < 0 || a.load_tp < 0 || a.io_bytes == 0 ||
      a.repeat < 1 || a.repeat > 16)
    usage();
  return a;
}

/* ---- context and barrier ------------------------------------------------ */

static void make_dir(const char *p) {
  if (mkdir(p, 0777) && errno != EEXIST) die("mkdir %s: %s", p, strerror(errno));
}

static dcp_ctx *open_ctx(const args *a, char *rdv, size_t rdv_cap) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.coll = a->coll;
  cfg.timeout_ms = 600000;
  if (!strcmp(a->coll, "file")) {
    const char *r = getenv("DCP_TEST_RANK"), *w = getenv("DCP_TEST_WORLD");
    if (!r || !w) die("--coll file needs DCP_TEST_RANK/DCP_TEST_WORLD (run under dcp_launch)");
    cfg.rank = atoi(r);
    cfg.world_size = atoi(w);
    g_rank = cfg.rank;
    if (a->rendezvous) snprintf(rdv, rdv_cap, "%s", a->rendezvous);
    else snprintf(rdv, rdv_cap, "%s/rendezvous", a->dir);
    make_dir(rdv);
    cfg.rendezvous = rdv;
  }
  dcp_ctx *ctx;
  dcp_status rc = dcp_ctx_create(&cfg, &ctx);
  if (rc) die("dcp_ctx_create (coll %s): %s: %s", a->coll, dcp_strerror(rc), dcp_ctx_create_error());
  g_rank = dcp_ctx_rank(ctx);
  return ctx;
}

/* A barrier from the library's own collective, so the bench needs no MPI of
 * its own: a dcp_save of a one-item state (8 bytes per rank) into DIR/sync.
 * dcp_save closes every phase with an agreement, an allgather of every
 * rank's status, so no rank returns from a successful save before every
 * rank has entered it: that is a barrier. It costs a few small fsyncs, and
 * it is only ever called between timed regions. The timed regions do not
 * depend on how tightly it releases the ranks (see the timing note above). */
typedef struct barrier {
  dcp_ctx *ctx;
  dcp_state *st;
  char path[4096];
  uint64_t token;
} barrier;

static void barrier_init(barrier *b, dcp_ctx *ctx, const char *dir) {
  b->ctx = ctx;
  b->token = (uint64_t)dcp_ctx_rank(ctx);
  snprintf(b->path, sizeof b->path, "%s/sync", dir);
  if (dcp_state_create(ctx, &b->st) ||
      dcp_state_add_bytes(b->st, "token", DCP_SCOPE_PER_RANK, &b->token, sizeof b->token))
    die("barrier state: %s", dcp_ctx_last_error(ctx));
}

static void bench_barrier(barrier *b) {
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.flags = DCP_SAVE_OVERWRITE;
  dcp_status rc = dcp_save(b->ctx, b->st, b->path, &o);
  if (rc) die("barrier (dcp_save of %s): %s: %s", b->path, dcp_strerror(rc),
             dcp_ctx_last_error(b->ctx));
}

/* ---- the model ---------------------------------------------------------- */

enum { SHARD_DIM0, SHARD_DIM1, REPLICATED, NKIND };

typedef struct tensor {
  char fqn[96];
  int kind;
  uint32_t ndim;
  int64_t shape[2];
  uint64_t seed;
} tensor;

typedef struct model {
  tensor *t;
  size_t n;
  size_t es; /* element size */
  dcp_dtype dtype;
  uint64_t bytes;
} model;

static void add_tensor(model *m, int layer, const char *name, int kind, int64_t d0, int64_t d1) {
  tensor *t = &m->t[m->n];
  snprintf(t->fqn, sizeof t->fqn, "layers.%d.%s", layer, name);
  t->kind = kind;
  t->ndim = d1 ? 2 : 1;
  t->shape[0] = d0;
  t->shape[1] = d1;
  t->seed = mix(0xD0CB0000ull + m->n);
  uint64_t numel = (uint64_t)d0 * (uint64_t)(d1 ? d1 : 1);
  m->bytes += numel * m->es;
  m->n++;
}

static model build_model(const args *a) {
  model m = {.dtype = a->dtype, .es = dcp_dtype_size(a->dtype)};
  m.t = calloc((size_t)a->layers * 10, sizeof *m.t);
  if (!m.t) die("out of memory");
  int64_t h = a->hidden;
  static const char *vectors[] = {"input_norm.weight", "input_norm.bias", "attn.proj.bias",
                                  "post_norm.weight",  "post_norm.bias",  "mlp.fc2.bias"};
  for (int l = 0; l < a->layers; l++) {
    add_tensor(&m, l, "attn.qkv.weight", SHARD_DIM0, 3 * h, h);
    add_tensor(&m, l, "attn.proj.weight", SHARD_DIM1, h, h);
    add_tensor(&m, l, "mlp.fc1.weight", SHARD_DIM0, 4 * h, h);
    add_tensor(&m, l, "mlp.fc2.weight", SHARD_DIM1, h, 4 * h);
    for (size_t v = 0; v < sizeof vectors / sizeof *vectors; v++)
      add_tensor(&m, l, vectors[v], REPLICATED, h, 0);
  }
  return m;
}

/* Element `linear` of a tensor: a small float (|x| in [2^-10, 2^-2)) with
 * random sign and mantissa, as bf16 or f32 bits. */
static inline uint64_t value_bits(uint64_t seed, uint64_t linear, size_t es) {
  uint64_t r = mix(seed ^ linear);
  uint64_t exp = 117 + (r >> 56) % 8, sign = (r >> 63) & 1;
  if (es == 2) return sign << 15 | exp << 7 | (r & 0x7F);
  return sign << 31 | exp << 23 | (r & 0x7FFFFF);
}

static inline void put_value(uint8_t *p, uint64_t v, size_t es) {
  if (es == 2) {
    uint16_t x = (uint16_t)v;
    memcpy(p, &x, 2);
  } else {
    uint32_t x = (uint32_t)v;
    memcpy(p, &x, 4);
  }
}

static inline uint64_t get_value(const uint8_t *p, size_t es) {
  if (es == 2) {
    uint16_t x;
    memcpy(&x, p, 2);
    return x;
  }
  uint32_t x;
  memcpy(&x, p, 4);
  return x;
}

/* One rank's state over a [world/tp, tp] mesh. */
typedef struct rank_state {
  dcp_state *st;
  dcp_layout *layouts[NKIND];
  uint8_t **bufs;
  dcp_box *boxes;
  uint64_t held_bytes; /* bytes this rank holds, replicas included */
} rank_state;

static void build_state(dcp_ctx *ctx, const model *m, int32_t tp, int fill, rank_state *rs) {
  int32_t world = dcp_ctx_world_size(ctx), rank = dcp_ctx_rank(ctx);
  memset(rs, 0, sizeof *rs);
  rs->bufs = calloc(m->n, sizeof *rs->bufs);
  rs->boxes = calloc(m->n, sizeof *rs->boxes);
  if (!rs->bufs || !rs->boxes || dcp_state_create(ctx, &rs->st)) die("out of memory");
  int64_t mesh[2] = {world / tp, tp};
  const uint32_t tp_bit = 1u << 1; /* mesh dim 1 is TP */
  const uint32_t maps[NKIND][2] = {{tp_bit, 0}, {0, tp_bit}, {0, 0}};
  const uint32_t ndims[NKIND] = {2, 2, 1};
  for (int k = 0; k < NKIND; k++)
    if (dcp_layout_create(ctx, 2, mesh, NULL, ndims[k], maps[k], &rs->layouts[k]))
      die("dcp_layout_create: %s", dcp_ctx_last_error(ctx));
  for (size_t i = 0; i < m->n; i++) {
    const tensor *t = &m->t[i];
    dcp_box *b = &rs->boxes[i];
    if (dcp_layout_box(rs->layouts[t->kind], t->shape, rank, b))
      die("dcp_layout_box %s: %s", t->fqn, dcp_ctx_last_error(ctx));
    int64_t rows = b->size[0], cols = t->ndim == 2 ? b->size[1] : 1;
    size_t bytes = (size_t)(rows * cols) * m->es;
    uint8_t *p = malloc(bytes ? bytes : 1);
    if (!p) die("out of memory for %zu bytes of %s", bytes, t->fqn);
    if (fill) {
      int64_t gcols = t->ndim == 2 ? t->shape[1] : 1, c0 = t->ndim == 2 ? b->offset[1] : 0;
      uint8_t *q = p;
      for (int64_t r = 0; r < rows; r++) {
        uint64_t linear = (uint64_t)((b->offset[0] + r) * gcols + c0);
        for (int64_t c = 0; c < cols; c++, q += m->es)
          put_value(q, value_bits(t->seed, linear + (uint64_t)c, m->es), m->es);
      }
    } else {
      memset(p, 0xEE, bytes); /* a poison, and the pages are touched before timing */
    }
    rs->bufs[i] = p;
    rs->held_bytes += bytes;
    if (dcp_state_add_sharded(rs->st, t->fqn, m->dtype, t->ndim, t->shape,
                              rs->layouts[t->kind], p))
      die("dcp_state_add_sharded %s: %s", t->fqn, dcp_ctx_last_error(ctx));
  }
}

static void free_state(const model *m, rank_state *rs) {
  dcp_state_free(rs->st);
  for (int k = 0; k < NKIND; k++) dcp_layout_free(rs->layouts[k]);
  for (size_t i = 0; i < m->n; i++) free(rs->bufs[i]);
  free(rs->bufs);
  free(rs->boxes);
}

/* Check the first and last element of every local chunk and `per` others
 * at pseudo-random positions. Returns the number of mismatches. */
static uint64_t verify_sample(const model *m, const rank_state *rs, int per, uint64_t *checked) {
  uint64_t bad = 0;
  *checked = 0;
  for (size_t i = 0; i < m->n; i++) {
    const tensor *t = &m->t[i];
    const dcp_box *b = &rs->boxes[i];
    int64_t rows = b->size[0], cols = t->ndim == 2 ? b->size[1] : 1;
    int64_t n = rows * cols;
    if (n == 0) continue;
    int64_t gcols = t->ndim == 2 ? t->shape[1] : 1, c0 = t->ndim == 2 ? b->offset[1] : 0;
    for (int s = 0; s < per + 2; s++) {
      int64_t e = s == 0 ? 0 : s == 1 ? n - 1 : (int64_t)(mix((uint64_t)s * 7919u + i) % (uint64_t)n);
      int64_t r = e / cols, c = e % cols;
      uint64_t linear = (uint64_t)((b->offset[0] + r) * gcols + c0 + c);
      uint64_t want = value_bits(t->seed, linear, m->es);
      uint64_t got = get_value(rs->bufs[i] + (size_t)e * m->es, m->es);
      (*checked)++;
      if (got != want) {
        if (bad < 5)
          fprintf(stderr, "rank %d: %s element %" PRId64 " (local %" PRId64 "): 0x%" PRIx64
                  ", expected 0x%" PRIx64 "\n", g_rank, t->fqn, (int64_t)linear, e, got, want);
        bad++;
      }
    }
  }
  return bad;
}

/* ---- page cache --------------------------------------------------------- */

/* Drop the whole page cache where permitted (root outside a container);
 * returns 1 when it worked. */
static int drop_caches(void) {
  /* the files it matters for were fsync'ed or fdatasync'ed already; it only
   * drops clean pages */
  int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd < 0) return 0;
  int ok = write(fd, "3", 1) == 1;
  close(fd);
  return ok;
}

static void evict_file(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return;
  fdatasync(fd); /* DONTNEED only evicts clean pages */
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

/* Evict every regular file of dir; returns how many. */
static int evict_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    char p[4700];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (stat(p, &sb) || !S_ISREG(sb.st_mode)) continue;
    evict_file(p);
    n++;
  }
  closedir(d);
  return n;
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    char p[4700];
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

/* ---- the disk baseline -------------------------------------------------- */

static void disk_write(const char *path, uint64_t bytes, const uint8_t *buf, size_t io,
                       double *t0, double *tm, double *t1) {
  *t0 = wall_now();
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die("open %s: %s", path, strerror(errno));
  for (uint64_t done = 0; done < bytes;) {
    size_t n = bytes - done < io ? (size_t)(bytes - done) : io;
    ssize_t w = write(fd, buf, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die("write %s: %s", path, strerror(errno));
    done += (uint64_t)w;
  }
  *tm = wall_now();
  if (fsync(fd)) die("fsync %s: %s", path, strerror(errno));
  *t1 = wall_now();
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

static uint64_t disk_read(const char *path, uint8_t *buf, size_t io, double *t0, double *t1) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) die("open %s: %s", path, strerror(errno));
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  uint64_t done = 0;
  *t0 = wall_now();
  for (;;) {
    ssize_t r = read(fd, buf, io);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) die("read %s: %s", path, strerror(errno));
    if (r == 0) break;
    done += (uint64_t)r;
  }
  *t1 = wall_now();
  close(fd);
  return done;
}

/* ---- per-rank records --------------------------------------------------- */

enum { PH_DISK_W, PH_DISK_R, PH_SAVE, PH_LOAD, PH_LOAD_SAME, NPHASE };
#define MAXREP 16

typedef struct record {
  double t0[MAXREP][NPHASE], t1[MAXREP][NPHASE];
  uint64_t bytes[MAXREP][NPHASE]; /* bytes this rank moved in the disk phases */
  double tm[MAXREP];              /* disk write: write(2)s done, fsync starts */
  double cpu[MAXREP][NPHASE];     /* CPU seconds of this rank in the phase */
  uint64_t dev[MAXREP][NPHASE];   /* bytes it read from the block device then */
  dcp_stats st[MAXREP][NPHASE];   /* dcp_ctx_stats of the dcp phases */
  uint64_t checked, bad;
} record;

static void write_record(const char *dir, int32_t rank, const record *r) {
  char p[4352], tmp[4400];
  snprintf(p, sizeof p, "%s/times.%d", dir, (int)rank);
  snprintf(tmp, sizeof tmp, "%s.tmp", p);
  FILE *f = fopen(tmp, "wb");
  if (!f || fwrite(r, sizeof *r, 1, f) != 1 || fclose(f)) die("write %s", tmp);
  if (rename(tmp, p)) die("rename %s: %s", tmp, strerror(errno));
}

static void read_record(const char *dir, int32_t rank, record *r) {
  char p[4352];
  snprintf(p, sizeof p, "%s/times.%d", dir, (int)rank);
  FILE *f = fopen(p, "rb");
  if (!f || fread(r, sizeof *r, 1, f) != 1) die("read %s", p);
  fclose(f);
  unlink(p);
}

/* ---- report ------------------------------------------------------------- */

/* Latest end minus earliest start over the ranks. */
static double span(const record *all, int32_t world, int rep, int ph) {
  double lo = all[0].t0[rep][ph], hi = all[0].t1[rep][ph];
  for (int32_t r = 1; r < world; r++) {
    if (all[r].t0[rep][ph] < lo) lo = all[r].t0[rep][ph];
    if (all[r].t1[rep][ph] > hi) hi = all[r].t1[rep][ph];
  }
  return hi - lo;
}

/* The repetition whose time for phase ph is the median (lower median). */
static int median_rep(const record *all, int32_t world, int reps, int ph) {
  int order[MAXREP];
  for (int k = 0; k < reps; k++) order[k] = k;
  for (int i = 1; i < reps; i++)
    for (int k = i; k > 0 && span(all, world, order[k], ph) < span(all, world, order[k - 1], ph);
         k--) {
      int x = order[k];
      order[k] = order[k - 1];
      order[k - 1] = x;
    }
  return order[(reps - 1) / 2];
}

static double median(const double *v, int n) {
  double x[MAXREP];
  memcpy(x, v, (size_t)n * sizeof *x);
  for (int i = 1; i < n; i++)
    for (int k = i; k > 0 && x[k] < x[k - 1]; k--) {
      double t = x[k];
      x[k] = x[k - 1];
      x[k - 1] = t;
    }
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static uint64_t sum_bytes(const record *all, int32_t world, int rep, int ph) {
  uint64_t n = 0;
  for (int32_t r = 0; r < world; r++) n += all[r].bytes[rep][ph];
  return n;
}

static void print_stats(const char *what, const record *all, int32_t world, int rep, int ph,
                        double model_bytes) {
  const dcp_stats *s0 = &all[0].st[rep][ph];
  double mx[5] = {0};
  uint64_t wr = 0, rd = 0, coll = 0, syncs = 0;
  for (int32_t r = 0; r < world; r++) {
    const dcp_stats *x = &all[r].st[rep][ph];
    double v[5] = {x->plan_s, x->write_s, x->commit_s, x->read_s, x->total_s};
    for (int k = 0; k < 5; k++) mx[k] = v[k] > mx[k] ? v[k] : mx[k];
    wr += x->bytes_written, rd += x->bytes_read, coll += x->coll_bytes, syncs += x->sync_ops;
  }
  printf("%s (rep %d, dcp_ctx_stats)\n", what, rep + 1);
  if (ph == PH_SAVE) {
    printf("  rank 0: plan %.3f s  write %.3f s  commit %.3f s  total %.3f s\n", s0->plan_s,
           s0->write_s, s0->commit_s, s0->total_s);
    printf("  max:    plan %.3f s  write %.3f s  commit %.3f s  total %.3f s\n", mx[0], mx[1],
           mx[2], mx[4]);
    printf("  bytes written %.3f GiB (sum over ranks, %.4fx model bytes), %" PRIu64
           " syncs, collective %.1f KiB\n",
           (double)wr / GIB, (double)wr / model_bytes, syncs, (double)coll / 1024.0);
  } else {
    printf("  rank 0: plan %.3f s  read %.3f s  total %.3f s\n", s0->plan_s, s0->read_s,
           s0->total_s);
    printf("  max:    plan %.3f s  read %.3f s  total %.3f s\n", mx[0], mx[3], mx[4]);
    printf("  bytes read %.3f GiB (sum over ranks, %.4fx model bytes), collective %.1f MiB\n",
           (double)rd / GIB, (double)rd / model_bytes, (double)coll / MIB);
  }
}

/* "RATIO|key|median|min|max|n|target|what": one figure over n repetitions. */
static void ratio_line(const char *key, const double *v, int n, const char *target,
                       const char *what) {
  double lo = v[0], hi = v[0];
  for (int k = 1; k < n; k++) lo = v[k] < lo ? v[k] : lo, hi = v[k] > hi ? v[k] : hi;
  printf("RATIO|%s|%.3f|%.3f|%.3f|%d|%s|%s\n", key, median(v, n), lo, hi, n, target, what);
}

static void report(const args *a, const model *m, int32_t world, int32_t tp, int32_t load_tp,
                   int reps, const record *all, int dropped) {
  double mb = (double)m->bytes;
  printf("\n%-4s %-12s %-12s %-18s %-18s %s\n", "rep", "disk write", "disk read",
         "save / disk write", "load / disk read", "load same / disk read");
  for (int k = 0; k < reps; k++) {
    double dw = (double)sum_bytes(all, world, k, PH_DISK_W) / span(all, world, k, PH_DISK_W);
    double dr = (double)sum_bytes(all, world, k, PH_DISK_R) / span(all, world, k, PH_DISK_R);
    double sv = mb / span(all, world, k, PH_SAVE), ld = mb / span(all, world, k, PH_LOAD);
    double ls = mb / span(all, world, k, PH_LOAD_SAME);
    printf("%-4d %6.0f MiB/s %6.0f MiB/s %6.0f MiB/s %.2fx %6.0f MiB/s %.2fx %6.0f MiB/s %.2fx\n",
           k + 1, dw / MIB, dr / MIB, sv / MIB, sv / dw, ld / MIB, ld / dr, ls / MIB, ls / dr);
  }
  double ratio[3][MAXREP];
  for (int k = 0; k < reps; k++) {
    double dw = (double)sum_bytes(all, world, k, PH_DISK_W) / span(all, world, k, PH_DISK_W);
    double dr = (double)sum_bytes(all, world, k, PH_DISK_R) / span(all, world, k, PH_DISK_R);
    ratio[0][k] = mb / span(all, world, k, PH_SAVE) / dw;
    ratio[1][k] = mb / span(all, world, k, PH_LOAD) / dr;
    ratio[2][k] = mb / span(all, world, k, PH_LOAD_SAME) / dr;
  }
  printf("median of the per-repetition ratios (each against the baseline of its own repetition):"
         "\n  save %.2fx disk write   load %.2fx disk read   load same %.2fx disk read\n",
         median(ratio[0], reps), median(ratio[1], reps), median(ratio[2], reps));
  double rd_ratio[MAXREP], dev_ratio[MAXREP];
  for (int k = 0; k < reps; k++) {
    uint64_t rd = 0, dev = 0;
    for (int32_t r = 0; r < world; r++)
      rd += all[r].st[k][PH_LOAD].bytes_read, dev += all[r].dev[k][PH_LOAD];
    rd_ratio[k] = (double)rd / mb;
    dev_ratio[k] = (double)dev / mb;
  }
  /* for tools/dev.sh bench: median, min and max over the repetitions */
  ratio_line("disk.save", ratio[0], reps, ">= 0.95", "sync save / same-run disk write");
  char what[160];
  snprintf(what, sizeof what, "cold resharded load (TP %d -> %d) / disk read", (int)tp,
           (int)load_tp);
  ratio_line("disk.load_resharded", ratio[1], reps, ">= 0.90", what);
  ratio_line("disk.load_same", ratio[2], reps, ">= 0.97", "cold same-layout load / disk read");
  ratio_line("disk.load_bytes", rd_ratio, reps, "<= 1.05",
             "bytes read from storage / bytes the resharded load needs");
  /* what the disk served: replicas on one host re-read cached pages, which
   * the storage figure above counts and this one does not */
  ratio_line("disk.load_device_bytes", dev_ratio, reps, "<= 1.05",
             "bytes read from the block device (/proc/self/io) / bytes the resharded load needs");
  static const char *names[NPHASE] = {"disk write", "disk read", "save", "load", "load same"};
  double bw[NPHASE];
  int med[NPHASE];
  printf("\nmedian times of %d repetitions (bandwidth: bytes / time; time: latest end - earliest "
         "start over ranks; cpu: user + system seconds, summed over ranks)\n",
         reps);
  for (int ph = 0; ph < NPHASE; ph++) {
    med[ph] = median_rep(all, world, reps, ph);
    double t = span(all, world, med[ph], ph);
    double bytes = ph <= PH_DISK_R ? (double)sum_bytes(all, world, med[ph], ph) : mb;
    bw[ph] = bytes / t;
    double cpu = 0;
    for (int32_t r = 0; r < world; r++) cpu += all[r].cpu[med[ph]][ph];
    printf("%-11s %6.2f GiB %6.2f s %6.0f MiB/s cpu %5.2f s", names[ph], bytes / GIB, t,
           bw[ph] / MIB, cpu);
    if (ph == PH_DISK_W) {
      int k = med[ph];
      double lo = all[0].t0[k][ph], wmax = 0; /* when the last write(2) returned */
      for (int32_t r = 1; r < world; r++) lo = all[r].t0[k][ph] < lo ? all[r].t0[k][ph] : lo;
      for (int32_t r = 0; r < world; r++) wmax = all[r].tm[k] - lo > wmax ? all[r].tm[k] - lo : wmax;
      printf("  %d writers, write(2) %zu MiB + fsync (write(2)s done at %.2f s)\n", (int)world,
             a->io_bytes >> 20, wmax);
    }
    else if (ph == PH_DISK_R)
      printf("  %d readers, read(2) %zu MiB, cold (%s)\n", (int)world, a->io_bytes >> 20,
             dropped ? "drop_caches + fadvise" : "fadvise DONTNEED only");
    else if (ph == PH_SAVE)
      printf("  %.2fx disk write  (TP %d%s)\n", bw[ph] / bw[PH_DISK_W], (int)tp,
             a->compress ? ", zstd" : "");
    else if (ph == PH_LOAD)
      printf("  %.2fx disk read   (TP %d -> %d, cold)\n", bw[ph] / bw[PH_DISK_R], (int)tp,
             (int)load_tp);
    else
      printf("  %.2fx disk read   (TP %d -> %d, cold)\n", bw[ph] / bw[PH_DISK_R], (int)tp,
             (int)tp);
  }
  printf("\n");
  print_stats("save", all, world, med[PH_SAVE], PH_SAVE, mb);
  for (int i = 0; i < (reps > 1 ? 2 : 1); i++) { /* the first and the last save */
    int k = i ? reps - 1 : 0;
    uint64_t pc = 0;
    int hits = 0;
    for (int32_t r = 0; r < world; r++)
      pc += all[r].st[k][PH_SAVE].plan_coll_bytes, hits += all[r].st[k][PH_SAVE].plan_cache_hit;
    printf("  save %d: plan cache hit on %d of %d ranks, plan collective %" PRIu64
           " B (sum over ranks)%s\n", k + 1, hits, (int)world, pc,
           k == 0 && hits == world ? " (the plan recorded in DIR/ckpt/.plan)" : "");
  }
  print_stats("load", all, world, med[PH_LOAD], PH_LOAD, mb);
  print_stats("load same", all, world, med[PH_LOAD_SAME], PH_LOAD_SAME, mb);
  uint64_t checked = 0, bad = 0;
  for (int32_t r = 0; r < world; r++) checked += all[r].checked, bad += all[r].bad;
  printf("verify: %" PRIu64 " sampled values checked after the loads, %" PRIu64 " wrong\n",
         checked, bad);
}

/* ---- main --------------------------------------------------------------- */

/* Rank 0 evicts every file of dir from the page cache between barriers. */
static int cold_cache(barrier *bar, int32_t rank, const char *dir) {
  int dropped = 0;
  bench_barrier(bar);
  if (rank == 0) {
    evict_dir(dir);
    dropped = drop_caches();
  }
  bench_barrier(bar);
  return dropped;
}

static dcp_read_dedup load_dedup; /* --dedup, the same on every rank */

static void timed_load(dcp_ctx *ctx, rank_state *rs, const char *ckpt, record *rec, int k,
                       int ph) {
  dcp_load_options lo;
  dcp_load_options_init(&lo);
  lo.read_dedup = load_dedup;
  double c0 = cpu_now();
  uint64_t d0 = device_read_now();
  rec->t0[k][ph] = wall_now();
  dcp_status rc = dcp_load(ctx, rs->st, ckpt, &lo);
  rec->t1[k][ph] = wall_now();
  rec->cpu[k][ph] = cpu_now() - c0;
  rec->dev[k][ph] = device_read_now() - d0;
  if (rc) die("dcp_load: %s: %s", dcp_strerror(rc), dcp_ctx_last_error(ctx));
  rec->st[k][ph].struct_size = sizeof rec->st[k][ph];
  dcp_ctx_stats(ctx, &rec->st[k][ph]);
}

static void poison(const model *m, rank_state *rs) {
  for (size_t i = 0; i < m->n; i++) {
    const dcp_box *b = &rs->boxes[i];
    int64_t n = b->size[0] * (m->t[i].ndim == 2 ? b->size[1] : 1);
    memset(rs->bufs[i], 0xEE, (size_t)n * m->es);
  }
}

/* Everything one repetition needs. */
typedef struct bench_ctx {
  dcp_ctx *ctx;
  barrier *bar;
  const model *m;
  rank_state *rs, *rl; /* the save layout (also loaded into), the other layout */
  record *rec;
  const dcp_save_options *so;
  const char *dir, *ckpt, *base;
  uint8_t *iobuf;
  size_t io;
  uint64_t share;
  int32_t rank;
  int dropped; /* drop_caches worked every time */
} bench_ctx;

/* The disk baseline: the same bytes, the same writers, the same directory. */
static void run_baseline(bench_ctx *b, int k) {
  record *rec = b->rec;
  bench_barrier(b->bar);
  double c0 = cpu_now();
  disk_write(b->base, b->share, b->iobuf, b->io, &rec->t0[k][PH_DISK_W], &rec->tm[k],
             &rec->t1[k][PH_DISK_W]);
  rec->cpu[k][PH_DISK_W] = cpu_now() - c0;
  rec->bytes[k][PH_DISK_W] = b->share;
  b->dropped &= cold_cache(b->bar, b->rank, b->dir); /* the files were fadvised already */
  c0 = cpu_now();
  rec->bytes[k][PH_DISK_R] =
      disk_read(b->base, b->iobuf, b->io, &rec->t0[k][PH_DISK_R], &rec->t1[k][PH_DISK_R]);
  rec->cpu[k][PH_DISK_R] = cpu_now() - c0;
  bench_barrier(b->bar);
  unlink(b->base);
}

static void run_dcp(bench_ctx *b, int k) {
  record *rec = b->rec;
  uint64_t checked;
  bench_barrier(b->bar);
  double c0 = cpu_now();
  rec->t0[k][PH_SAVE] = wall_now();
  dcp_status rc = dcp_save(b->ctx, b->rs->st, b->ckpt, b->so);
  rec->t1[k][PH_SAVE] = wall_now();
  rec->cpu[k][PH_SAVE] = cpu_now() - c0;
  if (rc) die("dcp_save: %s: %s", dcp_strerror(rc), dcp_ctx_last_error(b->ctx));
  rec->st[k][PH_SAVE].struct_size = sizeof rec->st[k][PH_SAVE];
  dcp_ctx_stats(b->ctx, &rec->st[k][PH_SAVE]);

  /* cold load into the other layout */
  poison(b->m, b->rl);
  b->dropped &= cold_cache(b->bar, b->rank, b->ckpt);
  timed_load(b->ctx, b->rl, b->ckpt, rec, k, PH_LOAD);
  rec->bad += verify_sample(b->m, b->rl, 64, &checked);
  rec->checked += checked;

  /* cold load into the save layout (restores what the next save writes) */
  poison(b->m, b->rs);
  b->dropped &= cold_cache(b->bar, b->rank, b->ckpt);
  timed_load(b->ctx, b->rs, b->ckpt, rec, k, PH_LOAD_SAME);
  rec->bad += verify_sample(b->m, b->rs, 64, &checked);
  rec->checked += checked;
  if (rec->bad) die("the load returned wrong values (see above)");
}

int main(int argc, char **argv) {
  args a = parse(argc, argv);
  load_dedup = a.dedup;
  make_dir(a.dir);
  char rdv[4096];
  dcp_ctx *ctx = open_ctx(&a, rdv, sizeof rdv);
  int32_t world = dcp_ctx_world_size(ctx), rank = dcp_ctx_rank(ctx);
  int32_t tp = a.tp ? a.tp : world;
  if (world % tp) die("--tp %d does not divide the world size %d", (int)tp, (int)world);
  int32_t load_tp = a.load_tp;
  if (!load_tp) load_tp = tp % 2 == 0 ? tp / 2 : world % (2 * tp) == 0 ? 2 * tp : tp;
  if (world % load_tp) die("--load-tp %d does not divide the world size %d", (int)load_tp,
                           (int)world);
  int reps = a.repeat;

  char ckpt[4352];
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", a.dir);
  barrier bar;
  barrier_init(&bar, ctx, a.dir);
  model m = build_model(&a);
  record *rec = calloc(1, sizeof *rec);
  if (!rec) die("out of memory");

  if (rank == 0) {
    struct statfs sf;
    if (statfs(a.dir, &sf) == 0 && (sf.f_type == TMPFS_MAGIC_ || sf.f_type == RAMFS_MAGIC_))
      fprintf(stderr, "dcp-bench: WARNING: %s is on tmpfs/ramfs: this measures memory, not a "
              "disk (use --dir on a real disk)\n", a.dir);
    printf("dcp-bench: libdcp %s, coll %s, %d ranks, dir %s, %d repetitions\n",
           dcp_version_string(), a.coll, (int)world, a.dir, reps);
    printf("model: %d layers, hidden %d, %s, %zu tensors; save mesh [DP %d, TP %d], load mesh "
           "[DP %d, TP %d]%s\n",
           a.layers, a.hidden, dcp_dtype_name(m.dtype), m.n, (int)(world / tp), (int)tp,
           (int)(world / load_tp), (int)load_tp, a.compress ? ", zstd" : "");
    fflush(stdout);
  }

  rank_state rs, rl; /* the save layout (also loaded into), the other layout */
  double t = wall_now();
  build_state(ctx, &m, tp, 1, &rs);
  double fill_s = wall_now() - t;
  build_state(ctx, &m, load_tp, 0, &rl);
  if (rank == 0) {
    printf("model bytes %.3f GiB (%" PRIu64 "); per rank: holds %.3f GiB at TP %d (filled in "
           "%.2f s), %.3f GiB at TP %d; writes ~%.3f GiB\n",
           (double)m.bytes / GIB, m.bytes, (double)rs.held_bytes / GIB, (int)tp, fill_s,
           (double)rl.held_bytes / GIB, (int)load_tp, (double)m.bytes / world / GIB);
    fflush(stdout);
  }

  uint64_t share = m.bytes / (uint64_t)world;
  if (rank == world - 1) share += m.bytes % (uint64_t)world;
  uint8_t *iobuf = malloc(a.io_bytes);
  if (!iobuf) die("out of memory");
  for (size_t k = 0; k + 8 <= a.io_bytes; k += 8) {
    uint64_t v = mix(k ^ ((uint64_t)rank << 48));
    memcpy(iobuf + k, &v, 8);
  }
  char base[4352];
  snprintf(base, sizeof base, "%s/baseline.%d", a.dir, (int)rank);
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.flags = DCP_SAVE_OVERWRITE | (a.compress ? DCP_SAVE_COMPRESS : 0);

  bench_ctx bc = {.ctx = ctx, .bar = &bar, .m = &m, .rs = &rs, .rl = &rl, .rec = rec,
                  .so = &so, .dir = a.dir, .ckpt = ckpt, .base = base, .iobuf = iobuf,
                  .io = a.io_bytes, .share = share, .rank = rank, .dropped = 1};
  for (int k = 0; k < reps; k++) {
    /* odd repetitions run dcp first, so neither side always follows the
     * other's deletes and truncations */
    if (k % 2 == 0) run_baseline(&bc, k), run_dcp(&bc, k);
    else run_dcp(&bc, k), run_baseline(&bc, k);
  }
  int dropped = bc.dropped;
  free(iobuf);
  free_state(&m, &rs);
  free_state(&m, &rl);

  /* gather the records at rank 0 */
  write_record(a.dir, rank, rec);
  bench_barrier(&bar);
  int rc = 0;
  if (rank == 0) {
    record *all = calloc((size_t)world, sizeof *all);
    if (!all) die("out of memory");
    for (int32_t r = 0; r < world; r++) read_record(a.dir, r, &all[r]);
    report(&a, &m, world, tp, load_tp, reps, all, dropped);
    free(all);
    if (!a.keep) remove_dir(ckpt);
  }
  free(rec);
  dcp_state_free(bar.st);
  free(m.t);
  dcp_ctx_free(ctx);
  if (rank == 0) {
    remove_dir(bar.path);
    if (!strcmp(a.coll, "file") && !a.rendezvous) rmdir(rdv); /* only when empty */
  }
  return rc;
}

/* recovery-bench — restore time of one state from the memory tier against
 * storage, in one run, next to memcpy and a plain disk read of the same
 * bytes (docs/recovery.md, docs/benchmarks.md). It prints figures and
 * asserts nothing about them (a restore with a wrong value is still an
 * error).
 *
 *   recovery-bench [--dir DIR] [--mib M] [--tensors N] [--repeat R]
 *                  [--peers PORT]
 *
 * The state is N float tensors of M MiB in all (per rank) plus a small
 * bytes item. The "trainer" context async-saves it into DIR/ckpt in keep
 * mode; its writer keeps the data file in memory. Then, R times, a second
 * context (a restarted trainer: it has no writer of its own) restores the
 * state into pre-faulted buffers:
 *   memory       with the memory tier set (same job): the writer's snapshot;
 *   storage      without it, the checkpoint's files evicted from the page
 *                cache first (fdatasync + posix_fadvise DONTNEED: dropping
 *                the whole cache needs root);
 *   page cache   without it, the files left in the page cache;
 * and the baselines on the same byte count:
 *   memcpy       one copy between two pre-faulted buffers;
 *   disk read    a file of those bytes in DIR, written, fsync'ed and
 *                evicted, read back with 16 MiB reads.
 * With --peers PORT: two ranks (this process and a fork), trainers and
 * writers over gloo on 127.0.0.1 (stores at PORT+1 ...), one replica at
 * rank + 1. After the rounds above, rank 0's writer drops its snapshot
 * (dcp_memtier_stop: its host "lost" it) and R more restores follow:
 *   peer         rank 0 pulls its copy from rank 1's writer over TCP.
 * Rank 0's figures are printed. Every restore is checked on every element. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dcp.h"

#define IO ((size_t)16 << 20)

static void die(const char *what, const char *msg) {
  fprintf(stderr, "recovery-bench: %s: %s\n", what, msg ? msg : "");
  exit(1);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float value(size_t t, size_t i) { return (float)((i * 2654435761u + t * 97) % 65521); }

typedef struct bench {
  const char *dir;
  size_t mib, ntensors, repeat;
  int port;            /* --peers: gloo stores from port + 1; 0: one rank */
  int rank, world;
  size_t per;          /* floats per tensor */
  float **src, **dst;  /* the saved values, the restore targets */
  char job[64], ckpt[4096];
} bench;

static void parse(int argc, char **argv, bench *b) {
  *b = (bench){.dir = "/tmp/recovery-bench", .mib = 256, .ntensors = 16, .repeat = 3};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--dir")) b->dir = argv[i + 1];
    else if (!strcmp(argv[i], "--mib")) b->mib = strtoul(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--tensors")) b->ntensors = strtoul(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--repeat")) b->repeat = strtoul(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--peers")) b->port = atoi(argv[i + 1]);
    else die("unknown option", argv[i]);
  }
  if (!b->mib || !b->ntensors || !b->repeat) die("bad option", "zero");
  b->per = b->mib * ((size_t)1 << 20) / b->ntensors / sizeof(float);
  snprintf(b->ckpt, sizeof b->ckpt, "%s/ckpt", b->dir);
  snprintf(b->job, sizeof b->job, "recovery-bench-%d", (int)getpid());
  b->world = b->port ? 2 : 1;
}

static uint64_t payload(const bench *b) { return (uint64_t)b->per * b->ntensors * sizeof(float); }

static dcp_state *state_over(dcp_ctx *ctx, const bench *b, float **bufs, char *blob) {
  dcp_state *st;
  if (dcp_state_create(ctx, &st)) die("state", dcp_ctx_last_error(ctx));
  for (size_t t = 0; t < b->ntensors; t++) {
    char fqn[32];
    int64_t shape[1] = {(int64_t)(b->per * (size_t)b->world)};
    int64_t off[1] = {(int64_t)b->per * b->rank}, size[1] = {(int64_t)b->per};
    snprintf(fqn, sizeof fqn, "layer%zu.w", t);
    if (dcp_state_add_tensor(st, fqn, DCP_F32, 1, shape) ||
        dcp_state_add_chunk(st, fqn, off, size, bufs[t]))
      die("state", dcp_ctx_last_error(ctx));
  }
  if (dcp_state_add_bytes(st, "step", DCP_SCOPE_REPLICATED, blob, 16))
    die("state", dcp_ctx_last_error(ctx));
  return st;
}

/* A context (slot: which gloo store, with --peers), with the memory tier
 * when tier is set. */
static dcp_ctx *new_ctx(const bench *b, int tier, int slot) {
  dcp_ctx *ctx;
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  char store[64], wstore[80];
  snprintf(store, sizeof store, "store=127.0.0.1:%d", b->port + slot);
  snprintf(wstore, sizeof wstore, "store=127.0.0.1:%d,job=dcpwriter", b->port + 9);
  if (b->world > 1) {
    cfg.coll = "gloo";
    cfg.coll_options = store;
    cfg.rank = b->rank;
    cfg.world_size = b->world;
    cfg.timeout_ms = 300000;
  }
  if (dcp_ctx_create(&cfg, &ctx)) die("context", dcp_ctx_create_error());
  if (b->world > 1 && dcp_async_set_coordination(ctx, "gloo", NULL, wstore))
    die("coordination", dcp_ctx_last_error(ctx));
  if (!tier) return ctx;
  dcp_memtier_options o;
  dcp_memtier_options_init(&o);
  o.keep = 1;
  o.job = b->job;
  o.replicas = b->world > 1;
  o.peer_jump = 1;
  if (dcp_memtier_set(ctx, &o)) die("memtier", dcp_ctx_last_error(ctx));
  return ctx;
}

static void evict_dir(const char *dir) {
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    int fd = open(p, O_RDONLY);
    if (fd < 0) continue;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
  if (d) closedir(d);
}

/* One restore into b->dst through ctx; its time, and the stats. */
static double restore(dcp_ctx *ctx, bench *b, dcp_stats *s) {
  char blob[16];
  dcp_state *st = state_over(ctx, b, b->dst, blob);
  for (size_t t = 0; t < b->ntensors; t++) memset(b->dst[t], 0, b->per * sizeof(float));
  double t0 = now();
  if (dcp_load(ctx, st, b->ckpt, NULL)) die("load", dcp_ctx_last_error(ctx));
  double t1 = now();
  for (size_t t = 0; t < b->ntensors; t++)
    for (size_t i = 0; i < b->per; i++)
      if (b->dst[t][i] != value(t, b->per * (size_t)b->rank + i)) die("restore", "a wrong value");
  s->struct_size = sizeof *s;
  dcp_ctx_stats(ctx, s);
  dcp_state_free(st);
  return t1 - t0;
}

static double time_memcpy(const bench *b) {
  double t0 = now();
  for (size_t t = 0; t < b->ntensors; t++) memcpy(b->dst[t], b->src[t], b->per * sizeof(float));
  return now() - t0;
}

static double time_disk_read(const bench *b) {
  char p[4200];
  snprintf(p, sizeof p, "%s/raw.bin", b->dir);
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die("open", strerror(errno));
  for (size_t t = 0; t < b->ntensors; t++)
    if (write(fd, b->src[t], b->per * sizeof(float)) != (ssize_t)(b->per * sizeof(float)))
      die("write", strerror(errno));
  fsync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
  fd = open(p, O_RDONLY);
  double t0 = now();
  for (size_t t = 0; t < b->ntensors; t++) {
    uint8_t *at = (uint8_t *)b->dst[t];
    for (size_t done = 0, len = b->per * sizeof(float); done < len;) {
      ssize_t n = read(fd, at + done, len - done < IO ? len - done : IO);
      if (n <= 0) die("read", strerror(errno));
      done += (size_t)n;
    }
  }
  double t = now() - t0;
  close(fd);
  unlink(p);
  return t;
}

/* Save the state from the trainer's context in keep mode, and wait until
 * its writer holds the snapshot (it copies it after the save). */
static void save_kept(dcp_ctx *trainer, dcp_ctx *probe, bench *b) {
  char blob[16] = "step-100";
  dcp_state *st = state_over(trainer, b, b->src, blob);
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.flags = DCP_SAVE_OVERWRITE;
  dcp_async *h;
  double t0 = now();
  if (dcp_async_save(trainer, st, b->ckpt, &o, &h) || dcp_async_wait(h))
    die("async save", dcp_ctx_last_error(trainer));
  double t1 = now();
  dcp_async_free(h);
  dcp_state_free(st);
  dcp_stats s = {0};
  if (b->world > 1) { /* probing is collective: give the writers their time */
    sleep(3);
    if (!b->rank) printf("async save (keep mode, one peer) %.3f s\n", t1 - t0);
    return;
  }
  for (int i = 0; i < 600; i++) { /* up to a minute */
    dcp_state *one;
    char got[16];
    if (dcp_state_create(probe, &one) ||
        dcp_state_add_bytes(one, "step", DCP_SCOPE_REPLICATED, got, 16) ||
        dcp_load(probe, one, b->ckpt, NULL))
      die("probe", dcp_ctx_last_error(probe));
    dcp_state_free(one);
    s.struct_size = sizeof s;
    dcp_ctx_stats(probe, &s);
    if (s.mem_tier == DCP_MEMTIER_USED) break;
    nanosleep(&(struct timespec){0, 100000000}, NULL);
  }
  if (s.mem_tier != DCP_MEMTIER_USED) die("keep", "the writer kept no snapshot");
  printf("async save (keep mode) %.3f s; snapshot kept %.3f s after the save returned\n",
         t1 - t0, now() - t1);
}

static float **alloc_set(const bench *b, int fill) {
  float **v = calloc(b->ntensors, sizeof *v);
  for (size_t t = 0; v && t < b->ntensors; t++) {
    if (!(v[t] = malloc(b->per * sizeof(float)))) die("malloc", "out of memory");
    for (size_t i = 0; i < b->per; i++)
      v[t][i] = fill ? value(t, b->per * (size_t)b->rank + i) : 0.0f;
  }
  if (!v) die("malloc", "out of memory");
  return v;
}

static void row(const char *what, double t, uint64_t bytes, double ref) {
  printf("%-12s %9.4f s %8.2f GB/s %8.2fx\n", what, t, (double)bytes / t / 1e9, ref / t);
}

static void say(const bench *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const bench *b, const char *fmt, ...) {
  if (b->rank) return;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
}

/* R rounds of memory, storage and page-cache restores and the baselines. */
static void rounds(bench *b, dcp_ctx *mem, dcp_ctx *disk) {
  say(b, "%-12s %11s %13s %9s\n", "restore", "time", "bandwidth", "vs storage");
  for (size_t r = 0; r < b->repeat; r++) {
    dcp_stats sm, sd, sc;
    double tm = restore(mem, b, &sm);
    if (sm.mem_tier != DCP_MEMTIER_USED) die("memory restore", "the snapshot was not used");
    evict_dir(b->ckpt);
    double td = restore(disk, b, &sd);
    double tc = restore(disk, b, &sc);
    if (b->rank) continue;
    double tcpy = time_memcpy(b), tread = time_disk_read(b);
    printf("-- repetition %zu: memory %llu B from memory, %llu from storage (plan %.3f s, "
           "read %.3f s); storage %llu B (plan %.3f s, read %.3f s)\n",
           r + 1, (unsigned long long)sm.mem_read_bytes, (unsigned long long)sm.data_read_bytes,
           sm.plan_s, sm.read_s, (unsigned long long)sd.data_read_bytes, sd.plan_s, sd.read_s);
    row("memory", tm, payload(b), td);
    row("storage", td, payload(b), td);
    row("page cache", tc, payload(b), td);
    row("memcpy", tcpy, payload(b), td);
    row("disk read", tread, payload(b), td);
  }
}

/* --peers: rank 0's snapshot is dropped; R restores pull it from rank 1. */
static void peer_rounds(bench *b, dcp_ctx *trainer, dcp_ctx *mem, dcp_ctx *disk) {
  if (b->rank == 0 && dcp_memtier_stop(trainer)) die("stop", dcp_ctx_last_error(trainer));
  for (size_t r = 0; r < b->repeat; r++) {
    dcp_stats sp, sd;
    double tp = restore(mem, b, &sp);
    if (sp.mem_tier != (b->rank ? DCP_MEMTIER_USED : DCP_MEMTIER_PEER))
      die("peer restore", "no copy was pulled");
    evict_dir(b->ckpt);
    double td = restore(disk, b, &sd);
    say(b, "-- peer repetition %zu: %llu B pulled from rank 1, %llu from storage\n", r + 1,
        (unsigned long long)sp.peer_recv_bytes, (unsigned long long)sp.data_read_bytes);
    if (!b->rank) row("peer", tp, payload(b), td), row("storage", td, payload(b), td);
  }
}

int main(int argc, char **argv) {
  bench b;
  parse(argc, argv, &b);
  mkdir(b.dir, 0755);
  pid_t child = b.world > 1 ? fork() : -1;
  if (child == 0) b.rank = 1;
  b.src = alloc_set(&b, 1);
  b.dst = alloc_set(&b, 0);
  dcp_ctx *trainer = new_ctx(&b, 1, 1), *mem = new_ctx(&b, 1, 2), *disk = new_ctx(&b, 0, 3);
  say(&b, "recovery-bench: %d rank(s), %zu tensors, %.1f MiB per rank, %zu repetitions, %s\n",
      b.world, b.ntensors, (double)payload(&b) / (1 << 20), b.repeat, b.ckpt);
  save_kept(trainer, mem, &b);
  rounds(&b, mem, disk);
  if (b.world > 1) peer_rounds(&b, trainer, mem, disk);
  dcp_memtier_stop(trainer);
  dcp_ctx_free(disk);
  dcp_ctx_free(mem);
  dcp_ctx_free(trainer);
  if (child == 0) _exit(0);
  int status = 0;
  if (child > 0 && (waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
                    WEXITSTATUS(status)))
    die("rank 1", "failed");
  return 0;
}

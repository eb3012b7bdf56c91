/* recovery_test — the memory tier (docs/recovery.md) with real processes:
 * a forked trainer async-saves in keep mode and dies of SIGKILL; its
 * writer survives it; a fresh trainer (this process) loads.
 *
 *   recovery_test restart  --dir D   the load reads every data byte from
 *                          the writer's memory (stats), also resharded; a
 *                          trainer of another job finds nothing there
 *   recovery_test corrupt  --dir D   a byte of the snapshot is flipped (in
 *                          the writer's memfd): that block comes from
 *                          storage, the values are exact
 *   recovery_test stale    --dir D   a sync save replaced the checkpoint
 *                          after the kept one: the snapshot is not used
 *   recovery_test kill-writer --dir D  the writer died too: storage
 *   dcp_launch N T recovery_test restart-wN --dir D   N ranks over the
 *                          file collective, writers too: each rank's
 *                          restart loads a shifted row range, its own
 *                          file's rows from memory, the rest from storage
 *   dcp_launch 4 T recovery_test peers --dir D [--gloo HOST:PORT]   peer
 *                          replication (one replica, jump 2): "host" A
 *                          (ranks 0 and 1) loses its writers too; their
 *                          restart pulls their snapshots from ranks 2 and
 *                          3's writers (tests/hosts: 2 network namespaces,
 *                          gloo over TCP)
 *   dcp_launch 4 T recovery_test peers-lost3 --dir D   the same with rank
 *                          2's writer lost too: ranks 0 and 2 (whose copy
 *                          holders are gone) read storage, rank 1 pulls
 *
 * Every load is compared element by element; dcp_memtier_stop then ends
 * the lingering writer. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The collective timeout with peers: host A's writers die, and the others'
 * collective waits this long for them when it closes. Not less: a loaded CI
 * machine (10 s was missed once by a writer's replication under -j2). */
#define PEERS_TIMEOUT_MS 20000

#include "async/async_int.h"
#include "async_kit.h"
#include "dcp.h"
#include <xxhash.h>

#define ROWS 512
#define COLS 1024 /* 2 MiB of float */
#define NBYTES 40

#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "recovery_test:%d: ", __LINE__);               \
      fprintf(stderr, __VA_ARGS__);                                   \
      fprintf(stderr, "\n");                                          \
      exit(1);                                                        \
    }                                                                 \
  } while (0)
#define OK(call, ctx) CHECK((call) == DCP_OK, "%s: %s", #call, dcp_ctx_last_error(ctx))

static char g_job[64];
static int g_rank, g_world = 1; /* DCP_TEST_RANK / DCP_TEST_WORLD (dcp_launch) */
static char g_rdv[600];          /* the trainers' rendezvous (several ranks) */
static uint32_t g_replicas;      /* peer replication (mode peers) */
static int g_lost = 2;           /* peers: ranks [0, g_lost) lose their writers */
static const char *g_gloo;       /* --gloo HOST:PORT: gloo over TCP instead of the
                                    file collective, stores at PORT+1 (trainer),
                                    PORT+2 (writers), PORT+3 (restarted trainer) */
#define JUMP 2

static float value(int seed, size_t i) { return (float)((i * 7 + (size_t)seed * 13) % 1009) + 0.25f * (float)seed; }

/* A context of this rank: a world of one, or the file collective in
 * g_rdv/sub (each generation of trainers its own, so a killed one leaves
 * nothing in the way of the next), the writers coordinating there too. */
static dcp_ctx *open_ctx_in(const char *job, const char *sub) {
  dcp_ctx *ctx;
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  char rdv[700];
  snprintf(rdv, sizeof rdv, "%s/%s", g_rdv, sub);
  mkdir(g_rdv, 0755);
  mkdir(rdv, 0755);
  char store[300], wstore[320];
  if (g_gloo) { /* HOST:PORT */
    const char *colon = strrchr(g_gloo, ':');
    CHECK(colon, "--gloo HOST:PORT");
    int port = atoi(colon + 1);
    snprintf(store, sizeof store, "store=%.*s:%d", (int)(colon - g_gloo), g_gloo,
             port + (strcmp(sub, "trainer") ? 3 : 1));
    snprintf(wstore, sizeof wstore, "store=%.*s:%d,job=dcpwriter", (int)(colon - g_gloo),
             g_gloo, port + 2);
  }
  if (g_world > 1) {
    cfg.coll = g_gloo ? "gloo" : "file";
    cfg.coll_options = g_gloo ? store : NULL;
    cfg.rendezvous = g_gloo ? NULL : rdv;
    cfg.rank = g_rank;
    cfg.world_size = g_world;
    /* peers: host A's writers die, and the others' collective waits this
     * long for them when it closes */
    cfg.timeout_ms = g_replicas ? PEERS_TIMEOUT_MS : 60000;
  }
  CHECK(dcp_ctx_create(&cfg, &ctx) == DCP_OK, "dcp_ctx_create: %s", dcp_ctx_create_error());
  if (g_world > 1 && g_gloo) OK(dcp_async_set_coordination(ctx, "gloo", NULL, wstore), ctx);
  else if (g_world > 1) OK(dcp_async_set_coordination(ctx, "file", rdv, NULL), ctx);
  dcp_memtier_options o;
  dcp_memtier_options_init(&o);
  o.keep = 1;
  o.linger_ms = 60000; /* the test stops it; at worst it goes after a minute */
  o.job = job;
  o.replicas = g_replicas;
  o.peer_jump = JUMP;
  OK(dcp_memtier_set(ctx, &o), ctx);
  return ctx;
}

static dcp_ctx *open_ctx(const char *job) { return open_ctx_in(job, "restart"); }

/* A state of "w" (rows [row0, row0+rows) of ROWS x COLS) and "rng". */
static dcp_state *state_of(dcp_ctx *ctx, float *w, int64_t row0, int64_t rows, uint8_t *rng) {
  dcp_state *st;
  int64_t shape[2] = {ROWS, COLS}, off[2] = {row0, 0}, size[2] = {rows, COLS};
  OK(dcp_state_create(ctx, &st), ctx);
  OK(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), ctx);
  OK(dcp_state_add_chunk(st, "w", off, size, w), ctx);
  OK(dcp_state_add_bytes(st, "rng", DCP_SCOPE_REPLICATED, rng, NBYTES), ctx);
  return st;
}

static void fill(float *w, uint8_t *rng, int seed) {
  for (size_t i = 0; i < (size_t)ROWS * COLS; i++) w[i] = value(seed, i);
  for (int i = 0; i < NBYTES; i++) rng[i] = (uint8_t)(seed * 31 + i);
}

static void path_of(char *p, size_t cap, const char *dir) { snprintf(p, cap, "%s/step", dir); }

enum { RESTART, CORRUPT, STALE, KILL_WRITER, RESTART_WN, PEERS };

/* XXH3 of the committed .metadata at p (what the snapshots are keyed by). */
static uint64_t meta_hash_of(const char *p) {
  char name[600];
  snprintf(name, sizeof name, "%s/.metadata", p);
  FILE *f = fopen(name, "rb");
  CHECK(f, "open %s", name);
  static uint8_t buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  return XXH3_64bits(buf, n);
}

/* Wait until this rank's writer holds its own snapshot of p and, with
 * peers, the copy of the rank it is a peer of (they come after the save). */
static void wait_kept(dcp_ctx *ctx, const char *p) {
  uint64_t h = meta_hash_of(p);
  int32_t origin = (g_rank - JUMP + g_world) % g_world;
  for (int i = 0; i < 1200; i++) {
    dcpi_snap_reply r;
    int fd, ok = 1;
    for (int which = 0; which < (g_replicas ? 2 : 1); which++) {
      uint32_t st = dcpi_memtier_get(ctx, g_job, p, which ? origin : g_rank, h, &r, &fd);
      if (st == DCP_MEMTIER_USED) close(fd), dcpi_snap_reply_free(&r);
      ok &= st == DCP_MEMTIER_USED;
    }
    if (ok) return;
    nanosleep(&(struct timespec){0, 50000000}, NULL);
  }
  CHECK(0, "rank %d: the writer holds no snapshot of %s after 60 s", g_rank, p);
}

/* The trainer: async save (seed 1) kept in memory, then per mode a sync
 * save over it (seed 2) or the writer's death; then SIGKILL. */
static void trainer(const char *dir, int mode, const char *pidfile) {
  char p[512];
  path_of(p, sizeof p, dir);
  dcp_ctx *ctx = open_ctx_in(g_job, "trainer");
  float *w = malloc(sizeof(float) * ROWS * COLS);
  uint8_t rng[NBYTES];
  fill(w, rng, 1);
  int64_t rows = ROWS / g_world; /* this rank's rows of the save */
  dcp_state *st = state_of(ctx, w + (size_t)(g_rank * rows) * COLS, g_rank * rows, rows, rng);
  dcp_async *h;
  OK(dcp_async_save(ctx, st, p, NULL, &h), ctx);
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
  pid_t wpid = dcpi_async_writer_pid(ctx);
  FILE *f = fopen(pidfile, "w");
  CHECK(f && fprintf(f, "%d\n", (int)wpid) > 0 && fclose(f) == 0, "pid file");
  if (mode == STALE) {
    fill(w, rng, 2);
    dcp_save_options o;
    dcp_save_options_init(&o);
    o.flags = DCP_SAVE_OVERWRITE;
    OK(dcp_save(ctx, st, p, &o), ctx);
  }
  /* the writer copies the snapshot after its DONE: let it finish (a
   * restart that comes sooner reads storage, which is no failure but not
   * what this test is about) */
  if (mode == KILL_WRITER) nanosleep(&(struct timespec){0, 300000000}, NULL);
  else if (mode != STALE) wait_kept(ctx, p);
  else nanosleep(&(struct timespec){0, 300000000}, NULL);
  if (mode == KILL_WRITER || (mode == PEERS && g_rank < g_lost)) { /* hosts lost */
    kill(wpid, SIGKILL);
    waitpid(wpid, NULL, 0);
  }
  raise(SIGKILL);
}

static pid_t run_trainer(const char *dir, int mode, const char *pidfile) {
  pid_t child = fork();
  CHECK(child >= 0, "fork");
  if (child == 0) {
    trainer(dir, mode, pidfile);
    _exit(3);
  }
  int status;
  CHECK(waitpid(child, &status, 0) == child && WIFSIGNALED(status) &&
            WTERMSIG(status) == SIGKILL,
        "the trainer did not die of SIGKILL (status %d)", status);
  int wpid = 0;
  FILE *f = fopen(pidfile, "r");
  CHECK(f && fscanf(f, "%d", &wpid) == 1, "no writer pid");
  fclose(f);
  return wpid;
}

/* Load rows [row0, row0+rows) into fresh buffers, compare with seed, and
 * return the statistics. */
static dcp_stats load_check(dcp_ctx *ctx, const char *p, int64_t row0, int64_t rows, int seed) {
  float *w = calloc((size_t)rows * COLS, sizeof(float));
  uint8_t rng[NBYTES] = {0};
  dcp_state *st = state_of(ctx, w, row0, rows, rng);
  OK(dcp_load(ctx, st, p, NULL), ctx);
  for (int64_t i = 0; i < rows * COLS; i++)
    CHECK(w[i] == value(seed, (size_t)(row0 * COLS + i)), "w[%lld] = %g, expected %g",
          (long long)(row0 * COLS + i), w[i], value(seed, (size_t)(row0 * COLS + i)));
  for (int i = 0; i < NBYTES; i++) CHECK(rng[i] == (uint8_t)(seed * 31 + i), "rng[%d]", i);
  dcp_stats s = {.struct_size = sizeof s};
  OK(dcp_ctx_stats(ctx, &s), ctx);
  dcp_state_free(st);
  free(w);
  return s;
}

/* 1 when process pid is gone (or a zombie) within 5 s. */
static int gone(pid_t pid) { return ak_gone_within(pid, 5000); }

/* Flip one byte of the writer's snapshot memfd at offset off (a bit flip
 * in its DIMM, as far as any reader can tell). */
static void flip(pid_t wpid, uint64_t off) {
  char dir[64], link[256], path[320];
  snprintf(dir, sizeof dir, "/proc/%d/fd", (int)wpid);
  DIR *d = opendir(dir);
  CHECK(d, "opendir %s", dir);
  int done = 0;
  for (struct dirent *e; !done && (e = readdir(d));) {
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n <= 0) continue;
    link[n] = '\0';
    if (!strstr(link, "memfd:dcp-snapshot")) continue;
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0, "open %s", path);
    uint8_t b;
    CHECK(pread(fd, &b, 1, (off_t)off) == 1, "pread");
    b ^= 0x10;
    CHECK(pwrite(fd, &b, 1, (off_t)off) == 1, "pwrite");
    close(fd);
    done = 1;
  }
  closedir(d);
  CHECK(done, "no snapshot memfd in %s", dir);
}

/* The file offset of a byte in the middle of "w" in its data file (the
 * snapshot holds that one file from offset 0). */
static uint64_t offset_in_w(dcp_ctx *ctx, const char *p) {
  dcp_meta *m;
  size_t ti;
  dcp_chunk_info ci;
  OK(dcp_meta_open(ctx, p, &m), ctx);
  OK(dcp_meta_find_tensor(m, "w", &ti), ctx);
  OK(dcp_meta_chunk(m, ti, 0, &ci), ctx);
  CHECK(dcp_meta_file_count(m) == 1, "one data file expected");
  uint64_t off = ci.ref.offset + ci.ref.stored_length / 2;
  dcp_meta_free(m);
  return off;
}

/* N ranks: rank r saved rows [r, r+1) * ROWS/N; its restart loads the
 * same number of rows, shifted by half a share: the first half from its
 * own snapshot, the second from the next rank's file on storage. */
static int restart_wn(const char *p, pid_t wpid) {
  dcp_ctx *ctx = open_ctx(g_job);
  int64_t share = ROWS / g_world, row0 = g_rank * share + share / 2;
  int64_t rows = g_rank == g_world - 1 ? share / 2 : share; /* the last one: up to the end */
  dcp_stats s = load_check(ctx, p, row0, rows, 1);
  uint64_t own = (uint64_t)(share / 2) * COLS * sizeof(float);
  printf("rank %d: rows [%lld, %lld): tier %u, %llu bytes from memory, %llu from storage\n",
         g_rank, (long long)row0, (long long)(row0 + rows), s.mem_tier,
         (unsigned long long)s.mem_read_bytes, (unsigned long long)s.data_read_bytes);
  CHECK(s.mem_tier == DCP_MEMTIER_USED && s.mem_read_bytes >= own, "rank %d: own rows not from "
        "memory", g_rank);
  CHECK(g_rank == g_world - 1 || s.data_read_bytes >= own, "rank %d: the next rank's rows did "
        "not come from storage", g_rank);
  OK(dcp_memtier_stop(ctx), ctx);
  CHECK(gone(wpid), "the writer (pid %d) is still there after dcp_memtier_stop", (int)wpid);
  dcp_ctx_free(ctx);
  return 0;
}

/* 4 ranks, one replica at rank + 2: ranks 0 and 1 lost their writers
 * (host A); their restart pulls from ranks 2 and 3, which load their own. */
static int restart_peers(const char *p, pid_t wpid) {
  dcp_ctx *ctx = open_ctx(g_job);
  int64_t share = ROWS / g_world;
  dcp_stats s = load_check(ctx, p, g_rank * share, share, 1);
  uint64_t own = (uint64_t)share * COLS * sizeof(float);
  printf("rank %d: tier %u, %llu bytes pulled from a peer, %llu read from memory, %llu from "
         "storage\n", g_rank, s.mem_tier, (unsigned long long)s.peer_recv_bytes,
         (unsigned long long)s.mem_read_bytes, (unsigned long long)s.data_read_bytes);
  bool lost = g_rank < g_lost;
  /* its replica's holder, rank + 2, lost its writer too: storage */
  bool both = lost && (g_rank + JUMP) % g_world < g_lost;
  uint32_t want = both ? DCP_MEMTIER_NONE : lost ? DCP_MEMTIER_PEER : DCP_MEMTIER_USED;
  CHECK(s.mem_tier == want, "rank %d: tier %u, expected %u", g_rank, s.mem_tier, want);
  CHECK(both ? s.data_read_bytes >= own && s.mem_read_bytes == 0
             : s.mem_read_bytes >= own && s.data_read_bytes < own / 2,
        "rank %d: its rows came from the wrong tier", g_rank);
  CHECK(!lost || both || s.peer_recv_bytes >= own, "rank %d: nothing pulled", g_rank);
  OK(dcp_memtier_stop(ctx), ctx);
  /* it closes its collective first, which waits for the lost writers up to
   * the timeout */
  CHECK(lost || ak_gone_within(wpid, PEERS_TIMEOUT_MS + 15000), "the writer (pid %d) is "
        "still there %d s after dcp_memtier_stop", (int)wpid, PEERS_TIMEOUT_MS / 1000 + 15);
  dcp_ctx_free(ctx);
  return 0;
}

static int run(const char *dir, int mode) {
  char p[512], pidfile[600];
  path_of(p, sizeof p, dir);
  snprintf(g_rdv, sizeof g_rdv, "%s/rdv", dir);
  snprintf(g_job, sizeof g_job, "recovery-test-%d", (int)getppid()); /* one per run */
  snprintf(pidfile, sizeof pidfile, "%s/writer.%d.pid", dir, g_rank);
  pid_t wpid = run_trainer(dir, mode, pidfile);
  const uint64_t wbytes = sizeof(float) * ROWS * COLS;
  if (mode == RESTART_WN) return restart_wn(p, wpid);
  if (mode == PEERS) return restart_peers(p, wpid);
  if (mode == RESTART) { /* another job's trainer: nothing for it */
    dcp_ctx *other = open_ctx("another-job");
    dcp_stats s = load_check(other, p, 0, ROWS, 1);
    CHECK(s.mem_tier == DCP_MEMTIER_NONE && s.mem_read_bytes == 0, "other job: tier %u",
          s.mem_tier);
    dcp_ctx_free(other);
  }
  dcp_ctx *ctx = open_ctx(g_job);
  if (mode == CORRUPT) flip(wpid, offset_in_w(ctx, p));
  dcp_stats s = load_check(ctx, p, 0, ROWS, mode == STALE ? 2 : 1);
  printf("mode %d: tier %u, %llu bytes from memory (%llu failed their checksum), %llu from "
         "storage\n", mode, s.mem_tier, (unsigned long long)s.mem_read_bytes,
         (unsigned long long)s.mem_fallback_bytes, (unsigned long long)s.data_read_bytes);
  switch (mode) {
  case RESTART:
    CHECK(s.mem_tier == DCP_MEMTIER_USED && s.mem_read_bytes >= wbytes + NBYTES &&
              s.data_read_bytes == 0 && s.mem_fallback_bytes == 0,
          "restart: not all from memory");
    /* another geometry: rows 100..400, resharded out of the same bytes */
    s = load_check(ctx, p, 100, 300, 1);
    CHECK(s.mem_tier == DCP_MEMTIER_USED && s.data_read_bytes == 0 &&
              s.mem_read_bytes >= 300 * COLS * sizeof(float),
          "resharded restart: tier %u, %llu from storage", s.mem_tier,
          (unsigned long long)s.data_read_bytes);
    break;
  case CORRUPT:
    CHECK(s.mem_tier == DCP_MEMTIER_USED && s.mem_fallback_bytes > 0 &&
              s.data_read_bytes >= s.mem_fallback_bytes && s.data_read_bytes < wbytes,
          "corrupt: the bad block was not re-read from storage alone");
    break;
  case STALE:
    CHECK(s.mem_tier == DCP_MEMTIER_STALE && s.mem_read_bytes == 0, "stale: tier %u",
          s.mem_tier);
    break;
  default:
    CHECK(s.mem_tier == DCP_MEMTIER_NONE && s.mem_read_bytes == 0, "no writer: tier %u",
          s.mem_tier);
  }
  OK(dcp_memtier_stop(ctx), ctx);
  CHECK(gone(wpid), "the writer (pid %d) is still there after dcp_memtier_stop", (int)wpid);
  dcp_ctx_free(ctx);
  return 0;
}

int main(int argc, char **argv) {
  const char *dir = NULL;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
    else if (!strcmp(argv[i], "--gloo")) g_gloo = argv[i + 1];
  }
  CHECK(dir, "usage: recovery_test restart|corrupt|stale|kill-writer|restart-wN|peers --dir D "
        "[--gloo HOST:PORT]");
  mkdir(dir, 0755);
  const char *r = getenv("DCP_TEST_RANK"), *w = getenv("DCP_TEST_WORLD");
  if (r && w) g_rank = atoi(r), g_world = atoi(w);
  static const char *const modes[] = {"restart", "corrupt", "stale", "kill-writer"};
  for (int i = 0; i < 4; i++)
    if (!strcmp(argv[1], modes[i])) return run(dir, i);
  if (!strncmp(argv[1], "restart-w", 9) && g_world > 1) return run(dir, RESTART_WN);
  if (!strncmp(argv[1], "peers", 5) && g_world == 4) {
    g_replicas = 1;
    g_lost = !strcmp(argv[1], "peers-lost3") ? 3 : 2;
    return run(dir, PEERS);
  }
  CHECK(0, "unknown mode %s", argv[1]);
  return 2;
}

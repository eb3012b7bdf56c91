/* The Gloo collective plugin (dcp-coll-gloo.so), loaded with dlopen from
 * the build tree; ranks are forked children (forked before any gloo state
 * exists) sharing a fresh mkdtemp rendezvous directory. Children report
 * through their exit code (cmocka's asserts must not run in a child).
 * Every test is skipped when the plugin was not built (no libgloo-dev). */
#include "testutil.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dcp_plugin.h"

/* Fails the child scenario with a message naming rank and line. */
#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", g_rank, __FILE__, __LINE__, \
              #cond);                                                                 \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)
/* CHECK that a plugin call returned rc, printing its message otherwise. */
#define CHECK_RC(call, rc)                                                           \
  do {                                                                               \
    int got_ = (call);                                                               \
    if (got_ != (rc)) {                                                              \
      fprintf(stderr, "rank %d: %s:%d: %s = %d (%s), want %d\n", g_rank, __FILE__,   \
              __LINE__, #call, got_, err.msg, (int)(rc));                            \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

#define MIB (1024u * 1024u)
#define NEED_PLUGIN() \
  do {                \
    if (!P) skip();   \
  } while (0)

static const dcp_coll_plugin *P;
static int g_rank = -1; /* the child's rank, for messages */
static char g_dir[PATH_MAX];

/* Loads ../lib/dcp/dcp-coll-gloo.so relative to this test binary; NULL
 * (every test skipped) when it was not built. */
static const dcp_coll_plugin *load_plugin(void) {
  char exe[PATH_MAX], path[PATH_MAX + 64];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return NULL;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (!slash) return NULL;
  *slash = '\0';
  snprintf(path, sizeof path, "%s/../lib/dcp/dcp-coll-gloo.so", exe);
  if (access(path, F_OK) != 0) {
    fprintf(stderr, "%s not built: skipping\n", path);
    return NULL;
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    return NULL;
  }
  dcp_plugin_entry_fn entry = (dcp_plugin_entry_fn)dlsym(h, DCP_PLUGIN_ENTRY_SYMBOL);
  return entry ? entry(DCP_PLUGIN_COLL) : NULL;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Deterministic bytes for (seed, len): every rank can predict every part. */
static void fill(unsigned char *p, size_t len, unsigned seed) {
  for (size_t i = 0; i < len; i++) p[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 9));
}

static int matches(const unsigned char *p, size_t len, unsigned seed) {
  for (size_t i = 0; i < len; i++)
    if (p[i] != (unsigned char)(seed * 131u + i * 7u + (i >> 9))) return 0;
  return 1;
}

/* Number of entries in dir (not . and ..), -1 if unreadable. */
static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

/* Removes dir with its files and flat subdirectories. */
static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  char path[PATH_MAX + 300];
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
      remove_dir(path);
    else
      unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

static void fresh_dir(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/dcp-coll-gloo-XXXXXX");
  assert_non_null(mkdtemp(g_dir));
}

static int open_comm(int rank, int world, int64_t timeout_ms, const char *opts, dcp_comm **c,
                     dcp_plugin_err *err) {
  dcp_coll_config cfg = {.struct_size = sizeof cfg, .rank = rank, .world_size = world,
                         .rendezvous = g_dir, .timeout_ms = timeout_ms, .options = opts};
  return P->open(&cfg, c, err);
}

typedef int (*scenario_fn)(int rank, int world, void *arg);

/* Forks world children running fn and returns the number that failed. A
 * child hanging past 60 s is killed by alarm. */
static int run_ranks(int world, scenario_fn fn, void *arg) {
  pid_t pids[16];
  fflush(NULL);
  for (int r = 0; r < world; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      g_rank = r;
      alarm(60);
      _exit(fn(r, world, arg));
    }
    if (pids[r] < 0) return world;
  }
  int failed = 0;
  for (int r = 0; r < world; r++) {
    int st = 0;
    if (waitpid(pids[r], &st, 0) != pids[r] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d of %d failed (status 0x%x)\n", r, world, st);
      failed++;
    }
  }
  return failed;
}

/* ------------------------------------------------------------------------ */
/* Every op                                                                 */
/* ------------------------------------------------------------------------ */

static const size_t SIZES[3] = {0, 1, MIB};

/* bcast of every size from the first and the last rank. */
static int check_bcast(dcp_comm *c, int rank, int world, unsigned char *buf) {
  dcp_plugin_err err = {{0}};
  for (int root = 0; root < world; root += world > 1 ? world - 1 : 1) {
    for (int s = 0; s < 3; s++) {
      unsigned seed = (unsigned)(root * 10 + s);
      memset(buf, 0, MIB);
      if (rank == root) fill(buf, SIZES[s], seed);
      CHECK_RC(P->bcast(c, buf, SIZES[s], root, &err), DCP_OK);
      CHECK(matches(buf, SIZES[s], seed));
    }
  }
  CHECK_RC(P->bcast(c, buf, 1, world, &err), DCP_EINVAL);
  return 0;
}

static int check_allgather(dcp_comm *c, int rank, int world) {
  dcp_plugin_err err = {{0}};
  for (int s = 0; s < 3; s++) {
    size_t len = SIZES[s];
    unsigned char *send = malloc(len + 1), *recv = malloc(len * (size_t)world + 1);
    CHECK(send && recv);
    fill(send, len, (unsigned)(100 + rank));
    CHECK_RC(P->allgather(c, send, len, recv, &err), DCP_OK);
    for (int r = 0; r < world; r++) CHECK(matches(recv + (size_t)r * len, len, (unsigned)(100 + r)));
    free(send);
    free(recv);
  }
  return 0;
}

/* gatherv to every root in turn, lengths 0 / 1 / 1 MiB by rank (shifted). */
static int check_gatherv(dcp_comm *c, int rank, int world, unsigned char *big) {
  dcp_plugin_err err = {{0}};
  for (int root = 0; root < world; root++) {
    size_t lens[16], total = 0;
    for (int r = 0; r < world; r++) total += lens[r] = SIZES[(r + root + 1) % 3];
    unsigned char *send = malloc(lens[rank] + 1);
    CHECK(send && total <= 8 * MIB);
    fill(send, lens[rank], (unsigned)(200 + rank + root));
    memset(big, 0, total);
    CHECK_RC(P->gatherv(c, send, lens[rank], big, rank == root ? lens : NULL, root, &err), DCP_OK);
    for (size_t r = 0, off = 0; rank == root && r < (size_t)world; off += lens[r++])
      CHECK(matches(big + off, lens[r], (unsigned)(200 + r + (size_t)root)));
    free(send);
  }
  return 0;
}

/* scatterv from every root in turn, lengths 1 MiB / 0 / 1 by rank (shifted). */
static int check_scatterv(dcp_comm *c, int rank, int world, unsigned char *big) {
  dcp_plugin_err err = {{0}};
  for (int root = 0; root < world; root++) {
    size_t lens[16], off = 0;
    for (int r = 0; r < world; r++) lens[r] = SIZES[(r + root + 2) % 3];
    for (int r = 0; rank == root && r < world; off += lens[r++])
      fill(big + off, lens[r], (unsigned)(300 + r + root));
    unsigned char *recv = malloc(lens[rank] + 1);
    CHECK(recv);
    CHECK_RC(P->scatterv(c, big, rank == root ? lens : NULL, recv, lens[rank], root, &err), DCP_OK);
    CHECK(matches(recv, lens[rank], (unsigned)(300 + rank + root)));
    free(recv);
  }
  return 0;
}

static int check_allreduce(dcp_comm *c, int rank, int world) {
  dcp_plugin_err err = {{0}};
  int64_t v[3] = {rank, -rank, (int64_t)rank * rank}, expect_sum = 0;
  for (int r = 0; r < world; r++) expect_sum += (int64_t)r * r;
  CHECK_RC(P->allreduce_i64(c, v, 3, DCP_REDUCE_SUM, &err), DCP_OK);
  CHECK(v[0] == (int64_t)world * (world - 1) / 2 && v[1] == -v[0] && v[2] == expect_sum);
  int64_t m[2] = {rank + 5, INT64_MIN + rank};
  CHECK_RC(P->allreduce_i64(c, m, 2, DCP_REDUCE_MIN, &err), DCP_OK);
  CHECK(m[0] == 5 && m[1] == INT64_MIN);
  int64_t x[2] = {rank + 5, INT64_MIN + rank};
  CHECK_RC(P->allreduce_i64(c, x, 2, DCP_REDUCE_MAX, &err), DCP_OK);
  CHECK(x[0] == world + 4 && x[1] == INT64_MIN + world - 1);
  /* many values (more than one segment of gloo's ring) */
  int64_t *many = malloc(100000 * sizeof *many);
  CHECK(many);
  for (int i = 0; i < 100000; i++) many[i] = (int64_t)i * (rank + 1);
  CHECK_RC(P->allreduce_i64(c, many, 100000, DCP_REDUCE_SUM, &err), DCP_OK);
  for (int i = 0; i < 100000; i++) CHECK(many[i] == (int64_t)i * world * (world + 1) / 2);
  free(many);
  CHECK_RC(P->allreduce_i64(c, NULL, 0, DCP_REDUCE_SUM, &err), DCP_OK);
  CHECK_RC(P->allreduce_i64(c, x, 1, 99, &err), DCP_EINVAL);
  return 0;
}

/* One group_bcast of len bytes in the group ranks[0..n) from root. */
static int group_once(dcp_comm *c, int rank, const int32_t *ranks, size_t n, int32_t root,
                      size_t len, unsigned seed, unsigned char *buf) {
  dcp_plugin_err err = {{0}};
  memset(buf, 0, len + 1);
  if (rank == root) fill(buf, len, seed);
  CHECK_RC(P->group_bcast(c, ranks, n, buf, len, root, &err), DCP_OK);
  CHECK(matches(buf, len, seed));
  return 0;
}

/* group_bcast in two disjoint groups (even and odd ranks, each twice with
 * another root and every size), then in an overlapping group (ranks 0..2 or
 * 0..1) and a group of one; a global barrier in between. */
static int check_groups(dcp_comm *c, int rank, int world, unsigned char *buf) {
  dcp_plugin_err err = {{0}};
  int32_t ranks[16];
  size_t n = 0;
  for (int r = rank % 2; r < world; r += 2) ranks[n++] = r;
  for (int rep = 0; rep < 2; rep++)
    for (int s = 0; s < 3; s++)
      if (group_once(c, rank, ranks, n, ranks[n - 1 - (size_t)rep % n], SIZES[s],
                     (unsigned)(400 + rank % 2 * 10 + rep * 3 + s), buf))
        return 1;
  int32_t over[3] = {0, 1, 2};
  size_t on = world >= 3 ? 3 : (size_t)world;
  if (rank < (int)on) {
    for (int s = 0; s < 3; s++)
      if (group_once(c, rank, over, on, over[on - 1], SIZES[s], (unsigned)(450 + s), buf)) return 1;
  }
  /* the even group again: its cached slot */
  if (rank % 2 == 0 && group_once(c, rank, ranks, n, 0, 300, 470u, buf)) return 1;
  int32_t self = rank;
  CHECK_RC(P->group_bcast(c, &self, 1, buf, 1, rank, &err), DCP_OK);
  CHECK_RC(P->group_bcast(c, ranks, n, buf, 1, world, &err), DCP_EINVAL);
  if (world > 1) {
    int32_t other = (rank + 1) % world;
    CHECK_RC(P->group_bcast(c, &other, 1, buf, 1, other, &err), DCP_EINVAL);
  }
  CHECK_RC(P->barrier(c, &err), DCP_OK);
  return 0;
}

static int scenario_all_ops(int rank, int world, void *arg) {
  (void)arg;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(open_comm(rank, world, 20000, NULL, &c, &err), DCP_OK);
  CHECK(P->rank(c) == rank && P->size(c) == world);
  unsigned char *big = calloc(8, MIB);
  CHECK(big);
  CHECK_RC(P->barrier(c, &err), DCP_OK);
  if (check_bcast(c, rank, world, big) || check_allgather(c, rank, world) ||
      check_gatherv(c, rank, world, big) || check_scatterv(c, rank, world, big) ||
      check_allreduce(c, rank, world) || check_groups(c, rank, world, big))
    return 1;
  free(big);
  P->close(c);
  return 0;
}

/* Every op on `world` ranks; the directory is empty afterwards. */
static void all_ops(int world) {
  fresh_dir();
  assert_int_equal(run_ranks(world, scenario_all_ops, NULL), 0);
  assert_int_equal(count_entries(g_dir), 0);
  remove_dir(g_dir);
}

static void test_all_ops_2(void **state) {
  (void)state;
  NEED_PLUGIN();
  all_ops(2);
}
static void test_all_ops_4(void **state) {
  (void)state;
  NEED_PLUGIN();
  all_ops(4);
}

/* A world of one on a rendezvous path that does not exist yet (two
 * levels): open creates it. In a child, so gloo's threads never run in the
 * test process that forks the others. */
static void test_single_rank_creates_dir(void **state) {
  (void)state;
  NEED_PLUGIN();
  char base[64];
  snprintf(base, sizeof base, "/tmp/dcp-coll-gloo-XXXXXX");
  assert_non_null(mkdtemp(base));
  snprintf(g_dir, sizeof g_dir, "%s/a/b", base);
  assert_int_equal(run_ranks(1, scenario_all_ops, NULL), 0);
  assert_int_equal(count_entries(g_dir), 0);
  remove_dir(base);
}

/* A missing rendezvous directory is created for a world of two as well. */
static void test_two_ranks_create_dir(void **state) {
  (void)state;
  NEED_PLUGIN();
  char base[64];
  snprintf(base, sizeof base, "/tmp/dcp-coll-gloo-XXXXXX");
  assert_non_null(mkdtemp(base));
  snprintf(g_dir, sizeof g_dir, "%s/rdv", base);
  assert_int_equal(run_ranks(2, scenario_all_ops, NULL), 0);
  assert_int_equal(count_entries(g_dir), 0);
  remove_dir(base);
}

/* Invalid configurations are refused before touching the directory. */
static void test_config_validation(void **state) {
  (void)state;
  NEED_PLUGIN();
  fresh_dir();
  dcp_plugin_err err = {{0}};
  dcp_comm *c = (dcp_comm *)&err;
  assert_int_equal(open_comm(0, 0, 1000, NULL, &c, &err), DCP_EINVAL);
  assert_null(c);
  assert_int_equal(open_comm(2, 2, 1000, NULL, &c, &err), DCP_EINVAL);
  assert_int_equal(open_comm(-1, 2, 1000, NULL, &c, &err), DCP_EINVAL);
  assert_int_equal(open_comm(0, 1, 0, NULL, &c, &err), DCP_EINVAL);
  assert_int_equal(open_comm(0, 1, 1000, "color=red", &c, &err), DCP_EINVAL);
  assert_non_null(strstr(err.msg, "color"));
  assert_int_equal(open_comm(0, 1, 1000, "job=a/b", &c, &err), DCP_EINVAL);
  assert_int_equal(open_comm(0, 1, 1000, "job=", &c, &err), DCP_EINVAL);
  assert_int_equal(open_comm(0, 1, 1000, "host=127.0.0.1,iface=lo", &c, &err), DCP_EINVAL);
  assert_non_null(strstr(err.msg, "exclusive"));
  dcp_coll_config cfg = {.struct_size = sizeof cfg, .rank = 0, .world_size = 1,
                         .rendezvous = NULL, .timeout_ms = 1000};
  assert_int_equal(P->open(&cfg, &c, &err), DCP_EINVAL);
  cfg.rendezvous = g_dir;
  cfg.struct_size = 8;
  assert_int_equal(P->open(&cfg, &c, &err), DCP_EINVAL);
  assert_int_equal(count_entries(g_dir), 0);
  assert_int_equal(P->caps, DCP_COLL_CAP_BULK | DCP_COLL_CAP_GROUPS);
  assert_non_null(P->group_bcast);
  assert_string_equal(P->name, "gloo");
  remove_dir(g_dir);
}

/* ------------------------------------------------------------------------ */
/* Timeouts and failures                                                    */
/* ------------------------------------------------------------------------ */

#define TIMEOUT_MS 500

/* CHECKs that [t0, now] lies in [lo, TIMEOUT_MS + 2 s). */
#define CHECK_ELAPSED(t0, lo)                                      \
  do {                                                             \
    double el_ = now_ms() - (t0);                                  \
    if (el_ < (lo) || el_ >= TIMEOUT_MS + 2000) {                  \
      fprintf(stderr, "rank %d: elapsed %.1f ms\n", g_rank, el_); \
      return 1;                                                    \
    }                                                              \
  } while (0)

/* The last rank never arrives: every open times out, rank 0 names it. */
static int scenario_never_arrives(int rank, int world, void *arg) {
  (void)arg;
  if (rank == world - 1) return 0;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  double t0 = now_ms();
  CHECK_RC(open_comm(rank, world, TIMEOUT_MS, NULL, &c, &err), DCP_ETIMEDOUT);
  CHECK_ELAPSED(t0, TIMEOUT_MS);
  CHECK(c == NULL);
  char name[32];
  snprintf(name, sizeof name, "rank(s) %d ", world - 1);
  CHECK(rank != 0 || strstr(err.msg, name) != NULL);
  return 0;
}

static void test_timeout_never_arrives(void **state) {
  (void)state;
  NEED_PLUGIN();
  fresh_dir();
  assert_int_equal(run_ranks(3, scenario_never_arrives, NULL), 0);
  assert_int_equal(count_entries(g_dir), 0); /* failed opens clean up */
  remove_dir(g_dir);
}

/* The last rank stays alive but stops calling after a barrier: the next
 * collective times out on the others (DCP_ETIMEDOUT), and the communicator
 * then refuses further calls with DCP_EPEER. arg selects the op. */
static int scenario_stalls(int rank, int world, void *arg) {
  int op = *(const int *)arg;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(open_comm(rank, world, TIMEOUT_MS, NULL, &c, &err), DCP_OK);
  CHECK_RC(P->barrier(c, &err), DCP_OK);
  if (rank == world - 1) {
    sleep_ms(TIMEOUT_MS + 2500); /* alive, connections open, silent */
    P->close(c);
    return 0;
  }
  unsigned char send[8] = {0}, recv[64] = {0};
  size_t lens[8] = {8, 8, 8, 8, 8, 8, 8, 8};
  int64_t v = 1;
  int32_t all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  double t0 = now_ms();
  int rc = op == 0   ? P->allgather(c, send, sizeof send, recv, &err)
           : op == 1 ? P->allreduce_i64(c, &v, 1, DCP_REDUCE_SUM, &err)
           : op == 2 ? P->gatherv(c, send, 8, recv, lens, 0, &err)
           : op == 3 ? P->scatterv(c, recv, lens, send, 8, 0, &err)
           : op == 4 ? P->group_bcast(c, all, (size_t)world, send, 8, world - 1, &err)
                     : P->barrier(c, &err);
  /* gatherv/scatterv: non-root ranks other than the silent one only talk to
   * the root and may succeed. */
  if (!((op == 2 || op == 3) && rank != 0)) {
    CHECK_RC(rc, DCP_ETIMEDOUT);
    CHECK_ELAPSED(t0, TIMEOUT_MS - 5);
    CHECK_RC(P->barrier(c, &err), DCP_EPEER);
  }
  P->close(c);
  return 0;
}

static void stalls(int op) {
  fresh_dir();
  assert_int_equal(run_ranks(3, scenario_stalls, &op), 0);
  remove_dir(g_dir);
}

static void test_timeout_stall_allgather(void **state) {
  (void)state;
  NEED_PLUGIN();
  stalls(0);
}
static void test_timeout_stall_allreduce(void **state) {
  (void)state;
  NEED_PLUGIN();
  stalls(1);
}
static void test_timeout_stall_gatherv(void **state) {
  (void)state;
  NEED_PLUGIN();
  stalls(2);
}
static void test_timeout_stall_scatterv(void **state) {
  (void)state;
  NEED_PLUGIN();
  stalls(3);
}
static void test_timeout_stall_group(void **state) {
  (void)state;
  NEED_PLUGIN();
  stalls(4);
}

/* The last rank exits after a barrier without closing: the others get an
 * error (its connections closed: DCP_EPEER, or DCP_ETIMEDOUT) well within
 * the timeout plus a margin; later calls return DCP_EPEER. */
static int scenario_exits_early(int rank, int world, void *arg) {
  (void)arg;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(open_comm(rank, world, TIMEOUT_MS, NULL, &c, &err), DCP_OK);
  CHECK_RC(P->barrier(c, &err), DCP_OK);
  if (rank == world - 1) { /* gone without close, once the others left the barrier */
    sleep_ms(200);
    _exit(0);
  }
  unsigned char send[8] = {0}, recv[64];
  double t0 = now_ms();
  int rc = P->allgather(c, send, sizeof send, recv, &err);
  if (rc != DCP_ETIMEDOUT && rc != DCP_EPEER) {
    fprintf(stderr, "rank %d: allgather = %d (%s)\n", rank, rc, err.msg);
    return 1;
  }
  CHECK_ELAPSED(t0, 0);
  if (getenv("DCP_TEST_VERBOSE"))
    fprintf(stderr, "rank %d: %d after %.0f ms: %s\n", rank, rc, now_ms() - t0, err.msg);
  CHECK_RC(P->barrier(c, &err), DCP_EPEER);
  CHECK(strstr(err.msg, "broken") != NULL);
  P->close(c);
  return 0;
}

static void test_exits_early(void **state) {
  (void)state;
  NEED_PLUGIN();
  fresh_dir();
  assert_int_equal(run_ranks(4, scenario_exits_early, NULL), 0);
  remove_dir(g_dir);
}

/* Root and receiver disagree on a scatterv length: the receiver gets
 * DCP_EINVAL (after draining the payload), not a hang. */
static int scenario_mismatch(int rank, int world, void *arg) {
  (void)arg;
  (void)world;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(open_comm(rank, world, 5000, NULL, &c, &err), DCP_OK);
  unsigned char buf[24] = {0}, recv[16];
  size_t lens[2] = {8, 16};
  if (rank == 0) {
    CHECK_RC(P->scatterv(c, buf, lens, recv, 8, 0, &err), DCP_OK);
  } else {
    CHECK_RC(P->scatterv(c, NULL, NULL, recv, 8, 0, &err), DCP_EINVAL);
    CHECK(strstr(err.msg, "16") != NULL);
  }
  P->close(c);
  return 0;
}

static void test_mismatched_lengths(void **state) {
  (void)state;
  NEED_PLUGIN();
  fresh_dir();
  assert_int_equal(run_ranks(2, scenario_mismatch, NULL), 0);
  remove_dir(g_dir);
}

/* ------------------------------------------------------------------------ */
/* Stale files and concurrent jobs                                          */
/* ------------------------------------------------------------------------ */

static void write_text(const char *name, const char *text) {
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

/* Leaves the files of a crashed earlier job "dcp" of the same world size:
 * a session file, hellos, and a session directory with store keys. */
static void plant_stale(void) {
  write_text("dcp.gloo.session", "DCPGLOO1 4 deadbeef 3e9 3ea 3eb\n");
  write_text("dcp.gloo.hello.1", "DCPGLOO1 4 3e9\n");
  write_text("dcp.gloo.hello.2", "DCPGLOO1 4 3ea\n");
  write_text("dcp.gloo.hello.3", "DCPGLOO1 4 3eb\n");
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/dcp.gloo.00000000deadbeef", g_dir);
  assert_int_equal(mkdir(path, 0777), 0);
  write_text("dcp.gloo.00000000deadbeef/12345", "stale key");
}

/* Opens after a delay (rank 0 late, or the others late: arg), then runs a
 * few ops; a rank that took the stale session would time out. */
static int scenario_stale(int rank, int world, void *arg) {
  int late_root = *(const int *)arg;
  if ((rank == 0) == late_root) sleep_ms(300);
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(open_comm(rank, world, 5000, NULL, &c, &err), DCP_OK);
  CHECK_RC(P->barrier(c, &err), DCP_OK);
  int64_t v = rank;
  CHECK_RC(P->allreduce_i64(c, &v, 1, DCP_REDUCE_SUM, &err), DCP_OK);
  CHECK(v == (int64_t)world * (world - 1) / 2);
  P->close(c);
  return 0;
}

/* Afterwards only the stale session directory is left (hellos and the
 * session file were replaced and removed). */
static void stale(int late_root) {
  fresh_dir();
  plant_stale();
  assert_int_equal(run_ranks(4, scenario_stale, &late_root), 0);
  assert_int_equal(count_entries(g_dir), 1);
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/dcp.gloo.00000000deadbeef/12345", g_dir);
  assert_int_equal(access(path, F_OK), 0);
  remove_dir(g_dir);
}

static void test_stale_session_root_late(void **state) {
  (void)state;
  NEED_PLUGIN();
  stale(1);
}
static void test_stale_hellos_others_late(void **state) {
  (void)state;
  NEED_PLUGIN();
  stale(0);
}

/* Two jobs of two ranks each share the directory at the same time. */
static int scenario_two_jobs(int idx, int world, void *arg) {
  (void)arg;
  (void)world;
  int rank = idx % 2, job = idx / 2;
  g_rank = idx;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(open_comm(rank, 2, 5000, job ? "job=b" : "job=a,host=127.0.0.1", &c, &err), DCP_OK);
  unsigned char send[64], recv[128];
  for (int i = 0; i < 5; i++) {
    fill(send, sizeof send, (unsigned)(job * 100 + rank + i));
    CHECK_RC(P->allgather(c, send, sizeof send, recv, &err), DCP_OK);
    CHECK(matches(recv, 64, (unsigned)(job * 100 + i)) &&
          matches(recv + 64, 64, (unsigned)(job * 100 + 1 + i)));
  }
  P->close(c);
  return 0;
}

static void test_two_jobs_one_dir(void **state) {
  (void)state;
  NEED_PLUGIN();
  fresh_dir();
  assert_int_equal(run_ranks(4, scenario_two_jobs, NULL), 0);
  assert_int_equal(count_entries(g_dir), 0);
  remove_dir(g_dir);
}

static int setup(void **state) {
  (void)state;
  P = load_plugin();
  return 0; /* NULL: every test skips */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_validation),
      cmocka_unit_test(test_single_rank_creates_dir),
      cmocka_unit_test(test_two_ranks_create_dir),
      cmocka_unit_test(test_all_ops_2),
      cmocka_unit_test(test_all_ops_4),
      cmocka_unit_test(test_timeout_never_arrives),
      cmocka_unit_test(test_timeout_stall_allgather),
      cmocka_unit_test(test_timeout_stall_allreduce),
      cmocka_unit_test(test_timeout_stall_gatherv),
      cmocka_unit_test(test_timeout_stall_scatterv),
      cmocka_unit_test(test_timeout_stall_group),
      cmocka_unit_test(test_exits_early),
      cmocka_unit_test(test_mismatched_lengths),
      cmocka_unit_test(test_stale_session_root_late),
      cmocka_unit_test(test_stale_hellos_others_late),
      cmocka_unit_test(test_two_jobs_one_dir),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}

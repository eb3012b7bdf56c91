/* The Gloo collective plugin (dcp-coll-gloo.so), loaded with dlopen from
 * the build tree; ranks are forked children (forked before any gloo state
 * exists) sharing a fresh mkdtemp rendezvous directory. Children report
 * through their exit code (cmocka's asserts must not run in a child).
 * Every test is skipped when the plugin was not built (no libgloo-dev). */
#include "testutil.h"

#include "coll_testkit.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dcp.h"
#include "dcp_plugin.h"

#define NEED_PLUGIN()   \
  do {                  \
    if (!ctk_P) skip(); \
  } while (0)

/* ------------------------------------------------------------------------ */
/* Every op                                                                 */
/* ------------------------------------------------------------------------ */

/* bcast of every size from the first and the last rank. */
static int check_bcast(dcp_comm *c, int rank, int world, unsigned char *buf) {
  dcp_plugin_err err = {{0}};
  for (int root = 0; root < world; root += world > 1 ? world - 1 : 1) {
    for (int s = 0; s < 3; s++) {
      unsigned seed = (unsigned)(root * 10 + s);
      memset(buf, 0, MIB);
      if (rank == root) ctk_fill(buf, CTK_SIZES[s], seed);
      CHECK_RC(ctk_P->bcast(c, buf, CTK_SIZES[s], root, &err), DCP_OK);
      CHECK(ctk_matches(buf, CTK_SIZES[s], seed));
    }
  }
  CHECK_RC(ctk_P->bcast(c, buf, 1, world, &err), DCP_EINVAL);
  return 0;
}

/* gatherv to every root in turn, lengths 0 / 1 / 1 MiB by rank (shifted). */
static int check_gatherv(dcp_comm *c, int rank, int world, unsigned char *big) {
  dcp_plugin_err err = {{0}};
  for (int root = 0; root < world; root++) {
    size_t lens[16], total = 0;
    for (int r = 0; r < world; r++) total += lens[r] = CTK_SIZES[(r + root + 1) % 3];
    unsigned char *send = malloc(lens[rank] + 1);
    CHECK(send && total <= 8 * MIB);
    ctk_fill(send, lens[rank], (unsigned)(200 + rank + root));
    memset(big, 0, total);
    CHECK_RC(ctk_P->gatherv(c, send, lens[rank], big, rank == root ? lens : NULL, root, &err), DCP_OK);
    for (size_t r = 0, off = 0; rank == root && r < (size_t)world; off += lens[r++])
      CHECK(ctk_matches(big + off, lens[r], (unsigned)(200 + r + (size_t)root)));
    free(send);
  }
  return 0;
}

/* scatterv from every root in turn, lengths 1 MiB / 0 / 1 by rank (shifted). */
static int check_scatterv(dcp_comm *c, int rank, int world, unsigned char *big) {
  dcp_plugin_err err = {{0}};
  for (int root = 0; root < world; root++) {
    size_t lens[16], off = 0;
    for (int r = 0; r < world; r++) lens[r] = CTK_SIZES[(r + root + 2) % 3];
    for (int r = 0; rank == root && r < world; off += lens[r++])
      ctk_fill(big + off, lens[r], (unsigned)(300 + r + root));
    unsigned char *recv = malloc(lens[rank] + 1);
    CHECK(recv);
    CHECK_RC(ctk_P->scatterv(c, big, rank == root ? lens : NULL, recv, lens[rank], root, &err), DCP_OK);
    CHECK(ctk_matches(recv, lens[rank], (unsigned)(300 + rank + root)));
    free(recv);
  }
  return 0;
}

/* One group_bcast of len bytes in the group ranks[0..n) from root. */
static int group_once(dcp_comm *c, int rank, const int32_t *ranks, size_t n, int32_t root,
                      size_t len, unsigned seed, unsigned char *buf) {
  dcp_plugin_err err = {{0}};
  memset(buf, 0, len + 1);
  if (rank == root) ctk_fill(buf, len, seed);
  CHECK_RC(ctk_P->group_bcast(c, ranks, n, buf, len, root, &err), DCP_OK);
  CHECK(ctk_matches(buf, len, seed));
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
      if (group_once(c, rank, ranks, n, ranks[n - 1 - (size_t)rep % n], CTK_SIZES[s],
                     (unsigned)(400 + rank % 2 * 10 + rep * 3 + s), buf))
        return 1;
  int32_t over[3] = {0, 1, 2};
  size_t on = world >= 3 ? 3 : (size_t)world;
  if (rank < (int)on) {
    for (int s = 0; s < 3; s++)
      if (group_once(c, rank, over, on, over[on - 1], CTK_SIZES[s], (unsigned)(450 + s), buf)) return 1;
  }
  /* the even group again: its cached slot */
  if (rank % 2 == 0 && group_once(c, rank, ranks, n, 0, 300, 470u, buf)) return 1;
  int32_t self = rank;
  CHECK_RC(ctk_P->group_bcast(c, &self, 1, buf, 1, rank, &err), DCP_OK);
  CHECK_RC(ctk_P->group_bcast(c, ranks, n, buf, 1, world, &err), DCP_EINVAL);
  if (world > 1) {
    int32_t other = (rank + 1) % world;
    CHECK_RC(ctk_P->group_bcast(c, &other, 1, buf, 1, other, &err), DCP_EINVAL);
  }
  CHECK_RC(ctk_P->barrier(c, &err), DCP_OK);
  return 0;
}

static int scenario_all_ops(int rank, int world, void *arg) {
  (void)arg;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(ctk_open_comm(rank, world, 20000, NULL, &c, &err), DCP_OK);
  CHECK(ctk_P->rank(c) == rank && ctk_P->size(c) == world);
  unsigned char *big = calloc(8, MIB);
  CHECK(big);
  CHECK_RC(ctk_P->barrier(c, &err), DCP_OK);
  if (check_bcast(c, rank, world, big) || ctk_check_allgather(c, rank, world) ||
      check_gatherv(c, rank, world, big) || check_scatterv(c, rank, world, big) ||
      ctk_check_allreduce(c, rank, world, 100000) || check_groups(c, rank, world, big))
    return 1;
  free(big);
  ctk_P->close(c);
  return 0;
}

/* Every op on `world` ranks; the directory is empty afterwards. */
static void all_ops(int world) {
  ctk_fresh_dir("dcp-coll-gloo");
  assert_int_equal(ctk_run_ranks(world, scenario_all_ops, NULL), 0);
  assert_int_equal(ctk_count_entries(ctk_dir), 0);
  ctk_remove_dir(ctk_dir);
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
  snprintf(ctk_dir, sizeof ctk_dir, "%s/a/b", base);
  assert_int_equal(ctk_run_ranks(1, scenario_all_ops, NULL), 0);
  assert_int_equal(ctk_count_entries(ctk_dir), 0);
  ctk_remove_dir(base);
}

/* A missing rendezvous directory is created for a world of two as well. */
static void test_two_ranks_create_dir(void **state) {
  (void)state;
  NEED_PLUGIN();
  char base[64];
  snprintf(base, sizeof base, "/tmp/dcp-coll-gloo-XXXXXX");
  assert_non_null(mkdtemp(base));
  snprintf(ctk_dir, sizeof ctk_dir, "%s/rdv", base);
  assert_int_equal(ctk_run_ranks(2, scenario_all_ops, NULL), 0);
  assert_int_equal(ctk_count_entries(ctk_dir), 0);
  ctk_remove_dir(base);
}

/* Invalid configurations are refused before touching the directory. */
static void test_config_validation(void **state) {
  (void)state;
  NEED_PLUGIN();
  ctk_fresh_dir("dcp-coll-gloo");
  dcp_plugin_err err = {{0}};
  dcp_comm *c = (dcp_comm *)&err;
  assert_int_equal(ctk_open_comm(0, 0, 1000, NULL, &c, &err), DCP_EINVAL);
  assert_null(c);
  assert_int_equal(ctk_open_comm(2, 2, 1000, NULL, &c, &err), DCP_EINVAL);
  assert_int_equal(ctk_open_comm(-1, 2, 1000, NULL, &c, &err), DCP_EINVAL);
  assert_int_equal(ctk_open_comm(0, 1, 0, NULL, &c, &err), DCP_EINVAL);
  assert_int_equal(ctk_open_comm(0, 1, 1000, "color=red", &c, &err), DCP_EINVAL);
  assert_non_null(strstr(err.msg, "color"));
  assert_int_equal(ctk_open_comm(0, 1, 1000, "job=a/b", &c, &err), DCP_EINVAL);
  assert_int_equal(ctk_open_comm(0, 1, 1000, "job=", &c, &err), DCP_EINVAL);
  assert_int_equal(ctk_open_comm(0, 1, 1000, "host=127.0.0.1,iface=lo", &c, &err), DCP_EINVAL);
  assert_non_null(strstr(err.msg, "exclusive"));
  dcp_coll_config cfg = {.struct_size = sizeof cfg, .rank = 0, .world_size = 1,
                         .rendezvous = NULL, .timeout_ms = 1000};
  assert_int_equal(ctk_P->open(&cfg, &c, &err), DCP_EINVAL);
  cfg.rendezvous = ctk_dir;
  cfg.struct_size = 8;
  assert_int_equal(ctk_P->open(&cfg, &c, &err), DCP_EINVAL);
  assert_int_equal(ctk_count_entries(ctk_dir), 0);
  assert_int_equal(ctk_P->caps, DCP_COLL_CAP_BULK | DCP_COLL_CAP_GROUPS);
  assert_non_null(ctk_P->group_bcast);
  assert_string_equal(ctk_P->name, "gloo");
  ctk_remove_dir(ctk_dir);
}

/* ------------------------------------------------------------------------ */
/* Timeouts and failures                                                    */
/* ------------------------------------------------------------------------ */

#define TIMEOUT_MS 500

/* CHECKs that [t0, now] lies in [lo, TIMEOUT_MS + 2 s). */
#define CHECK_ELAPSED(t0, lo)                                      \
  do {                                                             \
    double el_ = ctk_now_ms() - (t0);                                  \
    if (el_ < (lo) || el_ >= TIMEOUT_MS + 2000) {                  \
      fprintf(stderr, "rank %d: elapsed %.1f ms\n", ctk_rank, el_); \
      return 1;                                                    \
    }                                                              \
  } while (0)

/* The last rank never arrives: every open times out, rank 0 names it. */
static int scenario_never_arrives(int rank, int world, void *arg) {
  (void)arg;
  if (rank == world - 1) return 0;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  double t0 = ctk_now_ms();
  CHECK_RC(ctk_open_comm(rank, world, TIMEOUT_MS, NULL, &c, &err), DCP_ETIMEDOUT);
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
  ctk_fresh_dir("dcp-coll-gloo");
  assert_int_equal(ctk_run_ranks(3, scenario_never_arrives, NULL), 0);
  assert_int_equal(ctk_count_entries(ctk_dir), 0); /* failed opens clean up */
  ctk_remove_dir(ctk_dir);
}

/* The last rank stays alive but stops calling after a barrier: the next
 * collective times out on the others (DCP_ETIMEDOUT), and the communicator
 * then refuses further calls with DCP_EPEER. arg selects the op. */
static int scenario_stalls(int rank, int world, void *arg) {
  int op = *(const int *)arg;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(ctk_open_comm(rank, world, TIMEOUT_MS, NULL, &c, &err), DCP_OK);
  CHECK_RC(ctk_P->barrier(c, &err), DCP_OK);
  if (rank == world - 1) {
    ctk_sleep_ms(TIMEOUT_MS + 2500); /* alive, connections open, silent */
    ctk_P->close(c);
    return 0;
  }
  unsigned char send[8] = {0}, recv[64] = {0};
  size_t lens[8] = {8, 8, 8, 8, 8, 8, 8, 8};
  int64_t v = 1;
  int32_t all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  double t0 = ctk_now_ms();
  int rc = op == 0   ? ctk_P->allgather(c, send, sizeof send, recv, &err)
           : op == 1 ? ctk_P->allreduce_i64(c, &v, 1, DCP_REDUCE_SUM, &err)
           : op == 2 ? ctk_P->gatherv(c, send, 8, recv, lens, 0, &err)
           : op == 3 ? ctk_P->scatterv(c, recv, lens, send, 8, 0, &err)
           : op == 4 ? ctk_P->group_bcast(c, all, (size_t)world, send, 8, world - 1, &err)
                     : ctk_P->barrier(c, &err);
  /* gatherv/scatterv: non-root ranks other than the silent one only talk to
   * the root and may succeed. */
  if (!((op == 2 || op == 3) && rank != 0)) {
    /* Its own deadline, or a peer that reached its deadline first and
     * closed the connection (ring algorithms: who notices first depends on
     * timing, e.g. under ASan) — an error either way, never before the
     * deadline. */
    if (rc != DCP_EPEER) CHECK_RC(rc, DCP_ETIMEDOUT);
    CHECK_ELAPSED(t0, TIMEOUT_MS - 5);
    CHECK_RC(ctk_P->barrier(c, &err), DCP_EPEER);
  }
  ctk_P->close(c);
  return 0;
}

static void stalls(int op) {
  ctk_fresh_dir("dcp-coll-gloo");
  assert_int_equal(ctk_run_ranks(3, scenario_stalls, &op), 0);
  ctk_remove_dir(ctk_dir);
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
  CHECK_RC(ctk_open_comm(rank, world, TIMEOUT_MS, NULL, &c, &err), DCP_OK);
  CHECK_RC(ctk_P->barrier(c, &err), DCP_OK);
  if (rank == world - 1) { /* gone without close, once the others left the barrier */
    ctk_sleep_ms(200);
    _exit(0);
  }
  unsigned char send[8] = {0}, recv[64];
  double t0 = ctk_now_ms();
  int rc = ctk_P->allgather(c, send, sizeof send, recv, &err);
  if (rc != DCP_ETIMEDOUT && rc != DCP_EPEER) {
    fprintf(stderr, "rank %d: allgather = %d (%s)\n", rank, rc, err.msg);
    return 1;
  }
  CHECK_ELAPSED(t0, 0);
  if (getenv("DCP_TEST_VERBOSE"))
    fprintf(stderr, "rank %d: %d after %.0f ms: %s\n", rank, rc, ctk_now_ms() - t0, err.msg);
  CHECK_RC(ctk_P->barrier(c, &err), DCP_EPEER);
  CHECK(strstr(err.msg, "broken") != NULL);
  ctk_P->close(c);
  return 0;
}

static void test_exits_early(void **state) {
  (void)state;
  NEED_PLUGIN();
  ctk_fresh_dir("dcp-coll-gloo");
  assert_int_equal(ctk_run_ranks(4, scenario_exits_early, NULL), 0);
  ctk_remove_dir(ctk_dir);
}

/* The last rank exits while the others are in a point-to-point op that
 * needs it (ctk_scenario_exits_p2p): its connections close, so they fail
 * (DCP_EPEER, or DCP_ETIMEDOUT), within the deadline plus a margin. */
static void test_exits_p2p(void **state) {
  (void)state;
  NEED_PLUGIN();
  for (int op = 0; op < CTK_P2P_OPS; op++) {
    ctk_fresh_dir("dcp-coll-gloo");
    ctk_p2p_case k = {.op = op, .timeout_ms = TIMEOUT_MS};
    assert_int_equal(ctk_run_ranks(3, ctk_scenario_exits_p2p, &k), 0);
    ctk_remove_dir(ctk_dir);
  }
}

/* ------------------------------------------------------------------------ */
/* A rank killed while the others connect                                   */
/* ------------------------------------------------------------------------ */

#define CONNECT_TIMEOUT_MS 2000

/* The file the doomed rank's death waits for, in ctk_dir's session
 * directory "dcp.gloo.<16 hex>": its ack (the handshake is over; it has not
 * published its address yet) or its store key "key.<hex of the decimal
 * rank>" (address published, mesh not connected: the others are connecting
 * to it, or listening for it). */
typedef struct kill_plan {
  int at_key;
} kill_plan;

/* 1 once that file of rank `rank` exists. */
static int reached(int rank, int at_key) {
  char name[64] = "ack.";
  if (at_key) {
    char dec[16];
    snprintf(dec, sizeof dec, "%d", rank);
    strcpy(name, "key.");
    for (size_t i = 0; dec[i]; i++) snprintf(name + 4 + 2 * i, 3, "%02x", (unsigned char)dec[i]);
  } else {
    snprintf(name + 4, sizeof name - 4, "%d", rank);
  }
  DIR *d = opendir(ctk_dir);
  struct dirent *e;
  int found = 0;
  while (d && !found && (e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "dcp.gloo.", 9) != 0 || strlen(e->d_name) != 25 ||
        strspn(e->d_name + 9, "0123456789abcdef") != 16)
      continue;
    char path[PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/%s/%s", ctk_dir, e->d_name, name);
    found = access(path, F_OK) == 0;
  }
  if (d) closedir(d);
  return found;
}

/* The killer thread of the doomed rank: SIGKILL at the plan's point. */
static void *killer(void *arg) {
  const kill_plan *k = arg;
  while (!reached(ctk_rank, k->at_key)) ctk_sleep_ms(1);
  raise(SIGKILL);
  return NULL;
}

/* The last rank is killed during open, after the handshake; every other
 * rank's open fails (or, if the kill came after the mesh was up, its first
 * barrier does) within 2 x timeout + 1 s — not after gloo's connect wait
 * (5 x its timeout) or its file store's 30 s default. At its key, the
 * doomed rank listens on 127.0.0.2: gloo's pair with the lower address
 * listens, so every survivor (127.0.0.1) waits for a connection that never
 * comes. A doomed rank whose open returns exits 0 (the kill never came:
 * the scenario did not happen), which the caller counts as a failure. */
static int scenario_killed_connecting(int rank, int world, void *arg) {
  const kill_plan *k = arg;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  pthread_t t;
  int doomed = rank == world - 1;
  if (doomed && pthread_create(&t, NULL, killer, arg) != 0) return 1;
  double t0 = ctk_now_ms();
  int rc = ctk_open_comm(rank, world, CONNECT_TIMEOUT_MS,
                         doomed && k->at_key ? "host=127.0.0.2" : NULL, &c, &err);
  if (doomed) {
    fprintf(stderr, "rank %d: open returned %d before the kill\n", rank, rc);
    _exit(0);
  }
  if (rc == DCP_OK) rc = ctk_P->barrier(c, &err);
  double el = ctk_now_ms() - t0;
  if (getenv("DCP_TEST_VERBOSE") || el >= 2 * CONNECT_TIMEOUT_MS + 1000)
    fprintf(stderr, "rank %d: %d after %.0f ms: %s\n", rank, rc, el, err.msg);
  CHECK(rc == DCP_ETIMEDOUT || rc == DCP_EPEER || rc == DCP_EIO);
  CHECK(el < 2 * CONNECT_TIMEOUT_MS + 1000);
  if (c) ctk_P->close(c);
  return 0;
}

/* Runs the scenario on world ranks: only the killed one fails (SIGKILL). */
static void killed_connecting(int world, int at_key) {
  ctk_fresh_dir("dcp-coll-gloo");
  kill_plan k = {at_key};
  assert_int_equal(ctk_run_ranks(world, scenario_killed_connecting, &k), 1);
  ctk_remove_dir(ctk_dir);
}

static void test_killed_before_store(void **state) {
  (void)state;
  NEED_PLUGIN();
  killed_connecting(3, 0);
}
static void test_killed_while_connecting(void **state) {
  (void)state;
  NEED_PLUGIN();
  killed_connecting(3, 1);
}

/* Root and receiver disagree on a scatterv length: the receiver gets
 * DCP_EINVAL (after draining the payload), not a hang. */
static int scenario_mismatch(int rank, int world, void *arg) {
  (void)arg;
  (void)world;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(ctk_open_comm(rank, world, 5000, NULL, &c, &err), DCP_OK);
  unsigned char buf[24] = {0}, recv[16];
  size_t lens[2] = {8, 16};
  if (rank == 0) {
    CHECK_RC(ctk_P->scatterv(c, buf, lens, recv, 8, 0, &err), DCP_OK);
  } else {
    CHECK_RC(ctk_P->scatterv(c, NULL, NULL, recv, 8, 0, &err), DCP_EINVAL);
    CHECK(strstr(err.msg, "16") != NULL);
  }
  ctk_P->close(c);
  return 0;
}

static void test_mismatched_lengths(void **state) {
  (void)state;
  NEED_PLUGIN();
  ctk_fresh_dir("dcp-coll-gloo");
  assert_int_equal(ctk_run_ranks(2, scenario_mismatch, NULL), 0);
  ctk_remove_dir(ctk_dir);
}

/* ------------------------------------------------------------------------ */
/* Stale files and concurrent jobs                                          */
/* ------------------------------------------------------------------------ */

static void write_text(const char *name, const char *text) {
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/%s", ctk_dir, name);
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
  snprintf(path, sizeof path, "%s/dcp.gloo.00000000deadbeef", ctk_dir);
  assert_int_equal(mkdir(path, 0777), 0);
  write_text("dcp.gloo.00000000deadbeef/12345", "stale key");
}

/* Afterwards only the stale session directory is left (hellos and the
 * session file were replaced and removed). */
static void stale(int late_root) {
  ctk_fresh_dir("dcp-coll-gloo");
  plant_stale();
  assert_int_equal(ctk_run_ranks(4, ctk_scenario_stale, &late_root), 0);
  assert_int_equal(ctk_count_entries(ctk_dir), 1);
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/dcp.gloo.00000000deadbeef/12345", ctk_dir);
  assert_int_equal(access(path, F_OK), 0);
  ctk_remove_dir(ctk_dir);
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
static void test_two_jobs_one_dir(void **state) {
  (void)state;
  NEED_PLUGIN();
  ctk_fresh_dir("dcp-coll-gloo");
  const char *jobs[2] = {"job=a,host=127.0.0.1", "job=b"};
  assert_int_equal(ctk_run_ranks(4, ctk_scenario_two_jobs, (void *)jobs), 0);
  assert_int_equal(ctk_count_entries(ctk_dir), 0);
  ctk_remove_dir(ctk_dir);
}

/* ------------------------------------------------------------------------ */
/* Symbolic links planted in the directory                                  */
/* ------------------------------------------------------------------------ */

/* Each rank first plants a link to the victim (arg) at the temporary name
 * an earlier version of the shim wrote its hello or session file through
 * ("<name>.tmp.<pid>", predictable); then it opens, talks and closes. */
static int scenario_links(int rank, int world, void *arg) {
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  char path[PATH_MAX + 64];
  if (rank == 0)
    snprintf(path, sizeof path, "%s/dcp.gloo.session.tmp.%d", ctk_dir, (int)getpid());
  else
    snprintf(path, sizeof path, "%s/dcp.gloo.hello.%d.tmp.%d", ctk_dir, rank, (int)getpid());
  CHECK(symlink((const char *)arg, path) == 0);
  unsigned char send[8], recv[8 * 16];
  CHECK_RC(ctk_open_comm(rank, world, 10000, NULL, &c, &err), DCP_OK);
  ctk_fill(send, sizeof send, (unsigned)rank);
  CHECK_RC(ctk_P->allgather(c, send, sizeof send, recv, &err), DCP_OK);
  for (int r = 0; r < world; r++) CHECK(ctk_matches(recv + 8 * r, 8, (unsigned)r));
  ctk_P->close(c);
  return 0;
}

/* Links to a victim outside at the final names of the hellos and the
 * session file, and (by each rank) at its predictable temporary name: the
 * ranks open and talk normally, the victim is unchanged, and only the
 * temporary-name links are left (the others were replaced, then removed). */
static void test_links_planted(void **state) {
  (void)state;
  NEED_PLUGIN();
  char victim[PATH_MAX], path[PATH_MAX + 64];
  ctk_fresh_dir("dcp-coll-gloo");
  ctk_victim_make(victim);
  const char *names[] = {"dcp.gloo.hello.1", "dcp.gloo.hello.2", "dcp.gloo.session"};
  for (size_t i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", ctk_dir, names[i]);
    assert_int_equal(symlink(victim, path), 0);
  }
  assert_int_equal(ctk_run_ranks(3, scenario_links, victim), 0);
  assert_true(ctk_victim_intact(victim));
  assert_int_equal(ctk_count_entries(ctk_dir), 3);
  ctk_remove_dir(ctk_dir);
  ctk_victim_drop(victim);
}

/* Rank 0 of a world of 2 alone finds at rank 1's hello name a link to a
 * valid hello outside: it never reads through it, times out waiting for
 * rank 1's hello, and names the link. */
static int scenario_linked_hello(int rank, int world, void *arg) {
  (void)world, (void)arg;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(ctk_open_comm(rank, 2, 600, NULL, &c, &err), DCP_ETIMEDOUT);
  CHECK(strstr(err.msg, "waiting for the hello of rank(s) 1 ") != NULL);
  CHECK(strstr(err.msg, "dcp.gloo.hello.1 is a symbolic link or not a regular file") != NULL);
  return 0;
}

static void test_link_never_read(void **state) {
  (void)state;
  NEED_PLUGIN();
  char victim[PATH_MAX], hello[PATH_MAX + 16], path[PATH_MAX + 64];
  ctk_fresh_dir("dcp-coll-gloo");
  ctk_victim_make(victim);
  snprintf(hello, sizeof hello, "%s.hello", victim);
  FILE *f = fopen(hello, "w");
  assert_non_null(f);
  fputs("DCPGLOO1 2 3e9\n", f);
  assert_int_equal(fclose(f), 0);
  snprintf(path, sizeof path, "%s/dcp.gloo.hello.1", ctk_dir);
  assert_int_equal(symlink(hello, path), 0);
  assert_int_equal(ctk_run_ranks(1, scenario_linked_hello, NULL), 0);
  assert_true(ctk_victim_intact(victim));
  ctk_remove_dir(ctk_dir);
  ctk_victim_drop(victim);
}

/* A failing open through dcp_ctx_create (the table registered under its
 * name): the core names the plugin and the op, the plugin adds only what
 * failed, so each appears once ("gloo: open: ..." , never "open: open:").
 * One rank of two opens alone and times out waiting for the other; an
 * unknown option fails before any wait. */
static void check_open_message(const char *opts, int world, const char *want) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.world_size = world;
  cfg.coll = "gloo";
  cfg.coll_options = opts;
  cfg.rendezvous = ctk_dir;
  cfg.timeout_ms = 300;
  dcp_ctx *ctx = NULL;
  assert_int_not_equal(dcp_ctx_create(&cfg, &ctx), DCP_OK);
  assert_null(ctx);
  const char *msg = dcp_ctx_create_error();
  if (strncmp(msg, want, strlen(want)) || strstr(msg, "open: open") || strstr(msg + 5, "gloo: "))
    fail_msg("message \"%s\", want it to start \"%s\" with each prefix once", msg, want);
}

static void test_open_message_once(void **state) {
  (void)state;
  NEED_PLUGIN();
  ctk_fresh_dir("dcp-coll-gloo");
  assert_int_equal(dcp_plugin_register(DCP_PLUGIN_COLL, ctk_P), DCP_OK);
  check_open_message("color=red", 1, "gloo: open: unknown option \"color\" (known: job, ");
  check_open_message(NULL, 2, "gloo: open: timed out after 300 ms waiting for the hello of rank(s) 1");
  ctk_remove_dir(ctk_dir);
}

static int setup(void **state) {
  (void)state;
  ctk_P = ctk_load_plugin("gloo", 1);
  return 0; /* NULL: every test skips */
}

int main(int argc, char **argv) {
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
      cmocka_unit_test(test_exits_p2p),
      cmocka_unit_test(test_killed_before_store),
      cmocka_unit_test(test_killed_while_connecting),
      cmocka_unit_test(test_mismatched_lengths),
      cmocka_unit_test(test_stale_session_root_late),
      cmocka_unit_test(test_stale_hellos_others_late),
      cmocka_unit_test(test_two_jobs_one_dir),
      cmocka_unit_test(test_links_planted),
      cmocka_unit_test(test_link_never_read),
      cmocka_unit_test(test_open_message_once),
  };
  return TU_RUN(tests, setup, NULL);
}

/* The file-exchange collective plugin (dcp-coll-file.so), loaded with
 * dlopen from the build tree; ranks are forked children sharing a fresh
 * mkdtemp rendezvous directory. Children report through their exit code
 * (cmocka's asserts must not run in a child). */
#include "testutil.h"

#include "coll_testkit.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "dcp_plugin.h"

/* Op codes and trailer of the file format (see the protocol in file.c). */
#define OP_HELLO 1u
#define OP_SESSION 2u
#define OP_ALLGATHER 6u

/* Little-endian stores for hand-made files. */
static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Writes a file in the plugin's format: payload + trailer (hash of the
 * payload, or a wrong one when bad_hash). trailer=0 writes the payload only. */
static int write_raw(const char *path, uint32_t op, const void *payload, size_t len, int trailer,
                     int bad_hash) {
  unsigned char tr[32];
  put64(tr, len);
  put64(tr + 8, XXH3_64bits(len ? payload : "", len) ^ (bad_hash ? 1u : 0u));
  put32(tr + 16, op);
  put32(tr + 20, 0);
  memcpy(tr + 24, "DCPFXCH1", 8);
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int bad = (len && fwrite(payload, 1, len, f) != len) ||
            (trailer && fwrite(tr, 1, sizeof tr, f) != sizeof tr);
  return (fclose(f) != 0 || bad) ? -1 : 0;
}

/* ------------------------------------------------------------------------ */
/* Every op                                                                 */
/* ------------------------------------------------------------------------ */

/* bcast of every size from two roots. */
static int check_bcast(dcp_comm *c, int rank, int world, unsigned char *buf) {
  dcp_plugin_err err = {{0}};
  for (int root = 0; root < world; root += world - 1) {
    for (int s = 0; s < 3; s++) {
      unsigned seed = (unsigned)(root * 10 + s);
      memset(buf, 0, MIB);
      if (rank == root) ctk_fill(buf, CTK_SIZES[s], seed);
      CHECK_RC(ctk_P->bcast(c, buf, CTK_SIZES[s], root, &err), DCP_OK);
      CHECK(ctk_matches(buf, CTK_SIZES[s], seed));
      if (world == 1) break;
    }
    if (world == 1) break;
  }
  return 0;
}

/* gatherv to root 1 (mod world) with lengths 0 / 1 / 1 MiB by rank. */
static int check_gatherv(dcp_comm *c, int rank, int world, unsigned char *big) {
  dcp_plugin_err err = {{0}};
  int root = 1 % world;
  size_t lens[16], total = 0;
  for (int r = 0; r < world; r++) total += lens[r] = CTK_SIZES[(r + 1) % 3];
  unsigned char *send = malloc(lens[rank] + 1);
  CHECK(send && total <= 8 * MIB);
  ctk_fill(send, lens[rank], (unsigned)(200 + rank));
  CHECK_RC(ctk_P->gatherv(c, send, lens[rank], big, lens, root, &err), DCP_OK);
  for (size_t r = 0, off = 0; rank == root && r < (size_t)world; off += lens[r++])
    CHECK(ctk_matches(big + off, lens[r], (unsigned)(200 + r)));
  free(send);
  return 0;
}

/* scatterv from the last rank with lengths 1 MiB / 0 / 1 by rank. */
static int check_scatterv(dcp_comm *c, int rank, int world, unsigned char *big) {
  dcp_plugin_err err = {{0}};
  int root = world - 1;
  size_t lens[16], off = 0;
  for (int r = 0; r < world; r++) lens[r] = CTK_SIZES[(r + 2) % 3];
  for (int r = 0; rank == root && r < world; off += lens[r++]) ctk_fill(big + off, lens[r], (unsigned)(300 + r));
  unsigned char *recv = malloc(lens[rank] + 1);
  CHECK(recv);
  CHECK_RC(ctk_P->scatterv(c, big, lens, recv, lens[rank], root, &err), DCP_OK);
  CHECK(ctk_matches(recv, lens[rank], (unsigned)(300 + rank)));
  free(recv);
  return 0;
}

/* group_bcast in the even ranks (twice: the call counter), the odd ranks,
 * and a group of one; a global barrier in between. */
static int check_groups(dcp_comm *c, int rank, int world) {
  dcp_plugin_err err = {{0}};
  int32_t ranks[16];
  size_t n = 0;
  for (int r = rank % 2; r < world; r += 2) ranks[n++] = r;
  unsigned char buf[300];
  for (int rep = 0; rep < 2; rep++) {
    int32_t root = ranks[n - 1 - (size_t)rep % n];
    unsigned seed = (unsigned)(400 + rank % 2 * 10 + rep);
    memset(buf, 0, sizeof buf);
    if (rank == root) ctk_fill(buf, sizeof buf, seed);
    CHECK_RC(ctk_P->group_bcast(c, ranks, n, buf, sizeof buf, root, &err), DCP_OK);
    CHECK(ctk_matches(buf, sizeof buf, seed));
  }
  int32_t self = rank;
  CHECK_RC(ctk_P->group_bcast(c, &self, 1, buf, 1, rank, &err), DCP_OK);
  CHECK_RC(ctk_P->group_bcast(c, ranks, n, buf, 1, world, &err), DCP_EINVAL);
  CHECK_RC(ctk_P->barrier(c, &err), DCP_OK);
  return 0;
}

/* Every op with checks on every rank, then close. */
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
      ctk_check_allreduce(c, rank, world, 0) || check_groups(c, rank, world))
    return 1;
  free(big);
  ctk_P->close(c);
  return 0;
}

/* Runs every op on `world` ranks; the directory is empty afterwards. */
static void all_ops(int world) {
  ctk_fresh_dir("dcp-coll-file");
  assert_int_equal(ctk_run_ranks(world, scenario_all_ops, NULL), 0);
  assert_int_equal(ctk_count_entries(ctk_dir), 0);
  ctk_remove_dir(ctk_dir);
}

static void test_all_ops_2(void **state) {
  (void)state;
  all_ops(2);
}
static void test_all_ops_4(void **state) {
  (void)state;
  all_ops(4);
}
static void test_all_ops_8(void **state) {
  (void)state;
  all_ops(8);
}

/* A world of one in this process, on a rendezvous path that does not exist
 * yet (two levels). */
static void test_single_rank_creates_dir(void **state) {
  (void)state;
  char base[64];
  snprintf(base, sizeof base, "/tmp/dcp-coll-file-XXXXXX");
  assert_non_null(mkdtemp(base));
  snprintf(ctk_dir, sizeof ctk_dir, "%s/a/b", base);
  assert_int_equal(scenario_all_ops(0, 1, NULL), 0);
  assert_int_equal(ctk_count_entries(ctk_dir), 0);
  ctk_remove_dir(ctk_dir);
  snprintf(ctk_dir, sizeof ctk_dir, "%s/a", base);
  rmdir(ctk_dir);
  rmdir(base);
}

/* Invalid configurations are refused before touching the directory. */
static void test_config_validation(void **state) {
  (void)state;
  ctk_fresh_dir("dcp-coll-file");
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
  dcp_coll_config cfg = {.struct_size = sizeof cfg, .rank = 0, .world_size = 1,
                         .rendezvous = NULL, .timeout_ms = 1000};
  assert_int_equal(ctk_P->open(&cfg, &c, &err), DCP_EINVAL);
  cfg.rendezvous = ctk_dir;
  cfg.struct_size = 8;
  assert_int_equal(ctk_P->open(&cfg, &c, &err), DCP_EINVAL);
  assert_int_equal(ctk_count_entries(ctk_dir), 0);
  assert_int_equal(ctk_P->caps & DCP_COLL_CAP_BULK, 0);
  assert_string_equal(ctk_P->name, "file");
  ctk_remove_dir(ctk_dir);
}

/* ------------------------------------------------------------------------ */
/* Timeouts                                                                 */
/* ------------------------------------------------------------------------ */

#define TIMEOUT_MS 500

/* CHECKs that [t0, now] lies in [timeout, timeout + 2 s). */
#define CHECK_ELAPSED(t0)                                          \
  do {                                                             \
    double el_ = ctk_now_ms() - (t0);                                  \
    if (el_ < TIMEOUT_MS || el_ >= TIMEOUT_MS + 2000) {            \
      fprintf(stderr, "rank %d: elapsed %.1f ms\n", ctk_rank, el_); \
      return 1;                                                    \
    }                                                              \
  } while (0)

/* The last rank never arrives: every open times out, naming it at rank 0. */
static int scenario_never_arrives(int rank, int world, void *arg) {
  (void)arg;
  if (rank == world - 1) return 0;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  double t0 = ctk_now_ms();
  CHECK_RC(ctk_open_comm(rank, world, TIMEOUT_MS, NULL, &c, &err), DCP_ETIMEDOUT);
  CHECK_ELAPSED(t0);
  CHECK(c == NULL);
  char name[32];
  snprintf(name, sizeof name, "rank(s) %d", world - 1);
  CHECK(rank != 0 || strstr(err.msg, name) != NULL);
  return 0;
}

static void test_timeout_never_arrives(void **state) {
  (void)state;
  ctk_fresh_dir("dcp-coll-file");
  assert_int_equal(ctk_run_ranks(3, scenario_never_arrives, NULL), 0);
  ctk_remove_dir(ctk_dir);
}

/* The last rank leaves after a barrier: the next op times out on the others,
 * naming it and the round; the communicator then refuses further calls. */
static int scenario_exits_early(int rank, int world, void *arg) {
  (void)arg;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(ctk_open_comm(rank, world, TIMEOUT_MS, NULL, &c, &err), DCP_OK);
  CHECK_RC(ctk_P->barrier(c, &err), DCP_OK);
  if (rank == world - 1) return 0; /* gone without close */
  unsigned char send[8] = {0}, recv[64];
  double t0 = ctk_now_ms();
  CHECK_RC(ctk_P->allgather(c, send, sizeof send, recv, &err), DCP_ETIMEDOUT);
  CHECK_ELAPSED(t0);
  char name[32];
  snprintf(name, sizeof name, "rank(s) %d ", world - 1);
  CHECK(strstr(err.msg, name) != NULL && strstr(err.msg, "round 2") != NULL);
  CHECK_RC(ctk_P->barrier(c, &err), DCP_EPEER);
  ctk_P->close(c); /* returns at once: no closing round on a broken communicator */
  return 0;
}

static void test_timeout_exits_early(void **state) {
  (void)state;
  ctk_fresh_dir("dcp-coll-file");
  assert_int_equal(ctk_run_ranks(4, scenario_exits_early, NULL), 0);
  ctk_remove_dir(ctk_dir);
}

/* host_id (common/cc_host.h): nonzero, and the same on forked ranks of
 * one host (one machine, one network namespace). */
static int scenario_host_id(int rank, int world, void *arg) {
  (void)arg;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(ctk_open_comm(rank, world, 5000, NULL, &c, &err), DCP_OK);
  uint64_t mine = ctk_P->host_id(c), all[4] = {0};
  CHECK(mine != 0);
  CHECK_RC(ctk_P->allgather(c, &mine, sizeof mine, all, &err), DCP_OK);
  for (int r = 0; r < world; r++) CHECK(all[r] == mine, "rank %d's host id differs", r);
  ctk_P->close(c);
  return 0;
}

static void test_host_id(void **state) {
  (void)state;
  assert_non_null(ctk_P->host_id);
  ctk_fresh_dir("dcp-coll-file");
  assert_int_equal(ctk_run_ranks(3, scenario_host_id, NULL), 0);
  ctk_remove_dir(ctk_dir);
}

/* The last rank exits while the others are in a point-to-point op that
 * needs it (ctk_scenario_exits_p2p): nothing tells them but its missing
 * files, so they fail with DCP_ETIMEDOUT at the deadline, never later,
 * naming it once (scatterv waits for two files of it: its round file and
 * its piece). */
static void test_exits_p2p(void **state) {
  (void)state;
  for (int op = 0; op < CTK_P2P_OPS; op++) {
    ctk_fresh_dir("dcp-coll-file");
    ctk_p2p_case k = {.op = op, .timeout_ms = TIMEOUT_MS,
                      .want = "timed out after 500 ms waiting for rank(s) 2 (1 missing)"};
    assert_int_equal(ctk_run_ranks(3, ctk_scenario_exits_p2p, &k), 0);
    ctk_remove_dir(ctk_dir);
  }
}

/* ------------------------------------------------------------------------ */
/* Malformed files                                                          */
/* ------------------------------------------------------------------------ */

/* Finds the session id of job `job` from a round file name in ctk_dir. */
static int find_session(const char *job, char *hex) {
  DIR *d = opendir(ctk_dir);
  struct dirent *e;
  size_t jl = strlen(job);
  int found = 0;
  while (d && !found && (e = readdir(d)) != NULL) {
    const char *s = e->d_name;
    if (strncmp(s, job, jl) == 0 && s[jl] == '.' && strlen(s) > jl + 17 && s[jl + 17] == '.') {
      memcpy(hex, s + jl + 1, 16);
      hex[16] = '\0';
      found = strspn(hex, "0123456789abcdef") == 16;
    }
  }
  if (d) closedir(d);
  return found;
}

/* Rank 1 plants in round 2 a file without trailer (must be ignored until the
 * real one replaces it) and in round 3 one with a bad checksum (rank 0 gets
 * DCP_ECORRUPT). */
static int scenario_corrupt(int rank, int world, void *arg) {
  (void)arg;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(ctk_open_comm(rank, world, 5000, "job=corrupt", &c, &err), DCP_OK);
  CHECK_RC(ctk_P->barrier(c, &err), DCP_OK);
  unsigned char send[16], recv[32];
  ctk_fill(send, sizeof send, (unsigned)rank);
  if (rank == 1) {
    char hex[17], path[PATH_MAX + 64];
    CHECK(find_session("corrupt", hex));
    snprintf(path, sizeof path, "%s/corrupt.%s.2.1", ctk_dir, hex);
    CHECK(write_raw(path, OP_ALLGATHER, "garbage garbage garbage", 23, 0, 0) == 0);
    ctk_sleep_ms(300);
    CHECK_RC(ctk_P->allgather(c, send, sizeof send, recv, &err), DCP_OK);
    snprintf(path, sizeof path, "%s/corrupt.%s.3.1", ctk_dir, hex);
    CHECK(write_raw(path, OP_ALLGATHER, send, sizeof send, 1, 1) == 0);
    return 0; /* gone: rank 0 must fail on the checksum, not wait */
  }
  CHECK_RC(ctk_P->allgather(c, send, sizeof send, recv, &err), DCP_OK);
  CHECK(ctk_matches(recv, 16, 0) && ctk_matches(recv + 16, 16, 1));
  double t0 = ctk_now_ms();
  CHECK_RC(ctk_P->allgather(c, send, sizeof send, recv, &err), DCP_ECORRUPT);
  CHECK(ctk_now_ms() - t0 < 2500);
  CHECK(strstr(err.msg, "checksum") != NULL);
  ctk_P->close(c);
  return 0;
}

static void test_corrupt_payload(void **state) {
  (void)state;
  ctk_fresh_dir("dcp-coll-file");
  assert_int_equal(ctk_run_ranks(2, scenario_corrupt, NULL), 0);
  ctk_remove_dir(ctk_dir);
}

/* Ranks disagreeing on the op or the length get DCP_EINVAL, not a hang. */
static int scenario_mismatch(int rank, int world, void *arg) {
  (void)arg;
  (void)world;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(ctk_open_comm(rank, world, 5000, NULL, &c, &err), DCP_OK);
  unsigned char buf[8] = {0}, recv[32];
  if (rank == 0) {
    CHECK_RC(ctk_P->allgather(c, buf, 8, recv, &err), DCP_EINVAL);
    CHECK(strstr(err.msg, "8") != NULL);
  } else {
    CHECK_RC(ctk_P->allgather(c, buf, 4, recv, &err), DCP_EINVAL);
  }
  ctk_P->close(c);
  return 0;
}

static void test_mismatched_calls(void **state) {
  (void)state;
  ctk_fresh_dir("dcp-coll-file");
  assert_int_equal(ctk_run_ranks(2, scenario_mismatch, NULL), 0);
  ctk_remove_dir(ctk_dir);
}

/* Rank 1 closes its collective (its process is leaving) while rank 0
 * calls an allreduce: rank 0 fails at once with DCP_EPEER naming rank 1,
 * not as a mismatch of calls nor at its deadline. */
static int scenario_peer_closed(int rank, int world, void *arg) {
  (void)arg;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(ctk_open_comm(rank, world, 20000, NULL, &c, &err), DCP_OK);
  if (rank == 1) {
    ctk_P->close(c);
    return 0;
  }
  int64_t v[1] = {1};
  CHECK_RC(ctk_P->allreduce_i64(c, v, 1, DCP_REDUCE_SUM, &err), DCP_EPEER);
  CHECK(strstr(err.msg, "rank 1 closed its collective") != NULL);
  ctk_P->close(c);
  return 0;
}

static void test_peer_closed(void **state) {
  (void)state;
  ctk_fresh_dir("dcp-coll-file");
  assert_int_equal(ctk_run_ranks(2, scenario_peer_closed, NULL), 0);
  ctk_remove_dir(ctk_dir);
}

/* Rank 0 thinks the world has 2 ranks, rank 1 that it has 3: both time out
 * (no hang), and rank 0's message says what it saw. */
static int scenario_world_mismatch(int rank, int world, void *arg) {
  (void)world, (void)arg;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(ctk_open_comm(rank, rank == 0 ? 2 : 3, 800, NULL, &c, &err), DCP_ETIMEDOUT);
  CHECK(c == NULL);
  if (rank == 0) CHECK(strstr(err.msg, "names a world of 3 ranks, this one has 2"));
  return 0;
}

static void test_world_mismatch(void **state) {
  (void)state;
  ctk_fresh_dir("dcp-coll-file");
  assert_int_equal(ctk_run_ranks(2, scenario_world_mismatch, NULL), 0);
  ctk_remove_dir(ctk_dir);
}

/* ------------------------------------------------------------------------ */
/* Stale files and concurrent jobs                                          */
/* ------------------------------------------------------------------------ */

#define STALE_SESSION 0x00000000deadbeefull

/* Leaves the files of a crashed earlier job "dcp" of the same world size:
 * a session file, hellos and round files of its session. */
static void plant_stale(int world) {
  char path[PATH_MAX + 64];
  unsigned char s[12 + 8 * 16], h[12];
  put64(s, STALE_SESSION);
  put32(s + 8, (uint32_t)world);
  for (int r = 0; r < world; r++) {
    put64(s + 12 + 8 * r, 1000u + (unsigned)r);
    put64(h, 1000u + (unsigned)r);
    put32(h + 8, (uint32_t)world);
    snprintf(path, sizeof path, "%s/dcp.hello.%d", ctk_dir, r);
    if (r) assert_int_equal(write_raw(path, OP_HELLO, h, sizeof h, 1, 0), 0);
    snprintf(path, sizeof path, "%s/dcp.%016llx.1.%d", ctk_dir, (unsigned long long)STALE_SESSION, r);
    assert_int_equal(write_raw(path, 4u, NULL, 0, 1, 0), 0);
  }
  snprintf(path, sizeof path, "%s/dcp.session", ctk_dir);
  assert_int_equal(write_raw(path, OP_SESSION, s, 12 + 8 * (size_t)world, 1, 0), 0);
}

/* After the run only the stale round files are left (hellos and the
 * session file were replaced and removed). */
static void stale(int late_root) {
  ctk_fresh_dir("dcp-coll-file");
  plant_stale(4);
  assert_int_equal(ctk_run_ranks(4, ctk_scenario_stale, &late_root), 0);
  assert_int_equal(ctk_count_entries(ctk_dir), 4);
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/dcp.%016llx.1.3", ctk_dir, (unsigned long long)STALE_SESSION);
  assert_int_equal(access(path, F_OK), 0);
  ctk_remove_dir(ctk_dir);
}

static void test_stale_session_root_late(void **state) {
  (void)state;
  stale(1);
}
static void test_stale_hellos_others_late(void **state) {
  (void)state;
  stale(0);
}

/* Two jobs of two ranks each share the directory at the same time. */
static void test_two_jobs_one_dir(void **state) {
  (void)state;
  ctk_fresh_dir("dcp-coll-file");
  const char *jobs[2] = {"job=a", "job=b"};
  assert_int_equal(ctk_run_ranks(4, ctk_scenario_two_jobs, (void *)jobs), 0);
  assert_int_equal(ctk_count_entries(ctk_dir), 0);
  ctk_remove_dir(ctk_dir);
}

/* ------------------------------------------------------------------------ */
/* Symbolic links and fifos planted in the directory                        */
/* ------------------------------------------------------------------------ */

/* 1 when every entry left in ctk_dir is a symbolic link to victim. */
static int only_links_left(const char *victim) {
  DIR *d = opendir(ctk_dir);
  struct dirent *e;
  int ok = d != NULL;
  while (ok && (e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[PATH_MAX + 300], to[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", ctk_dir, e->d_name);
    ssize_t n = readlink(path, to, sizeof to - 1);
    ok = n > 0 && (size_t)n == strlen(victim) && memcmp(to, victim, (size_t)n) == 0;
  }
  if (d) closedir(d);
  return ok;
}

/* Opens with the options at arg, runs a barrier and an allgather, closes. */
static int scenario_small(int rank, int world, void *arg) {
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  unsigned char send[8], recv[8 * 16];
  CHECK_RC(ctk_open_comm(rank, world, 10000, arg, &c, &err), DCP_OK);
  CHECK_RC(ctk_P->barrier(c, &err), DCP_OK);
  ctk_fill(send, sizeof send, (unsigned)rank);
  CHECK_RC(ctk_P->allgather(c, send, sizeof send, recv, &err), DCP_OK);
  for (int r = 0; r < world; r++) CHECK(ctk_matches(recv + 8 * r, 8, (unsigned)r));
  ctk_P->close(c);
  return 0;
}

/* Links to a victim outside, planted at the temporary names an earlier
 * version wrote through ("<name>.tmp") and at the final names of the
 * hellos and the session file, for job `job`: the ranks open, talk and
 * close normally; the victim is unchanged; the links at final names were
 * replaced by the real files (then removed with them), the others are left
 * alone. */
static void links_planted(const char *job) {
  char victim[PATH_MAX], name[128], opts[96];
  ctk_fresh_dir("dcp-coll-file");
  ctk_victim_make(victim);
  for (int r = 1; r < 3; r++) {
    snprintf(name, sizeof name, "%s.hello.%d.tmp", job, r);
    ctk_plant_link(name, victim);
    snprintf(name, sizeof name, "%s.hello.%d", job, r);
    ctk_plant_link(name, victim);
  }
  snprintf(name, sizeof name, "%s.session.tmp", job);
  ctk_plant_link(name, victim);
  snprintf(name, sizeof name, "%s.session", job);
  ctk_plant_link(name, victim);
  snprintf(opts, sizeof opts, "job=%s", job);
  assert_int_equal(ctk_run_ranks(3, scenario_small, opts), 0);
  assert_true(ctk_victim_intact(victim));
  assert_int_equal(ctk_count_entries(ctk_dir), 3);
  assert_true(only_links_left(victim));
  ctk_remove_dir(ctk_dir);
  ctk_victim_drop(victim);
}

static void test_links_planted(void **state) {
  (void)state;
  links_planted("dcp");
}
/* The async writers' collective is this one with job=dcpwriter. */
static void test_links_planted_writers(void **state) {
  (void)state;
  links_planted("dcpwriter");
}

/* Rank 0 of a world of 2 alone (rank 1 never comes) finds at rank 1's hello
 * name either a link to a valid hello outside, or a fifo (*arg: 1 fifo):
 * it neither reads through the link nor blocks on the fifo; its open times
 * out on the hello files, and the message names the odd file. */
static int scenario_odd_hello(int rank, int world, void *arg) {
  (void)world;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(ctk_open_comm(rank, 2, 600, NULL, &c, &err), DCP_ETIMEDOUT);
  CHECK(strstr(err.msg, "waiting for the hello of rank(s) 1 ") != NULL);
  CHECK(strstr(err.msg, "dcp.hello.1 is a symbolic link or not a regular file") != NULL);
  (void)arg;
  return 0;
}

static void test_link_never_read(void **state) {
  (void)state;
  char victim[PATH_MAX], hello_path[PATH_MAX + 16];
  ctk_fresh_dir("dcp-coll-file");
  ctk_victim_make(victim);
  snprintf(hello_path, sizeof hello_path, "%s.hello", victim);
  unsigned char h[12];
  put64(h, 0x1234);
  put32(h + 8, 2);
  assert_int_equal(write_raw(hello_path, OP_HELLO, h, sizeof h, 1, 0), 0);
  ctk_plant_link("dcp.hello.1", hello_path);
  assert_int_equal(ctk_run_ranks(1, scenario_odd_hello, NULL), 0);
  assert_true(ctk_victim_intact(victim));
  unlink(hello_path);
  ctk_remove_dir(ctk_dir);
  ctk_victim_drop(victim);
}

static void test_fifo_never_blocks(void **state) {
  (void)state;
  char path[PATH_MAX + 16];
  ctk_fresh_dir("dcp-coll-file");
  snprintf(path, sizeof path, "%s/dcp.hello.1", ctk_dir);
  assert_int_equal(mkfifo(path, 0644), 0);
  assert_int_equal(ctk_run_ranks(1, scenario_odd_hello, NULL), 0);
  ctk_remove_dir(ctk_dir);
}

/* Loads the plugin once for all tests. */
static int setup(void **state) {
  (void)state;
  ctk_P = ctk_load_plugin("file", 0);
  return ctk_P ? 0 : -1;
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_validation),
      cmocka_unit_test(test_single_rank_creates_dir),
      cmocka_unit_test(test_all_ops_2),
      cmocka_unit_test(test_all_ops_4),
      cmocka_unit_test(test_all_ops_8),
      cmocka_unit_test(test_timeout_never_arrives),
      cmocka_unit_test(test_timeout_exits_early),
      cmocka_unit_test(test_exits_p2p),
      cmocka_unit_test(test_host_id),
      cmocka_unit_test(test_corrupt_payload),
      cmocka_unit_test(test_mismatched_calls),
      cmocka_unit_test(test_peer_closed),
      cmocka_unit_test(test_world_mismatch),
      cmocka_unit_test(test_stale_session_root_late),
      cmocka_unit_test(test_stale_hellos_others_late),
      cmocka_unit_test(test_two_jobs_one_dir),
      cmocka_unit_test(test_links_planted),
      cmocka_unit_test(test_links_planted_writers),
      cmocka_unit_test(test_link_never_read),
      cmocka_unit_test(test_fifo_never_blocks),
  };
  return TU_RUN(tests, setup, NULL);
}

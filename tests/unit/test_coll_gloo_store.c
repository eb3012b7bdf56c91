/* The gloo collective's rendezvous over TCP (option store=HOST:PORT, no
 * directory: plugins/coll/common/cc_store.c). Ranks are forked children
 * (coll_testkit.h) on 127.0.0.1 at a port that was free a moment before;
 * strangers are raw sockets or ranks of another job. Every test is
 * skipped when the plugin was not built. */
#include "testutil.h"

#include "coll_testkit.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dcp_plugin.h"

#define NEED_PLUGIN()   \
  do {                  \
    if (!ctk_P) skip(); \
  } while (0)

/* A TCP port of 127.0.0.1 that is free now (bound to 0, then closed). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &len))
    return -1;
  close(fd);
  return ntohs(a.sin_port);
}

/* A socket listening on 127.0.0.1:port (-1 on failure). */
static int listen_on(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 16)) return -1;
  return fd;
}

static int g_port;

/* What one rank does. */
typedef struct store_case {
  const char *job;       /* NULL: the default */
  int world_claim;       /* the world this rank opens with (0: the real one) */
  long delay_ms;         /* before opening */
  int64_t timeout_ms;
  int want;              /* the open's expected status */
  const char *want_msg;  /* a part of its message on failure (NULL: any) */
  int ops;               /* run collectives after a successful open */
} store_case;

static int open_store(int rank, int world, const store_case *k, dcp_comm **c,
                      dcp_plugin_err *err) {
  char opts[200];
  snprintf(opts, sizeof opts, "store=127.0.0.1:%d%s%s", g_port, k->job ? ",job=" : "",
           k->job ? k->job : "");
  dcp_coll_config cfg = {.struct_size = sizeof cfg, .rank = rank,
                         .world_size = k->world_claim ? k->world_claim : world,
                         .rendezvous = NULL, .timeout_ms = k->timeout_ms, .options = opts};
  return ctk_P->open(&cfg, c, err);
}

/* A few ops: barrier, allgather, allreduce, a bcast and a group bcast. */
static int some_ops(dcp_comm *c, int rank, int world) {
  dcp_plugin_err err = {{0}};
  unsigned char buf[4096];
  CHECK_RC(ctk_P->barrier(c, &err), DCP_OK);
  if (ctk_check_allgather(c, rank, world) || ctk_check_allreduce(c, rank, world, 1000)) return 1;
  if (rank == world - 1) ctk_fill(buf, sizeof buf, 77);
  CHECK_RC(ctk_P->bcast(c, buf, sizeof buf, world - 1, &err), DCP_OK);
  CHECK(ctk_matches(buf, sizeof buf, 77));
  int32_t all[16];
  for (int r = 0; r < world; r++) all[r] = r;
  if (rank == 0) ctk_fill(buf, 100, 78);
  CHECK_RC(ctk_P->group_bcast(c, all, (size_t)world, buf, 100, 0, &err), DCP_OK);
  CHECK(ctk_matches(buf, 100, 78));
  return 0;
}

/* Runs cases[rank] as ranks of one world. */
static int scenario_cases(int rank, int world, void *arg) {
  const store_case *k = &((const store_case *)arg)[rank];
  ctk_sleep_ms(k->delay_ms);
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  int rc = open_store(rank, world, k, &c, &err);
  if (rc != k->want) {
    fprintf(stderr, "rank %d: open = %d (%s), want %d\n", rank, rc, err.msg, k->want);
    return 1;
  }
  if (rc != DCP_OK) {
    CHECK(c == NULL && err.msg[0]);
    if (k->want_msg && !strstr(err.msg, k->want_msg)) {
      fprintf(stderr, "rank %d: message \"%s\" lacks \"%s\"\n", rank, err.msg, k->want_msg);
      return 1;
    }
    return 0;
  }
  int w = k->world_claim ? k->world_claim : world;
  CHECK(ctk_P->rank(c) == rank && ctk_P->size(c) == w);
  if (k->ops && some_ops(c, rank, w)) return 1;
  ctk_P->close(c);
  return 0;
}

static void run_cases(int world, store_case *cases) {
  g_port = free_port();
  assert_true(g_port > 0);
  assert_int_equal(ctk_run_ranks(world, scenario_cases, cases), 0);
}

/* Four ranks, then one, meet at the store with no directory, and the mesh
 * works; the port is free again afterwards (rank 0 stopped serving). */
static void test_store_ops(void **state) {
  (void)state;
  NEED_PLUGIN();
  store_case k[4];
  for (int r = 0; r < 4; r++) k[r] = (store_case){.timeout_ms = 20000, .ops = 1};
  run_cases(4, k);
  int fd = listen_on(g_port);
  assert_true(fd >= 0);
  close(fd);
  run_cases(1, k);
}

/* Rank 0 starts last: the others retry their connections until it
 * listens; and the others late: rank 0 waits. */
static void test_store_late(void **state) {
  (void)state;
  NEED_PLUGIN();
  store_case k[3];
  for (int r = 0; r < 3; r++) k[r] = (store_case){.timeout_ms = 20000, .ops = 1};
  k[0].delay_ms = 700;
  run_cases(3, k);
  k[0].delay_ms = 0;
  k[1].delay_ms = k[2].delay_ms = 500;
  run_cases(3, k);
}

/* A rank that never comes: rank 0 times out naming it ("rank(s) 2 (1
 * missing)", or "rank(s) 1, 2 (2 missing)" when rank 1 was late as well
 * on a loaded machine), rank 1 too. */
static void test_store_missing_rank(void **state) {
  (void)state;
  NEED_PLUGIN();
  store_case k[2] = {{.timeout_ms = 2500, .want = DCP_ETIMEDOUT, .want_msg = " 2 ("},
                     {.timeout_ms = 2500, .want = DCP_ETIMEDOUT}};
  k[0].world_claim = k[1].world_claim = 3;
  run_cases(2, k);
}

/* The port is taken: rank 0 says so (DCP_EIO, at once); rank 1 finds a
 * listener that never answers and times out. */
static void test_store_port_in_use(void **state) {
  (void)state;
  NEED_PLUGIN();
  g_port = free_port();
  int fd = listen_on(g_port);
  assert_true(fd >= 0);
  store_case k[2] = {{.timeout_ms = 1500, .want = DCP_EIO, .want_msg = "in use"},
                     {.timeout_ms = 1500, .want = DCP_ETIMEDOUT, .want_msg = "store"}};
  assert_int_equal(ctk_run_ranks(2, scenario_cases, k), 0);
  close(fd);
}

/* Strangers at the store of a job of two (ranks 0 and 1): a rank of
 * another job, a rank claiming another world size: both refused (they time
 * out saying so), and the job forms without them. */
static void test_store_strangers(void **state) {
  (void)state;
  NEED_PLUGIN();
  store_case k[4] = {
      {.timeout_ms = 20000, .world_claim = 2, .ops = 0},
      {.timeout_ms = 20000, .world_claim = 2, .delay_ms = 1500, .ops = 0},
      {.timeout_ms = 2500, .job = "other", .world_claim = 3, .want = DCP_ETIMEDOUT,
       .want_msg = "refused this rank: "},
      {.timeout_ms = 2500, .world_claim = 5, .want = DCP_ETIMEDOUT,
       .want_msg = "refused this rank: "},
  };
  /* ranks 2 and 3 open as rank 2 of 3 / rank 3 of 5 at the same port */
  run_cases(4, k);
}

/* Bytes that are not the store's protocol: a raw client sending junk and
 * an HTTP request to rank 0 is dropped while the job forms; a rank whose
 * store address is a server that answers junk times out saying so. */
static int scenario_junk(int rank, int world, void *arg) {
  (void)arg;
  if (rank == 2) { /* the junk client, during rank 0's wait */
    ctk_sleep_ms(100);
    for (int i = 0; i < 2; i++) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
      for (int t = 0; t < 50 && connect(fd, (struct sockaddr *)&a, sizeof a); t++) ctk_sleep_ms(20);
      const char *junk = i ? "GET / HTTP/1.0\r\n\r\n" : "\xff\xff\xff\x7f junk junk junk junk";
      send(fd, junk, strlen(junk), MSG_NOSIGNAL);
      ctk_sleep_ms(100);
      close(fd);
    }
    return 0;
  }
  store_case k = {.timeout_ms = 20000, .world_claim = 2, .delay_ms = rank ? 500 : 0, .ops = 1};
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  ctk_sleep_ms(k.delay_ms);
  CHECK_RC(open_store(rank, world, &k, &c, &err), DCP_OK);
  if (some_ops(c, rank, 2)) return 1;
  ctk_P->close(c);
  return 0;
}

static int scenario_junk_server(int rank, int world, void *arg) {
  (void)world;
  int lfd = *(int *)arg;
  if (rank == 0) { /* answers every connection with junk */
    for (int i = 0; i < 3; i++) {
      int fd = accept(lfd, NULL, NULL);
      if (fd < 0) return 1;
      send(fd, "HTTP/1.0 400 Bad\r\n\r\n", 20, MSG_NOSIGNAL);
      close(fd);
    }
    return 0;
  }
  store_case k = {.timeout_ms = 1500, .world_claim = 2};
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(open_store(1, 2, &k, &c, &err), DCP_ETIMEDOUT);
  CHECK(strstr(err.msg, "does not speak") != NULL);
  return 0;
}

static void test_store_junk(void **state) {
  (void)state;
  NEED_PLUGIN();
  g_port = free_port();
  assert_int_equal(ctk_run_ranks(3, scenario_junk, NULL), 0);
  g_port = free_port();
  int lfd = listen_on(g_port);
  assert_true(lfd >= 0);
  assert_int_equal(ctk_run_ranks(2, scenario_junk_server, &lfd), 0);
  close(lfd);
}

/* A rank 1 that said hello and was killed before the session formed does
 * not count: rank 0 forms the session with the live rank 1 that comes
 * later (a session with the dead one would fail its mesh connect). */
static int scenario_dead(int rank, int world, void *arg) {
  (void)world;
  store_case *k = arg;
  if (rank < 3) return scenario_cases(rank, 3, arg);
  pid_t dead = fork(); /* says hello as rank 1, then dies */
  if (dead == 0) {
    dcp_plugin_err err;
    dcp_comm *c = NULL;
    open_store(1, 3, &k[3], &c, &err);
    _exit(0);
  }
  CHECK(dead > 0);
  ctk_sleep_ms(300);
  kill(dead, SIGKILL);
  waitpid(dead, NULL, 0);
  return 0;
}

static void test_store_dead_hello(void **state) {
  (void)state;
  NEED_PLUGIN();
  store_case k[4] = {{.timeout_ms = 20000, .world_claim = 3, .ops = 1},
                     {.timeout_ms = 20000, .world_claim = 3, .delay_ms = 800, .ops = 1},
                     {.timeout_ms = 20000, .world_claim = 3, .delay_ms = 900, .ops = 1},
                     {.timeout_ms = 20000, .world_claim = 3}};
  g_port = free_port();
  assert_int_equal(ctk_run_ranks(4, scenario_dead, k), 0);
}

/* Bad store addresses are refused at open. */
static void test_store_bad_address(void **state) {
  (void)state;
  NEED_PLUGIN();
  const char *bad[] = {"store=nocolon", "store=127.0.0.1:0", "store=127.0.0.1:99999",
                       "store=:5", "store=::1:5", "store=[::1]5", "store=127.0.0.1:5x",
                       "store=127.0.0.1:29500,host=127.0.0.1,iface=lo"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    dcp_plugin_err err = {{0}};
    dcp_comm *c = NULL;
    dcp_coll_config cfg = {.struct_size = sizeof cfg, .rank = 0, .world_size = 2,
                           .timeout_ms = 1000, .options = bad[i]};
    assert_int_equal(ctk_P->open(&cfg, &c, &err), DCP_EINVAL);
    assert_null(c);
  }
  /* neither a directory nor a store */
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  dcp_coll_config cfg = {.struct_size = sizeof cfg, .rank = 0, .world_size = 2, .timeout_ms = 1000};
  assert_int_equal(ctk_P->open(&cfg, &c, &err), DCP_EINVAL);
  assert_non_null(strstr(err.msg, "store=HOST:PORT"));
}

static int setup(void **state) {
  (void)state;
  ctk_P = ctk_load_plugin("gloo", 1);
  return 0; /* NULL: every test skips */
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_bad_address),   cmocka_unit_test(test_store_ops),
      cmocka_unit_test(test_store_late),          cmocka_unit_test(test_store_missing_rank),
      cmocka_unit_test(test_store_port_in_use),   cmocka_unit_test(test_store_strangers),
      cmocka_unit_test(test_store_junk),          cmocka_unit_test(test_store_dead_hello),
  };
  return TU_RUN(tests, setup, NULL);
}

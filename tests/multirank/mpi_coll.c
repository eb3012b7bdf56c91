/* Multi-rank test of dcp-coll-mpi.so under mpirun.
 *
 *   mpi_coll PLUGIN.so main      every op, groups, a user communicator,
 *                                message splitting (max_msg=1 MiB)
 *   mpi_coll PLUGIN.so rounds    the same with a 2.5 MB bounce buffer: the
 *                                larger payloads move in several rounds
 *   mpi_coll PLUGIN.so timeout   the last rank skips a barrier
 *   mpi_coll PLUGIN.so selfinit  the plugin initialises and finalises MPI
 *
 * A failed check aborts the whole job (MPI_Abort), so mpirun exits non-zero
 * at once instead of leaving the other ranks waiting. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A failed CHECK (rank_check.h, through coll_testkit.h) aborts the job. */
static int g_rank = -1;
#define CHECK_RANK g_rank
#define CHECK_FAIL() (MPI_Abort(MPI_COMM_WORLD, 1), exit(1))
#include "coll_testkit.h"
#include "dcp.h"
#include "dcp_plugin.h"

#define MIB (1024u * 1024u)
#define MAX_MSG MIB
#define OVER (MAX_MSG + 3)          /* just over one piece */
#define MULTI (3 * MAX_MSG + 5)     /* several pieces */
#define TIMEOUT_MS 500

static const dcp_coll_plugin *P;


/* Opens on *native (NULL: world) with options. */
static int open_comm(MPI_Comm *native, int64_t timeout_ms, const char *opts, dcp_comm **c,
                     dcp_plugin_err *err) {
  dcp_coll_config cfg = {.struct_size = sizeof cfg, .native = native, .timeout_ms = timeout_ms,
                         .options = opts};
  return P->open(&cfg, c, err);
}

static const size_t SIZES[4] = {0, 1, OVER, MULTI};

/* bcast of every size from the first and the last rank. */
static void check_bcast(dcp_comm *c, int rank, int size, unsigned char *buf) {
  dcp_plugin_err err = {{0}};
  for (int root = 0; root < size; root += size - 1) {
    for (int s = 0; s < 4; s++) {
      unsigned seed = (unsigned)(root * 10 + s);
      memset(buf, 0, MULTI);
      if (rank == root) ctk_fill(buf, SIZES[s], seed);
      CHECK_RC(P->bcast(c, buf, SIZES[s], root, &err), DCP_OK);
      CHECK(ctk_matches(buf, SIZES[s], seed));
    }
  }
}

/* allgather of every size (the larger ones through the strided pieces). */
static void check_allgather(dcp_comm *c, int rank, int size) {
  dcp_plugin_err err = {{0}};
  for (int s = 0; s < 4; s++) {
    size_t len = SIZES[s];
    unsigned char *send = malloc(len + 1), *recv = malloc(len * (size_t)size + 1);
    CHECK(send && recv);
    ctk_fill(send, len, (unsigned)(100 + rank));
    CHECK_RC(P->allgather(c, send, len, recv, &err), DCP_OK);
    for (int r = 0; r < size; r++) CHECK(ctk_matches(recv + (size_t)r * len, len, (unsigned)(100 + r)));
    free(send);
    free(recv);
  }
}

/* gatherv and scatterv with rank-dependent lengths of every size. */
static void check_gather_scatter(dcp_comm *c, int rank, int size) {
  dcp_plugin_err err = {{0}};
  size_t lens[64], total = 0;
  for (int r = 0; r < size; r++) total += lens[r] = SIZES[(r + 1) % 4];
  unsigned char *all = calloc(total + 1, 1), *mine = malloc(lens[rank] + 1);
  CHECK(all && mine);
  int root = 1 % size;
  ctk_fill(mine, lens[rank], (unsigned)(200 + rank));
  CHECK_RC(P->gatherv(c, mine, lens[rank], all, lens, root, &err), DCP_OK);
  for (size_t r = 0, off = 0; rank == root && r < (size_t)size; off += lens[r++])
    CHECK(ctk_matches(all + off, lens[r], (unsigned)(200 + r)));
  root = size - 1;
  for (size_t r = 0, off = 0; rank == root && r < (size_t)size; off += lens[r++])
    ctk_fill(all + off, lens[r], (unsigned)(300 + r));
  memset(mine, 0, lens[rank] + 1);
  CHECK_RC(P->scatterv(c, all, lens, mine, lens[rank], root, &err), DCP_OK);
  CHECK(ctk_matches(mine, lens[rank], (unsigned)(300 + rank)));
  free(all);
  free(mine);
}

/* allreduce MIN/MAX/SUM, a vector longer than one piece among them. */
static void check_allreduce(dcp_comm *c, int rank, int size) {
  dcp_plugin_err err = {{0}};
  size_t n = MAX_MSG / 8 + 5;
  int64_t *v = malloc(n * sizeof *v);
  CHECK(v);
  for (size_t i = 0; i < n; i++) v[i] = (int64_t)i * (rank + 1);
  CHECK_RC(P->allreduce_i64(c, v, n, DCP_REDUCE_SUM, &err), DCP_OK);
  for (size_t i = 0; i < n; i++) CHECK(v[i] == (int64_t)i * size * (size + 1) / 2);
  int64_t m[2] = {rank + 5, -rank};
  CHECK_RC(P->allreduce_i64(c, m, 2, DCP_REDUCE_MIN, &err), DCP_OK);
  CHECK(m[0] == 5 && m[1] == 1 - size);
  int64_t x[2] = {rank + 5, -rank};
  CHECK_RC(P->allreduce_i64(c, x, 2, DCP_REDUCE_MAX, &err), DCP_OK);
  CHECK(x[0] == size + 4 && x[1] == 0);
  CHECK_RC(P->allreduce_i64(c, x, 1, 42, &err), DCP_EINVAL);
  free(v);
}

/* One group_bcast of len bytes in group g (n ranks) from root. */
static void group_round(dcp_comm *c, const int32_t *g, size_t n, int32_t root, size_t len,
                        unsigned seed, int rank) {
  dcp_plugin_err err = {{0}};
  unsigned char *buf = calloc(len + 1, 1);
  CHECK(buf);
  if (rank == root) ctk_fill(buf, len, seed);
  CHECK_RC(P->group_bcast(c, g, n, buf, len, root, &err), DCP_OK);
  CHECK(ctk_matches(buf, len, seed));
  free(buf);
}

/* group_bcast over even/odd ranks (three times each: cache hits), the pair
 * {0, last}, a group of one, and a payload over the piece size. */
static void check_groups(dcp_comm *c, int rank, int size) {
  dcp_plugin_err err = {{0}};
  int32_t g[64], pair[2] = {0, size - 1}, self = rank;
  size_t n = 0;
  for (int r = rank % 2; r < size; r += 2) g[n++] = r;
  for (int rep = 0; rep < 3; rep++)
    group_round(c, g, n, g[(size_t)rep % n], 64 + (size_t)rep, (unsigned)(400 + rep + rank % 2), rank);
  group_round(c, g, n, g[n - 1], OVER, 450u + (unsigned)(rank % 2), rank);
  if (rank == 0 || rank == size - 1) group_round(c, pair, 2, size - 1, 1000, 460, rank);
  group_round(c, &self, 1, rank, 10, 470, rank);
  CHECK_RC(P->group_bcast(c, g, n, g, 4, size, &err), DCP_EINVAL);
  CHECK_RC(P->barrier(c, &err), DCP_OK);
}

/* The plugin's traffic stays off the application's communicator: an
 * application receive posted on world for any source and tag must still
 * receive the application's own message after plugin traffic. */
static void check_isolation(dcp_comm *c, int rank, int size) {
  dcp_plugin_err err = {{0}};
  int got = -1, msg = 1000 + rank;
  MPI_Request rq;
  MPI_Irecv(&got, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &rq);
  check_gather_scatter(c, rank, size);
  CHECK_RC(P->barrier(c, &err), DCP_OK);
  MPI_Send(&msg, 1, MPI_INT, (rank + 1) % size, 7, MPI_COMM_WORLD);
  MPI_Wait(&rq, MPI_STATUS_IGNORE);
  CHECK(got == 1000 + (rank + size - 1) % size);
}

/* A communicator of the application (odd/even split, reversed order)
 * passed through cfg->native. */
static void check_native(int rank, int size) {
  dcp_plugin_err err = {{0}};
  MPI_Comm split;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &split);
  int srank, ssize;
  MPI_Comm_rank(split, &srank);
  MPI_Comm_size(split, &ssize);
  dcp_comm *c = NULL;
  CHECK_RC(open_comm(&split, 20000, NULL, &c, &err), DCP_OK);
  CHECK(P->rank(c) == srank && P->size(c) == ssize);
  int64_t ids[64], me = rank;
  CHECK_RC(P->allgather(c, &me, sizeof me, ids, &err), DCP_OK);
  for (int i = 0; i < ssize; i++) CHECK(ids[i] % 2 == rank % 2 && (i == 0 || ids[i] < ids[i - 1]));
  int64_t sum = 1;
  CHECK_RC(P->allreduce_i64(c, &sum, 1, DCP_REDUCE_SUM, &err), DCP_OK);
  CHECK(sum == ssize);
  P->close(c);
  MPI_Comm_free(&split);
  (void)size;
}

/* Options and config are checked before any communication. */
static void check_config(int rank, int size) {
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(open_comm(NULL, 1000, "max_msg=0", &c, &err), DCP_EINVAL);
  CHECK_RC(open_comm(NULL, 1000, "speed=fast", &c, &err), DCP_EINVAL);
  CHECK_RC(open_comm(NULL, 1000, "bounce=0", &c, &err), DCP_EINVAL);
  CHECK_RC(open_comm(NULL, 1000, "bounce=", &c, &err), DCP_EINVAL);
  CHECK_RC(open_comm(NULL, 0, NULL, &c, &err), DCP_EINVAL);
  dcp_coll_config cfg = {.struct_size = 8, .timeout_ms = 1000};
  CHECK_RC(P->open(&cfg, &c, &err), DCP_EINVAL);
  CHECK(c == NULL);
  (void)rank;
  (void)size;
  CHECK(P->caps == (DCP_COLL_CAP_BULK | DCP_COLL_CAP_GROUPS) && strcmp(P->name, "mpi") == 0);
}

static const char *g_plugin_file;

/* Through a context: a world size the caller set that MPI contradicts is
 * refused (DCP_EINVAL naming both), the matching one accepted. */
static void check_ctx_world(int size) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", g_plugin_file);
  char *slash = strrchr(dir, '/');
  CHECK(slash);
  *slash = '\0';
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.coll = "mpi";
  cfg.plugin_path = dir;
  cfg.world_size = size + 1;
  dcp_ctx *ctx = NULL;
  dcp_plugin_err err = {{0}}; /* for CHECK_RC's message: the create error */
  dcp_status rc = dcp_ctx_create(&cfg, &ctx);
  snprintf(err.msg, sizeof err.msg, "%s", dcp_ctx_create_error());
  CHECK_RC(rc, DCP_EINVAL);
  CHECK(ctx == NULL && strstr(dcp_ctx_create_error(), "collective has"));
  cfg.world_size = size;
  rc = dcp_ctx_create(&cfg, &ctx);
  snprintf(err.msg, sizeof err.msg, "%s", dcp_ctx_create_error());
  CHECK_RC(rc, DCP_OK);
  CHECK(dcp_ctx_world_size(ctx) == size);
  dcp_ctx_free(ctx);
}

/* Every op on a duplicate of world with 1 MiB pieces (opts). */
static int run_main(const char *opts) {
  int rank, size, provided;
  MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  g_rank = rank;
  CHECK(size <= 64);
  check_config(rank, size);
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(open_comm(NULL, 30000, opts, &c, &err), DCP_OK);
  CHECK(P->rank(c) == rank && P->size(c) == size);
  unsigned char *buf = malloc(MULTI);
  CHECK(buf);
  CHECK_RC(P->barrier(c, &err), DCP_OK);
  check_bcast(c, rank, size, buf);
  check_allgather(c, rank, size);
  check_isolation(c, rank, size);
  check_allreduce(c, rank, size);
  check_groups(c, rank, size);
  free(buf);
  P->close(c);
  check_native(rank, size);
  check_ctx_world(size);
  MPI_Finalize();
  return 0;
}

/* The last rank skips one barrier: the others time out in [timeout,
 * timeout + 2 s), then get DCP_EPEER. The late rank then joins that barrier
 * while the others progress in a world barrier, so nothing stays pending
 * and every rank finalises normally. */
static int run_timeout(void) {
  int rank, size, provided;
  MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  g_rank = rank;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(open_comm(NULL, TIMEOUT_MS, NULL, &c, &err), DCP_OK);
  CHECK_RC(P->barrier(c, &err), DCP_OK);
  if (rank == size - 1) {
    MPI_Barrier(MPI_COMM_WORLD); /* the others have timed out */
    dcp_comm *late = c;
    CHECK_RC(P->barrier(late, &err), DCP_OK);
  } else {
    double t0 = ctk_now_ms();
    CHECK_RC(P->barrier(c, &err), DCP_ETIMEDOUT);
    double el = ctk_now_ms() - t0;
    if (el < TIMEOUT_MS || el >= TIMEOUT_MS + 2000) fprintf(stderr, "elapsed %.1f ms\n", el);
    CHECK(el >= TIMEOUT_MS && el < TIMEOUT_MS + 2000);
    CHECK(strstr(err.msg, "barrier") != NULL);
    CHECK_RC(P->barrier(c, &err), DCP_EPEER);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD); /* progresses the abandoned barrier to completion */
  P->close(c);
  MPI_Finalize();
  return 0;
}

/* MPI not initialised by the program: the plugin does it and finalises. */
static int run_selfinit(void) {
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  int init = 1, fin = 0;
  MPI_Initialized(&init);
  if (init) return 1;
  CHECK_RC(open_comm(NULL, 20000, NULL, &c, &err), DCP_OK);
  g_rank = P->rank(c);
  int64_t v = 1;
  CHECK_RC(P->allreduce_i64(c, &v, 1, DCP_REDUCE_SUM, &err), DCP_OK);
  CHECK(v == P->size(c));
  P->close(c);
  MPI_Finalized(&fin);
  if (!fin) {
    fprintf(stderr, "rank %d: MPI not finalised by close\n", g_rank);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  g_plugin_file = argv[argc > 1 ? 1 : 0];
  if (argc != 3 || !(P = ctk_load_path(argv[1]))) {
    fprintf(stderr, "usage: %s PLUGIN.so main|rounds|timeout|selfinit\n", argv[0]);
    return 2;
  }
  if (strcmp(argv[2], "main") == 0) return run_main("max_msg=1048576");
  if (strcmp(argv[2], "rounds") == 0) return run_main("max_msg=1048576,bounce=2500000");
  if (strcmp(argv[2], "timeout") == 0) return run_timeout();
  if (strcmp(argv[2], "selfinit") == 0) return run_selfinit();
  return 2;
}

/* replica_check — silent data corruption across replicas (issue 20 item 4),
 * as ranks of one job (dcp_launch over the file collective, or mpirun):
 *
 *   replica_check --coll file|mpi [--rendezvous DIR] --dir CKPT --dp N
 *                 [--mode flip|async|fault-check|fault-save] [--timeout-ms MS]
 *                 [--fault-rank R]
 *
 * The world is a mesh dp x (world/dp): "w" (f32 [8, 6]) is split over the
 * second mesh dimension and replicated over the first, "b" (f32 [5]) and
 * the bytes item "cfg" are held by every rank; every value is a function of
 * its global position, so replicas are equal.
 *
 * flip: a checked save succeeds and loads back bit for bit; then one bit
 *   of the last rank's copy of "w" is flipped: dcp_check_replicas reports
 *   it (report only, then failing with DCP_EREPLICA), a checked overwrite
 *   fails with DCP_EREPLICA on every rank, and the messages name the fqn,
 *   the box and the ranks (with dp >= 3 the majority and the odd one out);
 *   the previous checkpoint still loads bit for bit.
 * async: the same through dcp_async_save (the writers check the staged
 *   copies): the checked overwrite's wait gives DCP_EREPLICA, the previous
 *   checkpoint loads.
 * fault-check / fault-save: rank R exits in the hash exchange (the fault
 *   collective, at the check's gather); every other rank's call must fail
 *   with DCP_ETIMEDOUT or DCP_EPEER within the deadline + 5 s.
 * (The cost of the check: bench/replica-bench.c.) */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dcp.h"
#include "fault_coll.h"
#include "rank_check.h"

typedef struct args {
  const char *coll, *rendezvous, *dir, *mode;
  int dp, fault_rank;
  long long timeout_ms;
} args;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static dcp_ctx *open_ctx(const args *a, int fault) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.coll = a->coll;
  cfg.timeout_ms = a->timeout_ms;
  if (fault) {
    CHECK(fc_register(a->coll) == 0, "cannot set up the fault collective over %s", a->coll);
    cfg.coll = "fault";
  }
  if (!strcmp(a->coll, "file")) {
    const char *r = getenv("DCP_TEST_RANK"), *w = getenv("DCP_TEST_WORLD");
    CHECK(r && w, "the file collective needs DCP_TEST_RANK/DCP_TEST_WORLD (run under launch)");
    cfg.rank = atoi(r);
    cfg.world_size = atoi(w);
    cfg.rendezvous = a->rendezvous;
  }
  dcp_ctx *ctx;
  dcp_status rc = dcp_ctx_create(&cfg, &ctx);
  CHECK(rc == DCP_OK, "ctx_create: %s: %s", dcp_strerror(rc), dcp_ctx_create_error());
  g_rank = dcp_ctx_rank(ctx);
  return ctx;
}

/* This rank's buffers and the state over them. */
typedef struct model {
  dcp_layout *lw, *lb;
  dcp_box bw;
  float *w, *b;
  char cfg[32];
  dcp_state *st;
} model;

static const int64_t W_SHAPE[2] = {8, 6}, B_SHAPE[1] = {5};

static void fill(model *m, float bias) {
  for (int64_t i = 0; i < m->bw.size[0]; i++)
    for (int64_t j = 0; j < m->bw.size[1]; j++)
      m->w[i * m->bw.size[1] + j] = bias + (float)((m->bw.offset[0] + i) * 100 + j);
  for (int k = 0; k < 5; k++) m->b[k] = bias + 0.5f * (float)k;
  snprintf(m->cfg, sizeof m->cfg, "lr=0.001 bias=%g", (double)bias);
}

static void model_make(dcp_ctx *ctx, const args *a, model *m, int zero) {
  int32_t world = dcp_ctx_world_size(ctx), rank = dcp_ctx_rank(ctx);
  CHECK(world % a->dp == 0, "world %d is not a multiple of dp %d", world, a->dp);
  int64_t mesh[2] = {a->dp, world / a->dp};
  uint32_t map_w[2] = {1u << 1, 0}, map_b[1] = {0};
  OK(dcp_layout_create(ctx, 2, mesh, NULL, 2, map_w, &m->lw), ctx);
  OK(dcp_layout_create(ctx, 2, mesh, NULL, 1, map_b, &m->lb), ctx);
  OK(dcp_layout_box(m->lw, W_SHAPE, rank, &m->bw), ctx);
  m->w = calloc((size_t)(m->bw.size[0] * m->bw.size[1]) + 1, sizeof(float));
  m->b = calloc(5, sizeof(float));
  CHECK(m->w && m->b);
  memset(m->cfg, 0, sizeof m->cfg);
  if (!zero) fill(m, 1.0f);
  OK(dcp_state_create(ctx, &m->st), ctx);
  OK(dcp_state_add_sharded(m->st, "w", DCP_F32, 2, W_SHAPE, m->lw, m->w), ctx);
  OK(dcp_state_add_sharded(m->st, "b", DCP_F32, 1, B_SHAPE, m->lb, m->b), ctx);
  OK(dcp_state_add_bytes(m->st, "cfg", DCP_SCOPE_REPLICATED, m->cfg, sizeof m->cfg), ctx);
}

static void model_free(model *m) {
  dcp_state_free(m->st);
  dcp_layout_free(m->lw);
  dcp_layout_free(m->lb);
  free(m->w);
  free(m->b);
}

/* Load dir into fresh buffers and compare them bit for bit with ref. */
static void load_equal(dcp_ctx *ctx, const args *a, const model *ref) {
  model m;
  model_make(ctx, a, &m, 1);
  OK(dcp_load(ctx, m.st, a->dir, NULL), ctx);
  size_t nw = (size_t)(ref->bw.size[0] * ref->bw.size[1]);
  CHECK(!memcmp(m.w, ref->w, nw * sizeof(float)), "w differs after the load");
  CHECK(!memcmp(m.b, ref->b, 5 * sizeof(float)), "b differs after the load");
  CHECK(!memcmp(m.cfg, ref->cfg, sizeof m.cfg), "cfg differs after the load");
  model_free(&m);
}

static dcp_save_options checked(uint32_t flags) {
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.flags = flags | DCP_SAVE_CHECK_REPLICAS;
  return o;
}

/* What a message about the flipped copy must say: the fqn and box, the
 * odd rank, and with three or more holders that it is the majority's. */
static void check_message(const char *msg, const args *a, const model *m, int32_t odd) {
  char want[160];
  snprintf(want, sizeof want, "'w' box [%lld:%lld, %lld:%lld]", (long long)m->bw.offset[0],
           (long long)(m->bw.offset[0] + m->bw.size[0]), (long long)m->bw.offset[1],
           (long long)(m->bw.offset[1] + m->bw.size[1]));
  CHECK(strstr(msg, want), "the message does not name %s: %s", want, msg);
  snprintf(want, sizeof want, "rank %d (xxh3", odd);
  CHECK(strstr(msg, want), "the message does not name the odd %s): %s", want, msg);
  if (a->dp >= 3) {
    snprintf(want, sizeof want, "hold the majority copy (xxh3 ");
    CHECK(strstr(msg, want), "no majority in: %s", msg);
    snprintf(want, sizeof want, "%d of %d holders", a->dp - 1, a->dp);
    CHECK(strstr(msg, want), "the message does not count %s: %s", want, msg);
  } else {
    CHECK(strstr(msg, "no majority of two"), "two holders, no majority: %s", msg);
  }
}

static void run_flip(dcp_ctx *ctx, const args *a) {
  int32_t world = dcp_ctx_world_size(ctx), rank = dcp_ctx_rank(ctx);
  model m;
  model_make(ctx, a, &m, 0);
  dcp_save_options o = checked(0);
  OK(dcp_save(ctx, m.st, a->dir, &o), ctx);
  load_equal(ctx, a, &m);

  /* equal replicas: the standalone check agrees */
  dcp_replica_report rep = {.struct_size = sizeof rep};
  OK(dcp_check_replicas(ctx, m.st, 0, &rep), ctx);
  CHECK(rep.status == DCP_OK && rep.mismatches == 0 && !rep.message[0], "%s", rep.message);
  int32_t tp = world / a->dp;
  /* w: tp boxes, b and cfg: one each, all with dp holders (2 or more) */
  CHECK(rep.boxes_checked == (uint64_t)tp + 2, "checked %llu, want %d",
        (unsigned long long)rep.boxes_checked, tp + 2);
  CHECK(rep.hashed_bytes > 0 && rep.exchange_bytes > 0);
  if (rank == 0)
    printf("check: %llu replicated items, %llu bytes hashed, %llu collective bytes on rank 0\n",
           (unsigned long long)rep.boxes_checked, (unsigned long long)rep.hashed_bytes,
           (unsigned long long)rep.exchange_bytes);

  /* one bit of the last rank's copy of w */
  model good;
  model_make(ctx, a, &good, 0);
  int32_t odd = world - 1;
  if (rank == odd) {
    uint32_t u;
    memcpy(&u, &m.w[3], 4);
    u ^= 1u << 9;
    memcpy(&m.w[3], &u, 4);
  }
  memset(&rep, 0, sizeof rep);
  rep.struct_size = sizeof rep;
  OK(dcp_check_replicas(ctx, m.st, DCP_CHECK_REPORT_ONLY, &rep), ctx);
  CHECK(rep.status == DCP_EREPLICA && rep.mismatches == 1, "report only: %s, %llu mismatches",
        dcp_strerror(rep.status), (unsigned long long)rep.mismatches);
  /* every rank's report names the odd copy's box (that of the odd rank's
   * shard: the last shard of the mesh's second dimension) */
  model oddm = {0};
  OK(dcp_layout_box(m.lw, W_SHAPE, odd, &oddm.bw), ctx);
  check_message(rep.message, a, &oddm, odd);
  if (rank == 0) printf("report: %s\n", rep.message);

  dcp_status rc = dcp_check_replicas(ctx, m.st, 0, &rep);
  CHECK(rc == DCP_EREPLICA, "check gave %s, want DCP_EREPLICA", dcp_strerror(rc));
  CHECK(dcp_ctx_last_status(ctx) == DCP_EREPLICA);
  check_message(dcp_ctx_last_error(ctx), a, &oddm, odd);

  /* a checked save fails on every rank, nothing committed */
  o = checked(DCP_SAVE_OVERWRITE);
  rc = dcp_save(ctx, m.st, a->dir, &o);
  CHECK(rc == DCP_EREPLICA, "the checked save gave %s (%s), want DCP_EREPLICA", dcp_strerror(rc),
        dcp_ctx_last_error(ctx));
  check_message(dcp_ctx_last_error(ctx), a, &oddm, odd);
  if (rank == 0) printf("save: %s\n", dcp_ctx_last_error(ctx));
  /* the previous checkpoint still loads, bit for bit */
  load_equal(ctx, a, &good);
  /* in place too: the old checkpoint is un-committed only once the check
   * passed, so a refused in-place overwrite leaves it loadable */
  o = checked(DCP_SAVE_OVERWRITE | DCP_SAVE_IN_PLACE);
  rc = dcp_save(ctx, m.st, a->dir, &o);
  CHECK(rc == DCP_EREPLICA, "the checked in-place save gave %s (%s), want DCP_EREPLICA",
        dcp_strerror(rc), dcp_ctx_last_error(ctx));
  load_equal(ctx, a, &good);

  /* a mismatch in a REPLICATED bytes item is caught too */
  if (rank == odd) m.cfg[0] ^= 4;
  if (rank == odd) memcpy(m.w, good.w, (size_t)(good.bw.size[0] * good.bw.size[1]) * 4);
  rc = dcp_check_replicas(ctx, m.st, 0, NULL);
  CHECK(rc == DCP_EREPLICA && strstr(dcp_ctx_last_error(ctx), "replicated bytes item 'cfg'"),
        "bytes: %s: %s", dcp_strerror(rc), dcp_ctx_last_error(ctx));
  /* bad arguments fail on every rank; a detached rank cannot check */
  CHECK(dcp_check_replicas(ctx, m.st, 0x80, NULL) == DCP_EINVAL);
  CHECK(strstr(dcp_ctx_last_error(ctx), "unknown flags"), "%s", dcp_ctx_last_error(ctx));
  /* an older caller's shorter report: filled as far as it reaches */
  dcp_replica_report small = {.struct_size = offsetof(dcp_replica_report, hashed_bytes)};
  small.hashed_bytes = 77;
  CHECK(dcp_check_replicas(ctx, m.st, DCP_CHECK_REPORT_ONLY, &small) == DCP_OK);
  CHECK(small.mismatches == 1 && small.hashed_bytes == 77 &&
            small.struct_size == offsetof(dcp_replica_report, hashed_bytes),
        "a short report was written past its size");
  if (rank == 0) {
    dcp_ctx_config cfg;
    dcp_ctx_config_init(&cfg);
    cfg.world_size = 2; /* no collective: a detached rank */
    dcp_ctx *d;
    dcp_state *ds;
    OK(dcp_ctx_create(&cfg, &d), NULL);
    OK(dcp_state_create(d, &ds), d);
    CHECK(dcp_check_replicas(d, ds, 0, NULL) == DCP_EINVAL);
    dcp_save_options so = checked(0);
    so.save_id = 1;
    CHECK(dcp_save(d, ds, a->dir, &so) == DCP_EINVAL &&
              strstr(dcp_ctx_last_error(d), "needs a collective"),
          "%s", dcp_ctx_last_error(d));
    dcp_state_free(ds);
    dcp_ctx_free(d);
  }
  model_free(&good);
  model_free(&m);
}

/* An async save: the writers run the check over the staged copies. */
static void run_async(dcp_ctx *ctx, const args *a) {
  int32_t world = dcp_ctx_world_size(ctx), rank = dcp_ctx_rank(ctx);
  model m, good;
  model_make(ctx, a, &m, 0);
  model_make(ctx, a, &good, 0);
  OK(dcp_async_set_coordination(ctx, "file", a->rendezvous, NULL), ctx);
  dcp_save_options o = checked(0);
  dcp_async *h;
  OK(dcp_async_save(ctx, m.st, a->dir, &o, &h), ctx);
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
  int32_t odd = world - 1;
  if (rank == odd) m.w[1] = -m.w[1]; /* the sign bit */
  o = checked(DCP_SAVE_OVERWRITE);
  OK(dcp_async_save(ctx, m.st, a->dir, &o, &h), ctx);
  dcp_status rc = dcp_async_wait(h);
  CHECK(rc == DCP_EREPLICA, "the async checked save gave %s (%s)", dcp_strerror(rc),
        dcp_ctx_last_error(ctx));
  model oddm = {0};
  OK(dcp_layout_box(m.lw, W_SHAPE, odd, &oddm.bw), ctx);
  check_message(dcp_ctx_last_error(ctx), a, &oddm, odd);
  if (rank == 0) printf("async: %s\n", dcp_ctx_last_error(ctx));
  dcp_async_free(h);
  dcp_async_shutdown(ctx);
  load_equal(ctx, a, &good);
  model_free(&good);
  model_free(&m);
}

/* The faulty rank exits at the check's hash gather; the others must fail
 * promptly. In the standalone check the plans are gathered first (the
 * first gatherv), in a save the plan phase gathers them. */
static void run_fault(dcp_ctx *ctx, const args *a, int in_save) {
  int32_t rank = dcp_ctx_rank(ctx);
  model m;
  model_make(ctx, a, &m, 0);
  if (rank == a->fault_rank) CHECK(fc_arm(FC_EXIT, "gatherv", 2, NULL) == 0);
  dcp_save_options o = checked(0);
  double t0 = now_s();
  dcp_status rc = in_save ? dcp_save(ctx, m.st, a->dir, &o) : dcp_check_replicas(ctx, m.st, 0, NULL);
  double took = now_s() - t0, limit = (double)a->timeout_ms / 1e3 + 5.0;
  CHECK(rank != a->fault_rank, "the faulty rank returned from its call");
  CHECK(rc == DCP_ETIMEDOUT || rc == DCP_EPEER, "%s gave %s (%s), want a peer error",
        in_save ? "save" : "check", dcp_strerror(rc), dcp_ctx_last_error(ctx));
  CHECK(took <= limit, "returned after %.2f s, past the deadline + 5 s", took);
  printf("rank %d: %s failed after %.2f s: %s\n", rank, in_save ? "save" : "check", took,
         dcp_ctx_last_error(ctx));
  model_free(&m);
}

int main(int argc, char **argv) {
  args a = {.coll = "file", .mode = "flip", .dp = 2, .fault_rank = -1,
            .timeout_ms = 60000};
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
    if (!strcmp(k, "--coll")) a.coll = v, i++;
    else if (!strcmp(k, "--rendezvous")) a.rendezvous = v, i++;
    else if (!strcmp(k, "--dir")) a.dir = v, i++;
    else if (!strcmp(k, "--mode")) a.mode = v, i++;
    else if (!strcmp(k, "--dp")) a.dp = atoi(v), i++;
    else if (!strcmp(k, "--fault-rank")) a.fault_rank = atoi(v), i++;
    else if (!strcmp(k, "--timeout-ms")) a.timeout_ms = atoll(v), i++;
    else CHECK(0, "unknown argument %s", k);
  }
  CHECK(a.dir && a.dp >= 1, "usage: see the top of replica_check.c");
  int fault = !strncmp(a.mode, "fault", 5);
  dcp_ctx *ctx = open_ctx(&a, fault);
  if (!strcmp(a.mode, "flip")) run_flip(ctx, &a);
  else if (!strcmp(a.mode, "async")) run_async(ctx, &a);
  else if (!strcmp(a.mode, "fault-check")) run_fault(ctx, &a, 0);
  else if (!strcmp(a.mode, "fault-save")) run_fault(ctx, &a, 1);
  else CHECK(0, "unknown mode %s", a.mode);
  dcp_ctx_free(ctx);
  return 0;
}

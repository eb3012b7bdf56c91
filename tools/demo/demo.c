/* dcp-demo — the main job of the README: a small multi-rank run that saves
 * a sharded model with one parallel layout and loads it with another.
 *
 * Run as 4 ranks, under mpirun (--coll mpi) or forked by dcp_launch
 * (--coll file). Each rank holds a 4-layer toy transformer: weights sharded
 * DP2 x TP2 (replicated over DP), an fp32 Adam state flat-sharded over all
 * ranks (ZeRO), the step counter (replicated) and an RNG state (per rank).
 * The demo saves it, prints what landed on disk, saves it again
 * asynchronously (the call returns once the state is staged; a writer
 * process persists it while the "training" overwrites the buffers), then
 * loads the asynchronous checkpoint as TP4 (no replication) and checks
 * every element against the values at the time of the async save. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "dcp.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define DIE(...)                          \
  do {                                    \
    fprintf(stderr, "dcp-demo: " __VA_ARGS__); \
    fprintf(stderr, "\n");                \
    exit(1);                              \
  } while (0)

enum { LAYERS = 4, HIDDEN = 256 };

typedef struct weight {
  char fqn[64];
  int64_t shape[2];
  uint32_t map[2]; /* mesh dims [DP, TP]: bit 1 = TP */
} weight;

static int model(weight *w) {
  int n = 0;
  for (int l = 0; l < LAYERS; l++) {
    w[n++] = (weight){"", {3 * HIDDEN, HIDDEN}, {2, 0}};
    snprintf(w[n - 1].fqn, sizeof w[n - 1].fqn, "layers.%d.attn.qkv", l);
    w[n++] = (weight){"", {HIDDEN, HIDDEN}, {0, 2}};
    snprintf(w[n - 1].fqn, sizeof w[n - 1].fqn, "layers.%d.attn.proj", l);
    w[n++] = (weight){"", {HIDDEN, 1}, {0, 0}};
    snprintf(w[n - 1].fqn, sizeof w[n - 1].fqn, "layers.%d.norm", l);
  }
  return n;
}

/* The value of element (i, j) of weight k: what a load must reproduce. */
static float value(int k, int64_t i, int64_t j) { return (float)k * 1e4f + (float)i + (float)j * 1e-3f; }

typedef struct rank_state {
  dcp_state *st;
  dcp_layout *layouts[3 * LAYERS];
  float *bufs[3 * LAYERS];
  dcp_box boxes[3 * LAYERS];
  float *adam;
  int64_t adam_begin, adam_count;
  uint64_t step;
  uint8_t rng[32];
} rank_state;

/* Adam state: one flat fp32 vector over all weights, split over ranks. */
static int64_t adam_total(const weight *w, int n) {
  int64_t t = 0;
  for (int k = 0; k < n; k++) t += w[k].shape[0] * w[k].shape[1];
  return t;
}

static void build(dcp_ctx *ctx, rank_state *rs, const weight *w, int n, int64_t dp, int64_t tp,
                  int fill) {
  int32_t rank = dcp_ctx_rank(ctx), world = dcp_ctx_world_size(ctx);
  memset(rs, 0, sizeof *rs);
  if (dcp_state_create(ctx, &rs->st)) DIE("state: %s", dcp_ctx_last_error(ctx));
  int64_t mesh[2] = {dp, tp};
  for (int k = 0; k < n; k++) {
    if (dcp_layout_create(ctx, 2, mesh, NULL, 2, w[k].map, &rs->layouts[k]))
      DIE("layout: %s", dcp_ctx_last_error(ctx));
    dcp_layout_box(rs->layouts[k], w[k].shape, rank, &rs->boxes[k]);
    int64_t rows = rs->boxes[k].size[0], cols = rs->boxes[k].size[1];
    rs->bufs[k] = calloc((size_t)(rows * cols) + 1, sizeof(float));
    for (int64_t i = 0; fill && i < rows; i++)
      for (int64_t j = 0; j < cols; j++)
        rs->bufs[k][i * cols + j] = value(k, rs->boxes[k].offset[0] + i, rs->boxes[k].offset[1] + j);
    if (dcp_state_add_sharded(rs->st, w[k].fqn, DCP_F32, 2, w[k].shape, rs->layouts[k], rs->bufs[k]))
      DIE("add %s: %s", w[k].fqn, dcp_ctx_last_error(ctx));
  }
  int64_t total = adam_total(w, n), per = (total + world - 1) / world;
  rs->adam_begin = per * rank < total ? per * rank : total;
  rs->adam_count = total - rs->adam_begin < per ? total - rs->adam_begin : per;
  rs->adam = calloc((size_t)rs->adam_count + 1, sizeof(float));
  for (int64_t e = 0; fill && e < rs->adam_count; e++) rs->adam[e] = (float)(rs->adam_begin + e) * 0.5f;
  int64_t ashape[1] = {total};
  if (dcp_state_add_tensor(rs->st, "optim.exp_avg", DCP_F32, 1, ashape) ||
      dcp_state_add_flat(rs->st, "optim.exp_avg", NULL, rs->adam_begin, rs->adam_count, rs->adam))
    DIE("adam: %s", dcp_ctx_last_error(ctx));
  rs->step = fill ? 1000 : 0;
  for (int i = 0; i < 32; i++) rs->rng[i] = fill ? (uint8_t)(rank * 7 + i) : 0;
  dcp_state_add_bytes(rs->st, "step", DCP_SCOPE_REPLICATED, &rs->step, sizeof rs->step);
  dcp_state_add_bytes(rs->st, "rng", DCP_SCOPE_PER_RANK, rs->rng, sizeof rs->rng);
}

static int64_t check(const rank_state *rs, int n, int32_t rank) {
  int64_t bad = 0;
  for (int k = 0; k < n; k++) {
    int64_t rows = rs->boxes[k].size[0], cols = rs->boxes[k].size[1];
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++)
        bad += rs->bufs[k][i * cols + j] !=
               value(k, rs->boxes[k].offset[0] + i, rs->boxes[k].offset[1] + j);
  }
  for (int64_t e = 0; e < rs->adam_count; e++) bad += rs->adam[e] != (float)(rs->adam_begin + e) * 0.5f;
  bad += rs->step != 1000;
  for (int i = 0; i < 32; i++) bad += rs->rng[i] != (uint8_t)(rank * 7 + i);
  return bad;
}

static void release(rank_state *rs, int n) {
  for (int k = 0; k < n; k++) {
    free(rs->bufs[k]);
    dcp_layout_free(rs->layouts[k]);
  }
  free(rs->adam);
  dcp_state_free(rs->st);
}

static dcp_ctx *open_ctx(const char *coll, const char *rendezvous) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.coll = coll;
  cfg.timeout_ms = 60000;
  if (!strcmp(coll, "file")) {
    const char *r = getenv("DCP_TEST_RANK"), *w = getenv("DCP_TEST_WORLD");
    if (!r || !w) DIE("--coll file runs under dcp_launch (DCP_TEST_RANK/DCP_TEST_WORLD)");
    cfg.rank = atoi(r), cfg.world_size = atoi(w), cfg.rendezvous = rendezvous;
  }
  dcp_ctx *ctx;
  if (dcp_ctx_create(&cfg, &ctx)) DIE("context: %s", dcp_ctx_create_error());
  return ctx;
}

static const char usage[] =
    "usage: dcp-demo [--coll mpi|file] [--dir DIR] [--rendezvous DIR]\n\n"
    "The README's main job: 4 ranks save a sharded toy model as DP2 x TP2,\n"
    "save it again asynchronously, and load it back as TP4, checking every\n"
    "element. It needs exactly 4 processes, started by a launcher:\n\n"
    "  mpirun -n 4 dcp-demo --coll mpi --dir /tmp/dcp-demo\n"
    "  dcp_launch 4 120 dcp-demo --coll file --dir /tmp/dcp-demo \\\n"
    "      --rendezvous /tmp/dcp-demo-rdv     (tests/integration, no MPI needed)\n"
    "  tools/dev.sh demo                       (builds, then runs one of these)\n\n"
    "options:\n"
    "  --coll mpi|file     the collective (default mpi)\n"
    "  --dir DIR           the checkpoint directory (default /tmp/dcp-demo)\n"
    "  --rendezvous DIR    the file collective's meeting point (default\n"
    "                      /tmp/dcp-demo-rdv)\n"
    "  -h, --help          this help\n";

int main(int argc, char **argv) {
  const char *coll = "mpi", *dir = "/tmp/dcp-demo", *rdv = "/tmp/dcp-demo-rdv";
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return fputs(usage, stdout), 0;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 == argc) DIE("option %s needs a value\n\n%s", argv[i], usage);
    if (!strcmp(argv[i], "--coll")) coll = argv[i + 1];
    else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
    else if (!strcmp(argv[i], "--rendezvous")) rdv = argv[i + 1];
    else DIE("unknown option '%s'\n\n%s", argv[i], usage);
  }
  dcp_ctx *ctx = open_ctx(coll, rdv);
  int32_t rank = dcp_ctx_rank(ctx), world = dcp_ctx_world_size(ctx);
  if (world != 4)
    DIE("dcp-demo needs 4 ranks and this job has %d (rank %d): start it with\n"
        "  mpirun -n 4 dcp-demo --coll mpi, or tools/dev.sh demo (see dcp-demo --help)",
        world, rank);
  weight w[3 * LAYERS];
  int n = model(w);

  /* 1. save with DP2 x TP2 */
  rank_state rs;
  build(ctx, &rs, w, n, 2, 2, 1);
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.flags = DCP_SAVE_OVERWRITE;
  const char *keys[] = {"step", "framework"}, *vals[] = {"1000", "dcp-demo"};
  so.nkv = 2, so.kv_keys = keys, so.kv_values = vals;
  if (dcp_save(ctx, rs.st, dir, &so)) DIE("save: %s", dcp_ctx_last_error(ctx));
  dcp_stats st = {.struct_size = sizeof st};
  dcp_ctx_stats(ctx, &st);
  printf("rank %d  save DP2xTP2: wrote %6.1f KiB in %2llu items (plan %.1f ms, write %.1f ms, "
         "commit %.1f ms)\n",
         rank, (double)st.data_bytes / 1024, (unsigned long long)st.items_written,
         st.plan_s * 1e3, st.write_s * 1e3, st.commit_s * 1e3);
  release(&rs, n);

  /* 2. async save of the same state: blocks only for staging */
  char async_dir[4096];
  snprintf(async_dir, sizeof async_dir, "%s-async", dir);
  if (dcp_async_set_coordination(ctx, "file", rdv, NULL))
    DIE("async coordination: %s", dcp_ctx_last_error(ctx));
  build(ctx, &rs, w, n, 2, 2, 1);
  dcp_async *h;
  double t0 = now_s();
  if (dcp_async_save(ctx, rs.st, async_dir, &so, &h)) DIE("async save: %s", dcp_ctx_last_error(ctx));
  double staged = now_s() - t0;
  for (int k = 0; k < n; k++) /* training goes on: the staged copy is what persists */
    for (int64_t e = 0; e < rs.boxes[k].size[0] * rs.boxes[k].size[1]; e++) rs.bufs[k][e] = -1.0f;
  if (dcp_async_wait(h)) DIE("async save: %s", dcp_ctx_last_error(ctx));
  printf("rank %d  async save:   returned after %.2f ms of staging, persisted after %.1f ms "
         "(buffers overwritten meanwhile)\n",
         rank, staged * 1e3, (now_s() - t0) * 1e3);
  dcp_async_free(h);
  release(&rs, n);

  /* 3. what is on disk: every replicated shard once */
  if (rank == 0) {
    dcp_meta *m;
    if (dcp_meta_open(ctx, dir, &m)) DIE("meta: %s", dcp_ctx_last_error(ctx));
    uint64_t chunks = 0, bytes = 0;
    for (size_t t = 0; t < dcp_meta_tensor_count(m); t++) {
      dcp_tensor_info ti;
      dcp_meta_tensor(m, t, &ti);
      chunks += ti.chunk_count;
      for (uint64_t c = 0; c < ti.chunk_count; c++) {
        dcp_chunk_info ci;
        dcp_meta_chunk(m, t, c, &ci);
        bytes += ci.ref.raw_length;
      }
    }
    int64_t model_bytes = adam_total(w, n) * 4 * 2; /* weights + Adam */
    printf("checkpoint %s: %zu tensors, %llu chunks in %zu data files, %.1f KiB of tensor data "
           "= model bytes %.1f KiB (held in memory across ranks: %.1f KiB, DP2 replicas "
           "written once)\n",
           dir, dcp_meta_tensor_count(m), (unsigned long long)chunks, dcp_meta_file_count(m),
           (double)bytes / 1024, (double)model_bytes / 1024,
           (double)(adam_total(w, n) * 4 * 2 + adam_total(w, n) * 4) / 1024);
    dcp_meta_free(m);
  }

  /* 4. load the async checkpoint with TP4: every rank a different box */
  build(ctx, &rs, w, n, 1, 4, 0);
  if (dcp_load(ctx, rs.st, async_dir, NULL)) DIE("load: %s", dcp_ctx_last_error(ctx));
  dcp_ctx_stats(ctx, &st);
  int64_t bad = check(&rs, n, rank);
  printf("rank %d  load TP4:     read  %6.1f KiB from storage for %6.1f KiB of state, %s "
         "(%.1f ms)\n",
         rank, (double)st.bytes_read / 1024, (double)st.data_bytes / 1024,
         bad ? "MISMATCH" : "every element verified", st.total_s * 1e3);
  release(&rs, n);
  dcp_ctx_free(ctx);
  return bad ? 1 : 0;
}

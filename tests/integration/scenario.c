/* scenario — one rank of a multi-rank save/load test, run under mpirun
 * (coll "mpi") or the launch helper (coll "file"). It saves a synthetic
 * model with one layout and/or loads it with another, and checks every
 * loaded byte against the values the model defines.
 *
 *   scenario --coll mpi|file --dir CKPT --mode save|load|both
 *            [--save-tp N] [--load-tp N] [--compress] [--lowest] [--rendezvous DIR]
 *            [--coll-options OPTS]
 *            [--expect-exists] [--overwrite] [--storage posix|sharedfs]
 *            [--meta-per-rank] [--no-bytes] [--save-twice] [--no-flat] [--flat-sharded]
 *            [--expect-per-rank 0|1] (the save planned per rank from layouts,
 *                                     or through the plan gather)
 *            [--layout-mismatch]    (the last rank maps tensor 0 another way:
 *                                    every rank's save must fail, EMISMATCH)
 *            [--expect-plan-hit 0|1]  (the first save: a hit from the recorded
 *                                      .plan of a restarted job, or a gather)
 *            [--dedup auto|on|off] [--no-pipeline] [--max-inflight N] [--reader-lowest]
 *            [--check-reads] [--expect-path 0|1|2] [--corrupt] [--dedup-mismatch]
 *            [--max-read-ratio R] [--seed S] [--corrupt-shared] [--expect-no-share]
 *            [--timeout-ms MS] [--fault stall|exit|pause --fault-rank R
 *             --fault-phase save|load [--fault-at start|OP[:N]] [--dead-ranks R,R,...]]
 *
 * --no-bytes loads the tensors only (a checkpoint converted from
 * safetensors has no bytes items).
 *
 * No hangs (--fault): rank R stalls (SIGSTOP) or exits at the Nth call of
 * collective OP (fault_coll.h; "start": before it calls dcp_save or
 * dcp_load) in the given phase. Every other rank must get DCP_ETIMEDOUT or
 * DCP_EPEER from that call within the deadline (--timeout-ms) plus
 * NOHANG_MARGIN_S; it writes "error <code> <seconds>" to <dir>.nohang.<rank>
 * and waits (bounded) for the other survivors' files, so that under mpirun
 * no survivor's exit tears the job down before every survivor has reported.
 * The stalled rank writes its pid to <dir>.stalled; the harness
 * (tests/integration/nohang.sh, dcp_launch) kills it. With "pause" the
 * faulty rank writes <dir>.stalled and waits for <dir>.stalled.go, then
 * goes on: the harness breaks the network meanwhile (tests/hosts), and the
 * faulty rank is a survivor like the others. --dead-ranks names ranks the
 * harness kills besides the faulty one (a whole host): no survivor waits
 * for their reports.
 *
 * The model: a mesh [world/tp, tp] (DP x TP) and tensors of every kind of
 * sharding: TP on dim 0, TP on dim 1, replicated, DP and TP on two dims,
 * DP*TP combined on one dim, uneven splits with empty trailing shards, a
 * 0-d scalar, a tensor with a zero extent, a ZeRO-style flat shard over all
 * ranks, and several dtypes. Element byte k of global element i of tensor t
 * is a hash of (t, i, k), so any box's expected bytes are known. Bytes
 * items: "step" (REPLICATED) and "rng" (PER_RANK, rank-dependent). Flat
 * shards: over all ranks, over the TP ranks (replicated over DP: read
 * dedup groups that only the key exchange finds), and two tensors that
 * change representation between save and load (flat saved, box loaded and
 * the reverse). --no-flat leaves all flat ones out (every chunk then has a
 * layout: the groups come from the layouts, without exchange). A flat
 * shard over the DP ranks within each TP cell ("optim.cell_flat", ZeRO-1
 * inside tensor parallelism) takes its range from dcp_layout_flat_range.
 * --flat-sharded adds every flat range with dcp_state_add_flat_sharded
 * (over all ranks: flat dims DP and TP; over the TP ranks: flat dim TP,
 * replicated over DP; the cell's: flat dims 0, every dim that shards
 * nothing); otherwise they are added by hand with dcp_state_add_flat.
 * With --no-bytes every tensor then comes from a layout and the save plans
 * per rank.
 *
 * Read dedup checks (--check-reads): every rank writes its load statistics
 * to <dir>.stats.<rank>; rank 0 collects them and checks, against a
 * reference it computes from the model and the metadata alone, that the
 * data bytes read summed over ranks equal exactly what the distinct
 * (fqn, box) requests need with every saved block read once (dedup:
 * replica groups and partial-overlap sharing) or what every rank's own
 * requests need (no dedup), that the payload read plus the shared pieces
 * received adds up likewise, and, when nothing was shared, that the
 * readers' loads meet the balancer's guarantee; it prints max/mean of the
 * load. --max-read-ratio R also demands bytes read <= R x bytes needed.
 * --expect-no-share demands that no partial-overlap sharing happened (read
 * dedup AUTO with every rank on one host): then every distinct box is read
 * by one rank, blocks that boxes share read again.
 * --seed S shuffles the load mesh's ranks (a random reshard).
 * --corrupt-shared flips a byte of a column-sharded tensor that, with TP
 * going up, one rank reads for others: every rank must fail with the
 * reader's checksum message, promptly.
 * --corrupt flips a byte of a replicated tensor first: every rank must
 * fail with DCP_ECORRUPT, promptly. --dedup-mismatch gives rank 0 another
 * read_dedup than the others: every rank must fail with DCP_EINVAL. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dcp.h"
#include "fault_coll.h"
#include "rank_check.h"

static int g_no_bytes; /* load tensors only */
static int g_no_flat; /* leave the flat tensors out */
static int g_flat_sharded; /* flat ranges from layouts: dcp_state_add_flat_sharded */
static int g_layout_mismatch; /* the last rank lays out tensor 0 another way */
static unsigned g_seed; /* --seed: the load mesh's ranks in a random order (0: in order) */

/* How tensor t is held in a save (saving 1) or a load: 0 a layout box,
 * 1 a flat range over all ranks, 2 over the TP ranks, 5 over the DP ranks
 * of its TP cell. */
static int flat_mode(int f, int saving) {
  if (f == 3) return saving ? 1 : 0;
  if (f == 4) return saving ? 0 : 1;
  return f;
}

/* Whether a flat range of this mode is found from a layout
 * (dcp_layout_flat_range) rather than computed here. */
static int layout_flat(int mode) { return mode == 5 || (mode && g_flat_sharded); }

/* The flat dims of that layout (mesh dim 0 DP, 1 TP). */
static uint32_t flat_dims_of(int mode) { return mode == 1 ? 3 : mode == 2 ? 2 : 0; }

/* Whether tensor spec flat value f is left out of the model. */
static int left_out(int f) { return g_no_flat && f; }

typedef struct tensor_spec {
  const char *fqn;
  dcp_dtype dtype;
  uint32_t ndim;
  int64_t shape[3];
  uint32_t map[3]; /* bits: 1 = DP (mesh dim 0), 2 = TP (mesh dim 1) */
  int flat;        /* 0: layout; ZeRO-style flat range 1: over all ranks,
                      2: over the TP ranks (replicated over DP), 3: flat
                      (1) when saving, layout when loading, 4: the reverse,
                      5: over the DP ranks within its TP cell (map) */
} tensor_spec;

static const tensor_spec MODEL[] = {
    {"layers.0.col.weight", DCP_F32, 2, {37, 23}, {2, 0}, 0},
    {"layers.0.row.weight", DCP_BF16, 2, {19, 41}, {0, 2}, 0},
    {"layers.0.bias", DCP_F32, 1, {23}, {0}, 0},
    {"layers.1.grid", DCP_F64, 2, {30, 14}, {1, 2}, 0},
    {"layers.1.combined", DCP_I32, 2, {101, 3}, {3, 0}, 0},
    {"layers.1.uneven_u8", DCP_U8, 3, {7, 3, 5}, {0, 0, 2}, 0},
    {"step_scalar", DCP_I64, 0, {0}, {0}, 0},
    {"empty", DCP_F32, 2, {0, 5}, {2, 0}, 0},
    {"optim.flat", DCP_F16, 2, {13, 17}, {0, 0}, 1},
    {"fp8", DCP_F8_E4M3, 1, {64}, {2}, 0},
    {"optim.flat_rep", DCP_F32, 2, {29, 11}, {0, 0}, 2},
    {"swap.flat_to_box", DCP_BF16, 2, {21, 10}, {2, 0}, 3},
    {"swap.box_to_flat", DCP_F32, 2, {17, 9}, {0, 2}, 4},
    /* replicated on every rank and large enough (48 KiB, 4 KiB blocks) to
     * be cut into pieces that different ranks write */
    {"embed.replicated", DCP_F32, 2, {48, 256}, {0, 0}, 0},
    {"optim.cell_flat", DCP_F32, 2, {26, 7}, {2, 0}, 5},
};
#define NMODEL (sizeof MODEL / sizeof MODEL[0])

static uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Expected byte k of global element `linear` of tensor t: noise for odd
 * t, a compressible ramp for even t (so zstd saves have work to do). */
static uint8_t expected(size_t t, int64_t linear, size_t k) {
  uint64_t x = ((uint64_t)t << 56) ^ ((uint64_t)linear * 8 + k);
  return (uint8_t)(t % 2 ? mix(x) : (uint64_t)(linear * 8 + (int64_t)k + (int64_t)t) % 13);
}

/* Fill (or check) a chunk: box of tensor t at data, row-major. */
static int64_t visit_box(size_t t, const dcp_box *b, uint8_t *data, int check) {
  const tensor_spec *s = &MODEL[t];
  size_t es = dcp_dtype_size(s->dtype);
  int64_t n = 1, bad = 0;
  for (uint32_t d = 0; d < b->ndim; d++) n *= b->size[d];
  for (int64_t e = 0; e < n; e++) {
    int64_t rest = e, linear = 0, coord[3] = {0};
    for (uint32_t d = b->ndim; d-- > 0;) {
      coord[d] = b->offset[d] + rest % b->size[d];
      rest /= b->size[d];
    }
    for (uint32_t d = 0; d < b->ndim; d++) linear = linear * s->shape[d] + coord[d];
    for (size_t k = 0; k < es; k++) {
      uint8_t *p = data + e * (int64_t)es + (int64_t)k;
      if (!check)
        *p = expected(t, linear, k);
      else if (*p != expected(t, linear, k))
        bad++;
    }
  }
  return bad;
}

typedef struct rank_model {
  dcp_state *st;
  dcp_layout *layouts[NMODEL];
  uint8_t *bufs[NMODEL * 3];
  dcp_box boxes[NMODEL * 3];
  size_t owner[NMODEL * 3];
  size_t nbufs;
  uint8_t step[8], rng[16];
} rank_model;

static void add_buffer(rank_model *m, size_t t, const dcp_box *b, int fill) {
  int64_t n = 1;
  for (uint32_t d = 0; d < b->ndim; d++) n *= b->size[d];
  size_t bytes = (size_t)n * dcp_dtype_size(MODEL[t].dtype);
  uint8_t *p = malloc(bytes ? bytes : 1);
  memset(p, 0xEE, bytes);
  if (fill) visit_box(t, b, p, 0);
  m->bufs[m->nbufs] = p;
  m->boxes[m->nbufs] = *b;
  m->owner[m->nbufs++] = t;
}

/* The flat range [*begin, *begin + *count) that `rank` holds of tensor t
 * in mode 1 (over all ranks) or 2 (over the TP ranks, the same for every
 * DP replica). */
static void flat_range(size_t t, int mode, int32_t world, int32_t tp, int32_t rank,
                       int64_t *begin, int64_t *count) {
  const tensor_spec *s = &MODEL[t];
  int64_t numel = 1;
  for (uint32_t d = 0; d < s->ndim; d++) numel *= s->shape[d];
  int64_t parts = mode == 2 ? tp : world, index = mode == 2 ? rank % tp : rank;
  int64_t per = (numel + parts - 1) / parts;
  *begin = per * index < numel ? per * index : numel;
  *count = numel - *begin < per ? numel - *begin : per;
}

/* The boxes `rank` holds of tensor t (flat pieces or its layout box). */
static size_t rank_boxes(const rank_model *m, size_t t, int saving, int32_t world, int32_t tp,
                         int32_t rank, dcp_box *out) {
  const tensor_spec *s = &MODEL[t];
  int mode = flat_mode(s->flat, saving);
  if (layout_flat(mode)) {
    dcp_box cell;
    int64_t begin, count;
    size_t np;
    CHECK(dcp_layout_flat_range(m->layouts[t], s->shape, flat_dims_of(mode), rank, &cell, &begin,
                                &count) == DCP_OK, "flat_range");
    CHECK(dcp_flat_to_boxes(&cell, begin, count, out, 3, &np) == DCP_OK, "flat");
    return np;
  }
  if (mode) {
    int64_t begin, count;
    flat_range(t, mode, world, tp, rank, &begin, &count);
    dcp_box region = {.ndim = s->ndim};
    for (uint32_t d = 0; d < s->ndim; d++) region.size[d] = s->shape[d];
    size_t np;
    CHECK(dcp_flat_to_boxes(&region, begin, count, out, 3, &np) == DCP_OK, "flat");
    return np;
  }
  CHECK(dcp_layout_box(m->layouts[t], s->shape, rank, out) == DCP_OK, "layout_box");
  return 1;
}

/* The mesh's ranks: 0..world-1 shuffled by seed (the same on every rank),
 * or NULL (in order) for seed 0. */
static int32_t *mesh_order(int32_t world, unsigned seed) {
  if (!seed) return NULL;
  int32_t *o = malloc((size_t)world * sizeof *o);
  CHECK(o, "out of memory");
  for (int32_t i = 0; i < world; i++) o[i] = i;
  uint64_t z = seed;
  for (int32_t i = world - 1; i > 0; i--) {
    z = mix(z + 0x9E3779B97F4A7C15ull);
    int32_t j = (int32_t)(z % (uint64_t)(i + 1)), t = o[i];
    o[i] = o[j], o[j] = t;
  }
  return o;
}

/* The state of this rank for a world of `world` with TP degree tp; fill
 * the buffers for a save, poison them for a load. */
static void build(dcp_ctx *ctx, rank_model *m, int32_t world, int32_t tp, int fill, int with_rng) {
  memset(m, 0, sizeof *m);
  int32_t rank = dcp_ctx_rank(ctx);
  CHECK(dcp_state_create(ctx, &m->st) == DCP_OK, "state_create");
  int64_t mesh[2] = {world / tp, tp};
  int32_t *order = mesh_order(world, fill ? 0 : g_seed);
  for (size_t t = 0; t < NMODEL; t++) {
    const tensor_spec *s = &MODEL[t];
    if (left_out(s->flat)) continue;
    int mode = flat_mode(s->flat, fill);
    if (mode) {
      int64_t begin, count;
      dcp_box cell = {.ndim = s->ndim};
      for (uint32_t d = 0; d < s->ndim; d++) cell.size[d] = s->shape[d];
      if (layout_flat(mode)) {
        uint32_t none[3] = {0, 0, 0};
        CHECK(dcp_layout_create(ctx, 2, mesh, order, s->ndim, mode == 5 ? s->map : none,
                                &m->layouts[t]) == DCP_OK, "layout: %s", dcp_ctx_last_error(ctx));
        CHECK(dcp_layout_flat_range(m->layouts[t], s->shape, flat_dims_of(mode), rank, &cell,
                                    &begin, &count) == DCP_OK, "flat_range");
      } else {
        flat_range(t, mode, world, tp, rank, &begin, &count);
      }
      if (!g_flat_sharded || !layout_flat(mode))
        CHECK(dcp_state_add_tensor(m->st, s->fqn, s->dtype, s->ndim, s->shape) == DCP_OK, "add");
      dcp_box pieces[3];
      size_t np = rank_boxes(m, t, fill, world, tp, rank, pieces);
      /* one contiguous buffer for the range, as a flat parameter is */
      size_t es = dcp_dtype_size(s->dtype);
      uint8_t *flat = malloc(count ? (size_t)count * es : 1);
      memset(flat, 0xEE, (size_t)count * es);
      size_t at = 0;
      for (size_t i = 0; i < np; i++) {
        int64_t n = 1;
        for (uint32_t d = 0; d < s->ndim; d++) n *= pieces[i].size[d];
        if (fill) visit_box(t, &pieces[i], flat + at, 0);
        at += (size_t)n * es;
      }
      if (g_flat_sharded && layout_flat(mode))
        CHECK(dcp_state_add_flat_sharded(m->st, s->fqn, s->dtype, s->ndim, s->shape,
                                         m->layouts[t], flat_dims_of(mode), flat) == DCP_OK,
              "add_flat_sharded: %s", dcp_ctx_last_error(ctx));
      else
        CHECK(dcp_state_add_flat(m->st, s->fqn, &cell, begin, count, flat) == DCP_OK,
              "add_flat: %s", dcp_ctx_last_error(ctx));
      if (np == 0) free(flat);
      /* remember the pieces for checking: they alias the flat buffer */
      for (size_t i = 0; i < np; i++) {
        m->bufs[m->nbufs] = i == 0 ? flat : NULL;
        m->boxes[m->nbufs] = pieces[i];
        m->owner[m->nbufs++] = t;
      }
      continue;
    }
    uint32_t other[3] = {0, 2, 0}; /* TP on dim 1, for the mismatch */
    const uint32_t *map = g_layout_mismatch && fill && t == 0 && rank == world - 1 ? other : s->map;
    CHECK(dcp_layout_create(ctx, 2, mesh, order, s->ndim, map, &m->layouts[t]) == DCP_OK,
          "layout: %s", dcp_ctx_last_error(ctx));
    dcp_box b;
    rank_boxes(m, t, fill, world, tp, rank, &b);
    add_buffer(m, t, &b, fill);
    CHECK(dcp_state_add_sharded(m->st, s->fqn, s->dtype, s->ndim, s->shape, m->layouts[t],
                                m->bufs[m->nbufs - 1]) == DCP_OK,
          "add_sharded %s: %s", s->fqn, dcp_ctx_last_error(ctx));
  }
  free(order);
  for (int i = 0; i < 8; i++) m->step[i] = fill ? (uint8_t)(42 + i) : 0;
  for (int i = 0; i < 16; i++) m->rng[i] = fill ? (uint8_t)(rank * 16 + i) : 0;
  if (g_no_bytes) return;
  CHECK(dcp_state_add_bytes(m->st, "step", DCP_SCOPE_REPLICATED, m->step, 8) == DCP_OK, "bytes");
  if (with_rng)
    CHECK(dcp_state_add_bytes(m->st, "rng", DCP_SCOPE_PER_RANK, m->rng, 16) == DCP_OK, "bytes");
}

static void verify(const rank_model *m, int32_t rank, int with_rng) {
  for (size_t i = 0; i < m->nbufs; i++) {
    size_t t = m->owner[i];
    uint8_t *p = m->bufs[i];
    if (!p) continue; /* a later piece of a flat range: checked with the first */
    if (i + 1 < m->nbufs && m->owner[i + 1] == t && !m->bufs[i + 1]) { /* flat pieces */
      size_t at = 0, es = dcp_dtype_size(MODEL[t].dtype);
      for (size_t k = i; k < m->nbufs && m->owner[k] == t && (k == i || !m->bufs[k]); k++) {
        int64_t bad = visit_box(t, &m->boxes[k], p + at, 1), n = 1;
        CHECK(bad == 0, "%s piece %zu: %lld bytes differ", MODEL[t].fqn, k - i, (long long)bad);
        for (uint32_t d = 0; d < m->boxes[k].ndim; d++) n *= m->boxes[k].size[d];
        at += (size_t)n * es;
      }
      continue;
    }
    int64_t bad = visit_box(t, &m->boxes[i], p, 1);
    CHECK(bad == 0, "%s: %lld bytes differ after load", MODEL[t].fqn, (long long)bad);
  }
  if (g_no_bytes) return;
  for (int i = 0; i < 8; i++) CHECK(m->step[i] == 42 + i, "step byte %d", i);
  for (int i = 0; with_rng && i < 16; i++) CHECK(m->rng[i] == (uint8_t)(rank * 16 + i), "rng");
}

static void free_model(rank_model *m) {
  for (size_t i = 0; i < m->nbufs; i++) free(m->bufs[i]);
  for (size_t t = 0; t < NMODEL; t++) dcp_layout_free(m->layouts[t]);
  dcp_state_free(m->st);
}

/* Bytes the model occupies: every tensor once, "step" once, "rng" per rank. */
static uint64_t model_bytes(int32_t world) {
  uint64_t total = g_no_bytes ? 0 : 8 + 16 * (uint64_t)world;
  for (size_t t = 0; t < NMODEL; t++) {
    if (left_out(MODEL[t].flat)) continue;
    uint64_t n = 1;
    for (uint32_t d = 0; d < MODEL[t].ndim; d++) n *= (uint64_t)MODEL[t].shape[d];
    total += n * dcp_dtype_size(MODEL[t].dtype);
  }
  return total;
}

/* Sum of the data files' sizes and whether .metadata is there, looking
 * into subdirectories too (the sharedfs plugin fans files out). */
static uint64_t data_bytes_on_disk(const char *dir, int *committed) {
  DIR *d = opendir(dir);
  CHECK(d, "opendir %s", dir);
  uint64_t total = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    char path[4096];
    struct stat sb;
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (stat(path, &sb)) continue;
    if (S_ISDIR(sb.st_mode)) total += data_bytes_on_disk(path, committed);
    else if (!strcmp(e->d_name, ".metadata")) *committed = 1;
    else if (!strncmp(e->d_name, "data-", 5)) total += (uint64_t)sb.st_size;
  }
  closedir(d);
  return total;
}

typedef struct args {
  const char *coll, *dir, *mode, *rendezvous, *storage, *dedup, *coll_options;
  int save_tp, load_tp, compress, lowest, expect_exists, overwrite, meta_per_rank, no_bytes,
      save_twice, expect_plan_hit, expect_per_rank;
  int no_pipeline, reader_lowest, check_reads, expect_path, corrupt, dedup_mismatch;
  int expect_no_share;
  int corrupt_shared;
  double max_read_ratio; /* --max-read-ratio: 0 when unchecked */
  long long max_inflight, timeout_ms;
  const char *fault, *fault_phase, *fault_at; /* --fault: NULL when off */
  const char *dead_ranks;                      /* --dead-ranks: "2,3", or NULL */
  int fault_rank;
} args;

static args parse(int argc, char **argv) {
  args a = {.coll = "mpi", .mode = "both", .save_tp = 1, .load_tp = 1, .dedup = "auto",
            .expect_path = -1, .expect_plan_hit = -1, .expect_per_rank = -1, .timeout_ms = 60000, .fault_at = "start", .fault_rank = -1};
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
    if (!strcmp(k, "--compress")) a.compress = 1;
    else if (!strcmp(k, "--lowest")) a.lowest = 1;
    else if (!strcmp(k, "--expect-exists")) a.expect_exists = 1;
    else if (!strcmp(k, "--overwrite")) a.overwrite = 1;
    else if (!strcmp(k, "--meta-per-rank")) a.meta_per_rank = 1;
    else if (!strcmp(k, "--no-bytes")) a.no_bytes = 1;
    else if (!strcmp(k, "--save-twice")) a.save_twice = 1;
    else if (!strcmp(k, "--no-flat")) g_no_flat = 1;
    else if (!strcmp(k, "--flat-sharded")) g_flat_sharded = 1;
    else if (!strcmp(k, "--no-pipeline")) a.no_pipeline = 1;
    else if (!strcmp(k, "--reader-lowest")) a.reader_lowest = 1;
    else if (!strcmp(k, "--check-reads")) a.check_reads = 1;
    else if (!strcmp(k, "--corrupt")) a.corrupt = 1;
    else if (!strcmp(k, "--dedup-mismatch")) a.dedup_mismatch = 1;
    else if (!strcmp(k, "--corrupt-shared")) a.corrupt_shared = 1;
    else if (!strcmp(k, "--expect-no-share")) a.expect_no_share = 1;
    else if (!strcmp(k, "--max-read-ratio")) a.max_read_ratio = atof(v), i++;
    else if (!strcmp(k, "--seed")) g_seed = (unsigned)atoi(v), i++;
    else if (!strcmp(k, "--dedup")) a.dedup = v, i++;
    else if (!strcmp(k, "--expect-path")) a.expect_path = atoi(v), i++;
    else if (!strcmp(k, "--expect-plan-hit")) a.expect_plan_hit = atoi(v), i++;
    else if (!strcmp(k, "--expect-per-rank")) a.expect_per_rank = atoi(v), i++;
    else if (!strcmp(k, "--layout-mismatch")) g_layout_mismatch = 1;
    else if (!strcmp(k, "--max-inflight")) a.max_inflight = atoll(v), i++;
    else if (!strcmp(k, "--timeout-ms")) a.timeout_ms = atoll(v), i++;
    else if (!strcmp(k, "--fault")) a.fault = v, i++;
    else if (!strcmp(k, "--fault-rank")) a.fault_rank = atoi(v), i++;
    else if (!strcmp(k, "--fault-phase")) a.fault_phase = v, i++;
    else if (!strcmp(k, "--fault-at")) a.fault_at = v, i++;
    else if (!strcmp(k, "--dead-ranks")) a.dead_ranks = v, i++;
    else if (!strcmp(k, "--coll")) a.coll = v, i++;
    else if (!strcmp(k, "--dir")) a.dir = v, i++;
    else if (!strcmp(k, "--mode")) a.mode = v, i++;
    else if (!strcmp(k, "--rendezvous")) a.rendezvous = v, i++;
    else if (!strcmp(k, "--coll-options")) a.coll_options = v, i++;
    else if (!strcmp(k, "--storage")) a.storage = v, i++;
    else if (!strcmp(k, "--save-tp")) a.save_tp = atoi(v), i++;
    else if (!strcmp(k, "--load-tp")) a.load_tp = atoi(v), i++;
    else {
      fprintf(stderr, "scenario: unknown argument %s\n", k);
      exit(2);
    }
  }
  if (!a.dir) exit(2);
  if (a.fault && (strcmp(a.fault, "stall") && strcmp(a.fault, "exit") && strcmp(a.fault, "pause")))
    fprintf(stderr, "scenario: --fault stall|exit|pause\n"), exit(2);
  if (a.fault && (a.fault_rank < 0 || !a.fault_phase ||
                  (strcmp(a.fault_phase, "save") && strcmp(a.fault_phase, "load"))))
    fprintf(stderr, "scenario: --fault needs --fault-rank R and --fault-phase save|load\n"),
        exit(2);
  return a;
}

static dcp_read_dedup dedup_of(const char *v) {
  if (!strcmp(v, "on")) return DCP_READ_DEDUP_ON;
  if (!strcmp(v, "off")) return DCP_READ_DEDUP_OFF;
  CHECK(!strcmp(v, "auto"), "--dedup %s: want auto, on or off", v);
  return DCP_READ_DEDUP_AUTO;
}

/* ---- the read reference (--check-reads) --------------------------------- */

/* Storage bytes that reading raw bytes [first, last) of ref costs: the
 * stored length of every block that range touches. */
static uint64_t span_cost(const dcp_storage_ref *ref, uint64_t first, uint64_t last) {
  if (first >= last) return 0;
  uint64_t bs = ref->block_size, total = 0;
  for (uint64_t b = first / bs; b < (last + bs - 1) / bs; b++) {
    uint64_t raw = ref->raw_length - b * bs < bs ? ref->raw_length - b * bs : bs;
    total += ref->block_stored_lengths ? ref->block_stored_lengths[b] : raw;
  }
  return total;
}

/* Row-major index of point p of a box of extents size, relative to off. */
static int64_t linear_in(uint32_t ndim, const int64_t *p, const int64_t *off, const int64_t *size) {
  int64_t x = 0;
  for (uint32_t d = 0; d < ndim; d++) x = x * size[d] + (p[d] - off[d]);
  return x;
}

/* Storage bytes that reading the boxes[0..n) of tensor t costs when every
 * block of a saved chunk is read at most once (partial-overlap sharing):
 * the stored length of each block that any box's span touches. */
static uint64_t union_cost(dcp_meta *meta, size_t t, const dcp_box *boxes, size_t n) {
  size_t ti;
  dcp_tensor_info info;
  CHECK(dcp_meta_find_tensor(meta, MODEL[t].fqn, &ti) == DCP_OK, "no %s", MODEL[t].fqn);
  dcp_meta_tensor(meta, ti, &info);
  uint64_t es = dcp_dtype_size(MODEL[t].dtype), total = 0;
  for (uint64_t c = 0; c < info.chunk_count; c++) {
    dcp_chunk_info ci;
    CHECK(dcp_meta_chunk(meta, ti, (size_t)c, &ci) == DCP_OK, "chunk");
    const dcp_storage_ref *ref = &ci.ref;
    unsigned char *used = calloc(ref->block_count + 1, 1);
    for (size_t i = 0; i < n; i++) {
      dcp_box in;
      if (dcp_box_intersect(&boxes[i], &ci.box, &in) != 1) continue;
      int64_t last[DCP_MAX_NDIM];
      for (uint32_t d = 0; d < in.ndim; d++) last[d] = in.offset[d] + in.size[d] - 1;
      uint64_t first = (uint64_t)linear_in(in.ndim, in.offset, ci.box.offset, ci.box.size) * es;
      uint64_t end = ((uint64_t)linear_in(in.ndim, last, ci.box.offset, ci.box.size) + 1) * es;
      for (uint64_t b = first / ref->block_size; b < (end + ref->block_size - 1) / ref->block_size; b++)
        used[b] = 1;
    }
    for (uint64_t b = 0; b < ref->block_count; b++)
      if (used[b]) total += span_cost(ref, b * ref->block_size, b * ref->block_size + 1);
    free(used);
  }
  return total;
}

/* Storage bytes that loading `box` of tensor t costs: for each saved chunk
 * it meets, the blocks spanning the chunk's row-major bytes from the first
 * to the last element of the intersection. */
static uint64_t box_cost(dcp_meta *meta, size_t t, const dcp_box *box) {
  return union_cost(meta, t, box, 1);
}

/* Storage bytes of one rank's bytes items. */
static uint64_t bytes_items_cost(dcp_meta *meta, int32_t rank, int with_rng) {
  uint64_t total = 0;
  if (g_no_bytes) return 0; /* none loaded */
  for (size_t i = 0; i < dcp_meta_bytes_count(meta); i++) {
    dcp_bytes_info bi;
    dcp_meta_bytes(meta, i, &bi);
    if (!strcmp(bi.key, "step") || (with_rng && !strcmp(bi.key, "rng") && bi.rank == rank))
      total += span_cost(&bi.ref, 0, bi.ref.raw_length);
  }
  return total;
}

typedef struct request {
  size_t t;
  dcp_box box;
  int32_t rank;
  int64_t bytes;
  uint64_t cost;
  size_t group;
} request;

static int cmp_box_key(const request *a, const request *b) {
  if (a->t != b->t) return a->t < b->t ? -1 : 1;
  for (uint32_t d = 0; d < a->box.ndim; d++)
    if (a->box.offset[d] != b->box.offset[d]) return a->box.offset[d] < b->box.offset[d] ? -1 : 1;
  for (uint32_t d = 0; d < a->box.ndim; d++)
    if (a->box.size[d] != b->box.size[d]) return a->box.size[d] < b->box.size[d] ? -1 : 1;
  return 0;
}

static int cmp_request(const void *pa, const void *pb) {
  const request *a = pa, *b = pb;
  int c = cmp_box_key(a, b);
  return c ? c : (a->rank > b->rank) - (a->rank < b->rank);
}

typedef struct rank_stats {
  unsigned long long read, payload, sent, recv, groups;
  unsigned path;
} rank_stats;

/* Every rank's statistics of the last load, through files next to the
 * checkpoint: each rank writes its own; rank 0 waits for all. */
static void exchange_stats(const args *a, const dcp_stats *st, int32_t rank, int32_t world,
                           rank_stats *all) {
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s.stats.%d", a->dir, rank);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  CHECK(f, "open %s", tmp);
  fprintf(f, "%llu %llu %llu %llu %llu %u\n", (unsigned long long)st->data_read_bytes,
          (unsigned long long)st->read_payload_bytes, (unsigned long long)st->dedup_sent_bytes,
          (unsigned long long)st->dedup_recv_bytes, (unsigned long long)st->dedup_groups,
          st->dedup_path);
  CHECK(fclose(f) == 0 && rename(tmp, path) == 0, "write %s", path);
  if (rank != 0) return;
  for (int32_t r = 0; r < world; r++) {
    snprintf(path, sizeof path, "%s.stats.%d", a->dir, r);
    for (int tries = 0; !(f = fopen(path, "r")); tries++) {
      CHECK(tries < 6000, "no statistics from rank %d after 60 s", r);
      nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    rank_stats *x = &all[r];
    CHECK(fscanf(f, "%llu %llu %llu %llu %llu %u", &x->read, &x->payload, &x->sent, &x->recv,
                 &x->groups, &x->path) == 6, "parse %s", path);
    fclose(f);
    remove(path);
  }
}

/* Rank 0: the load's reads against the reference (see the top comment). */
static void check_reads(const args *a, const rank_model *m, const rank_stats *all, int32_t world,
                        int with_rng) {
  dcp_meta *meta;
  /* a context-free view is enough: open the file directly */
  char mpath[4096];
  snprintf(mpath, sizeof mpath, "%s/.metadata", a->dir);
  FILE *f = fopen(mpath, "rb");
  CHECK(f, "open %s", mpath);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)len);
  CHECK(fread(buf, 1, (size_t)len, f) == (size_t)len, "read %s", mpath);
  fclose(f);
  CHECK(dcp_meta_open_memory(NULL, buf, (size_t)len, &meta) == DCP_OK, "meta_open_memory");
  free(buf);

  /* every rank's requests, grouped by (tensor, box) */
  size_t cap = (size_t)world * NMODEL * 3, n = 0;
  request *rq = calloc(cap, sizeof *rq);
  for (int32_t q = 0; q < world; q++)
    for (size_t t = 0; t < NMODEL; t++) {
      if (left_out(MODEL[t].flat)) continue;
      dcp_box boxes[3];
      size_t nb = rank_boxes(m, t, 0, world, a->load_tp, q, boxes);
      for (size_t i = 0; i < nb; i++) {
        int64_t numel;
        CHECK(dcp_box_numel(&boxes[i], &numel) == DCP_OK, "numel");
        if (!numel) continue;
        rq[n++] = (request){t, boxes[i], q, numel * (int64_t)dcp_dtype_size(MODEL[t].dtype),
                            box_cost(meta, t, &boxes[i]), 0};
      }
    }
  qsort(rq, n, sizeof *rq, cmp_request);
  size_t ngroups = 0, *first = calloc(n + 1, sizeof *first), *size = calloc(n + 1, sizeof *size);
  uint64_t need_unique = 0, need_naive = 0, pay_unique = 0, pay_naive = 0, multi_bytes = 0,
           multi_recv = 0;
  for (size_t i = 0; i < n; i++) {
    if (i == 0 || cmp_box_key(&rq[i - 1], &rq[i])) {
      first[ngroups++] = i;
      need_unique += rq[i].cost;
      pay_unique += (uint64_t)rq[i].bytes;
    }
    rq[i].group = ngroups - 1;
    size[ngroups - 1]++;
    need_naive += rq[i].cost;
    pay_naive += (uint64_t)rq[i].bytes;
  }
  for (size_t g = 0; g < ngroups; g++)
    if (size[g] > 1) {
      multi_bytes += (uint64_t)rq[first[g]].bytes;
      multi_recv += (uint64_t)rq[first[g]].bytes * (size[g] - 1);
    }
  /* with dedup each saved block is read once: the union over the
   * distinct boxes, tensor by tensor */
  uint64_t need_union = 0;
  dcp_box *distinct = calloc(n + 1, sizeof *distinct);
  for (size_t t = 0; t < NMODEL; t++) {
    size_t nd = 0;
    for (size_t g = 0; g < ngroups; g++)
      if (rq[first[g]].t == t) distinct[nd++] = rq[first[g]].box;
    if (nd) need_union += union_cost(meta, t, distinct, nd);
  }
  free(distinct);
  uint64_t items = 0;
  for (int32_t q = 0; q < world; q++) items += bytes_items_cost(meta, q, with_rng);
  need_unique += items;
  need_naive += items;
  need_union += items;

  uint64_t read = 0, payload = 0, sent = 0, recv = 0, max_load = 0;
  unsigned path = all[0].path;
  for (int32_t q = 0; q < world; q++) {
    CHECK(all[q].path == path, "rank %d used dedup path %u, rank 0 %u", q, all[q].path, path);
    read += all[q].read, payload += all[q].payload, sent += all[q].sent, recv += all[q].recv;
    if (all[q].payload > max_load) max_load = all[q].payload;
  }
  if (a->expect_path >= 0)
    CHECK(path == (unsigned)a->expect_path, "dedup path %u, expected %d", path, a->expect_path);
  /* dedup: every block once (replica groups and partial-overlap sharing),
   * so the old planner's reads (need_unique: one read per distinct box,
   * blocks shared by boxes read again) fail this where they differ */
  uint64_t want = !path ? need_naive : a->expect_no_share ? need_unique : need_union;
  uint64_t want_pay = path ? pay_unique : pay_naive;
  CHECK(read == want, "data bytes read over all ranks: %llu, expected %llu (union %llu, per "
        "distinct box %llu, naive %llu)", (unsigned long long)read, (unsigned long long)want,
        (unsigned long long)need_union, (unsigned long long)need_unique,
        (unsigned long long)need_naive);
  /* pieces: what share readers send beyond the replica broadcasts; the
   * payload read from storage is the distinct boxes' bytes less them */
  CHECK(sent >= (path ? multi_bytes : 0) && recv >= (path ? multi_recv : 0) &&
        sent - (path ? multi_bytes : 0) == recv - (path ? multi_recv : 0),
        "broadcast %llu sent / %llu received, replica broadcasts %llu / %llu",
        (unsigned long long)sent, (unsigned long long)recv,
        (unsigned long long)(path ? multi_bytes : 0), (unsigned long long)(path ? multi_recv : 0));
  uint64_t pieces = sent - (path ? multi_bytes : 0);
  CHECK(!a->expect_no_share || pieces == 0, "%llu bytes of shared pieces sent, expected none",
        (unsigned long long)pieces);
  /* what the load needs: each distinct box's bytes and the bytes items */
  double ratio = (double)read / (double)(pay_unique + items);
  CHECK(a->max_read_ratio <= 0 || ratio <= a->max_read_ratio,
        "read %llu bytes from storage for %llu needed: x%.3f > %.3f", (unsigned long long)read,
        (unsigned long long)(pay_unique + items), ratio, a->max_read_ratio);
  CHECK(payload + pieces == want_pay, "payload read %llu + pieces received %llu, expected %llu",
        (unsigned long long)payload, (unsigned long long)pieces, (unsigned long long)want_pay);

  /* The balancer's guarantee: if x is the last group of >= 2 ranks that r
   * reads, load(r) <= load(h) + bytes(x) for every member h of x. The test
   * does not know x, so it checks that some group of r's satisfies it (or
   * that r reads only what it alone wants). With LOWEST_RANK each group's
   * lowest member reads it: the loads are known exactly. */
  for (int32_t q = 0; path && !pieces && q < world; q++) {
    uint64_t singles = 0, lowest = 0, bound = 0;
    for (size_t i = 0; i < n; i++) {
      if (rq[i].rank != q) continue;
      size_t g = rq[i].group;
      if (size[g] == 1) {
        singles += (uint64_t)rq[i].bytes;
        continue;
      }
      if (rq[first[g]].rank == q) lowest += (uint64_t)rq[i].bytes;
      uint64_t least = UINT64_MAX;
      for (size_t k = first[g]; k < first[g] + size[g]; k++)
        if (all[rq[k].rank].payload < least) least = all[rq[k].rank].payload;
      if (least + (uint64_t)rq[i].bytes > bound) bound = least + (uint64_t)rq[i].bytes;
    }
    uint64_t load = all[q].payload;
    if (a->reader_lowest)
      CHECK(load == singles + lowest, "rank %d read %llu with LOWEST_RANK, expected %llu", q,
            (unsigned long long)load, (unsigned long long)(singles + lowest));
    else
      CHECK(load == singles || (load > singles && load <= bound),
            "rank %d read %llu: above the balancer's bound %llu (own share %llu)", q,
            (unsigned long long)load, (unsigned long long)bound, (unsigned long long)singles);
  }
  double mean = (double)payload / world;
  printf("reads: world %d tp %d, dedup path %u%s: %llu data bytes read (per distinct box %llu, "
         "naive %llu, x%.2f of naive; x%.3f of need; model %llu); payload max/mean %.3f; %llu "
         "groups, %llu bytes broadcast, %llu of them pieces of shared chunks\n",
         world, a->load_tp, path, a->no_pipeline ? " (no pipeline)" : "",
         (unsigned long long)read, (unsigned long long)need_unique,
         (unsigned long long)need_naive, (double)read / (double)need_naive, ratio,
         (unsigned long long)model_bytes(world), mean > 0 ? (double)max_load / mean : 0.0,
         (unsigned long long)ngroups, (unsigned long long)sent, (unsigned long long)pieces);
  free(rq), free(first), free(size);
  dcp_meta_free(meta);
}

/* Flip one byte of the stored data of saved chunk 0 of tensor fqn. */
static void corrupt_tensor(dcp_ctx *ctx, const args *a, const char *fqn) {
  dcp_meta *meta;
  size_t ti;
  dcp_chunk_info ci;
  const char *file;
  CHECK(dcp_meta_open(ctx, a->dir, &meta) == DCP_OK, "meta_open");
  CHECK(dcp_meta_find_tensor(meta, fqn, &ti) == DCP_OK, "no tensor %s", fqn);
  CHECK(dcp_meta_chunk(meta, ti, 0, &ci) == DCP_OK && dcp_meta_file(meta, ci.ref.file, &file) == 0,
        "chunk");
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", a->dir, file);
  FILE *f = fopen(path, "r+b");
  CHECK(f, "open %s", path);
  fseek(f, (long)ci.ref.offset + 3, SEEK_SET);
  int c = fgetc(f);
  fseek(f, (long)ci.ref.offset + 3, SEEK_SET);
  fputc(c ^ 0x5A, f);
  fclose(f);
  dcp_meta_free(meta);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static dcp_ctx *open_ctx(const args *a) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.coll = a->coll;
  cfg.coll_options = a->coll_options;
  cfg.storage = a->storage;
  cfg.timeout_ms = a->timeout_ms;
  if (a->fault) { /* the same collective, behind the fault-injecting table */
    CHECK(fc_register(a->coll) == 0, "cannot set up the fault collective over %s", a->coll);
    cfg.coll = "fault";
  }
  if (!strcmp(a->coll, "file") || !strcmp(a->coll, "gloo")) {
    const char *r = getenv("DCP_TEST_RANK"), *w = getenv("DCP_TEST_WORLD");
    CHECK(r && w, "the %s collective needs DCP_TEST_RANK/DCP_TEST_WORLD (run under launch)",
          a->coll);
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

/* ---- no hangs (--fault) ------------------------------------------------- */

/* A survivor's call must end this long after the deadline at the latest:
 * generous, so that a loaded machine never trips it; a hang does. */
#define NOHANG_MARGIN_S 5.0

/* 1 when this run injects its fault in `phase` ("save" or "load"). */
static int fault_in(const args *a, const char *phase) {
  return a->fault && !strcmp(a->fault_phase, phase);
}

/* The faulty rank: fire the fault now ("start") or arm it for OP[:N]. */
static void fault_arm(const args *a) {
  char pid_file[4200], op[32] = "";
  int nth = 1;
  fc_action action = !strcmp(a->fault, "stall")   ? FC_STALL
                     : !strcmp(a->fault, "pause") ? FC_PAUSE
                                                  : FC_EXIT;
  snprintf(pid_file, sizeof pid_file, "%s.stalled", a->dir);
  if (!strcmp(a->fault_at, "start")) {
    fc_fire(action, pid_file); /* only a pause returns */
    return;
  }
  const char *colon = strchr(a->fault_at, ':');
  size_t n = colon ? (size_t)(colon - a->fault_at) : strlen(a->fault_at);
  CHECK(n < sizeof op, "--fault-at %s", a->fault_at);
  memcpy(op, a->fault_at, n);
  if (colon) nth = atoi(colon + 1);
  CHECK(fc_arm(action, op, nth, pid_file) == 0, "--fault-at %s: want start or OP[:N]",
        a->fault_at);
}

/* 1 when rank r is not a survivor (the faulty rank, unless it only
 * paused, or one of --dead-ranks): nobody waits for its report. */
static int not_waited_for(const args *a, int32_t r) {
  if (r == a->fault_rank && strcmp(a->fault, "pause")) return 1;
  for (const char *p = a->dead_ranks; p && *p;) {
    if (atoi(p) == r) return 1;
    p = strchr(p, ',');
    p = p ? p + 1 : NULL;
  }
  return 0;
}

/* A survivor of the fault: its call failed with a peer error, within the
 * deadline plus the margin. It records that in <dir>.nohang.<rank>, then
 * waits (bounded) until every other survivor has too. */
static void nohang_check(dcp_ctx *ctx, const args *a, const char *what, dcp_status rc,
                         double took) {
  int32_t world = dcp_ctx_world_size(ctx), rank = dcp_ctx_rank(ctx);
  double limit = (double)a->timeout_ms / 1e3 + NOHANG_MARGIN_S;
  CHECK(rc == DCP_ETIMEDOUT || rc == DCP_EPEER,
        "%s with rank %d %sed gave %s (%s), wanted DCP_ETIMEDOUT or DCP_EPEER", what,
        a->fault_rank, a->fault, dcp_strerror(rc), dcp_ctx_last_error(ctx));
  CHECK(dcp_ctx_last_error(ctx)[0], "%s failed without a message", what);
  CHECK(took <= limit, "%s returned after %.2f s, past the deadline %lld ms + %.0f s", what, took,
        a->timeout_ms, NOHANG_MARGIN_S);
  char path[4200], tmp[4300];
  snprintf(path, sizeof path, "%s.nohang.%d", a->dir, rank);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  CHECK(f, "open %s", tmp);
  fprintf(f, "error %d %.3f\n", (int)rc, took);
  CHECK(fclose(f) == 0 && rename(tmp, path) == 0, "write %s", path);
  printf("rank %d: %s failed after %.2f s (deadline %lld ms): %s: %s\n", rank, what, took,
         a->timeout_ms, dcp_strerror(rc), dcp_ctx_last_error(ctx));
  double t0 = now_s();
  for (int32_t r = 0; r < world; r++) {
    struct stat sb;
    snprintf(path, sizeof path, "%s.nohang.%d", a->dir, r);
    while (!not_waited_for(a, r) && stat(path, &sb) != 0) {
      CHECK(now_s() - t0 <= limit, "rank %d never reported its failed %s", r, what);
      nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
  }
}

/* Runs a save or load (fn) with the fault of this run: the faulty rank
 * never returns from it; the others must fail promptly. */
static void run_faulty(dcp_ctx *ctx, const args *a, const char *what,
                       dcp_status (*fn)(dcp_ctx *, dcp_state *, const char *, const void *),
                       dcp_state *st, const void *opts) {
  if (dcp_ctx_rank(ctx) == a->fault_rank) fault_arm(a);
  double t0 = now_s();
  dcp_status rc = fn(ctx, st, a->dir, opts);
  CHECK(dcp_ctx_rank(ctx) != a->fault_rank || !strcmp(a->fault, "pause"),
        "the fault at %s never fired (%s gave %s)", a->fault_at, what, dcp_strerror(rc));
  nohang_check(ctx, a, what, rc, now_s() - t0);
}

static dcp_status save_fn(dcp_ctx *ctx, dcp_state *st, const char *dir, const void *o) {
  return dcp_save(ctx, st, dir, o);
}

static dcp_status load_fn(dcp_ctx *ctx, dcp_state *st, const char *dir, const void *o) {
  return dcp_load(ctx, st, dir, o);
}

static void do_save(dcp_ctx *ctx, const args *a) {
  int32_t world = dcp_ctx_world_size(ctx), rank = dcp_ctx_rank(ctx);
  CHECK(world % a->save_tp == 0, "world %d not divisible by save tp %d", world, a->save_tp);
  rank_model m;
  build(ctx, &m, world, a->save_tp, 1, 1);
  dcp_save_options o;
  dcp_save_options_init(&o);
  if (a->compress) o.flags |= DCP_SAVE_COMPRESS;
  if (a->overwrite) o.flags |= DCP_SAVE_OVERWRITE;
  if (a->lowest) o.policy = DCP_POLICY_LOWEST_RANK;
  o.block_size = 4096;
  const char *keys[] = {"framework", "step"}, *vals[] = {"scenario", "100"};
  o.nkv = 2, o.kv_keys = keys, o.kv_values = vals;
  if (fault_in(a, "save")) {
    run_faulty(ctx, a, "save", save_fn, m.st, &o);
    free_model(&m);
    return;
  }
  dcp_status rc = dcp_save(ctx, m.st, a->dir, &o);
  if (g_layout_mismatch) {
    /* every rank fails at the plan agreement, before anything is written */
    CHECK(rc == DCP_EMISMATCH, "save with a mismatched layout gave %s (%s), wanted DCP_EMISMATCH",
          dcp_strerror(rc), dcp_ctx_last_error(ctx));
    CHECK(strstr(dcp_ctx_last_error(ctx), "mesh") != NULL, "the error names no mesh: %s",
          dcp_ctx_last_error(ctx));
    int committed = 0;
    if (rank == 0)
      CHECK(data_bytes_on_disk(a->dir, &committed) == 0 && !committed,
            "a refused save left data or a .metadata");
    if (rank == 0) printf("layout mismatch refused: %s\n", dcp_ctx_last_error(ctx));
    free_model(&m);
    return;
  }
  if (a->expect_exists) {
    CHECK(rc == DCP_EEXIST, "save over a committed checkpoint gave %s, wanted DCP_EEXIST",
          dcp_strerror(rc));
  } else {
    CHECK(rc == DCP_OK, "save: %s: %s", dcp_strerror(rc), dcp_ctx_last_error(ctx));
    dcp_stats st = {.struct_size = sizeof st};
    dcp_ctx_stats(ctx, &st);
    if (rank == 0) {
      int committed = 0;
      uint64_t disk = data_bytes_on_disk(a->dir, &committed);
      CHECK(committed, "no .metadata after save");
      if (!a->compress)
        CHECK(disk == model_bytes(world), "data files hold %llu bytes, the model %llu",
              (unsigned long long)disk, (unsigned long long)model_bytes(world));
      else
        CHECK(disk < model_bytes(world), "compressed data %llu >= model %llu",
              (unsigned long long)disk, (unsigned long long)model_bytes(world));
      printf("save: world %d tp %d%s: %llu bytes of data for %llu model bytes, %.3f s\n", world,
             a->save_tp, a->compress ? " zstd" : "", (unsigned long long)disk,
             (unsigned long long)model_bytes(world), st.total_s);
    }
    if (a->expect_per_rank >= 0)
      CHECK((int)st.save_plan_path == a->expect_per_rank, "save plan path %u, expected %d",
            st.save_plan_path, a->expect_per_rank);
    if (a->expect_plan_hit >= 0) {
      CHECK((int)st.plan_cache_hit == a->expect_plan_hit, "first save: plan cache hit %u, "
            "expected %d", st.plan_cache_hit, a->expect_plan_hit);
      if (rank == 0)
        printf("first save: plan cache hit %u, plan-phase collective bytes %llu\n",
               st.plan_cache_hit, (unsigned long long)st.plan_coll_bytes);
    }
    if (a->save_twice) {
      /* same geometry again: every rank reuses the cached global plan */
      o.flags |= DCP_SAVE_OVERWRITE;
      rc = dcp_save(ctx, m.st, a->dir, &o);
      CHECK(rc == DCP_OK, "second save: %s: %s", dcp_strerror(rc), dcp_ctx_last_error(ctx));
      dcp_stats st2 = {.struct_size = sizeof st2};
      dcp_ctx_stats(ctx, &st2);
      CHECK(st.plan_cache_hit == 0 && st2.plan_cache_hit == 1,
            "plan cache: first save hit %u, second %u", st.plan_cache_hit, st2.plan_cache_hit);
      CHECK(st2.plan_coll_bytes < st.plan_coll_bytes,
            "plan-phase collective bytes %llu on a hit, %llu on the miss",
            (unsigned long long)st2.plan_coll_bytes, (unsigned long long)st.plan_coll_bytes);
      if (rank == 0)
        printf("second save: plan cache hit, plan-phase collective bytes %llu (miss: %llu)\n",
               (unsigned long long)st2.plan_coll_bytes, (unsigned long long)st.plan_coll_bytes);
    }
  }
  free_model(&m);
}

static void do_load(dcp_ctx *ctx, const args *a) {
  int32_t world = dcp_ctx_world_size(ctx), rank = dcp_ctx_rank(ctx);
  CHECK(world % a->load_tp == 0, "world %d not divisible by load tp %d", world, a->load_tp);
  dcp_meta *meta;
  CHECK(dcp_meta_open(ctx, a->dir, &meta) == DCP_OK, "meta_open: %s", dcp_ctx_last_error(ctx));
  int same_world = dcp_meta_world_size(meta) == world && !a->no_bytes;
  dcp_meta_free(meta);
  /* before rank 0 joins the load: a replicated tensor (read by one rank
   * for its replica group) or a column-sharded one (with TP going up, read
   * once by one rank for the ranks that each need part of a saved chunk) */
  if ((a->corrupt || a->corrupt_shared) && rank == 0)
    corrupt_tensor(ctx, a, a->corrupt ? "layers.0.bias" : "layers.0.row.weight");
  rank_model m;
  build(ctx, &m, world, a->load_tp, 0, same_world);
  dcp_load_options lo;
  dcp_load_options_init(&lo);
  if (a->meta_per_rank) lo.flags |= DCP_LOAD_METADATA_PER_RANK;
  if (a->no_pipeline) lo.flags |= DCP_LOAD_NO_PIPELINE;
  lo.read_dedup = dedup_of(a->dedup);
  if (a->dedup_mismatch && rank == 0)
    lo.read_dedup = lo.read_dedup == DCP_READ_DEDUP_OFF ? DCP_READ_DEDUP_ON : DCP_READ_DEDUP_OFF;
  if (a->reader_lowest) lo.reader_policy = DCP_POLICY_LOWEST_RANK;
  if (a->max_inflight) lo.max_inflight_bytes = (uint64_t)a->max_inflight;
  if (fault_in(a, "load")) {
    run_faulty(ctx, a, "load", load_fn, m.st, &lo);
    free_model(&m);
    return;
  }
  double t0 = now_s();
  dcp_status rc = dcp_load(ctx, m.st, a->dir, &lo);
  double took = now_s() - t0;
  if (a->corrupt || a->corrupt_shared) {
    CHECK(rc == DCP_ECORRUPT, "load of a corrupt checkpoint gave %s: %s", dcp_strerror(rc),
          dcp_ctx_last_error(ctx));
    CHECK(strstr(dcp_ctx_last_error(ctx), "checksum mismatch"), "message: %s",
          dcp_ctx_last_error(ctx));
    /* the failing read was the share reader's, reported on every rank */
    CHECK(!a->corrupt_shared || strstr(dcp_ctx_last_error(ctx), "read once for"), "message: %s",
          dcp_ctx_last_error(ctx));
    CHECK(took < 20.0, "the failing load took %.1f s (waited for a deadline?)", took);
    free_model(&m);
    if (rank == 0) printf("load: corrupt %s block: every rank failed: %s\n",
                          a->corrupt ? "replicated" : "shared", dcp_ctx_last_error(ctx));
    return;
  }
  if (a->dedup_mismatch) {
    CHECK(rc == DCP_EINVAL, "load with mismatched read_dedup gave %s", dcp_strerror(rc));
    free_model(&m);
    if (rank == 0) printf("load: mismatched options refused on every rank: %s\n",
                          dcp_ctx_last_error(ctx));
    return;
  }
  CHECK(rc == DCP_OK, "load: %s: %s", dcp_strerror(rc), dcp_ctx_last_error(ctx));
  verify(&m, rank, same_world);
  dcp_stats st = {.struct_size = sizeof st};
  dcp_ctx_stats(ctx, &st);
  if (a->expect_path >= 0)
    CHECK(st.dedup_path == (uint32_t)a->expect_path, "dedup path %u, expected %d", st.dedup_path,
          a->expect_path);
  if (a->check_reads) {
    if (rank == 0)
      printf("load: rank 0 made %llu collective calls, %llu bytes\n",
             (unsigned long long)st.coll_ops, (unsigned long long)st.coll_bytes);
    rank_stats *all = calloc((size_t)world, sizeof *all);
    exchange_stats(a, &st, rank, world, all);
    if (rank == 0) check_reads(a, &m, all, world, same_world);
    free(all);
  }
  free_model(&m);
  if (!same_world && !a->no_bytes) {
    /* a PER_RANK item cannot be loaded into another world size */
    build(ctx, &m, world, a->load_tp, 0, 1);
    rc = dcp_load(ctx, m.st, a->dir, &lo);
    CHECK(rc == DCP_ESCOPE, "PER_RANK load across world sizes gave %s", dcp_strerror(rc));
    free_model(&m);
  }
  if (rank == 0) printf("load: world %d tp %d: verified\n", world, a->load_tp);
}

int main(int argc, char **argv) {
  args a = parse(argc, argv);
  g_no_bytes = a.no_bytes;
  dcp_ctx *ctx = open_ctx(&a);
  if (!strcmp(a.mode, "save") || !strcmp(a.mode, "both")) do_save(ctx, &a);
  if ((!strcmp(a.mode, "load") || !strcmp(a.mode, "both")) && !fault_in(&a, "save"))
    do_load(ctx, &a);
  dcp_ctx_free(ctx);
  return 0;
}

/* scenario — one rank of a multi-rank save/load test, run under mpirun
 * (coll "mpi") or the launch helper (coll "file"). It saves a synthetic
 * model with one layout and/or loads it with another, and checks every
 * loaded byte against the values the model defines.
 *
 *   scenario --coll mpi|file --dir CKPT --mode save|load|both
 *            [--save-tp N] [--load-tp N] [--compress] [--lowest] [--rendezvous DIR]
 *            [--expect-exists] [--overwrite] [--storage posix|sharedfs]
 *            [--meta-per-rank]
 *
 * The model: a mesh [world/tp, tp] (DP x TP) and tensors of every kind of
 * sharding: TP on dim 0, TP on dim 1, replicated, DP and TP on two dims,
 * DP*TP combined on one dim, uneven splits with empty trailing shards, a
 * 0-d scalar, a tensor with a zero extent, a ZeRO-style flat shard over all
 * ranks, and several dtypes. Element byte k of global element i of tensor t
 * is a hash of (t, i, k), so any box's expected bytes are known. Bytes
 * items: "step" (REPLICATED) and "rng" (PER_RANK, rank-dependent). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dcp.h"

#define CHECK(cond, ...)                                                  \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "rank %d: check failed at %s:%d: ", g_rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                       \
      fprintf(stderr, "\n");                                              \
      exit(1);                                                            \
    }                                                                     \
  } while (0)

static int g_rank = -1;

typedef struct tensor_spec {
  const char *fqn;
  dcp_dtype dtype;
  uint32_t ndim;
  int64_t shape[3];
  uint32_t map[3]; /* bits: 1 = DP (mesh dim 0), 2 = TP (mesh dim 1) */
  int flat;        /* ZeRO-style flat range over all ranks instead of a layout */
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

/* The state of this rank for a world of `world` with TP degree tp; fill
 * the buffers for a save, poison them for a load. */
static void build(dcp_ctx *ctx, rank_model *m, int32_t world, int32_t tp, int fill, int with_rng) {
  memset(m, 0, sizeof *m);
  int32_t rank = dcp_ctx_rank(ctx);
  CHECK(dcp_state_create(ctx, &m->st) == DCP_OK, "state_create");
  int64_t mesh[2] = {world / tp, tp};
  for (size_t t = 0; t < NMODEL; t++) {
    const tensor_spec *s = &MODEL[t];
    if (s->flat) {
      CHECK(dcp_state_add_tensor(m->st, s->fqn, s->dtype, s->ndim, s->shape) == DCP_OK, "add");
      int64_t numel = s->shape[0] * s->shape[1], per = (numel + world - 1) / world;
      int64_t begin = per * rank < numel ? per * rank : numel;
      int64_t count = numel - begin < per ? numel - begin : per;
      dcp_box region = {.ndim = s->ndim}, pieces[3];
      for (uint32_t d = 0; d < s->ndim; d++) region.size[d] = s->shape[d];
      size_t np;
      CHECK(dcp_flat_to_boxes(&region, begin, count, pieces, 3, &np) == DCP_OK, "flat");
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
      CHECK(dcp_state_add_flat(m->st, s->fqn, NULL, begin, count, flat) == DCP_OK, "add_flat: %s",
            dcp_ctx_last_error(ctx));
      if (np == 0) free(flat);
      /* remember the pieces for checking: they alias the flat buffer */
      at = 0;
      for (size_t i = 0; i < np; i++) {
        m->bufs[m->nbufs] = i == 0 ? flat : NULL;
        m->boxes[m->nbufs] = pieces[i];
        m->owner[m->nbufs++] = t;
      }
      continue;
    }
    CHECK(dcp_layout_create(ctx, 2, mesh, NULL, s->ndim, s->map, &m->layouts[t]) == DCP_OK,
          "layout: %s", dcp_ctx_last_error(ctx));
    dcp_box b;
    CHECK(dcp_layout_box(m->layouts[t], s->shape, rank, &b) == DCP_OK, "layout_box");
    add_buffer(m, t, &b, fill);
    CHECK(dcp_state_add_sharded(m->st, s->fqn, s->dtype, s->ndim, s->shape, m->layouts[t],
                                m->bufs[m->nbufs - 1]) == DCP_OK,
          "add_sharded %s: %s", s->fqn, dcp_ctx_last_error(ctx));
  }
  for (int i = 0; i < 8; i++) m->step[i] = fill ? (uint8_t)(42 + i) : 0;
  for (int i = 0; i < 16; i++) m->rng[i] = fill ? (uint8_t)(rank * 16 + i) : 0;
  CHECK(dcp_state_add_bytes(m->st, "step", DCP_SCOPE_REPLICATED, m->step, 8) == DCP_OK, "bytes");
  if (with_rng)
    CHECK(dcp_state_add_bytes(m->st, "rng", DCP_SCOPE_PER_RANK, m->rng, 16) == DCP_OK, "bytes");
}

static void verify(const rank_model *m, int32_t rank, int with_rng) {
  for (size_t i = 0; i < m->nbufs; i++) {
    size_t t = m->owner[i];
    uint8_t *p = m->bufs[i];
    if (!p) continue; /* a later piece of a flat range: checked with the first */
    if (MODEL[t].flat) {
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
  uint64_t total = 8 + 16 * (uint64_t)world;
  for (size_t t = 0; t < NMODEL; t++) {
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
  const char *coll, *dir, *mode, *rendezvous, *storage;
  int save_tp, load_tp, compress, lowest, expect_exists, overwrite, meta_per_rank;
} args;

static args parse(int argc, char **argv) {
  args a = {.coll = "mpi", .mode = "both", .save_tp = 1, .load_tp = 1};
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
    if (!strcmp(k, "--compress")) a.compress = 1;
    else if (!strcmp(k, "--lowest")) a.lowest = 1;
    else if (!strcmp(k, "--expect-exists")) a.expect_exists = 1;
    else if (!strcmp(k, "--overwrite")) a.overwrite = 1;
    else if (!strcmp(k, "--meta-per-rank")) a.meta_per_rank = 1;
    else if (!strcmp(k, "--coll")) a.coll = v, i++;
    else if (!strcmp(k, "--dir")) a.dir = v, i++;
    else if (!strcmp(k, "--mode")) a.mode = v, i++;
    else if (!strcmp(k, "--rendezvous")) a.rendezvous = v, i++;
    else if (!strcmp(k, "--storage")) a.storage = v, i++;
    else if (!strcmp(k, "--save-tp")) a.save_tp = atoi(v), i++;
    else if (!strcmp(k, "--load-tp")) a.load_tp = atoi(v), i++;
    else {
      fprintf(stderr, "scenario: unknown argument %s\n", k);
      exit(2);
    }
  }
  if (!a.dir) exit(2);
  return a;
}

static dcp_ctx *open_ctx(const args *a) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.coll = a->coll;
  cfg.storage = a->storage;
  cfg.timeout_ms = 60000;
  if (!strcmp(a->coll, "file")) {
    const char *r = getenv("DCP_TEST_RANK"), *w = getenv("DCP_TEST_WORLD");
    CHECK(r && w, "the file collective needs DCP_TEST_RANK/DCP_TEST_WORLD (run under launch)");
    cfg.rank = atoi(r);
    cfg.world_size = atoi(w);
    cfg.rendezvous = a->rendezvous;
  }
  dcp_ctx *ctx;
  dcp_status s = dcp_ctx_create(&cfg, &ctx);
  CHECK(s == DCP_OK, "ctx_create: %s: %s", dcp_strerror(s), dcp_ctx_create_error());
  g_rank = dcp_ctx_rank(ctx);
  return ctx;
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
  dcp_status s = dcp_save(ctx, m.st, a->dir, &o);
  if (a->expect_exists) {
    CHECK(s == DCP_EEXIST, "save over a committed checkpoint gave %s, wanted DCP_EEXIST",
          dcp_strerror(s));
  } else {
    CHECK(s == DCP_OK, "save: %s: %s", dcp_strerror(s), dcp_ctx_last_error(ctx));
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
  }
  free_model(&m);
}

static void do_load(dcp_ctx *ctx, const args *a) {
  int32_t world = dcp_ctx_world_size(ctx), rank = dcp_ctx_rank(ctx);
  CHECK(world % a->load_tp == 0, "world %d not divisible by load tp %d", world, a->load_tp);
  dcp_meta *meta;
  CHECK(dcp_meta_open(ctx, a->dir, &meta) == DCP_OK, "meta_open: %s", dcp_ctx_last_error(ctx));
  int same_world = dcp_meta_world_size(meta) == world;
  dcp_meta_free(meta);
  rank_model m;
  build(ctx, &m, world, a->load_tp, 0, same_world);
  dcp_load_options lo;
  dcp_load_options_init(&lo);
  if (a->meta_per_rank) lo.flags |= DCP_LOAD_METADATA_PER_RANK;
  dcp_status s = dcp_load(ctx, m.st, a->dir, &lo);
  CHECK(s == DCP_OK, "load: %s: %s", dcp_strerror(s), dcp_ctx_last_error(ctx));
  verify(&m, rank, same_world);
  free_model(&m);
  if (!same_world) {
    /* a PER_RANK item cannot be loaded into another world size */
    build(ctx, &m, world, a->load_tp, 0, 1);
    s = dcp_load(ctx, m.st, a->dir, NULL);
    CHECK(s == DCP_ESCOPE, "PER_RANK load across world sizes gave %s", dcp_strerror(s));
    free_model(&m);
  }
  if (rank == 0) printf("load: world %d tp %d: verified\n", world, a->load_tp);
}

int main(int argc, char **argv) {
  args a = parse(argc, argv);
  dcp_ctx *ctx = open_ctx(&a);
  if (!strcmp(a.mode, "save") || !strcmp(a.mode, "both")) do_save(ctx, &a);
  if (!strcmp(a.mode, "load") || !strcmp(a.mode, "both")) do_load(ctx, &a);
  dcp_ctx_free(ctx);
  return 0;
}

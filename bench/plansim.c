/* plansim — one-process simulation of planning a large training job's
 * checkpoint: every rank's local save plan, the global save plan (dedup +
 * write balancing), the encoded .metadata, and the per-rank load plan for a
 * changed tensor-parallel degree. Prints measured figures next to their
 * targets; asserts nothing.
 *
 * The synthetic model is GPT-like: `layers` transformer layers of 12 tensors
 * (qkv, proj, fc1, fc2 weights and biases, two layer norms), an embedding on
 * the first pipeline stage and a final norm on the last. Weights are bf16,
 * sharded over TP Megatron-style and replicated over DP; each weight has
 * three fp32 Adam states (master, exp_avg, exp_avg_sq) flat-sharded over DP
 * (ZeRO-1) within its TP shard. World rank = (pp * DP + dp) * TP + tp. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sys/resource.h>
#include <time.h>
#include <xxhash.h>

#include "base/checked.h"
#include "metadata/meta.h"
#include "metadata/view.h"
#include "model/box.h"
#include "model/layout.h"
#include "model/state.h"
#include "planner/layout_plan.h"
#include "planner/load_plan.h"
#include "planner/save_plan.h"
#include "runtime/save_layout.h"

typedef struct config {
  int tp, pp, dp, layers;
  int64_t hidden, vocab;
  int new_tp;  /* TP degree of the load layout (DP grows to keep the world) */
  int samples; /* ranks whose load plan is timed */
  int format_version; /* 0: the current one */
  int no_layouts;     /* record no meshes (every list listed or found by shape) */
  int scale;          /* pipeline stages of the job per simulated stage (1: all simulated) */
  int job_pp;         /* the job's pipeline depth (pp, or more when simulating) */
} config;

typedef struct tensor_def {
  const char *name;
  int ndim;
  int64_t mult0, mult1; /* shape = {mult0*hidden, mult1*hidden} (1-D: mult0) */
  int tp_dim;           /* tensor dim sharded by TP, or -1 */
} tensor_def;

static const tensor_def LAYER_TENSORS[] = {
    {"attn.qkv.weight", 2, 3, 1, 0}, {"attn.qkv.bias", 1, 3, 0, 0},
    {"attn.proj.weight", 2, 1, 1, 1}, {"attn.proj.bias", 1, 1, 0, -1},
    {"ln1.weight", 1, 1, 0, -1},      {"ln1.bias", 1, 1, 0, -1},
    {"ln2.weight", 1, 1, 0, -1},      {"ln2.bias", 1, 1, 0, -1},
    {"mlp.fc1.weight", 2, 4, 1, 0},   {"mlp.fc1.bias", 1, 4, 0, 0},
    {"mlp.fc2.weight", 2, 1, 4, 1},   {"mlp.fc2.bias", 1, 1, 0, -1},
};
#define NLAYER_TENSORS (sizeof LAYER_TENSORS / sizeof LAYER_TENSORS[0])
static const char *const ADAM_STATES[] = {"master", "exp_avg", "exp_avg_sq"};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Heap bytes in use now, in MiB (what a step holds on to). */
static double heap_mib(void) {
  struct mallinfo2 mi = mallinfo2();
  return (double)(mi.uordblks + mi.hblkhd) / (1 << 20);
}

static double peak_rss_mib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0; /* ru_maxrss is KiB on Linux */
}

static void die(const char *what, dcp_status rc, const dcpi_err *err) {
  fprintf(stderr, "plansim: %s failed: %s: %s\n", what, dcp_strerror(rc), err ? err->msg : "");
  exit(1);
}

/* ---- the synthetic model ------------------------------------------------ */

/* One tensor a rank holds: its name, shape and the TP layout it uses. */
typedef struct rank_tensor {
  char fqn[96];
  uint32_t ndim;
  int64_t shape[2];
  int tp_dim;
} rank_tensor;

/* The tensors of pipeline stage `stage`, in a fixed order; returns count. */
static size_t stage_tensors(const config *c, int stage, rank_tensor *out) {
  size_t n = 0;
  int per = c->layers / c->pp, first = stage * per;
  if (stage == c->pp - 1) per = c->layers - first;
  if (stage == 0)
    out[n++] = (rank_tensor){"embed.weight", 2, {c->vocab, c->hidden}, 0};
  for (int l = first; l < first + per; l++)
    for (size_t t = 0; t < NLAYER_TENSORS; t++) {
      const tensor_def *d = &LAYER_TENSORS[t];
      rank_tensor *r = &out[n++];
      snprintf(r->fqn, sizeof r->fqn, "layers.%d.%s", l, d->name);
      r->ndim = (uint32_t)d->ndim;
      r->shape[0] = d->mult0 * c->hidden;
      r->shape[1] = d->mult1 * c->hidden;
      r->tp_dim = d->tp_dim;
    }
  if (stage == c->pp - 1) {
    out[n++] = (rank_tensor){"final_ln.weight", 1, {c->hidden, 0}, -1};
    out[n++] = (rank_tensor){"final_ln.bias", 1, {c->hidden, 0}, -1};
  }
  return n;
}

static size_t max_stage_tensors(const config *c) {
  return (size_t)(c->layers / c->pp + c->layers % c->pp) * NLAYER_TENSORS + 3;
}

/* The three layouts of one stage over mesh [DP, TP]: replicated, TP on
 * tensor dim 0, TP on tensor dim 1; and the two of 1-D tensors. */
typedef struct stage_layouts {
  dcp_layout *by_tp_dim[3]; /* index tp_dim + 1 */
  dcp_layout *vec[2];       /* 1-D: replicated, TP on dim 0 */
} stage_layouts;

static stage_layouts make_layouts(int stage, int tp, int dp) {
  stage_layouts sl;
  int64_t mesh[2] = {dp, tp};
  int32_t *ranks = malloc((size_t)dp * (size_t)tp * sizeof *ranks);
  for (int i = 0; i < dp * tp; i++) ranks[i] = stage * dp * tp + i;
  const uint32_t maps[3][2] = {{0, 0}, {1u << 1, 0}, {0, 1u << 1}};
  for (int k = 0; k < 3; k++) {
    dcpi_err err;
    dcp_status rc = dcpi_layout_create(2, mesh, ranks, 2, maps[k], &sl.by_tp_dim[k], &err);
    if (!rc && k < 2) rc = dcpi_layout_create(2, mesh, ranks, 1, maps[k], &sl.vec[k], &err);
    if (rc) die("layout", rc, &err);
  }
  free(ranks);
  return sl;
}

static void free_layouts(stage_layouts *sl, int n) {
  for (int s = 0; s < n; s++)
    for (int k = 0; k < 3; k++) {
      dcp_layout_free(sl[s].by_tp_dim[k]);
      if (k < 2) dcp_layout_free(sl[s].vec[k]);
    }
  free(sl);
}

/* The layout of tensor t on its stage (what dcp_state_add_sharded gets). */
static const dcp_layout *layout_of(const stage_layouts *sl, const rank_tensor *t) {
  return t->ndim == 2 ? sl->by_tp_dim[t->tp_dim + 1] : sl->vec[t->tp_dim + 1];
}

/* The box rank `rank` holds of tensor t (its TP shard: replicated over DP). */
static void tp_box(const stage_layouts *sl, const rank_tensor *t, int32_t rank, int64_t *off,
                   int64_t *sz) {
  const dcp_layout *l = sl->by_tp_dim[t->tp_dim + 1];
  int64_t shape2[2] = {t->shape[0], t->ndim == 2 ? t->shape[1] : 1};
  int64_t o[2], s[2];
  dcpi_layout_box_at(l, shape2, dcpi_layout_position(l, rank), o, s);
  for (uint32_t d = 0; d < t->ndim; d++) off[d] = o[d], sz[d] = s[d];
}

/* Calls emit(fqn, dtype, ndim, shape, nboxes, off, sz) for every tensor the
 * rank holds, with its boxes: the bf16 TP shard of each weight and, for
 * each Adam state, the rank's DP slice of that shard's flat elements (what
 * dcp_state_add_flat_sharded gives with the weight's layout, cut over its
 * DP dim, replicated over TP where the weight is). All are
 * layout tensors (layout 1). */
typedef void (*emit_fn)(void *arg, const char *fqn, dcp_dtype dt, uint32_t ndim,
                        const int64_t *shape, size_t nboxes, const int64_t *off,
                        const int64_t *sz, int layout);

static void rank_items(const config *c, int tp, int dp, const stage_layouts *layouts,
                       rank_tensor *scratch, int32_t rank, emit_fn emit, void *arg) {
  int stage = rank / (dp * tp), dp_idx = (rank / tp) % dp;
  size_t n = stage_tensors(c, stage, scratch);
  for (size_t i = 0; i < n; i++) {
    const rank_tensor *t = &scratch[i];
    int64_t off[2], sz[2];
    tp_box(&layouts[stage], t, rank, off, sz);
    emit(arg, t->fqn, DCP_BF16, t->ndim, t->shape, 1, off, sz, 1); /* from its layout */
    /* ZeRO-1: the shard's elements split into dp ceil-divided flat ranges */
    int64_t numel;
    dcpi_numel(t->ndim, sz, &numel);
    int64_t per = (numel + dp - 1) / dp, begin = per * dp_idx;
    if (begin > numel) begin = numel;
    int64_t count = numel - begin < per ? numel - begin : per;
    int64_t boff[3 * 2], bsz[3 * 2];
    size_t nb;
    dcpi_err err;
    dcp_status rc = dcpi_flat_to_boxes(t->ndim, off, sz, begin, count, boff, bsz, 3, &nb, &err);
    if (rc) die("flat_to_boxes", rc, &err);
    for (size_t s = 0; s < 3; s++) {
      char fqn[128];
      snprintf(fqn, sizeof fqn, "optim.%s.%s", ADAM_STATES[s], t->fqn);
      emit(arg, fqn, DCP_F32, t->ndim, t->shape, nb, boff, bsz, 1); /* a flat layout */
    }
  }
}

/* ---- save side ---------------------------------------------------------- */

static void emit_local(void *arg, const char *fqn, dcp_dtype dt, uint32_t ndim,
                       const int64_t *shape, size_t nboxes, const int64_t *off,
                       const int64_t *sz, int layout) {
  dcpi_local_plan *lp = arg;
  dcpi_err err;
  uint32_t ti;
  dcp_status rc = dcpi_local_plan_add_tensor(lp, fqn, dt, ndim, shape, &ti, &err);
  if (!rc && layout) rc = dcpi_local_plan_mark_layout(lp, ti, &err);
  if (rc) die("local_plan_add_tensor", rc, &err);
  for (size_t b = 0; b < nboxes; b++)
    if ((rc = dcpi_local_plan_add_chunk(lp, ti, off + b * ndim, sz + b * ndim, &err)))
      die("local_plan_add_chunk", rc, &err);
}

static dcpi_local_plan **build_local_plans(const config *c, const stage_layouts *layouts,
                                           int32_t world) {
  dcpi_local_plan **plans = calloc((size_t)world, sizeof *plans);
  rank_tensor *scratch = malloc(max_stage_tensors(c) * sizeof *scratch);
  for (int32_t r = 0; r < world; r++) {
    dcpi_err err;
    dcp_status rc = dcpi_local_plan_create(r, world, NULL, &plans[r], &err);
    if (rc) die("local_plan_create", rc, &err);
    rank_items(c, c->tp, c->dp, layouts, scratch, r, emit_local, plans[r]);
    if ((rc = dcpi_local_plan_add_bytes(plans[r], "step", DCP_SCOPE_REPLICATED, 8, &err)) ||
        (rc = dcpi_local_plan_add_bytes(plans[r], "rng", DCP_SCOPE_PER_RANK, 5056, &err)) ||
        (rc = dcpi_local_plan_finish(plans[r], &err)))
      die("local plan", rc, &err);
  }
  free(scratch);
  return plans;
}

/* The .metadata a save of this plan would commit: one data file per rank,
 * each rank's items stored back to back, 4 MiB blocks with checksums. */
static void fill_ref(dcp_storage_ref *ref, uint32_t file, uint64_t offset, int64_t nbytes,
                     uint32_t block_size, uint64_t **sums, size_t *cap, uint64_t seed) {
  uint64_t blocks = ((uint64_t)nbytes + block_size - 1) / block_size;
  if (blocks > *cap) {
    *cap = blocks;
    *sums = realloc(*sums, blocks * sizeof **sums);
  }
  for (uint64_t b = 0; b < blocks; b++) (*sums)[b] = XXH3_64bits_withSeed(&b, sizeof b, seed);
  *ref = (dcp_storage_ref){.file = file, .codec = DCP_CODEC_NONE, .block_size = block_size,
                           .offset = offset, .stored_length = (uint64_t)nbytes,
                           .raw_length = (uint64_t)nbytes, .block_count = blocks,
                           .block_checksums = *sums};
}

/* The stage and TP-sharded dimension (-1: none) of tensor fqn, from its
 * name: "[optim.<state>.]layers.<l>.<name>", embed.weight, final_ln.*. */
static void tensor_layout_of(const config *c, const char *fqn, int *stage, int *tp_dim) {
  const char *p = strstr(fqn, "layers.");
  *stage = 0, *tp_dim = -1;
  if (strstr(fqn, "embed.weight")) *tp_dim = 0;
  if (strstr(fqn, "final_ln.")) *stage = c->pp - 1;
  if (!p) return;
  int l = atoi(p + 7), per = c->layers / c->pp;
  *stage = l / per < c->pp ? l / per : c->pp - 1;
  const char *name = strchr(p + 7, '.') + 1;
  for (size_t t = 0; t < NLAYER_TENSORS; t++)
    if (!strcmp(name, LAYER_TENSORS[t].name)) *tp_dim = LAYER_TENSORS[t].tp_dim;
}

/* Record every stage's [DP, TP] mesh in md (mesh id = stage), as a save
 * from layouts does: each tensor names its stage's mesh and the mesh
 * dimension that shards it (TP), so its chunks derive from them. */
static void add_meshes(const config *c, dcpi_md *md) {
  int64_t mesh[2] = {c->dp, c->tp};
  int32_t *ranks = malloc((size_t)c->dp * (size_t)c->tp * sizeof *ranks);
  for (int s = 0; s < c->pp; s++) {
    for (int i = 0; i < c->dp * c->tp; i++) ranks[i] = s * c->dp * c->tp + i;
    dcpi_err err;
    dcp_status rc = dcpi_md_add_mesh(md, 2, mesh, ranks, NULL, &err);
    if (rc) die("md_add_mesh", rc, &err);
  }
  free(ranks);
}

/* One result as the commit holds it once a rank's message is decoded: a
 * chunk of tensor tid (box at boxes[box_at]) or, tid UINT32_MAX, a bytes
 * item; its ref's checksums at sums[sums_at]. */
typedef struct result {
  uint32_t tid, bytes, ndim;
  size_t box_at, sums_at;
  dcp_storage_ref ref;
} result;

/* A batch of ranks' results, prepared before the builder is timed: the
 * builder's cost is what the coordinator pays, not plansim's walk of its
 * whole plan (random reads over 2 GiB at 102,400 ranks, half the time it
 * once reported as the build) or its stand-in checksums. */
typedef struct arrived {
  int32_t r0, r1;
  char (*names)[32];
  size_t *first; /* per rank of the batch, its first result; one more at the end */
  result *res;
  int64_t *boxes;
  uint64_t *sums;
  size_t nres, nboxes, nsums;
} arrived;

#define RANKS_PER_BATCH 256

/* Append one result of nbytes in file at offset (its box, when a chunk,
 * from the plan item's). */
static void arrive(arrived *a, size_t caps[3], uint32_t tid, uint32_t bytes, const int64_t *box,
                   uint32_t ndim, uint32_t file, uint64_t offset, int64_t nbytes,
                   uint32_t block, uint64_t seed) {
  uint64_t blocks = ((uint64_t)nbytes + block - 1) / block;
  if (DCPI_RESERVE(a->res, caps[0], a->nres + 1) ||
      DCPI_RESERVE(a->boxes, caps[1], a->nboxes + 2 * ndim) ||
      DCPI_RESERVE(a->sums, caps[2], a->nsums + blocks))
    die("arrive", DCP_ENOMEM, NULL);
  result *x = &a->res[a->nres++];
  *x = (result){tid, bytes, ndim, a->nboxes, a->nsums, {0}};
  if (box) memcpy(a->boxes + a->nboxes, box, 2 * ndim * sizeof *box);
  a->nboxes += box ? 2 * ndim : 0;
  for (uint64_t b = 0; b < blocks; b++)
    a->sums[a->nsums++] = XXH3_64bits_withSeed(&b, sizeof b, seed);
  x->ref = (dcp_storage_ref){.file = file, .codec = DCP_CODEC_NONE, .block_size = block,
                             .offset = offset, .stored_length = (uint64_t)nbytes,
                             .raw_length = (uint64_t)nbytes, .block_count = blocks};
}

/* Ranks [r0, r1)'s results: one data file per rank (file id = rank), its
 * items stored back to back, 4 MiB blocks with checksums. */
static void arrive_batch(const dcpi_global_plan *gp, arrived *a, size_t caps[3], int32_t r0,
                         int32_t r1) {
  uint32_t block = dcpi_global_plan_opts(gp)->block_size;
  a->r0 = r0, a->r1 = r1, a->nres = a->nboxes = a->nsums = 0;
  for (int32_t r = r0; r < r1; r++) {
    snprintf(a->names[r - r0], sizeof a->names[0], "data.%06d.dcp", r);
    a->first[r - r0] = a->nres;
    const uint32_t *items;
    size_t n = dcpi_global_plan_rank_items(gp, r, &items);
    uint64_t offset = 0;
    for (size_t k = 0; k < n; k++) {
      dcpi_gp_item it;
      dcpi_global_plan_item(gp, items[k], &it);
      arrive(a, caps, it.tensor, 0, it.offset, it.ndim, (uint32_t)r, offset, it.nbytes, block,
             items[k]);
      offset += (uint64_t)it.nbytes;
    }
    const uint32_t *bytes;
    n = dcpi_global_plan_rank_bytes(gp, r, &bytes);
    for (size_t k = 0; k < n; k++) {
      dcpi_gp_bytes b;
      dcpi_global_plan_bytes(gp, bytes[k], &b);
      arrive(a, caps, UINT32_MAX, bytes[k], NULL, 0, (uint32_t)r, offset, b.length, block,
             bytes[k] + 1000000007ull);
      offset += (uint64_t)b.length;
    }
  }
  a->first[r1 - r0] = a->nres;
  for (size_t i = 0; i < a->nres; i++) a->res[i].ref.block_checksums = a->sums + a->res[i].sums_at;
}

/* Hand a batch to the builder, as the commit does with the results. */
static void add_batch(dcpi_md *md, const dcpi_global_plan *gp, const uint32_t *tid,
                      const arrived *a) {
  dcpi_err err;
  dcp_status rc;
  for (int32_t r = a->r0; r < a->r1; r++) {
    uint32_t file;
    if ((rc = dcpi_md_add_file(md, a->names[r - a->r0], &file, &err))) die("md_add_file", rc, &err);
    for (size_t i = a->first[r - a->r0]; i < a->first[r - a->r0 + 1]; i++) {
      const result *x = &a->res[i];
      if (x->tid != UINT32_MAX) {
        const int64_t *box = a->boxes + x->box_at;
        if ((rc = dcpi_md_add_chunk(md, tid[x->tid], box, box + x->ndim, &x->ref, &err)))
          die("md_add_chunk", rc, &err);
      } else {
        dcpi_gp_bytes b;
        dcpi_global_plan_bytes(gp, x->bytes, &b);
        if ((rc = dcpi_md_add_bytes(md, b.key, b.scope, b.rank, &x->ref, &err)))
          die("md_add_bytes", rc, &err);
      }
    }
  }
}

/* The .metadata a save of this plan would commit; *builder_s: the seconds
 * spent in the builder (tensors, meshes, files, chunks, bytes items). */
static dcpi_md *build_metadata(const config *c, const dcpi_global_plan *gp, int32_t world,
                               double *builder_s) {
  double t0 = now_s();
  dcpi_md *md;
  dcpi_err err;
  dcp_status rc = dcpi_md_create(&md);
  if (rc || (rc = dcpi_md_set_world(md, world, &err))) die("md_create", rc, &err);
  if (c->format_version && (rc = dcpi_md_set_format_version(md, (uint32_t)c->format_version, &err)))
    die("md_set_format_version", rc, &err);
  if (!c->no_layouts) add_meshes(c, md);
  size_t ntensors = dcpi_global_plan_tensor_count(gp);
  uint32_t *tid = malloc(ntensors * sizeof *tid);
  for (size_t t = 0; t < ntensors; t++) {
    dcpi_gp_tensor gt;
    dcpi_global_plan_tensor(gp, t, &gt);
    int stage, tp_dim;
    tensor_layout_of(c, gt.fqn, &stage, &tp_dim);
    uint32_t map[2] = {0, 0};
    if (tp_dim >= 0 && (uint32_t)tp_dim < gt.ndim) map[tp_dim] = 1u << 1; /* mesh dim 1: TP */
    int32_t mesh = c->no_layouts ? -1 : stage;
    if ((rc = dcpi_md_add_tensor(md, gt.fqn, gt.dtype, gt.ndim, gt.shape, mesh,
                                 mesh >= 0 ? map : NULL, &tid[t], &err)) ||
        (rc = dcpi_md_reserve_chunks(md, tid[t], gt.nitems, &err)))
      die("md_add_tensor", rc, &err);
  }
  *builder_s = now_s() - t0;
  arrived a = {.names = malloc(RANKS_PER_BATCH * sizeof *a.names),
               .first = malloc((RANKS_PER_BATCH + 1) * sizeof *a.first)};
  size_t caps[3] = {0};
  for (int32_t r0 = 0; r0 < world; r0 += RANKS_PER_BATCH) {
    int32_t r1 = world - r0 < RANKS_PER_BATCH ? world : r0 + RANKS_PER_BATCH;
    arrive_batch(gp, &a, caps, r0, r1);
    t0 = now_s();
    add_batch(md, gp, tid, &a);
    *builder_s += now_s() - t0;
  }
  free(a.names), free(a.first), free(a.res), free(a.boxes), free(a.sums);
  free(tid);
  return md;
}

/* ---- per-rank planning (the layout path) --------------------------------- */

/* The k-th of the ranks whose plans are timed: spread over the world. */
static int32_t sample_rank(const config *c, int32_t world, int k) {
  return (int32_t)((((int64_t)world * k) / c->samples + k % 7) % world);
}

typedef struct perrank_stats {
  double total_ms, max_ms, max_mib;
  size_t writes, mismatched;
} perrank_stats;

static int cmp_lt(const void *pa, const void *pb) {
  const dcpi_layout_tensor *a = *(const dcpi_layout_tensor *const *)pa,
                           *b = *(const dcpi_layout_tensor *const *)pb;
  return strcmp(a->fqn, b->fqn);
}

/* What the whole plan gives rank of the layout tensors: items, bytes. */
static void whole_plan_share(const dcpi_global_plan *gp, int32_t rank, size_t *n, int64_t *bytes) {
  const uint32_t *items;
  size_t m = dcpi_global_plan_rank_items(gp, rank, &items);
  *n = 0, *bytes = 0;
  for (size_t k = 0; k < m; k++) {
    dcpi_gp_item it;
    dcpi_gp_tensor gt;
    dcpi_global_plan_item(gp, items[k], &it);
    dcpi_global_plan_tensor(gp, it.tensor, &gt);
    if (gt.layout) (*n)++, *bytes += it.nbytes;
  }
}

/* Time what a sampled rank computes on the layout path: its tensors, its
 * mesh digest and its writes (dcpi_layout_plan_rank); and check them
 * against the whole plan's share of the rank (items and bytes). */
static perrank_stats time_per_rank(const config *c, const stage_layouts *layouts,
                                   const dcpi_global_plan *gp, int32_t world) {
  perrank_stats st = {0};
  rank_tensor *scratch = malloc(max_stage_tensors(c) * sizeof *scratch);
  dcpi_layout_tensor *lt = malloc(4 * max_stage_tensors(c) * sizeof *lt);
  const dcpi_layout_tensor **ord = malloc(4 * max_stage_tensors(c) * sizeof *ord);
  char (*names)[128] = malloc(4 * max_stage_tensors(c) * sizeof *names);
  const dcpi_save_opts *opts = dcpi_global_plan_opts(gp);
  for (int k = 0; k < c->samples; k++) {
    int32_t rank = sample_rank(c, world, k);
    double heap0 = heap_mib(), t0 = now_s();
    int stage = rank / (c->dp * c->tp);
    size_t nw0 = stage_tensors(c, stage, scratch), n = 0;
    for (size_t i = 0; i < nw0; i++) {
      const rank_tensor *t = &scratch[i];
      const dcp_layout *l = layout_of(&layouts[stage], t);
      lt[n++] = (dcpi_layout_tensor){.fqn = t->fqn, .fqn_len = strlen(t->fqn), .dtype = DCP_BF16,
                                     .ndim = t->ndim, .shape = t->shape, .layout = l};
      for (size_t a = 0; a < 3; a++) { /* its Adam states: flat over DP */
        char *name = names[n];
        snprintf(name, sizeof names[n], "optim.%s.%s", ADAM_STATES[a], t->fqn);
        lt[n++] = (dcpi_layout_tensor){.fqn = name, .fqn_len = strlen(name), .dtype = DCP_F32,
                                       .ndim = t->ndim, .shape = t->shape, .layout = l,
                                       .flat = true, .flat_dims = 1u << 0}; /* over DP */
      }
    }
    for (size_t i = 0; i < n; i++) ord[i] = &lt[i];
    qsort(ord, n, sizeof *ord, cmp_lt);
    XXH128_hash_t h = dcpi_layout_digest(ord, n, opts);
    dcpi_layout_write *w;
    size_t nw;
    dcpi_err err;
    dcp_status rc = dcpi_layout_plan_rank(lt, n, world, rank, opts, &w, &nw, &err);
    if (rc) die("layout_plan_rank", rc, &err);
    double ms = (now_s() - t0) * 1e3, mib = heap_mib() - heap0;
    (void)h;
    size_t gn;
    int64_t gb, wb = 0;
    whole_plan_share(gp, rank, &gn, &gb);
    for (size_t i = 0; i < nw; i++) wb += w[i].nbytes;
    st.mismatched += gn != nw || gb != wb;
    st.total_ms += ms;
    if (ms > st.max_ms) st.max_ms = ms;
    if (mib > st.max_mib) st.max_mib = mib;
    st.writes += nw;
    free(w);
  }
  free(scratch), free(lt), free(ord), free(names);
  return st;
}

/* The state of rank r: its stage's tensors added from their layouts (data
 * never read), the weights sharded and their Adam states flat-sharded. */
static dcp_state *rank_state(const config *c, const stage_layouts *layouts, int32_t world,
                             int32_t rank, dcp_ctx **ctx) {
  static uint8_t data; /* geometry only: nothing reads the data */
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.rank = rank, cfg.world_size = world;
  dcp_state *st;
  if (dcp_ctx_create(&cfg, ctx) || dcp_state_create(*ctx, &st)) die("state", DCP_ENOMEM, NULL);
  rank_tensor *scratch = malloc(max_stage_tensors(c) * sizeof *scratch);
  int stage = rank / (c->dp * c->tp);
  size_t n = stage_tensors(c, stage, scratch);
  for (size_t i = 0; i < n; i++) {
    const rank_tensor *t = &scratch[i];
    const dcp_layout *l = layout_of(&layouts[stage], t);
    if (dcp_state_add_sharded(st, t->fqn, DCP_BF16, t->ndim, t->shape, l, &data))
      die("add_sharded", DCP_EINVAL, NULL);
    for (size_t a = 0; a < 3; a++) {
      char fqn[128];
      snprintf(fqn, sizeof fqn, "optim.%s.%s", ADAM_STATES[a], t->fqn);
      if (dcp_state_add_flat_sharded(st, fqn, DCP_F32, t->ndim, t->shape, l, 1u << 0, &data))
        die("add_flat_sharded", DCP_EINVAL, NULL);
    }
  }
  free(scratch);
  return st;
}

/* The offer of rank r, as dcp_save would send it. */
static void offer_of(const config *c, const stage_layouts *layouts, int32_t world, int32_t rank,
                     const dcpi_save_opts *opts, dcpi_wbuf *out) {
  dcp_ctx *ctx;
  dcp_state *st = rank_state(c, layouts, world, rank, &ctx);
  dcpi_save_layout_offer(st, opts, out);
  dcp_state_free(st);
  dcp_ctx_free(ctx);
}

/* The commit's side for the sampled ranks: each of their writes found in
 * the set from its offset and taken into a metadata builder. The pieces
 * taken; dies on any the set refuses. *us: mean microseconds per take. */
static size_t take_samples(const config *c, const stage_layouts *layouts, int32_t world,
                           const dcpi_save_opts *opts, dcpi_layout_set *ls, double *us) {
  dcpi_md *md;
  dcpi_err err;
  uint32_t file;
  dcp_status rc = dcpi_md_create(&md);
  if (rc || (rc = dcpi_md_set_world(md, world, &err)) ||
      (rc = dcpi_md_add_file(md, "data", &file, &err)) ||
      (rc = dcpi_layout_set_add_tensors(ls, md, &err)))
    die("take md", rc, &err);
  size_t taken = 0;
  double spent = 0;
  uint64_t *sums = NULL;
  size_t cap = 0;
  for (int k = 0; k < c->samples; k++) {
    int32_t rank = sample_rank(c, world, k);
    dcp_ctx *ctx;
    dcp_state *st = rank_state(c, layouts, world, rank, &ctx);
    dcpi_layout_tensor *lts = dcpi_save_layout_tensors(st);
    dcpi_layout_write *w;
    size_t n;
    if (!lts || (rc = dcpi_layout_plan_rank(lts, st->ntensors, world, rank, opts, &w, &n, &err)))
      die("take plan", lts ? rc : DCP_ENOMEM, &err);
    double t0 = now_s();
    for (size_t i = 0; i < n; i++) {
      const dcpi_layout_tensor *t = &lts[w[i].tensor];
      dcp_storage_ref ref;
      fill_ref(&ref, file, 0, w[i].nbytes, opts->block_size, &sums, &cap, taken);
      uint64_t key = dcpi_layout_piece_key(t->ndim, t->shape, w[i].box);
      if ((rc = dcpi_layout_set_take(ls, md, rank, t->fqn, t->fqn_len, key, &ref, &err)))
        die("layout_set_take", rc, &err);
      taken++;
    }
    spent += now_s() - t0;
    free(w), free(lts);
    dcp_state_free(st);
    dcp_ctx_free(ctx);
  }
  free(sums);
  dcpi_md_free(md);
  *us = taken ? spent * 1e6 / (double)taken : 0;
  return taken;
}

typedef struct coord_stats {
  double s, mib, take_us;
  size_t offer_bytes, taken;
} coord_stats;

/* Rank 0 on the layout path: every rank's offer checked (the members of a
 * stage send identical offers, its first rank the description) and every
 * tensor's pieces counted for the commit (dcpi_layout_set_build); then the
 * sampled ranks' pieces taken as the commit takes them. */
static coord_stats time_coordinator(const config *c, const stage_layouts *layouts, int32_t world,
                                    const dcpi_save_opts *opts) {
  int32_t per = c->dp * c->tp;
  dcpi_wbuf all = {0};
  size_t *lens = malloc((size_t)world * sizeof *lens);
  for (int s = 0; s < c->pp; s++) {
    dcpi_wbuf first = {0}, member = {0};
    offer_of(c, layouts, world, s * per, opts, &first);
    if (per > 1) offer_of(c, layouts, world, s * per + 1, opts, &member);
    for (int32_t r = s * per; r < (s + 1) * per; r++) {
      const dcpi_wbuf *o = r == s * per ? &first : &member;
      dcpi_w_bytes(&all, o->data, o->len);
      lens[r] = o->len;
    }
    dcpi_wbuf_free(&first), dcpi_wbuf_free(&member);
  }
  if (all.status) die("offers", all.status, NULL);
  dcpi_layout_set *ls;
  dcpi_err err;
  double heap0 = heap_mib(), t0 = now_s();
  dcp_status rc = dcpi_layout_set_build(all.data, lens, world, opts, &ls, &err);
  coord_stats cs = {.s = now_s() - t0, .mib = heap_mib() - heap0, .offer_bytes = all.len};
  if (rc) die("layout_set_build", rc, &err);
  cs.taken = take_samples(c, layouts, world, opts, ls, &cs.take_us);
  dcpi_layout_set_free(ls);
  dcpi_wbuf_free(&all);
  free(lens);
  return cs;
}

/* ---- load side ---------------------------------------------------------- */

typedef struct load_input {
  dcpi_load_tensor *tensors;
  dcpi_load_chunk *chunks;
  int64_t *coords; /* shapes and boxes behind the pointers */
  char (*names)[128];
  size_t ntensors, nchunks, ncoords, cap_t, cap_c, cap_x;
} load_input;

static int64_t *push_coords(load_input *in, const int64_t *v, size_t n) {
  int64_t *p = in->coords + in->ncoords;
  memcpy(p, v, n * sizeof *v);
  in->ncoords += n;
  return p;
}

static void emit_load(void *arg, const char *fqn, dcp_dtype dt, uint32_t ndim,
                      const int64_t *shape, size_t nboxes, const int64_t *off,
                      const int64_t *sz, int layout) {
  (void)layout;
  load_input *in = arg;
  size_t t = in->ntensors++;
  snprintf(in->names[t], sizeof in->names[t], "%s", fqn);
  in->tensors[t] = (dcpi_load_tensor){in->names[t], dt, ndim, push_coords(in, shape, ndim)};
  for (size_t b = 0; b < nboxes; b++) {
    const int64_t *o = push_coords(in, off + b * ndim, ndim);
    const int64_t *s = push_coords(in, sz + b * ndim, ndim);
    in->chunks[in->nchunks++] = (dcpi_load_chunk){(uint32_t)t, o, s};
  }
}

/* Adapts a dcp_meta view to the planner's saved-tensor lookup, the way the
 * load runtime does: find the fqn, decode its chunk list, lend its boxes. */
typedef struct meta_source {
  dcp_meta *meta;
  dcpi_grid grid;
  dcpi_flat flat;
} meta_source;

static dcp_status lookup_meta(void *arg, const char *fqn, size_t fqn_len,
                              dcpi_saved_tensor *out, dcpi_err *err) {
  (void)fqn_len;
  meta_source *ms = arg;
  size_t ti;
  dcp_tensor_info info;
  if (dcp_meta_find_tensor(ms->meta, fqn, &ti) != DCP_OK)
    return dcpi_fail(err, DCP_ENOTFOUND, "checkpoint has no tensor '%s'", fqn);
  dcp_meta_tensor(ms->meta, ti, &info);
  const int64_t *off = NULL, *sz = NULL;
  bool grid = false, flat = false;
  dcp_status rc = dcpi_meta_chunk_grid(ms->meta, ti, &ms->grid, &grid, err);
  if (!rc && !grid) rc = dcpi_meta_chunk_flat(ms->meta, ti, &ms->flat, &flat, err);
  if (!rc && !grid && !flat) rc = dcpi_meta_chunk_boxes(ms->meta, ti, &off, &sz, err);
  if (rc) return rc;
  *out = (dcpi_saved_tensor){.fqn = info.fqn, .dtype = info.dtype, .ndim = info.ndim,
                             .shape = dcpi_meta_tensor_shape(ms->meta, ti),
                             .nchunks = (size_t)info.chunk_count, .chunk_off = off,
                             .chunk_sz = sz, .grid = grid ? &ms->grid : NULL,
                             .flat = flat ? &ms->flat : NULL};
  return DCP_OK;
}

/* What the load runtime does next: fetch the storage ref of every saved
 * chunk the plan reads (dcp_meta_chunk decodes a list on first use). */
static void touch_refs(dcp_meta *meta, const load_input *in, const dcpi_load_plan *plan) {
  for (size_t i = 0; i < plan->noverlaps; i++) {
    const dcpi_overlap *ov = &plan->overlaps[i];
    size_t ti;
    dcp_chunk_info ci;
    if (dcp_meta_find_tensor(meta, in->tensors[ov->tensor].fqn, &ti) ||
        dcp_meta_chunk(meta, ti, ov->saved_chunk, &ci))
      die("meta_chunk", DCP_ECORRUPT, NULL);
  }
}

typedef struct load_stats {
  double total_ms, max_ms, plan_ms;
  size_t overlaps, chunks;
  int64_t bytes;
} load_stats;

static load_stats time_load_plans(const config *c, const void *enc, size_t enc_len) {
  int new_dp = c->dp * c->tp / c->new_tp;
  int32_t world = c->tp * c->pp * c->dp;
  stage_layouts *layouts = malloc((size_t)c->pp * sizeof *layouts);
  for (int s = 0; s < c->pp; s++) layouts[s] = make_layouts(s, c->new_tp, new_dp);
  size_t maxt = max_stage_tensors(c) * 4;
  load_input in = {0};
  in.tensors = malloc(maxt * sizeof *in.tensors);
  in.chunks = malloc(maxt * 3 * sizeof *in.chunks);
  in.coords = malloc(maxt * 16 * sizeof *in.coords);
  in.names = malloc(maxt * sizeof *in.names);
  rank_tensor *scratch = malloc(max_stage_tensors(c) * sizeof *scratch);
  load_stats st = {0};
  for (int k = 0; k < c->samples; k++) {
    int32_t rank = sample_rank(c, world, k);
    in.ntensors = in.nchunks = in.ncoords = 0;
    rank_items(c, c->new_tp, new_dp, layouts, scratch, rank, emit_load, &in);
    /* a fresh view per sampled rank: each rank decodes the chunk lists it
     * needs; opening (checksum + tables) is timed separately */
    meta_source ms = {0};
    if (dcp_meta_open_memory(NULL, enc, enc_len, &ms.meta)) die("meta_open", DCP_ECORRUPT, NULL);
    dcpi_saved_source src = {.lookup = lookup_meta, .arg = &ms};
    dcpi_load_plan *plan;
    dcpi_err err;
    double t0 = now_s();
    dcp_status rc = dcpi_load_plan_build(in.tensors, in.ntensors, in.chunks, in.nchunks, &src,
                                         &plan, &err);
    double t_plan = now_s();
    if (rc) die("load_plan_build", rc, &err);
    touch_refs(ms.meta, &in, plan);
    double ms_taken = (now_s() - t0) * 1e3;
    st.plan_ms += (t_plan - t0) * 1e3;
    st.total_ms += ms_taken;
    if (ms_taken > st.max_ms) st.max_ms = ms_taken;
    st.overlaps += plan->noverlaps;
    st.chunks += in.nchunks;
    st.bytes += plan->total_bytes;
    dcpi_load_plan_free(plan);
    dcp_meta_free(ms.meta);
  }
  free_layouts(layouts, c->pp);
  free(scratch), free(in.tensors), free(in.chunks), free(in.coords), free(in.names);
  return st;
}

/* Root of r in a union-find forest, halving paths on the way. */
static int32_t find_root(int32_t *parent, int32_t r) {
  while (parent[r] != r) r = parent[r] = parent[parent[r]];
  return r;
}

/* How the chunk lists of view are stored: listed, grid, flat (tensors and
 * chunks of each form). */
static void count_forms(dcp_meta *view) {
  size_t tensors[DCPI_FORM_COUNT] = {0}, chunks[DCPI_FORM_COUNT] = {0};
  for (size_t t = 0; t < dcp_meta_tensor_count(view); t++) {
    dcpi_form fm;
    dcpi_err err;
    dcp_tensor_info info;
    dcp_status rc = dcpi_meta_chunk_form(view, t, &fm, &err);
    if (rc) die("chunk_form", rc, &err);
    dcp_meta_tensor(view, t, &info);
    tensors[fm.kind]++;
    chunks[fm.kind] += (size_t)info.chunk_count;
  }
  printf("chunk lists:  listed %zu tensors (%zu chunks), grid %zu (%zu), flat %zu (%zu)\n",
         tensors[DCPI_FORM_LISTED], chunks[DCPI_FORM_LISTED], tensors[DCPI_FORM_GRID],
         chunks[DCPI_FORM_GRID], tensors[DCPI_FORM_FLAT], chunks[DCPI_FORM_FLAT]);
}

/* The issue-19 figures of one run (simulated: of the simulated stages). */
typedef struct figures {
  double plan_s, plan_mib;   /* the whole global plan (the gather path) */
  double rank_s, rank_mib;   /* what one rank computes on the layout path (max of the samples) */
  double lcoord_s, lcoord_mib; /* the coordinator's layout check + piece enumeration */
  double coord_s, coord_mib; /* the coordinator's metadata build + encode */
  double meta_mib, load_mean_ms, load_max_ms, open_ms;
} figures;

static void target_row(const char *what, double v, const char *unit, double target, int scale) {
  printf("  %-34s %10.1f %-4s%s %8.0f %-4s %s\n", what, v * scale, unit,
         scale > 1 ? " (x16)" : "      ", target, unit, v * scale <= target ? "met" : "not met");
}

/* The targets next to this run's figures; whole-job figures of a
 * simulated run are the stage's times the stages (the per-rank load plan
 * of a rank touches its stage's tensors only, so it is measured as is). */
static void print_targets(const config *c, int32_t world, const figures *f) {
  int k = c->scale;
  printf("targets at %lld ranks:                   now            target\n",
         (long long)world * k);
  target_row("save plan per rank (layout path)", f->rank_s, "s", 1, 1);
  target_row("  its memory", f->rank_mib, "MiB", 512, 1);
  target_row("coordinator: layouts + pieces", f->lcoord_s, "s", 1, k);
  target_row("  its memory", f->lcoord_mib, "MiB", 512, k);
  target_row("whole plan, one process (gather)", f->plan_s, "s", 1, k);
  target_row("  its memory", f->plan_mib, "MiB", 512, k);
  target_row("coordinator: metadata build+encode", f->coord_s, "s", 5, k);
  target_row("  its memory", f->coord_mib, "MiB", 512, k);
  target_row("metadata size", f->meta_mib, "MiB", 64, k);
  target_row("load plan per rank, mean", f->load_mean_ms, "ms", 20, 1);
  target_row("load plan per rank, max", f->load_max_ms, "ms", 20, 1);
  target_row("metadata open", f->open_ms, "ms", 50, k);
}

/* ---- main --------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr,
          "usage: plansim [--ranks N] [--tp N] [--pp N] [--dp N] [--layers N] [--hidden N]\n"
          "               [--new-tp N] [--samples N] [--stages K] [--format V] [--no-layouts]\n"
          "               [--quick]\n"
          "defaults: a 10,240-rank job, TP8 x PP16 x DP80, 96 layers, hidden 12288,\n"
          "loaded with TP4; --quick runs TP4 x PP2 x DP4, 8 layers, hidden 1024.\n"
          "--ranks N: TP8 x PP16 x DP(N/128) (10240, 102400, 1048576); 1048576 simulates\n"
          "one pipeline stage (--stages 1): the ranks of a stage share no tensor with\n"
          "another stage, so a stage planned as its own job is what those ranks compute,\n"
          "and whole-job figures are the stage's times the stage count (marked x16).\n"
          "--format 2 writes metadata format 2 (every chunk listed: the figures before\n"
          "issue 19); --no-layouts records no meshes.\n");
  exit(2);
}

/* Simulate k of the job's pipeline stages as a job of their own. */
static void simulate_stages(config *c, int k) {
  if (k < 1 || c->pp % k || c->layers % c->pp) usage();
  c->scale = c->pp / k;
  c->layers = c->layers / c->pp * k;
  c->pp = k;
}

static config parse(int argc, char **argv) {
  config c = {.tp = 8, .pp = 16, .dp = 80, .layers = 96, .hidden = 12288, .vocab = 50304,
              .new_tp = 4, .samples = 32, .scale = 1};
  int stages = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    long v = i + 1 < argc ? strtol(argv[i + 1], NULL, 10) : 0;
    if (!strcmp(a, "--quick")) {
      c = (config){.tp = 4, .pp = 2, .dp = 4, .layers = 8, .hidden = 1024, .vocab = 8192,
                   .new_tp = 2, .samples = 8, .scale = 1};
      continue;
    }
    if (!strcmp(a, "--no-layouts")) {
      c.no_layouts = 1;
      continue;
    }
    if (v <= 0) usage();
    if (!strcmp(a, "--tp")) c.tp = (int)v;
    else if (!strcmp(a, "--pp")) c.pp = (int)v;
    else if (!strcmp(a, "--dp")) c.dp = (int)v;
    else if (!strcmp(a, "--layers")) c.layers = (int)v;
    else if (!strcmp(a, "--hidden")) c.hidden = v;
    else if (!strcmp(a, "--new-tp")) c.new_tp = (int)v;
    else if (!strcmp(a, "--samples")) c.samples = (int)v;
    else if (!strcmp(a, "--format")) c.format_version = (int)v;
    else if (!strcmp(a, "--stages")) stages = (int)v;
    else if (!strcmp(a, "--ranks")) {
      if (v % 128) usage();
      c.tp = 8, c.pp = 16, c.dp = (int)(v / 128);
      if (v > 102400 && !stages) stages = 1;
    }
    else usage();
    i++;
  }
  if (c.layers < c.pp || (c.dp * c.tp) % c.new_tp) usage();
  c.job_pp = c.pp;
  if (stages) simulate_stages(&c, stages);
  return c;
}

int main(int argc, char **argv) {
  config c = parse(argc, argv);
  int32_t world = c.tp * c.pp * c.dp;
  printf("plansim: %d ranks = TP%d x PP%d x DP%d, %d layers, hidden %" PRId64
         ", bf16 weights + fp32 Adam (ZeRO-1 over DP)\n",
         world, c.tp, c.pp, c.dp, c.layers, c.hidden);
  if (c.scale > 1)
    printf("simulated:    %d of the job's %d pipeline stages (%d ranks of %lld); whole-job "
           "figures below are x%d\n",
           c.pp, c.job_pp, world, (long long)world * c.scale, c.scale);

  stage_layouts *layouts = malloc((size_t)c.pp * sizeof *layouts);
  for (int s = 0; s < c.pp; s++) layouts[s] = make_layouts(s, c.tp, c.dp);
  double t0 = now_s();
  dcpi_local_plan **plans = build_local_plans(&c, layouts, world);
  double t_local = now_s() - t0;
  size_t entries = 0;
  for (int32_t r = 0; r < world; r++) entries += dcpi_local_plan_chunk_count(plans[r]);
  double rss_before = peak_rss_mib(), heap_before = heap_mib();

  dcpi_global_plan *gp;
  dcpi_err err;
  t0 = now_s();
  dcp_status rc = dcpi_global_plan_build((const dcpi_local_plan *const *)plans, (size_t)world,
                                         NULL, &gp, &err);
  double t_global = now_s() - t0;
  if (rc) die("global_plan_build", rc, &err);
  double plan_held = heap_mib() - heap_before;
  double rss_after = peak_rss_mib();
  size_t items = dcpi_global_plan_item_count(gp);
  int64_t model = dcpi_global_plan_tensor_bytes(gp), held = 0, max_load = 0;
  for (int32_t r = 0; r < world; r++) {
    int64_t l = dcpi_global_plan_rank_load(gp, r);
    held += l;
    if (l > max_load) max_load = l;
  }
  /* A floor no assignment can beat: ranks that share items form connected
   * groups (union-find over holder lists); a group's bytes stay inside it,
   * so its busiest rank carries at least the group's mean, and at least the
   * bytes only that rank holds. */
  int32_t *parent = malloc((size_t)world * sizeof *parent);
  int64_t *forced = calloc((size_t)world, sizeof *forced);
  int64_t *group_bytes = calloc((size_t)world, sizeof *group_bytes);
  int64_t *group_size = calloc((size_t)world, sizeof *group_size);
  for (int32_t r = 0; r < world; r++) parent[r] = r;
  for (size_t i = 0; i < items; i++) {
    dcpi_gp_item it;
    dcpi_global_plan_item(gp, i, &it);
    if (it.nholders == 1) forced[it.owner] += it.nbytes;
    for (uint32_t h = 1; h < it.nholders; h++) {
      int32_t a = find_root(parent, it.holders[0]), b = find_root(parent, it.holders[h]);
      if (a != b) parent[b] = a;
    }
  }
  for (int32_t r = 0; r < world; r++) {
    int32_t g = find_root(parent, r);
    group_bytes[g] += dcpi_global_plan_rank_load(gp, r);
    group_size[g]++;
  }
  int64_t floor_load = 0;
  /* ... and an item cannot be split: its owner carries it on top of the
   * bytes it holds alone. */
  for (size_t i = 0; i < items; i++) {
    dcpi_gp_item it;
    dcpi_global_plan_item(gp, i, &it);
    int64_t least = INT64_MAX;
    for (uint32_t h = 0; h < it.nholders && it.nholders > 1; h++)
      if (forced[it.holders[h]] < least) least = forced[it.holders[h]];
    if (it.nholders > 1 && least + it.nbytes > floor_load) floor_load = least + it.nbytes;
  }
  for (int32_t r = 0; r < world; r++) {
    int64_t g = group_size[r] ? group_bytes[r] / group_size[r] : 0;
    if (g > floor_load) floor_load = g;
    if (forced[r] > floor_load) floor_load = forced[r];
  }
  free(parent), free(forced), free(group_bytes), free(group_size);
  printf("local plans:  %zu entries over %d ranks built in %.2f s\n", entries, world, t_local);
  printf("global plan:  %.3f s (target <= 2 s), %zu distinct chunks from %zu holdings,\n"
         "              peak RSS %.0f MiB (%.0f MiB before planning)\n",
         t_global, items, dcpi_global_plan_holding_count(gp), rss_after, rss_before);
  printf("dedup:        %.1f GiB written = model bytes %.1f GiB (x%.3f);\n"
         "              write load max/mean %.3f, max/floor %.3f (floor: group mean, unsplittable items)\n",
         (double)held / (1 << 30), (double)model / (1 << 30), (double)held / (double)model,
         (double)max_load / ((double)held / world), (double)max_load / (double)floor_load);
  for (int32_t r = 0; r < world; r++) dcpi_local_plan_free(plans[r]);
  free(plans);
  perrank_stats pr = time_per_rank(&c, layouts, gp, world);
  coord_stats cs = time_coordinator(&c, layouts, world, dcpi_global_plan_opts(gp));
  printf("per-rank:     layout path (the bf16 weights sharded, their Adam states flat): "
         "%.3f ms mean, %.3f ms max\n"
         "              per rank over %d ranks, %.1f writes each, %.3f MiB held at most; "
         "equal to the whole plan's share: %s\n"
         "coordinator:  layout path: %zu bytes of offers (%.1f per rank) checked and every "
         "tensor's pieces counted in %.3f s, %.1f MiB held;\n"
         "              the sampled ranks' %zu pieces each found from its offset at the commit, "
         "%.2f us each\n",
         pr.total_ms / c.samples, pr.max_ms, c.samples, (double)pr.writes / c.samples, pr.max_mib,
         pr.mismatched ? "NO" : "yes", cs.offer_bytes, (double)cs.offer_bytes / world, cs.s,
         cs.mib, cs.taken, cs.take_us);

  double heap_md = heap_mib(), t_built;
  dcpi_md *md = build_metadata(&c, gp, world, &t_built);
  double built_held = heap_mib() - heap_md;
  void *enc;
  size_t enc_len;
  t0 = now_s();
  if ((rc = dcpi_md_encode(md, &enc, &enc_len, &err))) die("md_encode", rc, &err);
  double t_enc = t_built + (now_s() - t0), md_held = heap_mib() - heap_md;
  dcpi_md_free(md);
  size_t meta_chunks = items + dcpi_global_plan_bytes_count(gp);
  printf("metadata:     %.1f MiB for %zu chunks = %.1f B/chunk (target <= 32), built and "
         "encoded in %.2f s\n"
         "              (build %.2f s, %.1f MiB held; encode %.2f s); xxh3 of the bytes "
         "%016" PRIx64 "\n",
         (double)enc_len / (1 << 20), meta_chunks, (double)enc_len / (double)meta_chunks, t_enc,
         t_built, built_held, t_enc - t_built, (uint64_t)XXH3_64bits(enc, enc_len));
  dcpi_global_plan_free(gp);
  free_layouts(layouts, c.pp);

  /* open as the load does: the buffer read from storage handed over (its
   * pages already written by the read); and with dcp_meta_open_memory's copy */
  dcp_meta *view;
  t0 = now_s();
  if ((rc = dcp_meta_open_memory(NULL, enc, enc_len, &view))) die("meta_open", rc, NULL);
  double t_open_copy = now_s() - t0;
  dcp_meta_free(view);
  uint8_t *own = malloc(enc_len);
  if (!own) die("malloc", DCP_ENOMEM, NULL);
  memcpy(own, enc, enc_len);
  t0 = now_s();
  if ((rc = dcpi_meta_open_owned(NULL, own, enc_len, &view))) die("meta_open", rc, NULL);
  double t_open = now_s() - t0;
  count_forms(view);
  dcp_meta_free(view);
  load_stats ls = time_load_plans(&c, enc, enc_len);
  printf("load plan:    TP%d -> TP%d (DP%d): %.2f ms mean, %.2f ms max per rank over %d ranks "
         "(target <= 20 ms),\n"
         "              of which planning %.2f ms, the rest fetching the refs it reads;\n"
         "              %.0f dest chunks, %.0f overlaps, %.2f GiB per rank; metadata open "
         "%.1f ms once (%.0f ms with dcp_meta_open_memory's copy)\n",
         c.tp, c.new_tp, c.dp * c.tp / c.new_tp, ls.total_ms / c.samples, ls.max_ms, c.samples,
         ls.plan_ms / c.samples, (double)ls.chunks / c.samples, (double)ls.overlaps / c.samples,
         (double)ls.bytes / c.samples / (1 << 30), t_open * 1e3, t_open_copy * 1e3);
  figures f = {.plan_s = t_global, .plan_mib = plan_held, .rank_s = pr.max_ms / 1e3,
               .rank_mib = pr.max_mib, .lcoord_s = cs.s, .lcoord_mib = cs.mib, .coord_s = t_enc,
               .coord_mib = md_held, .meta_mib = (double)enc_len / (1 << 20),
               .load_mean_ms = ls.total_ms / c.samples, .load_max_ms = ls.max_ms,
               .open_ms = t_open * 1e3};
  print_targets(&c, world, &f);
  free(enc);
  return 0;
}

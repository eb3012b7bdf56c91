/* test_save_plan.c — the global save plan on random multi-rank layouts
 * (dedup, holders, balance, determinism) and on small hand-made plans. The
 * validation errors are in test_save_plan_errors.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "core/ctx.h"
#include "model/state.h"
#include "planner/save_plan.h"

/* ---- a random job: DP x TP mesh, sharded / flat / replicated tensors ---- */

#define MAXND 3

typedef struct g_tensor {
  char name[40];
  dcp_dtype dtype;
  uint32_t ndim;
  int64_t shape[MAXND];
} g_tensor;

typedef struct g_chunk {
  int32_t rank;
  uint32_t tensor;
  uint32_t ndim;
  int64_t off[MAXND], sz[MAXND];
} g_chunk;

typedef struct g_bytes {
  int32_t rank;
  const char *key;
  dcp_scope scope;
  int64_t len;
} g_bytes;

typedef struct job {
  int32_t world, dp, tp;
  size_t ntensors, nchunks, nbytes;
  g_tensor *t;
  g_chunk *c;
  g_bytes *b;
  size_t ccap, bcap;
} job;

static void push_chunk(job *j, int32_t rank, uint32_t t, const int64_t *off, const int64_t *sz) {
  if (j->nchunks == j->ccap) {
    j->ccap = j->ccap ? 2 * j->ccap : 64;
    j->c = realloc(j->c, j->ccap * sizeof *j->c);
  }
  g_chunk *c = &j->c[j->nchunks++];
  c->rank = rank, c->tensor = t, c->ndim = j->t[t].ndim;
  memcpy(c->off, off, c->ndim * sizeof *off);
  memcpy(c->sz, sz, c->ndim * sizeof *sz);
}

static void push_bytes(job *j, int32_t rank, const char *key, dcp_scope s, int64_t len) {
  if (j->nbytes == j->bcap) {
    j->bcap = j->bcap ? 2 * j->bcap : 16;
    j->b = realloc(j->b, j->bcap * sizeof *j->b);
  }
  j->b[j->nbytes++] = (g_bytes){rank, key, s, len};
}

/* A layout over the DP x TP mesh: TP shards dim tdim (or nothing when
 * tdim < 0), DP shards dim ddim (or nothing). */
static dcp_layout *mesh_layout(const job *j, const int32_t *ranks, uint32_t ndim, int tdim,
                               int ddim) {
  int64_t mesh[2] = {j->dp, j->tp};
  uint32_t map[MAXND] = {0};
  if (tdim >= 0) map[tdim] |= 2u;
  if (ddim >= 0 && ddim != tdim) map[ddim] |= 1u;
  dcp_layout *l;
  assert_int_equal(dcp_layout_create(NULL, 2, mesh, ranks, ndim, map, &l), DCP_OK);
  return l;
}

/* Each TP shard (from the layout) split into DP flat ranges at random cuts
 * (equal cuts give empty ranges), like ZeRO optimizer states. */
static void add_flat(job *j, tu_rng *r, uint32_t t, const dcp_layout *l, const int32_t *ranks,
                     bool replicated) {
  const g_tensor *gt = &j->t[t];
  int64_t cuts[65];
  for (int32_t tp = 0; tp < j->tp; tp++) {
    dcp_box reg;
    assert_int_equal(dcp_layout_box(l, gt->shape, ranks[tp], &reg), DCP_OK);
    int64_t n;
    assert_int_equal(dcp_box_numel(&reg, &n), DCP_OK);
    /* replicas of one region (no TP split) must share their cuts */
    if (tp == 0 || !replicated) {
      cuts[0] = 0;
      cuts[j->dp] = n;
      for (int32_t d = 1; d < j->dp; d++) cuts[d] = tu_rng_range(r, 0, n);
    }
    for (int32_t a = 1; a < j->dp; a++) /* sort the inner cuts */
      for (int32_t b = a; b > 1 && cuts[b - 1] > cuts[b]; b--) {
        int64_t x = cuts[b];
        cuts[b] = cuts[b - 1], cuts[b - 1] = x;
      }
    for (int32_t d = 0; d < j->dp; d++) {
      dcp_box out[2 * MAXND];
      size_t cnt;
      assert_int_equal(dcp_flat_to_boxes(&reg, cuts[d], cuts[d + 1] - cuts[d], out, 2 * MAXND, &cnt),
                       DCP_OK);
      for (size_t k = 0; k < cnt; k++)
        push_chunk(j, ranks[d * j->tp + tp], t, out[k].offset, out[k].size);
    }
  }
}

static void add_layout_chunks(job *j, uint32_t t, const dcp_layout *l) {
  for (int32_t rank = 0; rank < j->world; rank++) {
    dcp_box b;
    assert_int_equal(dcp_layout_box(l, j->t[t].shape, rank, &b), DCP_OK);
    push_chunk(j, rank, t, b.offset, b.size);
  }
}

static void random_job(tu_rng *r, job *j, int32_t dp, int32_t tp, size_t ntensors) {
  memset(j, 0, sizeof *j);
  j->dp = dp, j->tp = tp, j->world = dp * tp;
  int32_t *ranks = malloc((size_t)j->world * sizeof *ranks);
  for (int32_t i = 0; i < j->world; i++) ranks[i] = i;
  for (int32_t i = j->world; i > 1 && tu_rng_range(r, 0, 1); i--) { /* sometimes permuted */
    int32_t k = (int32_t)tu_rng_range(r, 0, i - 1), x = ranks[i - 1];
    ranks[i - 1] = ranks[k], ranks[k] = x;
  }
  j->ntensors = ntensors;
  j->t = calloc(ntensors, sizeof *j->t);
  for (size_t i = 0; i < ntensors; i++) {
    g_tensor *gt = &j->t[i];
    snprintf(gt->name, sizeof gt->name, "m.%c%zu.w", (char)('a' + tu_rng_range(r, 0, 3)), i);
    gt->dtype = (dcp_dtype)tu_rng_range(r, DCP_BOOL, DCP_C64);
    gt->ndim = (uint32_t)tu_rng_range(r, 0, MAXND);
    for (uint32_t d = 0; d < gt->ndim; d++) gt->shape[d] = tu_rng_range(r, 1, 12);
    int tdim = gt->ndim ? (int)tu_rng_range(r, -1, (int64_t)gt->ndim - 1) : -1;
    int kind = (int)tu_rng_range(r, 0, 2);
    if (kind == 0) { /* layout-sharded, maybe over DP as well */
      int ddim = gt->ndim ? (int)tu_rng_range(r, -1, (int64_t)gt->ndim - 1) : -1;
      dcp_layout *l = mesh_layout(j, ranks, gt->ndim, tdim, ddim);
      add_layout_chunks(j, (uint32_t)i, l);
      dcp_layout_free(l);
    } else if (kind == 1) { /* flat over DP of each TP shard */
      dcp_layout *l = mesh_layout(j, ranks, gt->ndim, tdim, -1);
      add_flat(j, r, (uint32_t)i, l, ranks, tdim < 0);
      dcp_layout_free(l);
    } else { /* whole tensor on a random non-empty subset of ranks */
      int64_t zero[MAXND] = {0};
      int any = 0;
      for (int32_t rank = 0; rank < j->world; rank++)
        if (tu_rng_range(r, 0, 1) || (!any && rank == j->world - 1)) {
          push_chunk(j, rank, (uint32_t)i, zero, gt->shape);
          any = 1;
        }
    }
  }
  for (int32_t rank = 0; rank < j->world; rank++) {
    push_bytes(j, rank, "step", DCP_SCOPE_REPLICATED, 8);
    push_bytes(j, rank, "rng", DCP_SCOPE_PER_RANK, 100 + rank);
    if (rank % 3 == 1 || j->world == 1) push_bytes(j, rank, "loader", DCP_SCOPE_REPLICATED, 40);
  }
  free(ranks);
}

static void free_job(job *j) {
  free(j->t), free(j->c), free(j->b);
}

/* Plans of every rank, each filled in an order shuffled by seed. */
static dcpi_local_plan **build_plans(const job *j, const dcpi_save_opts *o, uint64_t seed) {
  tu_rng r;
  tu_rng_seed(&r, seed);
  dcpi_local_plan **p = calloc((size_t)j->world, sizeof *p);
  uint32_t *idx = malloc(j->ntensors * sizeof *idx);
  size_t *ord = malloc((j->nchunks + j->nbytes + j->ntensors + 1) * sizeof *ord);
  dcpi_err err;
  for (int32_t rank = 0; rank < j->world; rank++) {
    assert_int_equal(dcpi_local_plan_create(rank, j->world, o, &p[rank], &err), DCP_OK);
    /* tensors the rank has a chunk of, in shuffled order */
    size_t n = 0;
    for (size_t t = 0; t < j->ntensors; t++) {
      idx[t] = UINT32_MAX;
      for (size_t c = 0; c < j->nchunks; c++)
        if (j->c[c].rank == rank && j->c[c].tensor == t) {
          ord[n++] = t;
          break;
        }
    }
    for (size_t i = n; i > 1; i--) {
      size_t k = (size_t)tu_rng_range(&r, 0, (int64_t)i - 1), x = ord[i - 1];
      ord[i - 1] = ord[k], ord[k] = x;
    }
    for (size_t i = 0; i < n; i++) {
      const g_tensor *gt = &j->t[ord[i]];
      assert_int_equal(dcpi_local_plan_add_tensor(p[rank], gt->name, gt->dtype, gt->ndim, gt->shape,
                                                  &idx[ord[i]], &err),
                       DCP_OK);
    }
    n = 0; /* chunks and bytes items, interleaved and shuffled */
    for (size_t c = 0; c < j->nchunks; c++)
      if (j->c[c].rank == rank) ord[n++] = c;
    for (size_t b = 0; b < j->nbytes; b++)
      if (j->b[b].rank == rank) ord[n++] = j->nchunks + b;
    for (size_t i = n; i > 1; i--) {
      size_t k = (size_t)tu_rng_range(&r, 0, (int64_t)i - 1), x = ord[i - 1];
      ord[i - 1] = ord[k], ord[k] = x;
    }
    for (size_t i = 0; i < n; i++) {
      if (ord[i] < j->nchunks) {
        const g_chunk *c = &j->c[ord[i]];
        assert_int_equal(dcpi_local_plan_add_chunk(p[rank], idx[c->tensor], c->off, c->sz, &err), DCP_OK);
      } else {
        const g_bytes *b = &j->b[ord[i] - j->nchunks];
        assert_int_equal(dcpi_local_plan_add_bytes(p[rank], b->key, b->scope, b->len, &err), DCP_OK);
      }
    }
    assert_int_equal(dcpi_local_plan_finish(p[rank], &err), DCP_OK);
  }
  free(idx), free(ord);
  return p;
}

static void free_plans(dcpi_local_plan **p, int32_t n) {
  for (int32_t i = 0; i < n; i++) dcpi_local_plan_free(p[i]);
  free(p);
}

static dcpi_global_plan *build_global(dcpi_local_plan **p, int32_t n, const dcpi_save_opts *o) {
  dcpi_global_plan *gp;
  dcpi_err err;
  dcpi_err_clear(&err);
  dcp_status rc = dcpi_global_plan_build((const dcpi_local_plan *const *)p, (size_t)n, o, &gp, &err);
  if (rc) fail_msg("global plan: %s (%d)", err.msg, rc);
  return gp;
}

/* ---- reference: distinct (fqn, box) with holders, by brute force ------- */

static const job *g_job; /* for the qsort comparator */

static int cmp_ref(const void *pa, const void *pb) {
  const g_chunk *a = pa, *b = pb;
  int c = strcmp(g_job->t[a->tensor].name, g_job->t[b->tensor].name);
  if (c) return c;
  for (uint32_t d = 0; d < a->ndim; d++)
    if (a->off[d] != b->off[d]) return a->off[d] < b->off[d] ? -1 : 1;
  for (uint32_t d = 0; d < a->ndim; d++)
    if (a->sz[d] != b->sz[d]) return a->sz[d] < b->sz[d] ? -1 : 1;
  return a->rank < b->rank ? -1 : a->rank > b->rank;
}

static int empty_chunk(const g_chunk *c) {
  for (uint32_t d = 0; d < c->ndim; d++)
    if (!c->sz[d]) return 1;
  return 0;
}

static int same_box(const g_chunk *a, const g_chunk *b) {
  return a->tensor == b->tensor && !memcmp(a->off, b->off, a->ndim * sizeof *a->off) &&
         !memcmp(a->sz, b->sz, a->ndim * sizeof *a->sz);
}

/* Every distinct non-empty (fqn, box) is exactly one item, in canonical
 * order, with exactly its holders (ascending) and an owner among them;
 * holder_chunks point at that box in each holder's plan. */
static void check_items(const job *j, dcpi_local_plan **p, const dcpi_global_plan *gp) {
  g_chunk *ref = malloc((j->nchunks + 1) * sizeof *ref);
  size_t n = 0;
  for (size_t c = 0; c < j->nchunks; c++)
    if (!empty_chunk(&j->c[c])) ref[n++] = j->c[c];
  g_job = j;
  qsort(ref, n, sizeof *ref, cmp_ref);
  size_t item = 0, holdings = 0;
  for (size_t i = 0; i < n;) {
    size_t k = i;
    while (k < n && same_box(&ref[i], &ref[k])) k++;
    dcpi_gp_item it;
    assert_int_equal(dcpi_global_plan_item(gp, item, &it), DCP_OK);
    dcpi_gp_tensor t;
    assert_int_equal(dcpi_global_plan_tensor(gp, it.tensor, &t), DCP_OK);
    assert_string_equal(t.fqn, j->t[ref[i].tensor].name);
    assert_int_equal(it.ndim, ref[i].ndim);
    assert_memory_equal(it.offset, ref[i].off, it.ndim * sizeof *it.offset);
    assert_memory_equal(it.size, ref[i].sz, it.ndim * sizeof *it.size);
    assert_int_equal(it.nholders, k - i);
    int owner_ok = 0;
    for (size_t h = 0; h < k - i; h++) {
      assert_int_equal(it.holders[h], ref[i + h].rank);
      owner_ok |= it.owner == it.holders[h];
      dcpi_lp_chunk_view cv;
      assert_int_equal(dcpi_local_plan_chunk(p[it.holders[h]], it.holder_chunks[h], &cv), DCP_OK);
      assert_memory_equal(cv.offset, it.offset, it.ndim * sizeof *it.offset);
      assert_memory_equal(cv.size, it.size, it.ndim * sizeof *it.size);
    }
    assert_true(owner_ok);
    int64_t numel = 1;
    for (uint32_t d = 0; d < it.ndim; d++) numel *= it.size[d];
    assert_int_equal(it.nbytes, numel * (int64_t)dcp_dtype_size(t.dtype));
    holdings += k - i;
    item++;
    i = k;
  }
  assert_int_equal(dcpi_global_plan_item_count(gp), item);
  assert_int_equal(dcpi_global_plan_holding_count(gp), holdings);
  free(ref);
}

/* Tensor table: every fqn once, sorted, with its dtype/shape; the items'
 * bytes add up to the model bytes. */
static void check_tensors(const job *j, const dcpi_global_plan *gp) {
  size_t nt = dcpi_global_plan_tensor_count(gp);
  int64_t model = 0, items = 0;
  for (size_t i = 0; i < nt; i++) {
    dcpi_gp_tensor t;
    assert_int_equal(dcpi_global_plan_tensor(gp, i, &t), DCP_OK);
    if (i) {
      dcpi_gp_tensor prev;
      dcpi_global_plan_tensor(gp, i - 1, &prev);
      assert_true(strcmp(prev.fqn, t.fqn) < 0);
    }
    size_t k = 0;
    while (k < j->ntensors && strcmp(j->t[k].name, t.fqn)) k++;
    assert_true(k < j->ntensors);
    assert_int_equal(t.dtype, j->t[k].dtype);
    assert_int_equal(t.ndim, j->t[k].ndim);
    assert_memory_equal(t.shape, j->t[k].shape, t.ndim * sizeof *t.shape);
    model += t.nbytes;
    for (size_t it = t.first_item; it < t.first_item + t.nitems; it++) {
      dcpi_gp_item x;
      dcpi_global_plan_item(gp, it, &x);
      assert_int_equal(x.tensor, i);
      items += x.nbytes;
    }
  }
  assert_int_equal(nt, j->ntensors);
  assert_int_equal(model, items);
  assert_int_equal(dcpi_global_plan_tensor_bytes(gp), model);
}

/* Bytes: step and loader replicated (one item each, holders exact), rng
 * once per rank owned by that rank. */
static void check_bytes(const job *j, const dcpi_global_plan *gp) {
  size_t n = dcpi_global_plan_bytes_count(gp);
  assert_int_equal(n, 2 + (size_t)j->world);
  dcpi_gp_bytes b;
  assert_int_equal(dcpi_global_plan_bytes(gp, 0, &b), DCP_OK); /* "loader" < "rng" < "step" */
  assert_string_equal(b.key, "loader");
  assert_int_equal(b.rank, -1);
  assert_int_equal(b.length, 40);
  uint32_t nl = 0;
  for (int32_t r = 0; r < j->world; r++)
    if (r % 3 == 1 || j->world == 1) assert_int_equal(b.holders[nl++], r);
  assert_int_equal(b.nholders, nl);
  for (int32_t r = 0; r < j->world; r++) {
    assert_int_equal(dcpi_global_plan_bytes(gp, 1 + (size_t)r, &b), DCP_OK);
    assert_string_equal(b.key, "rng");
    assert_int_equal(b.scope, DCP_SCOPE_PER_RANK);
    assert_int_equal(b.rank, r);
    assert_int_equal(b.owner, r);
    assert_int_equal(b.length, 100 + r);
  }
  assert_int_equal(dcpi_global_plan_bytes(gp, n - 1, &b), DCP_OK);
  assert_string_equal(b.key, "step");
  assert_int_equal(b.nholders, (uint32_t)j->world);
  assert_int_equal(dcpi_global_plan_bytes(gp, n, &b), DCP_ENOTFOUND);
}

/* Per-rank lists partition the items by owner (ascending) and the loads
 * are the sums of what each rank writes. */
static void check_rank_lists(const dcpi_global_plan *gp) {
  int32_t w = dcpi_global_plan_world_size(gp);
  size_t seen = 0, bseen = 0;
  for (int32_t r = 0; r < w; r++) {
    const uint32_t *items, *bytes;
    size_t n = dcpi_global_plan_rank_items(gp, r, &items);
    size_t nb = dcpi_global_plan_rank_bytes(gp, r, &bytes);
    int64_t load = 0;
    for (size_t k = 0; k < n; k++) {
      dcpi_gp_item it;
      assert_int_equal(dcpi_global_plan_item(gp, items[k], &it), DCP_OK);
      assert_int_equal(it.owner, r);
      if (k) assert_true(items[k] > items[k - 1]);
      load += it.nbytes;
    }
    for (size_t k = 0; k < nb; k++) {
      dcpi_gp_bytes b;
      assert_int_equal(dcpi_global_plan_bytes(gp, bytes[k], &b), DCP_OK);
      assert_int_equal(b.owner, r);
      load += b.length;
    }
    assert_int_equal(load, dcpi_global_plan_rank_load(gp, r));
    seen += n, bseen += nb;
  }
  assert_int_equal(seen, dcpi_global_plan_item_count(gp));
  assert_int_equal(bseen, dcpi_global_plan_bytes_count(gp));
  assert_int_equal(dcpi_global_plan_rank_items(gp, w, NULL), 0);
  assert_int_equal(dcpi_global_plan_rank_load(gp, -1), 0);
}

/* A multi-holder item (tensor or bytes) in balance processing order. */
typedef struct bal_ref {
  uint32_t nholders;
  int64_t bytes;
  uint64_t key;
  int32_t owner;
  const int32_t *holders;
} bal_ref;

static int cmp_bal(const void *pa, const void *pb) {
  const bal_ref *a = pa, *b = pb;
  if (a->nholders != b->nholders) return a->nholders < b->nholders ? -1 : 1;
  if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
  return a->key < b->key ? -1 : a->key > b->key;
}

/* LEAST_LOADED: for every rank r and the last multi-holder item x it got,
 * load(r) <= load(h) + bytes(x) for every holder h of x. LOWEST_RANK: every
 * item goes to its lowest holder. */
static void check_balance(const dcpi_global_plan *gp) {
  size_t ni = dcpi_global_plan_item_count(gp), nb = dcpi_global_plan_bytes_count(gp), m = 0;
  bal_ref *refs = malloc((ni + nb + 1) * sizeof *refs);
  bool lowest = dcpi_global_plan_opts(gp)->policy == DCPI_BALANCE_LOWEST_RANK;
  for (size_t i = 0; i < ni + nb; i++) {
    bal_ref x;
    if (i < ni) {
      dcpi_gp_item it;
      dcpi_global_plan_item(gp, i, &it);
      x = (bal_ref){it.nholders, it.nbytes, i, it.owner, it.holders};
    } else {
      dcpi_gp_bytes b;
      dcpi_global_plan_bytes(gp, i - ni, &b);
      x = (bal_ref){b.nholders, b.length, i, b.owner, b.holders};
    }
    if (lowest) assert_int_equal(x.owner, x.holders[0]);
    if (x.nholders > 1) refs[m++] = x;
  }
  qsort(refs, m, sizeof *refs, cmp_bal);
  int32_t w = dcpi_global_plan_world_size(gp);
  for (int32_t r = 0; r < w && !lowest; r++) {
    const bal_ref *last = NULL;
    for (size_t k = 0; k < m; k++)
      if (refs[k].owner == r) last = &refs[k];
    if (!last) continue;
    for (uint32_t h = 0; h < last->nholders; h++)
      assert_true(dcpi_global_plan_rank_load(gp, r) <=
                  dcpi_global_plan_rank_load(gp, last->holders[h]) + last->bytes);
  }
  free(refs);
}

/* Two plans are identical in every observable. */
static void check_same(const dcpi_global_plan *a, const dcpi_global_plan *b) {
  assert_int_equal(dcpi_global_plan_item_count(a), dcpi_global_plan_item_count(b));
  assert_int_equal(dcpi_global_plan_bytes_count(a), dcpi_global_plan_bytes_count(b));
  assert_int_equal(dcpi_global_plan_tensor_count(a), dcpi_global_plan_tensor_count(b));
  for (size_t i = 0; i < dcpi_global_plan_item_count(a); i++) {
    dcpi_gp_item x, y;
    dcpi_global_plan_item(a, i, &x);
    dcpi_global_plan_item(b, i, &y);
    assert_int_equal(x.tensor, y.tensor);
    assert_int_equal(x.owner, y.owner);
    assert_int_equal(x.nholders, y.nholders);
    assert_memory_equal(x.offset, y.offset, x.ndim * sizeof *x.offset);
    assert_memory_equal(x.size, y.size, x.ndim * sizeof *x.size);
    assert_memory_equal(x.holders, y.holders, x.nholders * sizeof *x.holders);
    assert_memory_equal(x.holder_chunks, y.holder_chunks, x.nholders * sizeof *x.holder_chunks);
  }
  for (size_t i = 0; i < dcpi_global_plan_bytes_count(a); i++) {
    dcpi_gp_bytes x, y;
    dcpi_global_plan_bytes(a, i, &x);
    dcpi_global_plan_bytes(b, i, &y);
    assert_string_equal(x.key, y.key);
    assert_int_equal(x.owner, y.owner);
    assert_int_equal(x.rank, y.rank);
    assert_int_equal(x.length, y.length);
    assert_memory_equal(x.holder_items, y.holder_items, x.nholders * sizeof *x.holder_items);
  }
  for (int32_t r = 0; r < dcpi_global_plan_world_size(a); r++)
    assert_int_equal(dcpi_global_plan_rank_load(a, r), dcpi_global_plan_rank_load(b, r));
}

static void run_job(const job *j, uint64_t seed, dcpi_balance_policy policy) {
  dcpi_save_opts o;
  dcpi_save_opts_init(&o);
  o.policy = policy;
  dcpi_local_plan **p1 = build_plans(j, &o, seed), **p2 = build_plans(j, &o, seed ^ 0xABCDEF);
  dcpi_global_plan *g1 = build_global(p1, j->world, &o), *g2 = build_global(p2, j->world, NULL);
  check_items(j, p1, g1);
  check_tensors(j, g1);
  check_bytes(j, g1);
  check_rank_lists(g1);
  check_balance(g1);
  check_same(g1, g2); /* insertion order does not matter */
  for (int32_t r = 0; r < j->world; r++) { /* nor for the keys */
    dcpi_plan_key k1, k2;
    assert_int_equal(dcpi_plan_hash(p1[r], &k1, NULL), DCP_OK);
    assert_int_equal(dcpi_plan_hash(p2[r], &k2, NULL), DCP_OK);
    assert_true(dcpi_plan_key_equal(k1, k2));
  }
  dcpi_global_plan_free(g1);
  dcpi_global_plan_free(g2);
  free_plans(p1, j->world);
  free_plans(p2, j->world);
}

static void test_random_jobs(void **state) {
  (void)state;
  tu_rng r;
  tu_rng_seed(&r, tu_seed(31));
  for (int round = 0; round < 60; round++) {
    job j;
    random_job(&r, &j, (int32_t)tu_rng_range(&r, 1, 5), (int32_t)tu_rng_range(&r, 1, 4),
               (size_t)tu_rng_range(&r, 1, 8));
    run_job(&j, (uint64_t)round + 1, round % 4 == 3 ? DCPI_BALANCE_LOWEST_RANK
                                                    : DCPI_BALANCE_LEAST_LOADED);
    free_job(&j);
  }
}

/* 512 ranks, thousands of boxes: exercises the sort and the sweep. */
static void test_large_job(void **state) {
  (void)state;
  tu_rng r;
  tu_rng_seed(&r, tu_seed(32));
  job j;
  random_job(&r, &j, 64, 8, 12);
  run_job(&j, 99, DCPI_BALANCE_LEAST_LOADED);
  free_job(&j);
}

/* ---- small fixed cases -------------------------------------------------- */

/* plans[r] holds boxes (off, sz) of one 1-d tensor "w" of extent ext. */
static dcpi_local_plan *plan_1d(int32_t rank, int32_t world, int64_t ext, size_t n,
                                const int64_t *off, const int64_t *sz) {
  dcpi_local_plan *lp;
  uint32_t t;
  assert_int_equal(dcpi_local_plan_create(rank, world, NULL, &lp, NULL), DCP_OK);
  assert_int_equal(dcpi_local_plan_add_tensor(lp, "w", DCP_F32, 1, &ext, &t, NULL), DCP_OK);
  for (size_t i = 0; i < n; i++)
    assert_int_equal(dcpi_local_plan_add_chunk(lp, t, &off[i], &sz[i], NULL), DCP_OK);
  assert_int_equal(dcpi_local_plan_finish(lp, NULL), DCP_OK);
  return lp;
}

static void test_scalar_and_empty_tensor(void **state) {
  (void)state;
  dcpi_local_plan *p[3];
  for (int32_t r = 0; r < 3; r++) {
    int64_t zero_shape[2] = {0, 5};
    uint32_t s, e;
    assert_int_equal(dcpi_local_plan_create(r, 3, NULL, &p[r], NULL), DCP_OK);
    assert_int_equal(dcpi_local_plan_add_tensor(p[r], "scalar", DCP_I64, 0, NULL, &s, NULL), DCP_OK);
    assert_int_equal(dcpi_local_plan_add_chunk(p[r], s, NULL, NULL, NULL), DCP_OK);
    assert_int_equal(dcpi_local_plan_add_tensor(p[r], "empty", DCP_U8, 2, zero_shape, &e, NULL), DCP_OK);
    int64_t off[2] = {0, 0}, sz[2] = {0, 5};
    if (r == 1) assert_int_equal(dcpi_local_plan_add_chunk(p[r], e, off, sz, NULL), DCP_OK);
    assert_int_equal(dcpi_local_plan_finish(p[r], NULL), DCP_OK);
  }
  dcpi_global_plan *gp = build_global(p, 3, NULL);
  assert_int_equal(dcpi_global_plan_tensor_count(gp), 2);
  assert_int_equal(dcpi_global_plan_item_count(gp), 1);
  dcpi_gp_item it;
  assert_int_equal(dcpi_global_plan_item(gp, 0, &it), DCP_OK);
  assert_int_equal(it.ndim, 0);
  assert_int_equal(it.nbytes, 8);
  assert_int_equal(it.nholders, 3);
  assert_int_equal(it.owner, 0);
  assert_int_equal(dcpi_global_plan_tensor_bytes(gp), 8);
  dcpi_global_plan_free(gp);
  for (int32_t r = 0; r < 3; r++) dcpi_local_plan_free(p[r]);
}

/* Empty boxes are legal anywhere inside the shape and never written. */
static void test_empty_boxes_legal(void **state) {
  (void)state;
  int64_t o0[] = {0, 4}, s0[] = {4, 0}, o1[] = {0, 2}, s1[] = {0, 0};
  dcpi_local_plan *p[2] = {plan_1d(0, 2, 4, 2, o0, s0), plan_1d(1, 2, 4, 2, o1, s1)};
  dcpi_global_plan *gp = build_global(p, 2, NULL);
  assert_int_equal(dcpi_global_plan_item_count(gp), 1);
  assert_int_equal(dcpi_global_plan_rank_load(gp, 0), 16);
  assert_int_equal(dcpi_global_plan_rank_load(gp, 1), 0);
  dcpi_global_plan_free(gp);
  dcpi_local_plan_free(p[0]);
  dcpi_local_plan_free(p[1]);
}

/* world ranks each hold the whole [rows, cols] f32 tensor "emb" (a
 * replicated embedding) and, when `own` is set, their own row of "mine"
 * ([world, cols]), planned with block size bs under policy pol. */
static dcpi_global_plan *replicated_job(int32_t world, int64_t rows, int64_t cols, int own,
                                        uint32_t bs, dcpi_balance_policy pol) {
  dcpi_local_plan *p[8];
  dcpi_save_opts o;
  dcpi_save_opts_init(&o);
  o.block_size = bs, o.policy = pol;
  for (int32_t r = 0; r < world; r++) {
    uint32_t t;
    int64_t shape[2] = {rows, cols}, zero[2] = {0, 0};
    int64_t mshape[2] = {world, cols}, moff[2] = {r, 0}, msz[2] = {1, cols};
    assert_int_equal(dcpi_local_plan_create(r, world, &o, &p[r], NULL), DCP_OK);
    assert_int_equal(dcpi_local_plan_add_tensor(p[r], "emb", DCP_F32, 2, shape, &t, NULL), DCP_OK);
    assert_int_equal(dcpi_local_plan_add_chunk(p[r], t, zero, shape, NULL), DCP_OK);
    if (own) {
      assert_int_equal(dcpi_local_plan_add_tensor(p[r], "mine", DCP_F32, 2, mshape, &t, NULL),
                       DCP_OK);
      assert_int_equal(dcpi_local_plan_add_chunk(p[r], t, moff, msz, NULL), DCP_OK);
    }
    assert_int_equal(dcpi_local_plan_finish(p[r], NULL), DCP_OK);
  }
  dcpi_global_plan *gp = build_global(p, world, &o);
  for (int32_t r = 0; r < world; r++) dcpi_local_plan_free(p[r]);
  return gp;
}

/* A large replicated box is cut along its rows into one piece per holder,
 * each written by another rank: the load is the mean, not the box. The
 * pieces tile the box, and each knows where its bytes lie in the chunk. */
static void test_split_replicated(void **state) {
  (void)state;
  const int64_t rows = 64, cols = 1024, row_bytes = cols * 4;
  dcpi_global_plan *gp = replicated_job(4, rows, cols, 0, 4096, DCPI_BALANCE_LEAST_LOADED);
  assert_int_equal(dcpi_global_plan_item_count(gp), 4);
  int owned[4] = {0};
  for (size_t i = 0; i < 4; i++) {
    dcpi_gp_item it;
    assert_int_equal(dcpi_global_plan_item(gp, i, &it), DCP_OK);
    assert_true(it.piece);
    assert_int_equal(it.offset[0], (int64_t)i * 16);
    assert_int_equal(it.size[0], 16);
    assert_int_equal(it.size[1], cols);
    assert_int_equal(it.piece_offset, (uint64_t)(i * 16 * row_bytes));
    assert_int_equal(it.nbytes, 16 * row_bytes);
    assert_int_equal(it.nholders, 4);
    assert_int_equal(it.holder_chunks[0], 0); /* the same chunk of every holder */
    owned[it.owner]++;
  }
  for (int32_t r = 0; r < 4; r++) {
    assert_int_equal(owned[r], 1);
    assert_int_equal(dcpi_global_plan_rank_load(gp, r), rows * row_bytes / 4);
  }
  assert_int_equal(dcpi_global_plan_tensor_bytes(gp), rows * row_bytes);
  dcpi_global_plan_free(gp);

  /* uneven: 3 holders, 10 rows of 64 KiB, block 16 KiB -> pieces of 4, 4, 2 */
  gp = replicated_job(3, 10, 16384, 0, 16384, DCPI_BALANCE_LEAST_LOADED);
  assert_int_equal(dcpi_global_plan_item_count(gp), 3);
  int64_t want[3] = {4, 4, 2}, at = 0;
  for (size_t i = 0; i < 3; i++) {
    dcpi_gp_item it;
    dcpi_global_plan_item(gp, i, &it);
    assert_int_equal(it.offset[0], at);
    assert_int_equal(it.size[0], want[i]);
    at += want[i];
  }
  dcpi_global_plan_free(gp);
}

/* What is not split: boxes below 2 x DCPI_SPLIT_MIN_BLOCKS blocks, a box of
 * one holder, and every box under the LOWEST_RANK policy. */
static void test_split_limits(void **state) {
  (void)state;
  /* 64 KiB replicated, block 16 KiB: 4 blocks = one piece's minimum, so 1 */
  dcpi_global_plan *gp = replicated_job(4, 16, 1024, 1, 16384, DCPI_BALANCE_LEAST_LOADED);
  for (size_t i = 0; i < dcpi_global_plan_item_count(gp); i++) {
    dcpi_gp_item it;
    dcpi_global_plan_item(gp, i, &it);
    assert_false(it.piece);
    assert_int_equal(it.piece_offset, 0);
  }
  assert_int_equal(dcpi_global_plan_item_count(gp), 1 + 4); /* emb whole, 4 rows of mine */
  dcpi_global_plan_free(gp);
  /* 2 pieces at 8 blocks */
  gp = replicated_job(4, 32, 1024, 1, 16384, DCPI_BALANCE_LEAST_LOADED);
  assert_int_equal(dcpi_global_plan_item_count(gp), 2 + 4);
  dcpi_global_plan_free(gp);
  gp = replicated_job(4, 64, 1024, 1, 4096, DCPI_BALANCE_LOWEST_RANK);
  assert_int_equal(dcpi_global_plan_item_count(gp), 1 + 4);
  assert_int_equal(dcpi_global_plan_rank_load(gp, 0), 64 * 4096 + 4096);
  dcpi_global_plan_free(gp);
}

static void test_from_state(void **state) {
  (void)state;
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.rank = 1, cfg.world_size = 2;
  dcp_ctx *ctx;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_OK);
  dcp_state *st;
  assert_int_equal(dcp_state_create(ctx, &st), DCP_OK);
  float buf[64] = {0};
  int64_t shape[2] = {4, 8}, off[2] = {2, 0}, sz[2] = {2, 8};
  assert_int_equal(dcp_state_add_tensor(st, "z.w", DCP_F32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "a.w", DCP_F32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "z.w", off, sz, buf), DCP_OK);
  assert_int_equal(dcp_state_add_flat(st, "a.w", NULL, 5, 20, buf), DCP_OK); /* 3 chunks */
  assert_int_equal(dcp_state_add_bytes(st, "step", DCP_SCOPE_REPLICATED, buf, 8), DCP_OK);
  dcpi_local_plan *lp;
  dcpi_err err;
  assert_int_equal(dcpi_local_plan_from_state(st, NULL, &lp, &err), DCP_OK);
  assert_int_equal(dcpi_local_plan_rank(lp), 1);
  assert_int_equal(dcpi_local_plan_world_size(lp), 2);
  assert_int_equal(dcpi_local_plan_tensor_count(lp), 2);
  assert_int_equal(dcpi_local_plan_chunk_count(lp), 4);
  assert_int_equal(dcpi_local_plan_bytes_count(lp), 1);
  dcpi_lp_tensor_view tv;
  assert_int_equal(dcpi_local_plan_tensor(lp, 0, &tv), DCP_OK);
  assert_string_equal(tv.fqn, "a.w"); /* canonical: sorted by fqn */
  assert_int_equal(tv.nchunks, 3);
  for (size_t c = 0; c < 4; c++) { /* sources map back to st->chunks */
    dcpi_lp_chunk_view cv;
    assert_int_equal(dcpi_local_plan_chunk(lp, c, &cv), DCP_OK);
    const dcpi_chunk_item *sc = &st->chunks[cv.source];
    assert_memory_equal(sc->box.offset, cv.offset, 2 * sizeof *cv.offset);
    assert_memory_equal(sc->box.size, cv.size, 2 * sizeof *cv.size);
    assert_string_equal(st->tensors[sc->tensor].fqn, c < 3 ? "a.w" : "z.w");
    if (c) { /* ascending offsets within a tensor */
      dcpi_lp_chunk_view prev;
      dcpi_local_plan_chunk(lp, c - 1, &prev);
      if (prev.tensor == cv.tensor) assert_true(prev.offset[0] < cv.offset[0] ||
                                                (prev.offset[0] == cv.offset[0] && prev.offset[1] < cv.offset[1]));
    }
  }
  assert_int_equal(dcpi_local_plan_chunk(lp, 4, &(dcpi_lp_chunk_view){0}), DCP_ENOTFOUND);
  dcpi_local_plan_free(lp);
  dcp_state_free(st);
  dcp_ctx_free(ctx);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_jobs),
      cmocka_unit_test(test_large_job),
      cmocka_unit_test(test_scalar_and_empty_tensor),
      cmocka_unit_test(test_empty_boxes_legal),
      cmocka_unit_test(test_split_replicated),
      cmocka_unit_test(test_split_limits),
      cmocka_unit_test(test_from_state),
  };
  return TU_RUN(tests, NULL, NULL);
}

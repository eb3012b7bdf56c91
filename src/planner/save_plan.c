/* save_plan.c — building the global save plan from every rank's local plan:
 * validate, deduplicate by (fqn, box), check overlap and coverage, balance
 * the writes. See docs/planner.md, "Save planning", for the algorithm.
 *
 * The hot path is linear apart from small radix sorts: the non-empty local
 * boxes are bucketed by canonical tensor (a counting sort, rank order kept),
 * and each bucket is radix-sorted by a 64-bit key, the row-major index of
 * the box's offset in the tensor. That orders boxes exactly by offset —
 * offsets of in-bounds non-empty boxes are points of the tensor, and
 * row-major index order is lexicographic order. Two non-empty boxes with the
 * same offset share that element, so a key identifies a distinct box unless
 * the input overlaps, which the runs check catches. Memory that is touched
 * once per local box is kept to one 16-byte record: on big jobs, fresh pages
 * cost more than the arithmetic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/strmap.h"
#include "model/box.h"
#include "planner/global_plan_int.h"
#include "planner/layout_plan.h"
#include "planner/local_plan_int.h"
#include "base/radix.h"

/* What the builder knows of a name: where it was first seen, and its kind. */
typedef struct name_info {
  int32_t rank;   /* first plan that has it */
  uint32_t index; /* its tensor or bytes index there */
  uint32_t is_bytes;
  uint32_t canon; /* canonical index among tensors, or among bytes keys */
  uint32_t layout; /* a tensor every sighting marked a layout tensor */
} name_info;

typedef struct builder {
  const dcpi_local_plan *const *plans;
  size_t n;
  dcpi_err *err;
  dcpi_global_plan *gp;
  dcpi_strmap names;
  name_info *info;
  size_t ninfo, info_cap;
  size_t *tmap_at, *bmap_at; /* n+1: first slot of plan r in tmap / bmap */
  uint32_t *tmap, *bmap;     /* local tensor/bytes index → canonical index */
  uint32_t *bytes_keys;      /* canonical bytes key → info index */
  uint64_t *bkey_at;         /* canonical bytes key → its name in gp->names */
  size_t nbytes_keys;
  size_t *bucket_at;  /* ntensors+1: first record slot of each tensor */
  size_t *bucket_end; /* ntensors: one past its last non-empty record */
  dcpi_kv64 *recs;    /* (offset index, rank<<32 | chunk), sorted per bucket */
  size_t nrecs;
  size_t boxes_need;
  dcpi_kv64 *sort_tmp;
  size_t sort_tmp_cap;
  dcpi_kv64 *scratch; /* sweep order */
  uint32_t *active;   /* sweep active list */
  size_t scratch_cap, active_cap;
} builder;

#define OOM(b) dcpi_fail((b)->err, DCP_ENOMEM, "global plan: out of memory")

static const char *plan_name(const dcpi_local_plan *lp, uint64_t at) { return lp->names + at; }

/* "[4, 8]" into buf. */

/* ---- 1. plans ---------------------------------------------------------- */

static dcp_status check_plans(const builder *b, const dcpi_save_opts *opts) {
  for (size_t r = 0; r < b->n; r++) {
    const dcpi_local_plan *lp = b->plans[r];
    if (!lp) return dcpi_fail(b->err, DCP_EINVAL, "global plan: plans[%zu] is NULL", r);
    if (!lp->finished)
      return dcpi_fail(b->err, DCP_EINVAL, "global plan: plan of rank %zu is not finished", r);
    if ((size_t)lp->world_size != b->n)
      return dcpi_fail(b->err, DCP_EINVAL,
                       "global plan: plans[%zu] has world size %d, %zu plans given", r,
                       lp->world_size, b->n);
    if ((size_t)lp->rank != r)
      return dcpi_fail(b->err, DCP_EINVAL, "global plan: plans[%zu] is the plan of rank %d", r,
                       lp->rank);
    if (!dcpi_save_opts_equal(&lp->opts, opts))
      return dcpi_fail(b->err, DCP_EINVAL,
                       "global plan: rank %zu planned with other options (policy %d, flags "
                       "0x%x, block size %u; expected %d, 0x%x, %u)",
                       r, (int)lp->opts.policy, lp->opts.flags, lp->opts.block_size,
                       (int)opts->policy, opts->flags, opts->block_size);
  }
  return DCP_OK;
}

/* Per-plan slots for the local→canonical maps. */
static dcp_status alloc_maps(builder *b) {
  b->tmap_at = malloc((b->n + 1) * sizeof *b->tmap_at);
  b->bmap_at = malloc((b->n + 1) * sizeof *b->bmap_at);
  if (!b->tmap_at || !b->bmap_at) return OOM(b);
  size_t nt = 0, nb = 0;
  for (size_t r = 0; r < b->n; r++) {
    b->tmap_at[r] = nt;
    b->bmap_at[r] = nb;
    nt += b->plans[r]->ntensors;
    nb += b->plans[r]->nbytes;
  }
  b->tmap_at[b->n] = nt;
  b->bmap_at[b->n] = nb;
  b->tmap = malloc((nt ? nt : 1) * sizeof *b->tmap);
  b->bmap = malloc((nb ? nb : 1) * sizeof *b->bmap);
  return b->tmap && b->bmap ? DCP_OK : OOM(b);
}

/* ---- 2. names: intern, kinds, dtype/shape/scope agreement -------------- */

static dcp_status same_tensor(const builder *b, const name_info *first, int32_t r,
                              const dcpi_lp_tensor *t) {
  const dcpi_local_plan *fp = b->plans[first->rank], *lp = b->plans[r];
  const dcpi_lp_tensor *f = &fp->tensors[first->index];
  const char *fqn = plan_name(lp, t->name_at);
  if (f->dtype != t->dtype)
    return dcpi_fail(b->err, DCP_EMISMATCH, "tensor '%s': dtype %s on rank %d but %s on rank %d",
                     fqn, dcp_dtype_name((dcp_dtype)f->dtype), first->rank,
                     dcp_dtype_name((dcp_dtype)t->dtype), r);
  const int64_t *fs = fp->pool + f->shape_at, *ts = lp->pool + t->shape_at;
  if (f->ndim != t->ndim || memcmp(fs, ts, t->ndim * sizeof *ts)) {
    char a[256], c[256];
    return dcpi_fail(b->err, DCP_EMISMATCH, "tensor '%s': shape %s on rank %d but %s on rank %d",
                     fqn, dcpi_shape_str(f->ndim, fs, a, sizeof a), first->rank,
                     dcpi_shape_str(t->ndim, ts, c, sizeof c), r);
  }
  return DCP_OK;
}

static const char *scope_name(uint32_t s) {
  return s == DCP_SCOPE_REPLICATED ? "REPLICATED" : "PER_RANK";
}

static dcp_status same_bytes(const builder *b, const name_info *first, int32_t r,
                             const dcpi_lp_bytes *x) {
  const dcpi_lp_bytes *f = &b->plans[first->rank]->bytes[first->index];
  const char *key = plan_name(b->plans[r], x->name_at);
  if (f->scope != x->scope)
    return dcpi_fail(b->err, DCP_ESCOPE, "bytes '%s': %s on rank %d but %s on rank %d", key,
                     scope_name(f->scope), first->rank, scope_name(x->scope), r);
  /* Replicas must be identical, so at least their lengths agree. */
  if (f->scope == DCP_SCOPE_REPLICATED && f->length != x->length)
    return dcpi_fail(b->err, DCP_ESCOPE,
                     "bytes '%s': replicated with length %lld on rank %d but %lld on rank %d",
                     key, (long long)f->length, first->rank, (long long)x->length, r);
  return DCP_OK;
}

/* Intern one name; *id gets its info index. A new name records (r, index);
 * a known one must be of the same kind. */
static dcp_status intern(builder *b, int32_t r, uint32_t index, uint32_t is_bytes,
                         uint64_t name_at, uint32_t len, uint32_t *id) {
  const char *name = plan_name(b->plans[r], name_at);
  if (b->ninfo >= UINT32_MAX)
    return dcpi_fail(b->err, DCP_EOVERFLOW, "global plan: too many names");
  int rc = dcpi_strmap_put(&b->names, name, len, (uint32_t)b->ninfo, id);
  if (rc < 0) return OOM(b);
  if (rc == 0) {
    if (DCPI_RESERVE(b->info, b->info_cap, b->ninfo + 1)) return OOM(b);
    b->info[b->ninfo] = (name_info){.rank = r, .index = index, .is_bytes = is_bytes};
    *id = (uint32_t)b->ninfo++;
    return DCP_OK;
  }
  const name_info *f = &b->info[*id];
  if (f->is_bytes != is_bytes)
    return dcpi_fail(b->err, DCP_EMISMATCH, "'%s' is a %s on rank %d but a %s on rank %d", name,
                     f->is_bytes ? "bytes item" : "tensor", f->rank,
                     is_bytes ? "bytes item" : "tensor", r);
  return DCP_OK;
}

/* Intern every name of every plan (rank order, so "first seen" is the
 * lowest rank) and check that each agrees with its first sighting. */
static dcp_status intern_names(builder *b) {
  for (size_t r = 0; r < b->n; r++) {
    const dcpi_local_plan *lp = b->plans[r];
    int32_t rk = (int32_t)r;
    for (uint32_t i = 0; i < lp->ntensors; i++) {
      const dcpi_lp_tensor *t = &lp->tensors[i];
      uint32_t *id = &b->tmap[b->tmap_at[r] + i];
      dcp_status rc = intern(b, rk, i, 0, t->name_at, t->name_len, id);
      if (!rc && b->info[*id].rank != rk) rc = same_tensor(b, &b->info[*id], rk, t);
      if (!rc) /* first sighting: its mark; later ones: all must mark it */
        b->info[*id].layout = b->info[*id].rank == rk ? t->layout : b->info[*id].layout & t->layout;
      if (rc) return rc;
    }
    for (uint32_t i = 0; i < lp->nbytes; i++) {
      const dcpi_lp_bytes *x = &lp->bytes[i];
      uint32_t *id = &b->bmap[b->bmap_at[r] + i];
      dcp_status rc = intern(b, rk, i, 1, x->name_at, x->name_len, id);
      if (!rc && b->info[*id].rank != rk) rc = same_bytes(b, &b->info[*id], rk, x);
      if (rc) return rc;
    }
  }
  return DCP_OK;
}

/* ---- 3. canonical tables ----------------------------------------------- */

typedef struct name_ref {
  const char *name;
  uint32_t len;
  uint32_t id;
} name_ref;

static int cmp_name_ref(const void *pa, const void *pb) {
  const name_ref *a = pa, *b = pb;
  int c = memcmp(a->name, b->name, a->len < b->len ? a->len : b->len);
  if (c) return c;
  return a->len < b->len ? -1 : a->len > b->len;
}

/* The first sighting's name of info id. */
static name_ref ref_of(const builder *b, uint32_t id) {
  const name_info *f = &b->info[id];
  const dcpi_local_plan *lp = b->plans[f->rank];
  if (f->is_bytes) {
    const dcpi_lp_bytes *x = &lp->bytes[f->index];
    return (name_ref){plan_name(lp, x->name_at), x->name_len, id};
  }
  const dcpi_lp_tensor *t = &lp->tensors[f->index];
  return (name_ref){plan_name(lp, t->name_at), t->name_len, id};
}

/* Sort the names of one kind; refs[k] is the k-th in canonical order. */
static dcp_status sort_kind(builder *b, uint32_t is_bytes, name_ref **refs, size_t *count) {
  size_t m = 0;
  for (size_t id = 0; id < b->ninfo; id++) m += b->info[id].is_bytes == is_bytes;
  name_ref *r = malloc((m ? m : 1) * sizeof *r);
  if (!r) return OOM(b);
  m = 0;
  for (size_t id = 0; id < b->ninfo; id++)
    if (b->info[id].is_bytes == is_bytes) r[m++] = ref_of(b, (uint32_t)id);
  dcpi_sort(r, m, sizeof *r, cmp_name_ref);
  for (size_t k = 0; k < m; k++) b->info[r[k].id].canon = (uint32_t)k;
  *refs = r;
  *count = m;
  return DCP_OK;
}

/* Fill canonical tensor k from its first sighting; check its shape and
 * add it to the model size. */
static dcp_status fill_tensor(builder *b, size_t k, const name_ref *ref, uint64_t *names_at,
                              int64_t *model) {
  dcpi_global_plan *gp = b->gp;
  const name_info *f = &b->info[ref->id];
  const dcpi_local_plan *lp = b->plans[f->rank];
  const dcpi_lp_tensor *t = &lp->tensors[f->index];
  dcpi_gp_tensor_rec *g = &gp->tensors[k];
  *g = (dcpi_gp_tensor_rec){.name_at = *names_at, .name_len = ref->len, .dtype = t->dtype,
                            .ndim = t->ndim, .layout = f->layout};
  memcpy(gp->names + *names_at, ref->name, ref->len + 1);
  *names_at += ref->len + 1;
  memcpy(g->shape, lp->pool + t->shape_at, t->ndim * sizeof *g->shape);
  dcp_status rc = dcpi_check_shape(t->ndim, g->shape, dcp_dtype_size((dcp_dtype)t->dtype),
                                   ref->name, b->err);
  if (rc) return rc;
  dcpi_numel(t->ndim, g->shape, &g->numel);
  g->nbytes = g->numel * (int64_t)dcp_dtype_size((dcp_dtype)t->dtype); /* checked above */
  if (!dcpi_add_i64(*model, g->nbytes, model))
    return dcpi_fail(b->err, DCP_EOVERFLOW, "global plan: model size overflows int64 at '%s'",
                     ref->name);
  return DCP_OK;
}

/* The global tensor table and bytes key list in canonical order, their
 * names copied; tmap/bmap rewritten from intern ids to canonical indices. */
static dcp_status canonical_tables(builder *b) {
  name_ref *tr = NULL, *br = NULL;
  size_t nt, nb, names_len = 0;
  dcp_status rc = sort_kind(b, 0, &tr, &nt);
  if (!rc) rc = sort_kind(b, 1, &br, &nb);
  for (size_t k = 0; !rc && k < nt; k++) names_len += tr[k].len + 1;
  for (size_t k = 0; !rc && k < nb; k++) names_len += br[k].len + 1;
  dcpi_global_plan *gp = b->gp;
  if (!rc) {
    gp->names = malloc(names_len ? names_len : 1);
    gp->tensors = malloc((nt ? nt : 1) * sizeof *gp->tensors);
    b->bytes_keys = malloc((nb ? nb : 1) * sizeof *b->bytes_keys);
    b->bkey_at = malloc((nb ? nb : 1) * sizeof *b->bkey_at);
    if (!gp->names || !gp->tensors || !b->bytes_keys || !b->bkey_at)
      rc = OOM(b);
  }
  uint64_t at = 0;
  for (size_t k = 0; !rc && k < nt; k++, gp->ntensors++)
    rc = fill_tensor(b, k, &tr[k], &at, &gp->tensor_bytes);
  for (size_t k = 0; !rc && k < nb; k++) {
    b->bytes_keys[k] = br[k].id;
    memcpy(gp->names + at, br[k].name, br[k].len + 1);
    b->bkey_at[k] = at;
    at += br[k].len + 1;
  }
  b->nbytes_keys = nb;
  free(tr);
  free(br);
  if (rc) return rc;
  for (size_t i = 0; i < b->tmap_at[b->n]; i++) b->tmap[i] = b->info[b->tmap[i]].canon;
  for (size_t i = 0; i < b->bmap_at[b->n]; i++) b->bmap[i] = b->info[b->bmap[i]].canon;
  return DCP_OK;
}

/* ---- 4. local boxes → sort records ------------------------------------- */

/* Check box (off, sz) of tensor g held by rank r; *empty when it has no
 * element. Messages print raw values: the box may not even have an end. */
static dcp_status check_box(const builder *b, const dcpi_gp_tensor_rec *g, int32_t r,
                            const int64_t *off, const int64_t *sz, bool *empty) {
  const char *fqn = b->gp->names + g->name_at;
  *empty = false;
  for (uint32_t d = 0; d < g->ndim; d++) {
    int64_t end;
    if (off[d] < 0 || sz[d] < 0)
      return dcpi_fail(b->err, DCP_EBOUNDS,
                       "tensor '%s' on rank %d: box has offset %lld and size %lld in dim %u",
                       fqn, r, (long long)off[d], (long long)sz[d], d);
    if (!dcpi_add_i64(off[d], sz[d], &end))
      return dcpi_fail(b->err, DCP_EOVERFLOW,
                       "tensor '%s' on rank %d: box offset %lld + size %lld overflows int64 in "
                       "dim %u",
                       fqn, r, (long long)off[d], (long long)sz[d], d);
    if (end > g->shape[d]) {
      char a[256], s[256];
      return dcpi_fail(b->err, DCP_EBOUNDS,
                       "tensor '%s' on rank %d: box %s ends at %lld in dim %u, shape is %s", fqn,
                       r, dcpi_box_str(g->ndim, off, sz, a, sizeof a), (long long)end, d,
                       dcpi_shape_str(g->ndim, g->shape, s, sizeof s));
    }
    if (sz[d] == 0) *empty = true;
  }
  return DCP_OK;
}

/* Row-major index of point off in shape (off inside shape: no overflow). */
static uint64_t linear(uint32_t ndim, const int64_t *shape, const int64_t *off) {
  uint64_t lin = 0;
  for (uint32_t d = 0; d < ndim; d++) lin = lin * (uint64_t)shape[d] + (uint64_t)off[d];
  return lin;
}

/* Records of plan r's non-empty boxes, each appended to its tensor's
 * bucket. */
static dcp_status collect_plan(builder *b, size_t r) {
  const dcpi_local_plan *lp = b->plans[r];
  for (uint32_t lt = 0; lt < lp->ntensors; lt++) {
    const dcpi_lp_tensor *t = &lp->tensors[lt];
    uint32_t k = b->tmap[b->tmap_at[r] + lt];
    const dcpi_gp_tensor_rec *g = &b->gp->tensors[k];
    const int64_t *box = lp->pool + t->boxes_at;
    for (uint32_t c = 0; c < t->nchunks; c++, box += 2 * t->ndim) {
      bool empty;
      dcp_status rc = check_box(b, g, (int32_t)r, box, box + t->ndim, &empty);
      if (rc) return rc;
      if (empty) continue; /* legal, never written */
      b->recs[b->bucket_end[k]++] = (dcpi_kv64){linear(t->ndim, g->shape, box),
                                                (uint64_t)r << 32 | (t->first_chunk + c)};
      b->nrecs++;
      b->boxes_need += 2 * (size_t)t->ndim;
    }
  }
  return DCP_OK;
}

/* Buckets sized for every chunk of each tensor on every rank (a counting
 * sort by tensor: empty boxes leave a gap at a bucket's end). */
static dcp_status alloc_buckets(builder *b) {
  size_t nt = b->gp->ntensors;
  b->bucket_at = calloc(nt + 1, sizeof *b->bucket_at);
  b->bucket_end = malloc((nt ? nt : 1) * sizeof *b->bucket_end);
  if (!b->bucket_at || !b->bucket_end) return OOM(b);
  for (size_t r = 0; r < b->n; r++)
    for (size_t lt = 0; lt < b->plans[r]->ntensors; lt++)
      b->bucket_at[b->tmap[b->tmap_at[r] + lt] + 1] += b->plans[r]->tensors[lt].nchunks;
  for (size_t k = 0; k < nt; k++) b->bucket_at[k + 1] += b->bucket_at[k];
  memcpy(b->bucket_end, b->bucket_at, nt * sizeof *b->bucket_end);
  size_t total = b->bucket_at[nt];
  b->recs = malloc((total ? total : 1) * sizeof *b->recs);
  return b->recs ? DCP_OK : OOM(b);
}

/* Sort each bucket by offset index; equal keys keep rank order (the sort is
 * stable and buckets were filled rank by rank). */
static dcp_status sort_buckets(builder *b) {
  for (size_t k = 0; k < b->gp->ntensors; k++) {
    dcpi_kv64 *a = b->recs + b->bucket_at[k];
    size_t n = b->bucket_end[k] - b->bucket_at[k];
    if (n < 2) continue;
    if (DCPI_RESERVE(b->sort_tmp, b->sort_tmp_cap, n)) return OOM(b);
    uint64_t max_key = (uint64_t)b->gp->tensors[k].numel - 1; /* n > 0: numel > 0 */
    dcpi_kv64 *sorted = dcpi_radix_sort_kv(a, b->sort_tmp, n, max_key);
    if (sorted != a) memcpy(a, sorted, n * sizeof *a);
  }
  return DCP_OK;
}

/* Every non-empty local box as a record in its tensor's bucket, sorted. */
static dcp_status collect_and_sort(builder *b) {
  dcp_status rc = alloc_buckets(b);
  for (size_t r = 0; !rc && r < b->n; r++) rc = collect_plan(b, r);
  if (!rc && b->nrecs > UINT32_MAX)
    rc = dcpi_fail(b->err, DCP_EOVERFLOW, "global plan: %zu chunks exceed the limit of %u",
                   b->nrecs, UINT32_MAX);
  return rc ? rc : sort_buckets(b);
}

/* ---- 5. runs → write items; overlap sweep; coverage -------------------- */

static int32_t rec_rank(dcpi_kv64 r) { return (int32_t)(r.val >> 32); }
static uint32_t rec_chunk(dcpi_kv64 r) { return (uint32_t)r.val; }

static dcp_status overlap_error(const builder *b, const dcpi_gp_tensor_rec *g,
                                const int64_t *x, int32_t rx, const int64_t *y, int32_t ry) {
  char a[256], c[256];
  uint32_t nd = g->ndim;
  return dcpi_fail(b->err, DCP_EOVERLAP,
                   "tensor '%s': box %s on rank %d overlaps box %s on rank %d",
                   b->gp->names + g->name_at, dcpi_box_str(nd, x, x + nd, a, sizeof a), rx,
                   dcpi_box_str(nd, y, y + nd, c, sizeof c), ry);
}

/* The run of records with the key of recs[*pi] (one offset of tensor t;
 * the bucket ends at `end`) is one write item; its holders must all hold
 * the same box. */
static dcp_status take_run(builder *b, uint32_t t, size_t *pi, size_t end, size_t *boxes_len,
                           int64_t *covered) {
  dcpi_global_plan *gp = b->gp;
  const dcpi_gp_tensor_rec *g = &gp->tensors[t];
  uint32_t nd = g->ndim;
  size_t i = *pi, j = i;
  int32_t r0 = rec_rank(b->recs[i]);
  const int64_t *box0 = dcpi_lp_box(b->plans[r0], rec_chunk(b->recs[i]));
  gp->items[gp->nitems] = (dcpi_gp_item_rec){.holders_at = gp->nholdings, .tensor = t,
                                             .owner = -1};
  for (; j < end && b->recs[j].key == b->recs[i].key; j++) {
    int32_t r = rec_rank(b->recs[j]);
    uint32_t c = rec_chunk(b->recs[j]);
    if (j > i) {
      const int64_t *box = dcpi_lp_box(b->plans[r], c);
      /* Same offset, so a different size (or the same rank twice) means
       * two distinct boxes that share their first element. */
      if (memcmp(box + nd, box0 + nd, nd * sizeof *box) || r == gp->holders[gp->nholdings - 1])
        return overlap_error(b, g, box0, r0, box, r);
    }
    gp->holders[gp->nholdings] = r;
    gp->holder_chunks[gp->nholdings++] = c;
  }
  memcpy(gp->boxes + *boxes_len, box0, 2 * nd * sizeof *box0);
  *boxes_len += 2 * (size_t)nd;
  int64_t numel;
  dcpi_numel(nd, box0 + nd, &numel); /* inside a checked shape */
  /* Saturate: overlapping input can sum past numel; the sweep reports it. */
  if (!dcpi_add_i64(*covered, numel, covered)) *covered = INT64_MAX;
  gp->nitems++;
  *pi = j;
  return DCP_OK;
}

/* A cheap guess of the dimension along which the boxes are thinnest
 * relative to the shape, in integer 2^-20 units (deterministic): sweeping
 * along it keeps the active list short (column strips sweep along columns). */
static uint32_t sweep_dim(const dcpi_gp_tensor_rec *g, const int64_t *boxes, size_t n) {
  uint32_t nd = g->ndim, best = 0;
  uint64_t best_sum = UINT64_MAX;
  for (uint32_t d = 0; d < nd; d++) {
    uint64_t sum = 0, sh = (uint64_t)g->shape[d];
    for (size_t k = 0; k < n; k++) {
      uint64_t sz = (uint64_t)boxes[k * 2 * nd + nd + d];
      sum += sh > (1u << 20) ? sz / (sh >> 20) : (sz << 20) / sh;
    }
    if (sum < best_sum) best_sum = sum, best = d;
  }
  return best;
}

/* Item order by offset in dim d into b->scratch[0..n) (val = item). Dim 0
 * is the canonical order already. */
static dcp_status sweep_order(builder *b, const dcpi_gp_tensor_rec *g, const int64_t *boxes,
                              size_t n, uint32_t d, const dcpi_kv64 **order) {
  uint32_t nd = g->ndim;
  if (DCPI_RESERVE(b->scratch, b->scratch_cap, 2 * n)) return OOM(b);
  for (size_t k = 0; k < n; k++)
    b->scratch[k] = (dcpi_kv64){d ? (uint64_t)boxes[k * 2 * nd + d] : k, k};
  *order = d ? dcpi_radix_sort_kv(b->scratch, b->scratch + n, n, (uint64_t)g->shape[d])
            : b->scratch;
  return DCP_OK;
}

/* Distinct boxes of tensor t must not overlap: sweep along one dim with an
 * active list of the boxes that still extend past the sweep position;
 * only those can overlap the next box. */
static dcp_status sweep(builder *b, uint32_t t) {
  const dcpi_gp_tensor_rec *g = &b->gp->tensors[t];
  size_t n = (size_t)g->nitems;
  if (n < 2) return DCP_OK;
  uint32_t nd = g->ndim, d = sweep_dim(g, b->gp->boxes + g->boxes_at, n);
  const int64_t *boxes = b->gp->boxes + g->boxes_at;
  const dcpi_kv64 *order = NULL;
  if (sweep_order(b, g, boxes, n, d, &order) ||
      DCPI_RESERVE(b->active, b->active_cap, n))
    return OOM(b);
  size_t na = 0;
  for (size_t k = 0; k < n; k++) {
    size_t x = (size_t)order[k].val;
    const int64_t *bx = boxes + x * 2 * nd;
    for (size_t a = 0; a < na;) { /* prune boxes that end at or before bx */
      const int64_t *by = boxes + (size_t)b->active[a] * 2 * nd;
      if (by[d] + by[nd + d] <= bx[d]) b->active[a] = b->active[--na];
      else a++;
    }
    for (size_t a = 0; a < na; a++) {
      size_t y = b->active[a];
      const int64_t *by = boxes + y * 2 * nd;
      if (dcpi_boxes_overlap(nd, bx, bx + nd, by, by + nd)) {
        const dcpi_gp_item_rec *ix = &b->gp->items[g->first_item + x];
        const dcpi_gp_item_rec *iy = &b->gp->items[g->first_item + y];
        return overlap_error(b, g, by, b->gp->holders[iy->holders_at], bx,
                             b->gp->holders[ix->holders_at]);
      }
    }
    b->active[na++] = (uint32_t)x;
  }
  return DCP_OK;
}

static dcp_status alloc_items(builder *b) {
  dcpi_global_plan *gp = b->gp;
  size_t n = b->nrecs ? b->nrecs : 1;
  gp->items = malloc(n * sizeof *gp->items);
  gp->holders = malloc(n * sizeof *gp->holders);
  gp->holder_chunks = malloc(n * sizeof *gp->holder_chunks);
  gp->boxes = malloc((b->boxes_need ? b->boxes_need : 1) * sizeof *gp->boxes);
  return gp->items && gp->holders && gp->holder_chunks && gp->boxes ? DCP_OK : OOM(b);
}

/* Walk the sorted buckets tensor by tensor, making items, then check each
 * tensor's overlap and coverage. */
static dcp_status make_items(builder *b) {
  dcp_status rc = alloc_items(b);
  dcpi_global_plan *gp = b->gp;
  size_t boxes_len = 0;
  for (uint32_t t = 0; !rc && t < gp->ntensors; t++) {
    dcpi_gp_tensor_rec *g = &gp->tensors[t];
    size_t i = b->bucket_at[t], end = b->bucket_end[t];
    int64_t covered = 0;
    g->first_item = gp->nitems;
    g->boxes_at = boxes_len;
    while (!rc && i < end) rc = take_run(b, t, &i, end, &boxes_len, &covered);
    g->nitems = gp->nitems - g->first_item;
    if (!rc) rc = sweep(b, t);
    if (!rc && covered != g->numel)
      rc = dcpi_fail(b->err, DCP_EINCOMPLETE,
                     "tensor '%s': its chunks cover %lld of %lld elements",
                     gp->names + g->name_at, (long long)covered, (long long)g->numel);
  }
  return rc;
}

/* ---- 6. bytes items ---------------------------------------------------- */

/* Bytes entries grouped by canonical key, rank order within a key
 * (a stable counting sort): (*at)[k] .. (*at)[k+1] index *ent (rank<<32|i). */
static dcp_status group_bytes(builder *b, size_t **at, uint64_t **ent) {
  size_t nk = b->nbytes_keys, ne = b->bmap_at[b->n];
  *at = calloc(nk + 1, sizeof **at);
  *ent = malloc((ne ? ne : 1) * sizeof **ent);
  if (!*at || !*ent) return OOM(b);
  for (size_t e = 0; e < ne; e++) (*at)[b->bmap[e] + 1]++;
  for (size_t k = 0; k < nk; k++) (*at)[k + 1] += (*at)[k];
  size_t *pos = malloc((nk ? nk : 1) * sizeof *pos);
  if (!pos) return OOM(b);
  memcpy(pos, *at, nk * sizeof *pos);
  for (size_t r = 0; r < b->n; r++)
    for (size_t i = 0; i < b->plans[r]->nbytes; i++)
      (*ent)[pos[b->bmap[b->bmap_at[r] + i]]++] = (uint64_t)r << 32 | i;
  free(pos);
  return DCP_OK;
}

/* Append one bytes record for key k held by ent[0..nh). */
static dcp_status push_bytes(builder *b, size_t k, const dcpi_lp_bytes *x, int32_t rank,
                             const uint64_t *ent, size_t nh) {
  dcpi_global_plan *gp = b->gp;
  gp->bytes[gp->nbytes++] = (dcpi_gp_bytes_rec){
      .name_at = b->bkey_at[k], .holders_at = gp->nbholdings, .length = x->length,
      .name_len = x->name_len, .scope = x->scope, .rank = rank, .owner = -1,
      .nholders = (uint32_t)nh};
  for (size_t h = 0; h < nh; h++) {
    gp->bholders[gp->nbholdings] = (int32_t)(ent[h] >> 32);
    gp->bholder_items[gp->nbholdings++] = (uint32_t)ent[h];
  }
  if (!dcpi_add_i64(gp->bytes_bytes, x->length, &gp->bytes_bytes))
    return dcpi_fail(b->err, DCP_EOVERFLOW, "global plan: bytes items overflow int64");
  return DCP_OK;
}

/* One record per replicated key, one per (key, rank) for per-rank keys.
 * Scopes and replicated lengths were checked while interning. */
static dcp_status make_bytes(builder *b) {
  size_t *at = NULL;
  uint64_t *ent = NULL;
  dcpi_global_plan *gp = b->gp;
  size_t ne = b->bmap_at[b->n] ? b->bmap_at[b->n] : 1;
  dcp_status rc = group_bytes(b, &at, &ent);
  if (!rc) {
    gp->bytes = malloc(ne * sizeof *gp->bytes);
    gp->bholders = malloc(ne * sizeof *gp->bholders);
    gp->bholder_items = malloc(ne * sizeof *gp->bholder_items);
    if (!gp->bytes || !gp->bholders || !gp->bholder_items) rc = OOM(b);
  }
  for (size_t k = 0; !rc && k < b->nbytes_keys; k++) {
    const name_info *f = &b->info[b->bytes_keys[k]];
    const dcpi_lp_bytes *x = &b->plans[f->rank]->bytes[f->index];
    const uint64_t *e = ent + at[k];
    size_t nh = at[k + 1] - at[k];
    if (x->scope == DCP_SCOPE_REPLICATED) rc = push_bytes(b, k, x, -1, e, nh);
    for (size_t h = 0; !rc && x->scope == DCP_SCOPE_PER_RANK && h < nh; h++)
      rc = push_bytes(b, k, &b->plans[e[h] >> 32]->bytes[(uint32_t)e[h]], (int32_t)(e[h] >> 32),
                      e + h, 1);
  }
  int64_t total;
  if (!rc && !dcpi_add_i64(gp->tensor_bytes, gp->bytes_bytes, &total))
    rc = dcpi_fail(b->err, DCP_EOVERFLOW, "global plan: checkpoint size overflows int64");
  free(at);
  free(ent);
  return rc;
}

/* ---- 7. split large replicated items ------------------------------------ */

/* How many pieces item i becomes (see dcpi_gp_item): 1, or up to one per
 * holder and per row, each at least DCPI_SPLIT_MIN_BLOCKS blocks; *rows_per
 * receives the rows of each piece but the last. */
static uint32_t piece_count(const dcpi_global_plan *gp, size_t i, int64_t *rows_per) {
  const dcpi_gp_tensor_rec *t = &gp->tensors[gp->items[i].tensor];
  int64_t rows = t->ndim ? dcpi_gp_item_box(gp, i)[t->ndim] : 1;
  return dcpi_split_pieces(dcpi_gp_item_nbytes(gp, i), rows, dcpi_gp_item_nholders(gp, i),
                           t->ndim, &gp->opts, rows_per);
}

/* The owner of piece p of item i (unsplit) of a layout tensor, by the rule
 * of layout_plan.h (starts[i] from layout_starts); -1 (for the balancer)
 * for any other tensor's. */
static int32_t rule_owner(const dcpi_global_plan *gp, const uint64_t *starts, size_t i,
                          uint32_t p) {
  if (!gp->tensors[gp->items[i].tensor].layout) return -1;
  return dcpi_layout_owner(gp->holders + gp->items[i].holders_at, dcpi_gp_item_nholders(gp, i),
                           p, starts[i], gp->opts.policy);
}

/* A layout item in the rule's order: its holder set, then its index
 * (canonical: fqn, then box). */
typedef struct rule_ref {
  uint64_t gh;
  const int32_t *holders;
  uint32_t nh;
  uint32_t item;
} rule_ref;

static int cmp_rule_ref(const void *pa, const void *pb) {
  const rule_ref *a = pa, *b = pb;
  int c = dcpi_layout_group_cmp(a->gh, a->holders, a->nh, b->gh, b->holders, b->nh);
  return c ? c : (a->item > b->item) - (a->item < b->item);
}

/* The rule's start of every layout item: the pieces of the layout items
 * before it with the same holders. *starts has nitems entries (0 for the
 * others). */
static dcp_status layout_starts(builder *b, uint64_t **starts) {
  dcpi_global_plan *gp = b->gp;
  size_t m = 0;
  *starts = calloc(gp->nitems ? gp->nitems : 1, sizeof **starts);
  rule_ref *refs = malloc((gp->nitems ? gp->nitems : 1) * sizeof *refs);
  if (!*starts || !refs) {
    free(refs);
    return OOM(b);
  }
  for (size_t i = 0; i < gp->nitems; i++) {
    if (!gp->tensors[gp->items[i].tensor].layout) continue;
    const int32_t *h = gp->holders + gp->items[i].holders_at;
    uint32_t nh = dcpi_gp_item_nholders(gp, i);
    refs[m++] = (rule_ref){dcpi_layout_group_hash(h, nh), h, nh, (uint32_t)i};
  }
  dcpi_sort(refs, m, sizeof *refs, cmp_rule_ref);
  uint64_t start = 0;
  for (size_t k = 0; k < m; k++) {
    const rule_ref *r = &refs[k];
    if (k && dcpi_layout_group_cmp(r[-1].gh, r[-1].holders, r[-1].nh, r->gh, r->holders, r->nh))
      start = 0;
    (*starts)[r->item] = start;
    int64_t per;
    start += piece_count(gp, r->item, &per);
  }
  free(refs);
  return DCP_OK;
}

typedef struct split_arrays {
  dcpi_gp_item_rec *items;
  int32_t *holders;
  uint32_t *holder_chunks;
  int64_t *boxes;
  uint64_t *piece_at;
  size_t nitems, nholdings, nboxes;
} split_arrays;

/* Append item i of gp to out whole (piece_at UINT64_MAX), or rows
 * [r0, r0 + n) of it as a piece, with its owner (-1: balancer's). */
static void put_item(const dcpi_global_plan *gp, size_t i, split_arrays *out, int64_t r0,
                     int64_t n, bool piece, int32_t owner) {
  const dcpi_gp_tensor_rec *t = &gp->tensors[gp->items[i].tensor];
  uint32_t nd = t->ndim, nh = dcpi_gp_item_nholders(gp, i);
  const int64_t *box = dcpi_gp_item_box(gp, i);
  int64_t *nb = out->boxes + out->nboxes;
  memcpy(nb, box, 2 * nd * sizeof *box);
  uint64_t row_bytes = 0;
  if (piece) {
    row_bytes = (uint64_t)dcpi_gp_item_nbytes(gp, i) / (uint64_t)box[nd];
    nb[0] += r0;
    nb[nd] = n;
  }
  out->nboxes += 2 * (size_t)nd;
  out->piece_at[out->nitems] = piece ? (uint64_t)r0 * row_bytes : UINT64_MAX;
  out->items[out->nitems++] = (dcpi_gp_item_rec){.holders_at = out->nholdings,
                                                  .tensor = gp->items[i].tensor, .owner = owner};
  memcpy(out->holders + out->nholdings, gp->holders + gp->items[i].holders_at,
         nh * sizeof *out->holders);
  memcpy(out->holder_chunks + out->nholdings, gp->holder_chunks + gp->items[i].holders_at,
         nh * sizeof *out->holder_chunks);
  out->nholdings += nh;
}

/* Rebuild items, boxes and holdings with every splittable item cut into
 * its pieces (in place of the item, so each tensor's items stay together).
 * Nothing is allocated when no item splits. */
static dcp_status split_with(builder *b, const uint64_t *starts) {
  dcpi_global_plan *gp = b->gp;
  size_t items = 0, holdings = 0, boxes = 0;
  for (size_t i = 0; i < gp->nitems; i++) {
    int64_t per;
    uint32_t k = piece_count(gp, i, &per);
    items += k - 1;
    holdings += (size_t)(k - 1) * dcpi_gp_item_nholders(gp, i);
    boxes += (size_t)(k - 1) * 2 * gp->tensors[gp->items[i].tensor].ndim;
  }
  if (!items) {
    for (size_t i = 0; i < gp->nitems; i++) gp->items[i].owner = rule_owner(gp, starts, i, 0);
    return DCP_OK;
  }
  size_t nboxes = 0;
  for (size_t t = 0; t < gp->ntensors; t++) nboxes += (size_t)gp->tensors[t].nitems * 2 * gp->tensors[t].ndim;
  split_arrays out = {.items = malloc((gp->nitems + items) * sizeof *out.items),
                      .holders = malloc((gp->nholdings + holdings) * sizeof *out.holders),
                      .holder_chunks = malloc((gp->nholdings + holdings) * sizeof *out.holder_chunks),
                      .boxes = malloc((nboxes + boxes + 1) * sizeof *out.boxes),
                      .piece_at = malloc((gp->nitems + items) * sizeof *out.piece_at)};
  if (!out.items || !out.holders || !out.holder_chunks || !out.boxes || !out.piece_at) {
    free(out.items), free(out.holders), free(out.holder_chunks), free(out.boxes),
        free(out.piece_at);
    return OOM(b);
  }
  for (size_t t = 0; t < gp->ntensors; t++) {
    dcpi_gp_tensor_rec *g = &gp->tensors[t];
    size_t first = out.nitems, boxes_at = out.nboxes;
    for (size_t i = g->first_item; i < g->first_item + g->nitems; i++) {
      int64_t per = 0;
      uint32_t k = piece_count(gp, i, &per);
      int64_t rows = k > 1 ? dcpi_gp_item_box(gp, i)[g->ndim] : 0;
      if (k == 1) put_item(gp, i, &out, 0, 0, false, rule_owner(gp, starts, i, 0));
      for (uint32_t p = 0; k > 1 && p < k; p++) {
        int64_t r0 = (int64_t)p * per;
        put_item(gp, i, &out, r0, r0 + per <= rows ? per : rows - r0, true, rule_owner(gp, starts, i, p));
      }
    }
    g->first_item = first, g->nitems = out.nitems - first, g->boxes_at = boxes_at;
  }
  free(gp->items), free(gp->holders), free(gp->holder_chunks), free(gp->boxes);
  gp->items = out.items, gp->holders = out.holders, gp->holder_chunks = out.holder_chunks;
  gp->boxes = out.boxes, gp->piece_at = out.piece_at;
  gp->nitems = out.nitems, gp->nholdings = out.nholdings;
  return DCP_OK;
}

/* Split, then owners by the rule for layout items (starts computed on
 * the unsplit items). */
static dcp_status split_replicated(builder *b) {
  uint64_t *starts;
  dcp_status rc = layout_starts(b, &starts);
  if (rc) return rc;
  rc = split_with(b, starts);
  free(starts);
  return rc;
}

/* ---- 8. balance -------------------------------------------------------- */

/* Single-holder items go to their holder and layout tensors' items to
 * their rule's owner (their bytes become the base load); the rest are
 * collected into bal (keys: item index, then
 * nitems + bytes index) for dcpi_balance_from. */
static size_t split_items(builder *b, int64_t *base, dcpi_balance_item *bal) {
  dcpi_global_plan *gp = b->gp;
  size_t m = 0;
  for (size_t i = 0; i < gp->nitems; i++) {
    dcpi_gp_item_rec *it = &gp->items[i];
    const int32_t *h = gp->holders + it->holders_at;
    uint32_t nh = dcpi_gp_item_nholders(gp, i);
    if (nh == 1 || it->owner >= 0) {
      if (it->owner < 0) it->owner = h[0];
      base[it->owner] += dcpi_gp_item_nbytes(gp, i); /* total fits int64: see make_bytes */
    } else if (bal) {
      bal[m++] = (dcpi_balance_item){dcpi_gp_item_nbytes(gp, i), i, nh, h};
    } else {
      m++;
    }
  }
  for (size_t j = 0; j < gp->nbytes; j++) {
    dcpi_gp_bytes_rec *x = &gp->bytes[j];
    const int32_t *h = gp->bholders + x->holders_at;
    if (x->nholders == 1) {
      x->owner = h[0];
      base[h[0]] += x->length;
    } else if (bal) {
      bal[m++] = (dcpi_balance_item){x->length, gp->nitems + j, x->nholders, h};
    } else {
      m++;
    }
  }
  return m;
}

/* Owners of the balanced items (multi-holder, not owned by the rule: no
 * owner yet), in the order split_items listed them. */
static void apply_owners(dcpi_global_plan *gp, const int32_t *owner) {
  size_t m = 0;
  for (size_t i = 0; i < gp->nitems; i++)
    if (gp->items[i].owner < 0) gp->items[i].owner = owner[m++];
  for (size_t j = 0; j < gp->nbytes; j++)
    if (gp->bytes[j].nholders > 1) gp->bytes[j].owner = owner[m++];
}

static dcp_status balance(builder *b) {
  dcpi_global_plan *gp = b->gp;
  size_t w = b->n;
  int64_t *base = calloc(w, sizeof *base);
  gp->load = malloc(w * sizeof *gp->load);
  if (!base || !gp->load) {
    free(base);
    return OOM(b);
  }
  size_t m = split_items(b, base, NULL);
  memset(base, 0, w * sizeof *base);
  dcpi_balance_item *bal = malloc((m ? m : 1) * sizeof *bal);
  int32_t *owner = malloc((m ? m : 1) * sizeof *owner);
  dcp_status rc = bal && owner ? DCP_OK : OOM(b);
  if (!rc) {
    split_items(b, base, bal);
    rc = dcpi_balance_from(bal, m, (int32_t)w, gp->opts.policy, base, owner, gp->load, b->err);
  }
  if (!rc) apply_owners(gp, owner);
  free(base);
  free(bal);
  free(owner);
  return rc;
}

/* ---- 9. per-rank lists ------------------------------------------------- */

typedef int32_t (*owner_fn)(const dcpi_global_plan *, size_t);

/* Group indices 0..n-1 by owner_of(i) (ascending within a rank): a counting
 * sort into *at (w+1 offsets) and *list. */
static dcp_status group_by_owner(builder *b, size_t n, owner_fn owner_of, size_t **at,
                                 uint32_t **list) {
  size_t w = b->n;
  *at = calloc(w + 1, sizeof **at);
  *list = malloc((n ? n : 1) * sizeof **list);
  size_t *pos = malloc(w * sizeof *pos);
  if (!*at || !*list || !pos) {
    free(pos);
    return OOM(b);
  }
  for (size_t i = 0; i < n; i++) (*at)[owner_of(b->gp, i) + 1]++;
  for (size_t r = 0; r < w; r++) (*at)[r + 1] += (*at)[r];
  memcpy(pos, *at, w * sizeof *pos);
  for (size_t i = 0; i < n; i++) (*list)[pos[owner_of(b->gp, i)]++] = (uint32_t)i;
  free(pos);
  return DCP_OK;
}

static int32_t item_owner(const dcpi_global_plan *gp, size_t i) { return gp->items[i].owner; }
static int32_t bytes_owner(const dcpi_global_plan *gp, size_t i) { return gp->bytes[i].owner; }

static dcp_status rank_lists(builder *b) {
  dcpi_global_plan *gp = b->gp;
  dcp_status rc = group_by_owner(b, gp->nitems, item_owner, &gp->rank_items_at, &gp->rank_items);
  if (!rc) rc = group_by_owner(b, gp->nbytes, bytes_owner, &gp->rank_bytes_at, &gp->rank_bytes);
  return rc;
}

/* ---- entry point ------------------------------------------------------- */

static void builder_free(builder *b) {
  dcpi_strmap_free(&b->names);
  free(b->info);
  free(b->tmap_at);
  free(b->bmap_at);
  free(b->tmap);
  free(b->bmap);
  free(b->bytes_keys);
  free(b->bkey_at);
  free(b->bucket_at);
  free(b->bucket_end);
  free(b->recs);
  free(b->sort_tmp);
  free(b->scratch);
  free(b->active);
}

/* Arrays sized for the worst case shrink to what was used. */
static void trim(dcpi_global_plan *gp) {
  size_t n = gp->nitems ? gp->nitems : 1;
  dcpi_gp_item_rec *items = realloc(gp->items, n * sizeof *items);
  if (items) gp->items = items;
}

static dcp_status run_steps(builder *b, const dcpi_save_opts *opts) {
  dcp_status rc = check_plans(b, opts);
  if (!rc) rc = alloc_maps(b);
  if (!rc) rc = intern_names(b);
  if (!rc) rc = canonical_tables(b);
  if (!rc) rc = collect_and_sort(b);
  if (!rc) rc = make_items(b);
  if (!rc) rc = make_bytes(b);
  if (!rc) rc = split_replicated(b);
  if (!rc) rc = balance(b);
  if (!rc) rc = rank_lists(b);
  return rc;
}

dcp_status dcpi_global_plan_build(const dcpi_local_plan *const *plans, size_t nplans,
                                  const dcpi_save_opts *opts, dcpi_global_plan **out,
                                  dcpi_err *err) {
  if (!out) return dcpi_fail(err, DCP_EINVAL, "global plan: out is NULL");
  *out = NULL;
  if (!plans || nplans == 0 || nplans > INT32_MAX)
    return dcpi_fail(err, DCP_EINVAL, "global plan: %zu plans", plans ? nplans : 0);
  if (!plans[0]) return dcpi_fail(err, DCP_EINVAL, "global plan: plans[0] is NULL");
  dcpi_save_opts o = opts ? *opts : plans[0]->opts;
  dcp_status rc = dcpi_save_opts_check(&o, err);
  if (rc) return rc;
  builder b = {.plans = plans, .n = nplans, .err = err};
  if (!(b.gp = calloc(1, sizeof *b.gp))) return OOM(&b);
  b.gp->world_size = (int32_t)nplans;
  b.gp->opts = o;
  rc = run_steps(&b, &o);
  builder_free(&b);
  if (rc) {
    dcpi_global_plan_free(b.gp);
    return rc;
  }
  trim(b.gp);
  *out = b.gp;
  return DCP_OK;
}

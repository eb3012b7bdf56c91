/* layout_plan.c — the owner rule for layout tensors and per-rank planning
 * (layout_plan.h). A rank's writes of a layout tensor follow from the
 * layout alone: its box, its replica group (every mesh position with the
 * rank's coordinates on the sharding mesh dims), the split count of the
 * box and the rule's owner of each piece. */
#include "planner/layout_plan.h"
#include "planner/layout_plan_int.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/checked.h"
#include "model/box.h"
#include "model/layout.h"

uint32_t dcpi_split_pieces(int64_t nbytes, int64_t rows, uint32_t nholders, uint32_t ndim,
                           const dcpi_save_opts *opts, int64_t *rows_per) {
  if (opts->policy == DCPI_BALANCE_LOWEST_RANK || nholders < 2 || ndim == 0) return 1;
  int64_t k = nbytes / ((int64_t)opts->block_size * DCPI_SPLIT_MIN_BLOCKS);
  if (k > nholders) k = nholders;
  if (k > rows) k = rows;
  if (k < 2) return 1;
  *rows_per = (rows + k - 1) / k;
  return (uint32_t)((rows + *rows_per - 1) / *rows_per);
}

uint64_t dcpi_layout_group_hash(const int32_t *holders, uint32_t n) {
  return XXH3_64bits(holders, (size_t)n * sizeof *holders);
}

int dcpi_layout_group_cmp(uint64_t ha, const int32_t *ga, uint32_t na, uint64_t hb,
                          const int32_t *gb, uint32_t nb) {
  if (ha != hb) return ha < hb ? -1 : 1;
  if (na != nb) return na < nb ? -1 : 1;
  for (uint32_t k = 0; k < na; k++)
    if (ga[k] != gb[k]) return ga[k] < gb[k] ? -1 : 1;
  return 0;
}

int32_t dcpi_layout_owner(const int32_t *holders, uint32_t n, uint32_t piece, uint64_t start,
                          dcpi_balance_policy policy) {
  if (policy == DCPI_BALANCE_LOWEST_RANK || n < 2) return holders[0];
  return holders[(start % n + piece % n) % n];
}

typedef struct writes {
  dcpi_layout_write *w;
  size_t n, cap;
} writes;

dcp_status dcpi_lp_check_tensor(const dcpi_layout_tensor *t, int32_t world, dcpi_err *err) {
  const dcp_layout *l = t->layout;
  if (!t->fqn || !l || (t->ndim && !t->shape))
    return dcpi_fail(err, DCP_EINVAL, "layout plan: a tensor without fqn, layout or shape");
  if (l->tensor_ndim != t->ndim)
    return dcpi_fail(err, DCP_EINVAL, "layout plan: tensor '%s' has %u dims, its layout maps %u",
                     t->fqn, t->ndim, l->tensor_ndim);
  if (l->by_rank[l->nranks - 1].rank >= world)
    return dcpi_fail(err, DCP_EINVAL,
                     "layout plan: tensor '%s': the mesh names rank %d, the world has %d",
                     t->fqn, l->by_rank[l->nranks - 1].rank, world);
  return dcpi_check_shape(t->ndim, t->shape, dcp_dtype_size(t->dtype), t->fqn, err);
}

void dcpi_lp_piece_of(uint32_t nd, const int64_t *off, const int64_t *sz, uint32_t k,
                     int64_t rows_per, uint32_t p, int64_t rows, int64_t row_bytes,
                     int64_t *box, int64_t *nbytes, uint64_t *at) {
  memcpy(box, off, nd * sizeof *off);
  memcpy(box + nd, sz, nd * sizeof *sz);
  *at = 0;
  *nbytes = rows * row_bytes;
  if (k < 2) return;
  int64_t r0 = (int64_t)p * rows_per, n = r0 + rows_per <= rows ? rows_per : rows - r0;
  box[0] += r0;
  box[nd] = n;
  *nbytes = n * row_bytes;
  *at = (uint64_t)(r0 * row_bytes);
}

dcpi_lp_split dcpi_lp_split_of(const dcpi_layout_tensor *t, const int64_t *sz, uint32_t ng,
                      const dcpi_save_opts *opts) {
  int64_t numel;
  dcpi_numel(t->ndim, sz, &numel); /* inside a checked shape */
  int64_t nbytes = numel * (int64_t)dcp_dtype_size(t->dtype);
  dcpi_lp_split s = {.rows = t->ndim ? sz[0] : 1, .per = 0};
  s.row_bytes = s.rows ? nbytes / s.rows : 0;
  s.k = dcpi_split_pieces(nbytes, s.rows, ng, t->ndim, opts, &s.per);
  return s;
}

/* One box the rank holds: its tensor, box, holders (its replica group,
 * ascending, owned) and split. */
typedef struct held {
  const dcpi_layout_tensor *t;
  uint32_t ti, ng;
  uint32_t part; /* which of the rank's chunks of the tensor (a flat range's box) */
  int32_t *group;
  uint64_t gh;
  int64_t off[DCP_MAX_NDIM], sz[DCP_MAX_NDIM];
  dcpi_lp_split s;
} held;

typedef struct helds {
  held *h;
  size_t n, cap;
} helds;

static void helds_free(helds *hs) {
  for (size_t i = 0; i < hs->n; i++) free(hs->h[i].group);
  free(hs->h);
}

/* Append the pieces of x that the rule, from start, gives to rank. */
static dcp_status add_pieces(writes *ws, const held *x, uint64_t start, int32_t rank,
                             const dcpi_save_opts *opts) {
  for (uint32_t p = 0; p < x->s.k; p++) {
    if (dcpi_layout_owner(x->group, x->ng, p, start, opts->policy) != rank) continue;
    if (DCPI_RESERVE(ws->w, ws->cap, ws->n + 1)) return DCP_ENOMEM;
    dcpi_layout_write *w = &ws->w[ws->n++];
    *w = (dcpi_layout_write){.tensor = x->ti, .piece = p, .npieces = x->s.k, .part = x->part};
    dcpi_lp_piece_of(x->t->ndim, x->off, x->sz, x->s.k, x->s.per, p, x->s.rows, x->s.row_bytes, w->box,
             &w->nbytes, &w->piece_offset);
  }
  return DCP_OK;
}

size_t dcpi_lp_boxes_at(const dcpi_layout_tensor *t, int64_t pos, int64_t *off, int64_t *sz) {
  size_t n;
  if (t->flat) {
    dcpi_layout_flat_boxes_at(t->layout, t->shape, pos, t->flat_dims, off, sz, &n);
    return n;
  }
  dcpi_layout_box_at(t->layout, t->shape, pos, off, sz);
  for (uint32_t d = 0; d < t->ndim; d++)
    if (sz[d] == 0) return 0; /* an empty box is never written */
  return 1;
}

uint32_t dcpi_lp_fixed_dims(const dcpi_layout_tensor *t) {
  return dcpi_layout_sharding_dims(t->layout) | (t->flat ? t->flat_dims : 0);
}

/* Record the boxes rank holds of tensor ti (none when its mesh lacks the
 * rank or they are empty), each with its holders. */
static dcp_status hold_tensor(helds *hs, const dcpi_layout_tensor *t, uint32_t ti, int32_t world,
                              int32_t rank, const dcpi_save_opts *opts, dcpi_err *err) {
  dcp_status rc = dcpi_lp_check_tensor(t, world, err);
  if (rc) return rc;
  int64_t pos = dcpi_layout_position(t->layout, rank);
  if (pos < 0) return DCP_OK;
  int64_t off[DCPI_LP_MAXB * DCP_MAX_NDIM], sz[DCPI_LP_MAXB * DCP_MAX_NDIM];
  size_t nb = dcpi_lp_boxes_at(t, pos, off, sz), ng;
  uint32_t fixed = dcpi_lp_fixed_dims(t);
  dcpi_layout_holders(t->layout, pos, fixed, NULL, &ng);
  for (size_t b = 0; b < nb; b++) {
    held x = {.t = t, .ti = ti, .part = (uint32_t)b, .ng = (uint32_t)ng};
    memcpy(x.off, off + b * t->ndim, t->ndim * sizeof *off);
    memcpy(x.sz, sz + b * t->ndim, t->ndim * sizeof *sz);
    x.group = malloc(ng * sizeof *x.group);
    if (!x.group || dcpi_layout_holders(t->layout, pos, fixed, x.group, &ng) ||
        DCPI_RESERVE(hs->h, hs->cap, hs->n + 1)) {
      free(x.group);
      return dcpi_fail(err, DCP_ENOMEM, "layout plan: out of memory");
    }
    x.gh = dcpi_layout_group_hash(x.group, x.ng);
    x.s = dcpi_lp_split_of(t, x.sz, x.ng, opts);
    hs->h[hs->n++] = x;
  }
  return DCP_OK;
}

static int cmp_held(const void *pa, const void *pb) {
  const held *a = pa, *b = pb;
  int c = dcpi_layout_group_cmp(a->gh, a->group, a->ng, b->gh, b->group, b->ng);
  if (c) return c;
  size_t n = a->t->fqn_len < b->t->fqn_len ? a->t->fqn_len : b->t->fqn_len;
  c = memcmp(a->t->fqn, b->t->fqn, n);
  if (c || a->t->fqn_len != b->t->fqn_len)
    return c ? c : (a->t->fqn_len > b->t->fqn_len) - (a->t->fqn_len < b->t->fqn_len);
  /* a flat range's boxes share a holder set: by offset, as the whole plan
   * orders a tensor's items (the boxes are disjoint, so offsets differ) */
  for (uint32_t d = 0; d < a->t->ndim; d++)
    if (a->off[d] != b->off[d]) return a->off[d] < b->off[d] ? -1 : 1;
  return 0;
}

static int cmp_write(const void *pa, const void *pb) {
  const dcpi_layout_write *a = pa, *b = pb;
  if (a->tensor != b->tensor) return a->tensor < b->tensor ? -1 : 1;
  if (a->part != b->part) return a->part < b->part ? -1 : 1;
  return (a->piece > b->piece) - (a->piece < b->piece);
}

/* The rank's writes: per holder set, the starts run over its items. */
static dcp_status rotate(helds *hs, writes *ws, int32_t rank, const dcpi_save_opts *opts,
                         dcpi_err *err) {
  dcpi_sort(hs->h, hs->n, sizeof *hs->h, cmp_held);
  uint64_t start = 0;
  for (size_t i = 0; i < hs->n; i++) {
    const held *x = &hs->h[i];
    if (i && dcpi_layout_group_cmp(x[-1].gh, x[-1].group, x[-1].ng, x->gh, x->group, x->ng))
      start = 0;
    if (add_pieces(ws, x, start, rank, opts)) return dcpi_fail(err, DCP_ENOMEM, "layout plan: out of memory");
    start += x->s.k;
  }
  dcpi_sort(ws->w, ws->n, sizeof *ws->w, cmp_write);
  return DCP_OK;
}

dcp_status dcpi_layout_plan_rank(const dcpi_layout_tensor *tensors, size_t n, int32_t world,
                                 int32_t rank, const dcpi_save_opts *opts,
                                 dcpi_layout_write **out, size_t *count, dcpi_err *err) {
  if (!out || !count || (n && !tensors) || n > UINT32_MAX)
    return dcpi_fail(err, DCP_EINVAL, "layout plan: NULL arguments");
  *out = NULL;
  *count = 0;
  dcpi_save_opts o;
  if (opts) o = *opts;
  else dcpi_save_opts_init(&o);
  dcp_status rc = dcpi_save_opts_check(&o, err);
  if (!rc && (world < 1 || rank < 0 || rank >= world))
    rc = dcpi_fail(err, DCP_EINVAL, "layout plan: rank %d in a world of %d", rank, world);
  helds hs = {0};
  writes ws = {0};
  for (size_t i = 0; !rc && i < n; i++)
    rc = hold_tensor(&hs, &tensors[i], (uint32_t)i, world, rank, &o, err);
  if (!rc) rc = rotate(&hs, &ws, rank, &o, err);
  helds_free(&hs);
  if (rc) {
    free(ws.w);
    return rc;
  }
  *out = ws.w;
  *count = ws.n;
  return DCP_OK;
}

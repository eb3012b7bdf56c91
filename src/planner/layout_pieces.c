/* layout_pieces.c — every piece a layout tensor's layout gives, and one
 * piece found from its offset alone (layout_plan.h, "Pieces"). A tensor's
 * pieces come in units: a cell of the mesh dims that shard it or, for a
 * flat tensor, one part of a cell's flat range; each unit's boxes are split
 * over the unit's holders. The unit of an offset is arithmetic (ceil-divided
 * cells and ranges), so the commit can check a reported piece against the
 * layout and mark it in a bit per slot, without a table of pieces. */
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "model/box.h"
#include "model/layout.h"
#include "planner/layout_plan.h"
#include "planner/layout_plan_int.h"

/* The replica count of t's layout and per tensor dim its shard count. */
static int64_t shard_counts(const dcp_layout *l, uint32_t ndim, int64_t *shards) {
  int64_t cells = 1;
  for (uint32_t d = 0; d < ndim; d++) {
    shards[d] = 1;
    for (uint32_t m = 0; m < l->mesh_ndim; m++)
      if (l->tensor_map[d] & (1u << m)) shards[d] *= l->mesh_shape[m];
    cells *= shards[d];
  }
  return l->nranks / cells;
}

/* The pieces of cell `cell` (row-major over shards) of t. */
static dcp_status cell_pieces(const dcpi_layout_tensor *t, const int64_t *shards, int64_t cell,
                              uint32_t ng, const dcpi_save_opts *opts, dcpi_layout_piece_fn fn,
                              void *arg) {
  int64_t off[DCP_MAX_NDIM], sz[DCP_MAX_NDIM], box[2 * DCP_MAX_NDIM], nbytes;
  uint64_t at;
  for (uint32_t d = t->ndim; d-- > 0;) {
    dcpi_layout_split(t->shape[d], shards[d], cell % shards[d], &off[d], &sz[d]);
    if (sz[d] == 0) return DCP_OK;
    cell /= shards[d];
  }
  dcpi_lp_split s = dcpi_lp_split_of(t, sz, ng, opts);
  dcp_status rc = DCP_OK;
  for (uint32_t p = 0; !rc && p < s.k; p++) {
    dcpi_lp_piece_of(t->ndim, off, sz, s.k, s.per, p, s.rows, s.row_bytes, box, &nbytes, &at);
    rc = fn(arg, box, nbytes, p, s.k);
  }
  return rc;
}

/* Every piece of flat tensor t: the boxes of the range of each position
 * that leads its holders, split over them. */
static dcp_status flat_pieces(const dcpi_layout_tensor *t, const dcpi_save_opts *opts,
                              dcpi_layout_piece_fn fn, void *arg) {
  int64_t off[DCPI_LP_MAXB * DCP_MAX_NDIM], sz[DCPI_LP_MAXB * DCP_MAX_NDIM], box[2 * DCP_MAX_NDIM], nbytes;
  uint64_t at;
  uint32_t fixed = dcpi_lp_fixed_dims(t);
  size_t ng;
  dcpi_layout_holders(t->layout, 0, fixed, NULL, &ng);
  dcp_status rc = DCP_OK;
  for (int64_t p = 0; !rc && p < t->layout->nranks; p++) {
    if (!dcpi_layout_leads(t->layout, p, fixed)) continue;
    size_t n = dcpi_lp_boxes_at(t, p, off, sz);
    for (size_t b = 0; !rc && b < n; b++) {
      dcpi_lp_split s = dcpi_lp_split_of(t, sz + b * t->ndim, (uint32_t)ng, opts);
      for (uint32_t k = 0; !rc && k < s.k; k++) {
        dcpi_lp_piece_of(t->ndim, off + b * t->ndim, sz + b * t->ndim, s.k, s.per, k, s.rows,
                 s.row_bytes, box, &nbytes, &at);
        rc = fn(arg, box, nbytes, k, s.k);
      }
    }
  }
  return rc;
}

dcp_status dcpi_layout_pieces(const dcpi_layout_tensor *t, int32_t world,
                              const dcpi_save_opts *opts, dcpi_layout_piece_fn fn, void *arg,
                              dcpi_err *err) {
  if (!t || !fn) return dcpi_fail(err, DCP_EINVAL, "layout pieces: NULL arguments");
  dcpi_save_opts o;
  if (opts) o = *opts;
  else dcpi_save_opts_init(&o);
  dcp_status rc = dcpi_save_opts_check(&o, err);
  if (!rc) rc = dcpi_lp_check_tensor(t, world, err);
  if (rc) return rc;
  if (t->flat) return flat_pieces(t, &o, fn, arg);
  int64_t shards[DCP_MAX_NDIM];
  int64_t ng = shard_counts(t->layout, t->ndim, shards), cells = t->layout->nranks / ng;
  for (int64_t c = 0; !rc && c < cells; c++)
    rc = cell_pieces(t, shards, c, (uint32_t)ng, &o, fn, arg);
  return rc;
}

/* ---- a piece by its offset ------------------------------------------------ */

/* A bound on the pieces of any box of t: a box splits into at most
 * k = min(holders, rows, bytes / (DCPI_SPLIT_MIN_BLOCKS blocks)) pieces
 * (dcpi_split_pieces; the count itself is not monotone in the box: 4 rows
 * over 3 holders give 2 pieces, 3 rows give 3), and cell 0 is the largest
 * (ceil-divided) with every box inside a cell. */
static uint32_t max_split(const dcpi_layout_tensor *t, const dcpi_piece_space *ps) {
  if (ps->opts.policy == DCPI_BALANCE_LOWEST_RANK || ps->ng < 2 || t->ndim == 0) return 1;
  int64_t off, sz, rows = 0, numel = 1;
  for (uint32_t d = 0; d < t->ndim; d++) {
    dcpi_layout_split(t->shape[d], ps->shards[d], 0, &off, &sz);
    if (d == 0) rows = sz;
    numel *= sz; /* inside a checked shape */
  }
  int64_t k = numel * (int64_t)dcp_dtype_size(t->dtype) /
              ((int64_t)ps->opts.block_size * DCPI_SPLIT_MIN_BLOCKS);
  if (k > ps->ng) k = ps->ng;
  if (k > rows) k = rows;
  return k < 2 ? 1 : (uint32_t)k;
}

dcp_status dcpi_piece_space_init(const dcpi_layout_tensor *t, int32_t world,
                                 const dcpi_save_opts *opts, dcpi_piece_space *ps,
                                 dcpi_err *err) {
  if (!t || !ps) return dcpi_fail(err, DCP_EINVAL, "piece space: NULL arguments");
  memset(ps, 0, sizeof *ps);
  if (opts) ps->opts = *opts;
  else dcpi_save_opts_init(&ps->opts);
  dcp_status rc = dcpi_save_opts_check(&ps->opts, err);
  if (!rc) rc = dcpi_lp_check_tensor(t, world, err);
  if (rc) return rc;
  const dcp_layout *l = t->layout;
  ps->cells = l->nranks / shard_counts(l, t->ndim, ps->shards);
  ps->parts = 1;
  for (uint32_t m = 0; t->flat && m < l->mesh_ndim; m++)
    if (t->flat_dims & (1u << m)) ps->parts *= l->mesh_shape[m];
  ps->ng = (uint32_t)(l->nranks / (ps->cells * ps->parts));
  ps->maxb = t->flat && t->ndim ? 2 * t->ndim - 1 : 1;
  ps->kmax = max_split(t, ps);
  uint64_t units = (uint64_t)ps->cells * (uint64_t)ps->parts, per = (uint64_t)ps->maxb * ps->kmax;
  if (per && units > UINT64_MAX / per)
    return dcpi_fail(err, DCP_EOVERFLOW, "tensor '%s': its layout has too many pieces", t->fqn);
  ps->nslots = units * per;
  return DCP_OK;
}

/* The offset of the element with row-major index key of t; false past it. */
static bool unravel_key(const dcpi_layout_tensor *t, uint64_t key, int64_t *off) {
  for (uint32_t d = t->ndim; d-- > 0;) {
    uint64_t n = (uint64_t)t->shape[d];
    if (n == 0) return false;
    off[d] = (int64_t)(key % n);
    key /= n;
  }
  return key == 0;
}

/* The index p of the piece of box (boff, bsz) that starts at off, when
 * one does: off is the box's offset but in the first dim, where it is a
 * whole number of the split's rows past it. */
static bool piece_at(const dcpi_layout_tensor *t, const dcpi_piece_space *ps, const int64_t *off,
                     const int64_t *boff, const int64_t *bsz, int64_t *box, int64_t *nbytes,
                     uint32_t *p) {
  for (uint32_t d = 1; d < t->ndim; d++)
    if (off[d] != boff[d]) return false;
  dcpi_lp_split s = dcpi_lp_split_of(t, bsz, ps->ng, &ps->opts);
  int64_t delta = t->ndim ? off[0] - boff[0] : 0;
  if (s.k < 2 ? delta != 0 : delta % s.per != 0) return false;
  *p = s.k < 2 ? 0 : (uint32_t)(delta / s.per);
  if (*p >= s.k) return false;
  uint64_t at;
  dcpi_lp_piece_of(t->ndim, boff, bsz, s.k, s.per, *p, s.rows, s.row_bytes, box, nbytes, &at);
  return true;
}

static bool inside(uint32_t nd, const int64_t *off, const int64_t *boff, const int64_t *bsz) {
  for (uint32_t d = 0; d < nd; d++)
    if (off[d] < boff[d] || off[d] - boff[d] >= bsz[d]) return false;
  return true;
}

bool dcpi_piece_locate(const dcpi_piece_space *ps, const dcpi_layout_tensor *t, uint64_t key,
                       int64_t *box, int64_t *nbytes, uint64_t *slot) {
  int64_t off[DCP_MAX_NDIM], coff[DCP_MAX_NDIM], csz[DCP_MAX_NDIM], cell = 0;
  if (!unravel_key(t, key, off)) return false;
  for (uint32_t d = 0; d < t->ndim; d++) { /* the cell holding off: never empty */
    int64_t e = t->shape[d], n = ps->shards[d], chunk = e / n + (e % n != 0);
    int64_t ci = off[d] / chunk;
    cell = cell * n + ci;
    dcpi_layout_split(e, n, ci, &coff[d], &csz[d]);
  }
  uint32_t p;
  if (!t->flat) {
    if (!piece_at(t, ps, off, coff, csz, box, nbytes, &p)) return false;
    *slot = (uint64_t)cell * ps->kmax + p;
    return true;
  }
  int64_t lin = 0, numel = 1, begin, count;
  for (uint32_t d = 0; d < t->ndim; d++) {
    lin = lin * csz[d] + (off[d] - coff[d]);
    numel *= csz[d];
  }
  int64_t chunk = numel / ps->parts + (numel % ps->parts != 0), part = lin / chunk;
  dcpi_layout_split(numel, ps->parts, part, &begin, &count);
  int64_t boff[DCPI_LP_MAXB * DCP_MAX_NDIM], bsz[DCPI_LP_MAXB * DCP_MAX_NDIM];
  size_t nb;
  /* inside the cell by construction: cannot fail */
  dcpi_flat_to_boxes(t->ndim, coff, csz, begin, count, boff, bsz, DCPI_LP_MAXB, &nb, NULL);
  for (size_t b = 0; b < nb; b++) {
    const int64_t *o = boff + b * t->ndim, *z = bsz + b * t->ndim;
    if (!inside(t->ndim, off, o, z)) continue;
    if (!piece_at(t, ps, off, o, z, box, nbytes, &p)) return false;
    uint64_t unit = (uint64_t)cell * (uint64_t)ps->parts + (uint64_t)part;
    *slot = (unit * ps->maxb + b) * ps->kmax + p;
    return true;
  }
  return false; /* unreachable: the range covers every element of its part */
}

uint64_t dcpi_piece_count(const dcpi_piece_space *ps, const dcpi_layout_tensor *t) {
  uint64_t total = 0;
  int64_t off[DCP_MAX_NDIM], sz[DCP_MAX_NDIM];
  for (int64_t c = 0; c < ps->cells; c++) {
    int64_t rest = c, numel = 1;
    bool empty = false;
    for (uint32_t d = t->ndim; d-- > 0;) {
      dcpi_layout_split(t->shape[d], ps->shards[d], rest % ps->shards[d], &off[d], &sz[d]);
      rest /= ps->shards[d];
      empty |= sz[d] == 0;
      numel *= sz[d];
    }
    if (empty) continue;
    if (!t->flat) {
      total += dcpi_lp_split_of(t, sz, ps->ng, &ps->opts).k;
      continue;
    }
    for (int64_t part = 0; part < ps->parts; part++) {
      int64_t begin, count, boff[DCPI_LP_MAXB * DCP_MAX_NDIM], bsz[DCPI_LP_MAXB * DCP_MAX_NDIM];
      size_t nb;
      dcpi_layout_split(numel, ps->parts, part, &begin, &count);
      dcpi_flat_to_boxes(t->ndim, off, sz, begin, count, boff, bsz, DCPI_LP_MAXB, &nb, NULL);
      for (size_t b = 0; b < nb; b++)
        total += dcpi_lp_split_of(t, bsz + b * t->ndim, ps->ng, &ps->opts).k;
    }
  }
  return total;
}

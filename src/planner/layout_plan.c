/* layout_plan.c — the owner rule for layout tensors and per-rank planning
 * (layout_plan.h). A rank's writes of a layout tensor follow from the
 * layout alone: its box, its replica group (every mesh position with the
 * rank's coordinates on the sharding mesh dims), the split count of the
 * box and the rule's owner of each piece. */
#include "planner/layout_plan.h"

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

static void put_le64(uint8_t *p, int64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)v >> (8 * i));
}

uint64_t dcpi_layout_item_hash(const char *fqn, size_t fqn_len, uint32_t ndim,
                               const int64_t *offset, const int64_t *size) {
  uint8_t buf[DCP_MAX_NAME + 16 * DCP_MAX_NDIM];
  size_t len = fqn_len <= DCP_MAX_NAME ? fqn_len : DCP_MAX_NAME;
  if (ndim > DCP_MAX_NDIM) ndim = DCP_MAX_NDIM;
  memcpy(buf, fqn, len);
  for (uint32_t d = 0; d < ndim; d++) {
    put_le64(buf + len + 16 * d, offset[d]);
    put_le64(buf + len + 16 * d + 8, size[d]);
  }
  return XXH3_64bits(buf, len + 16 * (size_t)ndim);
}

int32_t dcpi_layout_owner(const int32_t *holders, uint32_t n, uint32_t piece, uint64_t h,
                          dcpi_balance_policy policy) {
  if (policy == DCPI_BALANCE_LOWEST_RANK || n < 2) return holders[0];
  return holders[(h % n + piece % n) % n];
}

typedef struct writes {
  dcpi_layout_write *w;
  size_t n, cap;
} writes;

static dcp_status check_tensor(const dcpi_layout_tensor *t, int32_t world, dcpi_err *err) {
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

/* Append the pieces of box (off, sz) of tensor ti that the rule gives to
 * rank, its holders being group[0..ng). */
static dcp_status add_pieces(writes *ws, const dcpi_layout_tensor *t, uint32_t ti,
                             const int64_t *off, const int64_t *sz, const int32_t *group,
                             uint32_t ng, int32_t rank, const dcpi_save_opts *opts) {
  int64_t numel, per = 0;
  dcpi_numel(t->ndim, sz, &numel); /* inside a checked shape */
  int64_t nbytes = numel * (int64_t)dcp_dtype_size(t->dtype);
  int64_t rows = t->ndim ? sz[0] : 1;
  uint32_t k = dcpi_split_pieces(nbytes, rows, ng, t->ndim, opts, &per);
  uint64_t h = dcpi_layout_item_hash(t->fqn, t->fqn_len, t->ndim, off, sz);
  for (uint32_t p = 0; p < k; p++) {
    if (dcpi_layout_owner(group, ng, p, h, opts->policy) != rank) continue;
    if (DCPI_RESERVE(ws->w, ws->cap, ws->n + 1)) return DCP_ENOMEM;
    dcpi_layout_write *w = &ws->w[ws->n++];
    *w = (dcpi_layout_write){.tensor = ti, .piece = p, .npieces = k, .nbytes = nbytes};
    memcpy(w->box, off, t->ndim * sizeof *off);
    memcpy(w->box + t->ndim, sz, t->ndim * sizeof *sz);
    if (k > 1) {
      int64_t r0 = (int64_t)p * per, n = r0 + per <= rows ? per : rows - r0;
      int64_t row_bytes = nbytes / rows;
      w->box[0] += r0;
      w->box[t->ndim] = n;
      w->nbytes = n * row_bytes;
      w->piece_offset = (uint64_t)(r0 * row_bytes);
    }
  }
  return DCP_OK;
}

/* The pieces rank writes of tensor ti. */
static dcp_status plan_tensor(writes *ws, const dcpi_layout_tensor *t, uint32_t ti,
                              int32_t world, int32_t rank, const dcpi_save_opts *opts,
                              dcpi_err *err) {
  dcp_status rc = check_tensor(t, world, err);
  if (rc) return rc;
  int64_t pos = dcpi_layout_position(t->layout, rank);
  if (pos < 0) return DCP_OK;
  int64_t off[DCP_MAX_NDIM], sz[DCP_MAX_NDIM];
  dcpi_layout_box_at(t->layout, t->shape, pos, off, sz);
  for (uint32_t d = 0; d < t->ndim; d++)
    if (sz[d] == 0) return DCP_OK; /* an empty box is never written */
  size_t ng;
  dcp_layout_replica_group(t->layout, rank, NULL, 0, &ng);
  int32_t *group = malloc(ng * sizeof *group);
  if (!group || dcp_layout_replica_group(t->layout, rank, group, ng, &ng)) {
    free(group);
    return dcpi_fail(err, DCP_ENOMEM, "layout plan: out of memory");
  }
  rc = add_pieces(ws, t, ti, off, sz, group, (uint32_t)ng, rank, opts);
  free(group);
  return rc ? dcpi_fail(err, rc, "layout plan: out of memory") : DCP_OK;
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
  writes ws = {0};
  for (size_t i = 0; !rc && i < n; i++)
    rc = plan_tensor(&ws, &tensors[i], (uint32_t)i, world, rank, &o, err);
  if (rc) {
    free(ws.w);
    return rc;
  }
  *out = ws.w;
  *count = ws.n;
  return DCP_OK;
}

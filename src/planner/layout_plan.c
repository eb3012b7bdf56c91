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

/* Piece p of k (rows_per rows each but the last) of box (off, sz), `rows`
 * rows of row_bytes: its box, bytes and byte offset in the box. */
static void piece_of(uint32_t nd, const int64_t *off, const int64_t *sz, uint32_t k,
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

/* The split of box (off, sz) of t over ng holders: piece count, rows per
 * piece, rows and bytes per row (a 0-d box is one row). */
typedef struct split {
  uint32_t k;
  int64_t per, rows, row_bytes;
} split;

static split split_of(const dcpi_layout_tensor *t, const int64_t *sz, uint32_t ng,
                      const dcpi_save_opts *opts) {
  int64_t numel;
  dcpi_numel(t->ndim, sz, &numel); /* inside a checked shape */
  int64_t nbytes = numel * (int64_t)dcp_dtype_size(t->dtype);
  split s = {.rows = t->ndim ? sz[0] : 1, .per = 0};
  s.row_bytes = s.rows ? nbytes / s.rows : 0;
  s.k = dcpi_split_pieces(nbytes, s.rows, ng, t->ndim, opts, &s.per);
  return s;
}

/* Append the pieces of box (off, sz) of tensor ti that the rule gives to
 * rank, its holders being group[0..ng). */
static dcp_status add_pieces(writes *ws, const dcpi_layout_tensor *t, uint32_t ti,
                             const int64_t *off, const int64_t *sz, const int32_t *group,
                             uint32_t ng, int32_t rank, const dcpi_save_opts *opts) {
  split s = split_of(t, sz, ng, opts);
  uint64_t h = dcpi_layout_item_hash(t->fqn, t->fqn_len, t->ndim, off, sz);
  for (uint32_t p = 0; p < s.k; p++) {
    if (dcpi_layout_owner(group, ng, p, h, opts->policy) != rank) continue;
    if (DCPI_RESERVE(ws->w, ws->cap, ws->n + 1)) return DCP_ENOMEM;
    dcpi_layout_write *w = &ws->w[ws->n++];
    *w = (dcpi_layout_write){.tensor = ti, .piece = p, .npieces = s.k};
    piece_of(t->ndim, off, sz, s.k, s.per, p, s.rows, s.row_bytes, w->box, &w->nbytes,
             &w->piece_offset);
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
  split s = split_of(t, sz, ng, opts);
  dcp_status rc = DCP_OK;
  for (uint32_t p = 0; !rc && p < s.k; p++) {
    piece_of(t->ndim, off, sz, s.k, s.per, p, s.rows, s.row_bytes, box, &nbytes, &at);
    rc = fn(arg, box, nbytes, p, s.k);
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
  if (!rc) rc = check_tensor(t, world, err);
  if (rc) return rc;
  int64_t shards[DCP_MAX_NDIM];
  int64_t ng = shard_counts(t->layout, t->ndim, shards), cells = t->layout->nranks / ng;
  for (int64_t c = 0; !rc && c < cells; c++)
    rc = cell_pieces(t, shards, c, (uint32_t)ng, &o, fn, arg);
  return rc;
}

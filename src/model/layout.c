/* layout.c — device mesh + tensor_map → a rank's box and replica group,
 * computed locally with no communication. */
#include "model/layout.h"

#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/err.h"
#include "model/box.h"

static int cmp_rank_pos(const void *a, const void *b) {
  int32_t x = ((const dcpi_rank_pos *)a)->rank, y = ((const dcpi_rank_pos *)b)->rank;
  return (x > y) - (x < y);
}

static dcp_status check_mesh(uint32_t mesh_ndim, const int64_t *mesh_shape, int64_t *nranks,
                             dcpi_err *err) {
  if (mesh_ndim < 1 || mesh_ndim > DCP_MAX_MESH_NDIM || !mesh_shape)
    return dcpi_fail(err, DCP_EINVAL, "layout: mesh ndim %u not in 1..%d", mesh_ndim,
                     DCP_MAX_MESH_NDIM);
  int64_t n = 1;
  for (uint32_t m = 0; m < mesh_ndim; m++) {
    if (mesh_shape[m] < 1)
      return dcpi_fail(err, DCP_EINVAL, "layout: mesh extent %lld in dim %u is not >= 1",
                       (long long)mesh_shape[m], m);
    if (!dcpi_mul_i64(n, mesh_shape[m], &n) || n > INT32_MAX)
      return dcpi_fail(err, DCP_EOVERFLOW, "layout: the mesh has more than 2^31 ranks");
  }
  *nranks = n;
  return DCP_OK;
}

dcp_status dcpi_layout_check_map(uint32_t mesh_ndim, uint32_t tensor_ndim, const uint32_t *map,
                                 dcpi_err *err) {
  if (tensor_ndim > DCP_MAX_NDIM || (tensor_ndim && !map))
    return dcpi_fail(err, DCP_EINVAL, "layout: tensor ndim %u invalid or map NULL",
                     tensor_ndim);
  uint32_t used = 0, valid = mesh_ndim >= 32 ? UINT32_MAX : ((1u << mesh_ndim) - 1);
  for (uint32_t d = 0; d < tensor_ndim; d++) {
    if (map[d] & ~valid)
      return dcpi_fail(err, DCP_EINVAL,
                       "layout: tensor_map[%u]=0x%x names a mesh dim >= mesh ndim %u", d,
                       map[d], mesh_ndim);
    if (map[d] & used)
      return dcpi_fail(err, DCP_EINVAL,
                       "layout: tensor_map[%u]=0x%x reuses a mesh dim that already shards "
                       "another tensor dim",
                       d, map[d]);
    used |= map[d];
  }
  return DCP_OK;
}

dcp_status dcpi_layout_create(uint32_t mesh_ndim, const int64_t *mesh_shape,
                              const int32_t *mesh_ranks, uint32_t tensor_ndim,
                              const uint32_t *tensor_map, dcp_layout **out, dcpi_err *err) {
  int64_t n = 0; /* set by check_mesh; gcc 12 -O2 cannot see it (-Wmaybe-uninitialized) */
  dcp_status rc;
  if (!out) return dcpi_fail(err, DCP_EINVAL, "layout: out is NULL");
  *out = NULL;
  if ((rc = check_mesh(mesh_ndim, mesh_shape, &n, err))) return rc;
  if ((rc = dcpi_layout_check_map(mesh_ndim, tensor_ndim, tensor_map, err))) return rc;
  dcp_layout *l = calloc(1, sizeof *l);
  if (!l || !(l->ranks = malloc((size_t)n * sizeof *l->ranks)) ||
      !(l->by_rank = malloc((size_t)n * sizeof *l->by_rank))) {
    dcp_layout_free(l);
    return dcpi_fail(err, DCP_ENOMEM, "layout: out of memory for %lld ranks", (long long)n);
  }
  l->mesh_ndim = mesh_ndim;
  memcpy(l->mesh_shape, mesh_shape, mesh_ndim * sizeof *mesh_shape);
  l->nranks = n;
  l->tensor_ndim = tensor_ndim;
  if (tensor_ndim) memcpy(l->tensor_map, tensor_map, tensor_ndim * sizeof *tensor_map);
  for (int64_t p = 0; p < n; p++) {
    int32_t r = mesh_ranks ? mesh_ranks[p] : (int32_t)p;
    if (r < 0) {
      dcp_layout_free(l);
      return dcpi_fail(err, DCP_EINVAL, "layout: negative rank %d at mesh position %lld", r,
                       (long long)p);
    }
    l->ranks[p] = r;
    l->by_rank[p] = (dcpi_rank_pos){r, p};
  }
  dcpi_sort(l->by_rank, (size_t)n, sizeof *l->by_rank, cmp_rank_pos);
  for (int64_t p = 1; p < n; p++)
    if (l->by_rank[p].rank == l->by_rank[p - 1].rank) {
      int32_t r = l->by_rank[p].rank;
      dcp_layout_free(l);
      return dcpi_fail(err, DCP_EINVAL, "layout: rank %d appears twice in the mesh", r);
    }
  *out = l;
  return DCP_OK;
}

dcp_status dcp_layout_create(dcp_ctx *ctx, uint32_t mesh_ndim, const int64_t *mesh_shape,
                             const int32_t *mesh_ranks, uint32_t tensor_ndim,
                             const uint32_t *tensor_map, dcp_layout **out) {
  dcpi_err err;
  dcpi_err_clear(&err);
  dcpi_layout_create(mesh_ndim, mesh_shape, mesh_ranks, tensor_ndim, tensor_map, out, &err);
  return dcpi_ctx_report(ctx, &err);
}

void dcp_layout_free(dcp_layout *l) {
  if (!l) return;
  free(l->ranks);
  free(l->by_rank);
  free(l);
}

dcp_status dcpi_layout_clone(const dcp_layout *src, dcp_layout **out) {
  return dcpi_layout_create(src->mesh_ndim, src->mesh_shape, src->ranks, src->tensor_ndim,
                            src->tensor_map, out, NULL);
}

int64_t dcpi_layout_position(const dcp_layout *l, int32_t rank) {
  size_t lo = 0, hi = (size_t)l->nranks;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (l->by_rank[mid].rank < rank)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < (size_t)l->nranks && l->by_rank[lo].rank == rank ? l->by_rank[lo].pos : -1;
}

static void unravel(const dcp_layout *l, int64_t pos, int64_t *coord) {
  for (uint32_t m = l->mesh_ndim; m-- > 0;) {
    coord[m] = pos % l->mesh_shape[m];
    pos /= l->mesh_shape[m];
  }
}

void dcpi_layout_box_at(const dcp_layout *l, const int64_t *global_shape, int64_t pos,
                        int64_t *offset, int64_t *size) {
  int64_t coord[DCP_MAX_MESH_NDIM];
  unravel(l, pos, coord);
  for (uint32_t d = 0; d < l->tensor_ndim; d++) {
    int64_t extent = global_shape[d], shards = 1, index = 0;
    for (uint32_t m = 0; m < l->mesh_ndim; m++)
      if (l->tensor_map[d] & (1u << m)) {
        index = index * l->mesh_shape[m] + coord[m];
        shards *= l->mesh_shape[m];
      }
    dcpi_layout_split(extent, shards, index, &offset[d], &size[d]);
  }
}

void dcpi_layout_split(int64_t extent, int64_t shards, int64_t index, int64_t *lo,
                       int64_t *size) {
  /* ceil-divided chunks; computed without extent+shards-1 overflowing */
  int64_t chunk = extent / shards + (extent % shards != 0);
  int64_t l;
  if (!dcpi_mul_i64(index, chunk, &l) || l > extent) l = extent;
  int64_t hi = extent - l < chunk ? extent : l + chunk;
  *lo = l;
  *size = hi - l;
}

uint32_t dcpi_layout_sharding_dims(const dcp_layout *l) {
  uint32_t used = 0;
  for (uint32_t d = 0; d < l->tensor_ndim; d++) used |= l->tensor_map[d];
  return used;
}

bool dcpi_layout_leads(const dcp_layout *l, int64_t pos, uint32_t fixed) {
  int64_t coord[DCP_MAX_MESH_NDIM];
  unravel(l, pos, coord);
  for (uint32_t m = 0; m < l->mesh_ndim; m++)
    if (!(fixed & (1u << m)) && coord[m]) return false;
  return true;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

dcp_status dcpi_layout_holders(const dcp_layout *l, int64_t pos, uint32_t fixed, int32_t *out,
                               size_t *count) {
  int64_t coord[DCP_MAX_MESH_NDIM], group = 1;
  unravel(l, pos, coord);
  for (uint32_t m = 0; m < l->mesh_ndim; m++)
    if (!(fixed & (1u << m))) group *= l->mesh_shape[m];
  *count = (size_t)group;
  if (!out) return DCP_OK;
  /* Walk every combination of the other mesh dims, keeping the
   * coordinates on the fixed dims at pos's. */
  for (int64_t g = 0; g < group; g++) {
    int64_t rest = g, p = 0;
    int64_t c[DCP_MAX_MESH_NDIM];
    for (uint32_t m = l->mesh_ndim; m-- > 0;) {
      if (fixed & (1u << m)) {
        c[m] = coord[m];
      } else {
        c[m] = rest % l->mesh_shape[m];
        rest /= l->mesh_shape[m];
      }
    }
    for (uint32_t m = 0; m < l->mesh_ndim; m++) p = p * l->mesh_shape[m] + c[m];
    out[g] = l->ranks[p];
  }
  dcpi_sort(out, (size_t)group, sizeof *out, cmp_i32);
  return DCP_OK;
}

void dcpi_layout_flat_range_at(const dcp_layout *l, const int64_t *global_shape, int64_t pos,
                               uint32_t flat_dims, int64_t *cell_off, int64_t *cell_sz,
                               int64_t *index, int64_t *nparts, int64_t *begin, int64_t *count) {
  int64_t coord[DCP_MAX_MESH_NDIM], numel = 1, idx = 0, parts = 1;
  dcpi_layout_box_at(l, global_shape, pos, cell_off, cell_sz);
  unravel(l, pos, coord);
  for (uint32_t m = 0; m < l->mesh_ndim; m++)
    if (flat_dims & (1u << m)) {
      idx = idx * l->mesh_shape[m] + coord[m];
      parts *= l->mesh_shape[m]; /* <= nranks < 2^31 */
    }
  for (uint32_t d = 0; d < l->tensor_ndim; d++) numel *= cell_sz[d]; /* <= a checked shape's */
  *index = idx;
  *nparts = parts;
  dcpi_layout_split(numel, parts, idx, begin, count);
}

void dcpi_layout_flat_boxes_at(const dcp_layout *l, const int64_t *global_shape, int64_t pos,
                               uint32_t flat_dims, int64_t *off, int64_t *sz, size_t *n) {
  int64_t coff[DCP_MAX_NDIM], csz[DCP_MAX_NDIM], idx, parts, begin, count;
  dcpi_layout_flat_range_at(l, global_shape, pos, flat_dims, coff, csz, &idx, &parts, &begin,
                            &count);
  *n = 0;
  if (count == 0) return;
  /* inside the cell by construction: cannot fail */
  dcpi_flat_to_boxes(l->tensor_ndim, coff, csz, begin, count, off, sz, 2 * DCP_MAX_NDIM - 1, n,
                     NULL);
}

dcp_status dcpi_layout_flat_dims(const dcp_layout *l, uint32_t asked, uint32_t *out,
                                 dcpi_err *err) {
  uint32_t used = dcpi_layout_sharding_dims(l);
  uint32_t all = l->mesh_ndim >= 32 ? UINT32_MAX : (1u << l->mesh_ndim) - 1;
  if (asked & ~all)
    return dcpi_fail(err, DCP_EINVAL, "flat dims 0x%x name a mesh dim >= mesh ndim %u", asked,
                     l->mesh_ndim);
  if (asked & used)
    return dcpi_fail(err, DCP_EINVAL,
                     "flat dims 0x%x include a mesh dim that shards the tensor (tensor_map "
                     "uses 0x%x)", asked, used);
  *out = asked ? asked : all & ~used;
  return DCP_OK;
}

dcp_status dcp_layout_box(const dcp_layout *l, const int64_t *global_shape, int32_t rank,
                          dcp_box *out) {
  if (!l || !out || (l->tensor_ndim && !global_shape)) return DCP_EINVAL;
  for (uint32_t d = 0; d < l->tensor_ndim; d++)
    if (global_shape[d] < 0) return DCP_EINVAL;
  int64_t pos = dcpi_layout_position(l, rank);
  if (pos < 0) return DCP_ENOTFOUND;
  *out = (dcp_box){.ndim = l->tensor_ndim};
  dcpi_layout_box_at(l, global_shape, pos, out->offset, out->size);
  return DCP_OK;
}

dcp_status dcp_layout_flat_range(const dcp_layout *l, const int64_t *global_shape,
                                 uint32_t flat_dims, int32_t rank, dcp_box *cell,
                                 int64_t *flat_begin, int64_t *flat_count) {
  if (!l || !flat_begin || !flat_count || (l->tensor_ndim && !global_shape)) return DCP_EINVAL;
  int64_t numel = 1;
  for (uint32_t d = 0; d < l->tensor_ndim; d++) {
    if (global_shape[d] < 0) return DCP_EINVAL;
    if (!dcpi_mul_i64(numel, global_shape[d], &numel)) return DCP_EOVERFLOW;
  }
  uint32_t dims;
  if (dcpi_layout_flat_dims(l, flat_dims, &dims, NULL)) return DCP_EINVAL;
  int64_t pos = dcpi_layout_position(l, rank);
  if (pos < 0) return DCP_ENOTFOUND;
  dcp_box c = {.ndim = l->tensor_ndim};
  int64_t index, parts;
  dcpi_layout_flat_range_at(l, global_shape, pos, dims, c.offset, c.size, &index, &parts,
                            flat_begin, flat_count);
  if (cell) *cell = c;
  return DCP_OK;
}

dcp_status dcp_layout_replica_group(const dcp_layout *l, int32_t rank, int32_t *out,
                                    size_t cap, size_t *count) {
  if (!l || !count || (cap && !out)) return DCP_EINVAL;
  int64_t pos = dcpi_layout_position(l, rank);
  if (pos < 0) return DCP_ENOTFOUND;
  uint32_t used = dcpi_layout_sharding_dims(l);
  dcpi_layout_holders(l, pos, used, NULL, count);
  if (!cap) return DCP_OK;
  int32_t *all = malloc(*count * sizeof *all);
  if (!all) return DCP_ENOMEM;
  dcpi_layout_holders(l, pos, used, all, count);
  memcpy(out, all, (cap < *count ? cap : *count) * sizeof *out);
  free(all);
  return DCP_OK;
}

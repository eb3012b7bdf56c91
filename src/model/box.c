/* box.c — N-d boxes: element counts, bounds, intersection, and the
 * decomposition of a flat row-major element range into boxes. */
#include "model/box.h"

#include <stdbool.h>
#include <stdio.h>

#include "base/checked.h"

/* Any zero extent makes the count 0 whatever the others are, so [M, M, 0]
 * is as empty (and as valid) as [0, M, M]: look for one before multiplying. */
dcp_status dcpi_numel(uint32_t ndim, const int64_t *sizes, int64_t *numel) {
  bool empty = false;
  for (uint32_t d = 0; d < ndim; d++) {
    if (sizes[d] < 0) return DCP_EINVAL;
    empty |= sizes[d] == 0;
  }
  int64_t n = empty ? 0 : 1;
  for (uint32_t d = 0; d < ndim && !empty; d++)
    if (!dcpi_mul_i64(n, sizes[d], &n)) return DCP_EOVERFLOW;
  *numel = n;
  return DCP_OK;
}

dcp_status dcpi_check_shape(uint32_t ndim, const int64_t *shape, size_t elem_size,
                            const char *what, dcpi_err *err) {
  if (ndim > DCP_MAX_NDIM)
    return dcpi_fail(err, DCP_EINVAL, "%s: ndim %u exceeds DCP_MAX_NDIM (%d)", what, ndim,
                     DCP_MAX_NDIM);
  if (ndim && !shape) return dcpi_fail(err, DCP_EINVAL, "%s: shape is NULL", what);
  for (uint32_t d = 0; d < ndim; d++)
    if (shape[d] < 0)
      return dcpi_fail(err, DCP_EINVAL, "%s: negative extent %lld in dim %u", what,
                       (long long)shape[d], d);
  int64_t n, bytes;
  if (dcpi_numel(ndim, shape, &n) || !dcpi_mul_i64(n, (int64_t)elem_size, &bytes))
    return dcpi_fail(err, DCP_EOVERFLOW, "%s: element count or byte size overflows int64",
                     what);
  return DCP_OK;
}

dcp_status dcpi_check_box_in(uint32_t ndim, const int64_t *shape, const int64_t *offset,
                             const int64_t *size, const char *what, dcpi_err *err) {
  if (ndim && (!offset || !size))
    return dcpi_fail(err, DCP_EINVAL, "%s: box offset or size is NULL", what);
  for (uint32_t d = 0; d < ndim; d++) {
    int64_t end;
    if (offset[d] < 0 || size[d] < 0)
      return dcpi_fail(err, DCP_EINVAL, "%s: negative offset %lld or size %lld in dim %u",
                       what, (long long)offset[d], (long long)size[d], d);
    if (!dcpi_add_i64(offset[d], size[d], &end))
      return dcpi_fail(err, DCP_EOVERFLOW, "%s: offset+size overflows int64 in dim %u", what,
                       d);
    if (end > shape[d])
      return dcpi_fail(err, DCP_EBOUNDS, "%s: box ends at %lld in dim %u, extent is %lld",
                       what, (long long)end, d, (long long)shape[d]);
  }
  return DCP_OK;
}

bool dcpi_box_is_empty(uint32_t ndim, const int64_t *size) {
  for (uint32_t d = 0; d < ndim; d++)
    if (size[d] == 0) return true;
  return false;
}

bool dcpi_box_intersect(uint32_t ndim, const int64_t *a_off, const int64_t *a_sz,
                        const int64_t *b_off, const int64_t *b_sz, int64_t *out_off,
                        int64_t *out_sz) {
  bool nonempty = true;
  for (uint32_t d = 0; d < ndim; d++) {
    int64_t lo = a_off[d] > b_off[d] ? a_off[d] : b_off[d];
    int64_t a_end = a_off[d] + a_sz[d], b_end = b_off[d] + b_sz[d];
    int64_t hi = a_end < b_end ? a_end : b_end;
    out_off[d] = lo;
    out_sz[d] = hi > lo ? hi - lo : 0;
    if (out_sz[d] == 0) nonempty = false;
  }
  return nonempty;
}

bool dcpi_boxes_overlap(uint32_t ndim, const int64_t *a_off, const int64_t *a_sz,
                        const int64_t *b_off, const int64_t *b_sz) {
  for (uint32_t d = 0; d < ndim; d++) {
    int64_t lo = a_off[d] > b_off[d] ? a_off[d] : b_off[d];
    int64_t a_end = a_off[d] + a_sz[d], b_end = b_off[d] + b_sz[d];
    int64_t hi = a_end < b_end ? a_end : b_end;
    if (hi <= lo) return false;
  }
  return true;
}

const char *dcpi_box_str(uint32_t ndim, const int64_t *offset, const int64_t *size,
                         char *buf, size_t cap) {
  size_t n = 0;
  n += (size_t)snprintf(buf + n, cap - n, "[");
  for (uint32_t d = 0; d < ndim && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld:%lld", d ? ", " : "", (long long)offset[d],
                          (long long)(offset[d] + size[d]));
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

const char *dcpi_shape_str(uint32_t ndim, const int64_t *shape, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (uint32_t d = 0; d < ndim && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

/* ---- flat range → boxes ------------------------------------------------ */

typedef struct flat_out {
  uint32_t ndim;
  const int64_t *reg_off, *reg_sz;
  const int64_t *stride;
  int64_t *off, *sz;
  size_t cap, count;
  int64_t fixed[DCP_MAX_NDIM]; /* coordinates fixed by enclosing levels */
} flat_out;

/* Emit the box: dims < d fixed at their coordinates, dim d covering
 * indices [lo, hi), dims > d whole. */
static void emit(flat_out *o, uint32_t d, int64_t lo, int64_t hi) {
  int64_t *off = o->off + o->count * o->ndim, *sz = o->sz + o->count * o->ndim;
  for (uint32_t k = 0; k < o->ndim; k++) {
    if (k < d) {
      off[k] = o->reg_off[k] + o->fixed[k];
      sz[k] = 1;
    } else if (k == d) {
      off[k] = o->reg_off[k] + lo;
      sz[k] = hi - lo;
    } else {
      off[k] = o->reg_off[k];
      sz[k] = o->reg_sz[k];
    }
  }
  o->count++;
}

/* Cover [b, e) (relative to the start of the current level-d slab, with
 * 0 <= b < e <= reg_sz[d]*stride[d]) in row-major order. Each level adds at
 * most one partial head, one whole middle run and one partial tail, and a
 * head (or tail) only recurses into heads (tails), which bounds the output
 * at 2*ndim-1 boxes. */
static void cover(flat_out *o, uint32_t d, int64_t b, int64_t e) {
  int64_t st = o->stride[d];
  int64_t i0 = b / st, i1 = e / st;
  if (b % st == 0 && e % st == 0) {
    emit(o, d, i0, i1);
    return;
  }
  if (i0 == i1) { /* inside one index of dim d: descend */
    o->fixed[d] = i0;
    cover(o, d + 1, b - i0 * st, e - i0 * st);
    return;
  }
  int64_t mid_lo = i0;
  if (b % st != 0) {
    o->fixed[d] = i0;
    cover(o, d + 1, b - i0 * st, st);
    mid_lo = i0 + 1;
  }
  if (mid_lo < i1) emit(o, d, mid_lo, i1);
  if (e % st != 0) {
    o->fixed[d] = i1;
    cover(o, d + 1, 0, e - i1 * st);
  }
}

dcp_status dcpi_flat_to_boxes(uint32_t ndim, const int64_t *reg_off, const int64_t *reg_sz,
                              int64_t flat_begin, int64_t flat_count, int64_t *out_off,
                              int64_t *out_sz, size_t cap, size_t *count, dcpi_err *err) {
  int64_t numel, end;
  if (ndim > DCP_MAX_NDIM) return dcpi_fail(err, DCP_EINVAL, "flat range: ndim %u too large", ndim);
  if (dcpi_numel(ndim, reg_sz, &numel))
    return dcpi_fail(err, DCP_EOVERFLOW, "flat range: region element count overflows");
  if (flat_begin < 0 || flat_count < 0)
    return dcpi_fail(err, DCP_EINVAL, "flat range: negative begin %lld or count %lld",
                     (long long)flat_begin, (long long)flat_count);
  if (!dcpi_add_i64(flat_begin, flat_count, &end))
    return dcpi_fail(err, DCP_EOVERFLOW, "flat range: begin+count overflows int64");
  if (end > numel)
    return dcpi_fail(err, DCP_EBOUNDS, "flat range [%lld, %lld) exceeds the region's %lld elements",
                     (long long)flat_begin, (long long)end, (long long)numel);
  size_t need = ndim ? 2 * (size_t)ndim - 1 : 1;
  if (cap < need)
    return dcpi_fail(err, DCP_EINVAL, "flat range: output holds %zu boxes, %zu needed", cap,
                     need);
  *count = 0;
  if (flat_count == 0) return DCP_OK;
  if (ndim == 0) { /* a scalar: the range is its single element */
    *count = 1;
    return DCP_OK;
  }
  int64_t stride[DCP_MAX_NDIM];
  stride[ndim - 1] = 1;
  for (uint32_t d = ndim - 1; d > 0; d--) stride[d - 1] = stride[d] * reg_sz[d];
  flat_out o = {.ndim = ndim, .reg_off = reg_off, .reg_sz = reg_sz, .stride = stride,
                .off = out_off, .sz = out_sz, .cap = cap};
  cover(&o, 0, flat_begin, end);
  *count = o.count;
  return DCP_OK;
}

/* ---- public wrappers ---------------------------------------------------- */

static dcp_status check_public_box(const dcp_box *b) {
  if (!b || b->ndim > DCP_MAX_NDIM) return DCP_EINVAL;
  for (uint32_t d = 0; d < b->ndim; d++) {
    int64_t end;
    if (b->offset[d] < 0 || b->size[d] < 0) return DCP_EINVAL;
    if (!dcpi_add_i64(b->offset[d], b->size[d], &end)) return DCP_EOVERFLOW;
  }
  return DCP_OK;
}

dcp_status dcp_box_numel(const dcp_box *box, int64_t *numel) {
  if (!numel) return DCP_EINVAL;
  dcp_status rc = check_public_box(box);
  if (rc) return rc;
  return dcpi_numel(box->ndim, box->size, numel);
}

int dcp_box_intersect(const dcp_box *a, const dcp_box *b, dcp_box *out) {
  if (check_public_box(a) || check_public_box(b) || !out || a->ndim != b->ndim)
    return DCP_EINVAL;
  dcp_box r = {.ndim = a->ndim};
  bool nonempty = dcpi_box_intersect(a->ndim, a->offset, a->size, b->offset, b->size,
                                     r.offset, r.size);
  *out = r;
  return nonempty ? 1 : 0;
}

dcp_status dcp_flat_to_boxes(const dcp_box *region, int64_t flat_begin, int64_t flat_count,
                             dcp_box *out, size_t cap, size_t *count) {
  if (!out || !count) return DCP_EINVAL;
  dcp_status rc = check_public_box(region);
  if (rc) return rc;
  uint32_t n = region->ndim;
  int64_t off[(2 * DCP_MAX_NDIM - 1) * DCP_MAX_NDIM], sz[(2 * DCP_MAX_NDIM - 1) * DCP_MAX_NDIM];
  size_t need = n ? 2 * (size_t)n - 1 : 1;
  if (cap < need) return DCP_EINVAL;
  rc = dcpi_flat_to_boxes(n, region->offset, region->size, flat_begin, flat_count, off, sz,
                          need, count, NULL);
  if (rc) return rc;
  for (size_t i = 0; i < *count; i++) {
    out[i] = (dcp_box){.ndim = n};
    for (uint32_t d = 0; d < n; d++) {
      out[i].offset[d] = off[i * n + d];
      out[i].size[d] = sz[i * n + d];
    }
  }
  return DCP_OK;
}

/* read_tensor.c — a tensor assembled whole from its saved chunks (each
 * chunk's box is its intersection with the whole tensor), and the coverage
 * check that makes sure every element comes from exactly one chunk. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "convert/cv.h"
#include "model/box.h"
#include "metadata/view.h"

dcp_status dcpi_cv_tensor_bytes(const dcp_meta *m, size_t ti, uint64_t *bytes, dcpi_err *err) {
  dcp_tensor_info t;
  dcp_status rc = dcp_meta_tensor(m, ti, &t);
  if (rc) return dcpi_fail(err, rc, "no tensor %zu", ti);
  int64_t numel, n;
  if (dcpi_numel(t.ndim, t.shape, &numel) || !dcpi_mul_i64(numel, (int64_t)dcp_dtype_size(t.dtype), &n))
    return dcpi_fail(err, DCP_EOVERFLOW, "tensor '%s': byte size overflows", t.fqn);
  *bytes = (uint64_t)n;
  return DCP_OK;
}

typedef struct sweep_ctx {
  const int64_t *offs;
  uint32_t nd;
} sweep_ctx;

static _Thread_local sweep_ctx g_sweep; /* qsort has no argument */

static int cmp_dim0(const void *a, const void *b) {
  int64_t x = g_sweep.offs[*(const size_t *)a * g_sweep.nd];
  int64_t y = g_sweep.offs[*(const size_t *)b * g_sweep.nd];
  return x < y ? -1 : x > y;
}

static int boxes_overlap(const int64_t *oa, const int64_t *za, const int64_t *ob,
                         const int64_t *zb, uint32_t nd) {
  for (uint32_t d = 0; d < nd; d++)
    if (oa[d] >= ob[d] + zb[d] || ob[d] >= oa[d] + za[d]) return 0;
  return 1;
}

/* No two chunks overlap: sorted by dim-0 start, only pairs whose dim-0
 * ranges meet are compared. */
static dcp_status check_overlaps(const dcp_tensor_info *t, const int64_t *offs,
                                 const int64_t *sizes, size_t n, dcpi_err *err) {
  uint32_t nd = t->ndim;
  if (nd == 0 || n < 2) return DCP_OK;
  size_t *idx = malloc(n * sizeof *idx);
  if (!idx) return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) idx[i] = i;
  g_sweep = (sweep_ctx){offs, nd};
  dcpi_sort(idx, n, sizeof *idx, cmp_dim0);
  dcp_status rc = DCP_OK;
  for (size_t i = 0; i < n && !rc; i++) {
    const int64_t *oi = offs + idx[i] * nd, *zi = sizes + idx[i] * nd;
    for (size_t j = i + 1; j < n && offs[idx[j] * nd] < oi[0] + zi[0] && !rc; j++)
      if (boxes_overlap(oi, zi, offs + idx[j] * nd, sizes + idx[j] * nd, nd))
        rc = dcpi_fail(err, DCP_ECORRUPT, "tensor '%s': chunks %zu and %zu overlap", t->fqn,
                      idx[i], idx[j]);
  }
  free(idx);
  return rc;
}

/* Box inside the shape and the stored length matching; *vol its volume. */
static dcp_status check_chunk(dcp_meta *m, const dcp_tensor_info *t, size_t ti, size_t c,
                              int64_t *vol, dcpi_err *err) {
  dcp_chunk_info ci;
  dcp_status rc = dcp_meta_chunk(m, ti, c, &ci);
  if (rc) return dcpi_fail(err, rc, "tensor '%s': chunk %zu cannot be decoded", t->fqn, c);
  int64_t v = 1;
  for (uint32_t d = 0; d < t->ndim; d++) {
    int64_t end;
    if (ci.box.offset[d] < 0 || ci.box.size[d] < 0 ||
        !dcpi_add_i64(ci.box.offset[d], ci.box.size[d], &end) || end > t->shape[d] ||
        !dcpi_mul_i64(v, ci.box.size[d], &v))
      return dcpi_fail(err, DCP_ECORRUPT, "tensor '%s': chunk %zu lies outside the shape",
                       t->fqn, c);
  }
  int64_t bytes;
  if (!dcpi_mul_i64(v, (int64_t)dcp_dtype_size(t->dtype), &bytes) ||
      (uint64_t)bytes != ci.ref.raw_length)
    return dcpi_fail(err, DCP_ECORRUPT,
                     "tensor '%s': chunk %zu stores %llu bytes for a %lld-element box", t->fqn, c,
                     (unsigned long long)ci.ref.raw_length, (long long)v);
  *vol = v;
  return DCP_OK;
}

dcp_status dcpi_cv_check_coverage(dcp_meta *m, size_t ti, dcpi_err *err) {
  dcp_tensor_info t;
  dcp_status rc = dcp_meta_tensor(m, ti, &t);
  if (rc) return dcpi_fail(err, rc, "no tensor %zu", ti);
  int64_t numel = 1, sum = 0, vol = 0;
  if (dcpi_numel(t.ndim, t.shape, &numel))
    return dcpi_fail(err, DCP_ECORRUPT, "tensor '%s': element count overflows", t.fqn);
  for (size_t c = 0; c < t.chunk_count; c++) {
    if ((rc = check_chunk(m, &t, ti, c, &vol, err))) return rc;
    if (!dcpi_add_i64(sum, vol, &sum))
      return dcpi_fail(err, DCP_ECORRUPT, "tensor '%s': chunk volumes overflow", t.fqn);
  }
  const int64_t *offs, *sizes;
  if (t.chunk_count && (rc = dcpi_meta_chunk_boxes(m, ti, &offs, &sizes, err))) return rc;
  if (t.chunk_count && (rc = check_overlaps(&t, offs, sizes, (size_t)t.chunk_count, err)))
    return rc;
  if (sum != numel)
    return dcpi_fail(err, sum < numel ? DCP_EINCOMPLETE : DCP_ECORRUPT,
                     "tensor '%s': its chunks cover %lld of %lld elements", t.fqn, (long long)sum,
                     (long long)numel);
  return DCP_OK;
}

/* Copies the rows of a chunk that fall in a window [lo, hi) of the
 * tensor's row-major bytes to their place in the window. */
typedef struct place_ctx {
  const dcp_tensor_info *t;
  const dcp_box *box;
  uint8_t *dst; /* the window: tensor byte lo is dst[0] */
  uint64_t lo, hi;
  size_t esize, row_bytes;
  dcpi_cv_progress *progress;
} place_ctx;

/* Byte offset in the tensor of row r (over the box's leading dims). */
static uint64_t row_dest(const place_ctx *p, uint64_t r) {
  uint32_t nd = p->t->ndim;
  if (nd == 0) return 0;
  uint64_t elem = 0, stride = 1;
  elem = (uint64_t)p->box->offset[nd - 1];
  stride = (uint64_t)p->t->shape[nd - 1];
  for (uint32_t d = nd - 1; d-- > 0;) {
    uint64_t i = r % (uint64_t)p->box->size[d];
    r /= (uint64_t)p->box->size[d];
    elem += ((uint64_t)p->box->offset[d] + i) * stride;
    stride *= (uint64_t)p->t->shape[d];
  }
  return elem * p->esize;
}

/* Rows [*r0, *r1) of the box (nrows in all) are those with a byte in
 * [lo, hi): a box's rows lie in the tensor in increasing order, so both
 * ends are found by bisection. */
static void rows_in_window(const place_ctx *p, uint64_t nrows, uint64_t *r0, uint64_t *r1) {
  uint64_t a = 0, b = nrows;
  while (a < b) { /* first row ending after lo */
    uint64_t m = a + (b - a) / 2;
    if (row_dest(p, m) + p->row_bytes > p->lo) b = m;
    else a = m + 1;
  }
  *r0 = a;
  b = nrows;
  while (a < b) { /* first row starting at or after hi */
    uint64_t m = a + (b - a) / 2;
    if (row_dest(p, m) >= p->hi) b = m;
    else a = m + 1;
  }
  *r1 = a;
}

static dcp_status place(void *arg, uint64_t raw_off, const uint8_t *data, size_t len,
                        dcpi_err *err) {
  (void)err;
  place_ctx *p = arg;
  uint64_t at = raw_off, placed = 0;
  size_t left = len;
  while (left) {
    uint64_t r = at / p->row_bytes, w = at % p->row_bytes;
    size_t n = (size_t)(p->row_bytes - w) < left ? (size_t)(p->row_bytes - w) : left;
    uint64_t d0 = row_dest(p, r) + w, d1 = d0 + n;
    uint64_t c0 = d0 > p->lo ? d0 : p->lo, c1 = d1 < p->hi ? d1 : p->hi;
    if (c0 < c1) {
      memcpy(p->dst + (c0 - p->lo), data + (c0 - d0), (size_t)(c1 - c0));
      placed += c1 - c0;
    }
    data += n, at += n, left -= n;
  }
  dcpi_cv_progress_add(p->progress, placed);
  return DCP_OK;
}

/* The part of chunk c that falls in [lo, lo + len) of the tensor, into buf. */
static dcp_status read_chunk(dcpi_block_reader *br, dcp_meta *m, const dcp_tensor_info *t,
                             size_t ti, size_t c, uint64_t lo, uint8_t *buf, size_t len,
                             dcpi_cv_progress *pr, dcpi_err *err) {
  dcp_chunk_info ci;
  const char *file;
  dcp_status rc = dcp_meta_chunk(m, ti, c, &ci);
  if (!rc) rc = dcp_meta_file(m, ci.ref.file, &file);
  if (rc) return dcpi_fail(err, DCP_ECORRUPT, "tensor '%s': chunk %zu unreadable", t->fqn, c);
  size_t es = dcp_dtype_size(t->dtype);
  place_ctx p = {.t = t, .box = &ci.box, .dst = buf, .lo = lo, .hi = lo + len, .esize = es,
                 .progress = pr,
                 .row_bytes = t->ndim ? (size_t)ci.box.size[t->ndim - 1] * es : es};
  if (!p.row_bytes || !ci.ref.raw_length) return DCP_OK; /* an empty box */
  uint64_t r0, r1;
  rows_in_window(&p, ci.ref.raw_length / p.row_bytes, &r0, &r1);
  if (r0 >= r1) return DCP_OK;
  char what[DCPI_ERR_MSG_MAX / 2];
  dcpi_cv_describe_box(what, sizeof what, t->fqn, &ci.box);
  return dcpi_block_read(br, file, &ci.ref, r0 * p.row_bytes, r1 * p.row_bytes, what, place, &p,
                         err);
}

dcp_status dcpi_cv_read_window(dcpi_block_reader *br, dcp_meta *m, size_t ti, uint64_t offset,
                               uint8_t *buf, size_t len, dcpi_cv_progress *progress,
                               dcpi_err *err) {
  dcp_tensor_info t;
  uint64_t bytes;
  dcp_status rc = dcpi_cv_tensor_bytes(m, ti, &bytes, err);
  if (!rc) rc = dcp_meta_tensor(m, ti, &t);
  if (rc) return rc;
  if (offset > bytes || len > bytes - offset)
    return dcpi_fail(err, DCP_EINVAL, "tensor '%s' has %llu bytes: [%llu, +%zu) lies outside",
                     t.fqn, (unsigned long long)bytes, (unsigned long long)offset, len);
  for (size_t c = 0; c < t.chunk_count && !rc && len; c++)
    rc = read_chunk(br, m, &t, ti, c, offset, buf, len, progress, err);
  return rc;
}

dcp_status dcpi_cv_read_tensor(dcpi_block_reader *br, dcp_meta *m, size_t ti, uint8_t *buf,
                               size_t len, dcpi_cv_progress *progress, dcpi_err *err) {
  uint64_t bytes;
  dcp_status rc = dcpi_cv_tensor_bytes(m, ti, &bytes, err);
  if (rc) return rc;
  if (bytes != len) {
    dcp_tensor_info t;
    dcp_meta_tensor(m, ti, &t);
    return dcpi_fail(err, DCP_EINVAL, "tensor '%s' has %llu bytes, the buffer %zu", t.fqn,
                     (unsigned long long)bytes, len);
  }
  if ((rc = dcpi_cv_check_coverage(m, ti, err))) return rc;
  return dcpi_cv_read_window(br, m, ti, 0, buf, len, progress, err);
}

/* Open ckpt's storage and a block reader, run one read, close. */
static dcp_status read_public(dcp_ctx *ctx, const char *ckpt, dcp_meta *meta, size_t tensor,
                              uint64_t offset, void *buf, size_t len, bool whole) {
  if (!ctx) return DCP_EINVAL;
  dcpi_err err;
  dcpi_err_clear(&err);
  if (!ckpt || !*ckpt || !meta || (!buf && len)) {
    dcpi_fail(&err, DCP_EINVAL, "read_tensor: NULL or empty argument");
    return dcpi_ctx_report(ctx, &err);
  }
  dcpi_rt rt;
  dcpi_block_reader *br = NULL;
  dcp_status rc = dcpi_cv_open(&rt, ctx, ckpt, 0, &err);
  if (!rc) rc = dcpi_block_reader_create(&rt, &br, &err);
  if (!rc && whole) rc = dcpi_cv_read_tensor(br, meta, tensor, buf, len, NULL, &err);
  if (!rc && !whole) rc = dcpi_cv_check_coverage(meta, tensor, &err);
  if (!rc && !whole) rc = dcpi_cv_read_window(br, meta, tensor, offset, buf, len, NULL, &err);
  dcpi_block_reader_free(br);
  dcpi_cv_close(&rt);
  return dcpi_ctx_report(ctx, &err);
}

dcp_status dcp_read_tensor(dcp_ctx *ctx, const char *ckpt, dcp_meta *meta, size_t tensor,
                           void *buf, size_t len) {
  return read_public(ctx, ckpt, meta, tensor, 0, buf, len, true);
}

dcp_status dcp_read_tensor_range(dcp_ctx *ctx, const char *ckpt, dcp_meta *meta, size_t tensor,
                                 uint64_t offset, void *buf, size_t len) {
  return read_public(ctx, ckpt, meta, tensor, offset, buf, len, false);
}

/* view_chunks.c — lazy decoding of one tensor's chunk list and the
 * dcp_meta_chunk accessor. A list is verified against its own xxh3 from the
 * tensor index and fully bounds-checked before any chunk of it is handed
 * out; a failure leaves nothing cached, so every later access fails too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/err.h"
#include "metadata/common.h"
#include "metadata/format.h"
#include "metadata/view.h"
#include "model/box.h"

/* State carried from one chunk to the next within a list. */
typedef struct chunk_prev {
  dcpi_dec_prev loc;
  const int64_t *off, *size; /* previous box, or NULL / the shape at the start */
} chunk_prev;

/* Read ndim varints into v, each <= INT64_MAX. */
static dcp_status dec_dims(dcpi_dec *d, uint32_t ndim, const char *what, int64_t *v) {
  for (uint32_t k = 0; k < ndim; k++) {
    uint64_t x;
    dcp_status rc = dcpi_dec_var(d, INT64_MAX, what, &x);
    if (rc != DCP_OK) return rc;
    v[k] = (int64_t)x;
  }
  return DCP_OK;
}

/* Check a decoded box against t's shape (non-empty, inside) and, when
 * ordered (a listed list), against the previous box (strictly increasing
 * by offset, then size); *raw gets its byte size. */
static dcp_status check_box(dcpi_dec *d, const dcpi_mv_tensor *t, const int64_t *off,
                            const int64_t *sz, const chunk_prev *p, bool ordered,
                            uint64_t *raw) {
  int64_t bytes = (int64_t)dcp_dtype_size(t->dtype);
  for (uint32_t k = 0; k < t->ndim; k++) {
    if (sz[k] == 0) return dcpi_dec_fail(d, "empty box (dim %u)", k);
    if (sz[k] > t->shape[k] || off[k] > t->shape[k] - sz[k])
      return dcpi_dec_fail(d, "box dim %u [%lld, +%lld) exceeds extent %lld", k,
                           (long long)off[k], (long long)sz[k], (long long)t->shape[k]);
    if (!dcpi_mul_i64(bytes, sz[k], &bytes)) return dcpi_dec_fail(d, "box byte size overflows");
  }
  if (ordered && p->off) {
    int c = dcpi_md_cmp_i64(p->off, off, t->ndim);
    if (c == 0) c = dcpi_md_cmp_i64(p->size, sz, t->ndim);
    if (c >= 0) return dcpi_dec_fail(d, "boxes are not strictly increasing");
  }
  *raw = (uint64_t)bytes;
  return DCP_OK;
}

/* Decode a chunk's box per its flags into off and sz (ndim entries each). */
static dcp_status dec_box(dcpi_dec *d, const dcpi_mv_tensor *t, uint8_t flags,
                          const chunk_prev *p, int64_t *off, int64_t *sz) {
  dcp_status rc = DCP_OK;
  if (flags & DCPI_RF_SAME_SIZE) memcpy(sz, p->size, t->ndim * sizeof *sz);
  else rc = dec_dims(d, t->ndim, "box size", sz);
  if (rc != DCP_OK) return rc;
  if (flags & DCPI_RF_BOX_PREDICTED)
    dcpi_md_predict_offset(t->ndim, t->shape, p->off, p->size, p->off == NULL, off);
  else
    rc = dec_dims(d, t->ndim, "box offset", off);
  return rc;
}

/* Decode chunk c of t's list into cl. A derived list (its boxes already in
 * cl) has no box fields, and its flags must not claim any. */
static dcp_status dec_chunk(dcpi_dec *d, const dcp_meta *m, const dcpi_mv_tensor *t,
                            dcpi_mv_chunks *cl, size_t c, chunk_prev *p, bool derived) {
  int64_t *off = cl->offs + c * t->ndim, *sz = cl->sizes + c * t->ndim;
  dcpi_mv_ref *r = &cl->refs[c];
  uint8_t flags = 0, bad = DCPI_RF_RESERVED | (derived ? DCPI_RF_BOX_BITS : 0);
  memset(r, 0, sizeof *r);
  dcp_status rc = dcpi_dec_u8(d, "chunk flags", &flags);
  if (rc == DCP_OK && (flags & bad))
    rc = dcpi_dec_fail(d, "%s bit set in chunk flags 0x%02x", derived ? "box or reserved" :
                       "reserved", flags);
  if (rc == DCP_OK && !derived) rc = dec_box(d, t, flags, p, off, sz);
  if (rc == DCP_OK) rc = check_box(d, t, off, sz, p, !derived, &r->raw_length);
  if (rc == DCP_OK) rc = dcpi_dec_loc(d, m, flags, &p->loc, r);
  if (rc == DCP_OK) rc = dcpi_dec_blocks(d, r, &cl->cks, &cl->lens, &p->loc);
  if (rc != DCP_OK) return rc;
  p->off = off;
  p->size = sz;
  return DCP_OK;
}

/* ---- disjointness ---------------------------------------------------- */

/* One chunk's extent in the sweep dimension. */
typedef struct sweep_span {
  int64_t start, end;
  size_t chunk;
} sweep_span;

/* qsort order of spans: by start, then chunk index (a total order). */
static int cmp_span(const void *a, const void *b) {
  const sweep_span *x = a, *y = b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return (x->chunk > y->chunk) - (x->chunk < y->chunk);
}

/* The dimension along which the boxes are thinnest relative to the shape
 * (least summed size/extent), so a sweep along it keeps few boxes active:
 * row bands sweep along rows, column shards along columns. */
static uint32_t sweep_dim(const dcpi_mv_tensor *t, const dcpi_mv_chunks *cl) {
  uint32_t best = 0;
  double best_cover = 0;
  for (uint32_t k = 0; k < t->ndim; k++) {
    double cover = 0;
    for (size_t c = 0; c < t->nchunks; c++)
      cover += (double)cl->sizes[c * t->ndim + k] / (double)t->shape[k];
    if (k == 0 || cover < best_cover) best = k, best_cover = cover;
  }
  return best;
}

/* Fail when two boxes of the list share an element. Saved chunks of one
 * tensor are disjoint (the planner, import and merge guarantee it); a list
 * where they are not would make a load pick one of two values per element,
 * and overlaps can hide gaps from any volume count. A sweep along the
 * thinnest dimension tests each box only against those still open there:
 * O(n log n + n * open) instead of all pairs. */
static dcp_status check_disjoint(dcpi_dec *d, const dcpi_mv_tensor *t, const dcpi_mv_chunks *cl) {
  size_t n = (size_t)t->nchunks, nd = t->ndim;
  if (n < 2 || nd == 0) return DCP_OK; /* scalar lists hold one chunk: boxes are increasing */
  uint32_t k = sweep_dim(t, cl);
  sweep_span *spans = malloc(n * sizeof *spans);
  size_t *open = malloc(n * sizeof *open), nopen = 0;
  if (!spans || !open) {
    free(spans);
    free(open);
    return dcpi_fail(d->err, DCP_ENOMEM, "tensor '%s': cannot check %zu chunks", t->fqn, n);
  }
  for (size_t c = 0; c < n; c++)
    spans[c] = (sweep_span){cl->offs[c * nd + k], cl->offs[c * nd + k] + cl->sizes[c * nd + k], c};
  dcpi_sort(spans, n, sizeof *spans, cmp_span);
  dcp_status rc = DCP_OK;
  for (size_t i = 0; i < n && rc == DCP_OK; i++) {
    size_t kept = 0;
    for (size_t j = 0; j < nopen; j++)
      if (spans[open[j]].end > spans[i].start) open[kept++] = open[j];
    nopen = kept;
    size_t a = spans[i].chunk;
    for (size_t j = 0; j < nopen && rc == DCP_OK; j++) {
      size_t b = spans[open[j]].chunk;
      if (!dcpi_boxes_overlap(t->ndim, cl->offs + a * nd, cl->sizes + a * nd, cl->offs + b * nd,
                              cl->sizes + b * nd))
        continue;
      char ba[128], bb[128];
      rc = dcpi_dec_fail(d, "chunks %zu %s and %zu %s overlap", b < a ? b : a,
                        dcpi_box_str(t->ndim, cl->offs + (b < a ? b : a) * nd,
                                     cl->sizes + (b < a ? b : a) * nd, ba, sizeof ba),
                        b < a ? a : b,
                        dcpi_box_str(t->ndim, cl->offs + (b < a ? a : b) * nd,
                                     cl->sizes + (b < a ? a : b) * nd, bb, sizeof bb));
    }
    open[nopen++] = i;
  }
  free(spans);
  free(open);
  return rc;
}

/* Allocate the per-chunk arrays of n chunks of t's list. The counts were
 * bounded by the list length when the index was decoded, so this is linear
 * in the input. */
static dcp_status alloc_list(const dcpi_mv_tensor *t, size_t n, dcpi_mv_chunks **out,
                             dcpi_err *err) {
  size_t dims = t->ndim;
  dcpi_mv_chunks *cl = calloc(1, sizeof *cl);
  if (cl) {
    cl->refs = malloc((n ? n : 1) * sizeof *cl->refs);
    cl->offs = malloc((n && dims ? n * dims : 1) * sizeof *cl->offs);
    cl->sizes = malloc((n && dims ? n * dims : 1) * sizeof *cl->sizes);
  }
  if (!cl || !cl->refs || !cl->offs || !cl->sizes) {
    dcpi_mv_chunks_free(cl);
    return dcpi_fail(err, DCP_ENOMEM, "tensor '%s': cannot hold %zu chunks", t->fqn, n);
  }
  *out = cl;
  return DCP_OK;
}

/* Decode the form byte and header of a version 3 list (nchunks >= 1). */
static dcp_status dec_form(dcpi_dec *d, const dcpi_mv_tensor *t, dcpi_form *fm) {
  uint8_t kind;
  dcp_status rc = dcpi_dec_u8(d, "list form", &kind);
  if (rc != DCP_OK) return rc;
  if (kind >= DCPI_FORM_COUNT) return dcpi_dec_fail(d, "unknown list form %u", kind);
  fm->kind = kind;
  if (kind == DCPI_FORM_LISTED) return DCP_OK;
  int64_t n[DCP_MAX_NDIM], c[DCP_MAX_NDIM], k[DCP_MAX_NDIM];
  for (uint32_t dim = 0; dim < t->ndim && rc == DCP_OK; dim++) {
    uint64_t v[3] = {0, 0, 1};
    rc = dcpi_dec_var(d, INT64_MAX, "grid cells", &v[0]);
    if (rc == DCP_OK) rc = dcpi_dec_var(d, INT64_MAX, "grid cell size", &v[1]);
    if (rc == DCP_OK && kind == DCPI_FORM_GRID) rc = dcpi_dec_var(d, INT64_MAX, "grid split", &v[2]);
    n[dim] = (int64_t)v[0], c[dim] = (int64_t)v[1], k[dim] = (int64_t)v[2];
  }
  uint64_t f = 1;
  if (rc == DCP_OK && kind == DCPI_FORM_FLAT) rc = dcpi_dec_var(d, INT64_MAX, "flat ranges", &f);
  if (rc != DCP_OK) return rc;
  fm->f = (int64_t)f;
  dcpi_err why;
  dcpi_err_clear(&why);
  if (dcpi_grid_init(&fm->grid, t->ndim, t->shape, n, c, k, t->nchunks, &why) != DCP_OK)
    return dcpi_dec_fail(d, "%s", why.msg);
  if (kind == DCPI_FORM_GRID && (uint64_t)fm->grid.count != t->nchunks)
    return dcpi_dec_fail(d, "grid has %lld boxes, the index %llu chunks",
                         (long long)fm->grid.count, (unsigned long long)t->nchunks);
  return DCP_OK;
}

/* A version 4 FLAT form: its arithmetic, whose count must be the index's. */
static dcp_status dec_flat(dcpi_dec *d, const dcpi_mv_tensor *t, dcpi_mv_head *h) {
  dcpi_err why;
  dcpi_err_clear(&why);
  if (dcpi_flat_init(&h->flat, &h->form.grid, h->form.f, t->nchunks, &why) != DCP_OK)
    return dcpi_dec_fail(d, "%s", why.msg);
  if ((uint64_t)h->flat.count != t->nchunks)
    return dcpi_dec_fail(d, "flat form derives %lld chunks, the index %llu",
                         (long long)h->flat.count, (unsigned long long)t->nchunks);
  return DCP_OK;
}

/* The window checksums of a version 4 derived list (one per window of
 * entries), then the xxh3 of the list's header (every byte before it),
 * which is verified: the header is then trusted without the list's. */
static dcp_status dec_window_sums(dcpi_dec *d, const dcpi_mv_tensor *t, dcpi_mv_head *h) {
  size_t n = h->nskip + 1;
  if (n > dcpi_r_left(&d->r) / 8) return dcpi_dec_fail(d, "no room for %zu window checksums", n);
  if (!(h->wcks = malloc(n * sizeof *h->wcks)))
    return dcpi_fail(d->err, DCP_ENOMEM, "tensor '%s': cannot hold its skip table", t->fqn);
  dcp_status rc = DCP_OK;
  for (size_t j = 0; j < n && rc == DCP_OK; j++) rc = dcpi_dec_u64(d, "window xxh3", &h->wcks[j]);
  size_t header = d->r.pos;
  uint64_t want = 0;
  if (rc == DCP_OK) rc = dcpi_dec_u64(d, "list header xxh3", &want);
  if (rc == DCP_OK && DCPI_CHECKSUMS_ENFORCED && dcpi_mv_hash(d->r.p, header) != want)
    return dcpi_fail(d->err, DCP_ECORRUPT, "corrupt metadata: %s: list header checksum mismatch",
                     d->where);
  return rc;
}

/* The skip table of a version 4 derived list: var interval (>= 1), then
 * (nchunks - 1) / interval deltas, each at least interval entries of the
 * smallest size, so the offsets increase; the last must lie inside the
 * entries. Offsets are relative to the first entry. Then (more than one
 * window) the window checksums and the header's. */
static dcp_status dec_skip(dcpi_dec *d, const dcpi_mv_tensor *t, dcpi_mv_head *h) {
  dcp_status rc = dcpi_dec_var(d, UINT64_MAX, "skip interval", &h->every);
  if (rc == DCP_OK && h->every == 0) rc = dcpi_dec_fail(d, "skip interval 0");
  if (rc != DCP_OK) return rc;
  uint64_t n = (t->nchunks - 1) / h->every, at = 0;
  if (n > dcpi_r_left(&d->r)) return dcpi_dec_fail(d, "%llu skip offsets cannot fit",
                                                   (unsigned long long)n);
  if (n && !(h->skip = malloc(n * sizeof *h->skip)))
    return dcpi_fail(d->err, DCP_ENOMEM, "tensor '%s': cannot hold its skip table", t->fqn);
  h->nskip = (size_t)n;
  for (size_t j = 0; j < h->nskip && rc == DCP_OK; j++) {
    uint64_t delta;
    rc = dcpi_dec_var(d, t->list_len, "skip offset", &delta);
    /* n >= 1 means every <= nchunks <= list_len / DCPI_MIN_CHUNK: no overflow */
    if (rc == DCP_OK && delta < h->every * DCPI_MIN_CHUNK)
      rc = dcpi_dec_fail(d, "skip offset %zu: %llu bytes for %llu entries", j,
                         (unsigned long long)delta, (unsigned long long)h->every);
    h->skip[j] = at += delta;
    if (rc == DCP_OK && at > t->list_len) /* also keeps the sum from overflowing */
      rc = dcpi_dec_fail(d, "skip offset %zu is past the %zu-byte list", j, t->list_len);
  }
  if (rc == DCP_OK && h->nskip) rc = dec_window_sums(d, t, h);
  if (rc == DCP_OK && h->nskip && at >= dcpi_r_left(&d->r))
    rc = dcpi_dec_fail(d, "skip offset %llu is past the %zu bytes of entries",
                       (unsigned long long)at, dcpi_r_left(&d->r));
  return rc;
}

/* Fail unless tensor ti's whole list matches its xxh3 in the index. */
static dcp_status check_list_sum(const dcp_meta *m, size_t ti, dcpi_err *err) {
  const dcpi_mv_tensor *t = &m->tensors[ti];
  if (DCPI_CHECKSUMS_ENFORCED &&
      dcpi_mv_hash(m->buf + m->chunks_off + t->list_off, t->list_len) != t->list_hash)
    return dcpi_fail(err, DCP_ECORRUPT, "corrupt metadata: chunks section, tensor %zu ('%.100s'): "
                     "chunk list checksum mismatch", ti, t->fqn);
  return DCP_OK;
}

/* Fail unless window j's entry bytes [start, end) of t's list match their
 * xxh3 in the header. */
static dcp_status check_window_sum(dcpi_dec *d, const dcpi_mv_head *h, size_t j, size_t start,
                                   size_t end) {
  if (DCPI_CHECKSUMS_ENFORCED && dcpi_mv_hash(d->r.p + start, end - start) != h->wcks[j])
    return dcpi_fail(d->err, DCP_ECORRUPT, "corrupt metadata: %s: checksum mismatch in the "
                     "window of chunks %llu..", d->where, (unsigned long long)(j * h->every));
  return DCP_OK;
}

/* A cursor over tensor ti's list, its failures naming the tensor. */
static void list_dec(const dcp_meta *m, size_t ti, dcpi_dec *d, dcpi_err *err) {
  const dcpi_mv_tensor *t = &m->tensors[ti];
  *d = (dcpi_dec){{m->buf + m->chunks_off + t->list_off, t->list_len, 0}, err, "", -1, NULL, NULL};
  snprintf(d->where, sizeof d->where, "chunks section, tensor %zu ('%.100s')", ti, t->fqn);
}

/* Decode tensor ti's list header into a new dcpi_mv_head (nothing is kept
 * on failure, so every later access fails too), verified: by its own xxh3
 * (a version 4 derived list of several windows, which carry theirs), else
 * by the whole list's. */
static dcp_status decode_head(const dcp_meta *m, size_t ti, dcpi_mv_head **out, dcpi_err *err) {
  const dcpi_mv_tensor *t = &m->tensors[ti];
  dcpi_dec d;
  list_dec(m, ti, &d, err);
  dcp_status rc = m->version >= 4 ? DCP_OK : check_list_sum(m, ti, err);
  if (rc != DCP_OK) return rc;
  dcpi_mv_head *h = calloc(1, sizeof *h);
  if (!h) return dcpi_fail(err, DCP_ENOMEM, "tensor '%s': out of memory", t->fqn);
  h->form.kind = DCPI_FORM_LISTED;
  if (m->version >= 3 && t->nchunks) rc = dec_form(&d, t, &h->form);
  bool v4_derived = m->version >= 4 && h->form.kind != DCPI_FORM_LISTED;
  if (rc == DCP_OK && m->version >= 4 && !v4_derived) rc = check_list_sum(m, ti, err);
  if (rc == DCP_OK && v4_derived && h->form.kind == DCPI_FORM_FLAT) rc = dec_flat(&d, t, h);
  if (rc == DCP_OK && v4_derived) rc = dec_skip(&d, t, h);
  if (rc == DCP_OK && v4_derived && !h->nskip) rc = check_list_sum(m, ti, err); /* one window */
  if (rc != DCP_OK) {
    dcpi_mv_head_free(h);
    return rc;
  }
  h->entries_at = d.r.pos;
  *out = h;
  return DCP_OK;
}

/* Decode tensor ti's list header on first use. */
static dcp_status ensure_head(dcp_meta *m, size_t ti, dcpi_err *err) {
  dcpi_mv_tensor *t = &m->tensors[ti];
  return t->head ? DCP_OK : decode_head(m, ti, &t->head, err);
}

/* The boxes of chunks [first, first + n) of a derived form into cl: a
 * grid's by index, a version 4 FLAT's by stepping through it, a version 3
 * FLAT's (all of them, sorted) by generating and sorting. */
static dcp_status derive_boxes(dcpi_dec *d, const dcp_meta *m, const dcpi_mv_tensor *t,
                               const dcpi_mv_head *h, dcpi_mv_chunks *cl, uint64_t first,
                               size_t n) {
  size_t nd = t->ndim;
  if (h->form.kind == DCPI_FORM_GRID) {
    for (size_t c = 0; c < n; c++)
      dcpi_grid_box(&h->form.grid, (int64_t)(first + c), cl->offs + c * nd, cl->sizes + c * nd);
    return DCP_OK;
  }
  if (m->version >= 4) {
    dcpi_flat_pos p;
    dcpi_flat_seek(&h->flat, (int64_t)first, &p);
    for (size_t c = 0; c < n; c++, dcpi_flat_next(&h->flat, &p))
      dcpi_flat_box(&p, t->ndim, cl->offs + c * nd, cl->sizes + c * nd);
    return DCP_OK;
  }
  int64_t *o, *s;
  size_t got;
  dcpi_err why;
  dcpi_err_clear(&why);
  dcp_status rc = dcpi_derive_flat(&h->form, t->nchunks, &o, &s, &got, &why);
  if (rc == DCP_ENOMEM) return dcpi_fail(d->err, rc, "%s", why.msg);
  if (rc != DCP_OK) return dcpi_dec_fail(d, "%s", why.msg);
  if (got != t->nchunks) rc = dcpi_dec_fail(d, "flat form derives %zu chunks, the index %llu",
                                            got, (unsigned long long)t->nchunks);
  else memcpy(cl->offs, o, got * nd * sizeof *o), memcpy(cl->sizes, s, got * nd * sizeof *s);
  free(o), free(s);
  return rc;
}

/* At entry c of a list with a skip table: the skip table's offset of it
 * (when it is a skip point) must be where it starts, relative to the first
 * entry at base, and it must be self-contained (so a read that starts
 * there decodes it as the whole list does). */
static dcp_status check_skip_point(dcpi_dec *d, const dcpi_mv_head *h, uint64_t c, size_t base) {
  if (!h->every || c == 0 || c % h->every) return DCP_OK;
  size_t pos = d->r.pos - base;
  if (h->skip && pos != h->skip[c / h->every - 1])
    return dcpi_dec_fail(d, "skip table says entry %llu is at %llu, it is at %zu",
                         (unsigned long long)c, (unsigned long long)h->skip[c / h->every - 1],
                         pos);
  uint8_t f = d->r.pos < d->r.len ? d->r.p[d->r.pos] : 0;
  if ((f & (DCPI_RF_FILE_MASK | DCPI_RF_OFF_MASK)) != DCPI_RF_SELF_CONTAINED)
    return dcpi_dec_fail(d, "skip point entry %llu has location flags 0x%02x, not explicit",
                         (unsigned long long)c, f);
  return DCP_OK;
}

/* Decode entries [first, first + n) of t's list, starting at the cursor,
 * into cl (its boxes derived first when the list is). */
static dcp_status dec_entries(dcpi_dec *d, const dcp_meta *m, const dcpi_mv_tensor *t,
                              const dcpi_mv_head *h, dcpi_mv_chunks *cl, uint64_t first,
                              size_t n) {
  bool derived = h->form.kind != DCPI_FORM_LISTED;
  dcp_status rc = derived ? derive_boxes(d, m, t, h, cl, first, n) : DCP_OK;
  chunk_prev prev = {{0, 0, 0}, NULL, t->shape};
  size_t base = h->entries_at;
  for (size_t c = 0; c < n && rc == DCP_OK; c++) {
    d->item = (int64_t)(first + c);
    rc = check_skip_point(d, h, first + c, base);
    if (rc == DCP_OK) rc = dec_chunk(d, m, t, cl, c, &prev, derived);
  }
  d->item = -1;
  return rc;
}

/* Decode and verify the whole chunk list of tensor ti into a new
 * dcpi_mv_chunks. */
static dcp_status decode_list(dcp_meta *m, size_t ti, dcpi_mv_chunks **out, dcpi_err *err) {
  const dcpi_mv_tensor *t = &m->tensors[ti];
  dcp_status rc = ensure_head(m, ti, err);
  dcpi_mv_chunks *cl = NULL;
  if (rc == DCP_OK) rc = alloc_list(t, (size_t)t->nchunks, &cl, err);
  if (rc != DCP_OK) return rc;
  const dcpi_mv_head *h = t->head;
  dcpi_dec d;
  list_dec(m, ti, &d, err);
  d.r.pos = h->entries_at;
  cl->form = h->form;
  if (h->nskip) rc = check_list_sum(m, ti, err); /* the head checked only itself */
  for (size_t j = 0; rc == DCP_OK && h->nskip && j <= h->nskip; j++)
    rc = check_window_sum(&d, h, j, h->entries_at + (j ? (size_t)h->skip[j - 1] : 0),
                          j < h->nskip ? h->entries_at + (size_t)h->skip[j] : t->list_len);
  if (rc == DCP_OK) rc = dec_entries(&d, m, t, h, cl, 0, (size_t)t->nchunks);
  if (rc == DCP_OK && dcpi_r_left(&d.r) != 0)
    rc = dcpi_dec_fail(&d, "%zu trailing bytes after the last chunk", dcpi_r_left(&d.r));
  /* derived boxes tile the tensor by construction: no sweep needed */
  if (rc == DCP_OK && h->form.kind == DCPI_FORM_LISTED) rc = check_disjoint(&d, t, cl);
  if (rc != DCP_OK) {
    dcpi_mv_chunks_free(cl);
    return rc;
  }
  *out = cl;
  return DCP_OK;
}

/* Decode tensor ti's list on first use; errors go to err. */
static dcp_status ensure_list(dcp_meta *m, size_t ti, dcpi_err *err) {
  dcpi_mv_tensor *t = &m->tensors[ti];
  return t->chunks ? DCP_OK : decode_list(m, ti, &t->chunks, err);
}

/* Decode the skip-table window of a version 4 derived list that holds
 * chunk c into t->head->win: from its skip offset (or the first entry) to
 * the next (or the list's end), which must be exactly its entries. */
static dcp_status load_window(dcp_meta *m, size_t ti, uint64_t c, dcpi_err *err) {
  dcpi_mv_tensor *t = &m->tensors[ti];
  dcpi_mv_head *h = t->head;
  uint64_t every = h->every, j = c / every, first = j * every;
  size_t n = (size_t)(t->nchunks - first < every ? t->nchunks - first : every);
  size_t start = h->entries_at + (j ? (size_t)h->skip[j - 1] : 0);
  size_t end = j < h->nskip ? h->entries_at + (size_t)h->skip[j] : t->list_len;
  dcpi_mv_chunks_free(h->win);
  h->win = NULL;
  dcpi_mv_chunks *cl = NULL;
  dcp_status rc = alloc_list(t, n, &cl, err);
  if (rc != DCP_OK) return rc;
  dcpi_dec d;
  list_dec(m, ti, &d, err);
  d.r.len = end, d.r.pos = start;
  cl->form = h->form;
  rc = h->nskip ? check_window_sum(&d, h, (size_t)j, start, end) : DCP_OK; /* else: the list's */
  if (rc == DCP_OK) rc = dec_entries(&d, m, t, h, cl, first, n);
  if (rc == DCP_OK && d.r.pos != end)
    rc = dcpi_dec_fail(&d, "the entries of skip window %llu end %zu bytes before the next "
                       "skip offset", (unsigned long long)j, end - d.r.pos);
  if (rc != DCP_OK) {
    dcpi_mv_chunks_free(cl);
    return rc;
  }
  h->win = cl, h->win_first = first, h->win_n = n;
  return DCP_OK;
}

dcp_status dcpi_meta_chunk_boxes(dcp_meta *m, size_t ti, const int64_t **offs,
                                 const int64_t **sizes, dcpi_err *err) {
  if (!m || ti >= m->ntensors) return dcpi_fail(err, DCP_ENOTFOUND, "no tensor %zu", ti);
  dcp_status rc = ensure_list(m, ti, err);
  if (rc != DCP_OK) return rc;
  *offs = m->tensors[ti].chunks->offs;
  *sizes = m->tensors[ti].chunks->sizes;
  return DCP_OK;
}

/* Tensor ti's list header (version 3 and later, non-empty lists). */
static dcp_status head_of(dcp_meta *m, size_t ti, const dcpi_mv_head **h, dcpi_err *err) {
  *h = NULL;
  if (!m || ti >= m->ntensors) return dcpi_fail(err, DCP_ENOTFOUND, "no tensor %zu", ti);
  if (m->version < 3 || m->tensors[ti].nchunks == 0) return DCP_OK;
  dcp_status rc = ensure_head(m, ti, err);
  if (rc == DCP_OK) *h = m->tensors[ti].head;
  return rc;
}

dcp_status dcpi_meta_chunk_grid(dcp_meta *m, size_t ti, dcpi_grid *out, bool *found,
                                dcpi_err *err) {
  const dcpi_mv_head *h;
  dcp_status rc = head_of(m, ti, &h, err);
  *found = h && h->form.kind == DCPI_FORM_GRID;
  if (*found) *out = h->form.grid;
  return rc;
}

dcp_status dcpi_meta_chunk_flat(dcp_meta *m, size_t ti, dcpi_flat *out, bool *found,
                                dcpi_err *err) {
  const dcpi_mv_head *h;
  dcp_status rc = head_of(m, ti, &h, err);
  *found = h && m->version >= 4 && h->form.kind == DCPI_FORM_FLAT;
  if (*found) *out = h->flat;
  return rc;
}

dcp_status dcpi_meta_chunk_form(dcp_meta *m, size_t ti, dcpi_form *out, dcpi_err *err) {
  if (!m || ti >= m->ntensors) return dcpi_fail(err, DCP_ENOTFOUND, "no tensor %zu", ti);
  dcp_status rc = ensure_list(m, ti, err);
  if (rc == DCP_OK) *out = m->tensors[ti].chunks->form;
  return rc;
}

const int64_t *dcpi_meta_tensor_shape(const dcp_meta *m, size_t ti) {
  return m->tensors[ti].shape;
}

/* Chunk c of tensor ti: from the decoded list, or (a version 4 derived
 * list not decoded) from the skip window that holds it, decoded alone. */
static dcp_status find_chunk(dcp_meta *m, size_t ti, uint64_t c, const dcpi_mv_chunks **cl,
                             size_t *at, dcpi_err *err) {
  dcpi_mv_tensor *t = &m->tensors[ti];
  dcp_status rc = DCP_OK;
  if (!t->chunks && m->version >= 4) rc = ensure_head(m, ti, err);
  if (rc == DCP_OK && !t->chunks && m->version >= 4 && t->head->form.kind != DCPI_FORM_LISTED) {
    dcpi_mv_head *h = t->head;
    if (!h->win || c < h->win_first || c - h->win_first >= h->win_n) rc = load_window(m, ti, c, err);
    if (rc == DCP_OK) *cl = h->win, *at = (size_t)(c - h->win_first);
    return rc;
  }
  if (rc == DCP_OK) rc = ensure_list(m, ti, err);
  if (rc == DCP_OK) *cl = t->chunks, *at = (size_t)c;
  return rc;
}

dcp_status dcp_meta_chunk(dcp_meta *m, size_t tensor, size_t chunk, dcp_chunk_info *out) {
  if (!m || !out) return DCP_EINVAL;
  if (tensor >= m->ntensors || chunk >= m->tensors[tensor].nchunks) return DCP_ENOTFOUND;
  dcpi_err err;
  dcpi_err_clear(&err);
  const dcpi_mv_chunks *cl = NULL;
  size_t at = 0;
  if (find_chunk(m, tensor, chunk, &cl, &at, &err) != DCP_OK) return dcpi_ctx_report(m->ctx, &err);
  const dcpi_mv_tensor *t = &m->tensors[tensor];
  memset(out, 0, sizeof *out);
  out->box.ndim = t->ndim;
  memcpy(out->box.offset, cl->offs + at * t->ndim, t->ndim * sizeof(int64_t));
  memcpy(out->box.size, cl->sizes + at * t->ndim, t->ndim * sizeof(int64_t));
  dcpi_mv_fill_ref(&cl->refs[at], &cl->cks, &cl->lens, &out->ref);
  return DCP_OK;
}

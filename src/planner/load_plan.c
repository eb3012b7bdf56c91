/* load_plan.c — destination chunks × saved chunks → overlaps and byte runs,
 * through one box index per loaded fqn. */
#include "planner/load_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "model/box.h"
#include "model/state.h"
#include "planner/box_index.h"

/* Coordinates kept per overlap: offset, size, dest_offset, src_offset,
 * dest_size, src_size (ndim each). */
enum { COORD_ARRAYS = 6 };

/* Build state shared by the per-tensor steps. Owns everything until the
 * plan is handed out. */
typedef struct builder {
  const dcpi_load_tensor *tensors;
  const dcpi_load_chunk *chunks;
  size_t nchunks;
  dcpi_overlap *ov; /* in build order: by tensor, then chunk, then saved chunk */
  size_t nov, ov_cap;
  size_t *base;     /* nov: start of each overlap's coordinates in coords */
  size_t base_cap;
  int64_t *coords;
  size_t ncoords, coords_cap;
  uint32_t *hits; /* scratch for index queries */
  size_t hits_cap;
  int64_t *hbox;  /* the FLAT hits' boxes: offset, size (ndim each) per hit */
  size_t hbox_cap, nhits;
  uint32_t hnd;
  int64_t total;
} builder;

const dcpi_saved_tensor *dcpi_saved_find(const dcpi_saved_tensor *tensors, size_t n,
                                         const char *fqn) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(tensors[mid].fqn, fqn);
    if (c == 0) return &tensors[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

/* Check that a sorted-array source really is strictly sorted, since an
 * unsorted one would make binary search report present fqns as missing. */
static dcp_status check_source(const dcpi_saved_source *src, dcpi_err *err) {
  if (!src || (!src->tensors && !src->lookup && src->ntensors))
    return dcpi_fail(err, DCP_EINVAL, "load plan: no saved source");
  for (size_t i = 0; src->tensors && i < src->ntensors; i++) {
    if (!src->tensors[i].fqn) return dcpi_fail(err, DCP_EINVAL, "load plan: saved fqn NULL");
    if (i && strcmp(src->tensors[i - 1].fqn, src->tensors[i].fqn) >= 0)
      return dcpi_fail(err, DCP_EINVAL,
                       "load plan: saved tensors not strictly sorted at '%s'",
                       src->tensors[i].fqn);
  }
  return DCP_OK;
}

/* Find the saved tensor for t, through the array or the callback. */
static dcp_status lookup(const dcpi_saved_source *src, const dcpi_load_tensor *t,
                         dcpi_saved_tensor *out, dcpi_err *err) {
  if (src->tensors || !src->lookup) {
    const dcpi_saved_tensor *s = dcpi_saved_find(src->tensors, src->ntensors, t->fqn);
    if (s) {
      *out = *s;
      return DCP_OK;
    }
  } else {
    dcp_status rc = src->lookup(src->arg, t->fqn, strlen(t->fqn), out, err);
    if (rc != DCP_ENOTFOUND) return rc;
  }
  return dcpi_fail(err, DCP_ENOTFOUND, "load: tensor '%s' is not in the checkpoint", t->fqn);
}

/* Format a shape as "[a, b, c]". */

/* dtype and shape of the checkpoint's tensor must be the requested ones. */
static dcp_status check_match(const dcpi_load_tensor *t, const dcpi_saved_tensor *s,
                              dcpi_err *err) {
  char a[256], b[256];
  if (s->dtype != t->dtype) {
    const char *sn = dcp_dtype_name(s->dtype), *tn = dcp_dtype_name(t->dtype);
    return dcpi_fail(err, DCP_EMISMATCH,
                     "load: tensor '%s' has dtype %s in the checkpoint, %s requested", t->fqn,
                     sn ? sn : "(invalid)", tn ? tn : "(invalid)");
  }
  if (s->ndim != t->ndim || (t->ndim && (!s->shape || memcmp(s->shape, t->shape,
                                                             t->ndim * sizeof *t->shape))))
    return dcpi_fail(err, DCP_EMISMATCH,
                     "load: tensor '%s' has shape %s in the checkpoint, %s requested", t->fqn,
                     s->shape ? dcpi_shape_str(s->ndim, s->shape, a, sizeof a) : "(null)",
                     dcpi_shape_str(t->ndim, t->shape, b, sizeof b));
  return DCP_OK;
}

/* A saved grid (or FLAT form) must be the tensor's: same dimensions and
 * extents, one chunk per grid box (per flat chunk). */
static dcp_status check_saved_grid(const dcpi_saved_tensor *s, dcpi_err *err) {
  const dcpi_grid *g = s->grid ? s->grid : &s->flat->cells;
  int64_t count = s->grid ? g->count : s->flat->count;
  bool ok = g->ndim == s->ndim && (uint64_t)count == (uint64_t)s->nchunks;
  for (uint32_t d = 0; ok && d < s->ndim; d++) ok = g->extent[d] == s->shape[d];
  if (!ok)
    return dcpi_fail(err, DCP_ECORRUPT, "load: tensor '%s': its chunk grid does not match its "
                     "shape and chunk count", s->fqn);
  return DCP_OK;
}

/* Saved boxes come from a file: never trust them to lie inside the shape. */
static dcp_status check_saved_chunks(const dcpi_saved_tensor *s, dcpi_err *err) {
  if (s->nchunks > UINT32_MAX)
    return dcpi_fail(err, DCP_EOVERFLOW, "load: tensor '%s' has %zu chunks", s->fqn,
                     s->nchunks);
  if (s->grid || s->flat) return check_saved_grid(s, err);
  if (s->nchunks && s->ndim && (!s->chunk_off || !s->chunk_sz))
    return dcpi_fail(err, DCP_ECORRUPT, "load: tensor '%s' has NULL chunk boxes", s->fqn);
  for (size_t i = 0; i < s->nchunks; i++) {
    const int64_t *o = s->chunk_off + i * s->ndim, *z = s->chunk_sz + i * s->ndim;
    if (dcpi_check_box_in(s->ndim, s->shape, o, z, s->fqn, err)) {
      char m[DCPI_ERR_MSG_MAX];
      snprintf(m, sizeof m, "%s", err ? err->msg : "");
      return dcpi_fail(err, DCP_ECORRUPT, "load: saved chunk %zu: %s", i, m);
    }
  }
  return DCP_OK;
}

/* Row-major linear index of coordinate c in a box of extents sz. */
static int64_t linear(uint32_t ndim, const int64_t *sz, const int64_t *c) {
  int64_t idx = 0;
  for (uint32_t d = 0; d < ndim; d++) idx = idx * sz[d] + c[d];
  return idx;
}

/* Append the overlap of destination chunk ci with saved chunk sc (whose
 * boxes intersect) and return its element count in *numel. Values cannot
 * overflow: every box lies inside a shape whose byte size was checked. */
static dcp_status add_overlap(builder *b, size_t ci, const dcpi_saved_tensor *s, uint32_t sc,
                              const int64_t *so, const int64_t *ss, int64_t *numel) {
  const dcpi_load_chunk *c = &b->chunks[ci];
  const uint32_t nd = s->ndim;
  const int64_t es = (int64_t)dcp_dtype_size(s->dtype);
  if (DCPI_RESERVE(b->ov, b->ov_cap, b->nov + 1) ||
      DCPI_RESERVE(b->base, b->base_cap, b->nov + 1) ||
      DCPI_RESERVE(b->coords, b->coords_cap, b->ncoords + COORD_ARRAYS * nd))
    return DCP_ENOMEM;
  int64_t *k = b->coords + b->ncoords;
  int64_t *off = k, *sz = k + nd, *doff = k + 2 * nd, *soff = k + 3 * nd;
  int64_t *dsz = k + 4 * nd, *ssz = k + 5 * nd;
  dcpi_box_intersect(nd, c->offset, c->size, so, ss, off, sz);
  int64_t last[DCP_MAX_NDIM], n = 1;
  for (uint32_t d = 0; d < nd; d++) {
    doff[d] = off[d] - c->offset[d];
    soff[d] = off[d] - so[d];
    dsz[d] = c->size[d];
    ssz[d] = ss[d];
    last[d] = soff[d] + sz[d] - 1;
    n *= sz[d];
  }
  b->ov[b->nov] = (dcpi_overlap){
      .dest_chunk = (uint32_t)ci, .tensor = c->tensor, .saved_chunk = sc, .ndim = nd,
      .saved_id = s->chunk_id ? s->chunk_id[sc] : sc, .elem_size = es,
      .src_first = linear(nd, ssz, soff) * es, .src_last = (linear(nd, ssz, last) + 1) * es,
      .bytes = n * es};
  b->base[b->nov++] = b->ncoords;
  b->ncoords += COORD_ARRAYS * nd;
  b->total += n * es;
  *numel = n;
  return DCP_OK;
}

/* dcpi_flat_query's callback: keep the hit's index and box. */
static int flat_hit(void *arg, int64_t index, const int64_t *off, const int64_t *size) {
  builder *b = arg;
  size_t nd = b->hnd;
  if (DCPI_RESERVE(b->hits, b->hits_cap, b->nhits + 1) ||
      DCPI_RESERVE(b->hbox, b->hbox_cap, (b->nhits + 1) * 2 * nd))
    return 1;
  memcpy(b->hbox + b->nhits * 2 * nd, off, nd * sizeof *off);
  memcpy(b->hbox + b->nhits * 2 * nd + nd, size, nd * sizeof *size);
  b->hits[b->nhits++] = (uint32_t)index;
  return 0;
}

/* The saved chunks meeting destination chunk c: from the grid (its cells
 * that hold the box's corners bound a block of cells, walked row-major,
 * i.e. in ascending chunk index), from the FLAT form's arithmetic, else
 * from the index. */
static dcp_status find_hits(builder *b, const dcpi_load_chunk *c, const dcpi_box_index *ix,
                            const dcpi_saved_tensor *s, size_t *nh) {
  if (!s->grid && s->flat) {
    b->nhits = 0, b->hnd = s->ndim;
    int rc = dcpi_flat_query(s->flat, c->offset, c->size, flat_hit, b);
    *nh = b->nhits;
    return rc ? DCP_ENOMEM : DCP_OK;
  }
  if (!s->grid)
    return dcpi_box_index_query(ix, c->offset, c->size, &b->hits, &b->hits_cap, nh);
  const dcpi_grid *g = s->grid;
  int64_t lo[DCP_MAX_NDIM], hi[DCP_MAX_NDIM], at[DCP_MAX_NDIM], total = 1;
  for (uint32_t d = 0; d < g->ndim; d++) {
    lo[d] = at[d] = dcpi_grid_cell_of(g, d, c->offset[d]);
    hi[d] = dcpi_grid_cell_of(g, d, c->offset[d] + c->size[d] - 1);
    total *= hi[d] - lo[d] + 1;
  }
  if (DCPI_RESERVE(b->hits, b->hits_cap, (size_t)total)) return DCP_ENOMEM;
  for (int64_t k = 0; k < total; k++) {
    int64_t idx = 0;
    for (uint32_t d = 0; d < g->ndim; d++) idx = idx * g->cells[d] + at[d];
    b->hits[k] = (uint32_t)idx;
    for (uint32_t d = g->ndim; d-- > 0;) { /* next cell, row-major */
      if (++at[d] <= hi[d]) break;
      at[d] = lo[d];
    }
  }
  *nh = (size_t)total;
  return DCP_OK;
}

/* All overlaps of destination chunk ci; checks that they cover it. */
static dcp_status plan_chunk(builder *b, size_t ci, const dcpi_box_index *ix,
                             const dcpi_saved_tensor *s, dcpi_err *err) {
  const dcpi_load_chunk *c = &b->chunks[ci];
  int64_t want, got = 0;
  dcpi_numel(s->ndim, c->size, &want);
  if (want == 0) return DCP_OK;
  size_t nh;
  if (find_hits(b, c, ix, s, &nh))
    return dcpi_fail(err, DCP_ENOMEM, "load: out of memory querying '%s'", s->fqn);
  for (size_t h = 0; h < nh; h++) {
    int64_t n, go[DCP_MAX_NDIM], gs[DCP_MAX_NDIM];
    const int64_t *so = go, *ss = gs;
    if (s->grid) {
      dcpi_grid_box(s->grid, b->hits[h], go, gs);
    } else if (s->flat) {
      so = b->hbox + h * 2 * s->ndim, ss = so + s->ndim;
    } else {
      so = s->chunk_off + (size_t)b->hits[h] * s->ndim;
      ss = s->chunk_sz + (size_t)b->hits[h] * s->ndim;
    }
    if (add_overlap(b, ci, s, b->hits[h], so, ss, &n))
      return dcpi_fail(err, DCP_ENOMEM, "load: out of memory for overlaps of '%s'", s->fqn);
    got += n;
  }
  char box[512];
  if (got < want)
    return dcpi_fail(err, DCP_EINCOMPLETE,
                     "load: tensor '%s' box %s is not covered by the checkpoint: %lld of "
                     "%lld elements missing",
                     s->fqn, dcpi_box_str(s->ndim, c->offset, c->size, box, sizeof box),
                     (long long)(want - got), (long long)want);
  if (got > want)
    return dcpi_fail(err, DCP_ECORRUPT,
                     "load: tensor '%s' box %s: saved chunks overlap (%lld elements for %lld)",
                     s->fqn, dcpi_box_str(s->ndim, c->offset, c->size, box, sizeof box),
                     (long long)got, (long long)want);
  return DCP_OK;
}

/* Plan one tensor: look it up, check it, and when it has a non-empty
 * destination chunk (its indices in list[0..n)) index its saved chunks. */
static dcp_status plan_tensor(builder *b, uint32_t ti, const size_t *list, size_t n,
                              const dcpi_saved_source *src, dcpi_err *err) {
  const dcpi_load_tensor *t = &b->tensors[ti];
  dcpi_saved_tensor s;
  dcp_status rc;
  if ((rc = lookup(src, t, &s, err)) || (rc = check_match(t, &s, err))) return rc;
  bool any = false;
  for (size_t k = 0; k < n && !any; k++)
    any = !dcpi_box_is_empty(t->ndim, b->chunks[list[k]].size);
  if (!any) return DCP_OK; /* nothing to read: no index needed */
  s.fqn = t->fqn;         /* name messages as the caller does */
  if ((rc = check_saved_chunks(&s, err))) return rc;
  dcpi_box_index ix = {0};
  if (!s.grid && !s.flat &&
      (rc = dcpi_box_index_build(&ix, s.ndim, s.nchunks, s.chunk_off, s.chunk_sz, err)))
    return rc;
  for (size_t k = 0; k < n && !rc; k++) rc = plan_chunk(b, list[k], &ix, &s, err);
  dcpi_box_index_free(&ix);
  return rc;
}

/* Check tensors and chunks before planning; the index math relies on it. */
static dcp_status check_input(const dcpi_load_tensor *tensors, size_t ntensors,
                              const dcpi_load_chunk *chunks, size_t nchunks, dcpi_err *err) {
  if ((ntensors && !tensors) || (nchunks && !chunks))
    return dcpi_fail(err, DCP_EINVAL, "load plan: NULL input arrays");
  if (ntensors > UINT32_MAX || nchunks > UINT32_MAX)
    return dcpi_fail(err, DCP_EOVERFLOW, "load plan: too many tensors or chunks");
  for (size_t i = 0; i < ntensors; i++) {
    const dcpi_load_tensor *t = &tensors[i];
    if (!t->fqn) return dcpi_fail(err, DCP_EINVAL, "load plan: tensor %zu has no fqn", i);
    if (!dcp_dtype_size(t->dtype))
      return dcpi_fail(err, DCP_EINVAL, "load plan: tensor '%s' has invalid dtype %d",
                       t->fqn, (int)t->dtype);
    dcp_status rc = dcpi_check_shape(t->ndim, t->shape, dcp_dtype_size(t->dtype), t->fqn, err);
    if (rc) return rc;
  }
  for (size_t i = 0; i < nchunks; i++) {
    if (chunks[i].tensor >= ntensors)
      return dcpi_fail(err, DCP_EINVAL, "load plan: chunk %zu names tensor %u of %zu", i,
                       chunks[i].tensor, ntensors);
    const dcpi_load_tensor *t = &tensors[chunks[i].tensor];
    dcp_status rc =
        dcpi_check_box_in(t->ndim, t->shape, chunks[i].offset, chunks[i].size, t->fqn, err);
    if (rc) return rc;
  }
  return DCP_OK;
}

/* Group chunk indices by tensor (CSR, ascending within a tensor). */
static dcp_status group_chunks(const dcpi_load_chunk *chunks, size_t nchunks, size_t ntensors,
                               size_t **first, size_t **list) {
  *first = calloc(ntensors + 1, sizeof **first);
  *list = malloc((nchunks ? nchunks : 1) * sizeof **list);
  if (!*first || !*list) return DCP_ENOMEM;
  for (size_t i = 0; i < nchunks; i++) (*first)[chunks[i].tensor + 1]++;
  for (size_t t = 0; t < ntensors; t++) (*first)[t + 1] += (*first)[t];
  size_t *fill = malloc((ntensors ? ntensors : 1) * sizeof *fill);
  if (!fill) return DCP_ENOMEM;
  memcpy(fill, *first, ntensors * sizeof *fill);
  for (size_t i = 0; i < nchunks; i++) (*list)[fill[chunks[i].tensor]++] = i;
  free(fill);
  return DCP_OK;
}

/* Reorder the overlaps by destination chunk (a stable counting sort keeps
 * saved-chunk order within a chunk) and point them at their coordinates. */
static dcp_status finish(builder *b, dcpi_load_plan **out) {
  dcpi_load_plan *p = calloc(1, sizeof *p);
  if (!p) return DCP_ENOMEM;
  p->nchunks = b->nchunks;
  p->noverlaps = b->nov;
  p->total_bytes = b->total;
  p->chunk_first = calloc(b->nchunks + 1, sizeof *p->chunk_first);
  p->overlaps = malloc((b->nov ? b->nov : 1) * sizeof *p->overlaps);
  size_t *fill = malloc((b->nchunks ? b->nchunks : 1) * sizeof *fill);
  if (!p->chunk_first || !p->overlaps || !fill) {
    free(fill);
    dcpi_load_plan_free(p);
    return DCP_ENOMEM;
  }
  for (size_t i = 0; i < b->nov; i++) p->chunk_first[b->ov[i].dest_chunk + 1]++;
  for (size_t c = 0; c < b->nchunks; c++) p->chunk_first[c + 1] += p->chunk_first[c];
  memcpy(fill, p->chunk_first, b->nchunks * sizeof *fill);
  for (size_t i = 0; i < b->nov; i++) {
    dcpi_overlap o = b->ov[i];
    const int64_t *k = b->coords + b->base[i];
    const uint32_t nd = o.ndim;
    o.offset = k, o.size = k + nd, o.dest_offset = k + 2 * nd, o.src_offset = k + 3 * nd;
    o.dest_size = k + 4 * nd, o.src_size = k + 5 * nd;
    p->overlaps[fill[o.dest_chunk]++] = o;
  }
  free(fill);
  p->coords = b->coords; /* the plan takes the coordinates over */
  b->coords = NULL;
  *out = p;
  return DCP_OK;
}

/* Release the builder's scratch (the plan, once made, owns its own). */
static void builder_free(builder *b) {
  free(b->ov);
  free(b->base);
  free(b->coords);
  free(b->hits);
  free(b->hbox);
}

dcp_status dcpi_load_plan_build(const dcpi_load_tensor *tensors, size_t ntensors,
                                const dcpi_load_chunk *chunks, size_t nchunks,
                                const dcpi_saved_source *src, dcpi_load_plan **out,
                                dcpi_err *err) {
  if (!out) return dcpi_fail(err, DCP_EINVAL, "load plan: out is NULL");
  *out = NULL;
  dcp_status rc;
  if ((rc = check_source(src, err)) ||
      (rc = check_input(tensors, ntensors, chunks, nchunks, err)))
    return rc;
  size_t *first = NULL, *list = NULL;
  builder b = {.tensors = tensors, .chunks = chunks, .nchunks = nchunks};
  if (group_chunks(chunks, nchunks, ntensors, &first, &list)) {
    rc = dcpi_fail(err, DCP_ENOMEM, "load plan: out of memory");
  } else {
    for (size_t t = 0; t < ntensors && !rc; t++)
      rc = plan_tensor(&b, (uint32_t)t, list + first[t], first[t + 1] - first[t], src, err);
    if (!rc && finish(&b, out)) rc = dcpi_fail(err, DCP_ENOMEM, "load plan: out of memory");
  }
  free(first);
  free(list);
  builder_free(&b);
  return rc;
}

dcp_status dcpi_load_plan_from_state(const dcp_state *st, const dcpi_saved_source *src,
                                     dcpi_load_plan **out, dcpi_err *err) {
  if (!st || !out) return dcpi_fail(err, DCP_EINVAL, "load plan: state or out is NULL");
  *out = NULL;
  dcpi_load_tensor *t = malloc((st->ntensors ? st->ntensors : 1) * sizeof *t);
  dcpi_load_chunk *c = malloc((st->nchunks ? st->nchunks : 1) * sizeof *c);
  dcp_status rc;
  if (!t || !c) {
    rc = dcpi_fail(err, DCP_ENOMEM, "load plan: out of memory");
  } else {
    for (size_t i = 0; i < st->ntensors; i++)
      t[i] = (dcpi_load_tensor){st->tensors[i].fqn, st->tensors[i].dtype, st->tensors[i].ndim,
                                st->tensors[i].shape};
    for (size_t i = 0; i < st->nchunks; i++)
      c[i] = (dcpi_load_chunk){st->chunks[i].tensor, st->chunks[i].box.offset,
                               st->chunks[i].box.size};
    rc = dcpi_load_plan_build(t, st->ntensors, c, st->nchunks, src, out, err);
  }
  free(t);
  free(c);
  return rc;
}

void dcpi_load_plan_free(dcpi_load_plan *p) {
  if (!p) return;
  free(p->overlaps);
  free(p->chunk_first);
  free(p->coords);
  free(p);
}

/* ---- runs ------------------------------------------------------------------ */

/* Split dims into iterated outer ones [0, outer) and merged inner ones:
 * dims are merged from the last inward while the intersection spans both
 * chunks fully in the dim inside the current run, which is exactly when
 * consecutive rows are adjacent in both buffers. Sets *len in elements. */
static uint32_t merge_dims(const dcpi_overlap *ov, int64_t *len) {
  uint32_t k = ov->ndim;
  int64_t n = 1;
  if (k) {
    k--;
    n = ov->size[k];
    while (k > 0 && ov->size[k] == ov->dest_size[k] && ov->size[k] == ov->src_size[k]) {
      k--;
      n *= ov->size[k];
    }
  }
  *len = n;
  return k;
}

void dcpi_run_iter_init(dcpi_run_iter *it, const dcpi_overlap *ov) {
  const uint32_t nd = ov->ndim;
  const int64_t es = ov->elem_size;
  int64_t len, ds = es, ss = es, dstride[DCP_MAX_NDIM], sstride[DCP_MAX_NDIM];
  memset(it, 0, sizeof *it);
  it->outer = merge_dims(ov, &len);
  for (uint32_t d = nd; d-- > 0;) { /* byte strides of both chunks */
    dstride[d] = ds, sstride[d] = ss;
    ds *= ov->dest_size[d], ss *= ov->src_size[d];
  }
  it->len = len * es;
  it->remaining = len ? 1 : 0;
  for (uint32_t d = 0; d < it->outer; d++) {
    it->count[d] = ov->size[d];
    it->dstride[d] = dstride[d];
    it->sstride[d] = sstride[d];
    it->remaining *= ov->size[d];
  }
  for (uint32_t d = 0; d < nd; d++) {
    it->dest_off += ov->dest_offset[d] * dstride[d];
    it->src_off += ov->src_offset[d] * sstride[d];
  }
}

bool dcpi_run_iter_next(dcpi_run_iter *it, dcpi_run *run) {
  if (it->remaining <= 0) return false;
  *run = (dcpi_run){it->dest_off, it->src_off, it->len};
  if (--it->remaining == 0) return true;
  /* odometer over the outer dims, last fastest */
  for (uint32_t d = it->outer; d-- > 0;) {
    it->dest_off += it->dstride[d];
    it->src_off += it->sstride[d];
    if (++it->idx[d] < it->count[d]) break;
    it->dest_off -= it->dstride[d] * it->count[d];
    it->src_off -= it->sstride[d] * it->count[d];
    it->idx[d] = 0;
  }
  return true;
}

int64_t dcpi_overlap_run_count(const dcpi_overlap *ov) {
  int64_t len, n = 1;
  uint32_t outer = merge_dims(ov, &len);
  if (!len) return 0;
  for (uint32_t d = 0; d < outer; d++) n *= ov->size[d];
  return n;
}

/* derive.c — see derive.h. */
#include "metadata/derive.h"

#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "metadata/common.h"
#include "model/box.h"

static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

/* Boxes being sorted: row-major offs/sizes of ndim entries each. */
typedef struct box_set {
  uint32_t ndim;
  const int64_t *offs, *sizes;
} box_set;

/* One box of a set, as qsort sorts it. */
typedef struct box_ref {
  const box_set *set;
  uint32_t i;
} box_ref;

/* (offset, size) order of two boxes of one set. */
static int cmp_box_ref(const void *pa, const void *pb) {
  const box_ref *a = pa, *b = pb;
  const box_set *s = a->set;
  size_t x = (size_t)a->i * s->ndim, y = (size_t)b->i * s->ndim;
  int c = dcpi_md_cmp_i64(s->offs + x, s->offs + y, s->ndim);
  return c ? c : dcpi_md_cmp_i64(s->sizes + x, s->sizes + y, s->ndim);
}

/* Generate the unsorted boxes of fm into offs/sizes (room for max). */
static dcp_status gen_flat(const dcpi_form *fm, uint64_t max, int64_t *offs, int64_t *sizes,
                           size_t *n, dcpi_err *err) {
  const dcpi_grid *g = &fm->grid;
  uint32_t nd = g->ndim;
  size_t at = 0;
  for (int64_t cell = 0; cell < g->count; cell++) {
    int64_t coff[DCP_MAX_NDIM], csz[DCP_MAX_NDIM], numel;
    dcpi_grid_box(g, cell, coff, csz);
    dcpi_numel(nd, csz, &numel);
    int64_t per = ceil_div(numel, fm->f);
    for (int64_t begin = 0; begin < numel; begin += per) {
      int64_t bo[(2 * DCP_MAX_NDIM - 1) * DCP_MAX_NDIM], bs[(2 * DCP_MAX_NDIM - 1) * DCP_MAX_NDIM];
      size_t nb = 0;
      int64_t cnt = numel - begin < per ? numel - begin : per;
      dcpi_flat_to_boxes(nd, coff, csz, begin, cnt, bo, bs, 2 * DCP_MAX_NDIM - 1, &nb, NULL);
      if (at + nb > max)
        return dcpi_fail(err, DCP_ECORRUPT, "flat form derives more than %llu chunks",
                         (unsigned long long)max);
      memcpy(offs + at * nd, bo, nb * nd * sizeof *bo);
      memcpy(sizes + at * nd, bs, nb * nd * sizeof *bs);
      at += nb;
    }
  }
  *n = at;
  return DCP_OK;
}

/* Reorder boxes [0, n) of offs/sizes into (offset, size) order (distinct
 * boxes: the order is total). */
static dcp_status sort_in_place(uint32_t nd, size_t n, int64_t *offs, int64_t *sizes,
                                dcpi_err *err) {
  box_ref *ix = malloc((n ? n : 1) * sizeof *ix);
  int64_t *o2 = malloc((n ? n : 1) * nd * sizeof *o2), *s2 = malloc((n ? n : 1) * nd * sizeof *s2);
  dcp_status rc = DCP_OK;
  if (!ix || !o2 || !s2) {
    rc = dcpi_fail(err, DCP_ENOMEM, "cannot sort %zu derived chunks", n);
  } else {
    box_set set = {nd, offs, sizes};
    for (size_t i = 0; i < n; i++) ix[i] = (box_ref){&set, (uint32_t)i};
    dcpi_sort(ix, n, sizeof *ix, cmp_box_ref);
    for (size_t i = 0; i < n; i++) {
      memcpy(o2 + i * nd, offs + (size_t)ix[i].i * nd, nd * sizeof *o2);
      memcpy(s2 + i * nd, sizes + (size_t)ix[i].i * nd, nd * sizeof *s2);
    }
    memcpy(offs, o2, n * nd * sizeof *o2);
    memcpy(sizes, s2, n * nd * sizeof *s2);
  }
  free(ix), free(o2), free(s2);
  return rc;
}

dcp_status dcpi_derive_flat(const dcpi_form *fm, uint64_t max_count, int64_t **offs,
                            int64_t **sizes, size_t *n, dcpi_err *err) {
  uint32_t nd = fm->grid.ndim;
  *offs = *sizes = NULL;
  *n = 0;
  if (fm->f < 1) return dcpi_fail(err, DCP_ECORRUPT, "flat form with %lld ranges", (long long)fm->f);
  /* every non-empty range gives a box: bound them before allocating */
  if ((uint64_t)fm->grid.count > max_count)
    return dcpi_fail(err, DCP_ECORRUPT, "flat form derives more than %llu chunks",
                     (unsigned long long)max_count);
  size_t cap = (size_t)max_count ? (size_t)max_count : 1;
  int64_t *o = malloc(cap * nd * sizeof *o), *s = malloc(cap * nd * sizeof *s);
  dcp_status rc = o && s ? DCP_OK : dcpi_fail(err, DCP_ENOMEM, "cannot derive %zu chunks", cap);
  if (rc == DCP_OK) rc = gen_flat(fm, max_count, o, s, n, err);
  if (rc == DCP_OK) rc = sort_in_place(nd, *n, o, s, err);
  if (rc != DCP_OK) {
    free(o), free(s);
    *n = 0;
    return rc;
  }
  *offs = o, *sizes = s;
  return DCP_OK;
}

/* ---- detection ---------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* true when boxes [0, n) of (o, s) equal those of (offs, sizes). */
static bool same_boxes(uint32_t nd, size_t n, const int64_t *o, const int64_t *s,
                       const int64_t *offs, const int64_t *sizes) {
  return !memcmp(o, offs, n * nd * sizeof *o) && !memcmp(s, sizes, n * nd * sizeof *s);
}

/* GRID: per dimension the distinct offsets are the cut points. */
static dcp_status try_grid(uint32_t nd, const int64_t *shape, size_t n, const int64_t *offs,
                           const int64_t *sizes, size_t st, dcpi_form *out, bool *found,
                           dcpi_err *err) {
  int64_t *b = malloc((n + 1) * sizeof *b), gn[DCP_MAX_NDIM], gc[DCP_MAX_NDIM], gk[DCP_MAX_NDIM];
  if (!b) return dcpi_fail(err, DCP_ENOMEM, "cannot examine %zu chunks", n);
  size_t product = 1;
  *found = true;
  for (uint32_t d = 0; d < nd && *found; d++) {
    /* the distinct offsets: repeats next to each other go first, and only
     * what is left unsorted is sorted (dimension 0 of the sorted list never
     * is; qsort over every offset was a tenth of the encode at 27 M chunks) */
    size_t u = 0;
    bool sorted = true;
    for (size_t i = 0; i < n; i++) {
      int64_t x = offs[i * st + d];
      if (u && x == b[u - 1]) continue;
      sorted = sorted && (!u || x > b[u - 1]);
      b[u++] = x;
    }
    if (!sorted) {
      dcpi_sort(b, u, sizeof *b, cmp_i64);
      size_t v = 0;
      for (size_t i = 0; i < u; i++)
        if (!v || b[i] != b[v - 1]) b[v++] = b[i];
      u = v;
    }
    b[u] = shape[d];
    product *= u;
    *found = product <= n && dcpi_grid_fit_dim(shape[d], b, (int64_t)u, &gn[d], &gc[d], &gk[d]);
  }
  free(b);
  if (*found) *found = product == n && !dcpi_grid_init(&out->grid, nd, shape, gn, gc, gk, n, NULL);
  for (size_t i = 0; *found && i < n; i++) {
    int64_t o[DCP_MAX_NDIM], s[DCP_MAX_NDIM];
    dcpi_grid_box(&out->grid, (int64_t)i, o, s);
    *found = same_boxes(nd, 1, o, s, offs + i * st, sizes + i * st);
  }
  if (*found) out->kind = DCPI_FORM_GRID;
  return DCP_OK;
}

/* Candidate range lengths for FLAT over g: a range begins at the first
 * cell's origin, so its end is one of the first 2*ndim-1 ends (in flat
 * order) of the boxes inside that cell. */
static size_t range_ends(const dcpi_grid *g, size_t n, const int64_t *offs, const int64_t *sizes,
                         size_t st, int64_t *ends, size_t cap) {
  uint32_t nd = g->ndim;
  int64_t coff[DCP_MAX_NDIM], csz[DCP_MAX_NDIM];
  dcpi_grid_box(g, 0, coff, csz);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const int64_t *o = offs + i * st, *s = sizes + i * st;
    bool inside = true;
    int64_t lin = 0;
    for (uint32_t d = 0; d < nd && inside; d++) {
      inside = o[d] >= coff[d] && o[d] + s[d] <= coff[d] + csz[d];
      lin = lin * csz[d] + (o[d] + s[d] - 1 - coff[d]);
    }
    if (!inside) continue;
    /* keep the cap smallest ends, sorted (insertion: cap is tiny) */
    size_t at = k < cap ? k++ : cap;
    if (at == cap && lin + 1 >= ends[cap - 1]) continue;
    if (at == cap) at = cap - 1;
    while (at > 0 && ends[at - 1] > lin + 1) ends[at] = ends[at - 1], at--;
    ends[at] = lin + 1;
  }
  return k;
}

/* Put the sorted boxes (box i's offset at offs + i*st) in the order FLAT over the outer
 * cells g generates them: perm[j] is the index of the j-th. Within one cell
 * that order is their sorted order (a cell's flat order is row-major, and
 * so is the sort of disjoint boxes by offset), so a stable partition by the
 * cell holding each box's offset gives it: a counting sort, no comparison.
 * false when a box starts outside the shape or there is no memory (*oom). */
static bool cell_order(const dcpi_grid *g, size_t n, const int64_t *offs, size_t st,
                       uint32_t *perm, bool *oom) {
  uint32_t nd = g->ndim;
  size_t ncells = (size_t)g->count, *at = calloc(ncells + 1, sizeof *at);
  uint32_t *cell = malloc(n * sizeof *cell); /* < ncells <= n <= UINT32_MAX */
  bool inside = at && cell;
  *oom = !inside;
  for (size_t i = 0; i < n && inside; i++) {
    size_t k = 0;
    for (uint32_t d = 0; d < nd && inside; d++) {
      int64_t x = offs[i * st + d];
      inside = x >= 0 && x < g->extent[d];
      k = k * (size_t)g->cells[d] + (inside ? (size_t)dcpi_grid_cell_of(g, d, x) : 0);
    }
    cell[i] = (uint32_t)k;
    at[k + 1]++;
  }
  for (size_t c = 0; inside && c < ncells; c++) at[c + 1] += at[c];
  for (size_t i = 0; inside && i < n; i++) perm[at[cell[i]]++] = (uint32_t)i;
  free(at), free(cell);
  return inside;
}

/* true when FLAT fm generates exactly the n boxes (offs, sizes), taken in
 * the order perm: the first box that differs ends the walk, so a wrong
 * candidate costs little. */
static bool flat_matches(const dcpi_form *fm, size_t n, const int64_t *offs,
                         const int64_t *sizes, size_t st, const uint32_t *perm) {
  uint32_t nd = fm->grid.ndim;
  dcpi_flat fl;
  if (dcpi_flat_init(&fl, &fm->grid, fm->f, n, NULL) != DCP_OK || (uint64_t)fl.count != n)
    return false;
  dcpi_flat_pos p;
  dcpi_flat_seek(&fl, 0, &p);
  for (size_t j = 0; j < n; j++, dcpi_flat_next(&fl, &p)) {
    int64_t o[DCP_MAX_NDIM], s[DCP_MAX_NDIM];
    dcpi_flat_box(&p, nd, o, s);
    if (!same_boxes(nd, 1, o, s, offs + (size_t)perm[j] * st, sizes + (size_t)perm[j] * st))
      return false;
  }
  return true;
}

/* FLAT over the outer cells (cn per dimension, c = ceil(e / cn)). perm
 * (n) is scratch; when found, it holds the generation order (cell_order). */
static dcp_status try_flat(uint32_t nd, const int64_t *shape, size_t n, const int64_t *offs,
                           const int64_t *sizes, size_t st, const int64_t *cn, uint32_t *perm,
                           dcpi_form *out, bool *found, dcpi_err *err) {
  int64_t gn[DCP_MAX_NDIM], gc[DCP_MAX_NDIM], one[DCP_MAX_NDIM];
  *found = false;
  for (uint32_t d = 0; d < nd; d++) {
    if (cn[d] < 1) return DCP_OK;
    gc[d] = ceil_div(shape[d], cn[d]);
    gn[d] = ceil_div(shape[d], gc[d]);
    one[d] = 1;
  }
  dcpi_form fm = {.kind = DCPI_FORM_FLAT};
  if (dcpi_grid_init(&fm.grid, nd, shape, gn, gc, one, n, NULL)) return DCP_OK;
  bool oom = false;
  if (!cell_order(&fm.grid, n, offs, st, perm, &oom))
    return oom ? dcpi_fail(err, DCP_ENOMEM, "cannot examine %zu chunks", n) : DCP_OK;
  int64_t ends[2 * DCP_MAX_NDIM - 1], c0[DCP_MAX_NDIM], s0[DCP_MAX_NDIM], numel0;
  size_t ne = range_ends(&fm.grid, n, offs, sizes, st, ends, 2 * (size_t)nd - 1);
  dcpi_grid_box(&fm.grid, 0, c0, s0);
  dcpi_numel(nd, s0, &numel0);
  /* every f with ceil(numel0 / f) = p cuts the first cell alike; the
   * smaller last cells may tell them apart: try a few */
  for (size_t e = 0; e < ne && !*found; e++) {
    int64_t p = ends[e], f_lo = ceil_div(numel0, p);
    int64_t f_hi = p > 1 ? (numel0 - 1) / (p - 1) : numel0;
    for (fm.f = f_lo; fm.f <= f_hi && fm.f < f_lo + 8 && !*found; fm.f++)
      if (ceil_div(numel0, fm.f) == p) *found = flat_matches(&fm, n, offs, sizes, st, perm);
    fm.f -= *found;
  }
  if (*found) *out = fm;
  return DCP_OK;
}

dcp_status dcpi_derive_detect(uint32_t ndim, const int64_t *shape, size_t n, const int64_t *offs,
                              const int64_t *sizes, size_t stride, const int64_t *cells,
                              dcpi_form *out, uint32_t *gen_order, dcpi_err *err) {
  memset(out, 0, sizeof *out);
  out->kind = DCPI_FORM_LISTED;
  if (ndim == 0 || n < 2 || n > UINT32_MAX) return DCP_OK;
  bool found = false;
  dcp_status rc = try_grid(ndim, shape, n, offs, sizes, stride, out, &found, err);
  uint32_t *perm = found ? NULL : gen_order ? gen_order : malloc(n * sizeof *perm);
  if (rc == DCP_OK && !found && !perm) rc = dcpi_fail(err, DCP_ENOMEM, "cannot examine %zu chunks", n);
  if (rc == DCP_OK && !found && cells)
    rc = try_flat(ndim, shape, n, offs, sizes, stride, cells, perm, out, &found, err);
  int64_t whole[DCP_MAX_NDIM];
  for (uint32_t d = 0; d < ndim; d++) whole[d] = 1;
  if (rc == DCP_OK && !found)
    rc = try_flat(ndim, shape, n, offs, sizes, stride, whole, perm, out, &found, err);
  if (rc == DCP_OK && !found) out->kind = DCPI_FORM_LISTED;
  if (perm != gen_order) free(perm);
  return rc;
}

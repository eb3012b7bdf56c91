/* grid.c — see grid.h. */
#include "model/grid.h"

#include "base/checked.h"
#include "model/box.h"

/* ceil(a / b) for a >= 0, b >= 1. */
static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

dcp_status dcpi_grid_init(dcpi_grid *g, uint32_t ndim, const int64_t *shape, const int64_t *n,
                          const int64_t *c, const int64_t *k, uint64_t max_count,
                          dcpi_err *err) {
  if (ndim < 1 || ndim > DCP_MAX_NDIM)
    return dcpi_fail(err, DCP_ECORRUPT, "grid of %u dimensions", ndim);
  g->ndim = ndim;
  g->count = 1;
  for (uint32_t d = 0; d < ndim; d++) {
    int64_t e = shape[d], full;
    if (e < 1 || n[d] < 1 || c[d] < 1 || k[d] < 1)
      return dcpi_fail(err, DCP_ECORRUPT, "grid dim %u: extent %lld, %lld cells of %lld split %lld",
                       d, (long long)e, (long long)n[d], (long long)c[d], (long long)k[d]);
    if (!dcpi_mul_i64(n[d] - 1, c[d], &full) || full >= e || e - full > c[d])
      return dcpi_fail(err, DCP_ECORRUPT,
                       "grid dim %u: %lld cells of %lld do not tile extent %lld", d,
                       (long long)n[d], (long long)c[d], (long long)e);
    g->extent[d] = e, g->n[d] = n[d], g->c[d] = c[d], g->k[d] = k[d];
    g->q[d] = ceil_div(c[d], k[d]);
    g->m[d] = ceil_div(c[d], g->q[d]);
    int64_t last = e - full;
    g->q_last[d] = ceil_div(last, k[d]);
    g->m_last[d] = ceil_div(last, g->q_last[d]);
    /* (n-1)*m + m_last <= e: no overflow */
    g->cells[d] = (n[d] - 1) * g->m[d] + g->m_last[d];
    if (!dcpi_mul_i64(g->count, g->cells[d], &g->count) || (uint64_t)g->count > max_count)
      return dcpi_fail(err, DCP_ECORRUPT, "grid has more boxes than the %llu allowed",
                       (unsigned long long)max_count);
  }
  return DCP_OK;
}

void dcpi_grid_cell(const dcpi_grid *g, uint32_t d, int64_t j, int64_t *off, int64_t *size) {
  int64_t outer = j / g->m[d], local = j % g->m[d], q = g->q[d], s = g->c[d];
  if (outer >= g->n[d] - 1) { /* the last outer cell */
    outer = g->n[d] - 1;
    local = j - outer * g->m[d];
    q = g->q_last[d];
    s = g->extent[d] - outer * g->c[d];
  }
  *off = outer * g->c[d] + local * q;
  *size = s - local * q < q ? s - local * q : q;
}

int64_t dcpi_grid_cell_of(const dcpi_grid *g, uint32_t d, int64_t x) {
  int64_t outer = x / g->c[d];
  if (outer > g->n[d] - 1) outer = g->n[d] - 1;
  int64_t q = outer == g->n[d] - 1 ? g->q_last[d] : g->q[d];
  return outer * g->m[d] + (x - outer * g->c[d]) / q;
}

void dcpi_grid_box(const dcpi_grid *g, int64_t idx, int64_t *off, int64_t *size) {
  for (uint32_t d = g->ndim; d-- > 0;) {
    dcpi_grid_cell(g, d, idx % g->cells[d], &off[d], &size[d]);
    idx /= g->cells[d];
  }
}

/* true when (n, c, k) reproduces the boundaries b[0..nb] of extent e. */
static bool fits(int64_t e, const int64_t *b, int64_t nb, int64_t n, int64_t c, int64_t k) {
  dcpi_grid g;
  if (dcpi_grid_init(&g, 1, &e, &n, &c, &k, (uint64_t)nb, NULL) != DCP_OK || g.cells[0] != nb)
    return false;
  for (int64_t j = 0; j < nb; j++) {
    int64_t off, size;
    dcpi_grid_cell(&g, 0, j, &off, &size);
    if (off != b[j] || off + size != b[j + 1]) return false;
  }
  return true;
}

/* The first outer cell ends at b[j]: try the splits k whose full-cell
 * pieces have the first piece's size. */
static bool fit_cell(int64_t e, const int64_t *b, int64_t nb, int64_t j, int64_t *n, int64_t *c,
                     int64_t *k) {
  int64_t cell = b[j], cells = ceil_div(e, cell), q = b[1];
  if (cells >= 3 && (2 * j > nb || b[2 * j] != 2 * cell)) return false; /* cells repeat */
  for (int64_t split = j; split <= cell && split < j + 64 && ceil_div(cell, split) == q; split++)
    if (fits(e, b, nb, cells, cell, split)) {
      *n = cells, *c = cell, *k = split;
      return true;
    }
  return false;
}

bool dcpi_grid_fit_dim(int64_t extent, const int64_t *b, int64_t nb, int64_t *n, int64_t *c,
                       int64_t *k) {
  if (nb < 1 || b[0] != 0 || b[nb] != extent) return false;
  int64_t q = b[1];
  if (fits(extent, b, nb, ceil_div(extent, q), q, 1)) {
    *n = ceil_div(extent, q), *c = q, *k = 1;
    return true;
  }
  /* the first outer cell is pieces of q and at most one shorter one */
  for (int64_t j = 2; j <= nb; j++) {
    if (fit_cell(extent, b, nb, j, n, c, k)) return true;
    if (b[j] - b[j - 1] != q) break;
  }
  return false;
}

/* ---- FLAT ------------------------------------------------------------------ */

__extension__ typedef unsigned __int128 u128;

/* sum_{i<n} floor((a*i + b) / m) for m >= 1 (the floor-sum recursion:
 * O(log m) steps; 128-bit so a*n never overflows). */
static u128 floor_sum(u128 n, u128 m, u128 a, u128 b) {
  u128 ans = 0;
  for (;;) {
    if (a >= m) ans += (n * (n - 1) / 2) * (a / m), a %= m;
    if (b >= m) ans += n * (b / m), b %= m;
    u128 y = a * n + b;
    if (y < m) return ans;
    n = y / m, b = y % m;
    u128 t = m;
    m = a, a = t;
  }
}

/* #{i in [0, n) : (i*a mod m) >= t}, 0 <= t <= m. */
static int64_t count_mod_ge(int64_t n, int64_t m, int64_t a, int64_t t) {
  if (n <= 0 || t >= m) return 0;
  return (int64_t)(floor_sum((u128)n, (u128)m, (u128)a, (u128)(m - t)) -
                   floor_sum((u128)n, (u128)m, (u128)a, 0));
}

/* #{i in [0, n) : (i*a mod m) in [lo, hi]}. */
static int64_t count_mod(int64_t n, int64_t m, int64_t a, int64_t lo, int64_t hi) {
  if (lo > hi) return 0;
  return count_mod_ge(n, m, a, lo) - count_mod_ge(n, m, a, hi + 1);
}

/* How one cell is cut: its shape's strides, range length and count. */
typedef struct flat_cell {
  uint32_t nd;
  int64_t st[DCP_MAX_NDIM];
  int64_t numel, per, ranges;
} flat_cell;

static void flat_cell_init(flat_cell *fc, uint32_t nd, const int64_t *csz, int64_t f) {
  fc->nd = nd;
  fc->st[nd - 1] = 1;
  for (uint32_t d = nd - 1; d > 0; d--) fc->st[d - 1] = fc->st[d] * csz[d];
  fc->numel = fc->st[0] * csz[0];
  fc->per = ceil_div(fc->numel, f);
  fc->ranges = ceil_div(fc->numel, fc->per);
}

/* Flat positions x < q that are multiples of st[k] but not of st[k-1] and
 * whose offset in their range, x mod per, lies in [lo, hi]. */
static int64_t level_count(const flat_cell *fc, uint32_t k, int64_t lo, int64_t hi, int64_t q) {
  if (lo > hi || q <= 0) return 0;
  int64_t c = count_mod(ceil_div(q, fc->st[k]), fc->per, fc->st[k] % fc->per, lo, hi);
  if (k > 0) c -= count_mod(ceil_div(q, fc->st[k - 1]), fc->per, fc->st[k - 1] % fc->per, lo, hi);
  return c;
}

/* Boxes of the cell that start at a flat position below q (0 <= q <=
 * numel). A box starts at every range start, and at a position x inside a
 * range [b, e) exactly when, with s the largest stride dividing x, x - s <
 * b or x + s > e (dcpi_flat_to_boxes cuts a range at the first multiple of
 * each stride after its start and the last one before its end). Counted
 * per stride with floor sums over x = i * stride; the last range ends at
 * numel, a multiple of every stride, so only its start side counts. */
static int64_t starts_below(const flat_cell *fc, int64_t q) {
  int64_t n = ceil_div(q, fc->per), per = fc->per, last = (fc->ranges - 1) * per;
  for (uint32_t k = 0; k + 1 < fc->nd; k++) {
    int64_t s = fc->st[k], hi1 = s - 1 < per - 1 ? s - 1 : per - 1;
    int64_t lo2 = per - s + 1 > hi1 + 1 ? per - s + 1 : hi1 + 1;
    n += level_count(fc, k, 1, hi1, q) + level_count(fc, k, lo2, per - 1, q < last ? q : last);
  }
  return n;
}

/* Chunks of one cell of shape csz. */
static int64_t cell_chunks(const dcpi_flat *fl, const int64_t *csz) {
  flat_cell fc;
  flat_cell_init(&fc, fl->cells.ndim, csz, fl->f);
  return starts_below(&fc, fc.numel);
}

/* Chunks of all cells whose first j coordinates have the sizes sz[0..j)
 * (the rest any): dimension by dimension, the full cells (n-1 of them, or
 * all n when the last is as large) and the last one. */
static int64_t tail_chunks(const dcpi_flat *fl, int64_t *sz, uint32_t j) {
  const dcpi_grid *g = &fl->cells;
  if (j == g->ndim) return cell_chunks(fl, sz);
  int64_t last = g->extent[j] - (g->n[j] - 1) * g->c[j];
  if (last == g->c[j] || g->n[j] == 1) {
    sz[j] = last;
    return g->n[j] * tail_chunks(fl, sz, j + 1);
  }
  sz[j] = g->c[j];
  int64_t full = (g->n[j] - 1) * tail_chunks(fl, sz, j + 1);
  sz[j] = last;
  return full + tail_chunks(fl, sz, j + 1);
}

dcp_status dcpi_flat_init(dcpi_flat *fl, const dcpi_grid *cells, int64_t f, uint64_t max_count,
                          dcpi_err *err) {
  if (f < 1) return dcpi_fail(err, DCP_ECORRUPT, "flat form with %lld ranges", (long long)f);
  fl->cells = *cells;
  fl->f = f;
  int64_t sz[DCP_MAX_NDIM];
  fl->count = tail_chunks(fl, sz, 0);
  if ((uint64_t)fl->count > max_count)
    return dcpi_fail(err, DCP_ECORRUPT, "flat form derives %lld chunks, more than the %llu "
                     "allowed", (long long)fl->count, (unsigned long long)max_count);
  return DCP_OK;
}

int64_t dcpi_flat_before_cell(const dcpi_flat *fl, int64_t cell) {
  const dcpi_grid *g = &fl->cells;
  if (cell >= g->count) return fl->count;
  int64_t at[DCP_MAX_NDIM], sz[DCP_MAX_NDIM], n = 0;
  for (uint32_t d = g->ndim; d-- > 0;) at[d] = cell % g->cells[d], cell /= g->cells[d];
  for (uint32_t d = 0; d < g->ndim; d++) {
    if (at[d] > 0) { /* cells before at[d] in dim d are full there */
      sz[d] = g->c[d];
      n += at[d] * tail_chunks(fl, sz, d + 1);
    }
    int64_t o;
    dcpi_grid_cell(g, d, at[d], &o, &sz[d]);
  }
  return n;
}

/* Set p's cell and range fields and compute that range's boxes. */
static void pos_range(const dcpi_flat *fl, dcpi_flat_pos *p, int64_t cell, int64_t range) {
  uint32_t nd = fl->cells.ndim;
  if (cell != p->cell) {
    flat_cell fc;
    dcpi_grid_box(&fl->cells, cell, p->coff, p->csz);
    flat_cell_init(&fc, nd, p->csz, fl->f);
    p->per = fc.per, p->ranges = fc.ranges, p->cell = cell;
  }
  p->range = range;
  int64_t begin = range * p->per, numel;
  dcpi_numel(nd, p->csz, &numel);
  int64_t cnt = numel - begin < p->per ? numel - begin : p->per;
  dcpi_flat_to_boxes(nd, p->coff, p->csz, begin, cnt, p->off, p->sz, 2 * DCP_MAX_NDIM - 1,
                     &p->nbox, NULL);
}

void dcpi_flat_seek(const dcpi_flat *fl, int64_t index, dcpi_flat_pos *p) {
  int64_t lo = 0, hi = fl->cells.count - 1;
  while (lo < hi) { /* the last cell whose first chunk is <= index */
    int64_t mid = lo + (hi - lo + 1) / 2;
    if (dcpi_flat_before_cell(fl, mid) <= index) lo = mid;
    else hi = mid - 1;
  }
  int64_t local = index - dcpi_flat_before_cell(fl, lo);
  flat_cell fc;
  p->cell = -1;
  pos_range(fl, p, lo, 0);
  flat_cell_init(&fc, fl->cells.ndim, p->csz, fl->f);
  int64_t rlo = 0, rhi = fc.ranges - 1;
  while (rlo < rhi) { /* the last range whose first box is <= local */
    int64_t mid = rlo + (rhi - rlo + 1) / 2;
    if (starts_below(&fc, mid * fc.per) <= local) rlo = mid;
    else rhi = mid - 1;
  }
  pos_range(fl, p, lo, rlo);
  p->index = index;
  p->box = local - starts_below(&fc, rlo * fc.per);
}

bool dcpi_flat_next(const dcpi_flat *fl, dcpi_flat_pos *p) {
  if (p->index + 1 >= fl->count) return false;
  p->index++;
  if (++p->box < (int64_t)p->nbox) return true;
  p->box = 0;
  if (p->range + 1 < p->ranges) pos_range(fl, p, p->cell, p->range + 1);
  else pos_range(fl, p, p->cell + 1, 0);
  return true;
}

void dcpi_flat_box(const dcpi_flat_pos *p, uint32_t ndim, int64_t *off, int64_t *size) {
  for (uint32_t d = 0; d < ndim; d++) {
    off[d] = p->off[(size_t)p->box * ndim + d];
    size[d] = p->sz[(size_t)p->box * ndim + d];
  }
}

/* The chunks of cell `cell` meeting box (off, size); see dcpi_flat_query. */
static int query_cell(const dcpi_flat *fl, int64_t cell, const int64_t *off, const int64_t *size,
                      int (*hit)(void *, int64_t, const int64_t *, const int64_t *), void *arg) {
  uint32_t nd = fl->cells.ndim;
  dcpi_flat_pos p; /* no initializer: its arrays are large and filled as used */
  p.cell = -1;
  pos_range(fl, &p, cell, 0);
  int64_t first = 0, last = 0;
  for (uint32_t d = 0; d < nd; d++) { /* the box's first and last element in the cell */
    int64_t lo = off[d] > p.coff[d] ? off[d] : p.coff[d];
    int64_t end = off[d] + size[d] < p.coff[d] + p.csz[d] ? off[d] + size[d] : p.coff[d] + p.csz[d];
    first = first * p.csz[d] + (lo - p.coff[d]);
    last = last * p.csz[d] + (end - 1 - p.coff[d]);
  }
  flat_cell fc;
  flat_cell_init(&fc, nd, p.csz, fl->f);
  int64_t r0 = first / fc.per, r1 = last / fc.per;
  int64_t index = dcpi_flat_before_cell(fl, cell) + starts_below(&fc, r0 * fc.per);
  for (int64_t r = r0; r <= r1; r++) {
    pos_range(fl, &p, cell, r);
    for (size_t j = 0; j < p.nbox; j++, index++) {
      const int64_t *bo = p.off + j * nd, *bs = p.sz + j * nd;
      int rc = dcpi_boxes_overlap(nd, bo, bs, off, size) ? hit(arg, index, bo, bs) : 0;
      if (rc) return rc;
    }
  }
  return 0;
}

int dcpi_flat_query(const dcpi_flat *fl, const int64_t *off, const int64_t *size,
                    int (*hit)(void *arg, int64_t index, const int64_t *off, const int64_t *size),
                    void *arg) {
  const dcpi_grid *g = &fl->cells;
  int64_t lo[DCP_MAX_NDIM], hi[DCP_MAX_NDIM], at[DCP_MAX_NDIM];
  for (uint32_t d = 0; d < g->ndim; d++) {
    lo[d] = at[d] = dcpi_grid_cell_of(g, d, off[d]);
    hi[d] = dcpi_grid_cell_of(g, d, off[d] + size[d] - 1);
  }
  for (;;) { /* the block of cells met, row-major: ascending chunk index */
    int64_t cell = 0;
    for (uint32_t d = 0; d < g->ndim; d++) cell = cell * g->cells[d] + at[d];
    int rc = query_cell(fl, cell, off, size, hit, arg);
    if (rc) return rc;
    uint32_t d = g->ndim;
    while (d-- > 0 && ++at[d] > hi[d]) at[d] = lo[d];
    if (d == UINT32_MAX) return 0;
  }
}

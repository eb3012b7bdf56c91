/* grid.c — see grid.h. */
#include "model/grid.h"

#include "base/checked.h"

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

/* grid.h — a regular grid of boxes over a tensor, the derived form of a
 * chunk list (docs/format.md, "Derived chunk lists").
 *
 * Per dimension d the extent e is cut into n outer cells of c elements (the
 * last one e - (n-1)*c, between 1 and c), and each outer cell of s
 * elements into sub-cells of ceil(s/k) elements (the last one smaller):
 * the layout's ceil-divided shards (k = 1), or those shards split again
 * into row pieces (the save planner's split of replicated boxes). The grid's
 * boxes are the products of the per-dimension sub-cells; their row-major
 * index is also their canonical (lexicographic offset) order, so index,
 * position and box convert into each other with arithmetic alone.
 *
 * Shared by the metadata codec (which stores n, c, k instead of the boxes)
 * and the load planner (which answers "which boxes meet this one" without a
 * list). Pure: no allocation, no I/O. */
#ifndef DCP_MODEL_GRID_H
#define DCP_MODEL_GRID_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

typedef struct dcpi_grid {
  uint32_t ndim;
  int64_t extent[DCP_MAX_NDIM];
  int64_t n[DCP_MAX_NDIM], c[DCP_MAX_NDIM], k[DCP_MAX_NDIM];
  /* derived by dcpi_grid_init */
  int64_t q[DCP_MAX_NDIM], m[DCP_MAX_NDIM];       /* full outer cell: piece size, pieces */
  int64_t q_last[DCP_MAX_NDIM], m_last[DCP_MAX_NDIM]; /* the last outer cell */
  int64_t cells[DCP_MAX_NDIM]; /* sub-cells in dimension d */
  int64_t count;               /* boxes: the product of cells */
} dcpi_grid;

/* Check (n, c, k) per dimension against shape and fill g. Rules: ndim
 * 1..DCP_MAX_NDIM, every extent >= 1, n >= 1, c >= 1, k >= 1,
 * (n-1)*c < extent <= n*c, and the box count fits int64 and is <= max_count.
 * Errors (DCP_ECORRUPT, the reason in err): a broken rule. */
dcp_status dcpi_grid_init(dcpi_grid *g, uint32_t ndim, const int64_t *shape, const int64_t *n,
                          const int64_t *c, const int64_t *k, uint64_t max_count,
                          dcpi_err *err);

/* Sub-cell j (0 <= j < cells[d]) of dimension d: its offset and size. */
void dcpi_grid_cell(const dcpi_grid *g, uint32_t d, int64_t j, int64_t *off, int64_t *size);

/* The sub-cell of dimension d that holds coordinate x (0 <= x < extent). */
int64_t dcpi_grid_cell_of(const dcpi_grid *g, uint32_t d, int64_t x);

/* Box number idx (0 <= idx < count), row-major over the sub-cells. */
void dcpi_grid_box(const dcpi_grid *g, int64_t idx, int64_t *off, int64_t *size);

/* Find (n, c, k) for dimension d whose sub-cells have exactly the sorted
 * boundaries b[0..nb] (b[0] = 0, b[nb] = extent, strictly increasing):
 * tries k = 1 with cells of the first piece's size, then first outer
 * cells made of the first j pieces (all of the first piece's size but the
 * last), each only when the next cell boundary repeats, so about O(nb) in
 * all. Returns false when none reproduces b. */
bool dcpi_grid_fit_dim(int64_t extent, const int64_t *b, int64_t nb, int64_t *n, int64_t *c,
                       int64_t *k);

#endif

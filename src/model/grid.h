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

/* ---- FLAT: outer cells cut into flat ranges ------------------------------
 *
 * The FLAT form of a chunk list (docs/format.md, "Derived chunk lists"):
 * the outer cells of `cells` (a grid with k = 1), each of numel elements cut
 * into ranges of per = ceil(numel / f) elements (the last shorter; ranges
 * starting at or past numel do not exist), each range into the boxes of
 * dcpi_flat_to_boxes. In format version 4 the chunks are numbered in that
 * generation order: cells row-major, ranges in order, boxes in flat order.
 * Everything below is arithmetic on (cells, f): the number of boxes that
 * start before a flat position of a cell is a sum of floor sums (O(ndim)
 * of them, O(log) each), so a chunk's index, a chunk's box and the chunks
 * meeting a box cost time in the chunks found, never in the list. */
typedef struct dcpi_flat {
  dcpi_grid cells; /* the outer cells (k = 1) */
  int64_t f;       /* ranges per cell (>= 1) */
  int64_t count;   /* chunks, set by dcpi_flat_init */
} dcpi_flat;

/* Check f >= 1 (cells already checked by dcpi_grid_init) and count the
 * chunks; fails with DCP_ECORRUPT when they are more than max_count. */
dcp_status dcpi_flat_init(dcpi_flat *fl, const dcpi_grid *cells, int64_t f, uint64_t max_count,
                          dcpi_err *err);

/* Where chunk `index` is: its outer cell (row-major index), its range in the
 * cell and its box within the range, plus that range's boxes. A cursor:
 * dcpi_flat_next steps to the following chunk. */
typedef struct dcpi_flat_pos {
  int64_t index, cell, range, box;
  int64_t coff[DCP_MAX_NDIM], csz[DCP_MAX_NDIM]; /* the cell */
  int64_t per, ranges;                           /* range length, ranges in the cell */
  size_t nbox;                                   /* boxes of this range */
  int64_t off[(2 * DCP_MAX_NDIM - 1) * DCP_MAX_NDIM], sz[(2 * DCP_MAX_NDIM - 1) * DCP_MAX_NDIM];
} dcpi_flat_pos;

/* Position *p at chunk index (0 <= index < count): binary searches over
 * the cells and the ranges of one cell, O(ndim log) counts each. */
void dcpi_flat_seek(const dcpi_flat *fl, int64_t index, dcpi_flat_pos *p);

/* Step *p to the next chunk (false past the last). O(ndim). */
bool dcpi_flat_next(const dcpi_flat *fl, dcpi_flat_pos *p);

/* The box of the chunk *p is at. */
void dcpi_flat_box(const dcpi_flat_pos *p, uint32_t ndim, int64_t *off, int64_t *size);

/* Chunks in the cells before cell `cell` (row-major), 0 <= cell <= cell count. */
int64_t dcpi_flat_before_cell(const dcpi_flat *fl, int64_t cell);

/* Call hit(arg, index, off, size) for every chunk that shares an element
 * with the non-empty box (off, size) inside the shape, in ascending index.
 * Walks the cells the box meets and, in each, the ranges of the flat span
 * between the box's first and last element there. A non-zero return of hit
 * stops the walk and is returned. */
int dcpi_flat_query(const dcpi_flat *fl, const int64_t *off, const int64_t *size,
                    int (*hit)(void *arg, int64_t index, const int64_t *off, const int64_t *size),
                    void *arg);

#endif

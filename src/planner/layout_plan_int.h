/* layout_plan_int.h — what layout_plan.c (per-rank writes) and
 * layout_pieces.c (every piece, and a piece by its offset) share: the
 * split of a box into pieces and the boxes a mesh position holds. Internal
 * to the planner. */
#ifndef DCP_PLANNER_LAYOUT_PLAN_INT_H
#define DCP_PLANNER_LAYOUT_PLAN_INT_H

#include "planner/layout_plan.h"

enum { DCPI_LP_MAXB = 2 * DCP_MAX_NDIM - 1 }; /* boxes of a flat range, at most */

/* The split of a box over its holders: piece count k, rows per piece (when
 * k > 1), rows and bytes per row (a 0-d box is one row). */
typedef struct dcpi_lp_split {
  uint32_t k;
  int64_t per, rows, row_bytes;
} dcpi_lp_split;

/* t names a fqn, layout and shape that fit each other and the world. */
dcp_status dcpi_lp_check_tensor(const dcpi_layout_tensor *t, int32_t world, dcpi_err *err);

/* The split of box sizes sz of t over ng holders (dcpi_split_pieces). */
dcpi_lp_split dcpi_lp_split_of(const dcpi_layout_tensor *t, const int64_t *sz, uint32_t ng,
                               const dcpi_save_opts *opts);

/* Piece p of k (rows_per rows each but the last) of box (off, sz), `rows`
 * rows of row_bytes: its box, bytes and byte offset in the box. */
void dcpi_lp_piece_of(uint32_t nd, const int64_t *off, const int64_t *sz, uint32_t k,
                      int64_t rows_per, uint32_t p, int64_t rows, int64_t row_bytes,
                      int64_t *box, int64_t *nbytes, uint64_t *at);

/* The boxes mesh position pos holds of t: its cell's box (none when
 * empty) or, for a flat tensor, the boxes of its range, into off/sz
 * (ndim each, DCPI_LP_MAXB boxes of room); their count. */
size_t dcpi_lp_boxes_at(const dcpi_layout_tensor *t, int64_t pos, int64_t *off, int64_t *sz);

/* The mesh dims whose coordinates a holder of t's box must share: the
 * sharding dims, and a flat tensor's flat dims. */
uint32_t dcpi_lp_fixed_dims(const dcpi_layout_tensor *t);

#endif

/* box.h — internal box helpers over plain (offset, size) arrays, so the
 * planner can keep boxes compactly instead of in fixed dcp_box structs. */
#ifndef DCP_MODEL_BOX_H
#define DCP_MODEL_BOX_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

/* Element count of sizes[0..ndim) into *numel; DCP_EINVAL for a negative
 * size, DCP_EOVERFLOW when the product overflows. ndim 0 gives 1. */
dcp_status dcpi_numel(uint32_t ndim, const int64_t *sizes, int64_t *numel);

/* Check a shape (non-negative extents, element count and byte size fit in
 * int64); `what` names it in the message. */
dcp_status dcpi_check_shape(uint32_t ndim, const int64_t *shape, size_t elem_size,
                            const char *what, dcpi_err *err);

/* Check that [offset, offset+size) is a valid box inside shape:
 * DCP_EINVAL for negative values, DCP_EOVERFLOW when offset+size overflows,
 * DCP_EBOUNDS when it pokes outside. `what` names it in the message. */
dcp_status dcpi_check_box_in(uint32_t ndim, const int64_t *shape, const int64_t *offset,
                             const int64_t *size, const char *what, dcpi_err *err);

/* true when the boxes (a_off, a_sz) and (b_off, b_sz) share an element. */
bool dcpi_boxes_overlap(uint32_t ndim, const int64_t *a_off, const int64_t *a_sz,
                        const int64_t *b_off, const int64_t *b_sz);

/* true when some size is zero (no elements). ndim 0 is never empty. */
bool dcpi_box_is_empty(uint32_t ndim, const int64_t *size);

/* Intersection of two boxes into (out_off, out_sz); returns false when it is
 * empty (outputs then hold a zero size where they miss). */
bool dcpi_box_intersect(uint32_t ndim, const int64_t *a_off, const int64_t *a_sz,
                        const int64_t *b_off, const int64_t *b_sz, int64_t *out_off,
                        int64_t *out_sz);

/* Format a box as "[o0:o0+s0, o1:o1+s1]" into buf (for error messages). */
const char *dcpi_box_str(uint32_t ndim, const int64_t *offset, const int64_t *size,
                         char *buf, size_t cap);

/* Format a shape as "[e0, e1]" into buf (for error messages). */
const char *dcpi_shape_str(uint32_t ndim, const int64_t *shape, char *buf, size_t cap);

/* Internal flat-range decomposition, used by dcp_flat_to_boxes and the
 * state: same contract, compact outputs (out_off/out_sz: cap*ndim each). */
dcp_status dcpi_flat_to_boxes(uint32_t ndim, const int64_t *reg_off, const int64_t *reg_sz,
                              int64_t flat_begin, int64_t flat_count, int64_t *out_off,
                              int64_t *out_sz, size_t cap, size_t *count, dcpi_err *err);

#endif

/* derive.h — derived chunk lists (format version 3, docs/format.md
 * "Derived chunk lists"): the boxes of a tensor's chunk list given by a
 * rule instead of listed. Shared by the encoder (which detects the rule)
 * and the decoder (which regenerates the boxes), so both derive the same
 * boxes in the same order. Pure. */
#ifndef DCP_METADATA_DERIVE_H
#define DCP_METADATA_DERIVE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "model/grid.h"

/* How a list's boxes are found (its first byte in version 3). */
enum {
  DCPI_FORM_LISTED = 0, /* every box in its entry (the version 2 list) */
  DCPI_FORM_GRID = 1,   /* a dcpi_grid: ndim x (n, c, k) */
  DCPI_FORM_FLAT = 2,   /* outer cells ndim x (n, c), each cut into f flat ranges */
  DCPI_FORM_COUNT = 3
};

/* A derived form: GRID uses grid; FLAT uses grid (k = 1: the outer cells)
 * and f. */
typedef struct dcpi_form {
  int kind;
  dcpi_grid grid;
  int64_t f;
} dcpi_form;

/* The boxes of a FLAT form, sorted by (offset, size): each outer cell (row
 * major) is cut into f ranges of ceil(numel/f) of its elements (the last
 * smaller, empty ones skipped), each range into at most 2*ndim-1 boxes
 * (dcpi_flat_to_boxes). Fails with DCP_ECORRUPT when they would be more
 * than max_count, DCP_ENOMEM. *offs and *sizes (n*ndim each) are
 * malloc'd; the caller frees them. */
dcp_status dcpi_derive_flat(const dcpi_form *fm, uint64_t max_count, int64_t **offs,
                            int64_t **sizes, size_t *n, dcpi_err *err);

/* The form of a sorted, non-empty list of n >= 2 boxes of a tensor of
 * shape, box i's offset at offs + i*stride and its size at sizes +
 * i*stride (stride ndim: two arrays; 2*ndim with sizes = offs + ndim: the
 * builder's interleaved boxes): GRID when the boxes are exactly a grid's,
 * else FLAT when they are exactly the flat ranges of the outer cells
 * `cells` (ndim cell counts, e.g. from the tensor's layout; NULL: none) or
 * of the whole tensor, else LISTED. With gen_order (room for n; may be
 * NULL) and a FLAT result, gen_order[j] is the sorted index of the j-th
 * box in generation order (version 4's order, model/grid.h); otherwise
 * its contents are unspecified. Deterministic. DCP_ENOMEM only. */
dcp_status dcpi_derive_detect(uint32_t ndim, const int64_t *shape, size_t n, const int64_t *offs,
                              const int64_t *sizes, size_t stride, const int64_t *cells,
                              dcpi_form *out, uint32_t *gen_order, dcpi_err *err);

#endif

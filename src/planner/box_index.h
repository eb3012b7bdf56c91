/* box_index.h — which saved chunks of one fqn intersect a query box.
 *
 * Built over the saved chunk boxes of one tensor, kept compactly as
 * row-major int64 arrays (chunk i's offset is off[i*ndim .. i*ndim+ndim)).
 * The index picks one "sweep" dimension, sorts the chunks by their start in
 * it and keeps a running maximum of their ends, so a query binary-searches
 * its end and walks back only while that running maximum still reaches past
 * its start; every candidate is then tested in all dimensions.
 *
 * Complexity (n chunks, d = ndim): build O(n*d) to choose the dimension plus
 * O(n log n) to sort (O(n) when the chunks already come sorted in it, as the
 * metadata's lexicographic chunk order does for dimension 0); memory
 * 24 bytes per chunk. Query O(log n + w*d + k log k), where w is
 * the number of chunks walked: those starting inside the query's extent in
 * the sweep dimension plus those an earlier, longer chunk keeps in reach.
 * The sweep dimension minimises the expected w (see box_index.c). Pure. */
#ifndef DCP_PLANNER_BOX_INDEX_H
#define DCP_PLANNER_BOX_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct dcpi_box_index_entry {
  int64_t start;  /* the chunk's offset in the sweep dimension */
  int64_t reach;  /* max end in the sweep dimension over entries [0..this] */
  uint32_t chunk; /* chunk index */
} dcpi_box_index_entry;

typedef struct dcpi_box_index {
  uint32_t ndim;
  uint32_t dim; /* sweep dimension (0 when ndim is 0) */
  size_t count;
  const int64_t *off, *sz; /* borrowed: count*ndim each */
  dcpi_box_index_entry *entries; /* count, sorted by (start, chunk) */
} dcpi_box_index;

/* Build an index over count boxes (off/sz: count*ndim each, row-major).
 * The arrays are borrowed and must outlive the index, unchanged. Boxes
 * should be valid (non-negative, offset+size not overflowing); they may
 * overlap each other (the answers stay exact) and may be empty (such boxes
 * never match). Errors: DCP_EINVAL (ndim > DCP_MAX_NDIM, NULL arrays with
 * count > 0), DCP_EOVERFLOW (count > UINT32_MAX), DCP_ENOMEM. On error *ix
 * is left empty (safe to free). */
dcp_status dcpi_box_index_build(dcpi_box_index *ix, uint32_t ndim, size_t count,
                                const int64_t *off, const int64_t *sz, dcpi_err *err);

/* Release the index's memory (not the borrowed boxes). ix may be NULL. */
void dcpi_box_index_free(dcpi_box_index *ix);

/* Chunks whose box shares at least one element with the query box
 * (q_off/q_sz: ndim each), in ascending chunk index, into *hits (a growable
 * caller-owned buffer of *cap entries, reallocated as needed; start with
 * NULL/0 and free() it when done). *nhits receives their number. An empty
 * query box has no hits. Errors: DCP_ENOMEM (then *hits stays valid). */
dcp_status dcpi_box_index_query(const dcpi_box_index *ix, const int64_t *q_off,
                                const int64_t *q_sz, uint32_t **hits, size_t *cap,
                                size_t *nhits);

#endif

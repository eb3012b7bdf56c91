/* load_plan.h — a rank's load plan: which saved chunks overlap each of its
 * destination chunks, where, and which bytes to copy.
 *
 * Input: the rank's destination chunks (from a dcp_state, or plain arrays so
 * a benchmark can synthesize ranks without tensor data) and the saved side,
 * described per fqn by dcpi_saved_tensor (no dependency on the metadata
 * codec: the runtime adapts its view to it). Output: one dcpi_overlap per
 * (destination chunk, saved chunk) pair that shares elements, plus an
 * iterator over the contiguous byte runs of each overlap.
 *
 * Pure and deterministic: overlaps are ordered by destination chunk, then
 * saved chunk index, whatever the index does internally. An index is built
 * only for the fqns the rank loads, and freed before the next one. */
#ifndef DCP_PLANNER_LOAD_PLAN_H
#define DCP_PLANNER_LOAD_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "model/grid.h"

/* ---- the saved side ------------------------------------------------------ */

/* One saved tensor: what the checkpoint holds for an fqn. All pointers are
 * borrowed for the duration of the call that receives the struct. */
typedef struct dcpi_saved_tensor {
  const char *fqn;          /* NUL-terminated */
  dcp_dtype dtype;
  uint32_t ndim;            /* 0..DCP_MAX_NDIM */
  const int64_t *shape;     /* ndim extents */
  size_t nchunks;
  const int64_t *chunk_off; /* nchunks*ndim, row-major: chunk i at [i*ndim] */
  const int64_t *chunk_sz;  /* nchunks*ndim */
  const uint64_t *chunk_id; /* nchunks opaque ids (the runtime's handle on the
                               chunk's storage ref), or NULL: id = index */
  const dcpi_grid *grid;    /* or NULL; when set, chunk i is the grid's box i
                               (nchunks = grid->count) and chunk_off/chunk_sz
                               may be NULL: the planner finds the chunks that
                               meet a box arithmetically, with no index */
  const dcpi_flat *flat;    /* or NULL; when set (and grid is not), chunk i
                               is the FLAT form's chunk i in generation order
                               (nchunks = flat->count), found by arithmetic
                               too (dcpi_flat_query) */
} dcpi_saved_tensor;

/* Fill *out with the saved tensor named fqn (fqn_len bytes, NUL-terminated).
 * Return DCP_OK, DCP_ENOTFOUND when the checkpoint has no such tensor, or
 * another error (e.g. DCP_ECORRUPT from decoding), which the planner passes
 * on with the message left in err. *out's pointers must stay valid until the
 * next call of the callback or the end of the planning call. */
typedef dcp_status (*dcpi_saved_lookup_fn)(void *arg, const char *fqn, size_t fqn_len,
                                           dcpi_saved_tensor *out, dcpi_err *err);

/* Where the planner finds saved tensors: a sorted array (strictly ascending
 * by strcmp of fqn, checked), or, when tensors is NULL, a lookup callback. */
typedef struct dcpi_saved_source {
  const dcpi_saved_tensor *tensors;
  size_t ntensors;
  dcpi_saved_lookup_fn lookup;
  void *arg;
} dcpi_saved_source;

/* The entry of the sorted array named fqn (binary search), or NULL. */
const dcpi_saved_tensor *dcpi_saved_find(const dcpi_saved_tensor *tensors, size_t n,
                                         const char *fqn);

/* ---- the destination side ----------------------------------------------- */

/* A tensor the rank loads (a plain-array mirror of dcpi_tensor_item). */
typedef struct dcpi_load_tensor {
  const char *fqn;
  dcp_dtype dtype;
  uint32_t ndim;
  const int64_t *shape; /* ndim extents */
} dcpi_load_tensor;

/* A destination chunk: a box of tensor `tensor` (offset/size: its ndim). */
typedef struct dcpi_load_chunk {
  uint32_t tensor;
  const int64_t *offset;
  const int64_t *size;
} dcpi_load_chunk;

/* ---- the plan -------------------------------------------------------------- */

/* One overlap of a destination chunk with a saved chunk. Coordinates are in
 * elements; the int64 arrays (ndim entries each) are owned by the plan. */
typedef struct dcpi_overlap {
  uint32_t dest_chunk;   /* index into the plan's input chunks */
  uint32_t tensor;       /* index into the plan's input tensors */
  uint32_t saved_chunk;  /* index into the saved tensor's chunks */
  uint32_t ndim;
  uint64_t saved_id;     /* chunk_id[saved_chunk] (or saved_chunk) */
  int64_t elem_size;     /* bytes per element */
  const int64_t *offset; /* the intersection, global coordinates */
  const int64_t *size;
  const int64_t *dest_offset; /* its start inside the destination chunk */
  const int64_t *src_offset;  /* its start inside the saved chunk */
  const int64_t *dest_size;   /* the destination chunk's extents */
  const int64_t *src_size;    /* the saved chunk's extents */
  int64_t src_first;     /* [src_first, src_last): the bytes of the saved */
  int64_t src_last;      /* chunk's row-major data that cover the overlap */
  int64_t bytes;         /* bytes of the intersection */
} dcpi_overlap;

typedef struct dcpi_load_plan {
  size_t nchunks;          /* destination chunks in the input */
  size_t noverlaps;
  dcpi_overlap *overlaps;  /* by (dest_chunk, saved_chunk) */
  size_t *chunk_first;     /* nchunks+1: chunk i's overlaps are
                              [chunk_first[i], chunk_first[i+1]) */
  int64_t total_bytes;     /* sum of overlap bytes (= bytes the rank loads) */
  int64_t *coords;         /* owned storage behind the overlaps' arrays */
} dcpi_load_plan;

/* Plan the load of ntensors tensors whose destination chunks are
 * chunks[0..nchunks) against the saved side src.
 *
 * Every tensor is checked against the checkpoint, chunks or not:
 *  DCP_ENOTFOUND   the checkpoint has no such fqn (message names it);
 *  DCP_EMISMATCH   dtype or shape differs (message names fqn, both values);
 *  DCP_EINCOMPLETE a destination box is not fully covered by saved chunks
 *                  (message names fqn, box and the missing element count);
 *  DCP_ECORRUPT    a saved chunk lies outside its shape, or saved chunks
 *                  overlap so that they cover more than the box;
 *  DCP_EINVAL / DCP_EBOUNDS / DCP_EOVERFLOW  malformed input (bad dtype,
 *                  tensor index, a box outside its shape, unsorted array);
 *  DCP_ENOMEM, or whatever the lookup returns.
 * Zero-size destination boxes produce no overlaps and no error. Coverage is
 * checked by volume (sum of intersection volumes = box volume), which is
 * exact because saved boxes of one fqn do not overlap.
 * On success *out is a new plan (free with dcpi_load_plan_free); on error
 * *out is NULL. */
dcp_status dcpi_load_plan_build(const dcpi_load_tensor *tensors, size_t ntensors,
                                const dcpi_load_chunk *chunks, size_t nchunks,
                                const dcpi_saved_source *src, dcpi_load_plan **out,
                                dcpi_err *err);

/* The same for every tensor item of a state: destination chunk i is
 * st->chunks[i] (whose data pointer the runtime copies into). */
dcp_status dcpi_load_plan_from_state(const dcp_state *st, const dcpi_saved_source *src,
                                     dcpi_load_plan **out, dcpi_err *err);

void dcpi_load_plan_free(dcpi_load_plan *plan);

/* ---- contiguous byte runs ------------------------------------------------- */

/* One contiguous copy: len bytes from src_off in the saved chunk's raw
 * row-major bytes to dest_off in the destination chunk's data. */
typedef struct dcpi_run {
  int64_t dest_off;
  int64_t src_off;
  int64_t len;
} dcpi_run;

/* Iterates an overlap's runs in row-major order. Trailing dimensions are
 * merged into one run while the intersection spans both chunks fully there,
 * so a full-width overlap is one run. Holds no memory; the overlap must
 * outlive it. */
typedef struct dcpi_run_iter {
  uint32_t outer;              /* dims [0, outer) are iterated */
  int64_t len;                 /* bytes per run */
  int64_t remaining;           /* runs left */
  int64_t dest_off, src_off;   /* the next run */
  int64_t count[DCP_MAX_NDIM]; /* intersection extents of the outer dims */
  int64_t idx[DCP_MAX_NDIM];
  int64_t dstride[DCP_MAX_NDIM], sstride[DCP_MAX_NDIM]; /* bytes */
} dcpi_run_iter;

/* Start iterating ov's runs. */
void dcpi_run_iter_init(dcpi_run_iter *it, const dcpi_overlap *ov);

/* Next run into *run; false when there are none left. */
bool dcpi_run_iter_next(dcpi_run_iter *it, dcpi_run *run);

/* Number of runs of ov (what the iterator yields). */
int64_t dcpi_overlap_run_count(const dcpi_overlap *ov);

#endif

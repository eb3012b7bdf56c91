/* local_plan_int.h — the layout of dcpi_local_plan, shared by the files
 * of the save planner (builder, codec, global plan). Everyone else goes
 * through the accessors of save_plan.h. */
#ifndef DCP_PLANNER_LOCAL_PLAN_INT_H
#define DCP_PLANNER_LOCAL_PLAN_INT_H

#include "planner/save_plan.h"

typedef struct dcpi_lp_tensor {
  uint64_t name_at;  /* byte offset of the NUL-terminated fqn in names */
  uint64_t shape_at; /* index of ndim extents in pool */
  uint64_t boxes_at; /* after finish: index in pool of nchunks boxes, each
                        ndim offsets then ndim sizes */
  uint32_t name_len;
  uint32_t dtype;
  uint32_t ndim;
  uint32_t nchunks;     /* after finish */
  uint32_t first_chunk; /* after finish: canonical index of its first chunk */
  uint32_t layout;      /* 1: saved from a layout (dcpi_local_plan_mark_layout) */
} dcpi_lp_tensor;

typedef struct dcpi_lp_bytes {
  uint64_t name_at;
  uint32_t name_len;
  uint32_t scope;
  int64_t length;
  uint32_t source;
} dcpi_lp_bytes;

/* A chunk as added, before finish. */
typedef struct dcpi_lp_pending {
  uint64_t box_at; /* index in pool: ndim offsets then ndim sizes */
  uint32_t tensor; /* insertion index */
} dcpi_lp_pending;

struct dcpi_local_plan {
  int32_t rank, world_size;
  dcpi_save_opts opts;
  bool finished;
  char *names; /* NUL-terminated names back to back */
  size_t names_len, names_cap;
  int64_t *pool; /* shapes and boxes */
  size_t pool_len, pool_cap;
  dcpi_lp_tensor *tensors;
  size_t ntensors, tensors_cap;
  dcpi_lp_bytes *bytes;
  size_t nbytes, bytes_cap;
  size_t nchunks;
  dcpi_lp_pending *pending; /* before finish; NULL after */
  size_t pending_cap;
  uint32_t *chunk_tensor; /* after finish: canonical tensor of each chunk */
  uint32_t *chunk_source; /* after finish: insertion index of each chunk */
};

/* Pool index of canonical chunk c's box (finished plans): ndim offsets,
 * then ndim sizes. */
static inline const int64_t *dcpi_lp_box(const dcpi_local_plan *lp, uint32_t c) {
  const dcpi_lp_tensor *t = &lp->tensors[lp->chunk_tensor[c]];
  return lp->pool + t->boxes_at + (uint64_t)(c - t->first_chunk) * 2 * t->ndim;
}

#endif

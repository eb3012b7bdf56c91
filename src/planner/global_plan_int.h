/* global_plan_int.h — the layout of dcpi_global_plan, shared by its
 * builder (save_plan.c) and its accessors (global_plan.c). */
#ifndef DCP_PLANNER_GLOBAL_PLAN_INT_H
#define DCP_PLANNER_GLOBAL_PLAN_INT_H

#include "planner/save_plan.h"

typedef struct dcpi_gp_tensor_rec {
  uint64_t name_at; /* offset of the NUL-terminated fqn in names */
  uint32_t name_len;
  uint32_t dtype;
  uint32_t ndim;
  uint32_t layout; /* owners by the rule of layout_plan.h */
  int64_t shape[DCP_MAX_NDIM];
  int64_t numel, nbytes;
  uint64_t first_item, nitems;
  uint64_t boxes_at; /* index in boxes of its items' boxes, 2*ndim each */
} dcpi_gp_tensor_rec;

/* 16 bytes: a 10k-rank job has millions. The holder count and byte size
 * are derived (dcpi_gp_item_nholders / _nbytes). */
typedef struct dcpi_gp_item_rec {
  uint64_t holders_at; /* index in holders / holder_chunks; the holders run
                          to the next item's holders_at (nholdings last) */
  uint32_t tensor;
  int32_t owner;
} dcpi_gp_item_rec;

typedef struct dcpi_gp_bytes_rec {
  uint64_t name_at;
  uint64_t holders_at; /* index in bholders / bholder_items */
  int64_t length;
  uint32_t name_len;
  uint32_t scope;
  int32_t rank; /* -1 when replicated */
  int32_t owner;
  uint32_t nholders;
} dcpi_gp_bytes_rec;

struct dcpi_global_plan {
  int32_t world_size;
  dcpi_save_opts opts;
  char *names;
  dcpi_gp_tensor_rec *tensors;
  size_t ntensors;
  int64_t *boxes;
  dcpi_gp_item_rec *items;
  size_t nitems;
  int32_t *holders;        /* nholdings */
  uint32_t *holder_chunks; /* nholdings */
  size_t nholdings;
  uint64_t *piece_at;      /* nitems: a piece's byte offset in its holders'
                              chunk, UINT64_MAX for a whole box; NULL when
                              nothing was split */
  dcpi_gp_bytes_rec *bytes;
  size_t nbytes;
  int32_t *bholders;       /* nbholdings */
  uint32_t *bholder_items; /* nbholdings */
  size_t nbholdings;
  int64_t *load;             /* world_size */
  size_t *rank_items_at;     /* world_size + 1 */
  uint32_t *rank_items;      /* nitems, grouped by owner */
  size_t *rank_bytes_at;     /* world_size + 1 */
  uint32_t *rank_bytes;      /* nbytes, grouped by owner */
  int64_t tensor_bytes, bytes_bytes;
};

/* Box of item i: ndim offsets then ndim sizes (a tensor's item boxes are
 * stored back to back in item order). */
static inline const int64_t *dcpi_gp_item_box(const dcpi_global_plan *gp, size_t i) {
  const dcpi_gp_tensor_rec *t = &gp->tensors[gp->items[i].tensor];
  return gp->boxes + t->boxes_at + (i - t->first_item) * 2 * t->ndim;
}

static inline uint32_t dcpi_gp_item_nholders(const dcpi_global_plan *gp, size_t i) {
  uint64_t end = i + 1 < gp->nitems ? gp->items[i + 1].holders_at : gp->nholdings;
  return (uint32_t)(end - gp->items[i].holders_at);
}

/* Bytes of item i (cannot overflow: the box lies in a checked shape). */
static inline int64_t dcpi_gp_item_nbytes(const dcpi_global_plan *gp, size_t i) {
  const dcpi_gp_tensor_rec *t = &gp->tensors[gp->items[i].tensor];
  const int64_t *size = dcpi_gp_item_box(gp, i) + t->ndim;
  int64_t n = 1;
  for (uint32_t d = 0; d < t->ndim; d++) n *= size[d];
  return n * (int64_t)dcp_dtype_size((dcp_dtype)t->dtype);
}

#endif

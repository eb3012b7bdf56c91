/* layout.h — internals of dcp_layout, for the planner and metadata. */
#ifndef DCP_MODEL_LAYOUT_H
#define DCP_MODEL_LAYOUT_H

#include <stdbool.h>

#include "base/err.h"

typedef struct dcpi_rank_pos {
  int32_t rank;
  int64_t pos; /* row-major mesh position */
} dcpi_rank_pos;

struct dcp_layout {
  uint32_t mesh_ndim;
  int64_t mesh_shape[DCP_MAX_MESH_NDIM];
  int64_t nranks;        /* prod(mesh_shape) */
  int32_t *ranks;        /* nranks, row-major mesh order */
  dcpi_rank_pos *by_rank; /* nranks, sorted by rank, for lookups */
  uint32_t tensor_ndim;
  uint32_t tensor_map[DCP_MAX_NDIM];
};

/* Build a layout from plain arrays (see dcp_layout_create for the rules). */
dcp_status dcpi_layout_create(uint32_t mesh_ndim, const int64_t *mesh_shape,
                              const int32_t *mesh_ranks, uint32_t tensor_ndim,
                              const uint32_t *tensor_map, dcp_layout **out, dcpi_err *err);

/* DCP_OK when map (tensor_ndim masks) is a valid tensor_map over a mesh of
 * mesh_ndim dims (each mask names existing mesh dims, no mesh dim twice),
 * else DCP_EINVAL with the reason. */
dcp_status dcpi_layout_check_map(uint32_t mesh_ndim, uint32_t tensor_ndim, const uint32_t *map,
                                 dcpi_err *err);

/* A deep copy of src into *out. */
dcp_status dcpi_layout_clone(const dcp_layout *src, dcp_layout **out);

/* Mesh position of rank, or -1 when it is not in the mesh. */
int64_t dcpi_layout_position(const dcp_layout *l, int32_t rank);

/* Box (offset/size, tensor_ndim each) of the rank at mesh position pos of a
 * tensor of global_shape. pos must be in [0, nranks). */
void dcpi_layout_box_at(const dcp_layout *l, const int64_t *global_shape, int64_t pos,
                        int64_t *offset, int64_t *size);

/* Shard `index` of `shards` ceil-divided shards of a dimension of
 * `extent` (>= 0): [*lo, *lo + *size), empty past the end. The rule of
 * dcpi_layout_box_at in one dimension. */
void dcpi_layout_split(int64_t extent, int64_t shards, int64_t index, int64_t *lo,
                       int64_t *size);

#endif

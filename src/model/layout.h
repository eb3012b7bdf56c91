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

/* The mask of the mesh dims that shard some tensor dim of l. */
uint32_t dcpi_layout_sharding_dims(const dcp_layout *l);

/* The ranks at every mesh position whose coordinates equal pos's on the
 * mesh dims in `fixed`, ascending, into out (when not NULL); their count
 * into *count (the product of the other dims' extents). With fixed = the
 * sharding dims this is pos's replica group. Errors: DCP_ENOMEM. */
dcp_status dcpi_layout_holders(const dcp_layout *l, int64_t pos, uint32_t fixed, int32_t *out,
                               size_t *count);

/* Whether pos leads its group of dcpi_layout_holders(fixed): its
 * coordinates on the other mesh dims are all 0. */
bool dcpi_layout_leads(const dcp_layout *l, int64_t pos, uint32_t fixed);

/* A flat-sharded tensor (dcp_state_add_flat_sharded): the mesh dims in
 * flat_dims (disjoint from the sharding dims) cut each cell (the box
 * dcpi_layout_box_at gives), flattened row-major, into ceil-divided ranges:
 * the rank at pos holds range *index of *nparts, its index row-major over
 * flat_dims' coordinates (lower mesh dim more significant, as tensor_map
 * combines sharding dims), [*begin, *begin + *count) of the cell's
 * elements (dcpi_layout_split); the other dims replicate it. The cell goes
 * to cell_off/cell_sz (tensor_ndim each). global_shape must be a checked
 * shape, pos in [0, nranks). */
void dcpi_layout_flat_range_at(const dcp_layout *l, const int64_t *global_shape, int64_t pos,
                               uint32_t flat_dims, int64_t *cell_off, int64_t *cell_sz,
                               int64_t *index, int64_t *nparts, int64_t *begin, int64_t *count);

/* The boxes of that range (dcpi_flat_to_boxes, flat order): at most
 * 2*ndim-1 (none for an empty range), into off/sz (tensor_ndim per box),
 * their count in *n. */
void dcpi_layout_flat_boxes_at(const dcp_layout *l, const int64_t *global_shape, int64_t pos,
                               uint32_t flat_dims, int64_t *off, int64_t *sz, size_t *n);

/* The flat dims a caller asked for, checked: 0 means every mesh dim that
 * shards nothing; otherwise a mask of existing mesh dims that shard
 * nothing. Resolved into *out. Errors: DCP_EINVAL with the reason. */
dcp_status dcpi_layout_flat_dims(const dcp_layout *l, uint32_t asked, uint32_t *out,
                                 dcpi_err *err);

#endif

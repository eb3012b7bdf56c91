/* view_mesh.c — the public accessors of a view's save-time meshes and of the
 * layout each tensor was saved with (dcp.h; section MESHES and the tensor
 * index's mesh fields in docs/format.md). Thin checks over the decoded view:
 * every mesh and tensor_map was validated when the view was opened. */
#include <string.h>

#include "metadata/view.h"

size_t dcp_meta_mesh_count(const dcp_meta *meta) { return dcpi_meta_mesh_count(meta); }

dcp_status dcp_meta_mesh(const dcp_meta *meta, size_t index, dcp_mesh_info *out) {
  dcpi_mesh_info mi;
  if (!out) return DCP_EINVAL;
  dcp_status rc = dcpi_meta_mesh(meta, index, &mi);
  if (rc == DCP_OK) *out = (dcp_mesh_info){.ndim = mi.ndim, .shape = mi.shape, .ranks = mi.ranks};
  return rc;
}

dcp_status dcp_meta_tensor_layout(const dcp_meta *meta, size_t tensor, size_t *mesh,
                                  uint32_t *tensor_map) {
  if (!meta || !mesh) return DCP_EINVAL;
  if (tensor >= dcp_meta_tensor_count(meta)) return DCP_ENOTFOUND;
  uint32_t map[DCP_MAX_NDIM];
  int32_t at = dcpi_meta_tensor_layout(meta, tensor, map);
  if (at < 0) return DCP_ENOTFOUND;
  dcp_tensor_info t;
  dcp_meta_tensor(meta, tensor, &t);
  *mesh = (size_t)at;
  if (tensor_map) memcpy(tensor_map, map, t.ndim * sizeof *map);
  return DCP_OK;
}

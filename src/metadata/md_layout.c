/* md_layout.c — recording the layout a tensor was saved from: its mesh
 * (each distinct mesh once) and tensor_map, set after the tensor was
 * declared (the commit learns layouts with the write results). */
#include <string.h>

#include "metadata/md_int.h"
#include "metadata/meta.h"

dcp_status dcpi_md_find_tensor(const dcpi_md *md, const char *fqn, size_t len, uint32_t *tid) {
  uint32_t v;
  if (!md || !fqn || !dcpi_strmap_get(&md->names, fqn, len, &v) || (v & DCPI_MD_BYTES_BIT))
    return DCP_ENOTFOUND;
  *tid = v;
  return DCP_OK;
}

/* true when mesh m is (ndim, shape, ranks). */
static bool same_mesh(const dcpi_md_mesh *m, uint32_t ndim, const int64_t *shape,
                      const int32_t *ranks) {
  if (m->ndim != ndim || memcmp(m->shape, shape, ndim * sizeof *shape)) return false;
  return !memcmp(m->ranks, ranks, m->nranks * sizeof *ranks);
}

dcp_status dcpi_md_intern_mesh(dcpi_md *md, uint32_t ndim, const int64_t *shape,
                               const int32_t *ranks, uint32_t *id, dcpi_err *err) {
  if (!md || !ranks || !id) return dcpi_fail(err, DCP_EINVAL, "NULL argument to intern_mesh");
  for (size_t m = 0; ndim <= DCP_MAX_MESH_NDIM && m < md->nmeshes; m++)
    if (same_mesh(&md->meshes[m], ndim, shape, ranks)) {
      *id = (uint32_t)m;
      return DCP_OK;
    }
  return dcpi_md_add_mesh(md, ndim, shape, ranks, id, err);
}

bool dcpi_md_tensor_has_layout(const dcpi_md *md, uint32_t tid, uint32_t ndim) {
  return !md || tid >= md->ntensors || md->tensors[tid].mesh >= 0 || md->tensors[tid].ndim != ndim;
}

dcp_status dcpi_md_set_tensor_layout(dcpi_md *md, uint32_t tid, int32_t mesh,
                                     const uint32_t *tensor_map, dcpi_err *err) {
  if (!md || tid >= md->ntensors) return dcpi_fail(err, DCP_ENOTFOUND, "no tensor %u", tid);
  dcpi_md_tensor *t = &md->tensors[tid];
  dcp_status rc = dcpi_md_check_tensor_mesh(md, t->fqn, t->ndim, mesh, tensor_map, err);
  if (rc != DCP_OK) return rc;
  t->mesh = mesh;
  memset(t->tensor_map, 0, sizeof t->tensor_map);
  if (mesh >= 0) memcpy(t->tensor_map, tensor_map, t->ndim * sizeof *tensor_map);
  return DCP_OK;
}

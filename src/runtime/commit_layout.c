/* commit_layout.c — the layouts of a save travel to the coordinator with
 * the write results, so the metadata records each tensor's mesh and
 * tensor_map (docs/format.md, MESHES): a tensor's layout is sent once, by
 * the rank at the first position of its mesh, and rank 0 stores each
 * distinct mesh once. Record (after the kind byte DCPI_RESULT_LAYOUT):
 *   var fqn length, fqn bytes, var mesh ndim, ndim x var extent,
 *   prod(extents) x var rank, var tensor ndim, tensor ndim x var mask */
#include <stdlib.h>
#include <string.h>

#include "model/layout.h"
#include "model/state.h"
#include "runtime/commit.h"

void dcpi_commit_put_layouts(dcpi_wbuf *out, const dcp_state *st) {
  for (size_t t = 0; st && t < st->ntensors; t++) {
    const dcpi_tensor_item *ti = &st->tensors[t];
    /* a flat tensor's layout gives its cells, which the encoder's FLAT
     * form cuts (the metadata records the mesh and map alike) */
    const dcp_layout *l = ti->layout ? ti->layout : ti->flat;
    if (!l || l->ranks[0] != st->rank) continue;
    dcpi_w_u8(out, DCPI_RESULT_LAYOUT);
    dcpi_w_varint(out, ti->fqn_len);
    dcpi_w_bytes(out, ti->fqn, ti->fqn_len);
    dcpi_w_varint(out, l->mesh_ndim);
    for (uint32_t d = 0; d < l->mesh_ndim; d++) dcpi_w_varint(out, (uint64_t)l->mesh_shape[d]);
    for (int64_t r = 0; r < l->nranks; r++) dcpi_w_varint(out, (uint64_t)l->ranks[r]);
    dcpi_w_varint(out, l->tensor_ndim);
    for (uint32_t d = 0; d < l->tensor_ndim; d++) dcpi_w_varint(out, l->tensor_map[d]);
  }
}

/* Read a record's mesh and tensor map into a new layout (validated by the
 * layout builder: extents, distinct ranks, masks). */
static bool read_layout(dcpi_rbuf *r, int32_t world, dcp_layout **out) {
  uint64_t nd, tnd, v;
  int64_t shape[DCP_MAX_MESH_NDIM], n = 1;
  uint32_t map[DCP_MAX_NDIM];
  if (!dcpi_r_varint(r, &nd) || nd < 1 || nd > DCP_MAX_MESH_NDIM) return false;
  for (uint64_t d = 0; d < nd; d++) {
    if (!dcpi_r_varint(r, &v) || v < 1 || v > dcpi_r_left(r)) return false;
    shape[d] = (int64_t)v;
    n *= shape[d];
    if (n > (int64_t)dcpi_r_left(r)) return false; /* each rank takes a byte at least */
  }
  int32_t *ranks = malloc((size_t)n * sizeof *ranks);
  bool ok = ranks != NULL;
  for (int64_t i = 0; ok && i < n; i++) {
    ok = dcpi_r_varint(r, &v) && v < (uint64_t)world;
    ranks[i] = (int32_t)v;
  }
  ok = ok && dcpi_r_varint(r, &tnd) && tnd <= DCP_MAX_NDIM;
  for (uint64_t d = 0; ok && d < tnd; d++) {
    ok = dcpi_r_varint(r, &v) && v <= UINT32_MAX;
    map[d] = (uint32_t)v;
  }
  dcpi_err err;
  ok = ok && !dcpi_layout_create((uint32_t)nd, shape, ranks, (uint32_t)tnd, map, out, &err);
  free(ranks);
  return ok;
}

dcp_status dcpi_commit_take_layout(dcpi_md *md, dcpi_rbuf *r, int32_t rank, int32_t world,
                                   dcpi_err *err) {
  uint64_t len;
  if (!dcpi_r_varint(r, &len) || len == 0 || len > dcpi_r_left(r) || len > DCP_MAX_NAME)
    return dcpi_fail(err, DCP_ECORRUPT, "malformed layout record from rank %d", rank);
  const char *fqn = (const char *)r->p + r->pos;
  r->pos += (size_t)len;
  dcp_layout *l = NULL;
  if (!read_layout(r, world, &l))
    return dcpi_fail(err, DCP_ECORRUPT, "malformed layout record from rank %d", rank);
  uint32_t tid, mesh;
  dcp_status rc = DCP_OK;
  /* a tensor the plan has, of the layout's ndim, not yet given a layout */
  if (!dcpi_md_find_tensor(md, fqn, (size_t)len, &tid) &&
      !dcpi_md_tensor_has_layout(md, tid, l->tensor_ndim)) {
    rc = dcpi_md_intern_mesh(md, l->mesh_ndim, l->mesh_shape, l->ranks, &mesh, err);
    if (!rc) rc = dcpi_md_set_tensor_layout(md, tid, (int32_t)mesh, l->tensor_map, err);
  }
  dcp_layout_free(l);
  return rc;
}

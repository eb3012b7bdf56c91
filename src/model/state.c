/* state.c — a rank's items: declared tensors, their local chunks (caller
 * memory) and bytes items. Validates everything on the way in so the
 * planner only sees well-formed input. */
#include "model/state.h"

#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/err.h"
#include "model/box.h"
#include "model/layout.h"
#include "model/name.h"

dcp_status dcpi_check_name(const char *name, const char *what, dcpi_err *err) {
  size_t len = name ? strnlen(name, DCP_MAX_NAME + 1) : 0;
  return dcpi_name_check(name, len, what, DCP_ENAME, err);
}

dcp_status dcpi_check_tensor_decl(const char *fqn, dcp_dtype dtype, uint32_t ndim,
                                  const int64_t *shape, dcpi_err *err) {
  dcp_status rc = dcpi_check_name(fqn, "tensor fqn", err);
  if (rc) return rc;
  if (!dcp_dtype_size(dtype))
    return dcpi_fail(err, DCP_EINVAL, "tensor '%s': invalid dtype %d", fqn, (int)dtype);
  return dcpi_check_shape(ndim, shape, dcp_dtype_size(dtype), fqn, err);
}

dcp_status dcpi_state_new(dcp_ctx *ctx, int32_t rank, int32_t world_size, dcp_state **out) {
  dcp_state *st = calloc(1, sizeof *st);
  if (!(*out = st)) return DCP_ENOMEM;
  st->ctx = ctx;
  st->rank = rank;
  st->world_size = world_size;
  return DCP_OK;
}

void dcp_state_free(dcp_state *st) {
  if (!st) return;
  for (size_t i = 0; i < st->ntensors; i++) {
    free(st->tensors[i].fqn);
    dcp_layout_free(st->tensors[i].layout);
    dcp_layout_free(st->tensors[i].flat);
  }
  for (size_t i = 0; i < st->nbytes; i++) free(st->bytes[i].key);
  free(st->tensors);
  free(st->chunks);
  free(st->bytes);
  dcpi_strmap_free(&st->names);
  free(st);
}

size_t dcp_state_tensor_count(const dcp_state *st) { return st ? st->ntensors : 0; }
size_t dcp_state_bytes_count(const dcp_state *st) { return st ? st->nbytes : 0; }

/* Register name in the shared fqn/key namespace with the given value. */
static dcp_status claim_name(dcp_state *st, const char *name, size_t len, uint32_t value,
                             dcpi_err *err) {
  int rc = dcpi_strmap_put(&st->names, name, len, value, NULL);
  if (rc < 0) return dcpi_fail(err, (dcp_status)rc, "out of memory for names");
  if (rc == 1) return dcpi_fail(err, DCP_EEXIST, "'%s' is already in the state", name);
  return DCP_OK;
}

static dcp_status add_tensor(dcp_state *st, const char *fqn, dcp_dtype dtype, uint32_t ndim,
                             const int64_t *shape, dcpi_err *err) {
  dcp_status rc = dcpi_check_tensor_decl(fqn, dtype, ndim, shape, err);
  if (rc) return rc;
  if (st->ntensors >= DCPI_NAME_BYTES)
    return dcpi_fail(err, DCP_EOVERFLOW, "too many tensors in one state");
  if (DCPI_RESERVE(st->tensors, st->tensors_cap, st->ntensors + 1))
    return dcpi_fail(err, DCP_ENOMEM, "out of memory for tensor '%s'", fqn);
  dcpi_tensor_item *t = &st->tensors[st->ntensors];
  *t = (dcpi_tensor_item){.dtype = dtype, .ndim = ndim, .fqn_len = strlen(fqn)};
  if (!(t->fqn = strdup(fqn))) return dcpi_fail(err, DCP_ENOMEM, "out of memory for '%s'", fqn);
  if (ndim) memcpy(t->shape, shape, ndim * sizeof *shape);
  if ((rc = claim_name(st, t->fqn, t->fqn_len, (uint32_t)st->ntensors, err))) {
    free(t->fqn);
    return rc;
  }
  st->ntensors++;
  return DCP_OK;
}

dcp_status dcp_state_add_tensor(dcp_state *st, const char *fqn, dcp_dtype dtype, uint32_t ndim,
                                const int64_t *shape) {
  if (!st) return DCP_EINVAL;
  dcpi_err err;
  dcpi_err_clear(&err);
  add_tensor(st, fqn, dtype, ndim, shape, &err);
  return dcpi_ctx_report(st->ctx, &err);
}

static dcp_status find_tensor(const dcp_state *st, const char *fqn, uint32_t *index,
                              dcpi_err *err) {
  if (!fqn) return dcpi_fail(err, DCP_EINVAL, "fqn is NULL");
  uint32_t v;
  if (!dcpi_strmap_get(&st->names, fqn, strlen(fqn), &v) || (v & DCPI_NAME_BYTES))
    return dcpi_fail(err, DCP_ENOTFOUND, "no tensor '%s' declared in the state", fqn);
  *index = v;
  return DCP_OK;
}

/* Append one chunk after checking bounds, data and overlap with the
 * tensor's earlier chunks (few per rank, so a scan is fine here; the
 * cross-rank check in the planner is a sweep). */
static dcp_status add_chunk(dcp_state *st, uint32_t ti, const int64_t *offset,
                            const int64_t *size, void *data, dcpi_err *err) {
  const dcpi_tensor_item *t = &st->tensors[ti];
  char a[256], b[256];
  dcp_status rc = dcpi_check_box_in(t->ndim, t->shape, offset, size, t->fqn, err);
  if (rc) return rc;
  int64_t numel, nbytes;
  dcpi_numel(t->ndim, size, &numel); /* cannot overflow: inside a checked shape */
  nbytes = numel * (int64_t)dcp_dtype_size(t->dtype);
  if (!data && nbytes > 0)
    return dcpi_fail(err, DCP_EINVAL, "tensor '%s': chunk %s has data NULL", t->fqn,
                     dcpi_box_str(t->ndim, offset, size, a, sizeof a));
  for (size_t i = 0; i < st->nchunks; i++) {
    const dcpi_chunk_item *c = &st->chunks[i];
    if (c->tensor != ti) continue;
    /* empty boxes overlap nothing, but the same one twice is still one
     * chunk added twice (the save's plan would refuse it, later) */
    bool same = t->ndim == 0 || (!memcmp(c->box.offset, offset, t->ndim * sizeof *offset) &&
                                 !memcmp(c->box.size, size, t->ndim * sizeof *size));
    if (same || dcpi_boxes_overlap(t->ndim, c->box.offset, c->box.size, offset, size))
      return dcpi_fail(err, DCP_EOVERLAP, "tensor '%s': chunk %s overlaps chunk %s", t->fqn,
                       dcpi_box_str(t->ndim, offset, size, a, sizeof a),
                       dcpi_box_str(t->ndim, c->box.offset, c->box.size, b, sizeof b));
  }
  if (DCPI_RESERVE(st->chunks, st->chunks_cap, st->nchunks + 1))
    return dcpi_fail(err, DCP_ENOMEM, "out of memory for a chunk of '%s'", t->fqn);
  dcpi_chunk_item *c = &st->chunks[st->nchunks++];
  *c = (dcpi_chunk_item){.tensor = ti, .data = data, .nbytes = nbytes};
  c->box.ndim = t->ndim;
  if (t->ndim) {
    memcpy(c->box.offset, offset, t->ndim * sizeof *offset);
    memcpy(c->box.size, size, t->ndim * sizeof *size);
  }
  return DCP_OK;
}

dcp_status dcp_state_add_chunk(dcp_state *st, const char *fqn, const int64_t *offset,
                               const int64_t *size, void *data) {
  if (!st) return DCP_EINVAL;
  dcpi_err err;
  dcpi_err_clear(&err);
  uint32_t ti;
  if (!find_tensor(st, fqn, &ti, &err)) add_chunk(st, ti, offset, size, data, &err);
  return dcpi_ctx_report(st->ctx, &err);
}

static dcp_status add_flat(dcp_state *st, const char *fqn, const dcp_box *region,
                           int64_t begin, int64_t count, void *data, dcpi_err *err) {
  uint32_t ti;
  dcp_status rc = find_tensor(st, fqn, &ti, err);
  if (rc) return rc;
  const dcpi_tensor_item *t = &st->tensors[ti];
  int64_t zero[DCP_MAX_NDIM] = {0};
  const int64_t *reg_off = zero, *reg_sz = t->shape;
  if (region) {
    if (region->ndim != t->ndim)
      return dcpi_fail(err, DCP_EINVAL, "tensor '%s': region has ndim %u, tensor has %u", fqn,
                       region->ndim, t->ndim);
    if ((rc = dcpi_check_box_in(t->ndim, t->shape, region->offset, region->size, fqn, err)))
      return rc;
    reg_off = region->offset;
    reg_sz = region->size;
  }
  enum { MAXB = 2 * DCP_MAX_NDIM - 1 };
  int64_t off[MAXB * DCP_MAX_NDIM], sz[MAXB * DCP_MAX_NDIM];
  size_t n;
  if ((rc = dcpi_flat_to_boxes(t->ndim, reg_off, reg_sz, begin, count, off, sz, MAXB, &n, err)))
    return rc;
  if (!data && count > 0)
    return dcpi_fail(err, DCP_EINVAL, "tensor '%s': flat range data is NULL", fqn);
  size_t first = st->nchunks;
  char *p = data;
  for (size_t i = 0; i < n; i++) {
    const int64_t *o = off + i * t->ndim, *s = sz + i * t->ndim;
    if ((rc = add_chunk(st, ti, o, s, p, err))) {
      st->nchunks = first; /* all or nothing */
      return rc;
    }
    p += st->chunks[st->nchunks - 1].nbytes;
  }
  return DCP_OK;
}

dcp_status dcp_state_add_flat(dcp_state *st, const char *fqn, const dcp_box *region,
                              int64_t flat_begin, int64_t flat_count, void *data) {
  if (!st) return DCP_EINVAL;
  dcpi_err err;
  dcpi_err_clear(&err);
  add_flat(st, fqn, region, flat_begin, flat_count, data, &err);
  return dcpi_ctx_report(st->ctx, &err);
}

/* The checks add_sharded and add_flat_sharded share: layout and ndim
 * agree, the rank is in the mesh (its position into *pos), the shape. */
static dcp_status check_sharded(const dcp_state *st, const char *name, dcp_dtype dtype,
                                uint32_t ndim, const int64_t *shape, const dcp_layout *layout,
                                int64_t *pos, dcpi_err *err) {
  if (!layout) return dcpi_fail(err, DCP_EINVAL, "tensor '%s': layout is NULL", name);
  if (layout->tensor_ndim != ndim)
    return dcpi_fail(err, DCP_EINVAL, "tensor '%s': layout maps %u dims, tensor has %u", name,
                     layout->tensor_ndim, ndim);
  if ((*pos = dcpi_layout_position(layout, st->rank)) < 0)
    return dcpi_fail(err, DCP_ENOTFOUND, "tensor '%s': rank %d is not in the layout's mesh",
                     name, st->rank);
  return dcpi_check_shape(ndim, shape, dcp_dtype_size(dtype), name, err);
}

/* Declare a tensor that keeps a copy of layout (into *copy, owned by the
 * tensor once declared) with room for nchunks more chunks, so adding
 * them cannot fail. On error nothing is declared. */
static dcp_status declare_laid_out(dcp_state *st, const char *fqn, dcp_dtype dtype, uint32_t ndim,
                                   const int64_t *shape, const dcp_layout *layout, size_t nchunks,
                                   dcp_layout **copy, dcpi_err *err) {
  if (dcpi_layout_clone(layout, copy) ||
      DCPI_RESERVE(st->chunks, st->chunks_cap, st->nchunks + nchunks)) {
    dcp_layout_free(*copy);
    return dcpi_fail(err, DCP_ENOMEM, "out of memory for tensor '%s'", fqn ? fqn : "(null)");
  }
  dcp_status rc = add_tensor(st, fqn, dtype, ndim, shape, err);
  if (rc) dcp_layout_free(*copy);
  return rc;
}

static dcp_status add_sharded(dcp_state *st, const char *fqn, dcp_dtype dtype, uint32_t ndim,
                              const int64_t *shape, const dcp_layout *layout, void *data,
                              dcpi_err *err) {
  const char *name = fqn ? fqn : "(null)";
  int64_t pos = -1;
  dcp_status rc = check_sharded(st, name, dtype, ndim, shape, layout, &pos, err);
  if (rc) return rc;
  /* Everything that can fail happens before the tensor is declared, so an
   * error leaves the state as it was. */
  int64_t off[DCP_MAX_NDIM], sz[DCP_MAX_NDIM];
  dcpi_layout_box_at(layout, shape, pos, off, sz);
  if (!data && !dcpi_box_is_empty(ndim, sz))
    return dcpi_fail(err, DCP_EINVAL, "tensor '%s': data is NULL for a non-empty shard", name);
  dcp_layout *copy;
  if ((rc = declare_laid_out(st, fqn, dtype, ndim, shape, layout, 1, &copy, err))) return rc;
  uint32_t ti = (uint32_t)st->ntensors - 1;
  st->tensors[ti].layout = copy;
  return add_chunk(st, ti, off, sz, data, err); /* fresh tensor, space reserved */
}

static dcp_status add_flat_sharded(dcp_state *st, const char *fqn, dcp_dtype dtype,
                                   uint32_t ndim, const int64_t *shape, const dcp_layout *layout,
                                   uint32_t flat_dims, void *data, dcpi_err *err) {
  const char *name = fqn ? fqn : "(null)";
  int64_t pos = -1;
  uint32_t dims = 0;
  dcpi_err why;
  dcpi_err_clear(&why);
  dcp_status rc = check_sharded(st, name, dtype, ndim, shape, layout, &pos, err);
  if (rc) return rc;
  if ((rc = dcpi_layout_flat_dims(layout, flat_dims, &dims, &why)))
    return dcpi_fail(err, rc, "tensor '%s': %s", name, why.msg);
  enum { MAXB = 2 * DCP_MAX_NDIM - 1 };
  int64_t off[MAXB * DCP_MAX_NDIM], sz[MAXB * DCP_MAX_NDIM];
  size_t n;
  dcpi_layout_flat_boxes_at(layout, shape, pos, dims, off, sz, &n);
  if (!data && n)
    return dcpi_fail(err, DCP_EINVAL, "tensor '%s': data is NULL for a non-empty flat shard",
                     name);
  dcp_layout *copy;
  if ((rc = declare_laid_out(st, fqn, dtype, ndim, shape, layout, n, &copy, err))) return rc;
  uint32_t ti = (uint32_t)st->ntensors - 1;
  st->tensors[ti].flat = copy;
  st->tensors[ti].flat_dims = dims;
  st->tensors[ti].flat_parts = (uint32_t)n;
  char *p = data;
  for (size_t i = 0; i < n && !rc; i++) { /* fresh tensor, space reserved: cannot fail */
    rc = add_chunk(st, ti, off + i * ndim, sz + i * ndim, p, err);
    p += st->chunks[st->nchunks - 1].nbytes;
  }
  return rc;
}

dcp_status dcpi_state_mark_flat(dcp_state *st, const char *fqn, const dcp_layout *layout,
                                uint32_t flat_dims, dcpi_err *err) {
  uint32_t ti;
  dcp_status rc = find_tensor(st, fqn, &ti, err);
  if (rc) return rc;
  dcpi_tensor_item *t = &st->tensors[ti];
  int64_t pos = -1;
  uint32_t dims = 0;
  if ((rc = check_sharded(st, t->fqn, t->dtype, t->ndim, t->shape, layout, &pos, err)) ||
      (rc = dcpi_layout_flat_dims(layout, flat_dims, &dims, NULL)))
    return dcpi_fail(err, rc ? rc : DCP_EINVAL, "tensor '%s': not a flat shard of its layout",
                     t->fqn);
  enum { MAXB = 2 * DCP_MAX_NDIM - 1 };
  int64_t off[MAXB * DCP_MAX_NDIM], sz[MAXB * DCP_MAX_NDIM];
  size_t n, first = st->nchunks, seen = 0;
  dcpi_layout_flat_boxes_at(layout, t->shape, pos, dims, off, sz, &n);
  for (size_t i = 0; i < st->nchunks; i++) {
    const dcpi_chunk_item *c = &st->chunks[i];
    if (c->tensor != ti) continue;
    if (first == st->nchunks) first = i;
    size_t b = i - first;
    if (b >= n || memcmp(c->box.offset, off + b * t->ndim, t->ndim * sizeof *off) ||
        memcmp(c->box.size, sz + b * t->ndim, t->ndim * sizeof *sz))
      return dcpi_fail(err, DCP_EINVAL, "tensor '%s': its chunks are not its flat range",
                       t->fqn);
    seen++;
  }
  if (seen != n)
    return dcpi_fail(err, DCP_EINVAL, "tensor '%s': its chunks are not its flat range", t->fqn);
  dcp_layout *copy;
  if (dcpi_layout_clone(layout, &copy))
    return dcpi_fail(err, DCP_ENOMEM, "out of memory for tensor '%s'", t->fqn);
  dcp_layout_free(t->flat);
  t->flat = copy;
  t->flat_dims = dims;
  t->flat_parts = (uint32_t)n;
  return DCP_OK;
}

dcp_status dcp_state_add_flat_sharded(dcp_state *st, const char *fqn, dcp_dtype dtype,
                                      uint32_t ndim, const int64_t *shape,
                                      const dcp_layout *layout, uint32_t flat_dims, void *data) {
  if (!st) return DCP_EINVAL;
  dcpi_err err;
  dcpi_err_clear(&err);
  add_flat_sharded(st, fqn, dtype, ndim, shape, layout, flat_dims, data, &err);
  return dcpi_ctx_report(st->ctx, &err);
}

dcp_status dcp_state_add_sharded(dcp_state *st, const char *fqn, dcp_dtype dtype, uint32_t ndim,
                                 const int64_t *shape, const dcp_layout *layout, void *data) {
  if (!st) return DCP_EINVAL;
  dcpi_err err;
  dcpi_err_clear(&err);
  add_sharded(st, fqn, dtype, ndim, shape, layout, data, &err);
  return dcpi_ctx_report(st->ctx, &err);
}

static dcp_status add_bytes(dcp_state *st, const char *key, dcp_scope scope, void *data,
                            size_t len, dcpi_err *err) {
  dcp_status rc = dcpi_check_name(key, "bytes key", err);
  if (rc) return rc;
  if (scope != DCP_SCOPE_REPLICATED && scope != DCP_SCOPE_PER_RANK)
    return dcpi_fail(err, DCP_EINVAL, "bytes '%s': invalid scope %d", key, (int)scope);
  if (!data && len)
    return dcpi_fail(err, DCP_EINVAL, "bytes '%s': data is NULL with length %zu", key, len);
  if (len > INT64_MAX)
    return dcpi_fail(err, DCP_EOVERFLOW, "bytes '%s': length exceeds int64", key);
  if (st->nbytes >= DCPI_NAME_BYTES)
    return dcpi_fail(err, DCP_EOVERFLOW, "too many bytes items in one state");
  if (DCPI_RESERVE(st->bytes, st->bytes_cap, st->nbytes + 1))
    return dcpi_fail(err, DCP_ENOMEM, "out of memory for bytes '%s'", key);
  dcpi_bytes_item *b = &st->bytes[st->nbytes];
  *b = (dcpi_bytes_item){.scope = scope, .data = data, .len = len, .key_len = strlen(key)};
  if (!(b->key = strdup(key))) return dcpi_fail(err, DCP_ENOMEM, "out of memory for '%s'", key);
  if ((rc = claim_name(st, b->key, b->key_len, (uint32_t)st->nbytes | DCPI_NAME_BYTES, err))) {
    free(b->key);
    return rc;
  }
  st->nbytes++;
  return DCP_OK;
}

dcp_status dcp_state_add_bytes(dcp_state *st, const char *key, dcp_scope scope, void *data,
                               size_t len) {
  if (!st) return DCP_EINVAL;
  dcpi_err err;
  dcpi_err_clear(&err);
  add_bytes(st, key, scope, data, len, &err);
  return dcpi_ctx_report(st->ctx, &err);
}

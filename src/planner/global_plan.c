/* global_plan.c — read access to a built global save plan, and its
 * release. The builder is in save_plan.c. */
#include <stdlib.h>

#include "planner/global_plan_int.h"

void dcpi_global_plan_free(dcpi_global_plan *gp) {
  if (!gp) return;
  free(gp->names);
  free(gp->tensors);
  free(gp->boxes);
  free(gp->items);
  free(gp->holders);
  free(gp->holder_chunks);
  free(gp->piece_at);
  free(gp->bytes);
  free(gp->bholders);
  free(gp->bholder_items);
  free(gp->load);
  free(gp->rank_items_at);
  free(gp->rank_items);
  free(gp->rank_bytes_at);
  free(gp->rank_bytes);
  free(gp);
}

int32_t dcpi_global_plan_world_size(const dcpi_global_plan *gp) { return gp->world_size; }
const dcpi_save_opts *dcpi_global_plan_opts(const dcpi_global_plan *gp) { return &gp->opts; }
size_t dcpi_global_plan_tensor_count(const dcpi_global_plan *gp) { return gp->ntensors; }
size_t dcpi_global_plan_item_count(const dcpi_global_plan *gp) { return gp->nitems; }
size_t dcpi_global_plan_bytes_count(const dcpi_global_plan *gp) { return gp->nbytes; }
size_t dcpi_global_plan_holding_count(const dcpi_global_plan *gp) { return gp->nholdings; }
int64_t dcpi_global_plan_tensor_bytes(const dcpi_global_plan *gp) { return gp->tensor_bytes; }

dcp_status dcpi_global_plan_tensor(const dcpi_global_plan *gp, size_t i, dcpi_gp_tensor *out) {
  if (i >= gp->ntensors) return DCP_ENOTFOUND;
  const dcpi_gp_tensor_rec *t = &gp->tensors[i];
  *out = (dcpi_gp_tensor){.fqn = gp->names + t->name_at, .fqn_len = t->name_len,
                          .dtype = (dcp_dtype)t->dtype, .ndim = t->ndim, .shape = t->shape,
                          .numel = t->numel, .nbytes = t->nbytes,
                          .first_item = (size_t)t->first_item, .nitems = (size_t)t->nitems,
                          .layout = t->layout != 0};
  return DCP_OK;
}

dcp_status dcpi_global_plan_item(const dcpi_global_plan *gp, size_t i, dcpi_gp_item *out) {
  if (i >= gp->nitems) return DCP_ENOTFOUND;
  const dcpi_gp_item_rec *it = &gp->items[i];
  const dcpi_gp_tensor_rec *t = &gp->tensors[it->tensor];
  const int64_t *box = dcpi_gp_item_box(gp, i);
  *out = (dcpi_gp_item){.tensor = it->tensor, .ndim = t->ndim, .offset = box,
                        .size = box + t->ndim, .nbytes = dcpi_gp_item_nbytes(gp, i),
                        .owner = it->owner, .nholders = dcpi_gp_item_nholders(gp, i),
                        .holders = gp->holders + it->holders_at,
                        .holder_chunks = gp->holder_chunks + it->holders_at};
  if (gp->piece_at && gp->piece_at[i] != UINT64_MAX)
    out->piece = true, out->piece_offset = gp->piece_at[i];
  return DCP_OK;
}

dcp_status dcpi_global_plan_bytes(const dcpi_global_plan *gp, size_t i, dcpi_gp_bytes *out) {
  if (i >= gp->nbytes) return DCP_ENOTFOUND;
  const dcpi_gp_bytes_rec *b = &gp->bytes[i];
  *out = (dcpi_gp_bytes){.key = gp->names + b->name_at, .key_len = b->name_len,
                         .scope = (dcp_scope)b->scope, .rank = b->rank, .length = b->length,
                         .owner = b->owner, .nholders = b->nholders,
                         .holders = gp->bholders + b->holders_at,
                         .holder_items = gp->bholder_items + b->holders_at};
  return DCP_OK;
}

size_t dcpi_global_plan_rank_items(const dcpi_global_plan *gp, int32_t r,
                                   const uint32_t **items) {
  if (r < 0 || r >= gp->world_size) {
    if (items) *items = NULL;
    return 0;
  }
  if (items) *items = gp->rank_items + gp->rank_items_at[r];
  return gp->rank_items_at[r + 1] - gp->rank_items_at[r];
}

size_t dcpi_global_plan_rank_bytes(const dcpi_global_plan *gp, int32_t r,
                                   const uint32_t **bytes) {
  if (r < 0 || r >= gp->world_size) {
    if (bytes) *bytes = NULL;
    return 0;
  }
  if (bytes) *bytes = gp->rank_bytes + gp->rank_bytes_at[r];
  return gp->rank_bytes_at[r + 1] - gp->rank_bytes_at[r];
}

int64_t dcpi_global_plan_rank_load(const dcpi_global_plan *gp, int32_t r) {
  return r < 0 || r >= gp->world_size ? 0 : gp->load[r];
}

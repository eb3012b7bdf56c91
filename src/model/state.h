/* state.h — internals of dcp_state: this rank's tensor and bytes items. */
#ifndef DCP_MODEL_STATE_H
#define DCP_MODEL_STATE_H

#include "base/err.h"
#include "base/strmap.h"

typedef struct dcpi_tensor_item {
  char *fqn; /* owned, NUL-terminated */
  size_t fqn_len;
  dcp_dtype dtype;
  uint32_t ndim;
  int64_t shape[DCP_MAX_NDIM];
  dcp_layout *layout; /* owned copy, or NULL when chunks were added by hand */
  /* dcp_state_add_flat_sharded: the layout whose cells the rank's flat
   * range cuts (owned copy; layout is then NULL, so every path that does
   * not know flat shards treats its chunks as added by hand), and how many
   * chunks that range became (the tensor's chunks while none was added by
   * hand). */
  dcp_layout *flat;
  uint32_t flat_dims; /* resolved (dcpi_layout_flat_dims) */
  uint32_t flat_parts;
} dcpi_tensor_item;

typedef struct dcpi_chunk_item {
  uint32_t tensor; /* index into dcp_state.tensors */
  dcp_box box;
  void *data;     /* caller memory, contiguous row-major */
  int64_t nbytes; /* numel(box) * dtype size */
} dcpi_chunk_item;

/* The bytes of one index of c's first dimension (all of it for a 0-d
 * chunk, 0 for an empty one): the unit a save aligns c's blocks to. */
static inline uint64_t dcpi_chunk_row_bytes(const dcpi_chunk_item *c) {
  if (c->box.ndim == 0) return (uint64_t)c->nbytes;
  return c->box.size[0] > 0 ? (uint64_t)(c->nbytes / c->box.size[0]) : 0;
}

typedef struct dcpi_bytes_item {
  char *key; /* owned */
  size_t key_len;
  dcp_scope scope;
  void *data; /* caller memory */
  size_t len;
} dcpi_bytes_item;

struct dcp_state {
  dcp_ctx *ctx;
  int32_t rank;
  int32_t world_size;
  dcpi_tensor_item *tensors;
  size_t ntensors, tensors_cap;
  dcpi_chunk_item *chunks; /* in insertion order; several per tensor allowed */
  size_t nchunks, chunks_cap;
  dcpi_bytes_item *bytes;
  size_t nbytes, bytes_cap;
  dcpi_strmap names; /* fqn/key → index; bytes items have DCPI_NAME_BYTES set */
};

#define DCPI_NAME_BYTES 0x80000000u

/* An empty state of rank `rank` in a world of world_size, created on ctx
 * (kept for the errors of dcp_state_add_*, and to match the context of a
 * save or load). dcp_state_create (core/ctx.c) calls it with the context's
 * identity, which this layer does not see. Errors: DCP_ENOMEM. */
dcp_status dcpi_state_new(dcp_ctx *ctx, int32_t rank, int32_t world_size, dcp_state **out);

/* Check a NUL-terminated fqn or key against the name rule (model/name.h:
 * 1..DCP_MAX_NAME bytes of valid UTF-8, no control characters, no '/',
 * '\\' or ".."). `what` names it in the message. Returns DCP_OK or
 * DCP_ENAME (also for NULL). */
dcp_status dcpi_check_name(const char *name, const char *what, dcpi_err *err);

/* Check a tensor declaration: the fqn (dcpi_check_name), a valid dtype and
 * a shape whose element count and byte size fit in int64. Returns
 * DCP_OK, DCP_ENAME, DCP_EINVAL or DCP_EOVERFLOW with the reason in err. */
dcp_status dcpi_check_tensor_decl(const char *fqn, dcp_dtype dtype, uint32_t ndim,
                                  const int64_t *shape, dcpi_err *err);

/* Make declared tensor fqn, whose chunks were added by hand, a flat shard
 * of layout (flat_dims as dcp_state_add_flat_sharded takes them): its
 * chunks must be exactly this rank's range's boxes, in order, one after
 * the other in st's chunks, and no other chunk of it (the async writer
 * rebuilds a trainer's flat tensors so). Copies layout. Errors:
 * DCP_ENOTFOUND, DCP_EINVAL (the chunks are not the range, bad flat
 * dims, a layout of the wrong ndim or without the rank), DCP_ENOMEM. */
dcp_status dcpi_state_mark_flat(dcp_state *st, const char *fqn, const dcp_layout *layout,
                                uint32_t flat_dims, dcpi_err *err);

#endif

/* layout_plan.h — per-rank save planning for tensors saved from a layout
 * (dcp_state_add_sharded: mesh + tensor_map). Every rank of a mesh can
 * compute every member's box and replica group, so the owner of each
 * piece is chosen by a rule that depends only on the piece itself, and a
 * rank computes its own writes without seeing any other rank's plan. The
 * whole-plan builder (save_plan.c) applies the same rule to layout tensors,
 * so both give identical results. Pure: no I/O, no globals, deterministic.
 * See docs/planner.md, "Per-rank planning". */
#ifndef DCP_PLANNER_LAYOUT_PLAN_H
#define DCP_PLANNER_LAYOUT_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "planner/save_plan.h"

/* ---- the rule (shared with the whole-plan builder) ---------------------- */

/* How many pieces a box of nbytes bytes and `rows` rows in its first
 * dimension, held by nholders ranks, is split into (docs/planner.md, step
 * 8): 1 (LOWEST_RANK policy, one holder, a 0-d tensor, or too small), or
 * k = min(nholders, rows, nbytes / (DCPI_SPLIT_MIN_BLOCKS blocks)) >= 2
 * cut into pieces of *rows_per rows (the last may be shorter). *rows_per is
 * written only when the result is > 1. */
uint32_t dcpi_split_pieces(int64_t nbytes, int64_t rows, uint32_t nholders, uint32_t ndim,
                           const dcpi_save_opts *opts, int64_t *rows_per);

/* The rule is a rotation per holder set. Take the layout items (distinct
 * non-empty boxes of layout tensors) whose holders are exactly the ranks
 * G (ascending), in fqn order (a layout gives a tensor at most one box per
 * holder set); an item's start is the number of pieces of the items before
 * it there; its piece j is written by G[(start + j) mod |G|] (under
 * LOWEST_RANK by G[0]). Every member of G holds every such item, so it
 * computes the same starts from its own state; pieces go round the group
 * one after the other, so each member writes within one piece of the
 * group's mean count. */

/* A holder set's sort key: XXH3-64 of its ranks. */
uint64_t dcpi_layout_group_hash(const int32_t *holders, uint32_t n);

/* Order of holder sets (a: hash ha, ranks ga[0..na); b likewise): by hash,
 * count, then ranks; 0 only for equal sets. */
int dcpi_layout_group_cmp(uint64_t ha, const int32_t *ga, uint32_t na, uint64_t hb,
                          const int32_t *gb, uint32_t nb);

/* The rule's owner of piece `piece` of an item with start `start` held by
 * holders[0..n) (ascending, n >= 1). */
int32_t dcpi_layout_owner(const int32_t *holders, uint32_t n, uint32_t piece, uint64_t start,
                          dcpi_balance_policy policy);

/* ---- per-rank planning --------------------------------------------------- */

/* One tensor saved from a layout. Borrowed pointers. */
typedef struct dcpi_layout_tensor {
  const char *fqn;
  size_t fqn_len;
  dcp_dtype dtype;
  uint32_t ndim;
  const int64_t *shape;
  const dcp_layout *layout;
  /* flat-sharded (dcp_state_add_flat_sharded): each mesh position holds
   * the boxes of the range dcpi_layout_flat_boxes_at(flat_dims) gives; its
   * holders are the positions that share its sharding and flat dims'
   * coordinates, and each box is split and owned as a sharded box is */
  bool flat;
  uint32_t flat_dims; /* resolved: dcpi_layout_flat_dims */
} dcpi_layout_tensor;

/* One piece a rank writes: of tensors[tensor], box (ndim offsets then
 * ndim sizes), nbytes bytes at byte piece_offset of the rank's chunk
 * number `part` of that tensor (its chunks in the order the state added
 * them: 0 for a sharded tensor, the range's box index for a flat one;
 * offset 0 and the whole chunk when npieces is 1). */
typedef struct dcpi_layout_write {
  uint32_t tensor;
  uint32_t piece, npieces, part;
  int64_t nbytes;
  uint64_t piece_offset;
  int64_t box[2 * DCP_MAX_NDIM];
} dcpi_layout_write;

/* The pieces rank `rank` writes of tensors[0..n) under opts (NULL:
 * defaults), in (tensor, piece) order: for each tensor whose mesh has the
 * rank, its box (dcpi_layout_box_at), unless empty, split by
 * dcpi_split_pieces over its replica group, and the pieces the rule gives
 * to `rank`; for a flat tensor each box of its range likewise (write.part:
 * the box's index). Tensors whose mesh lacks the rank contribute nothing. The
 * starts of the rule count the pieces of the rank's other items with the
 * same holders, so pass every layout tensor the rank holds.
 * *out is malloc'd (caller frees; NULL when *count is 0).
 * Cost O(sum over the rank's tensors of |replica group| log |group|, + the
 * sort of its tensors by group).
 * Errors: DCP_EINVAL (NULL arguments, a layout whose tensor ndim is not
 * the tensor's, a mesh rank outside [0, world)), DCP_EOVERFLOW / DCP_EINVAL
 * (a bad shape, dcpi_check_shape), DCP_ENOMEM. On error *out is NULL. */
dcp_status dcpi_layout_plan_rank(const dcpi_layout_tensor *tensors, size_t n, int32_t world,
                                 int32_t rank, const dcpi_save_opts *opts,
                                 dcpi_layout_write **out, size_t *count, dcpi_err *err);

/* Called for each piece of a layout tensor: box (ndim offsets then ndim
 * sizes, valid during the call), its bytes, its index among npieces of its
 * cell's box. A non-OK return stops the walk and is returned. */
typedef dcp_status (*dcpi_layout_piece_fn)(void *arg, const int64_t *box, int64_t nbytes,
                                           uint32_t piece, uint32_t npieces);

/* Every piece of tensor t that some rank writes — each distinct non-empty
 * box of its layout (the cells of the mesh dims that shard it, in
 * row-major cell order), split as dcpi_layout_plan_rank splits it (for a
 * flat tensor: the boxes of every distinct range, in mesh position order;
 * O(ranks of its mesh)) — with
 * no owner (the commit checks that each arrived once; who wrote it does
 * not matter). Cost O(cells + pieces), independent of the replicas.
 * Errors: as dcpi_layout_plan_rank's checks of a tensor (world: the mesh
 * ranks must be below it), or fn's. */
dcp_status dcpi_layout_pieces(const dcpi_layout_tensor *t, int32_t world,
                              const dcpi_save_opts *opts, dcpi_layout_piece_fn fn, void *arg,
                              dcpi_err *err);

/* ---- a piece by its offset ----------------------------------------------- */

/* What locating t's pieces needs, computed once per tensor: its units
 * (cells of the sharding mesh dims, times the flat parts of a flat
 * tensor), the holders of each box and bounds on boxes per unit and
 * pieces per box. Every piece has a slot below nslots, distinct pieces
 * distinct slots; nslots <= the mesh's ranks * (2 ndim - 1) at most,
 * so a bit per slot is small next to the pieces themselves. */
typedef struct dcpi_piece_space {
  dcpi_save_opts opts;
  int64_t shards[DCP_MAX_NDIM];
  int64_t cells, parts;
  uint32_t ng, kmax, maxb;
  uint64_t nslots;
} dcpi_piece_space;

/* The piece space of t under opts (NULL: defaults).
 * Errors: as dcpi_layout_pieces's checks of a tensor; DCP_EOVERFLOW when
 * the slot count does not fit 64 bits. */
dcp_status dcpi_piece_space_init(const dcpi_layout_tensor *t, int32_t world,
                                 const dcpi_save_opts *opts, dcpi_piece_space *ps,
                                 dcpi_err *err);

/* The piece of t (whose space is ps) that starts at the element with
 * row-major index key: true, with its box (ndim offsets then ndim sizes),
 * bytes and slot; false when no piece of the layout starts there (a key
 * past the tensor, or inside a piece). Exactly the pieces
 * dcpi_layout_pieces walks are found. Cost O(ndim^2), independent of the
 * tensor's pieces and ranks. */
bool dcpi_piece_locate(const dcpi_piece_space *ps, const dcpi_layout_tensor *t, uint64_t key,
                       int64_t *box, int64_t *nbytes, uint64_t *slot);

/* How many pieces dcpi_layout_pieces walks for t: O(units * ndim), no
 * piece listed. */
uint64_t dcpi_piece_count(const dcpi_piece_space *ps, const dcpi_layout_tensor *t);

#endif

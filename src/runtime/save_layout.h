/* save_layout.h — the per-rank planning path of dcp_save (docs/planner.md,
 * "Per-rank planning"): when every tensor of every rank's state was added
 * from a layout and there are no bytes items, no plan is gathered. Each
 * rank sends rank 0 one digest per mesh it belongs to (and the rank at a
 * mesh's first position its description: mesh and tensors); rank 0 checks
 * that every member of every mesh agrees, then each rank computes its own
 * writes (planner/layout_plan.h) and the commit checks that every piece of
 * every layout arrived exactly once. */
#ifndef DCP_RUNTIME_SAVE_LAYOUT_H
#define DCP_RUNTIME_SAVE_LAYOUT_H

#include <stdbool.h>
#include <xxhash.h>

#include "base/wire.h"
#include "metadata/meta.h"
#include "planner/layout_plan.h"
#include "planner/save_plan.h"

/* true when st can take the layout path on its side: at least one tensor,
 * every tensor marked a layout tensor in lp (dcpi_local_plan_from_state),
 * every mesh rank below the world size. Bytes items may come along
 * (save_layout_bytes.h). */
bool dcpi_save_layout_eligible(const dcp_state *st, const dcpi_local_plan *lp);

/* st's tensors as layout tensors (borrowed from st; malloc'd array of
 * st->ntensors, caller frees), in st's order. NULL when out of memory. */
dcpi_layout_tensor *dcpi_save_layout_tensors(const dcp_state *st);

/* This rank's offer for rank 0: per mesh its tensors use, the mesh key and
 * the digest of its tensors there, and where the rank is the mesh's first
 * the description. out->status is set when out of memory. */
void dcpi_save_layout_offer(const dcp_state *st, const dcpi_save_opts *opts, dcpi_wbuf *out);

/* Rank 0's view of every layout: tensors (fqn order), meshes and the
 * pieces expected of each tensor. */
typedef struct dcpi_layout_set dcpi_layout_set;

/* Rank 0: decode and check every rank's offer (all: back to back, lens[r]
 * rank r's) and count the pieces of every tensor under opts. No piece is
 * listed: the commit locates each reported piece from its offset
 * (dcpi_piece_locate) and marks one bit per slot, so the set holds
 * O(tensors + slots / 8) bytes, and counting costs O(units) per kind of
 * tensor (same dtype, shape, flat rule, mesh shape and map).
 * Errors: DCP_EMISMATCH (a member of a mesh whose tensors differ from the
 * mesh's description, a member that sent none, a tensor on two meshes),
 * DCP_ECORRUPT (a malformed offer), DCP_ENOMEM. */
dcp_status dcpi_layout_set_build(const uint8_t *all, const size_t *lens, int32_t world,
                                 const dcpi_save_opts *opts, dcpi_layout_set **out,
                                 dcpi_err *err);
void dcpi_layout_set_free(dcpi_layout_set *ls);

/* Rank 0: record every mesh and tensor (with its layout) in md. */
dcp_status dcpi_layout_set_add_tensors(dcpi_layout_set *ls, dcpi_md *md, dcpi_err *err);

/* Rank 0: rank `rank` wrote the piece of tensor fqn whose offset has the
 * row-major index key, to ref: recorded in md. An unknown or repeated
 * piece, or a ref of another length, is DCP_ECORRUPT. */
dcp_status dcpi_layout_set_take(dcpi_layout_set *ls, dcpi_md *md, int32_t rank, const char *fqn,
                                size_t fqn_len, uint64_t key, const dcp_storage_ref *ref,
                                dcpi_err *err);

/* Rank 0: the bytes items' assignment for rank (save_layout_bytes.h);
 * ls NULL (the offers were refused) sends the refusal. */
void dcpi_layout_set_assignment(const dcpi_layout_set *ls, int32_t rank, dcpi_wbuf *out);

/* Rank 0: rank wrote its bytes item `index` to ref (dcpi_lbytes_take). */
dcp_status dcpi_layout_set_take_bytes(dcpi_layout_set *ls, dcpi_md *md, int32_t rank,
                                      uint64_t index, const dcp_storage_ref *ref, dcpi_err *err);

/* Rank 0: DCP_OK when every expected piece and bytes item was taken, else
 * DCP_EINCOMPLETE naming the tensor and the piece, or the item. */
dcp_status dcpi_layout_set_complete(const dcpi_layout_set *ls, dcpi_err *err);

/* The key of a mesh in the offers: XXH3-64 of its ndim, extents and
 * ranks (row-major). */
uint64_t dcpi_layout_mesh_key(const dcp_layout *l);

/* XXH3-128 of the save options that shape the split (policy, block size)
 * and tensors ts[0..n) in fqn order (fqn, dtype, shape, tensor_map, flat): what
 * every member of their mesh must agree on. */
XXH128_hash_t dcpi_layout_digest(const dcpi_layout_tensor *const *ts, size_t n,
                                 const dcpi_save_opts *opts);

/* The row-major index of point off in shape (the key of a piece). */
uint64_t dcpi_layout_piece_key(uint32_t ndim, const int64_t *shape, const int64_t *off);

#endif

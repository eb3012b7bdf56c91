/* save_plan.h — the save side of the planner: local plans (what one rank
 * offers to write), their cache key, and the global save plan (validated,
 * deduplicated, balanced: who writes what). Pure: no I/O, no globals,
 * deterministic. See docs/planner.md, "Save planning". */
#ifndef DCP_PLANNER_SAVE_PLAN_H
#define DCP_PLANNER_SAVE_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "planner/balance.h"

/* ------------------------------------------------------------------------ */
/* Options                                                                  */
/* ------------------------------------------------------------------------ */

#define DCPI_SAVE_DEFAULT_BLOCK_SIZE (4u << 20) /* raw bytes per checksummed block */

/* Options that shape a save plan. All fields are part of the plan key, so a
 * change of any of them misses the plan cache. */
typedef struct dcpi_save_opts {
  dcpi_balance_policy policy; /* who writes a replicated item */
  uint32_t flags;             /* opaque to the planner (the runtime's switches,
                                 e.g. compression); hashed, never interpreted */
  uint32_t block_size;        /* >= 1; hashed, used by the writer */
} dcpi_save_opts;

/* Defaults: LEAST_LOADED, flags 0, DCPI_SAVE_DEFAULT_BLOCK_SIZE. */
void dcpi_save_opts_init(dcpi_save_opts *opts);

/* DCP_OK when opts is usable (known policy, block_size >= 1), else
 * DCP_EINVAL with a reason. */
dcp_status dcpi_save_opts_check(const dcpi_save_opts *opts, dcpi_err *err);

/* true when every field of a and b is equal. */
bool dcpi_save_opts_equal(const dcpi_save_opts *a, const dcpi_save_opts *b);

/* ------------------------------------------------------------------------ */
/* Local plan                                                               */
/* ------------------------------------------------------------------------ */

/* One rank's write offer: its tensors (fqn, dtype, global shape), the boxes
 * it holds of each, and its bytes items (key, scope, length). It owns copies
 * of every string and keeps boxes in int64 pools, so it stays compact (a
 * simulation holds thousands) and outlives whatever it was built from. It
 * carries no data pointers: geometry only.
 *
 * Life cycle: create, add items (any order), finish. finish puts everything in
 * canonical order — tensors by fqn (bytewise), chunks of a tensor by offset
 * then size (lexicographic, signed), bytes items by key — so the key, the
 * encoding and the global plan never depend on insertion order. After
 * finish the plan is immutable; before it, only the add functions apply.
 *
 * add_chunk records the box as given: bounds, overlap and coverage are
 * checked by dcpi_global_plan_build, where the message can name both ranks. */
typedef struct dcpi_local_plan dcpi_local_plan;

/* An empty, unfinished plan of `rank` in a world of world_size ranks.
 * opts NULL means defaults. Errors: DCP_EINVAL (world_size < 1, rank out of
 * range, bad opts), DCP_ENOMEM. On error *out is NULL. */
dcp_status dcpi_local_plan_create(int32_t rank, int32_t world_size,
                                  const dcpi_save_opts *opts, dcpi_local_plan **out,
                                  dcpi_err *err);

void dcpi_local_plan_free(dcpi_local_plan *lp);

/* Declare a tensor; *index (may be NULL) receives the handle to pass to
 * add_chunk (insertion order, not the canonical index). fqn follows the
 * dcp_state rules. Errors: DCP_ENAME, DCP_EINVAL (bad dtype, ndim > 16,
 * negative extent, finished plan), DCP_EOVERFLOW (element count or byte size),
 * DCP_ENOMEM. Duplicate names are reported by finish (DCP_EEXIST). */
dcp_status dcpi_local_plan_add_tensor(dcpi_local_plan *lp, const char *fqn, dcp_dtype dtype,
                                      uint32_t ndim, const int64_t *shape, uint32_t *index,
                                      dcpi_err *err);

/* Mark tensor `index` as saved from a layout (its one chunk is its box of
 * the layout): the global plan then chooses the owner of each of its
 * pieces by the rule of planner/layout_plan.h instead of the balancer,
 * when every rank that declares the tensor marks it. Errors: DCP_ENOTFOUND
 * (no such tensor), DCP_EINVAL (NULL or finished plan). */
dcp_status dcpi_local_plan_mark_layout(dcpi_local_plan *lp, uint32_t index, dcpi_err *err);

/* Add the box [offset, offset+size) of tensor `index` (ndim values each;
 * NULL allowed when ndim is 0). Errors: DCP_ENOTFOUND (no such tensor),
 * DCP_EINVAL (NULL arrays, finished plan), DCP_EOVERFLOW (more than
 * UINT32_MAX chunks), DCP_ENOMEM. */
dcp_status dcpi_local_plan_add_chunk(dcpi_local_plan *lp, uint32_t index, const int64_t *offset,
                                     const int64_t *size, dcpi_err *err);

/* Add a bytes item of `length` bytes. key shares the fqn namespace.
 * Errors: DCP_ENAME, DCP_EINVAL (bad scope, negative length, finished plan),
 * DCP_ENOMEM. */
dcp_status dcpi_local_plan_add_bytes(dcpi_local_plan *lp, const char *key, dcp_scope scope,
                                     int64_t length, dcpi_err *err);

/* Put the plan in canonical order and freeze it.
 * Errors: DCP_EEXIST (a name declared twice, or one box added twice to a
 * tensor), DCP_EINVAL (already finished), DCP_ENOMEM. On error the plan is
 * unusable except for free. */
dcp_status dcpi_local_plan_finish(dcpi_local_plan *lp, dcpi_err *err);

/* A finished plan of st's rank: every tensor, chunk and bytes item of st;
 * a tensor added with dcp_state_add_sharded that has no other chunk is
 * marked as a layout tensor (dcpi_local_plan_mark_layout).
 * Chunk sources (dcpi_local_plan_chunk_source) are indices into st->chunks,
 * bytes sources indices into st->bytes. opts NULL means defaults.
 * Errors: as create/add/finish. */
dcp_status dcpi_local_plan_from_state(const dcp_state *st, const dcpi_save_opts *opts,
                                      dcpi_local_plan **out, dcpi_err *err);

/* Accessors (finished or not; canonical order only after finish). */
int32_t dcpi_local_plan_rank(const dcpi_local_plan *lp);
int32_t dcpi_local_plan_world_size(const dcpi_local_plan *lp);
const dcpi_save_opts *dcpi_local_plan_opts(const dcpi_local_plan *lp);
size_t dcpi_local_plan_tensor_count(const dcpi_local_plan *lp);
size_t dcpi_local_plan_chunk_count(const dcpi_local_plan *lp);
size_t dcpi_local_plan_bytes_count(const dcpi_local_plan *lp);

/* A finished plan's tensor `i` (canonical order). Pointers are owned by the
 * plan and live as long as it. Chunks of the tensor are the plan's chunks
 * first_chunk .. first_chunk+nchunks-1. */
typedef struct dcpi_lp_tensor_view {
  const char *fqn; /* NUL-terminated */
  size_t fqn_len;
  dcp_dtype dtype;
  uint32_t ndim;
  const int64_t *shape;
  size_t first_chunk, nchunks;
  bool layout; /* marked with dcpi_local_plan_mark_layout */
} dcpi_lp_tensor_view;

/* Errors: DCP_ENOTFOUND (i out of range), DCP_EINVAL (not finished). */
dcp_status dcpi_local_plan_tensor(const dcpi_local_plan *lp, size_t i, dcpi_lp_tensor_view *out);

/* A finished plan's chunk `c` (canonical order over the whole plan):
 * its tensor's canonical index, its box (ndim values each, owned by the
 * plan) and its source (the order in which it was added: the n-th
 * add_chunk call gives n; from_state gives the index into st->chunks).
 * Errors: DCP_ENOTFOUND, DCP_EINVAL (not finished). */
typedef struct dcpi_lp_chunk_view {
  uint32_t tensor;
  uint32_t ndim;
  const int64_t *offset, *size;
  uint32_t source;
} dcpi_lp_chunk_view;
dcp_status dcpi_local_plan_chunk(const dcpi_local_plan *lp, size_t c, dcpi_lp_chunk_view *out);

/* A finished plan's bytes item `i` (canonical order); source as for chunks.
 * Errors: DCP_ENOTFOUND, DCP_EINVAL (not finished). */
typedef struct dcpi_lp_bytes_view {
  const char *key;
  size_t key_len;
  dcp_scope scope;
  int64_t length;
  uint32_t source;
} dcpi_lp_bytes_view;
dcp_status dcpi_local_plan_bytes(const dcpi_local_plan *lp, size_t i, dcpi_lp_bytes_view *out);

/* Serialize a finished plan for a gather (format in docs/planner.md): a
 * fresh malloc'd buffer in *data (caller frees) of *len bytes. The encoding
 * is canonical: equal plans give identical bytes.
 * Errors: DCP_EINVAL (not finished), DCP_ENOMEM. */
dcp_status dcpi_local_plan_encode(const dcpi_local_plan *lp, uint8_t **data, size_t *len,
                                  dcpi_err *err);

/* Rebuild a finished plan from an encoding. Never trusts a length or count;
 * accepts only the canonical encoding (re-encoding gives the same bytes).
 * Errors: DCP_ECORRUPT (truncated, bad magic/version/checksum, a bad name,
 * dtype, scope or count, trailing bytes, not canonical), DCP_EVERSION,
 * DCP_ENOMEM. Chunk and bytes sources of a decoded plan are their canonical
 * indices. */
dcp_status dcpi_local_plan_decode(const void *data, size_t len, dcpi_local_plan **out,
                                  dcpi_err *err);

/* ------------------------------------------------------------------------ */
/* Plan key                                                                 */
/* ------------------------------------------------------------------------ */

/* 128-bit plan-cache key: XXH3-128 of the plan's canonical encoding, which
 * covers every fqn, dtype, global shape, box, bytes key, scope and length,
 * the rank, the world size and the options. */
typedef struct dcpi_plan_key {
  uint64_t lo, hi;
} dcpi_plan_key;

/* Key of a finished plan. Errors: DCP_EINVAL (not finished), DCP_ENOMEM. */
dcp_status dcpi_plan_hash(const dcpi_local_plan *lp, dcpi_plan_key *out, dcpi_err *err);

bool dcpi_plan_key_equal(dcpi_plan_key a, dcpi_plan_key b);

/* ------------------------------------------------------------------------ */
/* Global save plan                                                         */
/* ------------------------------------------------------------------------ */

typedef struct dcpi_global_plan dcpi_global_plan;

/* Validate, deduplicate and balance the finished local plans of every rank:
 * plans[r] is rank r's, nplans the world size. opts NULL means plans[0]'s.
 * Each distinct non-empty (fqn, box) becomes one write item owned by one of
 * its holders; replicated bytes items likewise; per-rank bytes items go to
 * their rank. The plans are only read and may be freed afterwards.
 *
 * Errors (the message names the fqn or key, the ranks and both values):
 *  DCP_EINVAL     NULL arguments, an unfinished plan, a plan whose world
 *                 size is not nplans or whose rank is not its index, options
 *                 that differ from opts, a negative extent
 *  DCP_EMISMATCH  one fqn with different dtype or shape on two ranks, or a
 *                 tensor on one rank and a bytes item on another
 *  DCP_EBOUNDS    a box with a negative offset or size, or outside the shape
 *  DCP_EOVERFLOW  offset+size, an element count, a byte size or the model
 *                 size overflows int64; more than UINT32_MAX items
 *  DCP_EOVERLAP   two distinct boxes of one fqn share an element
 *  DCP_EINCOMPLETE the distinct boxes of a tensor do not cover it
 *  DCP_ESCOPE     a bytes key REPLICATED on one rank and PER_RANK on
 *                 another, or replicated with different lengths
 *  DCP_ENOMEM
 * On error *out is NULL. */
dcp_status dcpi_global_plan_build(const dcpi_local_plan *const *plans, size_t nplans,
                                  const dcpi_save_opts *opts, dcpi_global_plan **out,
                                  dcpi_err *err);

void dcpi_global_plan_free(dcpi_global_plan *gp);

int32_t dcpi_global_plan_world_size(const dcpi_global_plan *gp);
const dcpi_save_opts *dcpi_global_plan_opts(const dcpi_global_plan *gp);

/* Tensors in canonical (fqn) order; their write items are the items
 * first_item .. first_item+nitems-1 (canonical box order). */
typedef struct dcpi_gp_tensor {
  const char *fqn;
  size_t fqn_len;
  dcp_dtype dtype;
  uint32_t ndim;
  const int64_t *shape;
  int64_t numel, nbytes;
  size_t first_item, nitems;
  bool layout; /* every rank that declares it marked it a layout tensor: its
                  owners follow the rule of planner/layout_plan.h */
} dcpi_gp_tensor;
size_t dcpi_global_plan_tensor_count(const dcpi_global_plan *gp);
/* Errors: DCP_ENOTFOUND. */
dcp_status dcpi_global_plan_tensor(const dcpi_global_plan *gp, size_t i, dcpi_gp_tensor *out);

/* One write item: a distinct non-empty box of a tensor. holders are the
 * ranks that hold it (ascending); holder_chunks[k] is the canonical chunk
 * index of that box in holder k's local plan. owner writes it. Its balance
 * key (tie-break) is its index.
 *
 * A large replicated box is split along its first dimension into pieces
 * of at least DCPI_SPLIT_MIN_BLOCKS blocks, up to one per holder, so its
 * writing is shared by its holders: each piece is then an item of its own
 * (piece set), whose bytes are nbytes at piece_offset within each holder's
 * chunk (rows of a row-major box are contiguous). Not with the
 * LOWEST_RANK policy, which keeps every replicated write on one rank. */
#define DCPI_SPLIT_MIN_BLOCKS 4
typedef struct dcpi_gp_item {
  uint32_t tensor;
  uint32_t ndim;
  const int64_t *offset, *size;
  int64_t nbytes;
  int32_t owner;
  uint32_t nholders;
  const int32_t *holders;
  const uint32_t *holder_chunks;
  bool piece;
  uint64_t piece_offset;
} dcpi_gp_item;
size_t dcpi_global_plan_item_count(const dcpi_global_plan *gp);
/* Errors: DCP_ENOTFOUND. */
dcp_status dcpi_global_plan_item(const dcpi_global_plan *gp, size_t i, dcpi_gp_item *out);

/* Bytes items in (key, rank) order, rank -1 for a replicated item (one per
 * key), the saving rank for a per-rank item (one per key and rank).
 * holder_items[k] is the canonical bytes index in holder k's local plan.
 * Its balance key is item_count() + its index. */
typedef struct dcpi_gp_bytes {
  const char *key;
  size_t key_len;
  dcp_scope scope;
  int32_t rank;
  int64_t length;
  int32_t owner;
  uint32_t nholders;
  const int32_t *holders;
  const uint32_t *holder_items;
} dcpi_gp_bytes;
size_t dcpi_global_plan_bytes_count(const dcpi_global_plan *gp);
/* Errors: DCP_ENOTFOUND. */
dcp_status dcpi_global_plan_bytes(const dcpi_global_plan *gp, size_t i, dcpi_gp_bytes *out);

/* What rank r writes: *items receives the ascending indices of its write
 * items (and *bytes of its bytes items); returns their count. 0 (and NULL)
 * for a rank out of range. */
size_t dcpi_global_plan_rank_items(const dcpi_global_plan *gp, int32_t r,
                                   const uint32_t **items);
size_t dcpi_global_plan_rank_bytes(const dcpi_global_plan *gp, int32_t r,
                                   const uint32_t **bytes);

/* Bytes rank r writes (tensor items plus bytes items); 0 out of range. */
int64_t dcpi_global_plan_rank_load(const dcpi_global_plan *gp, int32_t r);

/* Sum of the write items' bytes (== sum of numel*dtype size over tensors). */
int64_t dcpi_global_plan_tensor_bytes(const dcpi_global_plan *gp);

/* Number of (rank, chunk) holdings behind the write items (the local
 * non-empty chunks of all plans). */
size_t dcpi_global_plan_holding_count(const dcpi_global_plan *gp);

#endif

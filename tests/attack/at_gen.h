/* at_gen.h — the attack tests' model generator: from a seed, a set of
 * tensors of odd geometry (0-d, size-0 and size-1 extents, prime extents,
 * one long dimension with tiny others, every dtype) and bytes items, the
 * way one rank of a world holds or loads them (layouts over permuted
 * meshes, flat ranges cut unevenly, irregular row pieces with replicas, a
 * tensor held by some ranks only, random sub-boxes on load), and the
 * expected byte of every element, a pure function of (seed, tensor,
 * global element, byte), so that every rank fills and checks without
 * communication. Deterministic: the same seed gives the same model on
 * every rank and every world. */
#ifndef DCP_AT_GEN_H
#define DCP_AT_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "dcp.h"

#define AT_MAX_TENSORS 16
#define AT_MAX_PIECES 32
#define AT_NDIM 4

typedef struct at_tensor {
  char fqn[64];
  dcp_dtype dtype;
  uint32_t ndim;
  int64_t shape[AT_NDIM];
} at_tensor;

typedef struct at_model {
  uint64_t seed;
  size_t ntensors;
  at_tensor t[AT_MAX_TENSORS];
  size_t rep_len; /* length of the replicated bytes item "at.rng" */
} at_model;

/* How one rank holds one tensor (see at_rank_plan). */
typedef enum at_kind { AT_ABSENT, AT_BOXES, AT_FLAT, AT_LAYOUT } at_kind;

typedef struct at_hold {
  at_kind kind;
  size_t nbox;                 /* AT_BOXES: the boxes this rank holds */
  dcp_box box[AT_MAX_PIECES];
  int64_t flat_begin, flat_count; /* AT_FLAT: a range of the whole tensor */
  uint32_t mesh_ndim;          /* AT_LAYOUT: mesh, ranks, tensor map */
  int64_t mesh[2];
  int32_t mesh_ranks[64];
  uint32_t map[AT_NDIM];
} at_hold;

/* The model of seed. */
void at_model_gen(at_model *m, uint64_t seed);

/* How `rank` of `world` holds tensor t: saving (every tensor's elements
 * covered by the union of all ranks' holdings, replicas identical boxes)
 * or loading (any sub-boxes, possibly none). salt varies the choice. */
void at_rank_plan(const at_model *m, size_t t, int32_t world, int32_t rank, int saving,
                  uint64_t salt, at_hold *out);

/* The expected byte `byte` of element `elem` (global row-major index) of
 * tensor t. */
uint8_t at_byte(const at_model *m, size_t t, int64_t elem, size_t byte);

/* Fill (check) the row-major buffer of box b of tensor t with (against)
 * the expected bytes. at_check returns the index of the first wrong byte,
 * or -1. */
void at_fill(const at_model *m, size_t t, const dcp_box *b, uint8_t *buf);
int64_t at_check(const at_model *m, size_t t, const dcp_box *b, const uint8_t *buf);

/* The bytes of box b of tensor t (numel * dtype size). */
size_t at_box_bytes(const at_model *m, size_t t, const dcp_box *b);

/* The byte i of the replicated item (per-rank item of `rank` when rank >=
 * 0). */
uint8_t at_item_byte(const at_model *m, int32_t rank, size_t i);
size_t at_per_rank_len(const at_model *m, int32_t rank);

/* Add to st what `rank` holds (at_rank_plan) with buffers it allocates
 * into *bufs (free with at_free_bufs), filled with the expected bytes when
 * saving, 0xEE otherwise; with_items adds the bytes items (the per-rank
 * one when per_rank). Returns DCP_OK or the first failing call's status. */
typedef struct at_bufs {
  size_t n;
  struct at_buf {
    size_t t;  /* tensor, or SIZE_MAX for a bytes item */
    dcp_box box;       /* a box of tensor t, unless flat */
    int flat;          /* the flat range [flat_begin, +numel) of tensor t */
    int64_t flat_begin;
    uint8_t *p;
    size_t len;
    int32_t item_rank; /* bytes items: -1 replicated, else the rank */
  } b[AT_MAX_TENSORS * AT_MAX_PIECES + 2];
} at_bufs;
dcp_status at_build(dcp_ctx *ctx, const at_model *m, int32_t world, int32_t rank, int saving,
                    uint64_t salt, int with_items, int per_rank, dcp_state *st, at_bufs *bufs);

/* Check every loaded buffer; returns 0 or -1 (with a line on stderr that
 * names the tensor, box and byte, unless at_quiet is set). */
extern int at_quiet;

/* Varies only which rank holds which shard (the permutation of a layout's
 * mesh, the order of flat ranges over the ranks), nothing else: 0 by
 * default. */
extern uint64_t at_perm_salt;
int at_verify(const at_model *m, const at_bufs *bufs, int32_t rank);

void at_free_bufs(at_bufs *bufs);

/* at_build into a new state of ctx, with its buffers on the heap: *st and
 * *bufs (both NULL on error). items: 0, AT_ITEMS (the replicated bytes
 * item) or AT_ITEMS | AT_PER_RANK. Free with at_state_free. */
#define AT_ITEMS 1
#define AT_PER_RANK 2
dcp_status at_state_new(dcp_ctx *ctx, const at_model *m, int32_t world, int32_t rank, int saving,
                        uint64_t salt, int items, dcp_state **st, at_bufs **bufs);
void at_state_free(dcp_state *st, at_bufs *bufs);

/* Save what `rank` of `world` holds of m (salt 1, items and the per-rank
 * item) at dir with opts (NULL: defaults); the save's status. */
dcp_status at_save(dcp_ctx *ctx, const at_model *m, int32_t world, int32_t rank, const char *dir,
                   const dcp_save_options *opts);

/* Load all of m as world 1 (salt 1, items, the per-rank item when
 * per_rank) from dir; the load's status, and *wrong 1 when it returned
 * DCP_OK with bytes that at_verify rejects. */
dcp_status at_load_all(dcp_ctx *ctx, const at_model *m, int per_rank, const char *dir,
                       int *wrong);

#endif

/* commit.h — the commit phase of a save: write results travel to rank 0,
 * which turns them and the global plan into .metadata and commits it. */
#ifndef DCP_RUNTIME_COMMIT_H
#define DCP_RUNTIME_COMMIT_H

#include "base/wire.h"
#include "metadata/meta.h"
#include "planner/save_plan.h"
#include "runtime/files.h"
#include "runtime/lease.h"
#include "runtime/replace.h"
#include "runtime/rt.h"

#define DCPI_RESULT_CHUNK 0   /* a write item of the global plan */
#define DCPI_RESULT_BYTES 1   /* a bytes item of the global plan */
#define DCPI_RESULT_REPLICA 2 /* the xxh3 of a REPLICATED bytes item this rank holds */
#define DCPI_RESULT_LAYOUT 3  /* the layout of a tensor (commit_layout.c) */
#define DCPI_RESULT_PIECE 4   /* a piece of a layout tensor (the per-rank path) */

/* Append one write result: piece `kind` with global index gidx went to ref
 * (in this rank's data file). */
void dcpi_commit_put_result(dcpi_wbuf *out, uint8_t kind, uint64_t gidx, const dcpi_ref *ref);

/* Append one write result of the per-rank path: the piece of tensor fqn
 * whose offset has row-major index key (dcpi_layout_piece_key) went to ref. */
void dcpi_commit_put_piece(dcpi_wbuf *out, const char *fqn, size_t fqn_len, uint64_t key,
                           const dcpi_ref *ref);

/* Append this rank's copy of REPLICATED bytes item key (its xxh3): rank 0
 * compares every holder's, so copies that differ fail the save instead of
 * one of them being kept silently. */
void dcpi_commit_put_replica(dcpi_wbuf *out, const char *key, size_t key_len, uint64_t hash);

/* Append the layout records of st: one per tensor whose layout's mesh has
 * this rank at its first position (so each layout is sent once). */
void dcpi_commit_put_layouts(dcpi_wbuf *out, const dcp_state *st);

/* Rank 0: read one layout record of rank `rank` (its kind byte read) and
 * record it in md: the mesh (once per distinct mesh) and the tensor's
 * tensor_map, unless md has no such tensor, the ndim differs or the tensor
 * has its layout already (the first record wins, in rank order). A
 * malformed record is DCP_ECORRUPT. */
dcp_status dcpi_commit_take_layout(dcpi_md *md, dcpi_rbuf *r, int32_t rank, int32_t world,
                                   dcpi_err *err);

/* What the commit of a save needs; the rank-0-only fields are ignored
 * elsewhere. */
typedef struct dcpi_commit_args {
  const dcpi_global_plan *gp;   /* rank 0's global plan, or NULL with ls */
  struct dcpi_layout_set *ls;   /* rank 0 on the per-rank path: the layouts
                                   (runtime/save_layout.h), else NULL */
  const dcp_save_options *opts; /* key/values */
  const dcpi_wbuf *results;     /* this rank's write results */
  const dcpi_wbuf *replicas;    /* its copies of REPLICATED bytes items */
  const dcpi_wbuf *layouts;     /* its layout records, or NULL (no meshes recorded) */
  uint64_t file_length;         /* of this rank's data file (0: none) */
  const dcpi_identity *ident;   /* the save's */
  const dcpi_base *base;        /* rank 0: what the save started over */
  dcpi_lease *lease;            /* rank 0: the directory's lease */
} dcpi_commit_args;

/* Collective: gather every rank's results at rank 0, which builds the
 * metadata (identity, files and their lengths, the plan's tensors, the
 * key/values and every piece), checks that its lease and the base still
 * hold (DCP_ESTALE otherwise), writes it atomically and then removes the
 * files of every other save. Ends with an agreement; returns its outcome. */
dcp_status dcpi_commit(dcpi_rt *rt, const dcpi_commit_args *a);

#endif

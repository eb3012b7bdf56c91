/* plan_persist.h — the save plan of a checkpoint, kept next to it, so that
 * a restarted job's first save needs no plan gather.
 *
 * After a save, rank 0 writes the plan cache entry of that save (every
 * rank's encoded local plan: docs/format.md, ".plan") into the checkpoint
 * directory. A save whose context has no cache entry for its plan key reads
 * that file on every rank (or, when the directory has none, the one in the
 * directory above, where a checkpoint manager keeps its newest step's) and accepts it only when it is intact and holds
 * exactly this rank's encoded plan (same rank, world, options, fqns,
 * shapes, boxes, scopes) in this rank's slot, for this world size; it then
 * rebuilds the global plan from the recorded plans, takes its own
 * assignment and seeds its cache. The save's one agreement (try_cache in
 * save.c) then finds every rank seeded with the same generation — the hash
 * of all recorded plans, recomputed here — or falls back to the full
 * gather. Since every rank checks its own slot, a file that passes on all
 * ranks holds the plans a gather would collect, and the global plan is a
 * pure function of them: the checkpoint is the one a gather would write.
 * Every failure is silent (the file is an optimisation, never an error). */
#ifndef DCP_RUNTIME_PLAN_PERSIST_H
#define DCP_RUNTIME_PLAN_PERSIST_H

#include <stddef.h>
#include <stdint.h>

#include "base/wire.h"
#include "runtime/plan_cache.h"
#include "runtime/rt.h"

#define DCPI_PLAN_FILE_NAME ".plan"
#define DCPI_PLAN_FILE_TMP ".plan.tmp"
/* The largest .plan read (every rank's plan of a 10^4-rank job fits). */
#define DCPI_PLAN_FILE_MAX ((uint64_t)1 << 30)

/* The .plan of rt's directory, whole, into *data (malloc'd) and *len: only
 * a regular file (the plugin's open refuses links and FIFOs) of at most
 * DCPI_PLAN_FILE_MAX bytes that begins with the plan magic, checked before
 * the rest is read, so that a junk, sparse or planted huge file costs a
 * stat and 8 bytes, never its size in memory. Errors: DCP_ECORRUPT (too
 * short, too large, no magic), storage errors (DCP_ENOTFOUND: none). */
dcp_status dcpi_plan_file_read(dcpi_rt *rt, uint8_t **data, size_t *len, dcpi_err *err);

/* The file's bytes for entry e (rank 0's: with every rank's plan) into w:
 * magic "DCPPLAN1", the entry (dcpi_plan_entry_encode), xxh3 of all that. */
void dcpi_plan_file_encode(const dcpi_plan_entry *e, dcpi_wbuf *w);

/* Rank 0 after a committed save: write e's file (best effort, not synced:
 * a lost file only costs a gather). Needs e's plans; a no-op without. */
void dcpi_plan_file_write(dcpi_rt *rt, const dcpi_plan_entry *e);

/* Before the agreement: when ctx's cache has no entry for key, seed it from
 * the directory's file if that holds `plan` (this rank's encoded local
 * plan, plan_len bytes) in this rank's slot (see above). Returns whether it
 * seeded. */
bool dcpi_plan_file_seed(dcpi_rt *rt, dcpi_plan_key key, const uint8_t *plan, size_t plan_len);

/* Pure: the entry to seed from a file's bytes, for `rank` of `world` whose
 * encoded plan is plan: NULL when the file is corrupt, for another world
 * or holds another plan in that slot (the reason in err). The entry has
 * key, the generation of the recorded plans, this rank's assignment and,
 * on rank 0, the plans and the global plan. */
dcpi_plan_entry *dcpi_plan_file_accept(const uint8_t *file, size_t len, int32_t rank,
                                       int32_t world, dcpi_plan_key key, const uint8_t *plan,
                                       size_t plan_len, dcpi_err *err);

#endif

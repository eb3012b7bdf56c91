/* local_save.h — saves without a collective, and the merge that loads them.
 *
 * A rank with no collective writes `<rank>.metadata` next to its data file
 * (local_save.c); dcp_load and dcp_meta_open, finding no `.metadata`,
 * merge the per-rank metadata of the whole world into one (merge.c). */
#ifndef DCP_RUNTIME_LOCAL_SAVE_H
#define DCP_RUNTIME_LOCAL_SAVE_H

#include "runtime/rt.h"

#define DCPI_RANK_METADATA_FMT "%d.metadata"

/* Save st with no cross-rank traffic (see local_save.c); rt is begun and
 * not yet opened. Errors: as dcp_save's local ones. */
dcp_status dcpi_local_save(dcpi_rt *rt, const dcp_state *st, const dcp_save_options *o);

/* Merge the per-rank metadata at rt's checkpoint into one encoded buffer
 * (*data, malloc'd). Every rank 0..W-1 of the world its files name must
 * have committed; the first copy of a repeated chunk or REPLICATED bytes
 * item is kept. Errors: DCP_ENOTFOUND (no per-rank metadata either),
 * DCP_EINCOMPLETE (ranks missing; the message lists some), DCP_ECORRUPT
 * (a file that does not decode, ranks that disagree on a tensor or the
 * world), storage errors, DCP_ENOMEM. */
dcp_status dcpi_merge_rank_metadata(dcpi_rt *rt, uint8_t **data, size_t *len, dcpi_err *err);

#endif

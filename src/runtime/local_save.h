/* local_save.h — saves without a collective, and the merge that loads them.
 *
 * A rank with no collective commits its own part of the checkpoint next to
 * its data file (local_save.c, parts.h); dcp_load and dcp_meta_open,
 * finding no `.metadata`, merge the parts of the newest save that every
 * rank of its world committed into one (merge.c). */
#ifndef DCP_RUNTIME_LOCAL_SAVE_H
#define DCP_RUNTIME_LOCAL_SAVE_H

#include "runtime/replace.h"
#include "runtime/rt.h"

#define DCPI_RANK_METADATA_FMT "%d.metadata" /* a 0.2 part (still read) */

/* Save st with no cross-rank traffic (see local_save.c); rt is begun and
 * not yet opened. expected (or NULL): the base an async save started over
 * (its rank_seq: this rank's newest part then); DCP_ESTALE when this rank
 * committed another part since. Errors: as dcp_save's local ones. */
dcp_status dcpi_local_save(dcpi_rt *rt, const dcp_state *st, const dcp_save_options *o,
                           const dcpi_base *expected);

/* Merge the parts of the newest complete uncoordinated save at rt's
 * checkpoint (ordered by rank 0's parts) into one encoded buffer (*data,
 * malloc'd); without one, the 0.2 per-rank metadata (<rank>.metadata of
 * every rank 0..W-1). Every part must say (in its save section) that it is
 * the part its name says; the copies of a repeated chunk or REPLICATED
 * bytes item must agree (one is kept). Errors: DCP_ENOTFOUND (no parts
 * at all), DCP_EINCOMPLETE (no save complete; the message says which
 * ranks the newest one lacks), DCP_ECORRUPT (a part that does not decode
 * or is not what its name says, parts that disagree on a tensor),
 * DCP_EMISMATCH / DCP_ESCOPE (replicated copies that differ), storage
 * errors, DCP_ENOMEM. */
dcp_status dcpi_merge_rank_metadata(dcpi_rt *rt, uint8_t **data, size_t *len, dcpi_err *err);

#endif

/* commit.h — the commit phase of a save: write results travel to rank 0,
 * which turns them and the global plan into .metadata and commits it. */
#ifndef DCP_RUNTIME_COMMIT_H
#define DCP_RUNTIME_COMMIT_H

#include "core/wire.h"
#include "planner/save_plan.h"
#include "runtime/rt.h"

/* Data file of a rank (the only file names a save makes besides
 * .metadata and its temporary). */
#define DCPI_DATA_FILE_FMT "data-%05d.dcp"

#define DCPI_RESULT_CHUNK 0 /* a write item of the global plan */
#define DCPI_RESULT_BYTES 1 /* a bytes item of the global plan */

/* Append one write result: piece `kind` with global index gidx went to ref
 * (in this rank's data file). */
void dcpi_commit_put_result(dcpi_wbuf *out, uint8_t kind, uint64_t gidx, const dcpi_ref *ref);

/* Collective: gather every rank's results at rank 0, which builds the
 * metadata from gp (rank 0's global plan; NULL elsewhere), opts' key/values
 * and the results, writes it atomically and then removes files that earlier
 * failed saves left. Ends with an agreement; returns its outcome. */
dcp_status dcpi_commit(dcpi_rt *rt, const dcpi_global_plan *gp, const dcp_save_options *opts,
                       const dcpi_wbuf *results);

#endif

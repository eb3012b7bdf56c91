/* replica_check.h — silent data corruption across replicas: every holder of
 * a replicated box (or REPLICATED bytes item) hashes its own copy, rank 0
 * compares the hashes of each box's holders, and every rank learns the
 * verdict. Used by dcp_save with DCP_SAVE_CHECK_REPLICAS (between the plan
 * and the write phase, so a mismatch writes nothing) and by
 * dcp_check_replicas (docs/reliability.md, "Replica corruption"). */
#ifndef DCP_RUNTIME_REPLICA_CHECK_H
#define DCP_RUNTIME_REPLICA_CHECK_H

#include <stdbool.h>

#include "dcp.h"
#include "planner/save_plan.h"
#include "runtime/rt.h"

/* Collective. Every rank hashes (xxh3-64) each chunk and bytes item of its
 * finished local plan lp (made from st) and sends the hashes, 8 bytes per
 * holding plus 8, to rank 0, which compares them over gp's holders (gp: the
 * global plan of every rank's lp; rank 0 only, NULL elsewhere) and
 * broadcasts the verdict. rep (every rank, may be NULL) gets the counts and
 * the message of the first mismatch.
 * Returns the same on every rank: DCP_OK; DCP_EREPLICA when a box's holders
 * disagree and report_only is false (the message, in rt->err, names the fqn
 * or key, the box, the ranks of each copy and the majority where there is
 * one); rank 0's own failure (DCP_ENOMEM, DCP_ECORRUPT: a rank sent a
 * malformed hash list); the collective's errors (DCP_ETIMEDOUT, DCP_EPEER)
 * when a rank does not take part. */
dcp_status dcpi_replica_check(dcpi_rt *rt, const dcp_state *st, const dcpi_local_plan *lp,
                              const dcpi_global_plan *gp, bool report_only,
                              dcp_replica_report *rep);

#endif

/* save.h — the save's internal entry points (the writer process's). */
#ifndef DCP_RUNTIME_SAVE_H
#define DCP_RUNTIME_SAVE_H

#include "base/wire.h"
#include "dcp.h"
#include "planner/save_plan.h"
#include "runtime/replace.h"

/* Rank 0's assignments of gp, one message per rank into out[0..world): for
 * each item it writes its global index, local chunk index * 2 + piece flag
 * (and a piece's byte offset and length), then (global, local) per bytes
 * item. Errors: DCP_ENOMEM. */
dcp_status dcpi_save_encode_assignments(const dcpi_global_plan *gp, int32_t world,
                                        dcpi_wbuf *out, dcpi_err *err);

/* dcp_save, for a save that started earlier than this call: `expected`
 * (rank 0 of a coordinated save, every rank of an uncoordinated one; NULL
 * elsewhere, or for "now") is what the directory held when it started. A
 * directory that no longer holds it fails the save with DCP_ESTALE before
 * anything is written. */
dcp_status dcpi_save_over(dcp_ctx *ctx, dcp_state *st, const char *path,
                          const dcp_save_options *opts, const dcpi_base *expected);

/* A save this rank refused before it began (an async save whose staging
 * failed, code non-zero, msg the reason): nothing is written; the rank
 * takes the save's first agreement with its failure, so every rank's save
 * fails at once with it (code and message, "rank R: " on the others). A
 * context without a collective just fails. Returns code, or the
 * collective's own failure; the message goes to ctx. */
dcp_status dcpi_save_refused(dcp_ctx *ctx, const char *path, dcp_status code, const char *msg);

#endif

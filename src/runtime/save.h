/* save.h — the save's internal entry points (the writer process's). */
#ifndef DCP_RUNTIME_SAVE_H
#define DCP_RUNTIME_SAVE_H

#include "dcp.h"
#include "runtime/replace.h"

/* dcp_save, for a save that started earlier than this call: `expected`
 * (rank 0 of a coordinated save, every rank of an uncoordinated one; NULL
 * elsewhere, or for "now") is what the directory held when it started. A
 * directory that no longer holds it fails the save with DCP_ESTALE before
 * anything is written. */
dcp_status dcpi_save_over(dcp_ctx *ctx, dcp_state *st, const char *path,
                          const dcp_save_options *opts, const dcpi_base *expected);

#endif

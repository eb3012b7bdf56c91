/* progress.h — phase progress reports (dcp_ctx_set_phase_progress): one
 * call that forwards bytes done / total of a phase to the context's
 * callback, when one is set. */
#ifndef DCP_CORE_PROGRESS_H
#define DCP_CORE_PROGRESS_H

#include <stdint.h>

#include "dcp.h"

/* Report done of total bytes of phase on ctx (no-op without a callback). */
void dcpi_progress(dcp_ctx *ctx, dcp_phase phase, uint64_t done, uint64_t total);

#endif

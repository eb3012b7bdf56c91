/* progress.c — phase progress: the setter, the phase names and the report
 * that the save, the load and the conversions call. */
#include "core/progress.h"

#include "core/ctx.h"

void dcp_ctx_set_phase_progress(dcp_ctx *ctx, dcp_phase_progress_fn fn, void *arg) {
  if (!ctx) return;
  ctx->phase_progress = fn;
  ctx->phase_progress_arg = fn ? arg : NULL;
}

const char *dcp_phase_name(dcp_phase phase) {
  switch (phase) {
  case DCP_PHASE_SAVE_WRITE: return "save";
  case DCP_PHASE_LOAD_READ: return "load";
  case DCP_PHASE_IMPORT: return "import";
  case DCP_PHASE_EXPORT: return "export";
  case DCP_PHASE_VERIFY: return "verify";
  }
  return "unknown";
}

void dcpi_progress(dcp_ctx *ctx, dcp_phase phase, uint64_t done, uint64_t total) {
  if (ctx && ctx->phase_progress) ctx->phase_progress(ctx->phase_progress_arg, phase, done, total);
}

/* ctx.h — the context's internals, shared by the public wrappers. */
#ifndef DCP_CORE_CTX_H
#define DCP_CORE_CTX_H

#include "core/err.h"

struct dcp_ctx {
  int32_t rank;
  int32_t world_size;
  dcp_status last_status;
  char last_error[DCPI_ERR_MSG_MAX];
};

/* Copy err's code and reason onto ctx (which may be NULL) when err holds an
 * error, and return err->code. */
dcp_status dcpi_ctx_report(dcp_ctx *ctx, const dcpi_err *err);

#endif

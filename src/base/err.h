/* err.h — internal error reporting: a status plus a formatted reason.
 *
 * Pure layers (model, planner, metadata) report through a caller-owned
 * dcpi_err instead of a global; the public wrappers copy it onto the context
 * (dcpi_ctx_report), which works from any layer: a context begins with its
 * last error, a dcpi_err (core/ctx.c asserts it), so the layers below core
 * report onto a dcp_ctx they know only as dcp.h's opaque type. */
#ifndef DCP_BASE_ERR_H
#define DCP_BASE_ERR_H

#include "dcp.h"

#define DCPI_ERR_MSG_MAX 512

typedef struct dcpi_err {
  dcp_status code;
  char msg[DCPI_ERR_MSG_MAX];
} dcpi_err;

/* Reset err to "no error". err may be NULL. */
void dcpi_err_clear(dcpi_err *err);

/* Record code and a printf-style reason in err (which may be NULL) and return
 * code, so callers can write `return dcpi_fail(err, DCP_EINVAL, "...")`. */
dcp_status dcpi_fail(dcpi_err *err, dcp_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Copy err's code and reason onto ctx (which may be NULL) when err holds an
 * error, and return err->code. */
dcp_status dcpi_ctx_report(dcp_ctx *ctx, const dcpi_err *err);

#endif

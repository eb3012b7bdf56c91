#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void dcpi_err_clear(dcpi_err *err) {
  if (!err) return;
  err->code = DCP_OK;
  err->msg[0] = '\0';
}

dcp_status dcpi_fail(dcpi_err *err, dcp_status code, const char *fmt, ...) {
  if (!err) return code;
  err->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  return code;
}

/* The context's first member is its last error (struct dcp_ctx, core/ctx.h),
 * so a pointer to the context is a pointer to that dcpi_err. */
dcp_status dcpi_ctx_report(dcp_ctx *ctx, const dcpi_err *err) {
  if (ctx && err->code != DCP_OK) {
    dcpi_err *last = (dcpi_err *)(void *)ctx;
    last->code = err->code;
    memcpy(last->msg, err->msg, sizeof last->msg);
    last->msg[sizeof last->msg - 1] = '\0';
  }
  return err->code;
}

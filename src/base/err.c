#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>

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

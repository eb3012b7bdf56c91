/* cc_err.c — see cc_err.h. */
#include "cc_err.h"

#include <stdarg.h>
#include <stdio.h>

int dcpi_cc_fail(dcp_plugin_err *err, int code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}

/* cc_err.h — the one error helper of the collective plugins (file, gloo and
 * their common code). Internal (hidden symbols, a static library). */
#ifndef DCP_COLL_COMMON_CC_ERR_H
#define DCP_COLL_COMMON_CC_ERR_H

#include "dcp_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Formats a reason into err (which may be NULL) and returns code. */
int dcpi_cc_fail(dcp_plugin_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif
#endif

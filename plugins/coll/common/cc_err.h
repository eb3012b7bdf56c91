/* cc_err.h — the collective plugins' error helper is dcp_plugin_fail of
 * include/dcp_plugin.h (the plugin author's kit), used directly; this
 * header only includes it. It and cc_err.c stay while
 * tests/fuzz/CMakeLists.txt names cc_err.c; no code includes it. */
#ifndef DCP_COLL_COMMON_CC_ERR_H
#define DCP_COLL_COMMON_CC_ERR_H

#include "dcp_plugin.h"

#endif

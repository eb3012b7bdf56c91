/* cc_err.c — empty of code: the error helper is dcp_plugin_fail
 * (dcp_plugin.h). See cc_err.h for why the file remains. */
#include "cc_err.h"

/* options.h — the caller's options as the runtime uses them.
 *
 * Each public option struct is merged the same way: the fields an older,
 * shorter struct lacks (struct_size) take their defaults, so does every
 * field left 0, and every value is checked, with a message naming the
 * field. dcp_save and dcp_async_save (before it stages anything) share the
 * save options' rules; dcp_load the load options'. */
#ifndef DCP_RUNTIME_OPTIONS_H
#define DCP_RUNTIME_OPTIONS_H

#include "base/err.h"
#include "dcp.h"

#define DCPI_DEFAULT_ZSTD_LEVEL 3

/* *out: in (NULL for the defaults) with every missing or 0 field at its
 * default. Errors: DCP_EINVAL (struct_size too small, unknown flags or
 * policy, block_size outside [4 KiB, 1 GiB], nkv without arrays). */
dcp_status dcpi_save_options_effective(const dcp_save_options *in, dcp_save_options *out,
                                       dcpi_err *err);

/* The same for load options. Errors: DCP_EINVAL (struct_size too small,
 * unknown flags, read_dedup or reader_policy). */
dcp_status dcpi_load_options_effective(const dcp_load_options *in, dcp_load_options *out,
                                       dcpi_err *err);

#endif

/* plugin.h — the plugin registry and loader (internal).
 *
 * Resolves (kind, name) to a validated plugin table of dcp_plugin.h:
 *
 *   1. tables registered with dcp_plugin_register (tests, embedding, fault
 *      injection) — an explicit act, so they win over everything;
 *   2. the built-in "single" collective (never looked up on disk, so a stray
 *      dcp-coll-single.so cannot replace it by accident);
 *   3. shared objects loaded earlier in this process (the cache);
 *   4. a shared object dcp-<kind>-<name>.so, searched in: extra_path's
 *      directories, $DCP_PLUGIN_PATH's directories, <dir of libdcp.so>/dcp
 *      and <dir of libdcp.so>, then DCP_PLUGIN_INSTALL_DIR (last: the
 *      library actually loaded finds its own plugins before those of the
 *      prefix it was configured for). Every error names the file tried.
 *
 * The first file that exists is the one used: if it fails to load or to
 * validate, that is the error (a broken plugin is never silently skipped in
 * favour of another one later on the path). Loaded objects stay loaded for
 * the life of the process: their tables are handed out as plain pointers.
 * Every function here is thread-safe. */
#ifndef DCP_CORE_PLUGIN_H
#define DCP_CORE_PLUGIN_H

#include <stdint.h>

#include "base/err.h"
#include "dcp_plugin.h"

/* Longest plugin name; names are [a-z0-9_]+. */
#define DCPI_PLUGIN_NAME_MAX 64

/* Find the table of kind (DCP_PLUGIN_STORAGE or DCP_PLUGIN_COLL) named name,
 * in the order above, into *table (a const dcp_storage_plugin * or
 * dcp_coll_plugin *, valid for the life of the process). extra_path is a
 * colon-separated list of directories searched first, or NULL.
 * Errors: DCP_EINVAL (NULL argument, unknown kind, name not [a-z0-9_]{1,64}),
 * DCP_EPLUGIN (not found — the message lists the paths tried —, dlopen
 * failure, missing entry symbol, no table of that kind, wrong ABI version,
 * table too small, wrong name, missing function), DCP_ENOMEM. */
dcp_status dcpi_plugin_find(uint32_t kind, const char *name, const char *extra_path,
                            const void **table, dcpi_err *err);

/* dcp_plugin_register with the reason of a failure in err (the public
 * function has nowhere to put it). Same checks and errors. */
dcp_status dcpi_plugin_register(uint32_t kind, const void *table, dcpi_err *err);

/* Validate table as a plugin of kind: ABI version, struct_size, a valid
 * name (equal to expect_name unless that is NULL), every required function.
 * where names the table's origin in messages (a file path, "registered
 * table"). Errors: DCP_EINVAL (unknown kind), DCP_EPLUGIN. */
dcp_status dcpi_plugin_check(uint32_t kind, const void *table, const char *expect_name,
                             const char *where, dcpi_err *err);

/* Turn a plugin function's result into a dcp_status with a reason in err:
 * rc 0 gives DCP_OK (err untouched); a valid error code is kept, with the
 * message "<plugin_name>: <op>: <perr->msg>" (the code's name when the
 * plugin left no message); anything else (positive, or an unknown negative
 * code) becomes DCP_EPLUGIN saying which value was returned. perr, op and
 * plugin_name may be NULL; perr->msg need not be NUL-terminated. */
dcp_status dcpi_plugin_status(int rc, const dcp_plugin_err *perr, const char *plugin_name,
                              const char *op, dcpi_err *err);

/* Whether name is a valid plugin name: [a-z0-9_]{1,DCPI_PLUGIN_NAME_MAX}. */
int dcpi_plugin_name_ok(const char *name);

/* The counters of an open backend st of table t into *out: through
 * get_stats2 when the table has it (size-carrying), else get_stats
 * (plugin_stats.c). */
void dcpi_storage_stats(const dcp_storage_plugin *t, const dcp_storage *st, dcp_io_stats *out);

/* The built-in "single" collective: a world of one (coll_single.c). */
const dcp_coll_plugin *dcpi_coll_single(void);

#endif

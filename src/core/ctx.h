/* ctx.h — the context's internals, shared by the public wrappers and the
 * runtime: identity, the collective it owns, the storage plugin it opens
 * per checkpoint, the last error and the last operation's statistics. */
#ifndef DCP_CORE_CTX_H
#define DCP_CORE_CTX_H

#include "base/err.h"
#include "dcp_plugin.h"
#include "runtime/plan_cache.h"

#define DCPI_DEFAULT_TIMEOUT_MS 300000
#define DCPI_DEFAULT_LEASE_MS 30000

struct dcp_ctx {
  int32_t rank;
  int32_t world_size;
  int64_t timeout_ms;
  int64_t lease_ms; /* directory lease of a save (dcp_ctx_config.lease_ms) */
  const dcp_coll_plugin *coll; /* "single" by default; NULL for a detached
                                  rank (world_size > 1 without a collective) */
  dcp_comm *comm;
  const dcp_storage_plugin *storage;
  char *storage_options; /* owned copy, or NULL */
  char *plugin_path;     /* owned copy of the config's, or NULL */
  dcp_stats stats;       /* of the last save or load */
  dcpi_plan_cache plans; /* global plans of earlier saves, by plan key */
  dcp_status last_status;
  char last_error[DCPI_ERR_MSG_MAX];
  dcp_progress_fn progress; /* conversions and verification; NULL: none */
  void *progress_arg;
};

/* Copy err's code and reason onto ctx (which may be NULL) when err holds an
 * error, and return err->code. */
dcp_status dcpi_ctx_report(dcp_ctx *ctx, const dcpi_err *err);

#endif
